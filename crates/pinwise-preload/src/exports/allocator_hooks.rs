//! Inline hooks on the allocators linked into the executable ([`crate::linked_alloc`]):
//! when the library is loaded, each entry point the executable's symbol table names is
//! patched ([`crate::inline_patch`]: its first instructions are moved to a trampoline and
//! replaced by a jump here) to enter a detour that passes the caller's return address on,
//! as the exported hooks' trampolines do, and calls the original through the trampoline.
//!
//! Patching happens in the library's constructor, before the program's own constructors
//! and `main`, while the process has one thread; the patches stay for the life of the
//! process (a forked child inherits them). An entry point that cannot be patched is left
//! alone and counted. Nothing is patched with `PINWISE_MALLOC_HOOKS=0`.
//!
//! Cost: a call below the threshold costs the jump to the relay, its load of the threshold
//! and a compare (allocations), or one load while no block of these allocators is tracked
//! (frees), on top of the original: the relay makes the detour's untracked-path test itself
//! ([`bypass`]) and falls through into the trampoline, so such a call never enters the
//! detour. Otherwise the relay jumps to the detour, which tests again and records.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::guard::Inside;
use crate::inline_patch::{Arg, Bypass};
use crate::linked_alloc::{requested, Kind, ENTRY_POINTS, HOOKED, HOOK_FAILURES, LIVE, SET_FULL};
use crate::malloc::{after_release, before_release, is_tracked_size, record_alloc};

const N: usize = ENTRY_POINTS.len();

/// The original of each entry point (its trampoline), by index in [`ENTRY_POINTS`].
static REAL: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];

type Original3 = unsafe extern "C" fn(usize, usize, usize) -> usize;
type OriginalInt = unsafe extern "C" fn(usize, usize, usize) -> c_int;

#[inline(always)]
fn original(i: usize) -> usize {
    REAL[i].load(Ordering::Relaxed)
}

/// A block of an allocation recorded: also in the set, so that its free is recorded.
#[inline]
fn allocated(caller: usize, p: usize, n: usize) {
    if record_alloc(caller, p as *mut c_void, n) && !LIVE.insert(p) {
        SET_FULL.fetch_add(1, Ordering::Relaxed);
    }
}

/// A free of block `p` from `caller` being recorded, if the block is tracked.
#[inline]
fn releasing(caller: usize, p: usize) -> Option<crate::malloc::Release> {
    // Most frees are of blocks never tracked: one probe of the set (inlined) says so,
    // before anything else is read.
    if !LIVE.contains(p) {
        return None;
    }
    before_release(caller, p as *mut c_void, |p, _| {
        if LIVE.remove(p as usize) {
            usize::MAX
        } else {
            0
        }
    })
}

/// The detour of an allocating entry point (every kind but [`Kind::Free`] and
/// [`Kind::PosixMemalign`]).
///
/// # Safety
/// Entered from the patched entry point `i` with its caller's arguments.
unsafe extern "C" fn alloc_detour(
    a0: usize,
    a1: usize,
    a2: usize,
    caller: usize,
    i: usize,
) -> usize {
    let kind = ENTRY_POINTS[i].1;
    // SAFETY: the original of entry point `i`, set before it was patched.
    let f = unsafe { std::mem::transmute::<usize, Original3>(original(i)) };
    let n = requested(kind, a0, a1, a2).unwrap_or(0);
    if kind == Kind::Realloc {
        // SAFETY: the caller's arguments.
        return unsafe { realloc_detour(f, a0, n, a1, a2, caller) };
    }
    if !is_tracked_size(n) {
        // SAFETY: the original, with the caller's arguments.
        return unsafe { f(a0, a1, a2) };
    }
    let p = {
        // Entry points of this allocator called inside it record nothing.
        let _nested = Inside::enter();
        // SAFETY: as above.
        unsafe { f(a0, a1, a2) }
    };
    if p != 0 {
        allocated(caller, p, n);
    }
    p
}

/// `realloc(p, n, ...)`: the old block's free when it was tracked, the new block when it
/// is large enough.
///
/// # Safety
/// `f` is the original, `(p, a1, a2)` the caller's arguments.
#[inline]
unsafe fn realloc_detour(
    f: Original3,
    p: usize,
    n: usize,
    a1: usize,
    a2: usize,
    caller: usize,
) -> usize {
    let old_tracked = p != 0 && !LIVE.is_empty() && LIVE.contains(p);
    if !old_tracked && !is_tracked_size(n) {
        // SAFETY: the original, with the caller's arguments.
        return unsafe { f(p, a1, a2) };
    }
    let release = if old_tracked {
        releasing(caller, p)
    } else {
        None
    };
    let q = {
        let _nested = Inside::enter();
        // SAFETY: as above.
        unsafe { f(p, a1, a2) }
    };
    if let Some(r) = release {
        // A failed realloc keeps the old block.
        let moved = !(q == 0 && n != 0);
        after_release(r, p as *mut c_void, moved);
        if !moved && !LIVE.insert(p) {
            SET_FULL.fetch_add(1, Ordering::Relaxed);
        }
    }
    if q != 0 && is_tracked_size(n) {
        allocated(caller, q, n);
    }
    q
}

/// The detour of a freeing entry point. Returns the original's return register (a free
/// returns nothing; its caller ignores it), so that the untracked case is a tail call.
///
/// # Safety
/// Entered from the patched entry point `i` with its caller's arguments.
#[inline(always)]
unsafe fn free_detour(a0: usize, a1: usize, a2: usize, caller: usize, i: usize) -> usize {
    // SAFETY: the original of entry point `i`, set before it was patched.
    let f = unsafe { std::mem::transmute::<usize, Original3>(original(i)) };
    // A block never tracked (most frees): one probe of the set, then the original,
    // without the frame the recording path needs.
    if LIVE.contains(a0) {
        // SAFETY: the original, with the caller's arguments.
        unsafe { free_tracked(f, a0, a1, a2, caller) }
    } else {
        // SAFETY: as above.
        unsafe { f(a0, a1, a2) }
    }
}

/// [`free_detour`] for a block in the tracked set: its free is recorded.
///
/// # Safety
/// `f` is the original, `(a0, a1, a2)` the caller's arguments.
#[cold]
#[inline(never)]
unsafe extern "C" fn free_tracked(
    f: Original3,
    a0: usize,
    a1: usize,
    a2: usize,
    caller: usize,
) -> usize {
    let release = releasing(caller, a0);
    // SAFETY: the caller's contract.
    unsafe { f(a0, a1, a2) };
    if let Some(r) = release {
        after_release(r, a0 as *mut c_void, true);
    }
    0
}

/// The detour of `posix_memalign(out, align, size)`.
///
/// # Safety
/// Entered from the patched entry point `i` with its caller's arguments.
unsafe extern "C" fn posix_memalign_detour(
    a0: usize,
    a1: usize,
    a2: usize,
    caller: usize,
    i: usize,
) -> c_int {
    // SAFETY: the original of entry point `i`, set before it was patched.
    let f = unsafe { std::mem::transmute::<usize, OriginalInt>(original(i)) };
    if !is_tracked_size(a2) {
        // SAFETY: the original, with the caller's arguments.
        return unsafe { f(a0, a1, a2) };
    }
    let rc = {
        let _nested = Inside::enter();
        // SAFETY: as above.
        unsafe { f(a0, a1, a2) }
    };
    if rc == 0 {
        // SAFETY: on success the allocator wrote the block to `out` (the caller's).
        let p = unsafe { *(a0 as *const usize) };
        if p != 0 {
            allocated(caller, p, a2);
        }
    }
    rc
}

/// Every entry point's detour: by its kind. Returns a word for every kind (a free's is
/// ignored by its caller, `posix_memalign`'s `int` is in the low half).
///
/// # Safety
/// Entered from the patched entry point `i` with its caller's arguments.
#[inline(always)]
unsafe fn detour(a0: usize, a1: usize, a2: usize, caller: usize, i: usize) -> usize {
    // SAFETY (all three): the caller's contract.
    match ENTRY_POINTS[i].1 {
        Kind::Free => unsafe { free_detour(a0, a1, a2, caller, i) },
        Kind::PosixMemalign => unsafe {
            posix_memalign_detour(a0, a1, a2, caller, i) as u32 as usize
        },
        _ => unsafe { alloc_detour(a0, a1, a2, caller, i) },
    }
}

/// [`detour`] for entry point `I`: its kind and original known when compiled (no lookup
/// of the kind, a constant address for the original).
///
/// # Safety
/// Entered from the patched entry point `I` with its caller's arguments.
unsafe extern "C" fn detour_at<const I: usize>(
    a0: usize,
    a1: usize,
    a2: usize,
    caller: usize,
) -> usize {
    // SAFETY: the caller's contract.
    unsafe { detour(a0, a1, a2, caller, I) }
}

/// The entry of detour `$i`: the caller's return address into the 4th argument register,
/// then [`detour_at`] (which returns to the caller).
macro_rules! entry {
    ($i:literal) => {{
        #[unsafe(naked)]
        unsafe extern "C" fn entry() {
            core::arch::naked_asm!(
                "endbr64",
                "mov rcx, qword ptr [rsp]",
                "jmp {detour}",
                detour = sym detour_at::<$i>,
            )
        }
        entry as unsafe extern "C" fn()
    }};
}

static ENTRIES: [unsafe extern "C" fn(); N] = [
    entry!(0),
    entry!(1),
    entry!(2),
    entry!(3),
    entry!(4),
    entry!(5),
    entry!(6),
    entry!(7),
    entry!(8),
    entry!(9),
    entry!(10),
    entry!(11),
    entry!(12),
    entry!(13),
    entry!(14),
    entry!(15),
    entry!(16),
    entry!(17),
    entry!(18),
    entry!(19),
    entry!(20),
    entry!(21),
    entry!(22),
    entry!(23),
    entry!(24),
    entry!(25),
    entry!(26),
    entry!(27),
    entry!(28),
    entry!(29),
    entry!(30),
    entry!(31),
];

/// Patches the entry points the executable defines (when the library is loaded, after
/// the threshold is known; nothing when malloc tracking is off). An executable with such
/// an allocator's free gets no in-place registration of its memory either way.
pub fn install() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let names: Vec<&str> = ENTRY_POINTS.iter().map(|(n, _)| *n).collect();
    let Ok(symbols) = crate::elf::function_symbols(&exe, &names) else {
        return;
    };
    if symbols.is_empty() {
        return;
    }
    // Blocks of these allocators are freed without glibc's `free`, and pinning's
    // unregistration before a free asks glibc's `malloc_usable_size`: the program's
    // memory is not registered in place (as for a program defining its own `free`). Not
    // for CPython's own copy of mimalloc (3.13 links it, for its free-threaded build):
    // Python objects go through pymalloc and glibc there.
    let cpython = pinwise_pyframes::interpreter().is_some();
    if symbols.iter().any(|s| {
        ENTRY_POINTS
            .iter()
            .any(|(n, k)| *n == s.name && *k == Kind::Free && !(cpython && n.starts_with("mi_")))
    }) {
        crate::state::set_free_hooks_effective(false);
    }
    if crate::malloc::min_tracked() == usize::MAX {
        return;
    }
    // Patching rewrites the first bytes of functions another thread could be running: only
    // while this is the process's one thread (another library's constructor may have
    // started threads before this one runs). Otherwise nothing is patched, and counted.
    if !single_threaded() {
        HOOK_FAILURES.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "pinwise: not hooking the executable's allocator: the process already runs \
             several threads"
        );
        return;
    }
    let bias = crate::stack::main_program_bias();
    let mut patcher = crate::inline_patch::Patcher::default();
    let mut patched: Vec<usize> = Vec::new();
    for s in &symbols {
        let Some(i) = ENTRY_POINTS.iter().position(|(n, _)| *n == s.name) else {
            continue;
        };
        let target = bias.wrapping_add(s.value as usize);
        // An alias of an entry point patched already (mimalloc's malloc and mi_malloc); an
        // indirect function, whose symbol is its resolver, not the function.
        if s.size == 0 || s.ifunc || patched.contains(&target) {
            continue;
        }
        // SAFETY: `target` is the entry of a function of the executable of `s.size`
        // bytes (its symbol table says so) with the signature of kind
        // `ENTRY_POINTS[i].1`; the detour entry `i` takes that signature and calls the
        // original through `REAL[i]`, stored before the entry is patched (the store comes
        // first: see `hook_one`); its bypass tests hold only where the detour would only
        // forward (`bypass`). The process has one thread (checked above:
        // `single_threaded`), so no thread runs the bytes being replaced.
        match unsafe { hook_one(&mut patcher, target, s.size as usize, i) } {
            Ok(()) => {
                patched.push(target);
                HOOKED.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                HOOK_FAILURES.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("pinwise: not hooking {} in the executable: {e}", s.name);
            }
        }
    }
    // The pages stay mapped for the life of the process.
    std::mem::forget(patcher);
}

/// Whether this process runs one thread (`/proc/self/task` has one entry; `false` when it
/// cannot be read).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.count() == 1)
}

/// The tests under which entry point `kind` goes straight to its original: exactly the
/// conditions under which its detour would only forward the call (a size below the
/// threshold, no tracked block to free; the threshold is `usize::MAX` when tracking is off).
pub fn bypass(kind: Kind) -> Vec<Bypass> {
    let min = crate::malloc::min_tracked_word();
    let live = LIVE.count_word();
    let below = |arg| Bypass::ArgBelow { arg, word: min };
    match kind {
        Kind::Malloc => vec![below(Arg::Rdi)],
        Kind::Aligned => vec![below(Arg::Rsi)],
        Kind::PosixMemalign => vec![below(Arg::Rdx)],
        // A product that overflows fails the call: the detour records nothing either.
        Kind::Calloc => vec![Bypass::ProductBelow { word: min }],
        Kind::Realloc => vec![Bypass::Zero { word: live }, below(Arg::Rsi)],
        Kind::Free => vec![Bypass::Zero { word: live }],
    }
}

/// Patches entry point `i` at `target`.
///
/// # Safety
/// As [`crate::inline_patch::Patcher::hook`].
unsafe fn hook_one(
    patcher: &mut crate::inline_patch::Patcher,
    target: usize,
    size: usize,
    i: usize,
) -> Result<(), crate::inline_patch::PatchError> {
    // The trampoline's address is known before the entry is patched: `hook` writes it
    // first, then the jump; so `REAL[i]` is set from the value `hook` returns before any
    // call can reach the detour only if nothing calls the function in between, which the
    // caller's contract gives (one thread, and this code does not call it).
    // SAFETY: the caller's contract.
    let original = unsafe {
        patcher.hook(
            target as u64,
            size,
            ENTRIES[i] as usize as u64,
            &bypass(ENTRY_POINTS[i].1),
        )?
    };
    REAL[i].store(original as usize, Ordering::Release);
    Ok(())
}

const _: () = assert!(N == 32, "one entry!() per entry point");
