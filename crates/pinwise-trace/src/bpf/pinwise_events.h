/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * pinwise_events.h: the ONE definition of what pinwise's BPF programs send to user space.
 *
 * Every record in the ring buffer starts with a `struct pw_header`; its `kind` says which
 * of the structs below the record is. The Rust side does not copy these definitions: its
 * types are generated from the compiled object's BTF by libbpf-cargo (see build.rs and
 * src/raw.rs), so a change here changes both sides at once.
 *
 * Only fixed-width types, and explicit padding, so that the layout is the same in C and Rust.
 */
#ifndef PINWISE_EVENTS_H
#define PINWISE_EVENTS_H

/* Bytes of user stack copied with events that need a call site found in user space. */
#define PW_STACK_BYTES 1024

/* Bytes of user stack copied for unwinding with .eh_frame in user space (`--dwarf-stacks`). */
#define PW_UNWIND_STACK_BYTES 16384

/* User frames (return addresses) captured with bpf_get_stack(BPF_F_USER_STACK): the kernel
 * walks frame pointers, so the walk stops (or goes astray) at code built without them. */
#define PW_MAX_FRAMES 32

/* Python frames captured with an event (the interpreter's frame chain of the thread; see
 * pinwise.bpf.c, "Python frames"). */
#define PW_MAX_PY_FRAMES 32

/* What a ring-buffer record is (pw_header.kind). */
enum pw_kind {
	PW_EV_NONE = 0,
	/* A CUDA host allocation returned (struct pw_range_event). */
	PW_EV_HOST_ALLOC = 1,
	/* cuMemHostRegister returned (struct pw_range_event). */
	PW_EV_HOST_REGISTER = 2,
	/* A device allocation returned (struct pw_range_event; no stack). */
	PW_EV_DEV_ALLOC = 3,
	/* An anonymous mapping above the size threshold appeared (struct pw_range_event). */
	PW_EV_MMAP = 4,
	/* cuMemFreeHost (struct pw_release_event). */
	PW_EV_HOST_FREE = 5,
	/* cuMemHostUnregister (struct pw_release_event). */
	PW_EV_HOST_UNREGISTER = 6,
	/* cuMemFree (struct pw_release_event). */
	PW_EV_DEV_FREE = 7,
	/* munmap of a range above the size threshold (struct pw_release_event). */
	PW_EV_MUNMAP = 8,
	/* Any copy entry point (struct pw_copy_event). */
	PW_EV_COPY = 9,
	/* nvidia's os_lock_user_pages returned OK (struct pw_pin_event). */
	PW_EV_PIN_PAGES = 10,
	/* nvidia's os_unlock_user_pages was called (struct pw_pin_event). */
	PW_EV_UNPIN_PAGES = 11,
	/* A user page fault (struct pw_fault_event), only when asked for. */
	PW_EV_PAGE_FAULT = 12,
	/* A traced process forked a child, now traced too (struct pw_proc_event). */
	PW_EV_PROC_FORK = 13,
	/* The last thread of a traced process exited (struct pw_proc_event). */
	PW_EV_PROC_EXIT = 14,
	/* A traced process called exec (struct pw_proc_event). */
	PW_EV_PROC_EXEC = 15,
	/* A traced process mapped a file executable: a library was loaded (struct pw_proc_event). */
	PW_EV_EXEC_MAP = 16,
	/* A copy sampled for its stack (struct pw_copy_stack_event). */
	PW_EV_COPY_STACK = 17,
	/* A malloc-family call returned a block at or above the threshold (struct
	 * pw_range_event), only with the malloc probes (`--malloc`). */
	PW_EV_MALLOC = 18,
	/* free (or realloc) of a block PW_EV_MALLOC reported (struct pw_release_event). */
	PW_EV_MALLOC_FREE = 19,
	/* Node-wide mode: a process joined the traced set at its first call into a probed CUDA
	 * function (struct pw_proc_event: its cgroup id and command name). */
	PW_EV_PROC_ENROLL = 20,
	/* The registers and user stack of the thread at the allocation event that follows it
	 * (struct pw_unwind_event), only with `--dwarf-stacks`: user space unwinds it with the
	 * modules' .eh_frame, for code built without frame pointers. */
	PW_EV_UNWIND = 21,
	/* A host-to-device copy with the sampled lines of its source (struct
	 * pw_copy_fp_event), instead of PW_EV_COPY, with `--fingerprint`. */
	PW_EV_COPY_FP = 22,
	/* The fingerprint of an asynchronous download, made when a call that guarantees the
	 * download completed returned (struct pw_late_fp_event), with `--fingerprint`. */
	PW_EV_LATE_FP = 23,
};

/*
 * Which function or hook produced a record (pw_header.func). For uprobes it is the attach
 * cookie, so one BPF program serves several entry points (`_v2`, `_ptds`, `_ptsz`, ...).
 * Also the index into the per-function hit counters (map `func_hits`).
 */
enum pw_func {
	PW_FN_NONE = 0,
	/* Driver API, copies. */
	PW_FN_cuMemcpyHtoD_v2,
	PW_FN_cuMemcpyHtoD_v2_ptds,
	PW_FN_cuMemcpyHtoDAsync_v2,
	PW_FN_cuMemcpyHtoDAsync_v2_ptsz,
	PW_FN_cuMemcpyDtoH_v2,
	PW_FN_cuMemcpyDtoH_v2_ptds,
	PW_FN_cuMemcpyDtoHAsync_v2,
	PW_FN_cuMemcpyDtoHAsync_v2_ptsz,
	PW_FN_cuMemcpy,
	PW_FN_cuMemcpy_ptds,
	PW_FN_cuMemcpyAsync,
	PW_FN_cuMemcpyAsync_ptsz,
	PW_FN_cuMemcpy2D_v2,
	PW_FN_cuMemcpy2D_v2_ptds,
	PW_FN_cuMemcpy2DUnaligned_v2,
	PW_FN_cuMemcpy2DUnaligned_v2_ptds,
	PW_FN_cuMemcpy2DAsync_v2,
	PW_FN_cuMemcpy2DAsync_v2_ptsz,
	PW_FN_cuMemcpy3D_v2,
	PW_FN_cuMemcpy3D_v2_ptds,
	PW_FN_cuMemcpy3DAsync_v2,
	PW_FN_cuMemcpy3DAsync_v2_ptsz,
	PW_FN_cuMemcpyHtoA_v2,
	PW_FN_cuMemcpyHtoA_v2_ptds,
	PW_FN_cuMemcpyHtoAAsync_v2,
	PW_FN_cuMemcpyHtoAAsync_v2_ptsz,
	PW_FN_cuMemcpyAtoH_v2,
	PW_FN_cuMemcpyAtoH_v2_ptds,
	PW_FN_cuMemcpyAtoHAsync_v2,
	PW_FN_cuMemcpyAtoHAsync_v2_ptsz,
	/* Driver API, host memory. */
	PW_FN_cuMemHostAlloc,
	PW_FN_cuMemAllocHost_v2,
	PW_FN_cuMemFreeHost,
	PW_FN_cuMemHostRegister_v2,
	PW_FN_cuMemHostUnregister,
	/* Driver API, device memory (only to know which addresses are device addresses). */
	PW_FN_cuMemAlloc_v2,
	PW_FN_cuMemAllocPitch_v2,
	PW_FN_cuMemAllocAsync,
	PW_FN_cuMemAllocAsync_ptsz,
	PW_FN_cuMemFree_v2,
	PW_FN_cuMemFreeAsync,
	PW_FN_cuMemFreeAsync_ptsz,
	/* Runtime API: only their caller's address is recorded (the application's call site). */
	PW_FN_cudaMallocHost,
	PW_FN_cudaHostAlloc,
	PW_FN_cudaHostRegister,
	/* Kernel side. */
	PW_FN_sys_mmap,
	PW_FN_sys_munmap,
	PW_FN_page_fault_user,
	PW_FN_os_lock_user_pages,
	PW_FN_os_unlock_user_pages,
	PW_FN_sched_process_fork,
	PW_FN_sched_process_exit,
	PW_FN_sched_process_exec,
	/* libc's malloc family (only with `--malloc`). */
	PW_FN_malloc,
	PW_FN_calloc,
	PW_FN_realloc,
	PW_FN_free,
	PW_FN_posix_memalign,
	PW_FN_aligned_alloc,
	PW_FN_memalign,
	PW_FN_valloc,
	/* Allocators linked into a program or library (only with `--malloc`): jemalloc as
	 * tikv-jemallocator builds it (`_rjem_` prefix), jemalloc's own API unprefixed, mimalloc. */
	PW_FN_rjem_malloc,
	PW_FN_rjem_calloc,
	PW_FN_rjem_realloc,
	PW_FN_rjem_free,
	PW_FN_rjem_mallocx,
	PW_FN_rjem_rallocx,
	PW_FN_rjem_dallocx,
	PW_FN_rjem_sdallocx,
	PW_FN_rjem_posix_memalign,
	PW_FN_rjem_aligned_alloc,
	PW_FN_mallocx,
	PW_FN_rallocx,
	PW_FN_dallocx,
	PW_FN_sdallocx,
	PW_FN_mi_malloc,
	PW_FN_mi_zalloc,
	PW_FN_mi_calloc,
	PW_FN_mi_realloc,
	PW_FN_mi_free,
	PW_FN_mi_malloc_aligned,
	PW_FN_mi_zalloc_aligned,
	PW_FN_mi_realloc_aligned,
	PW_FN_mi_posix_memalign,
	PW_FN_mi_aligned_alloc,
	/* Stream, event and context calls, probed with `--fingerprint` only: they tell when
	 * asynchronous downloads completed (see "asynchronous downloads" in pinwise.bpf.c). */
	PW_FN_cuStreamSynchronize,
	PW_FN_cuStreamSynchronize_ptsz,
	PW_FN_cuStreamQuery,
	PW_FN_cuStreamQuery_ptsz,
	PW_FN_cuCtxSynchronize,
	PW_FN_cuEventRecord,
	PW_FN_cuEventRecord_ptsz,
	PW_FN_cuEventRecordWithFlags,
	PW_FN_cuEventRecordWithFlags_ptsz,
	PW_FN_cuEventSynchronize,
	PW_FN_cuEventQuery,
	PW_FN_cuEventDestroy_v2,
	PW_FN_cuStreamDestroy_v2,
	PW_FN_cuCtxSetCurrent,
	PW_FN_cuCtxPushCurrent_v2,
	PW_FN_cuCtxPopCurrent_v2,
	PW_FN_cuCtxDestroy_v2,
	PW_FN_cuDevicePrimaryCtxRelease,
	PW_FN_cuDevicePrimaryCtxRelease_v2,
	PW_FN_cuDevicePrimaryCtxReset,
	PW_FN_cuDevicePrimaryCtxReset_v2,
	PW_FN_cuStreamBeginCapture,
	PW_FN_cuStreamBeginCapture_ptsz,
	PW_FN_cuStreamBeginCapture_v2,
	PW_FN_cuStreamBeginCapture_v2_ptsz,
	PW_FN_cuStreamBeginCaptureToGraph,
	PW_FN_cuStreamBeginCaptureToGraph_ptsz,
	PW_FN_cuStreamEndCapture,
	PW_FN_cuStreamEndCapture_ptsz,
	/* CUDA 13's cuCtxSynchronize_v2(CUcontext) (cudart 13's cudaDeviceSynchronize), after
	 * the capture calls so that their ids (ranges in pinwise.bpf.c) stay as they are. */
	PW_FN_cuCtxSynchronize_v2,
	PW_FN_COUNT,
};

/* Indexes of the per-CPU counters in map `counters`. */
enum pw_counter {
	/* bpf_ringbuf_reserve failed: the ring buffer was full and the event was dropped. */
	PW_CNT_RINGBUF_DROPS = 0,
	/* A call in flight could not be remembered until its return (map `pending` full, or
	 * `mmap_calls` for an mmap): its event is lost. */
	PW_CNT_PENDING_FULL = 1,
	/* A return was seen without its entry (attached mid-call, or `pending` was full). */
	PW_CNT_RETURN_WITHOUT_ENTRY = 2,
	/* Reading the traced process's memory failed (arguments, stack). */
	PW_CNT_USER_READ_FAILED = 3,
	/* A child could not be added to the traced set (map `traced_tgids` full). */
	PW_CNT_TGID_MAP_FULL = 4,
	PW_CNT_COUNT = 5,
};

/* CUDA's CUmemorytype, as copies report it (0: the copy form does not say). */
enum pw_memtype {
	PW_MEM_UNSPECIFIED = 0,
	PW_MEM_HOST = 1,
	PW_MEM_DEVICE = 2,
	PW_MEM_ARRAY = 3,
	PW_MEM_UNIFIED = 4,
};

/* Where pw_range_event.call_site came from. */
enum pw_site_source {
	/* No call site; use the stack window. */
	PW_SITE_NONE = 0,
	/* The caller of a runtime function (cudaMallocHost, ...): the application's call. */
	PW_SITE_RUNTIME = 1,
	/* The caller of the driver function: the application if it calls the driver API,
	 * else the runtime library; user space then looks further down the stack window. */
	PW_SITE_DRIVER = 2,
};

/* One Python frame, as read from the interpreter: user space turns it into file, line
 * and function by reading the code object (pinwise-pyframes). */
struct pw_py_frame {
	/* Address of the frame's code object (PyCodeObject). */
	__u64 code;
	/* The frame's instruction field as read: 3.10's f_lasti (low 32 bits), 3.11+'s
	 * instruction pointer. */
	__u64 instr;
};

/* What came of reading the Python frames (pw_py_stack.status). */
enum pw_py_status {
	/* Not a Python process (or Python frames are off): nothing was tried. */
	PW_PY_NONE = 0,
	/* The frames were read (nframes may be 0: no Python code running). */
	PW_PY_OK = 1,
	/* The thread has no Python thread state (a thread Python does not know). */
	PW_PY_NO_THREAD = 2,
	/* The interpreter's memory could not be read, or the thread state does not belong to
	 * the main interpreter (a wrong layout, a subinterpreter). */
	PW_PY_FAILED = 3,
	/* Read, but the chain went on past what was kept (PW_MAX_PY_FRAMES, or an unreadable
	 * frame). */
	PW_PY_TRUNCATED = 4,
};

/* The Python frames of the thread at an event, innermost first. */
struct pw_py_stack {
	__u32 nframes;
	/* enum pw_py_status */
	__u32 status;
	struct pw_py_frame frames[PW_MAX_PY_FRAMES];
};

/* Where a traced Python process keeps what the frame walk reads (map `py_procs`, by tgid,
 * written by user space from pinwise-pyframes' per-version layout). Offsets in bytes. */
struct pw_py_proc {
	/* Address of _PyRuntime. */
	__u64 runtime;
	/* _PyRuntime -> the Py_tss_t {int initialised; pthread_key_t key} of thread states. */
	__u32 runtime_tss;
	/* _PyRuntime -> interpreters.main. */
	__u32 runtime_main_interp;
	/* glibc: thread pointer (fs base) -> specific_1stblock (keys below 32), and ->
	 * specific[] (the second level; 0: not known, keys from 32 give nothing). */
	__u32 tls_first_block;
	__u32 tls_second_level;
	/* PyThreadState -> interp, and -> frame / cframe / current_frame. */
	__u32 tstate_interp;
	__u32 tstate_frame;
	/* _PyCFrame -> current_frame (3.11, 3.12); -1: tstate_frame is the frame. */
	__s32 cframe_current;
	/* Frame -> code object, calling frame, instruction field. */
	__u32 frame_code;
	__u32 frame_back;
	__u32 frame_instr;
	/* Frame -> owner byte (3.12+; -1: none), and the owner of shim frames to skip. */
	__s32 frame_owner;
	__u32 owner_cstack;
	/* Bytes of a frame read (at most 128). */
	__u32 frame_size;
	/* 1: frames lie one after another on the thread's data stack, callers below (3.11+):
	 * read a page at a time. 0: each frame is an object of its own (3.10). */
	__u32 contiguous;
};

struct pw_header {
	/* CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns). */
	__u64 ts_ns;
	/* Process (tgid) and thread. */
	__u32 pid;
	__u32 tid;
	/* enum pw_kind */
	__u16 kind;
	/* enum pw_func */
	__u16 func;
	__u32 _pad0;
};

/* A copy through any of the copy entry points (recorded at entry: one probe hit). */
struct pw_copy_event {
	struct pw_header h;
	/* Start of the destination and source regions (host or device addresses; for arrays 0). */
	__u64 dst;
	__u64 src;
	/* Bytes moved (width x height x depth for 2D/3D copies). */
	__u64 bytes;
	/* CUstream handle (0 for the synchronous forms). */
	__u64 stream;
	/* Return address of the driver call. */
	__u64 call_site;
	/* enum pw_memtype of each side, as the entry point or its descriptor says. */
	__u8 dst_type;
	__u8 src_type;
	/* 1 for the Async forms. */
	__u8 is_async;
	__u8 _pad0[5];
};

/* A range came into being: host allocation, registration, device allocation, or mmap. */
struct pw_range_event {
	struct pw_header h;
	/* First byte and length. */
	__u64 addr;
	__u64 len;
	/* The call site BPF could determine (see site_source); 0 when none. */
	__u64 call_site;
	/* User stack pointer at which `stack` starts. */
	__u64 stack_sp;
	/* call_site placed by the kernel at event time (bpf_find_vma): the file's device
	 * (kernel dev_t) and inode, and the offset of call_site in it; 0 when not placed (no
	 * file there, mmap lock busy). Lets user space place the site after the process is
	 * gone. */
	__u64 site_dev;
	__u64 site_ino;
	__u64 site_offset;
	/* CUDA flags (CU_MEMHOSTALLOC_*, CU_MEMHOSTREGISTER_*); for mmap, mmap's flags. */
	__u32 flags;
	/* CUresult the call returned (0 = CUDA_SUCCESS); 0 for mmap. */
	__s32 result;
	/* enum pw_site_source */
	__u8 site_source;
	__u8 _pad0[3];
	/* Bytes of `stack` that were read (0: none). */
	__u32 stack_len;
	/* User frames in `frames` (0: none captured); frames[0] is the innermost. */
	__u32 nframes;
	__u32 _pad1;
	/* The user call chain at the event (bpf_get_stack, frame pointers). */
	__u64 frames[PW_MAX_FRAMES];
	/* The Python frames of the thread (allocations of Python processes). */
	struct pw_py_stack py;
	/* The user stack from stack_sp upwards, for finding the application's frame. */
	__u8 stack[PW_STACK_BYTES];
};

/* Sampled lines of a copy's source, read at the copy's entry, for its content fingerprint
 * (pinwise_core::fingerprint): PW_FP_LINES lines of min(bytes, PW_FP_LINE) bytes, line i at
 * i * (bytes - PW_FP_LINE) / (PW_FP_LINES - 1). For a copy shorter than a line, the one
 * line (the whole buffer) is read once, at lines[0]. */
#define PW_FP_LINES 8
#define PW_FP_LINE 64
struct pw_fp {
	/* 0: not attempted; 1: every line read; 2: a read failed (a page not present);
	 * PW_FP_PENDING: an asynchronous download whose bytes are not there yet, remembered
	 * until a call guarantees it completed (a PW_EV_LATE_FP record then carries its
	 * fingerprint); PW_FP_UNTRACKED: such a download that could not be remembered (too many
	 * pending): its content stays unknown. */
	__u32 state;
	/* The hash of every byte (`--fingerprint full`, or a copy chosen for the check in
	 * sampled mode): PW_FP_FULL_NONE, _DONE (in `full`), _FAILED (a page could not be read:
	 * the copy's content is unknown) or _OVER_CAP (larger than cfg_fp_full_max_bytes:
	 * sampled only). */
	__u32 full_state;
	/* See pw_full_hash in pinwise.bpf.c (not the preload's xxh3: compared within one
	 * trace only). */
	__u64 full;
	__u8 lines[PW_FP_LINES * PW_FP_LINE];
};
#define PW_FP_FULL_NONE 0
#define PW_FP_FULL_DONE 1
#define PW_FP_FULL_FAILED 2
#define PW_FP_FULL_OVER_CAP 3
#define PW_FP_PENDING 3
#define PW_FP_UNTRACKED 4

/* A host-to-device copy with its fingerprint lines. */
struct pw_copy_fp_event {
	struct pw_copy_event copy;
	struct pw_fp fp;
};

/* The fingerprint of an asynchronous download (PW_EV_LATE_FP), read from its host buffer at
 * the return of a call that guarantees the download completed (h: that call). */
struct pw_late_fp_event {
	struct pw_header h;
	/* The download's own copy record: its timestamp (h.ts_ns) and thread. */
	__u64 copy_ts_ns;
	__u32 copy_tid;
	__u32 _pad0;
	struct pw_fp fp;
};

/* A copy sampled for its call chain (one in cfg_copy_stack_every copies). */
struct pw_copy_stack_event {
	struct pw_copy_event copy;
	/* User frames in `frames`; frames[0] is the innermost. */
	__u32 nframes;
	__u32 _pad0;
	__u64 frames[PW_MAX_FRAMES];
	/* The Python frames of the thread (copies of Python processes). */
	struct pw_py_stack py;
	/* Fingerprint lines (state 0 unless `--fingerprint` and a host-to-device copy). */
	struct pw_fp fp;
};

/* A range went away: host free, unregistration, device free, munmap. */
struct pw_release_event {
	struct pw_header h;
	__u64 addr;
	/* Length for munmap; 0 when the call does not say. */
	__u64 len;
	/* Return address of the call. */
	__u64 call_site;
};

/* Pages locked or unlocked by the nvidia kernel module. */
struct pw_pin_event {
	struct pw_header h;
	/* First byte of the locked range (the unlock reports the range its lock had). */
	__u64 addr;
	__u64 pages;
	/* NV_STATUS of the lock (0 = NV_OK). */
	__u32 status;
	/* 1 when the thread was inside a probed CUDA allocation or registration: the pages
	 * belong to the range that call returns (its event comes after this one). */
	__u8 in_cuda_call;
	__u8 _pad0[3];
};

/* A user page fault. */
struct pw_fault_event {
	struct pw_header h;
	__u64 addr;
	__u64 ip;
	__u64 error_code;
};

/* The user registers and stack at an allocation (PW_EV_UNWIND): the next PW_EV_MALLOC of
 * the same thread, whose stack_sp equals sp, is the event it belongs to. */
struct pw_unwind_event {
	struct pw_header h;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	/* Bytes of `stack` that were read (0: none). */
	__u32 len;
	__u32 _pad0;
	__u8 stack[PW_UNWIND_STACK_BYTES];
};

/* Process life: fork (child = new tgid), exit, exec, executable file mapping (addr, len). */
struct pw_proc_event {
	struct pw_header h;
	__u32 child;
	__u32 _pad0;
	__u64 addr;
	__u64 len;
	/* The current task's cgroup v2 id (the inode number of its cgroup directory) and
	 * command name, when the record was made. */
	__u64 cgroup_id;
	__u8 comm[16];
};

/*
 * Never used at run time. One global of this type makes the compiler emit BTF for every
 * shared type and enum, so that the Rust bindings generated from the object contain them.
 */
struct pw_abi {
	enum pw_kind kind;
	enum pw_func func;
	enum pw_counter counter;
	enum pw_memtype memtype;
	enum pw_site_source site_source;
	enum pw_py_status py_status;
	struct pw_py_proc py_proc;
	struct pw_header header;
	struct pw_copy_event copy;
	struct pw_range_event range;
	struct pw_copy_stack_event copy_stack;
	struct pw_copy_fp_event copy_fp;
	struct pw_late_fp_event late_fp;
	struct pw_release_event release;
	struct pw_pin_event pin;
	struct pw_fault_event fault;
	struct pw_proc_event proc;
	struct pw_unwind_event unwind;
};

#endif /* PINWISE_EVENTS_H */
