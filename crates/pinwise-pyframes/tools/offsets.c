/* Prints the offsets that src/layout.rs uses, for the CPython whose headers it is compiled
 * against. Regenerate tools/offsets.txt with tools/offsets.sh. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <frameobject.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#include "internal/pycore_runtime.h"
#define P(name, expr) printf("%-28s %zu\n", name, (size_t)(expr))
int main(void){
  printf("version %s\n", PY_VERSION);
#if PY_VERSION_HEX < 0x030C0000
  P("runtime.autoTSSkey", offsetof(_PyRuntimeState, gilstate.autoTSSkey));
#else
  P("runtime.autoTSSkey", offsetof(_PyRuntimeState, autoTSSkey));
#endif
  P("tss._key", offsetof(Py_tss_t, _key));
#if PY_VERSION_HEX < 0x030B0000
  P("tstate.frame", offsetof(PyThreadState, frame));
  P("frame.f_back", offsetof(PyFrameObject, f_back));
  P("frame.f_code", offsetof(PyFrameObject, f_code));
  P("frame.f_lasti", offsetof(PyFrameObject, f_lasti));
#elif PY_VERSION_HEX < 0x030D0000
  P("tstate.cframe", offsetof(PyThreadState, cframe));
  P("cframe.current_frame", offsetof(_PyCFrame, current_frame));
  P("iframe.f_code", offsetof(_PyInterpreterFrame, f_code));
  P("iframe.previous", offsetof(_PyInterpreterFrame, previous));
  P("iframe.prev_instr", offsetof(_PyInterpreterFrame, prev_instr));
  P("iframe.owner", offsetof(_PyInterpreterFrame, owner));
  P("code.co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#else
  P("tstate.current_frame", offsetof(PyThreadState, current_frame));
  P("iframe.f_executable", offsetof(_PyInterpreterFrame, f_executable));
  P("iframe.previous", offsetof(_PyInterpreterFrame, previous));
  P("iframe.instr_ptr", offsetof(_PyInterpreterFrame, instr_ptr));
  P("iframe.owner", offsetof(_PyInterpreterFrame, owner));
  P("code.co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#endif
#if PY_VERSION_HEX >= 0x030C0000
  P("FRAME_OWNED_BY_CSTACK", FRAME_OWNED_BY_CSTACK);
#endif
  P("code.co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  P("code.co_filename", offsetof(PyCodeObject, co_filename));
  P("code.co_name", offsetof(PyCodeObject, co_name));
  P("code.co_linetable", offsetof(PyCodeObject, co_linetable));
  P("bytes.ob_size", offsetof(PyBytesObject, ob_base.ob_size));
  P("bytes.ob_sval", offsetof(PyBytesObject, ob_sval));
  P("str.length", offsetof(PyASCIIObject, length));
  P("str.state", offsetof(PyASCIIObject, state));
  P("sizeof.PyASCIIObject", sizeof(PyASCIIObject));
  P("sizeof.PyCompactUnicodeObject", sizeof(PyCompactUnicodeObject));
  P("sizeof.Py_tss_t", sizeof(Py_tss_t));
  P("runtime.interpreters.main", offsetof(_PyRuntimeState, interpreters.main));
  P("runtime.interpreters.head", offsetof(_PyRuntimeState, interpreters.head));
  P("tstate.interp", offsetof(PyThreadState, interp));
#if PY_VERSION_HEX >= 0x030D0000
  P("debug.cookie", offsetof(_Py_DebugOffsets, cookie));
  P("debug.version", offsetof(_Py_DebugOffsets, version));
  P("debug.free_threaded", offsetof(_Py_DebugOffsets, free_threaded));
  P("debug.thread_state.interp", offsetof(_Py_DebugOffsets, thread_state.interp));
  P("debug.thread_state.current_frame", offsetof(_Py_DebugOffsets, thread_state.current_frame));
  P("debug.interpreter_frame.previous", offsetof(_Py_DebugOffsets, interpreter_frame.previous));
  P("debug.interpreter_frame.executable", offsetof(_Py_DebugOffsets, interpreter_frame.executable));
  P("debug.interpreter_frame.instr_ptr", offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
  P("debug.interpreter_frame.owner", offsetof(_Py_DebugOffsets, interpreter_frame.owner));
  P("debug.code_object.filename", offsetof(_Py_DebugOffsets, code_object.filename));
  P("debug.code_object.name", offsetof(_Py_DebugOffsets, code_object.name));
  P("debug.code_object.linetable", offsetof(_Py_DebugOffsets, code_object.linetable));
  P("debug.code_object.firstlineno", offsetof(_Py_DebugOffsets, code_object.firstlineno));
  P("debug.code_object.co_code_adaptive", offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
  P("debug.pyobject.ob_type", offsetof(_Py_DebugOffsets, pyobject.ob_type));
#endif
  return 0;
}
