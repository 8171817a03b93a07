//! Inline hooks (x86-64): a function's entry is replaced by a jump to a detour, and its
//! first instructions move to a trampoline through which the detour calls the original.
//! Used for allocators linked into the executable ([`crate::linked_alloc`]), whose calls
//! never go through a symbol pinwise can interpose.
//!
//! - The first instructions (at least 5 bytes) are decoded and re-encoded at the
//!   trampoline (`iced-x86`'s block encoder: RIP-relative operands and conditional
//!   branches are fixed for the new address), followed by a jump back to the rest of the
//!   function (`jmp rel32`; an absolute jump through memory if it were out of reach). Straight-line instructions, conditional branches and direct calls
//!   move; a jump, return or indirect call among them refuses the patch, as does a function
//!   shorter than the 5 bytes, or one whose code branches back into the moved bytes (the
//!   whole function, as its symbol's size gives it, is decoded to see that).
//! - Trampolines and relays live on a page mapped within ±2 GiB of the function, so that
//!   the 5-byte `jmp rel32` written over the entry reaches the relay (an absolute jump to
//!   the detour), and moved RIP-relative operands still reach their targets.
//! - The relay can test first ([`Bypass`]: an argument against a word of memory, a word
//!   being zero) and fall straight through into the trampoline when the tests hold: the
//!   detour's untracked path (a small allocation, a free while nothing is tracked) made in
//!   a few instructions, without entering the detour (its jumps, its indirect call of the
//!   original, its frame).
//! - The entry's page is made writable for the 5 bytes and made read-execute again.
//!   Patching assumes no other thread runs that code meanwhile (the library's constructor).
//!
//! [`plan`] is pure (decode and encode, tested); [`Patcher::hook`] does the mapping and
//! the writes.

use iced_x86::{BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl};
use iced_x86::{Instruction, InstructionBlock};

/// Why a function was not patched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// Its first bytes hold a branch, call or return, or cannot be decoded.
    Prologue(String),
    /// No memory for trampolines within reach of the function.
    NoNearMemory,
    /// The entry's page could not be made writable.
    Protect(i32),
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatchError::Prologue(why) => write!(f, "its first instructions cannot move: {why}"),
            PatchError::NoNearMemory => write!(f, "no memory within 2 GiB of it for a trampoline"),
            PatchError::Protect(errno) => write!(f, "mprotect of its code failed (errno {errno})"),
        }
    }
}

/// Bytes a `jmp rel32` takes at the entry.
pub const ENTRY_PATCH: usize = 5;
/// `jmp qword ptr [rip]` followed by the 8-byte address.
const ABS_JMP: usize = 14;
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

fn abs_jmp(to: u64) -> [u8; ABS_JMP] {
    let mut b = [0u8; ABS_JMP];
    b[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    b[6..].copy_from_slice(&to.to_le_bytes());
    b
}

/// The trampoline for the function at `entry` whose code is `code` (all of it, as its
/// symbol's size says), placed at `at`: the moved instructions and the jump back. Returns
/// the trampoline's bytes and how many bytes of the entry were moved.
pub fn plan(entry: u64, code: &[u8], at: u64) -> Result<(Vec<u8>, usize), PatchError> {
    let mut decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut moved: Vec<Instruction> = Vec::new();
    let mut len = 0usize;
    while len < ENTRY_PATCH {
        if !decoder.can_decode() {
            return Err(PatchError::Prologue("the function is too short".into()));
        }
        let ins = decoder.decode();
        if ins.is_invalid() {
            return Err(PatchError::Prologue(format!("undecodable byte at +{len}")));
        }
        // Direct calls move too (a wrapper's `sub rsp, 8; call f`): the callee returns into
        // the trampoline, which goes on like the original (an unwinder stopped inside that
        // callee sees a frame without unwind information).
        let movable = match ins.flow_control() {
            FlowControl::Next | FlowControl::ConditionalBranch => true,
            FlowControl::Call => ins.is_call_near(),
            _ => false,
        };
        if !movable {
            return Err(PatchError::Prologue(format!(
                "a {:?} at +{len}",
                ins.flow_control()
            )));
        }
        len += ins.len();
        moved.push(ins);
    }
    // Nothing in the function may branch into the moved bytes (past their first).
    let moved_end = entry + len as u64;
    let mut rest = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    while rest.can_decode() {
        let ins = rest.decode();
        if ins.is_invalid() {
            break;
        }
        let branch = matches!(
            ins.flow_control(),
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch | FlowControl::Call
        );
        if branch && ins.near_branch_target() > entry && ins.near_branch_target() < moved_end {
            return Err(PatchError::Prologue(format!(
                "+{:#x} branches into the first {len} bytes",
                ins.ip() - entry
            )));
        }
    }
    let mut out = Vec::new();
    // The detour calls the trampoline indirectly: with indirect-branch tracking on, it
    // must start with an endbr64 (a no-op otherwise).
    if moved[0].code() != Code::Endbr64 {
        out.extend_from_slice(&ENDBR64);
    }
    let base = at + out.len() as u64;
    let encoded = BlockEncoder::encode(
        64,
        InstructionBlock::new(&moved, base),
        BlockEncoderOptions::NONE,
    )
    .map_err(|e| PatchError::Prologue(format!("cannot re-encode: {e}")))?;
    out.extend_from_slice(&encoded.code_buffer);
    // The jump back: direct when in reach (the trampoline's page is mapped within reach of
    // the function, so always in practice): nothing to load, predicted like any direct
    // jump. Absolute through memory otherwise.
    let back = entry + len as u64;
    match near_jmp(at + out.len() as u64, back) {
        Some(jmp) => out.extend_from_slice(&jmp),
        None => out.extend_from_slice(&abs_jmp(back)),
    }
    Ok((out, len))
}

/// An argument register at a function's entry (System V x86-64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// The first argument.
    Rdi,
    /// The second.
    Rsi,
    /// The third.
    Rdx,
}

impl Arg {
    /// The register's number in a ModRM `reg` field.
    fn reg(self) -> u8 {
        match self {
            Arg::Rdi => 7,
            Arg::Rsi => 6,
            Arg::Rdx => 2,
        }
    }
}

/// A test the relay makes before the detour: when every test of a hook holds, the call
/// goes straight on to the original (the trampoline), without the detour. Each reads a
/// word of memory at a fixed address on every call (a relaxed atomic load), so the
/// condition can change while the process runs. The tests clobber `r10`, `r11` and the
/// flags (free at a function's entry) and no argument register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bypass {
    /// The argument is below (unsigned) the word at `word`.
    ArgBelow {
        /// The argument.
        arg: Arg,
        /// The word's address.
        word: u64,
    },
    /// The product of the first two arguments fits in 64 bits and is below the word at
    /// `word` (`calloc(n, size)`).
    ProductBelow {
        /// The word's address.
        word: u64,
    },
    /// The word at `word` is zero.
    Zero {
        /// The word's address.
        word: u64,
    },
}

/// Bytes of `jcc rel32`.
const JCC: usize = 6;

/// The relay's tests, placed at `at`, each jumping to `fail` (the jump to the detour) when
/// it does not hold; the code after them is reached when all hold.
pub fn bypass_code(tests: &[Bypass], at: u64, fail: u64) -> Vec<u8> {
    let mut b: Vec<u8> = Vec::new();
    // `jcc rel32` to `fail`, at the end of `b` (cc: the low nibble of 0x0f 0x8?).
    let jcc = |b: &mut Vec<u8>, cc: u8| {
        let from = at + (b.len() + JCC) as u64;
        let rel = (fail as i64 - from as i64) as i32;
        b.extend_from_slice(&[0x0f, 0x80 | cc]);
        b.extend_from_slice(&rel.to_le_bytes());
    };
    const JO: u8 = 0x0;
    const JAE: u8 = 0x3;
    const JNE: u8 = 0x5;
    for t in tests {
        match *t {
            Bypass::ArgBelow { arg, word } => {
                // movabs r11, word; cmp arg, [r11]; jae fail
                b.extend_from_slice(&[0x49, 0xbb]);
                b.extend_from_slice(&word.to_le_bytes());
                b.extend_from_slice(&[0x49, 0x3b, (arg.reg() << 3) | 3]);
                jcc(&mut b, JAE);
            }
            Bypass::ProductBelow { word } => {
                // mov r11, rdi; imul r11, rsi; jo fail; movabs r10, word; cmp r11, [r10];
                // jae fail
                b.extend_from_slice(&[0x49, 0x89, 0xfb, 0x4c, 0x0f, 0xaf, 0xde]);
                jcc(&mut b, JO);
                b.extend_from_slice(&[0x49, 0xba]);
                b.extend_from_slice(&word.to_le_bytes());
                b.extend_from_slice(&[0x4d, 0x3b, 0x1a]);
                jcc(&mut b, JAE);
            }
            Bypass::Zero { word } => {
                // movabs r11, word; cmp qword ptr [r11], 0; jne fail
                b.extend_from_slice(&[0x49, 0xbb]);
                b.extend_from_slice(&word.to_le_bytes());
                b.extend_from_slice(&[0x49, 0x83, 0x3b, 0x00]);
                jcc(&mut b, JNE);
            }
        }
    }
    b
}

/// The `jmp rel32` at `from` to `to` (within ±2 GiB).
pub fn near_jmp(from: u64, to: u64) -> Option<[u8; ENTRY_PATCH]> {
    let rel = i32::try_from(to as i64 - (from as i64 + ENTRY_PATCH as i64)).ok()?;
    let mut b = [0xe9, 0, 0, 0, 0];
    b[1..].copy_from_slice(&rel.to_le_bytes());
    Some(b)
}

/// A page of trampolines and relays near some code.
struct Page {
    base: u64,
    used: usize,
}

const PAGE: usize = 4096;
/// A slot: the jump to the detour, the bypass tests, the trampoline.
const SLOT: usize = 256;

/// Patches functions; keeps the pages it mapped.
#[derive(Default)]
pub struct Patcher {
    pages: Vec<Page>,
}

fn reach(a: u64, b: u64) -> bool {
    a.abs_diff(b) < (1u64 << 31) - (PAGE as u64) * 4
}

/// Maps a page within reach of `near` (trying below and above it, 64 KiB steps).
fn map_near(near: u64) -> Option<u64> {
    let start = near & !(PAGE as u64 - 1);
    for step in 1..(1u64 << 14) {
        for addr in [start.checked_sub(step << 16), start.checked_add(step << 16)]
            .into_iter()
            .flatten()
        {
            if !reach(addr, near) || addr < (1 << 16) {
                continue;
            }
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; a fresh
            // anonymous page is asked for.
            let p = unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                if p as u64 == addr {
                    return Some(addr);
                }
                // An old kernel took the address as a hint only.
                // SAFETY: the mapping just made.
                unsafe { libc::munmap(p, PAGE) };
            }
        }
    }
    None
}

fn protect(addr: u64, len: usize, prot: i32) -> Result<(), PatchError> {
    let start = addr & !(PAGE as u64 - 1);
    let end = (addr + len as u64).next_multiple_of(PAGE as u64);
    // SAFETY: changes the protection of pages of mapped code or of our own page.
    let rc = unsafe { libc::mprotect(start as *mut libc::c_void, (end - start) as usize, prot) };
    if rc != 0 {
        return Err(PatchError::Protect(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ));
    }
    Ok(())
}

impl Patcher {
    /// A slot of [`SLOT`] bytes within reach of `entry`.
    fn slot(&mut self, entry: u64) -> Result<u64, PatchError> {
        if let Some(p) = self
            .pages
            .iter_mut()
            .find(|p| p.used + SLOT <= PAGE && reach(p.base, entry))
        {
            let at = p.base + p.used as u64;
            p.used += SLOT;
            return Ok(at);
        }
        let base = map_near(entry).ok_or(PatchError::NoNearMemory)?;
        self.pages.push(Page { base, used: SLOT });
        Ok(base)
    }

    /// Makes the function at `entry` jump to `detour`, unless every test of `bypass` holds
    /// (then the call goes on to the original directly: the detour's own fast path, made
    /// without its jumps and indirect call); returns the address through which the
    /// original is called.
    ///
    /// A slot holds, in this order: the absolute jump to the detour (where a failed test
    /// jumps), the tests, and the trampoline, into which the last test falls through. The
    /// entry jumps to the tests (to the jump to the detour when there are none).
    ///
    /// # Safety
    /// `entry` is the entry of a function of at least `size` bytes in mapped code; no other
    /// thread runs its first bytes during the call; `detour` has the function's signature
    /// and, when every test of `bypass` holds, does nothing but call the original.
    pub unsafe fn hook(
        &mut self,
        entry: u64,
        size: usize,
        detour: u64,
        bypass: &[Bypass],
    ) -> Result<u64, PatchError> {
        // The whole function (a bound on a symbol's size: functions are far smaller).
        let readable = size.min(1 << 20);
        // SAFETY: the caller's contract: `size` bytes of code at `entry`.
        let code = unsafe { std::slice::from_raw_parts(entry as *const u8, readable) };
        let slot = self.slot(entry)?;
        let to_detour = slot;
        let tests_at = slot + ABS_JMP as u64 + 2;
        let tests = bypass_code(bypass, tests_at, to_detour);
        let trampoline = tests_at + tests.len() as u64;
        let (bytes, _moved) = plan(entry, code, trampoline)?;
        if ABS_JMP + 2 + tests.len() + bytes.len() > SLOT {
            return Err(PatchError::Prologue(
                "the moved instructions are too long".into(),
            ));
        }
        let relay = if tests.is_empty() {
            to_detour
        } else {
            tests_at
        };
        let jump = near_jmp(entry, relay).ok_or(PatchError::NoNearMemory)?;
        let page = slot & !(PAGE as u64 - 1);
        protect(page, PAGE, libc::PROT_READ | libc::PROT_WRITE)?;
        // SAFETY: our own page, writable now; the slot is this function's alone.
        unsafe {
            std::ptr::copy_nonoverlapping(abs_jmp(detour).as_ptr(), to_detour as *mut u8, ABS_JMP);
            std::ptr::copy_nonoverlapping(tests.as_ptr(), tests_at as *mut u8, tests.len());
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), trampoline as *mut u8, bytes.len());
        }
        protect(page, PAGE, libc::PROT_READ | libc::PROT_EXEC)?;
        // Read-write-execute for the write: code on the same page (the executable's own
        // malloc, which this very library may call) stays runnable.
        protect(
            entry,
            ENTRY_PATCH,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        )?;
        // SAFETY: the entry's page is writable; the caller's contract says nothing runs
        // these bytes meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(jump.as_ptr(), entry as *mut u8, ENTRY_PATCH) };
        // The jump is in place: from here the patch has happened and the caller must learn
        // the trampoline (its detour calls the original through it). A page left writable
        // is a lesser harm than a detour without its original, so a failure to make it
        // read-only again is not an error.
        let _ = protect(entry, ENTRY_PATCH, libc::PROT_READ | libc::PROT_EXEC);
        Ok(trampoline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prologue_moves_with_its_rip_relative_operand_fixed() {
        // endbr64; mov rax, [rip+0x100]; ret
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3,
        ];
        let entry = 0x40_0000u64;
        let at = 0x40_8000u64;
        let (bytes, moved) = plan(entry, &code, at).unwrap();
        assert_eq!(
            moved, 11,
            "endbr64 + mov: the first 5 bytes and the rest of the mov"
        );
        let mut d = Decoder::with_ip(64, &bytes, at, DecoderOptions::NONE);
        let first = d.decode();
        assert_eq!(first.code(), Code::Endbr64, "no second endbr64 added");
        // The moved mov still reads entry+11+0x100.
        let mov = d.decode();
        assert!(mov.is_ip_rel_memory_operand());
        assert_eq!(mov.ip_rel_memory_address(), entry + 11 + 0x100);
        // Then the jump back to entry+11: direct, the trampoline being in reach.
        let jmp = d.decode();
        assert_eq!(jmp.code(), Code::Jmp_rel32_64);
        assert_eq!(jmp.near_branch_target(), entry + 11);
        assert_eq!(d.position(), bytes.len(), "nothing after the jump back");
    }

    #[test]
    fn a_trampoline_out_of_reach_jumps_back_through_memory() {
        // endbr64; push rbp; mov rbp, rsp; ret
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xc3];
        let entry = 0x1000u64;
        let at = 1u64 << 40;
        let (bytes, moved) = plan(entry, &code, at).unwrap();
        assert_eq!(moved, 5);
        let mut d = Decoder::with_ip(64, &bytes, at, DecoderOptions::NONE);
        let _endbr = d.decode();
        let _push = d.decode();
        let jmp = d.decode();
        assert_eq!(jmp.code(), Code::Jmp_rm64);
        let target = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap());
        assert_eq!(target, entry + 5);
    }

    #[test]
    fn a_branch_or_a_short_function_is_refused() {
        // jmp +5; ...
        let code = [0xeb, 0x05, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90];
        assert!(matches!(
            plan(0x1000, &code, 0x2000),
            Err(PatchError::Prologue(_))
        ));
        // call rax; ...
        let code = [0xff, 0xd0, 0x90, 0x90, 0x90, 0x90, 0xc3];
        assert!(matches!(
            plan(0x1000, &code, 0x2000),
            Err(PatchError::Prologue(_))
        ));
        // push rbp; push rbx; nop x4; jne -> +2 (into the moved bytes); ret
        let code = [0x55, 0x53, 0x90, 0x90, 0x90, 0x90, 0x75, 0xfa, 0xc3];
        match plan(0x1000, &code, 0x2000) {
            Err(PatchError::Prologue(why)) => assert!(why.contains("branches into"), "{why}"),
            other => panic!("{other:?}"),
        }
        // xor eax, eax; ret
        let code = [0x31, 0xc0, 0xc3];
        assert!(matches!(
            plan(0x1000, &code, 0x2000),
            Err(PatchError::Prologue(_))
        ));
        // Too few bytes.
        assert!(matches!(
            plan(0x1000, &[0x55], 0x2000),
            Err(PatchError::Prologue(_))
        ));
    }

    #[test]
    fn a_conditional_branch_moves_with_its_target_kept() {
        // test rdi, rdi; je +0x20 (to 0x1025); push rbp; ...; ret
        let mut code = vec![0x48, 0x85, 0xff, 0x74, 0x20, 0x55];
        code.resize(0x30, 0x90);
        code.push(0xc3);
        let (bytes, moved) = plan(0x1000, &code, 0x4000_0000).unwrap();
        assert_eq!(moved, 5);
        let mut d = Decoder::with_ip(64, &bytes, 0x4000_0000, DecoderOptions::NONE);
        let _endbr = d.decode();
        let _test = d.decode();
        let je = d.decode();
        assert_eq!(je.flow_control(), FlowControl::ConditionalBranch);
        assert_eq!(je.near_branch_target(), 0x1025, "still the original target");
    }

    #[test]
    fn a_direct_call_moves_and_still_calls_its_function() {
        // sub rsp, 8; call 0x5000; add rsp, 8; ret
        let code = [
            0x48, 0x83, 0xec, 0x08, 0xe8, 0xf7, 0x3f, 0, 0, 0x48, 0x83, 0xc4, 0x08, 0xc3,
        ];
        let (bytes, moved) = plan(0x1000, &code, 0x3000_0000).unwrap();
        assert_eq!(moved, 9);
        let mut d = Decoder::with_ip(64, &bytes, 0x3000_0000, DecoderOptions::NONE);
        let _endbr = d.decode();
        let _sub = d.decode();
        let call = d.decode();
        assert!(call.is_call_near());
        assert_eq!(call.near_branch_target(), 0x5000);
    }

    #[test]
    fn a_missing_endbr64_is_added_and_near_jumps_stay_in_reach() {
        // push rbp; mov rbp, rsp; sub rsp, 0x10
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc3];
        let (bytes, moved) = plan(0x1000, &code, 0x2000).unwrap();
        assert_eq!(moved, 8);
        assert_eq!(bytes[..4], ENDBR64);
        assert_eq!(near_jmp(0x1000, 0x2000), Some([0xe9, 0xfb, 0x0f, 0, 0]));
        assert_eq!(near_jmp(0, 1 << 40), None);
    }

    #[test]
    fn the_bypass_tests_decode_as_written_and_branch_to_the_detour_jump() {
        let at = 0x7000_0010u64;
        let fail = 0x7000_0000u64;
        let code = bypass_code(
            &[
                Bypass::Zero {
                    word: 0x1122_3344_5566,
                },
                Bypass::ArgBelow {
                    arg: Arg::Rsi,
                    word: 0x7788,
                },
                Bypass::ProductBelow { word: 0x99aa },
            ],
            at,
            fail,
        );
        let mut d = Decoder::with_ip(64, &code, at, DecoderOptions::NONE);
        let mut codes = Vec::new();
        let mut branches = 0;
        while d.can_decode() {
            let ins = d.decode();
            assert!(!ins.is_invalid());
            if ins.flow_control() == FlowControl::ConditionalBranch {
                assert_eq!(ins.near_branch_target(), fail, "{:?}", ins.code());
                branches += 1;
            }
            codes.push(ins.code());
        }
        assert_eq!(
            codes,
            [
                Code::Mov_r64_imm64,
                Code::Cmp_rm64_imm8,
                Code::Jne_rel32_64,
                Code::Mov_r64_imm64,
                Code::Cmp_r64_rm64,
                Code::Jae_rel32_64,
                Code::Mov_rm64_r64,
                Code::Imul_r64_rm64,
                Code::Jo_rel32_64,
                Code::Mov_r64_imm64,
                Code::Cmp_r64_rm64,
                Code::Jae_rel32_64,
            ]
        );
        assert_eq!(branches, 4);
        let mut d = Decoder::with_ip(64, &code, at, DecoderOptions::NONE);
        let movabs = d.decode();
        assert_eq!(movabs.op0_register(), iced_x86::Register::R11);
        assert_eq!(movabs.immediate64(), 0x1122_3344_5566);
        let _ = d.decode();
        let _ = d.decode();
        let _ = d.decode();
        let cmp = d.decode();
        assert_eq!(cmp.op0_register(), iced_x86::Register::RSI);
        assert_eq!(cmp.memory_base(), iced_x86::Register::R11);
        let _ = d.decode();
        let mov = d.decode();
        assert_eq!(
            (mov.op0_register(), mov.op1_register()),
            (iced_x86::Register::R11, iced_x86::Register::RDI)
        );
        let imul = d.decode();
        assert_eq!(
            (imul.op0_register(), imul.op1_register()),
            (iced_x86::Register::R11, iced_x86::Register::RSI)
        );
        let _ = d.decode();
        let movabs = d.decode();
        assert_eq!(movabs.op0_register(), iced_x86::Register::R10);
        let cmp = d.decode();
        assert_eq!(
            (cmp.op0_register(), cmp.memory_base()),
            (iced_x86::Register::R11, iced_x86::Register::R10)
        );
        assert!(bypass_code(&[], at, fail).is_empty());
    }

    #[inline(never)]
    extern "C" fn times_five(x: u64) -> u64 {
        std::hint::black_box(x) * 5
    }

    #[inline(never)]
    extern "C" fn product(a: u64, b: u64) -> u64 {
        std::hint::black_box(a).wrapping_mul(b)
    }

    static ORIGINAL_FIVE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static ORIGINAL_PRODUCT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static LIMIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
    static FLAG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    extern "C" fn five_detour(x: u64) -> u64 {
        let f: extern "C" fn(u64) -> u64 =
            // SAFETY: the trampoline of `times_five`, same signature.
            unsafe { std::mem::transmute(ORIGINAL_FIVE.load(std::sync::atomic::Ordering::SeqCst)) };
        f(x) + 1
    }

    extern "C" fn product_detour(a: u64, b: u64) -> u64 {
        let f: extern "C" fn(u64, u64) -> u64 =
            // SAFETY: the trampoline of `product`, same signature.
            unsafe { std::mem::transmute(ORIGINAL_PRODUCT.load(std::sync::atomic::Ordering::SeqCst)) };
        f(a, b).wrapping_add(1)
    }

    #[test]
    fn a_call_whose_bypass_tests_hold_skips_the_detour() {
        use std::sync::atomic::Ordering::SeqCst;
        let f: extern "C" fn(u64) -> u64 = std::hint::black_box(times_five);
        let g: extern "C" fn(u64, u64) -> u64 = std::hint::black_box(product);
        let mut p = Patcher::default();
        let limit = &LIMIT as *const _ as u64;
        let flag = &FLAG as *const _ as u64;
        // SAFETY: functions of this test binary, called by no other thread, with their
        // detours' signatures; sizes as in the test above.
        let (o1, o2) = unsafe {
            (
                p.hook(
                    times_five as *const () as u64,
                    20,
                    five_detour as *const () as u64,
                    &[
                        Bypass::Zero { word: flag },
                        Bypass::ArgBelow {
                            arg: Arg::Rdi,
                            word: limit,
                        },
                    ],
                ),
                p.hook(
                    product as *const () as u64,
                    20,
                    product_detour as *const () as u64,
                    &[Bypass::ProductBelow { word: limit }],
                ),
            )
        };
        ORIGINAL_FIVE.store(o1.expect("times_five's prologue moves"), SeqCst);
        ORIGINAL_PRODUCT.store(o2.expect("product's prologue moves"), SeqCst);
        assert_eq!(f(2), 10, "below the limit, flag clear: the original alone");
        assert_eq!(f(99), 495);
        assert_eq!(f(100), 501, "at the limit: through the detour");
        FLAG.store(1, SeqCst);
        assert_eq!(f(2), 11, "flag set: through the detour");
        FLAG.store(0, SeqCst);
        LIMIT.store(1000, SeqCst);
        assert_eq!(f(100), 500, "the limit is read on each call");
        assert_eq!(g(10, 99), 990, "product below the limit");
        assert_eq!(g(10, 100), 1001, "at the limit");
        assert_eq!(
            g(1 << 40, 1 << 40),
            1,
            "an overflowing product goes to the detour"
        );
        assert_eq!(g(0, u64::MAX), 0, "zero times anything is below");
    }

    #[inline(never)]
    extern "C" fn times_three(x: u64) -> u64 {
        std::hint::black_box(x) * 3
    }

    static ORIGINAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    extern "C" fn plus_one_then_original(x: u64) -> u64 {
        let f: extern "C" fn(u64) -> u64 =
            // SAFETY: the trampoline of `times_three`, same signature.
            unsafe { std::mem::transmute(ORIGINAL.load(std::sync::atomic::Ordering::SeqCst)) };
        f(x + 1)
    }

    #[test]
    fn a_hooked_function_runs_the_detour_which_calls_the_original() {
        let f: extern "C" fn(u64) -> u64 = std::hint::black_box(times_three);
        assert_eq!(f(2), 6);
        let mut p = Patcher::default();
        // SAFETY: a function of this test binary, called by no other thread, with the
        // detour's signature; its size is at least the bytes its code needs (a
        // debug build's prologue and body run longer than 20 bytes).
        let original = unsafe {
            p.hook(
                times_three as *const () as u64,
                20,
                plus_one_then_original as *const () as u64,
                &[],
            )
        };
        let original = original.expect("the test function's prologue moves");
        ORIGINAL.store(original, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(f(2), 9, "(2 + 1) * 3 through the trampoline");
        assert_eq!(f(10), 33);
    }
}
