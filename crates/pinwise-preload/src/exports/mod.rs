//! The exported symbols. Each is thin: a trampoline that passes the caller's return address
//! on (so that call sites are known without unwinding), into a function that decodes the C
//! arguments and calls [`crate::hooks`] with a closure forwarding to the real function.
//!
//! Not compiled into the unit tests: a test binary must not interpose its own `free`.

#[cfg(target_arch = "x86_64")]
mod allocator_hooks;
mod dl;
mod driver;
mod exit;
mod libc_hooks;
mod malloc_hooks;
mod prctl;
mod runtime;

/// The register that carries the caller's return address into an implementation taking
/// `n` integer arguments before it (System V x86-64 / AAPCS64 argument registers).
#[cfg(target_arch = "x86_64")]
macro_rules! caller_reg {
    (0) => {
        "rdi"
    };
    (1) => {
        "rsi"
    };
    (2) => {
        "rdx"
    };
    (3) => {
        "rcx"
    };
    (4) => {
        "r8"
    };
    (5) => {
        "r9"
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! caller_reg {
    (0) => {
        "x0"
    };
    (1) => {
        "x1"
    };
    (2) => {
        "x2"
    };
    (3) => {
        "x3"
    };
    (4) => {
        "x4"
    };
    (5) => {
        "x5"
    };
}

/// Exports `$name`, which jumps to `$imp` with the caller's return address as an extra
/// last argument after `$n` integer arguments. `$imp` returns straight to the caller.
#[cfg(target_arch = "x86_64")]
macro_rules! export_with_caller {
    ($name:ident => $imp:path, $n:tt) => {
        #[doc = concat!("`", stringify!($name), "`: see the crate documentation.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "endbr64",
                concat!("mov ", $crate::exports::caller_reg!($n), ", qword ptr [rsp]"),
                "jmp {imp}",
                imp = sym $imp,
            )
        }
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! export_with_caller {
    ($name:ident => $imp:path, $n:tt) => {
        #[doc = concat!("`", stringify!($name), "`: see the crate documentation.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "bti c",
                concat!("mov ", $crate::exports::caller_reg!($n), ", x30"),
                "b {imp}",
                imp = sym $imp,
            )
        }
    };
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("pinwise-preload's trampolines exist for x86_64 and aarch64 only");

pub(crate) use caller_reg;
pub(crate) use export_with_caller;

/// Runs when the library is loaded: real `dlsym`, our wrappers' addresses, fork and exit
/// handlers. Nothing that can fail, nothing that needs CUDA.
extern "C" fn on_load() {
    crate::guard::learn_static_tls(crate::guard::preloaded());
    driver::register_wrappers();
    crate::state::on_load();
    libc_hooks::resolve_now();
    crate::state::set_free_hooks_effective(libc_hooks::hooks_effective());
    // CPython, if this process runs it (looked for once, here: it may allocate and takes
    // the loader's lock, which hooks must not).
    let _ = pinwise_pyframes::interpreter();
    // Last: allocations are tracked from here on.
    malloc_hooks::configure_from_env();
    // An allocator linked into the executable (jemalloc, mimalloc) is patched to record
    // the same way (x86-64 only).
    #[cfg(target_arch = "x86_64")]
    allocator_hooks::install();
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
