//! The capture: a thread state's frame chain, as (code object, instruction offset) pairs.
//!
//! Nothing here allocates, takes a lock or calls into the interpreter: the walk reads the
//! thread state and then one frame per step (one [`Memory::read`] each), at most
//! [`MAX_VISITS`] steps, into a fixed-size [`RawStack`]. It is safe to run inside `malloc`.

use crate::layout::{InstrKind, Layout};
use crate::mem::{plausible, Memory};

/// The most frames a [`RawStack`] holds.
pub const MAX_FRAMES: usize = 32;
/// The most frames visited in one walk (shim frames are visited but not kept), so a
/// cycle in a garbage chain ends the walk.
pub const MAX_VISITS: usize = 2 * MAX_FRAMES;
/// The page size assumed for read windows (a smaller real page only makes reads fail
/// over to the next window; 4 KiB on x86-64).
const PAGE: usize = 4096;
/// The most bytes of one frame read.
const MAX_FRAME_SIZE: usize = 128;

/// One captured frame: the code object it ran and where in it.
///
/// The code object's address is only meaningful while the object lives; resolve it (see
/// [`crate::Resolver`]) soon after the capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RawFrame {
    /// Address of the frame's `PyCodeObject`.
    pub code: usize,
    /// Byte offset of the current instruction in the code, or -1 if not known (then the
    /// function's first line is reported).
    pub instr_offset: i32,
}

/// A captured Python stack, innermost frame first, in fixed storage (no heap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStack {
    frames: [RawFrame; MAX_FRAMES],
    len: usize,
    truncated: bool,
}

impl Default for RawStack {
    fn default() -> Self {
        RawStack::new()
    }
}

impl RawStack {
    /// An empty stack.
    pub const fn new() -> RawStack {
        RawStack {
            frames: [RawFrame {
                code: 0,
                instr_offset: 0,
            }; MAX_FRAMES],
            len: 0,
            truncated: false,
        }
    }

    /// The frames captured, innermost (the running function) first.
    pub fn frames(&self) -> &[RawFrame] {
        &self.frames[..self.len]
    }

    /// Whether the chain went on past what was captured (the limit, or an unreadable
    /// frame).
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Empties the stack.
    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }

    fn push(&mut self, f: RawFrame) {
        self.frames[self.len] = f;
        self.len += 1;
    }
}

fn u64_at(buf: &[u8], off: usize) -> usize {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[off..off + 8]);
    u64::from_ne_bytes(b) as usize
}

fn i32_at(buf: &[u8], off: usize) -> i32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[off..off + 4]);
    i32::from_ne_bytes(b)
}

/// The byte offset of a frame's current instruction in its code object `code`, from the
/// frame's instruction field as read (`raw`: 3.10's `f_lasti` in its low 32 bits, else
/// the instruction pointer); -1 when not known (a frame being set up, or garbage).
pub fn instr_offset(layout: &Layout, code: usize, raw: u64) -> i32 {
    match layout.instr_kind {
        InstrKind::LastiIndex => {
            let lasti = raw as u32 as i32;
            if lasti < 0 {
                -1
            } else {
                lasti.checked_mul(2).unwrap_or(-1)
            }
        }
        InstrKind::Pointer => {
            let start = code.wrapping_add(layout.code_adaptive.unwrap_or(0));
            match (raw as usize).checked_sub(start) {
                Some(d) if d <= i32::MAX as usize => d as i32,
                _ => -1,
            }
        }
    }
}

/// Why a walk gave no stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkError {
    /// The thread state could not be read.
    Unreadable,
    /// The thread state does not belong to the main interpreter (a wrong offset table,
    /// a subinterpreter, or garbage).
    ForeignInterpreter,
}

/// Where the last walk on a thread found its `_PyCFrame` and its innermost frame's page:
/// the next walk reads both speculatively, in the same system call as the thread state,
/// and uses them when the thread state still points there (a thread allocating in a loop
/// does, so a capture is one read instead of three). Stale hints cost nothing but the
/// fallback reads: data is only used for the addresses it was read from, at the time of
/// the walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hint {
    /// The `_PyCFrame` address (3.11, 3.12), or 0.
    pub cframe: usize,
    /// The page of the innermost frame, or 0.
    pub page: usize,
}

/// Walks the frames of thread state `tstate` into `out` (at most `max`, capped at
/// [`MAX_FRAMES`]). `main_interp` is the main interpreter's address (0: not checked).
/// An unreadable frame ends the walk with what was read so far, marked truncated.
pub fn walk<M: Memory>(
    mem: &M,
    layout: &Layout,
    main_interp: usize,
    tstate: usize,
    max: usize,
    out: &mut RawStack,
) -> Result<(), WalkError> {
    walk_hinted(
        mem,
        layout,
        main_interp,
        tstate,
        max,
        out,
        &mut Hint::default(),
    )
}

/// [`walk`], reading the places `hint` names along with the thread state, and updating it.
pub fn walk_hinted<M: Memory>(
    mem: &M,
    layout: &Layout,
    main_interp: usize,
    tstate: usize,
    max: usize,
    out: &mut RawStack,
    hint: &mut Hint,
) -> Result<(), WalkError> {
    out.clear();
    let max = max.min(MAX_FRAMES);
    let span = layout.tstate_interp.max(layout.tstate_frame) + 8;
    let mut ts = [0u8; 128];
    if span > ts.len() || !plausible(tstate, span) {
        return Err(WalkError::Unreadable);
    }
    // Frames are read a page at a time: the window from the start of the page holding a
    // frame to the frame's end. 3.11+ frames sit one after another on the thread's data
    // stack, callers below callees, so one read usually covers many frames (a read costs
    // about the same for 72 bytes as for a page).
    let fs = layout.frame_size.min(MAX_FRAME_SIZE);
    let mut win = [0u8; PAGE + MAX_FRAME_SIZE];
    let (mut win_base, mut win_len) = (0usize, 0usize);
    // One read for the thread state and the hinted cframe and page.
    let cframe_off = layout.cframe_current.unwrap_or(0);
    let mut cf = [0u8; 8];
    let want_cframe = layout.cframe_current.is_some() && hint.cframe != 0;
    let want_page = hint.page != 0;
    let mut addrs = [tstate, 0, 0];
    let mut ok = [false; 3];
    let (mut cf_at, mut page_at) = (None, None);
    {
        let (win_page, _) = win.split_at_mut(PAGE);
        let mut bufs: [&mut [u8]; 3] = [&mut ts[..span], &mut [], &mut []];
        let mut n = 1;
        if want_cframe {
            (addrs[n], bufs[n], cf_at) = (hint.cframe.wrapping_add(cframe_off), &mut cf, Some(n));
            n += 1;
        }
        if want_page {
            (addrs[n], bufs[n], page_at) = (hint.page, win_page, Some(n));
            n += 1;
        }
        mem.read_many(&addrs[..n], &mut bufs[..n], &mut ok[..n]);
    }
    let cf_ok = cf_at.is_some_and(|i| ok[i]);
    if !ok[0] {
        return Err(WalkError::Unreadable);
    }
    if page_at.is_some_and(|i| ok[i]) {
        (win_base, win_len) = (hint.page, PAGE);
    }
    if main_interp != 0 && u64_at(&ts, layout.tstate_interp) != main_interp {
        return Err(WalkError::ForeignInterpreter);
    }
    let mut frame = u64_at(&ts, layout.tstate_frame);
    if layout.cframe_current.is_some() {
        if frame == 0 {
            return Ok(());
        }
        let cframe = frame;
        frame = if cf_ok && cframe == hint.cframe {
            u64::from_ne_bytes(cf) as usize
        } else {
            match mem.read_u64(cframe.wrapping_add(cframe_off)) {
                Some(f) => f as usize,
                None => return Err(WalkError::Unreadable),
            }
        };
        hint.cframe = cframe;
    }
    hint.page = frame & !(PAGE - 1);
    let mut visits = 0;
    while frame != 0 {
        if out.len >= max || visits >= MAX_VISITS || !frame.is_multiple_of(8) {
            out.truncated = true;
            break;
        }
        visits += 1;
        let inside = frame >= win_base
            && frame
                .checked_add(fs)
                .is_some_and(|end| end <= win_base + win_len);
        if !inside {
            let start = frame & !(PAGE - 1);
            let len = frame - start + fs;
            if !plausible(start, len) || !mem.read(start, &mut win[..len]) {
                out.truncated = true;
                break;
            }
            (win_base, win_len) = (start, len);
        }
        let fbuf = &win[frame - win_base..frame - win_base + fs];
        let code = u64_at(fbuf, layout.frame_code);
        let back = u64_at(fbuf, layout.frame_back);
        let shim = layout
            .frame_owner
            .is_some_and(|o| fbuf[o] == layout.owner_cstack);
        if !shim && code != 0 {
            let raw = match layout.instr_kind {
                InstrKind::LastiIndex => i32_at(fbuf, layout.frame_instr) as u32 as u64,
                InstrKind::Pointer => u64_at(fbuf, layout.frame_instr) as u64,
            };
            let instr_offset = instr_offset(layout, code, raw);
            out.push(RawFrame { code, instr_offset });
        }
        frame = back;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::layout::{Version, V310, V311, V312, V313};
    use crate::mem::{FakeMemory, SelfMemory};

    pub const MAIN_INTERP: usize = 0x5000_0000;
    pub const TSTATE: usize = 0x6000_0000;
    pub const CFRAME: usize = 0x6000_1000;

    /// Lays out a thread state and a chain of frames in `mem` for `layout`: frame `i` at
    /// `0x7000_0000 + i*0x1000` runs code `codes[i]` at byte offset `offsets[i]`;
    /// `owners[i]` sets the owner byte where the version has one.
    pub fn build_chain(
        mem: &mut FakeMemory,
        layout: &Layout,
        codes: &[usize],
        offsets: &[i32],
        owners: &[u8],
    ) {
        mem.put(TSTATE, vec![0; 256]);
        mem.set_u64(TSTATE + layout.tstate_interp, MAIN_INTERP as u64);
        let first = if codes.is_empty() { 0 } else { 0x7000_0000 };
        match layout.cframe_current {
            Some(off) => {
                mem.set_u64(TSTATE + layout.tstate_frame, CFRAME as u64);
                mem.put(CFRAME, vec![0; 64]);
                mem.set_u64(CFRAME + off, first as u64);
            }
            None => mem.set_u64(TSTATE + layout.tstate_frame, first as u64),
        }
        for (i, &code) in codes.iter().enumerate() {
            let f = 0x7000_0000 + i * 0x1000;
            mem.put(f, vec![0; PAGE]);
            mem.set_u64(f + layout.frame_code, code as u64);
            let back = if i + 1 < codes.len() { f + 0x1000 } else { 0 };
            mem.set_u64(f + layout.frame_back, back as u64);
            match layout.instr_kind {
                InstrKind::LastiIndex => {
                    mem.set(f + layout.frame_instr, &(offsets[i] / 2).to_ne_bytes())
                }
                InstrKind::Pointer => {
                    let p = (code + layout.code_adaptive.unwrap()) as i64 + offsets[i] as i64;
                    mem.set_u64(f + layout.frame_instr, p as u64);
                }
            }
            if let Some(o) = layout.frame_owner {
                mem.set(f + o, &[owners.get(i).copied().unwrap_or(0)]);
            }
        }
    }

    #[test]
    fn walks_every_version_innermost_first_and_skips_shims() {
        for layout in [&V310, &V311, &V312, &V313] {
            let mut mem = FakeMemory::default();
            let codes = [0x1000_0000, 0x1000_1000, 0x1000_2000, 0x1000_3000];
            let offsets = [10, 0, 200, 4];
            // The third frame is a shim where the version has them.
            let owners = [0, 1, 3, 2];
            build_chain(&mut mem, layout, &codes, &offsets, &owners);
            let mut out = RawStack::new();
            walk(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut out).unwrap();
            let mut want: Vec<RawFrame> = codes
                .iter()
                .zip(offsets)
                .map(|(&code, instr_offset)| RawFrame { code, instr_offset })
                .collect();
            if layout.frame_owner.is_some() {
                want.remove(2);
            }
            assert_eq!(out.frames(), &want[..], "{layout:?}");
            assert!(!out.is_truncated());
        }
    }

    /// Frames packed on one page (callers below callees, as on 3.11+'s data stack) are
    /// read with one read for the page, not one each.
    #[test]
    fn frames_on_one_page_cost_one_read() {
        let layout = &V312;
        let mut mem = FakeMemory::default();
        mem.put(TSTATE, vec![0; 256]);
        mem.set_u64(TSTATE + layout.tstate_interp, MAIN_INTERP as u64);
        mem.set_u64(TSTATE + layout.tstate_frame, CFRAME as u64);
        mem.put(CFRAME, vec![0; 64]);
        let page = 0x7000_0000;
        mem.put(page, vec![0; 4096]);
        // Ten frames 200 bytes apart, the innermost highest.
        let frames: Vec<usize> = (0..10).rev().map(|i| page + 64 + i * 200).collect();
        mem.set_u64(CFRAME, frames[0] as u64);
        for (i, &f) in frames.iter().enumerate() {
            mem.set_u64(f + layout.frame_code, 0x1000_0000 + i as u64);
            let back = frames.get(i + 1).copied().unwrap_or(0);
            mem.set_u64(f + layout.frame_back, back as u64);
        }
        let mut out = RawStack::new();
        walk(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut out).unwrap();
        assert_eq!(out.frames().len(), 10);
        let codes: Vec<usize> = out.frames().iter().map(|f| f.code).collect();
        assert_eq!(codes, (0..10).map(|i| 0x1000_0000 + i).collect::<Vec<_>>());
        // Thread state, cframe, one window.
        assert_eq!(mem.reads.get(), 3);
    }

    /// With the hint from the walk before, a walk of the same chain is one read; when the
    /// chain moved, the hint is ignored and the result is still exact.
    #[test]
    fn a_hinted_walk_is_one_read_and_a_stale_hint_changes_nothing() {
        for layout in [&V310, &V311, &V312, &V313] {
            let mut mem = FakeMemory::default();
            let codes = [0x1000_0000, 0x1000_1000, 0x1000_2000];
            build_chain(&mut mem, layout, &codes, &[4, 8, 12], &[]);
            let mut hint = Hint::default();
            let mut first = RawStack::new();
            walk_hinted(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut first, &mut hint).unwrap();
            let cold = mem.reads.replace(0);
            let mut again = RawStack::new();
            walk_hinted(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut again, &mut hint).unwrap();
            assert_eq!(first, again, "{layout:?}");
            // build_chain puts each frame on its own page: the first is free, the rest not.
            assert_eq!(
                mem.reads.replace(0),
                cold - 1 - usize::from(layout.cframe_current.is_some())
            );
            // The innermost frame moves to another page, and the cframe to another place.
            mem.put(0x7100_0000, vec![0; PAGE]);
            mem.set_u64(0x7100_0000 + layout.frame_code, 0x1000_9000);
            mem.set_u64(0x7100_0000 + layout.frame_back, 0x7000_1000);
            match layout.cframe_current {
                Some(off) => {
                    mem.put(0x6100_0000, vec![0; 64]);
                    mem.set_u64(0x6100_0000 + off, 0x7100_0000);
                    mem.set_u64(TSTATE + layout.tstate_frame, 0x6100_0000);
                }
                None => mem.set_u64(TSTATE + layout.tstate_frame, 0x7100_0000),
            }
            walk_hinted(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut again, &mut hint).unwrap();
            let codes: Vec<usize> = again.frames().iter().map(|f| f.code).collect();
            assert_eq!(codes, [0x1000_9000, 0x1000_1000, 0x1000_2000], "{layout:?}");
            // A hint into unmapped memory: ignored.
            let mut bad = Hint {
                cframe: 0xdead_0000,
                page: 0xbeef_0000,
            };
            walk_hinted(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut again, &mut bad).unwrap();
            assert_eq!(again.frames().len(), 3);
        }
    }

    #[test]
    fn limits_and_cycles_end_the_walk_marked_truncated() {
        for layout in [&V310, &V312] {
            let mut mem = FakeMemory::default();
            let codes: Vec<usize> = (0..40).map(|i| 0x1000_0000 + i * 0x1000).collect();
            build_chain(&mut mem, layout, &codes, &[0; 40], &[]);
            let mut out = RawStack::new();
            walk(&mem, layout, MAIN_INTERP, TSTATE, 3, &mut out).unwrap();
            assert_eq!(out.frames().len(), 3);
            assert!(out.is_truncated());
            walk(&mem, layout, MAIN_INTERP, TSTATE, 1000, &mut out).unwrap();
            assert_eq!(out.frames().len(), MAX_FRAMES);
            assert!(out.is_truncated());
            // A frame that points back at itself: bounded by the frame limit.
            mem.set_u64(0x7000_0000 + layout.frame_back, 0x7000_0000);
            walk(&mem, layout, MAIN_INTERP, TSTATE, 1000, &mut out).unwrap();
            assert_eq!(out.frames().len(), MAX_FRAMES);
            // A chain of shims that loops: bounded by the visit limit, nothing kept.
            if let Some(o) = layout.frame_owner {
                mem.set(0x7000_0000 + o, &[layout.owner_cstack]);
                walk(&mem, layout, MAIN_INTERP, TSTATE, 1000, &mut out).unwrap();
                assert_eq!(out.frames().len(), 0);
                assert!(out.is_truncated());
            }
        }
    }

    #[test]
    fn unreadable_frames_and_foreign_thread_states_are_reported() {
        let layout = &V311;
        let mut mem = FakeMemory::default();
        build_chain(&mut mem, layout, &[0x1000_0000, 0x1000_1000], &[0, 0], &[]);
        let mut out = RawStack::new();
        assert_eq!(
            walk(&mem, layout, MAIN_INTERP + 8, TSTATE, 32, &mut out),
            Err(WalkError::ForeignInterpreter)
        );
        assert_eq!(
            walk(&mem, layout, MAIN_INTERP, 0x1234_5678, 32, &mut out),
            Err(WalkError::Unreadable)
        );
        // The second frame's `previous` points into nowhere: one more visit fails.
        mem.set_u64(0x7000_1000 + layout.frame_back, 0xdead_0000);
        walk(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut out).unwrap();
        assert_eq!(out.frames().len(), 2);
        assert!(out.is_truncated());
        // Instruction pointers before the code give "unknown" (-1), not garbage.
        mem.set_u64(0x7000_0000 + layout.frame_instr, 8);
        walk(&mem, layout, MAIN_INTERP, TSTATE, 32, &mut out).unwrap();
        assert_eq!(out.frames()[0].instr_offset, -1);
    }

    /// The real reader on garbage thread states: random and hostile addresses, this
    /// process's own heap and stack taken as thread states. Nothing may fault.
    #[test]
    fn garbage_thread_states_in_real_memory_never_fault() {
        let heap: Vec<u64> = (0..4096u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let mut self_ptrs = vec![0usize; 512];
        // Pointers to pointers to ...: a chain that leads somewhere readable.
        for i in 0..self_ptrs.len() {
            self_ptrs[i] = &self_ptrs[(i * 7 + 3) % 512] as *const usize as usize;
        }
        let stack_local = [0xffu8; 256];
        let mut candidates = vec![
            0,
            1,
            0xfff,
            usize::MAX,
            0xffff_ffff_ffff_f000,
            0x7fff_ffff_f000,
            heap.as_ptr() as usize,
            heap.as_ptr() as usize + 3,
            self_ptrs.as_ptr() as usize,
            stack_local.as_ptr() as usize,
            garbage_thread_states_in_real_memory_never_fault as *const () as usize,
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            candidates.push((seed as usize) & 0x7fff_ffff_fff8);
        }
        for &h in heap.iter().take(200) {
            candidates.push(h as usize);
        }
        let mut out = RawStack::new();
        for v in [Version::V310, Version::V311, Version::V312, Version::V313] {
            for &t in &candidates {
                // Unchecked interpreter: the walk must still stay bounded and safe.
                let _ = walk(&SelfMemory, v.layout(), 0, t, 32, &mut out);
                assert!(out.frames().len() <= MAX_FRAMES);
            }
        }
    }
}
