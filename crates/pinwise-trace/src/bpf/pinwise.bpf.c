// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * pinwise.bpf.c: user-space probes on the CUDA driver and runtime, syscall and scheduler
 * tracepoints. Every program first checks that the current process is traced (map
 * `traced_tgids`): the uprobes are attached system-wide, by library path, because per-PID
 * uprobes are slow (libbpf-rs issue #981).
 *
 * Copies cost one probe hit each (entry only). Allocations cost an entry and a return
 * (the pointer is only known at return), plus one hit on the runtime function when the
 * application goes through cudart: that hit records the application's call site.
 *
 * No vmlinux.h: the few kernel types used are declared below (tracepoint records from
 * /sys/kernel/tracing/events/.../format, and two task_struct fields read with CO-RE).
 */
#include "pinwise_common.bpf.h"

#include <asm/ptrace.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* See pinwise_events.h: makes BTF (and so the Rust bindings) carry every shared type. */
struct pw_abi pw_abi_anchor = {};

/* Anonymous mappings smaller than this are not reported (set by user space). */
const volatile __u64 cfg_min_mmap_bytes = 1 << 20;

/* One copy in this many carries its user call chain (0: none; set by user space). */
const volatile __u32 cfg_copy_stack_every = 0;
/* 1: host-to-device copies carry the sampled lines of their source (`--fingerprint`). */
const volatile __u32 cfg_fingerprint = 0;
/* With cfg_fingerprint, copies whose every byte is hashed too (pw_full_hash): 1000000
 * (`--fingerprint full`: all), or the parts per million of copies chosen by their
 * addresses and length (the sampled mode's check, `--fingerprint-check`; copies above
 * cfg_fp_check_max_bytes only when all are). */
const volatile __u32 cfg_fp_full_ppm = 0;
/* Copies above this many bytes are never hashed in full (sampled only, and reported as
 * PW_FP_FULL_OVER_CAP): the program runs in the copying thread, which waits for it. */
const volatile __u64 cfg_fp_full_max_bytes = 256 << 20;
/* In sampled mode, copies above this many bytes are not chosen for the check. */
const volatile __u64 cfg_fp_check_max_bytes = 4 << 20;

/* Allocation events carry their user call chain (set by user space). */
const volatile __u32 cfg_alloc_stacks = 1;
/* Copy registers and PW_UNWIND_STACK_BYTES of user stack with malloc-family allocations,
 * for .eh_frame unwinding in user space (`--dwarf-stacks`). */
const volatile __u32 cfg_dwarf_stacks = 0;

/* malloc-family blocks smaller than this are not reported (set by user space). */
const volatile __u64 cfg_malloc_min_bytes = 64 << 10;

#define PROT_READ 0x1
#define PROT_WRITE 0x2
#define PROT_EXEC 0x4
#define MAP_ANONYMOUS 0x20
#define MAP_STACK 0x20000

/* Events of Python processes carry the Python frames of the thread (set by user space). */
const volatile __u32 cfg_python_frames = 1;

/* The few kernel fields pinwise reads; CO-RE finds their offsets in the running kernel. */
struct thread_struct {
	/* x86-64: the user thread pointer (glibc's `struct pthread` of the thread). */
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	unsigned long vm_start;
	unsigned long vm_pgoff;
	struct file *vm_file;
} __attribute__((preserve_access_index));

/* The caller of a runtime allocation function, per thread, recorded at its entry. It is
 * used by the driver call made inside it, if that frame is still live. */
struct runtime_frame {
	__u64 ret;
	__u64 sp;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tid */
	__type(value, struct runtime_frame);
} runtime_frames SEC(".maps");

/* Arguments of an mmap between syscall entry and exit. */
struct mmap_args {
	__u64 len;
	__u64 flags;
	__u8 exec_file;
	__u8 _pad0[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct mmap_args);
} mmap_calls SEC(".maps");

/* A malloc-family call between its entry and its return, per thread (only calls of at
 * least cfg_malloc_min_bytes, and reallocs of reported blocks). */
struct malloc_call {
	/* Bytes asked for. */
	__u64 size;
	/* posix_memalign: where the pointer goes. */
	__u64 out_ptr;
	/* realloc: the block given (0 if none or not reported). */
	__u64 old_ptr;
	/* Stack pointer at entry: a return at a lower address is a nested call's. */
	__u64 entry_sp;
	__u16 func;
	/* Calls of the family made inside this one (realloc calling malloc, ...). */
	__u8 depth;
	__u8 _pad0[5];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct malloc_call);
} malloc_calls SEC(".maps");

/* Blocks PW_EV_MALLOC reported and not freed yet: free checks here, so that only frees of
 * reported blocks make events. */
struct malloc_block {
	__u32 tgid;
	__u32 _pad0;
	__u64 ptr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct malloc_block);
	__type(value, __u64); /* size */
} malloc_live SEC(".maps");

/* Node-wide mode (`pinwise agent`): a process not yet traced that enters a probed CUDA
 * function is added to `traced_tgids` there (its first CUDA call and all that follows are
 * seen; what it did before, e.g. its first mmaps, is not). 0: only the processes user space
 * adds are traced. */
const volatile __u32 cfg_enroll_on_cuda = 0;

/* Processes whose new children are traced: the tracer itself while it launches a command. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} spawners SEC(".maps");

/* Whether a CUDA entry point hit by the current process is to be reported: the process is
 * traced, or node-wide mode enrolls it now. */
static __always_inline void proc_ident(struct pw_proc_event *p)
{
	p->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(p->comm, sizeof(p->comm));
}

static __always_inline int cuda_traced(__u32 tgid)
{
	if (is_traced(tgid))
		return 1;
	if (!cfg_enroll_on_cuda)
		return 0;
	__u8 one = 1;
	/* NOEXIST: of two threads racing, one enrolls the process; both trace it. */
	if (bpf_map_update_elem(&traced_tgids, &tgid, &one, BPF_NOEXIST))
		return is_traced(tgid);
	/* Who it is, read now (user space may find the process gone by the time it looks). */
	struct pw_proc_event *p = reserve(sizeof(*p));
	if (p) {
		fill_header(&p->h, PW_EV_PROC_ENROLL, PW_FN_NONE);
		p->child = 0;
		p->_pad0 = 0;
		p->addr = 0;
		p->len = 0;
		proc_ident(p);
		submit(p, 1);
	}
	return 1;
}

/* Threads whose mmaps and page faults are not reported: the tracer's own threads when it
 * traces its own process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} ignored_tids SEC(".maps");

/* Traced processes that run CPython 3.10-3.13: where their frame chains are (written by
 * user space when it sees the interpreter mapped). A process absent here costs one lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tgid */
	__type(value, struct pw_py_proc);
} py_procs SEC(".maps");

/* Code objects user space has named (and so remembers, should they be freed before a
 * later event is read): an event whose frames run a code object not here wakes the consumer
 * at once, so that the object is read while it lives. */
struct py_code_key {
	__u32 tgid;
	__u32 _pad0;
	__u64 code;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct py_code_key);
	__type(value, __u8);
} py_codes SEC(".maps");

/* Bytes of one interpreter frame read at once (the fields are then picked out of it). */
#define PY_FRAME_READ 128
/* Frames visited in one walk (shim frames are visited, not kept): ends a cyclic chain. */
#define PY_MAX_VISITS (2 * PW_MAX_PY_FRAMES)

/* Bytes of a page: 3.11+ frames are read a page at a time (the page's start to the frame's
 * end), which covers the callers below them on the same page. */
#define PY_PAGE 4096

struct py_scratch {
	/* The bytes read last: from win_base, win_len of them. */
	__u8 window[PY_PAGE + PY_FRAME_READ];
	/* The frames kept so far. */
	struct pw_py_frame frames[PW_MAX_PY_FRAMES];
};

/* Per-CPU room for a walk (the BPF stack is too small for it). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_scratch SEC(".maps");

/* Per-CPU room for one chunk of a full hash (`--fingerprint full`). */
#define PW_FP_CHUNK 4096
struct fp_chunk {
	__u8 bytes[PW_FP_CHUNK];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_chunk);
} fp_scratch SEC(".maps");

/* ---- helpers ------------------------------------------------------------------------- */

/* At a function's first instruction the return address is the word at the stack pointer. */
static __always_inline __u64 entry_return_address(struct pt_regs *ctx)
{
	__u64 ret = 0;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)))
		count(PW_CNT_USER_READ_FAILED);
	return ret;
}

/* Copy the user stack from `sp` upwards, so that user space can find the application's
 * frame among the words (return addresses that follow a call instruction). */
static __always_inline void read_stack(struct pw_range_event *e, __u64 sp)
{
	e->stack_sp = sp;
	e->stack_len = 0;
	if (!sp)
		return;
	if (!bpf_probe_read_user(e->stack, PW_STACK_BYTES, (void *)sp)) {
		e->stack_len = PW_STACK_BYTES;
		return;
	}
	/* Near the top of the stack the whole window may not be mapped. */
	if (!bpf_probe_read_user(e->stack, 256, (void *)sp)) {
		e->stack_len = 256;
		return;
	}
	count(PW_CNT_USER_READ_FAILED);
}

/* Where an address lies: file (device, inode) and offset in it. */
struct placement {
	__u64 addr;
	__u64 dev;
	__u64 ino;
	__u64 offset;
};

static long place_in_vma(struct task_struct *task, struct vm_area_struct *vma,
			 struct placement *p)
{
	struct file *f = BPF_CORE_READ(vma, vm_file);
	if (!f)
		return 0;
	p->ino = BPF_CORE_READ(f, f_inode, i_ino);
	p->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	p->offset = p->addr - BPF_CORE_READ(vma, vm_start) + (BPF_CORE_READ(vma, vm_pgoff) << 12);
	return 0;
}

/* Places `call_site` in its file now, while the process surely lives: user space could
 * otherwise only do it from /proc/PID/maps, which is gone once a short process exits. */
static __always_inline void place_site(struct pw_range_event *e)
{
	e->site_dev = 0;
	e->site_ino = 0;
	e->site_offset = 0;
	if (!e->call_site)
		return;
	struct placement p = { .addr = e->call_site };
	if (bpf_find_vma(bpf_get_current_task_btf(), p.addr, place_in_vma, &p, 0) == 0 && p.ino) {
		e->site_dev = p.dev;
		e->site_ino = p.ino;
		e->site_offset = p.offset;
	}
}

/* ---- Python frames ------------------------------------------------------------------- */
/*
 * The interpreter's frame chain of the current thread, as py-spy and the eBPF profilers read
 * it, with the offsets user space took from pinwise-pyframes' per-version layout.
 *
 * The thread state: CPython keeps each thread's PyThreadState under a pthread key
 * (_PyRuntime's autoTSSkey, the PyGILState key), set for every thread Python knows and kept
 * while the thread has released the GIL: a ctypes call, a PyTorch operator, which is when
 * CUDA calls and large allocations happen (the GIL holder, _PyRuntime's tstate_current,
 * would be another thread or none then; 3.12+'s _Py_tss_tstate thread-local is absent
 * before 3.12). glibc keeps a thread's key values in its `struct pthread`, at the thread
 * pointer (fs base on x86-64): keys below 32 in specific_1stblock[key].data, others in
 * specific[key / 32][key % 32].data. User space finds those two offsets in its own glibc
 * (the traced process is assumed to use the same glibc: a thread state that does not
 * point back at the main interpreter is refused, so a different one gives no frames,
 * never wrong ones).
 *
 * Then: thread state -> current frame (through _PyCFrame on 3.11 and 3.12) -> previous ...,
 * in bpf_loop (at most PW_MAX_PY_FRAMES kept, PY_MAX_VISITS visited), code object and
 * instruction field kept; 3.12+'s shim frames (owned by the C stack) skipped. 3.10's frames
 * are objects of their own: one read each. 3.11+'s lie on the thread's data stack, callers
 * below callees: one read from the page's start to the frame's end serves the frames below
 * on that page. Code objects are named in user space, at once (map py_codes).
 */

/* The word at `off` of the frame at `at` in the window. */
static __always_inline __u64 py_u64(const struct py_scratch *sc, __u64 at, __u32 off)
{
	return *(const __u64 *)(sc->window + (at & (PY_PAGE - 1)) + (off & 0x78));
}

/* One walk's state, for bpf_loop's callback (verified once, whatever the chain's length). */
struct py_walk {
	__u64 frame;
	/* What the window holds: win_len bytes from win_base (0: nothing). */
	__u64 win_base;
	__u64 win_len;
	__u32 n;
	__u32 truncated;
	__u32 size;
	__u32 frame_code;
	__u32 frame_back;
	__u32 frame_instr;
	__s32 frame_owner;
	__u32 owner_cstack;
	__u32 contiguous;
	__u32 _pad0;
};

/* One frame: read it (unless the window has it), keep its code object and instruction
 * unless it is a shim, go to the caller. Returns 1 to end the walk. */
static long py_step(__u64 index, void *ctx)
{
	struct py_walk *w = ctx;
	__u32 zero = 0;
	struct py_scratch *sc = bpf_map_lookup_elem(&py_scratch, &zero);
	__u64 f = w->frame;
	if (!sc || !f)
		return 1;
	__u64 size = w->size;
	if (size > PY_FRAME_READ)
		size = PY_FRAME_READ;
	__u32 n = w->n;
	if (n >= PW_MAX_PY_FRAMES || (f & 7)) {
		w->truncated = 1;
		return 1;
	}
	if (!(w->win_len && f >= w->win_base && f + size <= w->win_base + w->win_len)) {
		__u64 start = w->contiguous ? (f & ~(__u64)(PY_PAGE - 1)) : f;
		__u64 len = f - start + size;
		if (len > PY_PAGE + PY_FRAME_READ)
			len = PY_PAGE + PY_FRAME_READ;
		if (bpf_probe_read_user(sc->window, len, (void *)start)) {
			w->truncated = 1;
			return 1;
		}
		w->win_base = start;
		w->win_len = len;
	}
	__u64 at = f - w->win_base;
	__u64 code = py_u64(sc, at, w->frame_code);
	int shim = w->frame_owner >= 0 &&
		   sc->window[(at & (PY_PAGE - 1)) + (w->frame_owner & (PY_FRAME_READ - 1))] ==
			   w->owner_cstack;
	if (!shim && code) {
		sc->frames[n & (PW_MAX_PY_FRAMES - 1)].code = code;
		sc->frames[n & (PW_MAX_PY_FRAMES - 1)].instr = py_u64(sc, at, w->frame_instr);
		w->n = n + 1;
	}
	w->frame = py_u64(sc, at, w->frame_back);
	return 0;
}

/* bpf_loop callback: whether frame `index` of the walk runs a code object user space has
 * not named yet (ends the loop at the first). */
struct py_news {
	__u32 tgid;
	__u32 n;
	__u32 unknown;
};

static long py_unknown_step(__u64 index, void *ctx)
{
	struct py_news *w = ctx;
	__u32 zero = 0;
	struct py_scratch *sc = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!sc || index >= w->n)
		return 1;
	struct py_code_key key = {
		.tgid = w->tgid,
		.code = sc->frames[index & (PW_MAX_PY_FRAMES - 1)].code,
	};
	if (!bpf_map_lookup_elem(&py_codes, &key)) {
		w->unknown = 1;
		return 1;
	}
	return 0;
}

/* Fills `s` with the thread's Python frames; returns 1 when one of them runs a code object
 * user space has not named yet (the event should wake it now). */
static __always_inline int py_capture(struct pw_py_stack *s)
{
	s->nframes = 0;
	s->status = PW_PY_NONE;
	if (!cfg_python_frames)
		return 0;
	__u32 tgid = current_tgid();
	struct pw_py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!p)
		return 0;
	s->status = PW_PY_FAILED;
	struct {
		__s32 initialised;
		__u32 key;
	} tss;
	__u64 main = 0;
	if (bpf_probe_read_user(&tss, sizeof(tss), (void *)(p->runtime + p->runtime_tss)) ||
	    bpf_probe_read_user(&main, sizeof(main),
				(void *)(p->runtime + p->runtime_main_interp)))
		return 0;
	if (tss.initialised != 1 || !main) {
		s->status = PW_PY_NO_THREAD;
		return 0;
	}
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 tp = BPF_CORE_READ(task, thread.fsbase);
	__u64 slot;
	if (tss.key < 32) {
		slot = tp + p->tls_first_block + 16 * (__u64)tss.key + 8;
	} else {
		__u64 block = 0;
		if (!p->tls_second_level || tss.key >= 1024 ||
		    bpf_probe_read_user(&block, sizeof(block),
					(void *)(tp + p->tls_second_level + 8 * (tss.key / 32))) ||
		    !block)
			return 0;
		slot = block + 16 * (__u64)(tss.key % 32) + 8;
	}
	__u64 tstate = 0, interp = 0, frame = 0;
	if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)slot))
		return 0;
	if (!tstate) {
		s->status = PW_PY_NO_THREAD;
		return 0;
	}
	if (bpf_probe_read_user(&interp, sizeof(interp), (void *)(tstate + p->tstate_interp)) ||
	    interp != main ||
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(tstate + p->tstate_frame)))
		return 0;
	if (p->cframe_current >= 0 && frame &&
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + p->cframe_current)))
		return 0;
	struct py_walk w = {
		.frame = frame,
		.size = p->frame_size,
		.frame_code = p->frame_code,
		.frame_back = p->frame_back,
		.frame_instr = p->frame_instr,
		.frame_owner = p->frame_owner,
		.owner_cstack = p->owner_cstack,
		.contiguous = p->contiguous,
	};
	bpf_loop(PY_MAX_VISITS, py_step, &w, 0);
	__u32 zero = 0;
	struct py_scratch *sc = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!sc)
		return 0;
	__u32 n = w.n;
	if (n > PW_MAX_PY_FRAMES)
		n = PW_MAX_PY_FRAMES;
	if (n)
		bpf_probe_read_kernel(s->frames, n * sizeof(struct pw_py_frame), sc->frames);
	s->nframes = n;
	s->status = (w.truncated || w.frame) ? PW_PY_TRUNCATED : PW_PY_OK;
	struct py_news news = { .tgid = tgid, .n = n };
	bpf_loop(PW_MAX_PY_FRAMES, py_unknown_step, &news, 0);
	return news.unknown;
}

/* ---- copies: one hit each, at entry ---------------------------------------------------- */

/* Fills a copy record. */
static __always_inline void fill_copy(struct pw_copy_event *e, struct pt_regs *ctx, __u16 kind,
				      __u16 func, __u64 dst, __u64 src, __u64 bytes, __u64 stream,
				      __u8 dst_type, __u8 src_type, __u8 is_async)
{
	fill_header(&e->h, kind, func);
	e->dst = dst;
	e->src = src;
	e->bytes = bytes;
	e->stream = stream;
	e->call_site = entry_return_address(ctx);
	e->dst_type = dst_type;
	e->src_type = src_type;
	e->is_async = is_async;
	__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
}

/* Whether this copy is one of the sampled ones that carry their call chain. */
static __always_inline int sample_copy_stack(void)
{
	__u32 every = cfg_copy_stack_every;
	if (every == 0)
		return 0;
	return every == 1 || bpf_get_prandom_u32() % every == 0;
}

/* The user call chain into `frames` (PW_MAX_FRAMES slots); returns how many were written. */
static __always_inline __u32 user_frames(void *ctx, __u64 *frames)
{
	long n = bpf_get_stack(ctx, frames, PW_MAX_FRAMES * sizeof(__u64), BPF_F_USER_STACK);
	if (n <= 0)
		return 0;
	return (__u32)(n / sizeof(__u64));
}

/* ---- full hashes ----
 * pw_full_hash: a 64-bit hash of every byte of a user buffer, read PW_FP_CHUNK bytes at a
 * time with bpf_probe_read_user into a per-CPU chunk (bpf_loop, one iteration a chunk: up
 * to 2^23 chunks, 32 GiB, far above cfg_fp_full_max_bytes). Four lanes (for the CPU's
 * parallelism) start at the length (and a constant each); little-endian 8-byte word j goes to
 * lane j % 4, which does h = (h ^ w) * K1, h ^= h >> 32 (the last word of a length that is
 * not a multiple of 8 padded with zeros); then the lanes are mixed in order, lane by lane
 * the same way, and a murmur3 fmix64 ends it. Each step is a bijection of a lane's state for
 * a given word, and so is the final mixing in each lane, so a change confined to one word
 * always changes the hash; other changes collide only when 64-bit states do. It is not the
 * preload's xxh3: full hashes are compared within one trace only. A chunk that cannot be
 * read (a page not present: a BPF read does
 * not fault pages in) fails the whole hash, and the copy's content is then unknown. */
#define PW_FP_K1 0x9e3779b97f4a7c15ULL
#define PW_FP_K2 0xc2b2ae3d27d4eb4fULL
#define PW_FP_K3 0x165667b19e3779f9ULL
#define PW_FP_FULL_DOMAIN 0x46554c4c42504631ULL

struct fp_walk {
	__u64 src;
	__u64 bytes;
	__u64 h[4];
	long err;
};

static __always_inline __u64 fp_mix(__u64 h, __u64 w)
{
	h = (h ^ w) * PW_FP_K1;
	return h ^ (h >> 32);
}

static long fp_chunk_cb(__u64 i, void *ctx)
{
	struct fp_walk *w = ctx;
	__u32 zero = 0;
	struct fp_chunk *c = bpf_map_lookup_elem(&fp_scratch, &zero);
	if (!c) {
		w->err = 1;
		return 1;
	}
	__u64 off = i * PW_FP_CHUNK;
	if (off >= w->bytes)
		return 1;
	__u64 n = w->bytes - off;
	const void *at = (const void *)(w->src + off);
	if (n >= PW_FP_CHUNK) {
		n = PW_FP_CHUNK;
		if (bpf_probe_read_user(c->bytes, PW_FP_CHUNK, at)) {
			w->err = 1;
			return 1;
		}
	} else {
		n &= PW_FP_CHUNK - 1;
		if (n == 0 || bpf_probe_read_user(c->bytes, n, at)) {
			w->err = 1;
			return 1;
		}
	}
	__u64 h0 = w->h[0], h1 = w->h[1], h2 = w->h[2], h3 = w->h[3];
	__u32 words = n / 8;
	const __u64 *v = (const __u64 *)c->bytes;
	__u32 j = 0;
	/* Chunks hold a multiple of 4 words, so word j of a chunk goes to lane j % 4. */
	for (__u32 k = 0; k < PW_FP_CHUNK / 32; k++) {
		if (j + 4 > words)
			break;
		h0 = fp_mix(h0, v[j]);
		h1 = fp_mix(h1, v[j + 1]);
		h2 = fp_mix(h2, v[j + 2]);
		h3 = fp_mix(h3, v[j + 3]);
		j += 4;
	}
	if (words < PW_FP_CHUNK / 8) {
		/* The last chunk: up to 3 whole words, then the partial one, padded with zeros. */
		__u32 tail = n & 7;
		__u64 last = 0;
		if (tail)
			last = v[words & (PW_FP_CHUNK / 8 - 1)] & ((1ULL << (tail * 8)) - 1);
		__u32 rest = words - j + (tail ? 1 : 0);
		__u64 w0 = j < words ? v[j & (PW_FP_CHUNK / 8 - 1)] : last;
		__u64 w1 = j + 1 < words ? v[(j + 1) & (PW_FP_CHUNK / 8 - 1)] : last;
		__u64 w2 = j + 2 < words ? v[(j + 2) & (PW_FP_CHUNK / 8 - 1)] : last;
		if (rest > 0)
			h0 = fp_mix(h0, w0);
		if (rest > 1)
			h1 = fp_mix(h1, w1);
		if (rest > 2)
			h2 = fp_mix(h2, w2);
		if (rest > 3)
			h3 = fp_mix(h3, last);
	}
	w->h[0] = h0;
	w->h[1] = h1;
	w->h[2] = h2;
	w->h[3] = h3;
	return 0;
}

/* The full hash of `bytes` bytes at user address `src` into fp->full, and fp->full_state. */
static __always_inline void pw_full_hash(struct pw_fp *fp, __u64 src, __u64 bytes)
{
	fp->full = 0;
	if (bytes > cfg_fp_full_max_bytes) {
		fp->full_state = PW_FP_FULL_OVER_CAP;
		return;
	}
	struct fp_walk w = {
		.src = src,
		.bytes = bytes,
		.h = {bytes ^ PW_FP_FULL_DOMAIN, bytes ^ PW_FP_K1, bytes ^ PW_FP_K2,
		      bytes ^ PW_FP_K3},
		.err = 0,
	};
	__u64 chunks = (bytes + PW_FP_CHUNK - 1) / PW_FP_CHUNK;
	if (chunks > (1 << 23) || bpf_loop(chunks, fp_chunk_cb, &w, 0) != (long)chunks ||
	    w.err) {
		fp->full_state = PW_FP_FULL_FAILED;
		return;
	}
	__u64 h = fp_mix(fp_mix(fp_mix(w.h[0], w.h[1]), w.h[2]), w.h[3]);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	fp->full = h;
	fp->full_state = PW_FP_FULL_DONE;
}

/* Whether a copy is hashed in full: all of them in full mode; in sampled mode the
 * cfg_fp_full_ppm share chosen by (host, device, bytes), so that every repeat of a copy is
 * chosen alike and two hashed copies can be compared. */
static __always_inline int fp_full_wanted(__u64 host, __u64 device, __u64 bytes)
{
	__u32 ppm = cfg_fp_full_ppm;
	if (ppm >= 1000000)
		return 1;
	if (ppm == 0 || bytes > cfg_fp_check_max_bytes)
		return 0;
	__u64 h = fp_mix(fp_mix(fp_mix(PW_FP_FULL_DOMAIN, host), device), bytes);
	h ^= h >> 29;
	return h % 1000000 < ppm;
}

/* Reads the fingerprint lines of `bytes` bytes at user address `src` (see struct pw_fp):
 * at most PW_FP_LINES reads of PW_FP_LINE bytes; then, for a copy to be hashed in full
 * (fp_full_wanted: `--fingerprint full`, or the check share in sampled mode; `device` is
 * the copy's device address), every byte (pw_full_hash). */
static __always_inline void read_fp(struct pw_fp *fp, __u64 src, __u64 bytes, __u64 device)
{
	fp->full_state = PW_FP_FULL_NONE;
	fp->full = 0;
	long err = 0;
	if (bytes < PW_FP_LINE) {
		__u32 n = bytes & (PW_FP_LINE - 1);
		if (n)
			err |= bpf_probe_read_user(fp->lines, n, (const void *)src);
	} else {
		__u64 span = bytes - PW_FP_LINE;
		__u64 q = span / (PW_FP_LINES - 1), r = span % (PW_FP_LINES - 1);
#pragma unroll
		for (int i = 0; i < PW_FP_LINES; i++) {
			__u64 off = q * i + r * i / (PW_FP_LINES - 1);
			err |= bpf_probe_read_user(fp->lines + i * PW_FP_LINE, PW_FP_LINE,
						   (const void *)(src + off));
		}
	}
	fp->state = err ? 2 : 1;
	if (!err && fp_full_wanted(src, device, bytes))
		pw_full_hash(fp, src, bytes);
}

/* A synchronous download between its entry and its return (with `--fingerprint`). */
struct copy_entry {
	__u64 ts_ns;
	__u64 call_site;
	__u64 dst;
	__u64 src;
	__u64 bytes;
	/* Asynchronous downloads: the stream as passed. */
	__u64 stream;
};

static __always_inline void at_entry(struct pw_copy_event *e, const struct copy_entry *entry)
{
	if (entry) {
		e->h.ts_ns = entry->ts_ns;
		e->call_site = entry->call_site;
	}
}

/* The fingerprint part of a copy record: `how` 0, none; 1, the lines (and the full hash
 * when wanted) read at `fp_at`; PW_FP_PENDING or PW_FP_UNTRACKED, that state alone (an
 * asynchronous download, whose bytes are not there yet). */
static __always_inline void fill_fp(struct pw_fp *fp, int how, __u64 fp_at, __u64 bytes,
				    __u64 device)
{
	if (how == 1) {
		read_fp(fp, fp_at, bytes, device);
		return;
	}
	fp->state = how;
	fp->full_state = PW_FP_FULL_NONE;
	fp->full = 0;
}

/* Reports a copy of a traced process whose hit is counted already. `fp`: with the
 * fingerprint lines read at `fp_at` (the copy's host side: an upload's source, a
 * synchronous download's destination), see fill_fp. `entry`: for a copy reported at its return (a
 * synchronous download, fingerprinted once its bytes are in place), the time and call
 * site of its entry; NULL at the entry itself. */
static __always_inline int send_copy_fp(struct pt_regs *ctx, __u16 func, __u64 dst, __u64 src,
					__u64 bytes, __u64 stream, __u8 dst_type, __u8 src_type,
					__u8 is_async, int fp, __u64 fp_at,
					const struct copy_entry *entry)
{
	if (sample_copy_stack()) {
		struct pw_copy_stack_event *s = reserve(sizeof(*s));
		if (!s)
			return 0;
		fill_copy(&s->copy, ctx, PW_EV_COPY_STACK, func, dst, src, bytes, stream, dst_type,
			  src_type, is_async);
		at_entry(&s->copy, entry);
		s->_pad0 = 0;
		s->nframes = user_frames(ctx, s->frames);
		fill_fp(&s->fp, fp, fp_at, bytes, fp_at == src ? dst : src);
		submit(s, py_capture(&s->py));
		return 0;
	}
	if (fp) {
		struct pw_copy_fp_event *f = reserve(sizeof(*f));
		if (!f)
			return 0;
		fill_copy(&f->copy, ctx, PW_EV_COPY_FP, func, dst, src, bytes, stream, dst_type,
			  src_type, is_async);
		at_entry(&f->copy, entry);
		fill_fp(&f->fp, fp, fp_at, bytes, fp_at == src ? dst : src);
		submit(f, 0);
		return 0;
	}
	struct pw_copy_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, PW_EV_COPY, func);
	e->dst = dst;
	e->src = src;
	e->bytes = bytes;
	e->stream = stream;
	e->call_site = entry_return_address(ctx);
	e->dst_type = dst_type;
	e->src_type = src_type;
	e->is_async = is_async;
	__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
	at_entry(e, entry);
	submit(e, 0);
	return 0;
}

/* Reports a copy of a traced process whose hit is counted already. */
static __always_inline int send_copy(struct pt_regs *ctx, __u16 func, __u64 dst, __u64 src,
				     __u64 bytes, __u64 stream, __u8 dst_type, __u8 src_type,
				     __u8 is_async)
{
	return send_copy_fp(ctx, func, dst, src, bytes, stream, dst_type, src_type, is_async, 0,
			    0, NULL);
}

static __always_inline int emit_copy(struct pt_regs *ctx, __u64 dst, __u64 src, __u64 bytes,
				     __u64 stream, __u8 dst_type, __u8 src_type, __u8 is_async)
{
	if (!cuda_traced(current_tgid()))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	count_hit(func);
	int fp = cfg_fingerprint && src_type == PW_MEM_HOST && dst_type == PW_MEM_DEVICE &&
		 bytes > 0;
	return send_copy_fp(ctx, func, dst, src, bytes, stream, dst_type, src_type, is_async, fp,
			    src, NULL);
}

/* Synchronous downloads in flight, with `--fingerprint`: reported at their return, when
 * the bytes are in the host buffer (copy_dtoh_fp_entry / copy_dtoh_fp_return). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct copy_entry);
} dtoh_calls SEC(".maps");

/* The entry of a download reported at its return: counts the hit and keeps the arguments
 * in dtoh_calls for the return. 0 when kept; -1 when the caller must report the copy at
 * once, without a fingerprint: an empty one, or the arguments could not be kept
 * (BPF_NOEXIST: a download of this thread already waiting for its return, a nested call
 * or one whose return never came, keeps its entry, so no copy is lost). */
static __always_inline int keep_dtoh_call(struct pt_regs *ctx, __u64 pid_tgid, __u16 func,
					  __u64 dst, __u64 src, __u64 n, __u64 stream)
{
	count_hit(func);
	struct copy_entry entry = {
		.ts_ns = bpf_ktime_get_ns(),
		.call_site = entry_return_address(ctx),
		.dst = dst,
		.src = src,
		.bytes = n,
		.stream = stream,
	};
	if (n == 0 || bpf_map_update_elem(&dtoh_calls, &pid_tgid, &entry, BPF_NOEXIST))
		return -1;
	return 0;
}

/* The return of a download kept by keep_dtoh_call: its entry, taken out of dtoh_calls
 * into `out`. 0 when there was none (the entry was not kept, or the thread ended). */
static __always_inline int take_dtoh_call(__u64 pid_tgid, struct copy_entry *out)
{
	struct copy_entry *e = bpf_map_lookup_elem(&dtoh_calls, &pid_tgid);
	if (!e)
		return 0;
	*out = *e;
	bpf_map_delete_elem(&dtoh_calls, &pid_tgid);
	return 1;
}

/* cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) and _ptds */
SEC("uprobe")
int BPF_KPROBE(copy_htod, __u64 dst, __u64 src, __u64 n)
{
	return emit_copy(ctx, dst, src, n, 0, PW_MEM_DEVICE, PW_MEM_HOST, 0);
}

/* cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) and _ptsz */
SEC("uprobe")
int BPF_KPROBE(copy_htod_async, __u64 dst, __u64 src, __u64 n, __u64 stream)
{
	return emit_copy(ctx, dst, src, n, stream, PW_MEM_DEVICE, PW_MEM_HOST, 1);
}

/* cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) and _ptds */
SEC("uprobe")
int BPF_KPROBE(copy_dtoh, __u64 dst, __u64 src, __u64 n)
{
	return emit_copy(ctx, dst, src, n, 0, PW_MEM_HOST, PW_MEM_DEVICE, 0);
}

/* cuMemcpyDtoH_v2 and _ptds with `--fingerprint` (the loader attaches these instead of
 * copy_dtoh, with the return probe): the entry counts the hit and keeps the arguments; the
 * return reports the copy, with the entry's time and call site and the fingerprint lines
 * of the host buffer, which holds the result by then. When the arguments cannot be kept
 * (the map is full, or the thread has one waiting), the copy is reported at once, without
 * a fingerprint. A thread that ends in the copy loses its entry at its exit (on_exit);
 * that copy, which did not complete, is counted as a hit but not reported. */
SEC("uprobe")
int BPF_KPROBE(copy_dtoh_fp_entry, __u64 dst, __u64 src, __u64 n)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!cuda_traced(pid_tgid >> 32))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	if (keep_dtoh_call(ctx, pid_tgid, func, dst, src, n, 0))
		return send_copy(ctx, func, dst, src, n, 0, PW_MEM_HOST, PW_MEM_DEVICE, 0);
	return 0;
}

SEC("uretprobe")
int copy_dtoh_fp_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct copy_entry entry;
	if (!take_dtoh_call(pid_tgid, &entry))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	/* A failed copy wrote nothing worth a fingerprint (CUDA_SUCCESS is 0). */
	int ok = PT_REGS_RC(ctx) == 0;
	return send_copy_fp(ctx, func, entry.dst, entry.src, entry.bytes, 0, PW_MEM_HOST,
			    PW_MEM_DEVICE, 0, ok, entry.dst, &entry);
}

/* cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) and _ptsz */
SEC("uprobe")
int BPF_KPROBE(copy_dtoh_async, __u64 dst, __u64 src, __u64 n, __u64 stream)
{
	return emit_copy(ctx, dst, src, n, stream, PW_MEM_HOST, PW_MEM_DEVICE, 1);
}

/* ---- asynchronous downloads (`--fingerprint`) ----
 * An asynchronous download's bytes reach the host buffer when its stream gets to it, after
 * the call returned. With `--fingerprint` the loader attaches copy_dtoh_async_fp_entry and
 * _return to cuMemcpyDtoHAsync_v2 (and _ptsz): a download the driver accepted is reported
 * at its return with PW_FP_PENDING and kept in `async_dls` (PW_FP_UNTRACKED when that map
 * is full: unknown). Its bytes are hashed, and a PW_EV_LATE_FP record sent, at the return of
 * a call that guarantees it completed:
 * - cuStreamSynchronize or cuStreamQuery (CUDA_SUCCESS) of its stream;
 * - cuEventSynchronize or cuEventQuery (CUDA_SUCCESS) of an event recorded on its stream
 *   after it (cuEventRecord and WithFlags, their _ptsz forms);
 * - cuCtxSynchronize, or cuCtxSynchronize_v2 (CUDA 13's, which cudart 13's
 *   cudaDeviceSynchronize calls) of the current context (NULL, or the handle this thread
 *   made current by cuCtxSetCurrent / cuCtxPushCurrent_v2), on the thread that issued it,
 *   for a download on the legacy or per-thread default stream.
 * While a stream of the process is being captured into a graph (cuStreamBeginCapture* to
 * cuStreamEndCapture*: `captures`), its downloads are not remembered (a captured copy runs
 * when the graph is launched; work joins a capture through events) and event records are
 * forgotten, not noted (a captured record marks nothing).
 * The default streams are per context (and the per-thread one per thread), and BPF does not
 * know the current context: a download on a default stream (handle 0, CU_STREAM_LEGACY 1,
 * CU_STREAM_PER_THREAD 2; 0 means 2 in the _ptsz forms) completes only by a call of the
 * thread that issued it, with no cuCtxSetCurrent / cuCtxPushCurrent / cuCtxPopCurrent of
 * that thread in between (`ctx_gens`). An explicit stream handle is one stream of the
 * process until cuStreamDestroy, which gives up (drops) the downloads pending on it, as
 * cuCtxDestroy and the primary context's release or reset give up all of the process's.
 * Dropped ones, and those never completed by a probed call (a program that polls another
 * way, or a download still in flight at exit), get no PW_EV_LATE_FP: user space counts them
 * unknown. User space also leaves unknown a download whose host or device range a later
 * copy touched before its PW_EV_LATE_FP arrived (its host bytes may be that copy's). */

/* Asynchronous downloads pending, by their copy record (thread, timestamp). */
struct dl_key {
	__u32 tgid;
	__u32 tid;
	__u64 ts_ns;
};

struct dl_pending {
	__u64 dst;
	__u64 src;
	__u64 bytes;
	/* The stream, with 0 resolved to 1 or 2 (dl_stream). */
	__u64 stream;
	/* Its place in the order of downloads and event records (dl_next_seq). */
	__u64 seq;
	/* The issuing thread's context generation (ctx_gens) then. */
	__u64 gen;
};

#define PW_MAX_ASYNC_DLS 1024

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PW_MAX_ASYNC_DLS);
	__type(key, struct dl_key);
	__type(value, struct dl_pending);
} async_dls SEC(".maps");

/* [0]: a sequence for downloads, event records and context generations; [1]: at least the
 * number of entries in async_dls (incremented before an insertion, decremented after a
 * deletion), so that a sync call of a process with nothing pending costs a lookup; [2]: set
 * when a capture could not be noted (capture_counts full): every process counts as
 * capturing from then on. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} dl_counters SEC(".maps");

/* A thread's context generation, changed by each cuCtxSetCurrent/Push/Pop it makes, and
 * its current context at that generation when a call named it (cuCtxSetCurrent's and
 * cuCtxPushCurrent_v2's argument; 0: not known, as after a pop). */
struct thread_ctx {
	__u64 gen;
	__u64 ctx;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct thread_ctx);
} ctx_gens SEC(".maps");

/* An event's last record: on which stream, by which thread and generation, and the
 * sequence then (downloads before it on that stream are complete once it is). */
struct ev_key {
	__u32 tgid;
	__u32 _pad0;
	__u64 event;
};

struct ev_record {
	__u64 stream;
	__u64 seq;
	__u64 gen;
	__u32 tid;
	__u32 _pad0;
};

/* LRU: the records of events a process never destroyed go; an event without its record
 * completes nothing. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct ev_key);
	__type(value, struct ev_record);
} ev_records SEC(".maps");

/* A stream, event or context call between its entry and its return: its arguments. */
struct sync_entry {
	__u64 arg0;
	__u64 arg1;
	/* The call (its cookie): a return of another call (one probed call made inside
	 * another, whose entry kept nothing) does not take these arguments for its own. */
	__u64 func;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct sync_entry);
} sync_calls SEC(".maps");

/* Streams being captured, by (tgid, stream as resolved by dl_stream), and how many each
 * process has (the count changes only with an insertion or a deletion that succeeded). */
struct cap_key {
	__u32 tgid;
	__u32 _pad0;
	__u64 stream;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cap_key);
	__type(value, __u8);
} captures SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tgid */
	__type(value, __u64);
} capture_counts SEC(".maps");

/* Whether process `tgid` captures some stream now (or its capture could not be noted). */
static __always_inline __u64 *dl_counter(__u32 i)
{
	return bpf_map_lookup_elem(&dl_counters, &i);
}

static __always_inline int capturing(__u32 tgid)
{
	__u64 *lost = dl_counter(2);
	if (!lost || *lost)
		return 1;
	__u64 *n = bpf_map_lookup_elem(&capture_counts, &tgid);
	return n && *n > 0;
}

/* Stream `stream` of process `tgid` is (about to be) captured. */
static __always_inline void capture_begins(__u32 tgid, __u64 stream)
{
	struct cap_key k = { .tgid = tgid, .stream = stream };
	__u64 zero = 0;
	bpf_map_update_elem(&capture_counts, &tgid, &zero, BPF_NOEXIST);
	__u64 *n = bpf_map_lookup_elem(&capture_counts, &tgid);
	if (!n) {
		__u64 *lost = dl_counter(2);
		if (lost)
			*lost = 1;
		return;
	}
	__u8 one = 1;
	/* Counted once per stream; a capture that cannot be keyed (map full) is counted
	 * without a key, so the count never drops to 0 for this process. */
	if (bpf_map_update_elem(&captures, &k, &one, BPF_NOEXIST) == 0 ||
	    bpf_map_lookup_elem(&captures, &k) == 0)
		__sync_fetch_and_add(n, 1);
}

/* The capture of stream `stream` of process `tgid` ended (or never began). */
static __always_inline void capture_ends(__u32 tgid, __u64 stream)
{
	struct cap_key k = { .tgid = tgid, .stream = stream };
	__u64 *n = bpf_map_lookup_elem(&capture_counts, &tgid);
	if (bpf_map_delete_elem(&captures, &k) == 0 && n && *n > 0)
		__sync_fetch_and_add(n, -1);
}

static __always_inline __u64 dl_next_seq(void)
{
	__u64 *c = dl_counter(0);
	return c ? __sync_fetch_and_add(c, 1) + 1 : 0;
}

static __always_inline int dl_any_pending(void)
{
	__u64 *c = dl_counter(1);
	return c && *c > 0;
}

static __always_inline __u64 thread_gen(__u64 pid_tgid)
{
	struct thread_ctx *t = bpf_map_lookup_elem(&ctx_gens, &pid_tgid);
	return t ? t->gen : 0;
}

/* Whether `ctx` is the context current on this thread at generation `gen`, as far as the
 * calls seen tell. */
static __always_inline int thread_ctx_is(__u64 pid_tgid, __u64 gen, __u64 ctx)
{
	struct thread_ctx *t = bpf_map_lookup_elem(&ctx_gens, &pid_tgid);
	return t && t->gen == gen && t->ctx != 0 && t->ctx == ctx;
}

/* The generation a download of this thread is remembered with: never 0 (a thread seen
 * first gets a fresh one), so that a later thread with the same id (its entry deleted at
 * the first one's exit) never completes it by a call at generation 0. 0 when none could be
 * noted (the download is then not remembered). */
static __always_inline __u64 download_gen(__u64 pid_tgid)
{
	__u64 g = thread_gen(pid_tgid);
	if (g)
		return g;
	g = dl_next_seq();
	struct thread_ctx t = { .gen = g };
	if (g == 0 || bpf_map_update_elem(&ctx_gens, &pid_tgid, &t, BPF_NOEXIST))
		return 0;
	return g;
}

/* The stream a call names: 0 is the legacy stream (1), or the per-thread one (2) in the
 * _ptsz forms. */
static __always_inline __u64 dl_stream(__u64 stream, __u16 func)
{
	if (stream != 0)
		return stream;
	int ptsz = func == PW_FN_cuMemcpyDtoHAsync_v2_ptsz ||
		   func == PW_FN_cuStreamSynchronize_ptsz || func == PW_FN_cuStreamQuery_ptsz ||
		   func == PW_FN_cuEventRecord_ptsz || func == PW_FN_cuEventRecordWithFlags_ptsz ||
		   func == PW_FN_cuStreamBeginCapture_ptsz ||
		   func == PW_FN_cuStreamBeginCapture_v2_ptsz ||
		   func == PW_FN_cuStreamBeginCaptureToGraph_ptsz ||
		   func == PW_FN_cuStreamEndCapture_ptsz;
	return ptsz ? 2 : 1;
}

/* cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) and _ptsz, with
 * `--fingerprint`: the entry counts the hit and keeps the arguments (as
 * copy_dtoh_fp_entry). */
SEC("uprobe")
int BPF_KPROBE(copy_dtoh_async_fp_entry, __u64 dst, __u64 src, __u64 n, __u64 stream)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!cuda_traced(pid_tgid >> 32))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	if (keep_dtoh_call(ctx, pid_tgid, func, dst, src, n, stream))
		return send_copy_fp(ctx, func, dst, src, n, stream, PW_MEM_HOST, PW_MEM_DEVICE, 1,
				    PW_FP_UNTRACKED, dst, NULL);
	return 0;
}

/* The return: a download the driver accepted is remembered as pending (or, the map full,
 * reported untracked); a failed one is reported without a fingerprint. */
SEC("uretprobe")
int copy_dtoh_async_fp_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct copy_entry entry;
	if (!take_dtoh_call(pid_tgid, &entry))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	int how = 0;
	__u64 gen = 0;
	if (PT_REGS_RC(ctx) == 0 && (capturing(pid_tgid >> 32) || !(gen = download_gen(pid_tgid)))) {
		how = PW_FP_UNTRACKED;
	} else if (PT_REGS_RC(ctx) == 0) {
		struct dl_key key = {
			.tgid = pid_tgid >> 32,
			.tid = (__u32)pid_tgid,
			.ts_ns = entry.ts_ns,
		};
		struct dl_pending p = {
			.dst = entry.dst,
			.src = entry.src,
			.bytes = entry.bytes,
			.stream = dl_stream(entry.stream, func),
			.seq = dl_next_seq(),
			.gen = gen,
		};
		__u64 *count = dl_counter(1);
		how = PW_FP_UNTRACKED;
		if (count) {
			__sync_fetch_and_add(count, 1);
			if (bpf_map_update_elem(&async_dls, &key, &p, BPF_NOEXIST) == 0)
				how = PW_FP_PENDING;
			else
				__sync_fetch_and_add(count, -1);
		}
	}
	return send_copy_fp(ctx, func, entry.dst, entry.src, entry.bytes, entry.stream,
			    PW_MEM_HOST, PW_MEM_DEVICE, 1, how, entry.dst, &entry);
}

/* What completes (or gives up) pending downloads: mode DL_STREAM, those of the process on
 * `stream` with seq <= max_seq (on a default stream, of thread `tid` at generation `gen`
 * only); DL_CTX, those of thread `tid` at generation `gen` on a default stream; DL_DROP,
 * all of the process's (any_stream) or those on `stream`, without a fingerprint. */
#define DL_STREAM 0
#define DL_CTX 1
#define DL_DROP 2
/* A call hashes every download it completed (at most PW_MAX_ASYNC_DLS): the work is the
 * same as if each had been a synchronous download. */

struct dl_match {
	__u64 stream;
	__u64 max_seq;
	__u64 gen;
	__u32 tgid;
	__u32 tid;
	__u32 mode;
	__u32 any_stream;
	__u16 func;
	__u16 _pad0;
};

static long dl_visit(void *map, struct dl_key *key, struct dl_pending *p,
		     struct dl_match *m)
{
	if (key->tgid != m->tgid)
		return 0;
	int fits;
	if (m->mode == DL_DROP) {
		fits = m->any_stream || p->stream == m->stream;
	} else {
		int dflt = p->stream <= 2;
		if (m->mode == DL_CTX)
			fits = dflt && key->tid == m->tid && p->gen == m->gen;
		else
			fits = p->stream == m->stream && p->seq <= m->max_seq &&
			       (!dflt || (key->tid == m->tid && p->gen == m->gen));
	}
	if (!fits)
		return 0;
	/* With the ring buffer full, a completed download is given up, not kept: by a later
	 * call the program may have written its buffer. */
	struct pw_late_fp_event *ev = 0;
	if (m->mode != DL_DROP)
		ev = reserve(sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PW_EV_LATE_FP, m->func);
		ev->copy_ts_ns = key->ts_ns;
		ev->copy_tid = key->tid;
		ev->_pad0 = 0;
		read_fp(&ev->fp, p->dst, p->bytes, p->src);
		submit(ev, 0);
	}
	if (bpf_map_delete_elem(&async_dls, key) == 0) {
		__u64 *count = dl_counter(1);
		if (count)
			__sync_fetch_and_add(count, -1);
	}
	return 0;
}

static __always_inline void dl_complete(struct dl_match *m)
{
	if (!dl_any_pending())
		return;
	bpf_for_each_map_elem(&async_dls, dl_visit, m, 0);
}

/* Gives up (no fingerprint) process `tgid`'s pending downloads on `stream`, or all of them
 * (`any_stream`). */
static __always_inline void dl_drop(__u32 tgid, __u64 stream, __u32 any_stream)
{
	struct dl_match m = {
		.tgid = tgid,
		.mode = DL_DROP,
		.stream = stream,
		.any_stream = any_stream,
	};
	dl_complete(&m);
}

/* Entry of the stream, event and context calls: the arguments, for the return. */
SEC("uprobe")
int BPF_KPROBE(sync_entry, __u64 arg0, __u64 arg1)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	/* Only event records and captures matter when nothing is pending. */
	int always = func == PW_FN_cuEventRecord || func == PW_FN_cuEventRecord_ptsz ||
		     func == PW_FN_cuEventRecordWithFlags ||
		     func == PW_FN_cuEventRecordWithFlags_ptsz ||
		     (func >= PW_FN_cuStreamBeginCapture && func <= PW_FN_cuStreamEndCapture_ptsz);
	if (!always && !dl_any_pending())
		return 0;
	/* A driver whose cuCtxSynchronize calls its exported cuCtxSynchronize_v2 (with the
	 * current context's handle, perhaps one this thread's calls never named): the outer
	 * call, which synchronizes the current context, decides. */
	struct sync_entry *outer = bpf_map_lookup_elem(&sync_calls, &pid_tgid);
	if (func == PW_FN_cuCtxSynchronize_v2 && outer && outer->func == PW_FN_cuCtxSynchronize)
		return 0;
	struct sync_entry e = { .arg0 = arg0, .arg1 = arg1, .func = func };
	bpf_map_update_elem(&sync_calls, &pid_tgid, &e, BPF_ANY);
	if (func >= PW_FN_cuStreamBeginCapture && func <= PW_FN_cuStreamBeginCaptureToGraph_ptsz)
		/* Noted before the capture begins (another thread's copy captured the moment it
		 * began is seen as captured); taken back at the return if it failed. */
		capture_begins(pid_tgid >> 32, dl_stream(arg0, func));
	return 0;
}

SEC("uretprobe")
int sync_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct sync_entry *p = bpf_map_lookup_elem(&sync_calls, &pid_tgid);
	if (!p)
		return 0;
	struct sync_entry e = *p;
	__u16 func = bpf_get_attach_cookie(ctx);
	if (e.func != func)
		return 0;
	bpf_map_delete_elem(&sync_calls, &pid_tgid);
	/* Whatever cuStreamEndCapture returned, the capture is over; a failed begin began
	 * none. */
	if (func == PW_FN_cuStreamEndCapture || func == PW_FN_cuStreamEndCapture_ptsz ||
	    (func >= PW_FN_cuStreamBeginCapture &&
	     func <= PW_FN_cuStreamBeginCaptureToGraph_ptsz && PT_REGS_RC(ctx) != 0)) {
		capture_ends(pid_tgid >> 32, dl_stream(e.arg0, func));
		return 0;
	}
	/* CUDA_SUCCESS: the stream or event is complete, the record made, the capture begun. */
	if (PT_REGS_RC(ctx) != 0)
		return 0;
	struct dl_match m = {
		.tgid = pid_tgid >> 32,
		.tid = (__u32)pid_tgid,
		.gen = thread_gen(pid_tgid),
		.max_seq = ~0ULL,
		.func = func,
	};
	switch (func) {
	case PW_FN_cuEventRecord:
	case PW_FN_cuEventRecord_ptsz:
	case PW_FN_cuEventRecordWithFlags:
	case PW_FN_cuEventRecordWithFlags_ptsz: {
		struct ev_key k = { .tgid = m.tgid, .event = e.arg0 };
		if (capturing(m.tgid)) {
			/* Perhaps a captured record: the event completes nothing until recorded
			 * again outside a capture. */
			bpf_map_delete_elem(&ev_records, &k);
			return 0;
		}
		struct ev_record r = {
			.stream = dl_stream(e.arg1, func),
			.seq = dl_next_seq(),
			.gen = m.gen,
			.tid = m.tid,
		};
		bpf_map_update_elem(&ev_records, &k, &r, BPF_ANY);
		return 0;
	}
	case PW_FN_cuEventSynchronize:
	case PW_FN_cuEventQuery: {
		struct ev_key k = { .tgid = m.tgid, .event = e.arg0 };
		struct ev_record *r = bpf_map_lookup_elem(&ev_records, &k);
		if (!r)
			return 0;
		m.mode = DL_STREAM;
		m.stream = r->stream;
		m.max_seq = r->seq;
		m.gen = r->gen;
		m.tid = r->tid;
		break;
	}
	case PW_FN_cuCtxSynchronize:
		m.mode = DL_CTX;
		break;
	case PW_FN_cuCtxSynchronize_v2:
		/* cuCtxSynchronize_v2(CUcontext ctx) (CUDA 13; cudart 13's cudaDeviceSynchronize
		 * calls it with the context cuCtxGetCurrent just gave): NULL is the current
		 * context, as cuCtxSynchronize; another handle completes this thread's
		 * default-stream downloads only when it is the context this thread made current
		 * at their generation (else it may be another context's work that finished). */
		if (e.arg0 != 0 && !thread_ctx_is(pid_tgid, m.gen, e.arg0))
			return 0;
		m.mode = DL_CTX;
		break;
	default:
		/* cuStreamSynchronize, cuStreamQuery and their _ptsz forms. */
		m.mode = DL_STREAM;
		m.stream = dl_stream(e.arg0, func);
		break;
	}
	dl_complete(&m);
	return 0;
}

/* cuEventDestroy_v2(CUevent): its record is forgotten (the handle may come back). */
SEC("uprobe")
int BPF_KPROBE(event_destroy, __u64 event)
{
	__u32 tgid = current_tgid();
	if (!is_traced(tgid))
		return 0;
	struct ev_key k = { .tgid = tgid, .event = event };
	bpf_map_delete_elem(&ev_records, &k);
	return 0;
}

/* cuStreamDestroy_v2(CUstream): downloads pending on it are given up (its work goes on,
 * and its handle may be a new stream's). */
SEC("uprobe")
int BPF_KPROBE(stream_destroy, __u64 stream)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32))
		return 0;
	/* Its default-stream handles name no stream to destroy; be safe all the same. */
	dl_drop(pid_tgid >> 32, stream, stream <= 2);
	return 0;
}

/* cuCtxSetCurrent, cuCtxPushCurrent_v2, cuCtxPopCurrent_v2: the thread's default streams
 * may be another context's from now on (a new generation); cuCtxDestroy_v2 and the primary
 * context's release and reset (entry): also every pending download of the process is given
 * up (it may have been that context's). */
SEC("uprobe")
int ctx_change(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	int names = func == PW_FN_cuCtxSetCurrent || func == PW_FN_cuCtxPushCurrent_v2;
	__u64 named = names ? PT_REGS_PARM1(ctx) : 0;
	/* Making current the context already known current changes no default stream: the
	 * generation stays (a runtime that sets its device again and again completes its
	 * downloads all the same). */
	struct thread_ctx *was = bpf_map_lookup_elem(&ctx_gens, &pid_tgid);
	if (named != 0 && was && was->ctx == named)
		return 0;
	/* The context made current, noted at the entry: a cuCtxSetCurrent that then fails
	 * with a context that exists fails only when the driver does not work at all (not
	 * initialized, deinitialized), and then no synchronization succeeds either. */
	struct thread_ctx t = {
		.gen = dl_next_seq(),
		.ctx = named,
	};
	/* A change that cannot be noted (map full) gives up the process's pending downloads
	 * too: one issued before it must not be completed by a call after it. */
	int noted = bpf_map_update_elem(&ctx_gens, &pid_tgid, &t, BPF_ANY) == 0;
	if (noted && (names || func == PW_FN_cuCtxPopCurrent_v2))
		return 0;
	dl_drop(pid_tgid >> 32, 0, 1);
	return 0;
}

/* cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) and _ptds: direction from the
 * addresses, in user space. */
SEC("uprobe")
int BPF_KPROBE(copy_unified, __u64 dst, __u64 src, __u64 n)
{
	return emit_copy(ctx, dst, src, n, 0, PW_MEM_UNIFIED, PW_MEM_UNIFIED, 0);
}

/* cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) and _ptsz */
SEC("uprobe")
int BPF_KPROBE(copy_unified_async, __u64 dst, __u64 src, __u64 n, __u64 stream)
{
	return emit_copy(ctx, dst, src, n, stream, PW_MEM_UNIFIED, PW_MEM_UNIFIED, 1);
}

/* cuMemcpyHtoA_v2(CUarray dst, size_t dstOffset, const void *src, size_t n) and _ptds */
SEC("uprobe")
int BPF_KPROBE(copy_htoa, __u64 array, __u64 offset, __u64 src, __u64 n)
{
	return emit_copy(ctx, 0, src, n, 0, PW_MEM_ARRAY, PW_MEM_HOST, 0);
}

/* cuMemcpyHtoAAsync_v2(CUarray dst, size_t dstOffset, const void *src, size_t n, CUstream) */
SEC("uprobe")
int BPF_KPROBE(copy_htoa_async, __u64 array, __u64 offset, __u64 src, __u64 n, __u64 stream)
{
	return emit_copy(ctx, 0, src, n, stream, PW_MEM_ARRAY, PW_MEM_HOST, 1);
}

/* cuMemcpyAtoH_v2(void *dst, CUarray src, size_t srcOffset, size_t n) and _ptds */
SEC("uprobe")
int BPF_KPROBE(copy_atoh, __u64 dst, __u64 array, __u64 offset, __u64 n)
{
	return emit_copy(ctx, dst, 0, n, 0, PW_MEM_HOST, PW_MEM_ARRAY, 0);
}

/* cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t srcOffset, size_t n, CUstream) */
SEC("uprobe")
int BPF_KPROBE(copy_atoh_async, __u64 dst, __u64 array, __u64 offset, __u64 n, __u64 stream)
{
	return emit_copy(ctx, dst, 0, n, stream, PW_MEM_HOST, PW_MEM_ARRAY, 1);
}

/* CUDA_MEMCPY2D (cuda.h), 128 bytes. */
struct cu_memcpy2d {
	__u64 srcXInBytes;
	__u64 srcY;
	__u32 srcMemoryType;
	__u32 _pad0;
	__u64 srcHost;
	__u64 srcDevice;
	__u64 srcArray;
	__u64 srcPitch;
	__u64 dstXInBytes;
	__u64 dstY;
	__u32 dstMemoryType;
	__u32 _pad1;
	__u64 dstHost;
	__u64 dstDevice;
	__u64 dstArray;
	__u64 dstPitch;
	__u64 WidthInBytes;
	__u64 Height;
};

/* CUDA_MEMCPY3D (cuda.h), 200 bytes. */
struct cu_memcpy3d {
	__u64 srcXInBytes;
	__u64 srcY;
	__u64 srcZ;
	__u64 srcLOD;
	__u32 srcMemoryType;
	__u32 _pad0;
	__u64 srcHost;
	__u64 srcDevice;
	__u64 srcArray;
	__u64 reserved0;
	__u64 srcPitch;
	__u64 srcHeight;
	__u64 dstXInBytes;
	__u64 dstY;
	__u64 dstZ;
	__u64 dstLOD;
	__u32 dstMemoryType;
	__u32 _pad1;
	__u64 dstHost;
	__u64 dstDevice;
	__u64 dstArray;
	__u64 reserved1;
	__u64 dstPitch;
	__u64 dstHeight;
	__u64 WidthInBytes;
	__u64 Height;
	__u64 Depth;
};

/* First byte of one side of a 2D/3D copy: host pointer for host memory, device (unified)
 * pointer for device or unified memory, 0 for arrays. */
static __always_inline __u64 side_start(__u32 type, __u64 host, __u64 device, __u64 x, __u64 y,
					__u64 z, __u64 pitch, __u64 height)
{
	__u64 base;
	if (type == PW_MEM_HOST)
		base = host;
	else if (type == PW_MEM_DEVICE || type == PW_MEM_UNIFIED)
		base = device;
	else
		return 0;
	return base + x + y * pitch + z * pitch * height;
}

static __always_inline int emit_copy_2d(struct pt_regs *ctx, __u64 desc, __u64 stream,
					__u8 is_async)
{
	if (!cuda_traced(current_tgid()))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	count_hit(func);
	struct cu_memcpy2d c;
	if (bpf_probe_read_user(&c, sizeof(c), (void *)desc)) {
		count(PW_CNT_USER_READ_FAILED);
		return 0;
	}
	__u64 dst = side_start(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, c.dstY, 0,
			       c.dstPitch, 0);
	__u64 src = side_start(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, c.srcY, 0,
			       c.srcPitch, 0);
	return send_copy(ctx, func, dst, src, c.WidthInBytes * c.Height, stream, c.dstMemoryType,
			 c.srcMemoryType, is_async);
}

static __always_inline int emit_copy_3d(struct pt_regs *ctx, __u64 desc, __u64 stream,
					__u8 is_async)
{
	if (!cuda_traced(current_tgid()))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	count_hit(func);
	struct cu_memcpy3d c;
	if (bpf_probe_read_user(&c, sizeof(c), (void *)desc)) {
		count(PW_CNT_USER_READ_FAILED);
		return 0;
	}
	__u64 dst = side_start(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, c.dstY,
			       c.dstZ, c.dstPitch, c.dstHeight);
	__u64 src = side_start(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, c.srcY,
			       c.srcZ, c.srcPitch, c.srcHeight);
	return send_copy(ctx, func, dst, src, c.WidthInBytes * c.Height * c.Depth, stream,
			 c.dstMemoryType, c.srcMemoryType, is_async);
}

/* cuMemcpy2D_v2(const CUDA_MEMCPY2D *), cuMemcpy2DUnaligned_v2, and their _ptds */
SEC("uprobe")
int BPF_KPROBE(copy_2d, __u64 desc)
{
	return emit_copy_2d(ctx, desc, 0, 0);
}

/* cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *, CUstream) and _ptsz */
SEC("uprobe")
int BPF_KPROBE(copy_2d_async, __u64 desc, __u64 stream)
{
	return emit_copy_2d(ctx, desc, stream, 1);
}

/* cuMemcpy3D_v2(const CUDA_MEMCPY3D *) and _ptds */
SEC("uprobe")
int BPF_KPROBE(copy_3d, __u64 desc)
{
	return emit_copy_3d(ctx, desc, 0, 0);
}

/* cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *, CUstream) and _ptsz */
SEC("uprobe")
int BPF_KPROBE(copy_3d_async, __u64 desc, __u64 stream)
{
	return emit_copy_3d(ctx, desc, stream, 1);
}

/* ---- allocations: entry remembers the arguments, return reports ------------------------ */

static __always_inline int remember_call(struct pt_regs *ctx, __u64 out_ptr, __u64 out_pitch,
					 __u64 len, __u32 flags, int want_runtime_site)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!cuda_traced(pid_tgid >> 32))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	count_hit(func);
	struct pending_call *outer = bpf_map_lookup_elem(&pending, &pid_tgid);
	if (outer && PT_REGS_SP(ctx) < outer->entry_sp) {
		/* An entry point called from inside another probed one: the outer call
		 * reports when it returns. (Not deeper: the outer entry is stale, or this is
		 * a tail call; it is replaced.) */
		if (outer->depth < 255)
			outer->depth++;
		return 0;
	}
	struct pending_call call = {};
	call.out_ptr = out_ptr;
	call.out_pitch = out_pitch;
	call.len = len;
	call.flags = flags;
	call.func = func;
	call.call_site = entry_return_address(ctx);
	call.entry_sp = PT_REGS_SP(ctx);
	call.site_source = PW_SITE_DRIVER;
	if (want_runtime_site) {
		/* Inside cudaMallocHost & co.? Their caller is the application's call site, if
		 * that frame is still live: its return address still sits where it was. */
		__u32 tid = (__u32)pid_tgid;
		struct runtime_frame *rf = bpf_map_lookup_elem(&runtime_frames, &tid);
		if (rf && rf->sp > PT_REGS_SP(ctx)) {
			__u64 still = 0;
			if (!bpf_probe_read_user(&still, sizeof(still), (void *)rf->sp) &&
			    still == rf->ret) {
				call.call_site = rf->ret;
				call.site_source = PW_SITE_RUNTIME;
			}
		}
	}
	if (bpf_map_update_elem(&pending, &pid_tgid, &call, BPF_ANY))
		count(PW_CNT_PENDING_FULL);
	return 0;
}

static __always_inline int report_return(struct pt_regs *ctx, __u16 kind)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct pending_call *call = bpf_map_lookup_elem(&pending, &pid_tgid);
	if (!call) {
		if (is_traced(pid_tgid >> 32))
			count(PW_CNT_RETURN_WITHOUT_ENTRY);
		return 0;
	}
	/* The return of a nested call (its stack pointer is below the outer call's). */
	if (call->depth && PT_REGS_SP(ctx) < call->entry_sp + 8) {
		call->depth--;
		return 0;
	}
	struct pw_range_event *e = reserve(sizeof(*e));
	if (e) {
		fill_header(&e->h, kind, call->func);
		e->result = (__s32)PT_REGS_RC(ctx);
		e->flags = call->flags;
		e->call_site = call->call_site;
		e->site_source = call->site_source;
		__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
		e->len = call->len;
		e->addr = 0;
		if (kind == PW_EV_HOST_REGISTER) {
			e->addr = call->out_ptr;
		} else if (e->result == 0) {
			__u64 addr = 0;
			if (bpf_probe_read_user(&addr, sizeof(addr), (void *)call->out_ptr))
				count(PW_CNT_USER_READ_FAILED);
			e->addr = addr;
			if (call->out_pitch) {
				__u64 pitch = 0;
				if (bpf_probe_read_user(&pitch, sizeof(pitch), (void *)call->out_pitch))
					count(PW_CNT_USER_READ_FAILED);
				e->len = pitch * call->len;
			}
		}
		e->stack_sp = 0;
		e->stack_len = 0;
		e->site_dev = 0;
		e->site_ino = 0;
		e->site_offset = 0;
		e->_pad1 = 0;
		e->nframes = 0;
		e->py.nframes = 0;
		e->py.status = PW_PY_NONE;
		int urgent = 0;
		/* Right after the return: the chain starts at the caller's next instruction. */
		if (kind != PW_EV_DEV_ALLOC && cfg_alloc_stacks) {
			e->nframes = user_frames(ctx, e->frames);
			urgent = py_capture(&e->py);
		}
		/* Host ranges need a call site: placed now, and when the runtime did not give
		 * one, the stack too (the caller's frames are intact right after the return). */
		if (kind != PW_EV_DEV_ALLOC) {
			place_site(e);
			if (call->site_source != PW_SITE_RUNTIME)
				read_stack(e, PT_REGS_SP(ctx));
		}
		submit(e, urgent);
	}
	bpf_map_delete_elem(&pending, &pid_tgid);
	return 0;
}

/* cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) */
SEC("uprobe")
int BPF_KPROBE(host_alloc_entry, __u64 pp, __u64 bytesize, __u32 flags)
{
	return remember_call(ctx, pp, 0, bytesize, flags, 1);
}

/* cuMemAllocHost_v2(void **pp, size_t bytesize) */
SEC("uprobe")
int BPF_KPROBE(alloc_host_entry, __u64 pp, __u64 bytesize)
{
	return remember_call(ctx, pp, 0, bytesize, 0, 1);
}

SEC("uretprobe")
int host_alloc_return(struct pt_regs *ctx)
{
	return report_return(ctx, PW_EV_HOST_ALLOC);
}

/* cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) */
SEC("uprobe")
int BPF_KPROBE(host_register_entry, __u64 p, __u64 bytesize, __u32 flags)
{
	return remember_call(ctx, p, 0, bytesize, flags, 1);
}

SEC("uretprobe")
int host_register_return(struct pt_regs *ctx)
{
	return report_return(ctx, PW_EV_HOST_REGISTER);
}

/* cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize), cuMemAllocAsync(dptr, bytesize, stream) */
SEC("uprobe")
int BPF_KPROBE(dev_alloc_entry, __u64 dptr, __u64 bytesize)
{
	return remember_call(ctx, dptr, 0, bytesize, 0, 0);
}

/* cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
 * unsigned int elementSize) */
SEC("uprobe")
int BPF_KPROBE(dev_alloc_pitch_entry, __u64 dptr, __u64 ppitch, __u64 width, __u64 height)
{
	return remember_call(ctx, dptr, ppitch, height, 0, 0);
}

SEC("uretprobe")
int dev_alloc_return(struct pt_regs *ctx)
{
	return report_return(ctx, PW_EV_DEV_ALLOC);
}

/* ---- releases: one hit each, at entry ------------------------------------------------- */

static __always_inline int emit_release(__u16 kind, __u16 func, __u64 addr, __u64 len,
					__u64 call_site)
{
	count_hit(func);
	struct pw_release_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, kind, func);
	e->addr = addr;
	e->len = len;
	e->call_site = call_site;
	submit(e, 0);
	return 0;
}

/* cuMemFreeHost(void *p) */
SEC("uprobe")
int BPF_KPROBE(host_free, __u64 p)
{
	if (!cuda_traced(current_tgid()))
		return 0;
	return emit_release(PW_EV_HOST_FREE, bpf_get_attach_cookie(ctx), p, 0,
			    entry_return_address(ctx));
}

/* cuMemHostUnregister(void *p) */
SEC("uprobe")
int BPF_KPROBE(host_unregister, __u64 p)
{
	if (!cuda_traced(current_tgid()))
		return 0;
	return emit_release(PW_EV_HOST_UNREGISTER, bpf_get_attach_cookie(ctx), p, 0,
			    entry_return_address(ctx));
}

/* cuMemFree_v2(CUdeviceptr p), cuMemFreeAsync(CUdeviceptr p, CUstream) */
SEC("uprobe")
int BPF_KPROBE(dev_free, __u64 p)
{
	if (!cuda_traced(current_tgid()))
		return 0;
	return emit_release(PW_EV_DEV_FREE, bpf_get_attach_cookie(ctx), p, 0,
			    entry_return_address(ctx));
}

/* ---- runtime: the application's call site for host allocations ----------------------- */

/* cudaMallocHost, cudaHostAlloc, cudaHostRegister (shared libcudart or static in the
 * executable): remember who called, for the driver call made inside. */
SEC("uprobe")
int runtime_alloc_entry(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!cuda_traced(pid_tgid >> 32))
		return 0;
	count_hit(bpf_get_attach_cookie(ctx));
	struct runtime_frame rf = {
		.ret = entry_return_address(ctx),
		.sp = PT_REGS_SP(ctx),
	};
	__u32 tid = (__u32)pid_tgid;
	bpf_map_update_elem(&runtime_frames, &tid, &rf, BPF_ANY);
	return 0;
}

/* ---- the malloc family (only with `--malloc`): blocks at or above a size ----------------- */
/* libc's, and the same programs on the entry points of allocators linked into a program or
 * library (jemalloc, mimalloc: probes.rs maps each symbol to the program of its signature). */
/*
 * A uprobe is a trap per call, whatever the size: these probes are attached only when asked
 * for. The size filter runs here, so that small blocks cost the trap and one comparison,
 * and make no event. Calls made inside a reported call (realloc calling malloc) are not
 * reported again; mmaps made inside it are not reported either.
 */

static __always_inline int malloc_enter(struct pt_regs *ctx, __u64 size, __u64 out_ptr,
					__u64 old_ptr)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	count_hit(func);
	struct malloc_call *outer = bpf_map_lookup_elem(&malloc_calls, &pid_tgid);
	if (outer) {
		/* A nested call (deeper stack), or a stale entry whose return was missed. */
		if (PT_REGS_SP(ctx) < outer->entry_sp) {
			outer->depth++;
			return 0;
		}
		bpf_map_delete_elem(&malloc_calls, &pid_tgid);
	}
	if (size < cfg_malloc_min_bytes && !old_ptr)
		return 0;
	struct malloc_call call = {
		.size = size,
		.out_ptr = out_ptr,
		.old_ptr = old_ptr,
		.entry_sp = PT_REGS_SP(ctx),
		.func = func,
	};
	if (bpf_map_update_elem(&malloc_calls, &pid_tgid, &call, BPF_ANY))
		count(PW_CNT_PENDING_FULL);
	return 0;
}

/* Reports the end of a reported block (free, or realloc moving it). */
static __always_inline void malloc_released(__u16 func, __u64 ptr, __u64 call_site)
{
	struct malloc_block key = { .tgid = current_tgid(), .ptr = ptr };
	if (!bpf_map_lookup_elem(&malloc_live, &key))
		return;
	bpf_map_delete_elem(&malloc_live, &key);
	struct pw_release_event *e = reserve(sizeof(*e));
	if (!e)
		return;
	fill_header(&e->h, PW_EV_MALLOC_FREE, func);
	e->addr = ptr;
	e->len = 0;
	e->call_site = call_site;
	submit(e, 0);
}

SEC("uprobe")
int BPF_KPROBE(malloc_entry, __u64 size)
{
	return malloc_enter(ctx, size, 0, 0);
}

SEC("uprobe")
int BPF_KPROBE(calloc_entry, __u64 n, __u64 size)
{
	/* On overflow calloc fails: nothing to report (0 is below any threshold). The check
	 * uses 32-bit halves: BPF has no 128-bit multiply. */
	__u64 a = n > size ? n : size, b = n > size ? size : n, total = 0;
	if ((a >> 32) == 0) {
		total = a * b;
	} else if ((b >> 32) == 0) {
		__u64 hi = (a >> 32) * b, lo = (a & 0xffffffffULL) * b;
		__u64 sum = (hi << 32) + lo;
		if ((hi >> 32) == 0 && sum >= lo)
			total = sum;
	}
	return malloc_enter(ctx, total, 0, 0);
}

/* realloc(ptr, size): the old block is followed only when it was reported. */
SEC("uprobe")
int BPF_KPROBE(realloc_entry, __u64 ptr, __u64 size)
{
	struct malloc_block key = { .tgid = current_tgid(), .ptr = ptr };
	__u64 old = (ptr && bpf_map_lookup_elem(&malloc_live, &key)) ? ptr : 0;
	return malloc_enter(ctx, size, 0, old);
}

SEC("uprobe")
int BPF_KPROBE(posix_memalign_entry, __u64 pp, __u64 align, __u64 size)
{
	return malloc_enter(ctx, size, pp, 0);
}

/* aligned_alloc(align, size), memalign(align, size) */
SEC("uprobe")
int BPF_KPROBE(memalign_entry, __u64 align, __u64 size)
{
	return malloc_enter(ctx, size, 0, 0);
}

SEC("uprobe")
int BPF_KPROBE(valloc_entry, __u64 size)
{
	return malloc_enter(ctx, size, 0, 0);
}

/* With `--dwarf-stacks`: the registers and up to PW_UNWIND_STACK_BYTES of the user stack
 * from sp, as a record of their own just before the allocation's (user space unwinds them
 * with .eh_frame). Near the top of the stack a smaller window is tried. */
static __always_inline void emit_unwind(struct pt_regs *ctx)
{
	/* Allocations before stacks: while the ring is half full, no stack copy (the
	 * allocation keeps its frame-pointer chain), so that a burst of allocations does not
	 * crowd out their own records. */
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) * 2 >
	    bpf_ringbuf_query(&events, BPF_RB_RING_SIZE))
		return;
	struct pw_unwind_event *u = reserve(sizeof(*u));
	if (!u)
		return;
	fill_header(&u->h, PW_EV_UNWIND, 0);
	u->ip = PT_REGS_IP(ctx);
	u->sp = PT_REGS_SP(ctx);
	u->bp = PT_REGS_FP(ctx);
	u->_pad0 = 0;
	u->len = 0;
	if (!bpf_probe_read_user(u->stack, PW_UNWIND_STACK_BYTES, (void *)u->sp))
		u->len = PW_UNWIND_STACK_BYTES;
	else if (!bpf_probe_read_user(u->stack, 4096, (void *)u->sp))
		u->len = 4096;
	else if (!bpf_probe_read_user(u->stack, 512, (void *)u->sp))
		u->len = 512;
	submit(u, 0);
}

SEC("uretprobe")
int malloc_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct malloc_call *found = bpf_map_lookup_elem(&malloc_calls, &pid_tgid);
	if (!found)
		return 0;
	if (found->depth && PT_REGS_SP(ctx) < found->entry_sp + 8) {
		found->depth--;
		return 0;
	}
	struct malloc_call call = *found;
	bpf_map_delete_elem(&malloc_calls, &pid_tgid);
	__u64 ret = PT_REGS_RC(ctx);
	__u64 addr = ret;
	/* posix_memalign and its allocators' forms: the block is written to out_ptr. */
	if (call.out_ptr) {
		addr = 0;
		if ((int)ret == 0 &&
		    bpf_probe_read_user(&addr, sizeof(addr), (void *)call.out_ptr))
			count(PW_CNT_USER_READ_FAILED);
	}
	/* The caller's return address: at a return, the word just below the stack pointer. */
	__u64 call_site = PT_REGS_IP(ctx);
	if (call.old_ptr && addr) {
		if (addr == call.old_ptr && call.size >= cfg_malloc_min_bytes) {
			/* Resized in place: still the same block (its size is not followed). */
			return 0;
		}
		malloc_released(call.func, call.old_ptr, call_site);
	}
	if (!addr || call.size < cfg_malloc_min_bytes)
		return 0;
	struct malloc_block key = { .tgid = pid_tgid >> 32, .ptr = addr };
	if (bpf_map_update_elem(&malloc_live, &key, &call.size, BPF_ANY))
		count(PW_CNT_PENDING_FULL);
	/* The registers and stack for unwinding go first: user space has them when the
	 * allocation's record arrives (records are consumed in reservation order). */
	if (cfg_alloc_stacks && cfg_dwarf_stacks)
		emit_unwind(ctx);
	struct pw_range_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, PW_EV_MALLOC, call.func);
	e->addr = addr;
	e->len = call.size;
	e->call_site = call_site;
	e->flags = 0;
	e->result = 0;
	e->site_source = PW_SITE_DRIVER;
	__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
	e->stack_sp = 0;
	e->stack_len = 0;
	e->site_dev = 0;
	e->site_ino = 0;
	e->site_offset = 0;
	e->_pad1 = 0;
	e->nframes = 0;
	e->py.nframes = 0;
	e->py.status = PW_PY_NONE;
	int urgent = 0;
	if (cfg_alloc_stacks) {
		e->nframes = user_frames(ctx, e->frames);
		urgent = py_capture(&e->py);
	}
	place_site(e);
	read_stack(e, PT_REGS_SP(ctx));
	submit(e, urgent);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(free_entry, __u64 ptr)
{
	if (!ptr || !is_traced(current_tgid()))
		return 0;
	__u16 func = bpf_get_attach_cookie(ctx);
	count_hit(func);
	malloc_released(func, ptr, entry_return_address(ctx));
	return 0;
}

/* ---- syscalls: large anonymous mappings, and library loads ------------------------------ */

/* Records as /sys/kernel/tracing/events/syscalls/.../format lays them out. */
struct tp_sys_enter_mmap {
	__u64 common;
	__s32 syscall_nr;
	__u32 _pad0;
	__u64 addr;
	__u64 len;
	__u64 prot;
	__u64 flags;
	__u64 fd;
	__u64 off;
};

struct tp_sys_exit {
	__u64 common;
	__s32 syscall_nr;
	__u32 _pad0;
	__s64 ret;
};

struct tp_sys_enter_munmap {
	__u64 common;
	__s32 syscall_nr;
	__u32 _pad0;
	__u64 addr;
	__u64 len;
};

static __always_inline int tid_ignored(__u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid;
	return bpf_map_lookup_elem(&ignored_tids, &tid) != 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int on_mmap_enter(struct tp_sys_enter_mmap *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32))
		return 0;
	count_hit(PW_FN_sys_mmap);
	__u64 rw = PROT_READ | PROT_WRITE;
	int anon_rw = (ctx->flags & MAP_ANONYMOUS) && (ctx->prot & rw) == rw &&
		      !(ctx->flags & MAP_STACK) && ctx->len >= cfg_min_mmap_bytes;
	int exec_file = !(ctx->flags & MAP_ANONYMOUS) && (ctx->prot & PROT_EXEC);
	if (!anon_rw && !exec_file)
		return 0;
	/* Inside a CUDA allocation, or a malloc the malloc probes report: that allocation's
	 * own event covers its memory. */
	if (anon_rw && (bpf_map_lookup_elem(&pending, &pid_tgid) ||
			bpf_map_lookup_elem(&malloc_calls, &pid_tgid)))
		return 0;
	if (anon_rw && tid_ignored(pid_tgid))
		return 0;
	struct mmap_args args = {
		.len = ctx->len,
		.flags = ctx->flags,
		.exec_file = exec_file,
	};
	if (bpf_map_update_elem(&mmap_calls, &pid_tgid, &args, BPF_ANY))
		count(PW_CNT_PENDING_FULL);
	return 0;
}

/* The user stack pointer of the current task at the syscall. */
static __always_inline __u64 user_sp(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	__u64 sp = 0;
	if (bpf_probe_read_kernel(&sp, sizeof(sp), &regs->rsp))
		return 0;
	return sp;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int on_mmap_exit(struct tp_sys_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct mmap_args *found = bpf_map_lookup_elem(&mmap_calls, &pid_tgid);
	if (!found)
		return 0;
	struct mmap_args args = *found;
	bpf_map_delete_elem(&mmap_calls, &pid_tgid);
	if (ctx->ret < 0 && ctx->ret > -4096)
		return 0;
	if (args.exec_file) {
		struct pw_proc_event *p = reserve(sizeof(*p));
		if (!p)
			return 0;
		fill_header(&p->h, PW_EV_EXEC_MAP, PW_FN_sys_mmap);
		p->child = 0;
		p->_pad0 = 0;
		p->addr = ctx->ret;
		p->len = args.len;
		proc_ident(p);
		submit(p, 1);
		return 0;
	}
	struct pw_range_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, PW_EV_MMAP, PW_FN_sys_mmap);
	e->addr = ctx->ret;
	e->len = args.len;
	e->call_site = 0;
	e->flags = (__u32)args.flags;
	e->result = 0;
	e->site_source = PW_SITE_NONE;
	__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
	e->site_dev = 0;
	e->site_ino = 0;
	e->site_offset = 0;
	e->_pad1 = 0;
	/* From a syscall tracepoint the chain starts in the mmap wrapper (libc). */
	e->nframes = 0;
	e->py.nframes = 0;
	e->py.status = PW_PY_NONE;
	int urgent = 0;
	if (cfg_alloc_stacks) {
		e->nframes = user_frames(ctx, e->frames);
		urgent = py_capture(&e->py);
	}
	read_stack(e, user_sp());
	submit(e, urgent);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_munmap")
int on_munmap(struct tp_sys_enter_munmap *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32))
		return 0;
	if (ctx->len < cfg_min_mmap_bytes || tid_ignored(pid_tgid))
		return 0;
	return emit_release(PW_EV_MUNMAP, PW_FN_sys_munmap, ctx->addr, ctx->len, 0);
}

/* ---- page faults (opt-in: user space loads this program only when asked) --------------- */

struct tp_page_fault_user {
	__u64 common;
	__u64 address;
	__u64 ip;
	__u64 error_code;
};

SEC("tracepoint/exceptions/page_fault_user")
int on_page_fault(struct tp_page_fault_user *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_traced(pid_tgid >> 32) || tid_ignored(pid_tgid))
		return 0;
	count_hit(PW_FN_page_fault_user);
	struct pw_fault_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, PW_EV_PAGE_FAULT, PW_FN_page_fault_user);
	e->addr = ctx->address;
	e->ip = ctx->ip;
	e->error_code = ctx->error_code;
	submit(e, 0);
	return 0;
}

/* ---- process life: follow children, forget the dead ------------------------------------ */

static __always_inline int follow_child(__u32 parent_tgid, __u32 child_tgid)
{
	if (!is_traced(parent_tgid) && !bpf_map_lookup_elem(&spawners, &parent_tgid))
		return 0;
	__u8 one = 1;
	if (bpf_map_update_elem(&traced_tgids, &child_tgid, &one, BPF_ANY)) {
		count(PW_CNT_TGID_MAP_FULL);
		return 0;
	}
	/* A child of a Python process runs the same interpreter at the same addresses: its
	 * first events have Python frames too. */
	struct pw_py_proc *py = bpf_map_lookup_elem(&py_procs, &parent_tgid);
	if (py) {
		struct pw_py_proc copy = *py;
		bpf_map_update_elem(&py_procs, &child_tgid, &copy, BPF_ANY);
	}
	count_hit(PW_FN_sched_process_fork);
	struct pw_proc_event *p = reserve(sizeof(*p));
	if (!p)
		return 0;
	fill_header(&p->h, PW_EV_PROC_FORK, PW_FN_sched_process_fork);
	p->child = child_tgid;
	p->_pad0 = 0;
	p->addr = 0;
	p->len = 0;
	proc_ident(p);
	submit(p, 1);
	return 0;
}

/* With BTF: the child's tgid tells a new process from a new thread. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork_btf, struct task_struct *parent, struct task_struct *child)
{
	if (child->pid != child->tgid)
		return 0;
	return follow_child(parent->tgid, child->tgid);
}

/* Without BTF (fallback): a new thread is also reported here; its tid is added, which is
 * harmless (no process has that tgid) and removed when it exits. */
struct tp_sched_process_fork {
	__u64 common;
	__u32 parent_comm_loc;
	__s32 parent_pid;
	__u32 child_comm_loc;
	__s32 child_pid;
};

SEC("tracepoint/sched/sched_process_fork")
int on_fork_tp(struct tp_sched_process_fork *ctx)
{
	return follow_child(current_tgid(), ctx->child_pid);
}

struct tp_sched_process_exit {
	__u64 common;
	char comm[16];
	__s32 pid;
	__s32 prio;
	__u8 group_dead;
};

SEC("tracepoint/sched/sched_process_exit")
int on_exit(struct tp_sched_process_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u32 tid = (__u32)pid_tgid;
	/* A fallback fork hook may have added a thread id: forget it too. */
	if (tid != tgid)
		bpf_map_delete_elem(&traced_tgids, &tid);
	if (!is_traced(tgid))
		return 0;
	bpf_map_delete_elem(&runtime_frames, &tid);
	bpf_map_delete_elem(&pending, &pid_tgid);
	bpf_map_delete_elem(&mmap_calls, &pid_tgid);
	bpf_map_delete_elem(&dtoh_calls, &pid_tgid);
	bpf_map_delete_elem(&sync_calls, &pid_tgid);
	bpf_map_delete_elem(&ctx_gens, &pid_tgid);
	if (!ctx->group_dead)
		return 0;
	/* Its pending downloads go (user space counts them unknown at the exit record). */
	dl_drop(tgid, 0, 1);
	bpf_map_delete_elem(&traced_tgids, &tgid);
	bpf_map_delete_elem(&capture_counts, &tgid);
	count_hit(PW_FN_sched_process_exit);
	struct pw_proc_event *p = reserve(sizeof(*p));
	if (!p)
		return 0;
	fill_header(&p->h, PW_EV_PROC_EXIT, PW_FN_sched_process_exit);
	p->child = 0;
	p->_pad0 = 0;
	p->addr = 0;
	p->len = 0;
	proc_ident(p);
	submit(p, 1);
	return 0;
}

struct tp_sched_process_exec {
	__u64 common;
	__u32 filename_loc;
	__s32 pid;
	__s32 old_pid;
};

SEC("tracepoint/sched/sched_process_exec")
int on_exec(struct tp_sched_process_exec *ctx)
{
	if (!is_traced(current_tgid()))
		return 0;
	count_hit(PW_FN_sched_process_exec);
	/* A new program: the old one's pending downloads go (unknown in user space). */
	dl_drop(current_tgid(), 0, 1);
	struct pw_proc_event *p = reserve(sizeof(*p));
	if (!p)
		return 0;
	fill_header(&p->h, PW_EV_PROC_EXEC, PW_FN_sched_process_exec);
	p->child = 0;
	p->_pad0 = 0;
	p->addr = 0;
	p->len = 0;
	proc_ident(p);
	submit(p, 1);
	return 0;
}
