//! Entry points handed out: `dlsym` of a hooked driver name and `cuGetProcAddress` answers
//! are replaced by pinwise's wrapper of the same variant.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::driver_hooks_on;
use crate::guard;
use crate::real;
use crate::state;
use crate::stats::{self, HookStats};
use crate::variants;

/// `dlsym`'s decision (the trampoline forwards to the real `dlsym` when this returns NULL,
/// so that `RTLD_NEXT` keeps the caller's meaning): our wrapper for a hooked driver name.
///
/// # Safety
/// `name` is NULL or a C string; `handle` a handle or pseudo-handle (dlsym's contract).
pub unsafe fn dlsym_decision(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    real::ensure_real_dlsym();
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a C string (dlsym's contract).
    let cname = unsafe { CStr::from_ptr(name) };
    let Some(h) = variants::by_symbol(cname.to_bytes()) else {
        return std::ptr::null_mut();
    };
    if !state::enabled() || !driver_hooks_on() || guard::inside() {
        return std::ptr::null_mut();
    }
    let wrapper = real::wrapper(h);
    if wrapper == 0 {
        return std::ptr::null_mut();
    }
    if handle != libc::RTLD_DEFAULT && handle != libc::RTLD_NEXT {
        let found = {
            let _inside = guard::Inside::enter();
            // SAFETY: the program passed `handle` to dlsym, whose contract is ours.
            let found = real::dlsym(unsafe { real::Handle::from_raw(handle) }, cname);
            if found != 0 && !real::is_wrapper(found) {
                if let Some(lib) = real::handle_of(found) {
                    real::offer_libcuda_handle(lib);
                }
                real::offer_real(h, found);
            }
            found
        };
        if found == 0 {
            return std::ptr::null_mut(); // the real dlsym says why
        }
    }
    HookStats::bump(&stats::WRAPPED_BY_DLSYM);
    wrapper as *mut c_void
}

/// After a successful `cuGetProcAddress`: replaces the answer by our wrapper when it is a
/// hooked variant (identified by address, else by the driver's version rule).
///
/// # Safety
/// `symbol` is a C string and `pfn` a pointer the real call wrote (CUDA's contract).
pub unsafe fn wrap_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) {
    if symbol.is_null()
        || pfn.is_null()
        || !state::enabled()
        || !driver_hooks_on()
        || guard::inside()
    {
        return;
    }
    // SAFETY: the caller's contract.
    let (name, answer) = unsafe { (CStr::from_ptr(symbol).to_bytes(), *pfn as usize) };
    if answer == 0 || variants::by_base(name).next().is_none() {
        return;
    }
    let _inside = guard::Inside::enter();
    if real::is_wrapper(answer) {
        // The driver answered our own export (its table refers to the interposed name).
        HookStats::bump(&stats::WRAPPED_BY_PROC_ADDRESS);
        return;
    }
    if real::libcuda_handle().is_none() {
        if let Some(lib) = real::handle_of(answer) {
            real::offer_libcuda_handle(lib);
        }
    }
    let by_identity = variants::by_base(name).find(|&h| real::exported(h) == Some(answer));
    let chosen = match by_identity {
        Some(h) => {
            HookStats::bump(&stats::WRAPPED_BY_PROC_ADDRESS);
            Some(h)
        }
        None => {
            let h = variants::by_rule(name, cuda_version, flags);
            if h.is_some() {
                HookStats::bump(&stats::WRAPPED_BY_RULE);
            } else {
                HookStats::bump(&stats::PROC_ADDRESS_UNRECOGNIZED);
            }
            h
        }
    };
    let Some(h) = chosen else { return };
    let wrapper = real::wrapper(h);
    if wrapper == 0 {
        return;
    }
    real::offer_real(h, answer);
    // SAFETY: `pfn` is the caller's writable out-parameter.
    unsafe { *pfn = wrapper as *mut c_void };
}
