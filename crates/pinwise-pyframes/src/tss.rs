//! Which `pthread_key_t` maps a thread to its `PyThreadState`.
//!
//! CPython keeps the key in a `Py_tss_t` (`{int _is_initialized; pthread_key_t _key;}`)
//! inside `_PyRuntime`, at an offset that [`crate::layout`] gives per minor version. That
//! structure is internal and may move in a patch release, so the key is only trusted once
//! a thread's value for it is a thread state of the main interpreter; if the `Py_tss_t`
//! at the expected offset fails that check, the `Py_tss_t`-shaped words within
//! [`SEARCH_RADIUS`] bytes of it are tried, nearest first.

use crate::mem::{plausible, Memory};

/// How far from the expected offset a moved `Py_tss_t` is looked for (bytes each way).
pub const SEARCH_RADIUS: usize = 512;
/// The most `pthread_key_t` values glibc has (`PTHREAD_KEYS_MAX`); larger is garbage.
pub const PTHREAD_KEYS_MAX: u32 = 1024;

/// Looks for the thread-state key around `expected` (the address of the `Py_tss_t` the
/// layout names). `value(key)` is this thread's value for a key (`pthread_getspecific`);
/// a key is accepted when its value `ts` is readable and `*(ts + tstate_interp) == main`.
/// Returns the key and this thread's thread state. No allocation.
pub fn find_key<M: Memory>(
    mem: &M,
    expected: usize,
    tstate_interp: usize,
    main: usize,
    value: impl Fn(u32) -> usize,
) -> Option<(u32, usize)> {
    let accept = |tss: &[u8]| -> Option<(u32, usize)> {
        let initialised = i32::from_ne_bytes(tss[0..4].try_into().ok()?);
        let key = u32::from_ne_bytes(tss[4..8].try_into().ok()?);
        if initialised != 1 || key >= PTHREAD_KEYS_MAX {
            return None;
        }
        let ts = value(key);
        if ts == 0 || mem.read_u64(ts.wrapping_add(tstate_interp))? != main as u64 {
            return None;
        }
        Some((key, ts))
    };
    let mut window = [0u8; 2 * SEARCH_RADIUS + 8];
    let base = expected.saturating_sub(SEARCH_RADIUS);
    if !plausible(base, window.len()) || !mem.read(base, &mut window) {
        // Too close to the end of a mapping for the window: the expected place only.
        let mut tss = [0u8; 8];
        return if mem.read(expected, &mut tss) {
            accept(&tss)
        } else {
            None
        };
    }
    let at = expected - base;
    for distance in (0..=SEARCH_RADIUS).step_by(4) {
        let below = if distance == 0 {
            None
        } else {
            at.checked_sub(distance)
        };
        for off in [Some(at + distance), below] {
            let Some(off) = off else { continue };
            if off + 8 > window.len() {
                continue;
            }
            if let Some(found) = accept(&window[off..off + 8]) {
                return Some(found);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::FakeMemory;

    const RUNTIME: usize = 0x1000_0000;
    const MAIN: usize = 0x2000_0000;
    const TSTATE: usize = 0x3000_0000;

    fn memory(tss_at: usize, key: u32) -> FakeMemory {
        let mut mem = FakeMemory::default();
        mem.put(RUNTIME, vec![0; 4096]);
        mem.set(RUNTIME + tss_at, &1i32.to_ne_bytes());
        mem.set(RUNTIME + tss_at + 4, &key.to_ne_bytes());
        mem.put(TSTATE, vec![0; 64]);
        mem.set_u64(TSTATE + 16, MAIN as u64);
        mem
    }

    fn value(key: u32) -> usize {
        if key == 7 {
            TSTATE
        } else {
            0
        }
    }

    #[test]
    fn the_key_at_the_expected_offset_is_taken() {
        let mem = memory(1544, 7);
        assert_eq!(
            find_key(&mem, RUNTIME + 1544, 16, MAIN, value),
            Some((7, TSTATE))
        );
    }

    #[test]
    fn a_key_moved_by_a_patch_release_is_found_nearby() {
        for shift in [8isize, -8, 24, -200, 508] {
            let at = (1544 + shift) as usize;
            let mem = memory(at, 7);
            assert_eq!(
                find_key(&mem, RUNTIME + 1544, 16, MAIN, value),
                Some((7, TSTATE)),
                "moved by {shift}"
            );
        }
        // Too far away: not found.
        let mem = memory(1544 + 1024, 7);
        assert_eq!(find_key(&mem, RUNTIME + 1544, 16, MAIN, value), None);
    }

    #[test]
    fn keys_whose_values_are_not_thread_states_of_the_main_interpreter_are_refused() {
        // A thread with no value (not a Python thread).
        let mem = memory(1544, 9);
        assert_eq!(find_key(&mem, RUNTIME + 1544, 16, MAIN, value), None);
        // A value that points at something else.
        let mem = memory(1544, 7);
        assert_eq!(find_key(&mem, RUNTIME + 1544, 16, MAIN + 8, value), None);
        // Uninitialised or absurd keys are never looked up.
        let mut mem = memory(1544, 7);
        mem.set(RUNTIME + 1544, &0i32.to_ne_bytes());
        assert_eq!(find_key(&mem, RUNTIME + 1544, 16, MAIN, value), None);
        let mem = memory(1544, 5000);
        let looked = std::cell::Cell::new(false);
        let r = find_key(&mem, RUNTIME + 1544, 16, MAIN, |k| {
            looked.set(looked.get() || k >= PTHREAD_KEYS_MAX);
            0
        });
        assert_eq!(r, None);
        assert!(!looked.get());
        // A runtime that cannot be read at all.
        assert_eq!(find_key(&mem, 0x10, 16, MAIN, value), None);
    }
}
