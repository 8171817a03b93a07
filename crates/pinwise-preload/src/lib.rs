//! pinwise-preload: pinwise for unmodified programs, through `LD_PRELOAD`.
//!
//! `pinwise run -- CMD` starts `CMD` with `libpinwise_preload.so` preloaded. The library
//! intercepts the CUDA host-memory entry points at both levels, serves pinned requests from
//! pinwise's pool (pinwise-alloc), promotes hot pageable buffers in place, and records every
//! host allocation's life in a `MemHistory` (pinwise-core), written as a history (appended
//! to every second while the program runs, completed at exit) and at exit as a profile for
//! `--mode use`.
//!
//! # How calls are reached
//!
//! - **Runtime** (`cudaMallocHost`, `cudaHostAlloc`, `cudaFreeHost`, `cudaHostRegister`,
//!   `cudaHostUnregister`, `cudaMemcpy*`): exported here, forwarded to the next definition
//!   (the program's shared cudart). They note the application's call site for the driver
//!   hooks underneath, and observe the call themselves if no driver hook saw it.
//! - **Driver** (`cuMemHostAlloc`, `cuMemAllocHost_v2`, `cuMemFreeHost`,
//!   `cuMemHostRegister(_v2)`, `cuMemHostUnregister`, the host copies in their sync/async,
//!   `_ptds`/`_ptsz`, 2D/3D forms, the pointer queries, and the calls that end streams and
//!   contexts: `cuStreamDestroy(_v2)`, `cuCtxDestroy(_v2)`,
//!   `cuDevicePrimaryCtxRelease(_v2)`, `cuDevicePrimaryCtxReset(_v2)`): exported here for programs
//!   linked with `-lcuda`, and handed out by the intercepted `dlsym` and `cuGetProcAddress`
//!   (all versions) to whoever looks them up: cudart, shared or static, finds every driver
//!   entry point that way. Everything else is forwarded untouched.
//!
//! # Pageable allocations and stacks
//!
//! The malloc family (`malloc`, `calloc`, `realloc`, `reallocarray`, `free`,
//! `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`) is interposed too: allocations
//! of at least `PINWISE_MIN_TRACKED` bytes are recorded as pageable allocations with their
//! call site, call number and call stack, and their frees, so that every pageable buffer a
//! copy touches has a record of its own ([`malloc`]). Recorded allocations, pinned ones
//! included, carry up to 32 frames: native ones (`unwind`) and, in a CPython 3.10-3.13
//! process, the thread's Python frames (`file:line in function`, read from the
//! interpreter's memory by pinwise-pyframes, never by calling into it; they replace the
//! interpreter's own native frames). Native names are not looked up in the process:
//! `pinwise run` stores them in the history after the program ended. An allocator linked
//! into the executable (a Rust program on jemalloc or mimalloc) is patched in place and
//! recorded the same way ([`linked_alloc`]); memory from `mmap` directly is not tracked
//! this way.
//!
//! # Configuration (environment; `pinwise run` sets these)
//!
//! | variable | meaning |
//! |---|---|
//! | `PINWISE_MODE` | `adaptive` (default), `profile` or `use` |
//! | `PINWISE_PROFILE` | profile to write (`profile`) or follow (`use`) |
//! | `PINWISE_HISTORY` | history to write (`.json`: JSON, else binary); appended to while the program runs (see `persist`) |
//! | `PINWISE_FLUSH_EVERY` | how often the history is appended to while the program runs: `1s` (default), `250ms`, ... between 10 ms and 1 h, or `0`/`off` (only at the end) |
//! | `PINWISE_STATS_DIR` | directory for this process's statistics (`<pid>.json`) |
//! | `PINWISE_BUDGET` | pinned budget (`8G`, `512MiB`, `25%`); default a quarter of RAM, and where the program pins 1 MiB or more itself, no more than its own peak (`pinwise_core::decide::ceiling`); given, pinwise may pin up to it beside the program's own |
//! | `PINWISE_CALIBRATION` | calibration CSV for the cost model (default: this GPU's cached calibration, else the built-in H200 table) |
//! | `PINWISE_CACHE_DIR` | where the cached calibrations are (default: `$XDG_CACHE_HOME/pinwise`, else `~/.cache/pinwise`) |
//! | `PINWISE_LOG` | `stderr` or a file: where to log (nothing is logged otherwise) |
//! | `PINWISE_LOG_LEVEL` | `error`, `warn` (default), `info`, `debug`, `trace` |
//! | `PINWISE_DUMP_SIGNAL` | a signal (`USR2`, `SIGUSR1`, `12`) that writes the outputs now |
//! | `PINWISE_KEEP_PINNED` | `1`: serve every pinned request pinned (still pooled) |
//! | `PINWISE_PROMOTE_PAGEABLE` | `0`: never register the program's pageable buffers |
//! | `PINWISE_DRIVER_HOOKS` | `0`: hand out the real driver entry points (runtime hooks only) |
//! | `PINWISE_PAGEABLE_CACHE` | bytes of freed pageable mappings the allocator keeps warm for reuse (size grammar of `PINWISE_BUDGET`; default an eighth of RAM; emptied while `MemAvailable` is low) |
//! | `PINWISE_MIN_TRACKED` | malloc-family allocations of at least this size are recorded (`64K` default; the size grammar of `PINWISE_BUDGET`) |
//! | `PINWISE_MALLOC_HOOKS` | `0`: the malloc-family hooks only forward |
//! | `PINWISE_STACKS` | `0`: recorded allocations carry their call site, no stack |
//! | `PINWISE_TIMESTAMPS` | `counter` (default: the CPU's counter where it is the clock's own, converted in the drain; see `stamp`) or `clock` (`CLOCK_MONOTONIC` read at each event) |
//! | `PINWISE_FINGERPRINT` | `off` (default), `sampled` or `full`: fingerprint the bytes of host-device copies to find redundant transfers (see `fingerprint`) |
//! | `PINWISE_FINGERPRINT_CHECK` | in sampled mode, the fraction of copies also hashed in full to measure the sampled fingerprint's error (`0.0625` default; copies above 4 MiB only with `1`) |
//! | `PINWISE_POOL` | the socket of the node's pinned pool (`pinwise pool serve`): large pinned requests are served from it and their copies done by the service (see `pool`); unset: no pool |
//! | `PINWISE_POOL_MIN` | pinned requests of at least this size go to the pool (`8M` default; a size such as `8MiB`, `8M`, `8388608`, at least 1 byte: the grammar of `--pool-min`, `pinwise_core::pool_use::parse_min_bytes`) |
//! | `PINWISE_DISABLE` | `1`: forward everything, record nothing |
//! | `PINWISE_LAUNCHER_PID` | set by `pinwise run`: its children write the main output paths |
//!
//! Processes other than the one `pinwise run` started (forked children, programs it runs)
//! write their outputs to `<stem>.<pid>.<ext>` next to the main paths, and only if they saw
//! any CUDA host-memory call.
//!
//! # Safety inside someone else's process
//!
//! No allocation or lock where a hook can re-enter itself (`free`, `realloc`, `munmap` read a
//! few words of pinwise's (and, on glibc's heap once a block is tracked, the block's chunk
//! header) while nothing is promoted, and touch no thread-local storage then; giving
//! a registration back from them touches only pinwise's own thread-local guard, which has
//! no destructor and so stays usable while a thread is torn down); events
//! go to per-thread fixed-size rings drained by a background thread; initialization is lazy
//! and is reset in a forked child (`pthread_atfork`); nothing is written to the program's
//! stdout; a panic or a failure inside pinwise turns pinwise off and forwards the call.
//! What CUDA promises stays true: an asynchronous copy on a pageable buffer pinwise
//! registered is done when the call returns (the hook waits for its stream; a copy
//! captured into a CUDA graph runs only when the graph is launched, as plain CUDA does
//! it), a stream capture in progress is never invalidated by pinwise (see the known
//! limits), pointer
//! queries about memory pinwise served are answered as plain CUDA would answer them
//! (registered first; flags and ranges of the allocation, not of the pool), and misuse
//! (a second free, unregistering pinned memory) gets plain CUDA's error. A copy the driver
//! refuses is not in the history (nothing moved; `failed_copies` in the statistics counts it),
//! and a copy is recorded when the driver has accepted it.
//!
//! No handle of the program's outlives what it names: the allocator remembers the streams
//! an allocation was copied on asynchronously (a freed block waits for those copies), so
//! before the program destroys a stream pinwise waits for its work if an allocation still
//! names it and forgets it; before a context is released or destroyed it waits for the copies
//! it tracks and drops its stream and pooled event handles (`streams_forgotten` and
//! `contexts_ended` in the statistics). Freeing memory after destroying the stream it was
//! copied on is what a framework's teardown does (a PJRT client at exit), and passing the
//! dead handle to the real driver may crash the process.
//!
//! At exit, the outputs are written by an `atexit` handler that glibc runs when it
//! finalizes this library (`_dl_fini`: after the program's own `atexit` handlers and the
//! executable's destructors, before the libraries finalized after it, libcuda among them),
//! on a thread of its own: `exit` has destroyed the exiting thread's thread-local storage
//! by then. The state is never freed, so hooks reached later (other threads, destructors of
//! libraries finalized later) still work; their events are counted, not recorded.
//!
//! # Known limits
//!
//! What is not handled, each about the program's own pageable buffers that pinwise
//! registered in place (`PINWISE_PROMOTE_PAGEABLE=0`, `pinwise run --no-promote`, turns
//! that off, and with it all of these):
//!
//! - **Copy forms not hooked**: `cuMemcpyHtoA`/`cuMemcpyAtoH` (and their `Async`, `_ptds`,
//!   `_ptsz` forms), `cuMemcpy3DPeer(Async)`, `cuMemcpyBatchAsync`, `cuMemcpy3DBatchAsync`,
//!   and copies in CUDA graphs built with the graph API. They are not recorded, and on a
//!   registered buffer pinwise neither gives back a registration the copy runs past (the
//!   driver may refuse it) nor waits for an asynchronous one (it may still read or write the
//!   buffer when the call returns, where on pageable memory it would not).
//! - **Stream capture** (CUDA graphs made with `cuStreamBeginCapture`, as
//!   `torch.cuda.graph` does) is handled: before learning from an asynchronous copy the
//!   hook asks `cuStreamIsCapturing` (one driver call per asynchronous copy); a copy on a
//!   capturing stream is forwarded and recorded (`captured_copies` in the statistics), and
//!   nothing is registered, waited for, or recorded as a pool event on its stream. A
//!   registration of pinwise's that a captured copy used stays until the program frees,
//!   reallocates or unmaps the memory (every replay of the graph reads it). pinwise's own
//!   driver calls run with the thread's capture mode relaxed
//!   (`cuThreadExchangeStreamCaptureMode`), so a capture in global mode on another thread
//!   survives a promotion, a registration given back, or a wait. Tested against the CPU
//!   stand-in, which models capture (and replays captured copies); not yet run on a GPU
//!   (`bench/gpu/preload/capture.py`). Not handled: copies in graphs built with the graph
//!   API (not seen, as above) and graph launches (not seen: a captured copy is recorded
//!   once, when captured); a later copy that starts inside a held registration and runs
//!   past its end (pinwise no longer gives that registration back, so the driver may
//!   refuse the copy); the program registering pages of a held registration itself
//!   (pinwise gives its registration back first, as before, so that the program's call
//!   succeeds); a pinned allocation pinwise served that a graph reads, freed while a
//!   launch of that graph may still run (the pool may hand its block out again before the
//!   launch ends), or freed during a capture of a stream it was copied on (no event can be
//!   recorded there: the block is reused at once).
//! - **Pointer queries** about a registered buffer (`cuPointerGetAttribute(s)`,
//!   `cuMemHostGetFlags`, `cuMemHostGetDevicePointer`, `cudaPointerGetAttributes`) answer
//!   as for registered memory, where plain CUDA says the pointer is unknown (so, e.g.,
//!   PyTorch's `is_pinned()` is true for a promoted tensor).
//! - **Memory given back other than by `free`, `realloc`, `reallocarray` or `munmap`**
//!   (`mremap`, `madvise`, `brk`, a raw system call, or an allocator whose entry points
//!   have other names, such as a Rust global allocator on jemalloc or mimalloc) is not seen:
//!   a registration on it stays. Detected (promotion is then off) is only a `free`,
//!   `realloc` or `munmap` that bypasses pinwise's: defined in the executable, or found
//!   before pinwise's in the global scope.
//! - Host-to-host copies are checked on their destination only.
//!
//! A copy flows one way through the modules: `exports` → `hooks` (→ `decode`) → `state` →
//! `pinning` (decide) → `recorder` (record) → `stats`; no module below `hooks` reaches
//! back up to `state` (the `free`/`munmap` work on registrations lives in `hooks::alloc`;
//! the recorder wakes the drain thread it was handed; the copy tally is a `stats` type).
//!
//! | module | idea |
//! |---|---|
//! | [`config`] | the environment, parsed |
//! | [`variants`] | which driver functions are hooked, under which exported names |
//! | [`real`] | finding the real `dlsym`, driver and runtime functions |
//! | [`ring`] | per-thread event rings and their ordered draining |
//! | `stamp` | event stamps: the CPU's counter where it is the clock's own, converted to `CLOCK_MONOTONIC` by the drain; else the clock |
//! | [`promote`] | lock-free tables: promoted ranges and pageable transfer counters |
//! | `recorder` | the history, the drain thread, the output files |
//! | `flush` | the outputs written before a fatal signal or `_exit` ends the process |
//! | `persist` | the history appended to while the program runs (nothing older than the last flush lost on `SIGKILL`) |
//! | `pinning` | the engine behind the hooks and the promotion of pageable buffers |
//! | `pool` | `pinwise run --pool`: large pinned requests served from the node's pinned pool, their copies done by the service, every fallback counted |
//! | `stack` | the application's call site under a statically linked cudart |
//! | [`malloc`] | recording the program's malloc-family allocations at or above a threshold |
//! | `unwind` | call stacks of the application, captured in allocation hooks |
//! | [`elf`] | which functions the executable defines (its own `free`, a static cudart) |
//! | `hooks` | what every intercepted call does: `alloc`, `copy`, `query`, `procaddr`, `runtime`, `context` |
//! | `decode` | what a copy's arguments say it copies (pure: pitched 2D/3D and descriptor decoding) |
//! | `exports` | the exported symbols (thin: a trampoline or a call into `hooks`) |
//! | [`own_memory`] | pinwise's own allocations: mimalloc, out of the program's malloc heap |
//!
// The unit tests leave out the exports (a test binary must not interpose its own `free`),
// and the exports are what use most of the hook machinery.
#![cfg_attr(test, allow(dead_code))]

/// The allocator of pinwise's own Rust allocations: out of the program's heap
/// ([`own_memory`]).
#[global_allocator]
static OWN_MEMORY: own_memory::OwnMemory = own_memory::OwnMemory;

mod async_fp;
mod backend;
mod capture;
pub mod config;
mod crash;
mod cycles;
mod decode;
pub mod elf;
mod fingerprint;
mod flush;
mod guard;
mod hooks;
#[cfg(target_arch = "x86_64")]
pub mod inline_patch;
pub mod linked_alloc;
pub mod malloc;
pub mod own_memory;
mod persist;
mod pinning;
mod pool;
mod pricing;
pub mod promote;
pub mod real;
mod recorder;
pub mod ring;
mod stack;
mod stack_budget;
mod stamp;
mod state;
mod stats;
mod unwind;
pub mod variants;

#[cfg(not(test))]
mod exports;
