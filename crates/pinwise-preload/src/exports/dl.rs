//! `dlsym`: the crossing point of every path to the driver.
//!
//! cudart (shared or static) opens libcuda with `dlopen` and finds `cuGetProcAddress` with
//! `dlsym`; programs and frameworks that load libcuda themselves do the same. For a hooked
//! driver name, [`crate::hooks::procaddr::dlsym_decision`] answers our wrapper (keeping the real
//! function). For every other name the trampoline *jumps* to the real `dlsym`, so the real
//! one sees the caller's return address and `RTLD_NEXT` keeps its meaning (the next object
//! after the caller's, not after pinwise).

use std::ffi::{c_char, c_void};

use crate::real::PINWISE_REAL_DLSYM;

/// Called by the trampoline with dlsym's arguments.
unsafe extern "C" fn decide(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: dlsym's own arguments, passed on.
    unsafe { crate::hooks::procaddr::dlsym_decision(handle, name) }
}

/// `dlsym`: our wrapper for a hooked driver name, else a tail call to the real `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym() {
    core::arch::naked_asm!(
        "endbr64",
        // Keep the arguments; 2 pushes + 8 keep the stack 16-byte aligned for the call.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        // `decide` made sure the real dlsym is known.
        "jmp qword ptr [rip + {real}]",
        decide = sym decide,
        real = sym PINWISE_REAL_DLSYM,
    )
}

/// `dlsym`: our wrapper for a hooked driver name, else a tail call to the real `dlsym`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym() {
    core::arch::naked_asm!(
        "bti c",
        "stp x29, x30, [sp, #-32]!",
        "stp x0, x1, [sp, #16]",
        "bl {decide}",
        "cbz x0, 2f",
        "ldp x29, x30, [sp], #32",
        "ret",
        "2:",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        decide = sym decide,
        real = sym PINWISE_REAL_DLSYM,
    )
}
