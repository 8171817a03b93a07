//! Finding the real functions behind the hooks.
//!
//! - The real `dlsym`: `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")`, falling back to
//!   `"GLIBC_2.2.5"` (glibc before 2.34 kept it in libdl under that version).
//! - Driver functions: one slot per hooked variant ([`crate::variants::Hooked`]), filled
//!   when `dlsym` or `cuGetProcAddress` hands the real pointer to someone (we hand out our
//!   wrapper and keep the real one), or on first use from libcuda's handle. A slot never
//!   holds one of our own wrappers.
//! - Other driver functions the library itself calls (events, contexts): looked up by
//!   name in libcuda.
//! - Runtime functions: the next definition after this library, or else the one in a
//!   loaded `libcudart` (a cudart loaded with `RTLD_LOCAL`, as Python extensions load it, is
//!   not in the global scope `RTLD_NEXT` searches).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::variants::{Hooked, COUNT};

/// The real `dlsym`, as an address (read by the `dlsym` trampoline with a plain load).
pub static PINWISE_REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Stands in for `dlsym` if the real one cannot be found (never on glibc): finds nothing.
unsafe extern "C" fn no_dlsym(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// Makes sure [`PINWISE_REAL_DLSYM`] is set. Allocation-free; safe to call from anywhere.
pub fn ensure_real_dlsym() {
    if PINWISE_REAL_DLSYM.load(Ordering::Acquire) != 0 {
        return;
    }
    let mut found: *mut c_void = std::ptr::null_mut();
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym with constant C strings; RTLD_NEXT is relative to this library.
        found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !found.is_null() {
            break;
        }
    }
    let addr = if found.is_null() {
        no_dlsym as *const () as usize
    } else {
        found as usize
    };
    PINWISE_REAL_DLSYM.store(addr, Ordering::Release);
}

/// A handle `dlsym` accepts: a pseudo-handle, or one the loader gave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle(*mut c_void);

impl Handle {
    /// `RTLD_NEXT`: as used from this library, "the next object after pinwise".
    pub const NEXT: Handle = Handle(libc::RTLD_NEXT);
    /// `RTLD_DEFAULT`: the global scope.
    pub const DEFAULT: Handle = Handle(libc::RTLD_DEFAULT);

    /// A handle from a raw pointer.
    ///
    /// # Safety
    /// `raw` came from `dlopen` (and the object was not closed since), or is a
    /// pseudo-handle: what `dlsym` requires of its first argument.
    pub unsafe fn from_raw(raw: *mut c_void) -> Handle {
        Handle(raw)
    }

    /// The raw pointer.
    pub fn as_ptr(self) -> *mut c_void {
        self.0
    }
}

/// The real `dlsym(handle, name)`, as an address (0: not found).
pub fn dlsym(handle: Handle, name: &CStr) -> usize {
    ensure_real_dlsym();
    // SAFETY: the address is glibc's dlsym (or `no_dlsym`), whose signature this is.
    let f: DlsymFn = unsafe { std::mem::transmute(PINWISE_REAL_DLSYM.load(Ordering::Acquire)) };
    // SAFETY: `Handle` holds what dlsym accepts (its constructor's contract); `name` is a
    // C string.
    unsafe { f(handle.0, name.as_ptr()) as usize }
}

/// Addresses of our own exported wrappers, per hooked variant (filled when the library is
/// loaded; zero in unit tests).
pub static WRAPPERS: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// Real driver functions, per hooked variant (0: not known yet).
static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// libcuda's own export of each variant's name (0: not looked up; 1: absent).
static EXPORTED: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// A handle of the loaded libcuda (0: none known yet).
static LIBCUDA: AtomicUsize = AtomicUsize::new(0);

/// Whether `addr` is one of our wrappers.
pub fn is_wrapper(addr: usize) -> bool {
    addr != 0 && WRAPPERS.iter().any(|w| w.load(Ordering::Relaxed) == addr)
}

/// Our wrapper for `h` (0 in unit tests).
pub fn wrapper(h: Hooked) -> usize {
    WRAPPERS[h as usize].load(Ordering::Relaxed)
}

/// Offers `addr` as the real function of `h` (from a `dlsym` or `cuGetProcAddress` answer).
/// The first real pointer wins; our own wrappers are refused.
pub fn offer_real(h: Hooked, addr: usize) {
    if addr == 0 || is_wrapper(addr) {
        return;
    }
    let _ = REAL[h as usize].compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire);
}

/// Remembers a handle of the loaded libcuda.
pub fn offer_libcuda_handle(handle: Handle) {
    if !handle.0.is_null() {
        let _ = LIBCUDA.compare_exchange(0, handle.0 as usize, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A handle of the loaded libcuda, if it is loaded: one seen in an intercepted `dlsym`, or
/// `dlopen("libcuda.so.1", RTLD_NOLOAD)`. Never loads it.
pub fn libcuda_handle() -> Option<Handle> {
    let h = LIBCUDA.load(Ordering::Acquire);
    if h != 0 {
        // SAFETY: only handles from dlopen are stored in LIBCUDA (and libcuda is never
        // closed: the driver keeps itself loaded).
        return Some(unsafe { Handle::from_raw(h as *mut c_void) });
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded library.
    let h = unsafe {
        libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        )
    };
    if h.is_null() {
        return None;
    }
    // SAFETY: a handle dlopen just gave out.
    offer_libcuda_handle(unsafe { Handle::from_raw(h) });
    // SAFETY: as above (the first handle stored wins; it came from dlopen too).
    Some(unsafe { Handle::from_raw(LIBCUDA.load(Ordering::Acquire) as *mut c_void) })
}

/// The handle of the library that contains `addr` (already loaded), e.g. the libcuda a
/// `cuGetProcAddress` pointer came from.
pub fn handle_of(addr: usize) -> Option<Handle> {
    // SAFETY: an all-zero Dl_info is valid (null pointers); it is an out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    let found = unsafe { libc::dladdr(addr as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is the loader's C string for a loaded object; NOLOAD never loads.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    // SAFETY: a handle dlopen just gave out.
    (!h.is_null()).then(|| unsafe { Handle::from_raw(h) })
}

/// libcuda's own export of `h`'s name, if libcuda is loaded and has it.
pub fn exported(h: Hooked) -> Option<usize> {
    let slot = &EXPORTED[h as usize];
    match slot.load(Ordering::Acquire) {
        0 => {}
        1 => return None,
        a => return Some(a),
    }
    let handle = libcuda_handle()?;
    let name = h.csymbol();
    let a = dlsym(handle, name);
    let a = if is_wrapper(a) { 0 } else { a };
    slot.store(if a == 0 { 1 } else { a }, Ordering::Release);
    (a != 0).then_some(a)
}

/// The real driver function behind `h`, looked up on first use. `None` when no libcuda is
/// loaded or it lacks the function.
pub fn real(h: Hooked) -> Option<usize> {
    let a = REAL[h as usize].load(Ordering::Acquire);
    if a != 0 {
        return Some(a);
    }
    let found = exported(h).or_else(|| {
        let a = dlsym(Handle::NEXT, h.csymbol());
        (a != 0 && !is_wrapper(a)).then_some(a)
    })?;
    offer_real(h, found);
    Some(REAL[h as usize].load(Ordering::Acquire))
}

/// A driver function pinwise calls itself (not hooked), by name, from libcuda.
pub fn driver_fn(name: &CStr) -> Option<usize> {
    let handle = libcuda_handle()?;
    let a = dlsym(handle, name);
    (a != 0 && !is_wrapper(a)).then_some(a)
}

/// Whether the loaded libcuda is pinwise's CPU stand-in (a TEST FIXTURE).
pub fn libcuda_is_standin() -> bool {
    driver_fn(c"pinwise_standin_fixture").is_some()
}

/// A slot for a runtime function found on first use.
pub struct RuntimeFn {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl RuntimeFn {
    /// A slot for `name`.
    pub const fn new(name: &'static CStr) -> Self {
        RuntimeFn {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The function's name.
    pub fn name(&self) -> &'static CStr {
        self.name
    }

    /// The real runtime function: the next definition after this library, else one in a
    /// loaded libcudart. `None` when no cudart has it.
    pub fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Acquire);
        if a != 0 {
            return Some(a);
        }
        let a = dlsym(Handle::NEXT, self.name);
        let a = if a != 0 {
            a
        } else {
            in_loaded_cudart(self.name)?
        };
        self.addr.store(a, Ordering::Release);
        Some(a)
    }
}

/// `name` in the first loaded library whose file name contains `libcudart`.
fn in_loaded_cudart(name: &CStr) -> Option<usize> {
    struct Search<'a> {
        name: &'a CStr,
        found: usize,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `Search` passed below; `info` is valid during the callback.
        let (search, info) = unsafe { (&mut *(data as *mut Search<'_>), &*info) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: the loader's C string for this object.
        let path = unsafe { CStr::from_ptr(info.dlpi_name) };
        if !path.to_bytes().windows(9).any(|w| w == b"libcudart") {
            return 0;
        }
        // SAFETY: NOLOAD returns a handle only for a loaded object; never loads one.
        let h = unsafe { libc::dlopen(info.dlpi_name, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if h.is_null() {
            return 0;
        }
        // SAFETY: a handle dlopen just gave out.
        let a = dlsym(unsafe { Handle::from_raw(h) }, search.name);
        if a != 0 {
            search.found = a;
            return 1;
        }
        0
    }
    let mut search = Search { name, found: 0 };
    // SAFETY: the callback only reads the loader's data during the call; `search` outlives it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search<'_> as *mut c_void) };
    (search.found != 0).then_some(search.found)
}
