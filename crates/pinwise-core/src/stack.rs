//! Call stacks and the names of call sites.
//!
//! A [`Stack`] is up to [`MAX_FRAMES`] [`Frame`]s, innermost first: native frames (a
//! normalized [`Site`], as call sites are everywhere else) and Python frames (file, line,
//! function). A source that knows both puts the native frames first, down to (not
//! including) the interpreter's own frames, then the Python frames of the same thread,
//! innermost first.
//!
//! Stacks are interned in a [`StackTable`] (shared like the
//! [`ModuleTable`](crate::tag::ModuleTable)): an [`Event`](crate::event::Event) carries a
//! 4-byte [`StackId`], and a stack seen a million times is stored once.
//!
//! A [`SymbolTable`] names native sites (function, and file:line when debug information
//! exists). Sources fill it when a trace or run ends, so a history names its call sites on
//! a machine where the binaries are gone.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::tag::Site;

/// The most frames a stack keeps (the innermost ones).
pub const MAX_FRAMES: usize = 32;

/// A Python frame: where the interpreter was in a function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyFrame {
    /// The code object's file name (`co_filename`), as the interpreter has it.
    pub file: Arc<str>,
    /// The line being executed (1-based; 0 when unknown).
    pub line: u32,
    /// The function's name (`co_qualname` where the interpreter has it, else `co_name`).
    pub function: Arc<str>,
}

impl PyFrame {
    /// A Python frame.
    pub fn new(file: &str, line: u32, function: &str) -> Self {
        PyFrame {
            file: Arc::from(file),
            line,
            function: Arc::from(function),
        }
    }
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A native frame: the return address, normalized (module and file offset).
    Native(Site),
    /// A Python frame.
    Python(PyFrame),
}

impl Frame {
    /// The native site, if this is a native frame.
    pub fn site(&self) -> Option<Site> {
        match self {
            Frame::Native(s) => Some(*s),
            Frame::Python(_) => None,
        }
    }
}

/// A stack: frames, innermost first, at most [`MAX_FRAMES`].
pub type Stack = Arc<[Frame]>;

/// An interned stack: an index into a [`StackTable`]. Never zero, so `Option<StackId>` is
/// 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StackId(NonZeroU32);

impl StackId {
    /// The id of the stack at `index` (0-based) of a table; `None` past `u32::MAX - 1`.
    pub fn from_index(index: usize) -> Option<StackId> {
        let v = u32::try_from(index).ok()?.checked_add(1)?;
        NonZeroU32::new(v).map(StackId)
    }

    /// The 0-based index in its table (what dumps write).
    pub fn index(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

/// Interns stacks into [`StackId`]s. Shared (through `Arc`) by a history and the sources
/// that feed it; cheap to read from many threads.
#[derive(Debug, Default)]
pub struct StackTable {
    inner: RwLock<StackTableInner>,
}

#[derive(Debug, Default)]
struct StackTableInner {
    stacks: Vec<Stack>,
    by_frames: HashMap<Stack, StackId>,
}

impl StackTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new shared table.
    pub fn shared() -> Arc<StackTable> {
        Arc::new(Self::new())
    }

    /// The id of the stack made of `frames` (only the first [`MAX_FRAMES`] are kept),
    /// adding it if new; `None` for an empty stack.
    pub fn intern(&self, frames: &[Frame]) -> Option<StackId> {
        let frames = &frames[..frames.len().min(MAX_FRAMES)];
        if frames.is_empty() {
            return None;
        }
        if let Some(id) = self.inner.read().by_frames.get(frames) {
            return Some(*id);
        }
        let mut inner = self.inner.write();
        if let Some(id) = inner.by_frames.get(frames) {
            return Some(*id);
        }
        let id = StackId::from_index(inner.stacks.len())?;
        let stack: Stack = Arc::from(frames);
        inner.stacks.push(Arc::clone(&stack));
        inner.by_frames.insert(stack, id);
        Some(id)
    }

    /// The stack behind `id`, if the id came from this table.
    pub fn get(&self, id: StackId) -> Option<Stack> {
        self.inner.read().stacks.get(id.index()).cloned()
    }

    /// Number of stacks.
    pub fn len(&self) -> usize {
        self.inner.read().stacks.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All stacks, indexed by [`StackId::index`].
    pub fn snapshot(&self) -> Vec<Stack> {
        self.inner.read().stacks.clone()
    }

    /// The stacks from index `first` on (for appendable dumps).
    pub fn since(&self, first: usize) -> Vec<Stack> {
        let inner = self.inner.read();
        inner
            .stacks
            .get(first..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }
}

/// The name of a native call site.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Symbol {
    /// The function (demangled).
    pub function: String,
    /// The source file, when debug information says.
    pub file: Option<String>,
    /// The line, when debug information says.
    pub line: Option<u32>,
}

impl Symbol {
    /// A symbol known by its function name only.
    pub fn function(name: impl Into<String>) -> Self {
        Symbol {
            function: name.into(),
            file: None,
            line: None,
        }
    }
}

/// Names of native call sites, by site (sites refer to the history's module table).
pub type SymbolTable = BTreeMap<Site, Symbol>;

/// File names (or their beginnings) of libraries whose frames are not the user's code: the
/// CUDA libraries, the frameworks (PyTorch, JAX/XLA, CuPy, TensorFlow), the C and C++
/// runtimes, the dynamic loader, the Python interpreter and ctypes, and pinwise itself.
const FRAMEWORK_MODULES: &[&str] = &[
    "libcuda.",
    "libcudart",
    "libcublas",
    "libcudnn",
    "libcufft",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libnccl",
    "libnvrtc",
    "libnvjitlink",
    "libnvToolsExt",
    "libtorch",
    "libc10",
    "libshm",
    "_C.cpython",
    "libjax",
    "xla_extension",
    "jaxlib",
    "libtensorflow",
    "_pywrap_tensorflow",
    "cupy",
    "libcupy",
    "libstdc++",
    "libc++",
    "libc.so",
    "libc-",
    "libm.so",
    "libpthread",
    "libdl.",
    "librt.",
    "ld-linux",
    "libgcc_s",
    "libpython",
    "python3",
    "python",
    "libffi",
    "_ctypes",
    "libpinwise",
    "libgomp",
    "libiomp",
    "libomp",
    "libmkl",
    "libopenblas",
    "libnuma",
    "libjemalloc",
    "libmimalloc",
    "libtcmalloc",
];

/// Beginnings of native function names that belong to a language runtime, not to the
/// user's code: Rust's standard library (compiled into the executable), the C++ standard
/// library's templates, the allocator shims.
const RUNTIME_FUNCTIONS: &[&str] = &[
    "alloc::",
    "core::",
    "std::",
    "<alloc::",
    "<core::",
    "<std::",
    "__rust",
    "__rustc::",
    "<tikv_jemallocator::",
    "tikv_jemallocator::",
    "<mimalloc::",
    "mimalloc::",
    "_rjem_",
    "mi_malloc",
    "mi_zalloc",
    "mi_calloc",
    "mi_realloc",
    "__rdl",
    "__rg_",
    "_ZN5alloc",
    "_ZN4core",
    "_ZN3std",
    "std::__",
    "__gnu_cxx::",
    "operator new",
    "malloc",
    "calloc",
    "realloc",
    "posix_memalign",
    "aligned_alloc",
    "__libc_",
];

/// Parts of Python file paths that belong to installed packages or the interpreter's own
/// library, not to the user's scripts.
const LIBRARY_PY_PATHS: &[&str] = &[
    "/site-packages/",
    "/dist-packages/",
    "/lib/python3",
    "<frozen ",
    "/lib64/python3",
];

/// Whether a module file (by its path) is a framework, runtime or interpreter library.
pub fn is_framework_module(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    FRAMEWORK_MODULES.iter().any(|m| name.starts_with(m))
}

/// Whether a native function belongs to a language runtime (see [`user_frame`]).
pub fn is_runtime_function(function: &str) -> bool {
    if RUNTIME_FUNCTIONS.iter().any(|f| function.starts_with(f)) {
        return true;
    }
    // A standard-library trait's method on any type: `<u8 as alloc::vec::...>::from_elem`.
    function.starts_with('<')
        && function.split_once(" as ").is_some_and(|(_, t)| {
            ["alloc::", "core::", "std::"]
                .iter()
                .any(|r| t.starts_with(r))
        })
}

/// Whether a Python file belongs to an installed package or the interpreter's library.
pub fn is_library_python_file(file: &str) -> bool {
    LIBRARY_PY_PATHS.iter().any(|p| file.contains(p))
}

/// The "user frame" of a stack (its index): the frame a reader can change.
///
/// - A Python frame wins: the innermost one outside installed packages and the
///   interpreter's library, else the innermost Python frame.
/// - Else the innermost native frame outside the CUDA, framework, C/C++ runtime and
///   interpreter libraries (`module_path` gives a module's path) whose function, when
///   named (`function`), is not a language runtime's (Rust's `alloc::`/`std::`, the
///   allocator shims).
/// - Else the innermost frame.
///
/// `None` for an empty stack.
pub fn user_frame(
    frames: &[Frame],
    module_path: impl Fn(crate::tag::ModuleId) -> Option<String>,
    function: impl Fn(Site) -> Option<String>,
) -> Option<usize> {
    let python = |f: &Frame| matches!(f, Frame::Python(_));
    if let Some(i) = frames.iter().position(|f| match f {
        Frame::Python(p) => !is_library_python_file(&p.file),
        Frame::Native(_) => false,
    }) {
        return Some(i);
    }
    if let Some(i) = frames.iter().position(python) {
        return Some(i);
    }
    let user_native = frames.iter().position(|f| match f {
        Frame::Native(site) => {
            let framework = module_path(site.module).is_some_and(|p| is_framework_module(&p));
            let runtime = function(*site).is_some_and(|f| is_runtime_function(&f));
            !framework && !runtime && site.module != crate::tag::ModuleId::UNKNOWN
        }
        Frame::Python(_) => false,
    });
    user_native.or((!frames.is_empty()).then_some(0))
}

/// One stack from the native frames and the Python frames of the same moment, innermost
/// first: the native frames down to (not including) the first one in the interpreter
/// (`in_interpreter` says of a module; `None`: unknown), then the Python frames; at most
/// [`MAX_FRAMES`], of which up to 16 are kept for Python frames. The preload (in-process)
/// and the tracer (from BPF) both build their stacks so.
pub fn merge_python_frames(
    native: Vec<Site>,
    python: Vec<PyFrame>,
    in_interpreter: impl Fn(crate::tag::ModuleId) -> Option<bool>,
) -> Vec<Frame> {
    if python.is_empty() {
        return native.into_iter().map(Frame::Native).collect();
    }
    let mut native: Vec<Site> = native
        .into_iter()
        .take_while(|s| in_interpreter(s.module) != Some(true))
        .collect();
    native.truncate(MAX_FRAMES - python.len().min(MAX_FRAMES / 2));
    let room = MAX_FRAMES - native.len();
    native
        .into_iter()
        .map(Frame::Native)
        .chain(python.into_iter().take(room).map(Frame::Python))
        .collect()
}

impl std::fmt::Display for PyFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::ModuleId;

    fn at(module: u32, offset: u64) -> Frame {
        Frame::Native(Site {
            module: ModuleId(module),
            offset,
        })
    }

    /// Modules 1: libcudart, 2: libtorch_cpu, 3: the user's executable, 4: libc.
    fn path(m: ModuleId) -> Option<String> {
        Some(
            match m.0 {
                1 => "/usr/local/cuda/lib64/libcudart.so.12",
                2 => "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
                3 => "/home/me/train",
                4 => "/lib/x86_64-linux-gnu/libc.so.6",
                _ => return None,
            }
            .to_owned(),
        )
    }

    fn function(s: Site) -> Option<String> {
        match (s.module.0, s.offset) {
            (3, 10) => Some("alloc::raw_vec::RawVec<T,A>::allocate_in".into()),
            (3, 20) => Some("train::load_batch".into()),
            _ => None,
        }
    }

    #[test]
    fn python_frames_replace_the_interpreters_native_frames_and_keep_room() {
        // Module 2 is the interpreter.
        let interp = |m: ModuleId| Some(m.0 == 2);
        let site = |m: u32, o: u64| Site {
            module: ModuleId(m),
            offset: o,
        };
        let py = |n: usize| -> Vec<PyFrame> {
            (0..n)
                .map(|i| PyFrame::new("t.py", i as u32 + 1, "f"))
                .collect()
        };
        let native = vec![site(1, 1), site(1, 2), site(2, 3), site(2, 4), site(1, 5)];
        let m = merge_python_frames(native.clone(), py(2), interp);
        assert_eq!(
            m,
            vec![
                at(1, 1),
                at(1, 2),
                Frame::Python(PyFrame::new("t.py", 1, "f")),
                Frame::Python(PyFrame::new("t.py", 2, "f")),
            ]
        );
        // No Python frames: the native stack as it is.
        assert_eq!(merge_python_frames(native, Vec::new(), interp).len(), 5);
        // A deep native stack leaves room for up to 16 Python frames; a short one for all.
        let deep: Vec<Site> = (0..40).map(|i| site(1, i)).collect();
        let m = merge_python_frames(deep, py(20), interp);
        assert_eq!(m.len(), MAX_FRAMES);
        assert_eq!(
            m.iter().filter(|f| matches!(f, Frame::Python(_))).count(),
            16
        );
        assert_eq!(m[0], at(1, 0));
        let m = merge_python_frames(vec![site(1, 0)], py(40), interp);
        assert_eq!(m.len(), MAX_FRAMES);
        assert_eq!(m[1], Frame::Python(PyFrame::new("t.py", 1, "f")));
        // An interpreter frame first: Python frames only.
        let m = merge_python_frames(vec![site(2, 9), site(1, 1)], py(1), interp);
        assert_eq!(m, vec![Frame::Python(PyFrame::new("t.py", 1, "f"))]);
    }

    #[test]
    fn the_user_frame_skips_cuda_frameworks_runtimes_and_prefers_python() {
        // Native only: past libcudart, libtorch and Rust's allocator code to the user's.
        let native = [at(1, 1), at(2, 2), at(3, 10), at(3, 20), at(4, 5)];
        assert_eq!(user_frame(&native, path, function), Some(3));
        // A Python frame wins; one in site-packages gives way to the script's.
        let lib = Frame::Python(PyFrame::new(
            "/venv/lib/python3.11/site-packages/torch/nn/module.py",
            10,
            "forward",
        ));
        let script = Frame::Python(PyFrame::new("/home/me/train.py", 88, "load_batch"));
        let mixed = [at(2, 2), at(3, 20), lib.clone(), script.clone()];
        assert_eq!(user_frame(&mixed, path, function), Some(3));
        assert_eq!(
            user_frame(&[at(3, 20), lib.clone()], path, function),
            Some(1)
        );
        // Nothing but framework frames: the innermost.
        assert_eq!(user_frame(&[at(1, 1), at(4, 5)], path, function), Some(0));
        // A frame of an unknown module is not the user's.
        assert_eq!(
            user_frame(&[Frame::Native(Site::UNKNOWN), at(3, 20)], path, function),
            Some(1)
        );
        assert_eq!(user_frame(&[], path, function), None);
        assert!(is_framework_module(
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
        ));
        assert!(is_framework_module("/opt/jax/jaxlib/xla_extension.so"));
        assert!(!is_framework_module("/home/me/libmyapp.so"));
        assert!(is_framework_module("/usr/lib/libjemalloc.so.2"));
        // Rust's global allocators and the standard library's trait methods are runtime.
        for f in [
            "<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::alloc_zeroed",
            "<mimalloc::MiMalloc as core::alloc::global::GlobalAlloc>::alloc",
            "__rustc::__rust_alloc_zeroed",
            "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
            "_rjem_mallocx",
            "mi_malloc_aligned",
        ] {
            assert!(is_runtime_function(f), "{f}");
        }
        for f in [
            "myapp::make_input",
            "<myapp::Buf as myapp::Fill>::fill",
            "minimum",
        ] {
            assert!(!is_runtime_function(f), "{f}");
        }
        assert_eq!(
            PyFrame::new("/home/me/train.py", 88, "load_batch").to_string(),
            "/home/me/train.py:88 in load_batch"
        );
    }

    fn native(offset: u64) -> Frame {
        Frame::Native(Site {
            module: ModuleId(1),
            offset,
        })
    }

    #[test]
    fn equal_stacks_share_one_id_and_ids_are_dense() {
        let t = StackTable::new();
        let a = t.intern(&[native(1), native(2)]).unwrap();
        let b = t
            .intern(&[native(1), Frame::Python(PyFrame::new("t.py", 3, "f"))])
            .unwrap();
        assert_eq!(t.intern(&[native(1), native(2)]), Some(a));
        assert_ne!(a, b);
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(
            t.get(b).unwrap()[1],
            Frame::Python(PyFrame::new("t.py", 3, "f"))
        );
        assert_eq!(t.intern(&[]), None);
        assert_eq!(std::mem::size_of::<Option<StackId>>(), 4);
    }

    #[test]
    fn stacks_keep_their_innermost_frames_only() {
        let t = StackTable::new();
        let frames: Vec<Frame> = (0..40).map(native).collect();
        let id = t.intern(&frames).unwrap();
        let s = t.get(id).unwrap();
        assert_eq!(s.len(), MAX_FRAMES);
        assert_eq!(s[0], native(0));
        assert_eq!(t.intern(&frames[..MAX_FRAMES]), Some(id));
    }
}
