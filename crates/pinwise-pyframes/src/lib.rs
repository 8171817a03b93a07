//! pinwise-pyframes: the Python frames (file, line, function) of the calling thread,
//! read from CPython's memory from inside the process, without calling into the
//! interpreter (no C-API call, no GIL) — as py-spy and the eBPF profilers read it, but
//! in-process and for the current thread; and the naming of frames the tracer's BPF
//! programs capture in another process (see "From another process" below).
//!
//! Supported: CPython 3.10, 3.11, 3.12 and 3.13 on 64-bit Linux with glibc (offsets in
//! [`layout`], taken from the headers of 3.10.13, 3.11.7, 3.12.1 and 3.13.0). Run for real
//! (`fixtures/pyframes-probe`) with those four pyenv builds (`libpython3.X.so`) and
//! Debian's `/usr/bin/python3` 3.11.2 (symbols in the executable), with detection on first
//! use and in a preloaded library's constructor; not yet with other patch releases (such as
//! Ubuntu's 3.12.3: `fixtures/pyframes-probe/check.py` checks one without Rust). For 3.13
//! the interpreter's own `_Py_DebugOffsets` must agree with the table, which also refuses
//! free-threaded builds (`python3.13t`); other versions are refused.
//!
//! # Two steps: capture in the hook, resolve later
//!
//! [`capture`] fills a fixed-size [`RawStack`] with (code object address, instruction
//! offset) pairs: no heap allocation, no lock, a `pthread_getspecific` and a few
//! `process_vm_readv` calls (the thread state, the `_PyCFrame` on 3.11/3.12, one per page of
//! frames; just one when the thread captures from where it did last time, see
//! [`walk::Hint`]). About 3-8 µs on the development VM (bench/results/pyframes-cost.md),
//! so for rare events (large allocations, sampled copies), not every call. It is meant for
//! allocation hooks that may run inside `malloc`.
//!
//! A [`Resolver`] later turns the pairs into [`PyFrame`]s (reads `co_filename`,
//! `co_name`, `co_firstlineno`, `co_linetable`; allocates), caching each code object's
//! strings by address. **Staleness:** a captured code address holds no reference to the
//! code object. If the object is freed before resolution (a function compiled and dropped
//! at run time, a module unloaded) its memory may be reused. The resolver re-reads the
//! object's header on every lookup and takes it only if it is still a live code object (type
//! `PyCode_Type`, a reference count of a live object: a freed block's first word is the
//! allocator's free-list link) with the cached filename, name and line-table pointers;
//! otherwise the frame resolves afresh or to `None`. A *new* code object at the same
//! address is read as what it is, so the frame names the wrong function: the staleness test
//! (`fixtures/pyframes-probe`) sees exactly that on 3.10 (a freed function's frame later
//! resolves as one of 20000 code objects compiled since) and `None` on 3.11-3.13. Resolve
//! soon after capture (after the hook returns, or at the next flush) to keep the window
//! small; `def`-level code objects live as long as their module, which covers the frames of
//! a typical training script.
//!
//! # Detection
//!
//! [`interpreter`] looks for `_PyRuntime` once (lazily; `dlsym`, which may allocate: call it
//! once outside hooks, e.g. from a library constructor). [`detected`] and [`capture`]
//! never run the detection, so a hook before it gets `false`, never recursion. The answer is
//! final: a program that loads `libpython` later (an application embedding Python through
//! `dlopen` after the first call) is not seen as Python.
//!
//! # The current thread
//!
//! The thread state comes from the `Py_tss_t` key CPython's `PyGILState` API keeps in
//! `_PyRuntime` (`pthread_getspecific`): it is set for every thread the interpreter
//! created or that called `PyGILState_Ensure`, and stays set while the thread has
//! released the GIL (a ctypes call, a PyTorch operator), which is when native allocations
//! happen. The thread state must point back at the main interpreter, which catches a
//! wrong offset table; subinterpreters' threads give no frames.
//!
//! Lines: the line of the current instruction from the line table; the function's first
//! line when the instruction is not known (a frame being set up).
//!
//! Reports: [`user_frame_index`] picks the innermost frame outside installed packages and
//! the standard library (the line a reader can change).
//!
//! # From another process
//!
//! The tracer (`pinwise-trace`) captures frames in BPF with the offsets of [`layout`] and
//! names them here: [`CodeCache`] over [`ProcessMemory`] (`process_vm_readv` on the traced
//! PID), with [`instr_offset`] for the instruction field BPF read, and
//! [`CodeCache::resolve_frames_remembered`] for frames whose code object is gone by the
//! time the event is read.
//!
//! | module | idea |
//! |---|---|
//! | [`detect`] | finding `_PyRuntime`, the version, the type objects |
//! | [`layout`] | per-version offsets |
//! | [`mem`] | checked reads of this process or another (`process_vm_readv`) |
//! | [`tss`] | the thread-state key, confirmed before use |
//! | [`walk`] | the allocation-free capture |
//! | [`resolve`] | code objects to strings, type- and liveness-checked |
//! | [`linetable`] | line numbers from `co_linetable` (3.10 and 3.11+ formats) |
//! | [`user`] | which frames are the program's own |

pub mod detect;
pub mod layout;
pub mod linetable;
pub mod mem;
pub mod resolve;
pub mod tss;
pub mod user;
pub mod walk;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

pub use layout::Version;
use mem::SelfMemory;
pub use mem::{Memory, ProcessMemory};
use resolve::CodeInfo;
pub use user::{is_library_file, user_frame_index};
pub use walk::{instr_offset, RawFrame, RawStack, MAX_FRAMES};

/// One Python frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// `co_filename`, as the interpreter has it (the path the module was loaded from).
    pub file: String,
    /// Line of the current instruction (the function's first line when unknown).
    pub line: u32,
    /// `co_name`.
    pub function: String,
}

impl fmt::Display for PyFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)
    }
}

/// The CPython found in this process.
#[derive(Debug)]
pub struct Interpreter {
    found: detect::Found,
    /// `pthread_key_t` + 1 once confirmed on some thread (0: not yet).
    key: AtomicUsize,
    /// The main interpreter's address once the runtime has one.
    main_interp: AtomicUsize,
}

/// This thread's value for `key` (`pthread_getspecific`), as an address.
fn getspecific(key: u32) -> usize {
    if key >= tss::PTHREAD_KEYS_MAX {
        return 0;
    }
    // SAFETY: glibc's pthread_getspecific takes no lock, does not allocate and returns NULL
    // for a key below PTHREAD_KEYS_MAX that was never created or was deleted (it checks
    // the key's sequence number); the value is only used as an address to read through
    // the checked reader.
    unsafe { libc::pthread_getspecific(key) as usize }
}

impl Interpreter {
    /// The CPython minor version.
    pub fn version(&self) -> Version {
        self.found.version
    }

    /// The file that defines `_PyRuntime` (the executable or `libpython3.X.so`).
    pub fn object(&self) -> &str {
        &self.found.object
    }

    fn layout(&self) -> &'static layout::Layout {
        self.found.version.layout()
    }

    fn main_interp(&self) -> Option<usize> {
        let m = self.main_interp.load(Ordering::Relaxed);
        if m != 0 {
            return Some(m);
        }
        let m = SelfMemory.read_u64(self.found.runtime + self.layout().runtime_main_interp)?;
        if m == 0 {
            return None;
        }
        self.main_interp.store(m as usize, Ordering::Relaxed);
        Some(m as usize)
    }

    /// This thread's `PyThreadState`, if it has one. Until a key has been confirmed on
    /// some thread, each call looks for it (see [`tss`]); after that, one
    /// `pthread_getspecific`.
    fn thread_state(&self) -> Option<usize> {
        let k = self.key.load(Ordering::Relaxed);
        if k != 0 {
            let ts = getspecific((k - 1) as u32);
            return (ts != 0).then_some(ts);
        }
        let main = self.main_interp()?;
        let expected = self.found.runtime + self.layout().runtime_tss;
        let (key, ts) = tss::find_key(
            &SelfMemory,
            expected,
            self.layout().tstate_interp,
            main,
            getspecific,
        )?;
        self.key.store(key as usize + 1, Ordering::Relaxed);
        Some(ts)
    }

    /// Captures this thread's Python frames (innermost first) into `out`; false when the
    /// thread has no Python thread state or it could not be read. No allocation.
    pub fn capture(&self, max: usize, out: &mut RawStack) -> bool {
        out.clear();
        let (Some(main), Some(ts)) = (self.main_interp(), self.thread_state()) else {
            return false;
        };
        HINT.with(|h| {
            let mut hint = h.get();
            let r = walk::walk_hinted(&SelfMemory, self.layout(), main, ts, max, out, &mut hint);
            h.set(hint);
            r.is_ok()
        })
    }

    /// [`Interpreter::capture`] without this thread's hint (neither used nor updated): the
    /// cost of a capture from a place the thread has not captured from before.
    pub fn capture_cold(&self, max: usize, out: &mut RawStack) -> bool {
        out.clear();
        let (Some(main), Some(ts)) = (self.main_interp(), self.thread_state()) else {
            return false;
        };
        walk::walk(&SelfMemory, self.layout(), main, ts, max, out).is_ok()
    }
}

thread_local! {
    /// This thread's [`walk::Hint`] (const-initialised, no destructor: no allocation).
    static HINT: std::cell::Cell<walk::Hint> = const {
        std::cell::Cell::new(walk::Hint { cframe: 0, page: 0 })
    };
}

static STARTED: AtomicBool = AtomicBool::new(false);
static FOUND: OnceLock<Option<Interpreter>> = OnceLock::new();

/// The CPython in this process, looked for on the first call (which may allocate and
/// takes the dynamic linker's lock: make it outside allocation hooks). While a first
/// call is under way, other (and reentrant) calls get `None` rather than wait.
pub fn interpreter() -> Option<&'static Interpreter> {
    if let Some(found) = FOUND.get() {
        return found.as_ref();
    }
    if STARTED.swap(true, Ordering::AcqRel) {
        return None;
    }
    let found = detect::find();
    if found.is_some() {
        mem::remember_pid();
    }
    let found = found.map(|found| Interpreter {
        found,
        key: AtomicUsize::new(0),
        main_interp: AtomicUsize::new(0),
    });
    let _ = FOUND.set(found);
    FOUND.get().and_then(Option::as_ref)
}

/// The CPython found by an earlier [`interpreter`] call; never looks (one atomic load).
pub fn detected() -> Option<&'static Interpreter> {
    FOUND.get().and_then(Option::as_ref)
}

/// Whether this process runs a supported CPython (looks on the first call).
pub fn is_python_process() -> bool {
    interpreter().is_some()
}

/// Captures the calling thread's Python frames into `out`, without allocating: false when
/// [`interpreter`] has not found one yet or this thread runs no Python.
pub fn capture(out: &mut RawStack) -> bool {
    match detected() {
        Some(interp) => interp.capture(MAX_FRAMES, out),
        None => {
            out.clear();
            false
        }
    }
}

/// The fingerprints of `stack`'s code objects, innermost first (`None` for a frame whose
/// object is no longer a live code object), read as [`Resolver::resolve_stack_memo`] reads
/// them, in one batched read: what tells a code object from another one made later at the
/// same address. Empty when this process runs no CPython the library detected.
pub fn code_fingerprints(stack: &RawStack) -> Vec<Option<[u64; 5]>> {
    let Some(interp) = detected() else {
        return Vec::new();
    };
    CodeCache::fingerprints(
        &SelfMemory,
        interp.layout(),
        &interp.found.types,
        stack.frames(),
    )
}

/// The calling thread's Python frames now, innermost first, at most `max` (≤
/// [`MAX_FRAMES`]); `None` when this is not a Python process or thread. Allocates: not
/// for allocation hooks (use [`capture`] there).
pub fn current_python_frames(max: usize) -> Option<Vec<PyFrame>> {
    let interp = interpreter()?;
    let mut raw = RawStack::new();
    if !interp.capture(max, &mut raw) {
        return None;
    }
    let mut resolver = Resolver::new();
    Some(resolver.resolve_stack(&raw))
}

/// Turns this process's captured frames into [`PyFrame`]s, caching each code object's
/// strings by its address (see the crate docs on staleness).
#[derive(Debug, Default)]
pub struct Resolver {
    cache: CodeCache,
}

/// The most code objects a [`Resolver`] or [`CodeCache`] keeps (the least recently used one
/// makes room).
pub const RESOLVER_CAPACITY: usize = 1 << 16;

impl Resolver {
    /// An empty resolver.
    pub fn new() -> Resolver {
        Resolver::default()
    }

    /// The frame `raw` names, or `None` when this is not a Python process or its code
    /// object is gone.
    pub fn resolve(&mut self, raw: &RawFrame) -> Option<PyFrame> {
        let interp = detected()?;
        self.cache
            .resolve(&SelfMemory, interp.layout(), &interp.found.types, raw)
    }

    /// Every frame of `stack` that still resolves, innermost first. The headers of all
    /// the stack's code objects are checked in one batched read.
    pub fn resolve_stack(&mut self, stack: &RawStack) -> Vec<PyFrame> {
        let Some(interp) = detected() else {
            return Vec::new();
        };
        self.cache.resolve_frames(
            &SelfMemory,
            interp.layout(),
            &interp.found.types,
            stack.frames(),
        )
    }

    /// [`Resolver::resolve_stack`], each frame turned into a `T` by `make` and remembered
    /// in `memo` by (code object, instruction offset): a frame seen before costs a hash
    /// lookup and a clone instead of a line-table decode and fresh strings. The code
    /// objects' headers are still read (one batched read, each object once) and a
    /// remembered `T` is taken only while its object's fingerprint is unchanged, exactly
    /// as the code cache checks its entries.
    pub fn resolve_stack_memo<T: Clone>(
        &mut self,
        stack: &RawStack,
        memo: &mut FrameMemo<T>,
        make: impl FnMut(PyFrame) -> T,
    ) -> Vec<T> {
        let Some(interp) = detected() else {
            return Vec::new();
        };
        self.cache.resolve_frames_memo(
            &SelfMemory,
            interp.layout(),
            &interp.found.types,
            stack.frames(),
            memo,
            make,
        )
    }

    /// Cache entries found replaced by another object since they were read.
    pub fn stale_hits(&self) -> u64 {
        self.cache.stale_hits()
    }
}

/// The most frames a [`FrameMemo`] keeps (the least recently used one makes room).
pub const FRAME_MEMO_CAPACITY: usize = 1 << 14;

/// Frames already named, by (code object address, instruction offset), each with the
/// fingerprint its code object had (see [`Resolver::resolve_stack_memo`]).
#[derive(Debug, Clone)]
pub struct FrameMemo<T> {
    frames: Bounded<(usize, i32), ([u64; 5], T)>,
    stale: u64,
}

impl<T> Default for FrameMemo<T> {
    fn default() -> Self {
        FrameMemo {
            frames: Bounded::new(FRAME_MEMO_CAPACITY),
            stale: 0,
        }
    }
}

/// A map of at most `cap` entries: inserting into a full one evicts the least recently
/// used entry (a lookup counts as a use), so hot entries stay however many cold ones pass
/// through. Allocates as it grows, not up front.
#[derive(Debug, Clone)]
struct Bounded<K: std::hash::Hash + Eq, V> {
    map: lru::LruCache<K, V>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            map: lru::LruCache::unbounded(),
            cap: cap.max(1),
        }
    }

    /// The value under `k`, now the most recently used.
    fn get(&mut self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    /// Puts `v` under `k`, evicting the least recently used entry when full.
    fn insert(&mut self, k: K, v: V) {
        if self.map.len() >= self.cap && !self.map.contains(&k) {
            self.map.pop_lru();
        }
        self.map.put(k, v);
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl<T> FrameMemo<T> {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// Frames remembered now.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Remembered frames found to belong to a replaced code object.
    pub fn stale_hits(&self) -> u64 {
        self.stale
    }
}

/// Code objects' strings by address, for resolving the frames of one interpreter read
/// through any [`mem::Memory`] (this process, or another one: the tracer). Every lookup
/// re-reads the object's header and takes the cached strings only if it is still the same
/// live code object (see the crate docs on staleness).
#[derive(Debug, Clone)]
pub struct CodeCache {
    cache: Bounded<usize, CodeInfo>,
    stale: u64,
}

impl Default for CodeCache {
    fn default() -> Self {
        CodeCache {
            cache: Bounded::new(RESOLVER_CAPACITY),
            stale: 0,
        }
    }
}

impl CodeCache {
    /// An empty cache.
    pub fn new() -> CodeCache {
        CodeCache::default()
    }

    /// The frame `raw` names in the interpreter `mem` holds, or `None` when its code
    /// object is gone.
    pub fn resolve<M: Memory>(
        &mut self,
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        raw: &RawFrame,
    ) -> Option<PyFrame> {
        let fp = resolve::fingerprint(mem, layout, types, raw.code)?;
        self.cached(layout, raw, fp)
            .or_else(|| self.read(mem, layout, types, raw))
    }

    /// Every frame of `frames` that still resolves, in order. The headers of all the code
    /// objects are checked in one batched read.
    pub fn resolve_frames<M: Memory>(
        &mut self,
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        frames: &[RawFrame],
    ) -> Vec<PyFrame> {
        self.resolve_with(mem, layout, types, frames, false)
    }

    /// [`CodeCache::resolve_frames`] for frames captured a while ago, by another process
    /// (the tracer, from BPF): a frame whose code object is no longer there (its memory
    /// unreadable, or no longer a live code object: the interpreter freed it, or the
    /// process exited, since the capture) is named as the object was when this cache last
    /// read it, if it did. The capture proves the object was alive when captured; that it
    /// was the object cached is the same bet the staleness check makes (see the crate
    /// docs), over the time between the cache's reading and the capture.
    pub fn resolve_frames_remembered<M: Memory>(
        &mut self,
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        frames: &[RawFrame],
    ) -> Vec<PyFrame> {
        self.resolve_with(mem, layout, types, frames, true)
    }

    /// The fingerprint of each frame's code object (`None`: not a live code object), from
    /// one batched read of the headers of the distinct objects.
    fn fingerprints<M: Memory>(
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        frames: &[RawFrame],
    ) -> Vec<Option<[u64; 5]>> {
        let len = resolve::header_len(layout);
        // Frames of one function (recursion, a loop of calls) share their code object:
        // read each object once.
        let mut addrs: Vec<usize> = Vec::with_capacity(frames.len());
        let slot: Vec<usize> = frames
            .iter()
            .map(|f| match addrs.iter().position(|&a| a == f.code) {
                Some(i) => i,
                None => {
                    addrs.push(f.code);
                    addrs.len() - 1
                }
            })
            .collect();
        let mut headers = vec![[0u8; 160]; addrs.len()];
        let mut bufs: Vec<&mut [u8]> = headers.iter_mut().map(|h| &mut h[..len]).collect();
        let mut ok = vec![false; addrs.len()];
        mem.read_many(&addrs, &mut bufs, &mut ok);
        let fps: Vec<Option<[u64; 5]>> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                (ok[i] && a.is_multiple_of(8))
                    .then(|| resolve::fingerprint_of(&headers[i], layout, types))
                    .flatten()
            })
            .collect();
        slot.into_iter().map(|i| fps[i]).collect()
    }

    /// [`CodeCache::resolve_frames`] through `memo` (see [`Resolver::resolve_stack_memo`]).
    pub fn resolve_frames_memo<M: Memory, T: Clone>(
        &mut self,
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        frames: &[RawFrame],
        memo: &mut FrameMemo<T>,
        mut make: impl FnMut(PyFrame) -> T,
    ) -> Vec<T> {
        let fps = Self::fingerprints(mem, layout, types, frames);
        let mut out = Vec::with_capacity(frames.len());
        for (raw, fp) in frames.iter().zip(fps) {
            let Some(fp) = fp else { continue };
            let key = (raw.code, raw.instr_offset);
            match memo.frames.get(&key) {
                Some((seen, t)) if *seen == fp => {
                    out.push(t.clone());
                    continue;
                }
                Some(_) => memo.stale += 1,
                None => {}
            }
            let frame = self
                .cached(layout, raw, fp)
                .or_else(|| self.read(mem, layout, types, raw));
            let Some(frame) = frame else { continue };
            let t = make(frame);
            memo.frames.insert(key, (fp, t.clone()));
            out.push(t);
        }
        out
    }

    fn resolve_with<M: Memory>(
        &mut self,
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        frames: &[RawFrame],
        remembered: bool,
    ) -> Vec<PyFrame> {
        let fps = Self::fingerprints(mem, layout, types, frames);
        let mut out = Vec::with_capacity(frames.len());
        for (raw, fp) in frames.iter().zip(fps) {
            let frame = match fp {
                Some(fp) => self
                    .cached(layout, raw, fp)
                    .or_else(|| self.read(mem, layout, types, raw)),
                None if remembered => self
                    .cache
                    .get(&raw.code)
                    .map(|info| info.frame(layout, raw.instr_offset)),
                None => None,
            };
            out.extend(frame);
        }
        out
    }

    /// The cached frame for `raw` if the object there still has fingerprint `fp`.
    fn cached(&mut self, layout: &layout::Layout, raw: &RawFrame, fp: [u64; 5]) -> Option<PyFrame> {
        let info = self.cache.get(&raw.code)?;
        if info.fingerprint == fp {
            return Some(info.frame(layout, raw.instr_offset));
        }
        self.stale += 1;
        None
    }

    /// Reads `raw`'s code object afresh and caches it.
    fn read<M: Memory>(
        &mut self,
        mem: &M,
        layout: &layout::Layout,
        types: &resolve::Types,
        raw: &RawFrame,
    ) -> Option<PyFrame> {
        let info = resolve::read_code(mem, layout, types, raw.code)?;
        let frame = info.frame(layout, raw.instr_offset);
        self.cache.insert(raw.code, info);
        Some(frame)
    }

    /// Code objects cached now.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Cache entries found replaced by another object since they were read.
    pub fn stale_hits(&self) -> u64 {
        self.stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_map_keeps_its_hot_entries_through_churn_and_stays_bounded() {
        let mut m: Bounded<usize, usize> = Bounded::new(32);
        m.insert(0, 100);
        for k in 1..=3_200 {
            m.insert(k, k);
            assert!(m.len() <= 32, "grew to {}", m.len());
            if k % 8 == 0 {
                assert_eq!(m.get(&0), Some(&100), "the hot entry was evicted at {k}");
            }
        }
        assert_eq!(m.len(), 32);
        assert_eq!(m.get(&3_200), Some(&3_200));
        assert_eq!(m.get(&1), None, "the oldest cold entry made room");
        // Putting an entry that is there again evicts nothing.
        m.insert(3_200, 7);
        assert_eq!((m.len(), m.get(&0)), (32, Some(&100)));
        assert!(!m.is_empty());
    }

    #[test]
    fn outside_python_everything_is_none_and_nothing_faults() {
        assert!(!is_python_process());
        assert!(interpreter().is_none());
        assert!(detected().is_none());
        let mut raw = RawStack::new();
        assert!(!capture(&mut raw));
        assert!(raw.frames().is_empty());
        assert_eq!(current_python_frames(32), None);
        let mut r = Resolver::new();
        assert_eq!(
            r.resolve(&RawFrame {
                code: 0xdead_beef,
                instr_offset: 0
            }),
            None
        );
    }

    #[test]
    fn frames_display_as_file_line_in_function() {
        let f = PyFrame {
            file: "train.py".into(),
            line: 88,
            function: "load_batch".into(),
        };
        assert_eq!(f.to_string(), "train.py:88 in load_batch");
    }

    /// The tracer's cache: a code object freed (or a process gone) after it was read is
    /// named as it was read by `resolve_frames_remembered`, never by `resolve_frames`; one
    /// replaced by another live code object is read afresh.
    #[test]
    fn remembered_frames_outlive_their_code_objects_and_replacements_are_reread() {
        use crate::mem::FakeMemory;
        use crate::resolve::tests::{put_code, TYPES};
        let layout = Version::V310.layout();
        let mut mem = FakeMemory::default();
        put_code(
            &mut mem,
            layout,
            0x3000_0000,
            "/srv/train.py",
            "load",
            87,
            &[6, 1],
        );
        let frames = [RawFrame {
            code: 0x3000_0000,
            instr_offset: 2,
        }];
        let want = PyFrame {
            file: "/srv/train.py".into(),
            line: 88,
            function: "load".into(),
        };
        let mut cache = CodeCache::new();
        // Never read: nothing to remember.
        assert!(cache
            .resolve_frames_remembered(&FakeMemory::default(), layout, &TYPES, &frames)
            .is_empty());
        assert_eq!(
            cache.resolve_frames_remembered(&mem, layout, &TYPES, &frames),
            std::slice::from_ref(&want)
        );
        assert_eq!(cache.len(), 1);
        // Freed: the first word becomes a free-list link.
        mem.set_u64(0x3000_0000, 0x5555_5555_a000);
        assert!(cache
            .resolve_frames(&mem, layout, &TYPES, &frames)
            .is_empty());
        assert_eq!(
            cache.resolve_frames_remembered(&mem, layout, &TYPES, &frames),
            std::slice::from_ref(&want)
        );
        // The process is gone: every read fails.
        assert_eq!(
            cache.resolve_frames_remembered(&FakeMemory::default(), layout, &TYPES, &frames),
            [want]
        );
        // Another live code object at the same address: read as what it is.
        let mut other = FakeMemory::default();
        put_code(
            &mut other,
            layout,
            0x3000_0000,
            "/srv/eval.py",
            "score",
            9,
            &[6, 1],
        );
        let got = cache.resolve_frames_remembered(&other, layout, &TYPES, &frames);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (&*got[0].file, &*got[0].function),
            ("/srv/eval.py", "score")
        );
        assert_eq!(cache.stale_hits(), 1);
    }

    /// The preload's memo: a frame named before is taken from it, with one batched read of
    /// the headers and no new naming, while its code object is unchanged; a code object
    /// replaced at the same address is named afresh, a freed one not at all.
    #[test]
    fn remembered_frames_are_checked_against_their_code_objects() {
        use crate::mem::FakeMemory;
        use crate::resolve::tests::{put_code, TYPES};
        let layout = Version::V310.layout();
        let (a, b) = (0x3000_0000, 0x3001_0000);
        let mut mem = FakeMemory::default();
        put_code(&mut mem, layout, a, "/srv/train.py", "load", 87, &[6, 1]);
        put_code(&mut mem, layout, b, "/srv/train.py", "step", 10, &[6, 1]);
        let at = |code, instr_offset| RawFrame { code, instr_offset };
        // Recursion: one code object in several frames.
        let frames = [at(a, 2), at(a, 2), at(b, 0), at(a, 0)];
        let want = CodeCache::new().resolve_frames(&mem, layout, &TYPES, &frames);
        assert_eq!(want.len(), 4);
        let mut cache = CodeCache::new();
        let mut memo = FrameMemo::new();
        let made = std::cell::Cell::new(0);
        let run = |cache: &mut CodeCache, memo: &mut FrameMemo<PyFrame>, mem: &FakeMemory| {
            cache.resolve_frames_memo(mem, layout, &TYPES, &frames, memo, |f| {
                made.set(made.get() + 1);
                f
            })
        };
        assert_eq!(run(&mut cache, &mut memo, &mem), want);
        assert_eq!((memo.len(), made.get()), (3, 3));
        let reads = mem.reads.get();
        assert_eq!(run(&mut cache, &mut memo, &mem), want);
        assert_eq!(made.get(), 3, "every frame came from the memo");
        assert_eq!(
            mem.reads.get() - reads,
            1,
            "one batched read of the headers"
        );
        // Another code object where `a` was.
        let mut mem = FakeMemory::default();
        put_code(&mut mem, layout, a, "/srv/eval.py", "score", 9, &[6, 1]);
        put_code(&mut mem, layout, b, "/srv/train.py", "step", 10, &[6, 1]);
        let got = run(&mut cache, &mut memo, &mem);
        let names: Vec<_> = got.iter().map(|f| (&*f.file, &*f.function)).collect();
        assert_eq!(
            names,
            [
                ("/srv/eval.py", "score"),
                ("/srv/eval.py", "score"),
                ("/srv/train.py", "step"),
                ("/srv/eval.py", "score")
            ]
        );
        assert_eq!(memo.stale_hits(), 2);
        // `b` freed: its frame is left out.
        mem.set_u64(b, 0x5555_5555_a000);
        let got = run(&mut cache, &mut memo, &mem);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|f| &*f.function == "score"));
    }

    #[test]
    fn instruction_fields_become_byte_offsets() {
        let v310 = Version::V310.layout();
        // f_lasti counts 2-byte code units; only the low 32 bits are the field.
        assert_eq!(instr_offset(v310, 0x1000, 5), 10);
        assert_eq!(instr_offset(v310, 0x1000, 0xdead_beef_0000_0007), 14);
        assert_eq!(instr_offset(v310, 0x1000, u64::from(u32::MAX)), -1);
        for v in [Version::V311, Version::V312, Version::V313] {
            let l = v.layout();
            let start = 0x7000_0000 + l.code_adaptive.unwrap();
            assert_eq!(instr_offset(l, 0x7000_0000, start as u64 + 24), 24);
            assert_eq!(instr_offset(l, 0x7000_0000, start as u64 - 2), -1);
            assert_eq!(instr_offset(l, 0x7000_0000, 0), -1);
        }
    }
}
