//! Smoke check of pinwise-cuda against whatever `libcuda.so.1` is loaded (the real driver on
//! a GPU machine, or the CPU stand-in with `PINWISE_LIBCUDA`): devices, NVML, copies in every
//! form with byte checks, and "probes": the CUresult the driver gives for misuse (double
//! free, unregistering what was never registered, ...), so the stand-in's answers can be
//! compared with the real driver's.
//!
//! ```text
//! cargo build --release -p pinwise-cuda --example cuda_smoke
//! target/release/examples/cuda_smoke [--json FILE]
//! ```
//!
//! Exit status: 0 when every check passed, 1 when one failed, 2 when no driver could be used.
//! The bandwidth line is a sanity figure from one timed copy, not a benchmark.

use std::ffi::c_void;
use std::fmt::Write as _;
use std::ptr::NonNull;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use pinwise_cuda::nvml::Nvml;
use pinwise_cuda::sys::*;
use pinwise_cuda::{
    Context, DeviceBuffer, DevicePtr, Driver, Event, HostRegistration, MemoryType,
    PinnedHostRegion, ProcAddress, Stream,
};

const MIB: usize = 1 << 20;

/// Results, printed as text and written as JSON.
#[derive(Default)]
struct Report {
    /// Where the JSON goes; rewritten after every check and probe, so that a driver crash on
    /// a probe still leaves what was learned before it.
    json_path: Option<String>,
    lines: Vec<String>,
    checks: Vec<(String, bool, String)>,
    probes: Vec<(String, i32, String)>,
    json_facts: Vec<(String, String)>,
}

impl Report {
    fn line(&mut self, text: impl Into<String>) {
        let text = text.into();
        println!("{text}");
        self.lines.push(text);
    }
    fn fact(&mut self, key: &str, value: impl std::fmt::Display) {
        self.json_facts.push((key.to_string(), value.to_string()));
    }
    fn check(&mut self, name: &str, outcome: Result<bool>) {
        let (ok, detail) = match outcome {
            Ok(ok) => (ok, String::new()),
            Err(e) => (false, format!("{e:#}")),
        };
        println!(
            "  [{}] {name}{}",
            if ok { "PASS" } else { "FAIL" },
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        );
        self.checks.push((name.to_string(), ok, detail));
        self.save();
    }
    fn save(&self) {
        if let Some(path) = &self.json_path {
            if let Err(e) = std::fs::write(path, self.json()) {
                eprintln!("cannot write {path}: {e}");
            }
        }
    }
    fn probe(&mut self, driver: &Driver, name: &str, code: CUresult) {
        let cuda_name = if code == CUDA_SUCCESS {
            "CUDA_SUCCESS".to_string()
        } else {
            driver.error_name(code).unwrap_or_else(|| "?".to_string())
        };
        println!("  probe {name}: {code} {cuda_name}");
        self.probes.push((name.to_string(), code, cuda_name));
        self.save();
    }
    fn json(&self) -> String {
        let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::from("{\n  \"facts\": {");
        for (i, (k, v)) in self.json_facts.iter().enumerate() {
            let _ = write!(
                out,
                "{}\n    \"{}\": \"{}\"",
                if i > 0 { "," } else { "" },
                esc(k),
                esc(v)
            );
        }
        out.push_str("\n  },\n  \"checks\": [");
        for (i, (name, ok, detail)) in self.checks.iter().enumerate() {
            let _ = write!(
                out,
                "{}\n    {{\"name\": \"{}\", \"ok\": {ok}, \"detail\": \"{}\"}}",
                if i > 0 { "," } else { "" },
                esc(name),
                esc(detail)
            );
        }
        out.push_str("\n  ],\n  \"probes\": [");
        for (i, (name, code, cuda_name)) in self.probes.iter().enumerate() {
            let _ = write!(
                out,
                "{}\n    {{\"name\": \"{}\", \"code\": {code}, \"cuda_name\": \"{}\"}}",
                if i > 0 { "," } else { "" },
                esc(name),
                esc(cuda_name)
            );
        }
        out.push_str("\n  ]\n}\n");
        out
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn main() {
    let mut report = Report {
        json_path: std::env::args().skip_while(|a| a != "--json").nth(1),
        ..Report::default()
    };
    let code = match run(&mut report) {
        Ok(()) => {
            let failed = report.checks.iter().filter(|(_, ok, _)| !ok).count();
            report.line(format!(
                "SUMMARY: {} checks, {failed} failed, {} probes",
                report.checks.len(),
                report.probes.len()
            ));
            i32::from(failed > 0)
        }
        Err(e) => {
            report.line(format!("SUMMARY: no usable CUDA driver: {e:#}"));
            2
        }
    };
    report.save();
    std::process::exit(code);
}

fn run(report: &mut Report) -> Result<()> {
    let driver = Arc::new(Driver::load().context("loading the driver")?);
    if let Some(marker) = driver.standin_marker() {
        report.line(format!("NOTE: {marker}"));
        report.fact("standin", &marker);
    }
    driver.init().context("cuInit")?;
    let version = driver.version()?;
    report.line(format!(
        "driver: {} (CUDA {}.{})",
        driver.path(),
        version / 1000,
        version % 1000 / 10
    ));
    report.fact("driver_path", driver.path());
    report.fact("driver_version", version);
    let devices = driver.devices()?;
    for dev in &devices {
        let (major, minor) = dev.compute_capability()?;
        let pci = dev.pci_ids()?;
        report.line(format!(
            "device {}: {} | {} MiB | cc {major}.{minor} | PCI {} (domain {} bus {} device {}) | unified addressing {} | host register {} | async engines {}",
            dev.ordinal(),
            dev.name()?,
            dev.total_memory()? / MIB,
            dev.pci_bus_id()?,
            pci.domain,
            pci.bus,
            pci.device,
            dev.attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?,
            dev.attribute(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)?,
            dev.attribute(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?,
        ));
        report.fact(&format!("device{}_name", dev.ordinal()), dev.name()?);
        report.fact(
            &format!("device{}_pci_bus_id", dev.ordinal()),
            dev.pci_bus_id()?,
        );
    }
    match Nvml::load() {
        Ok(nvml) => {
            report.line(format!(
                "NVML: {} (driver {})",
                nvml.path(),
                nvml.driver_version().unwrap_or_default()
            ));
            for d in nvml.devices()? {
                let show = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
                report.line(format!(
                    "  nvml {}: {} | {} | PCIe gen {} (max {}) x{} (max x{})",
                    d.index,
                    d.name.clone().unwrap_or_default(),
                    d.pci_bus_id.clone().unwrap_or_default(),
                    show(d.pcie.current_generation),
                    show(d.pcie.max_generation),
                    show(d.pcie.current_width),
                    show(d.pcie.max_width),
                ));
                report.fact(
                    &format!("nvml{}_pcie_max", d.index),
                    format!(
                        "gen{} x{}",
                        show(d.pcie.max_generation),
                        show(d.pcie.max_width)
                    ),
                );
            }
        }
        Err(e) => report.line(format!("NVML: {e}")),
    }
    let dev = devices.first().context("no CUDA device")?;
    let ctx = dev.primary_context()?;
    ctx.make_current()?;
    report.line("checks on device 0:");
    checks(report, &ctx);
    report.line("probes (CUresult for misuse; compare stand-in and real driver):");
    probes(report, &driver, &ctx)?;
    capture_probes(report, &driver, &ctx)?;
    adjacent_registrations(report, &driver, &ctx)?;
    Ok(())
}

fn checks(report: &mut Report, ctx: &Context) {
    let n = 64 * MIB;
    report.check(
        "sync HtoD/DtoH, pageable, 64 MiB",
        (|| {
            let data = pattern(n, 1);
            let dev = DeviceBuffer::new(ctx, n)?;
            dev.copy_from_host(&data)?;
            let mut back = vec![0u8; n];
            dev.copy_to_host(&mut back)?;
            Ok(back == data)
        })(),
    );
    report.check("async HtoD/DtoH, cuMemHostAlloc, events, 64 MiB", (|| {
        let stream = Stream::new(ctx)?;
        let (a, b) = (Event::new(ctx)?, Event::new(ctx)?);
        let mut src = PinnedHostRegion::new(ctx, n, CU_MEMHOSTALLOC_PORTABLE)?;
        src.as_mut_slice().copy_from_slice(&pattern(n, 2));
        let dst = PinnedHostRegion::new(ctx, n, 0)?;
        let dev = DeviceBuffer::new(ctx, n)?;
        a.record(&stream)?;
        // SAFETY: both pinned regions outlive the synchronization and are untouched until it.
        unsafe { ctx.copy_htod_async(dev.ptr(), src.as_ptr(), n, &stream)? };
        b.record(&stream)?;
        // SAFETY: as above.
        unsafe { ctx.copy_dtoh_async(dst.as_mut_ptr(), dev.ptr(), n, &stream)? };
        stream.synchronize()?;
        let ms = a.elapsed_ms(&b)?;
        println!("    one pinned 64 MiB HtoD took {ms:.3} ms ({:.1} GB/s; sanity figure, not a benchmark)", n as f64 / (ms as f64 * 1e6));
        Ok(dst.as_slice() == src.as_slice())
    })());
    report.check(
        "cuMemAllocHost_v2 round trip",
        (|| {
            let mut host = PinnedHostRegion::alloc_host(ctx, MIB)?;
            host.as_mut_slice().copy_from_slice(&pattern(MIB, 3));
            let dev = DeviceBuffer::new(ctx, MIB)?;
            dev.copy_from_host(host.as_slice())?;
            let mut back = vec![0u8; MIB];
            dev.copy_to_host(&mut back)?;
            Ok(back == host.as_slice())
        })(),
    );
    report.check(
        "cuMemHostRegister: memory type Host while registered, unknown after",
        (|| {
            let mut v = vec![7u8; 4 * MIB + 4096];
            let off = v.as_ptr().align_offset(4096);
            let region = &mut v[off..off + 4 * MIB];
            let addr = region.as_ptr() as u64;
            let reg = HostRegistration::new(ctx, region, 0)?;
            let during = ctx.memory_type(addr)?;
            reg.unregister()?;
            let after = ctx.memory_type(addr)?;
            Ok(during == Some(MemoryType::Host) && after.is_none())
        })(),
    );
    report.check(
        "memory types: device buffer Device, pageable unknown",
        (|| {
            let dev = DeviceBuffer::new(ctx, MIB)?;
            let host = [0u8; 64];
            Ok(ctx.memory_type(dev.ptr().0)? == Some(MemoryType::Device)
                && ctx.memory_type(host.as_ptr() as u64)?.is_none())
        })(),
    );
    report.check(
        "cuMemcpy (unified) both ways, cuMemsetD8, cuMemcpyDtoD",
        (|| {
            let data = pattern(MIB, 4);
            let (d1, d2) = (DeviceBuffer::new(ctx, MIB)?, DeviceBuffer::new(ctx, MIB)?);
            let mut back = vec![0u8; MIB];
            // SAFETY: host buffers valid for MIB bytes during the calls.
            unsafe { ctx.copy(d1.ptr().0, data.as_ptr() as u64, MIB)? };
            d2.copy_from_device(&d1)?;
            // SAFETY: as above.
            unsafe { ctx.copy(back.as_mut_ptr() as u64, d2.ptr().0, MIB)? };
            let mut filled = vec![0u8; 4096];
            d2.fill(0xee)?;
            d2.copy_to_host(&mut filled)?;
            Ok(back == data && filled.iter().all(|&b| b == 0xee))
        })(),
    );
    report.check(
        "cuMemcpy2D_v2 and cuMemcpy3D_v2 (struct layouts)",
        (|| {
            let (w, h, hp, dp) = (100usize, 8usize, 128usize, 512usize);
            let image = pattern(hp * h, 5);
            let dev = DeviceBuffer::new(ctx, dp * h)?;
            let up = CUDA_MEMCPY2D {
                srcMemoryType: CU_MEMORYTYPE_HOST,
                srcHost: image.as_ptr() as *const c_void,
                srcPitch: hp,
                dstMemoryType: CU_MEMORYTYPE_DEVICE,
                dstDevice: dev.ptr().0,
                dstPitch: dp,
                WidthInBytes: w,
                Height: h,
                ..Default::default()
            };
            // SAFETY: `image` covers the rows described.
            unsafe { ctx.copy_2d(&up)? };
            let mut boxed = vec![0u8; hp * h];
            let down = CUDA_MEMCPY3D {
                srcMemoryType: CU_MEMORYTYPE_DEVICE,
                srcDevice: dev.ptr().0,
                srcPitch: dp,
                srcHeight: h,
                dstMemoryType: CU_MEMORYTYPE_HOST,
                dstHost: boxed.as_mut_ptr() as *mut c_void,
                dstPitch: hp,
                dstHeight: h,
                WidthInBytes: w,
                Height: h,
                Depth: 1,
                ..Default::default()
            };
            // SAFETY: `boxed` covers the rows described.
            unsafe { ctx.copy_3d(&down)? };
            Ok((0..h).all(|r| boxed[r * hp..r * hp + w] == image[r * hp..r * hp + w]))
        })(),
    );
}

fn probes(report: &mut Report, driver: &Arc<Driver>, ctx: &Context) -> Result<()> {
    let api = *driver.api();
    // A page-aligned page with a page of heap before it and one after it.
    let mut heap = vec![0u8; 4 * 4096];
    let off = heap.as_ptr().align_offset(4096) + 4096;
    let page = heap[off..].as_mut_ptr() as *mut c_void;
    // SAFETY (all raw calls below): arguments are valid pointers or deliberately wrong values
    // the driver must refuse; nothing is dereferenced by us.
    unsafe {
        let mut d: CUdeviceptr = 0;
        driver.check("cuMemAlloc_v2", (api.cuMemAlloc_v2)(&mut d, 4096))?;
        report.probe(driver, "cuMemFree_v2 first free", (api.cuMemFree_v2)(d));
        report.probe(driver, "cuMemFree_v2 double free", (api.cuMemFree_v2)(d));
        report.probe(driver, "cuMemFree_v2(0)", (api.cuMemFree_v2)(0));
        report.probe(
            driver,
            "cuMemAlloc_v2 0 bytes",
            (api.cuMemAlloc_v2)(&mut d, 0),
        );
        let mut p: *mut c_void = std::ptr::null_mut();
        report.probe(
            driver,
            "cuMemHostAlloc 0 bytes",
            (api.cuMemHostAlloc)(&mut p, 0, 0),
        );
        report.probe(
            driver,
            "cuMemHostAlloc bad flags 0x80",
            (api.cuMemHostAlloc)(&mut p, 4096, 0x80),
        );
        report.probe(
            driver,
            "cuMemFreeHost on malloc memory",
            (api.cuMemFreeHost)(page),
        );
        report.probe(
            driver,
            "cuMemHostUnregister never registered",
            (api.cuMemHostUnregister)(page),
        );
        report.probe(
            driver,
            "cuMemHostRegister_v2 0 bytes",
            (api.cuMemHostRegister_v2)(page, 0, 0),
        );
        report.probe(
            driver,
            "cuMemHostRegister_v2 first",
            (api.cuMemHostRegister_v2)(page, 4096, 0),
        );
        report.probe(
            driver,
            "cuMemHostRegister_v2 same range again",
            (api.cuMemHostRegister_v2)(page, 4096, 0),
        );
        let mut flags = 0u32;
        report.probe(
            driver,
            "cuMemHostGetFlags on registered memory",
            (api.cuMemHostGetFlags)(&mut flags, page),
        );
        report.probe(
            driver,
            "cuMemHostUnregister interior pointer",
            (api.cuMemHostUnregister)((page as *mut u8).add(64) as *mut c_void),
        );
        report.probe(
            driver,
            "cuMemHostUnregister",
            (api.cuMemHostUnregister)(page),
        );
        let mut memtype: CUmemorytype = 0;
        report.probe(
            driver,
            "cuPointerGetAttribute MEMORY_TYPE on pageable",
            (api.cuPointerGetAttribute)(
                &mut memtype as *mut _ as *mut c_void,
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                page as u64,
            ),
        );
        report.probe(
            driver,
            "cuPointerGetAttribute MEMORY_TYPE on freed device memory",
            (api.cuPointerGetAttribute)(
                &mut memtype as *mut _ as *mut c_void,
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                d,
            ),
        );
        let dev = DeviceBuffer::new(ctx, 4096)?;
        let big = vec![0u8; 8192];
        report.probe(
            driver,
            "cuMemcpyHtoD_v2 past the allocation",
            (api.cuMemcpyHtoD_v2)(dev.ptr().0, big.as_ptr() as *const c_void, 8192),
        );
        report.probe(
            driver,
            "cuMemcpyHtoD_v2 0 bytes",
            (api.cuMemcpyHtoD_v2)(dev.ptr().0, big.as_ptr() as *const c_void, 0),
        );
        // A copy that starts in registered memory and runs past the registration's end
        // (what pinwise-preload must never cause when it registers part of a buffer).
        let dev2 = DeviceBuffer::new(ctx, 8192)?;
        driver.check(
            "cuMemHostRegister_v2",
            (api.cuMemHostRegister_v2)(page, 4096, 0),
        )?;
        report.probe(
            driver,
            "cuMemcpyHtoD_v2 from registered memory past its end",
            (api.cuMemcpyHtoD_v2)(dev2.ptr().0, page as *const c_void, 8192),
        );
        report.probe(
            driver,
            "cuMemcpyDtoH_v2 into registered memory past its end",
            (api.cuMemcpyDtoH_v2)(page, dev2.ptr().0, 8192),
        );
        report.probe(
            driver,
            "cuMemcpyHtoD_v2 from pageable memory into registered memory",
            (api.cuMemcpyHtoD_v2)(
                dev2.ptr().0,
                (page as *const u8).sub(64) as *const c_void,
                4096,
            ),
        );
        driver.check("cuMemHostUnregister", (api.cuMemHostUnregister)(page))?;
        let e = Event::new(ctx)?;
        report.probe(
            driver,
            "cuEventQuery never recorded",
            (api.cuEventQuery)(e.handle()),
        );
        let mut ms = 0f32;
        report.probe(
            driver,
            "cuEventElapsedTime never recorded",
            (api.cuEventElapsedTime)(&mut ms, e.handle(), e.handle()),
        );
        report.probe(
            driver,
            "cuStreamDestroy_v2(NULL)",
            (api.cuStreamDestroy_v2)(std::ptr::null_mut()),
        );
        report.probe(driver, "cuInit(1)", (api.cuInit)(1));
        let mut ctx_handle: CUcontext = std::ptr::null_mut();
        report.probe(
            driver,
            "cuDevicePrimaryCtxRetain bad device",
            (api.cuDevicePrimaryCtxRetain)(&mut ctx_handle, 99),
        );
        let reg_region = NonNull::new(page as *mut u8).context("page")?;
        let reg = HostRegistration::from_raw(ctx, reg_region, 4096, CU_MEMHOSTREGISTER_DEVICEMAP)?;
        let mut mapped: CUdeviceptr = 0;
        report.probe(
            driver,
            "cuMemHostGetDevicePointer_v2 on registered DEVICEMAP",
            (api.cuMemHostGetDevicePointer_v2)(&mut mapped, page, 0),
        );
        report.fact(
            "registered_device_pointer_equals_host",
            mapped == page as u64,
        );
        reg.unregister()?;
        let _ = DevicePtr(mapped);
    }
    // What cuGetProcAddress hands out, compared with the exported symbols (uprobes attach to
    // exported symbols, so they fire for cudart only if these are equal).
    for (base, flags, symbol) in [
        ("cuMemcpyHtoD", 0, "cuMemcpyHtoD_v2"),
        ("cuMemcpyHtoDAsync", 0, "cuMemcpyHtoDAsync_v2"),
        ("cuMemcpyDtoH", 0, "cuMemcpyDtoH_v2"),
        ("cuMemHostAlloc", 0, "cuMemHostAlloc"),
        ("cuMemAllocHost", 0, "cuMemAllocHost_v2"),
        ("cuMemHostRegister", 0, "cuMemHostRegister_v2"),
        (
            "cuMemcpyHtoD",
            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
            "cuMemcpyHtoD_v2_ptds",
        ),
        (
            "cuMemcpyHtoDAsync",
            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
            "cuMemcpyHtoDAsync_v2_ptsz",
        ),
    ] {
        let got = driver.get_proc_address(base, 13000, flags)?;
        let exported = driver.symbol_address(symbol);
        let same = matches!((got, exported), (Some(ProcAddress::Found(a)), Some(b)) if a == b);
        report.line(format!(
            "  cuGetProcAddress({base}, 13000, flags {flags}) == dlsym({symbol}): {same}"
        ));
        report.fact(&format!("proc_address_{base}_{flags}_is_{symbol}"), same);
    }
    Ok(())
}

type BeginCaptureFn = unsafe extern "C" fn(CUstream, CUstreamCaptureMode) -> CUresult;
type EndCaptureFn = unsafe extern "C" fn(CUstream, *mut *mut c_void) -> CUresult;
type IsCapturingFn = unsafe extern "C" fn(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
type ExchangeModeFn = unsafe extern "C" fn(*mut CUstreamCaptureMode) -> CUresult;
type GraphDestroyFn = unsafe extern "C" fn(*mut c_void) -> CUresult;

/// Stream capture (CUDA graphs): what the driver answers to the calls pinwise-preload must
/// not make during a capture (waiting for the capturing stream, registering memory while a
/// global-mode capture is active) and to the ones it makes instead (asking whether a stream
/// captures, switching its thread to relaxed mode), so that the stand-in's model of capture
/// is checked against the real driver.
fn capture_probes(report: &mut Report, driver: &Arc<Driver>, ctx: &Context) -> Result<()> {
    let resolve = |name: &str| driver.symbol_address(name);
    let (Some(begin), Some(end), Some(is_capturing), Some(exchange), Some(destroy)) = (
        resolve("cuStreamBeginCapture_v2"),
        resolve("cuStreamEndCapture"),
        resolve("cuStreamIsCapturing"),
        resolve("cuThreadExchangeStreamCaptureMode"),
        resolve("cuGraphDestroy"),
    ) else {
        report.line("  stream capture: the driver exports no capture functions; probes skipped");
        return Ok(());
    };
    // SAFETY: each address is the driver's exported function of that name, whose C
    // signature (cuda.h) is the type it is read as.
    let (begin, end, is_capturing, exchange, destroy) = unsafe {
        (
            std::mem::transmute::<*mut c_void, BeginCaptureFn>(begin),
            std::mem::transmute::<*mut c_void, EndCaptureFn>(end),
            std::mem::transmute::<*mut c_void, IsCapturingFn>(is_capturing),
            std::mem::transmute::<*mut c_void, ExchangeModeFn>(exchange),
            std::mem::transmute::<*mut c_void, GraphDestroyFn>(destroy),
        )
    };
    let api = *driver.api();
    let stream = Stream::new(ctx)?;
    let s = stream.handle();
    let dev = DeviceBuffer::new(ctx, 4096)?;
    let mut heap = vec![0u8; 3 * 4096];
    let off = heap.as_ptr().align_offset(4096);
    let page = heap[off..].as_mut_ptr() as *mut c_void;
    let pinned = PinnedHostRegion::new(ctx, 4096, 0)?;
    let event = Event::new(ctx)?;
    // Ends the capture on `s`, says what the driver answered, and frees a graph it made.
    let finish = |report: &mut Report, what: &str| {
        let mut graph: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid stream and out-parameter.
        let rc = unsafe { end(s, &mut graph) };
        report.probe(
            driver,
            &format!("capture: cuStreamEndCapture after {what}"),
            rc,
        );
        if !graph.is_null() {
            // SAFETY: a graph the driver just made, destroyed once.
            unsafe { destroy(graph) };
        }
    };
    // SAFETY (all raw calls below): valid handles, pointers and out-parameters; every
    // capture begun is ended before the next one.
    unsafe {
        let mut status: CUstreamCaptureStatus = 99;
        report.probe(
            driver,
            "capture: cuStreamIsCapturing before any capture",
            is_capturing(s, &mut status),
        );
        report.fact(
            "capture_status_before",
            status == CU_STREAM_CAPTURE_STATUS_NONE,
        );

        // 1. Waiting for the capturing stream (what pinwise-preload did after an async copy).
        report.probe(
            driver,
            "capture: cuStreamBeginCapture_v2 global",
            begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
        );
        report.probe(
            driver,
            "capture: cuStreamIsCapturing while capturing",
            is_capturing(s, &mut status),
        );
        report.fact(
            "capture_status_active",
            status == CU_STREAM_CAPTURE_STATUS_ACTIVE,
        );
        report.probe(
            driver,
            "capture: cuMemcpyHtoDAsync_v2 from pinned memory",
            (api.cuMemcpyHtoDAsync_v2)(dev.ptr().0, pinned.as_ptr() as *const c_void, 4096, s),
        );
        report.probe(
            driver,
            "capture: cuStreamSynchronize on the capturing stream",
            (api.cuStreamSynchronize)(s),
        );
        report.probe(
            driver,
            "capture: cuStreamIsCapturing after the wait",
            is_capturing(s, &mut status),
        );
        report.fact(
            "capture_status_after_wait_invalidated",
            status == CU_STREAM_CAPTURE_STATUS_INVALIDATED,
        );
        finish(report, "a wait on the stream");

        // 2. Registering memory from the capturing thread in global mode.
        begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        let rc = (api.cuMemHostRegister_v2)(page, 4096, 0);
        report.probe(driver, "capture: cuMemHostRegister_v2 in global mode", rc);
        if rc == CUDA_SUCCESS {
            (api.cuMemHostUnregister)(page);
        }
        finish(report, "a registration in global mode");

        // 3. The same, with the thread switched to relaxed mode (what pinwise does).
        begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        report.probe(
            driver,
            "capture: cuThreadExchangeStreamCaptureMode to relaxed",
            exchange(&mut mode),
        );
        report.fact(
            "capture_previous_mode_global",
            mode == CU_STREAM_CAPTURE_MODE_GLOBAL,
        );
        let rc = (api.cuMemHostRegister_v2)(page, 4096, 0);
        report.probe(driver, "capture: cuMemHostRegister_v2 in relaxed mode", rc);
        if rc == CUDA_SUCCESS {
            report.probe(
                driver,
                "capture: cuMemHostUnregister in relaxed mode",
                (api.cuMemHostUnregister)(page),
            );
        }
        exchange(&mut mode);
        report.probe(
            driver,
            "capture: cuMemcpyHtoDAsync_v2 after relaxed calls",
            (api.cuMemcpyHtoDAsync_v2)(dev.ptr().0, pinned.as_ptr() as *const c_void, 4096, s),
        );
        finish(report, "relaxed-mode registration");

        // 4. A synchronous copy (legacy stream) during a global capture.
        begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        report.probe(
            driver,
            "capture: cuMemcpyHtoD_v2 during a global capture",
            (api.cuMemcpyHtoD_v2)(dev.ptr().0, pinned.as_ptr() as *const c_void, 4096),
        );
        finish(report, "a synchronous copy");

        // 5. Querying an event recorded in the capture.
        begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        report.probe(
            driver,
            "capture: cuEventRecord on the capturing stream",
            (api.cuEventRecord)(event.handle(), s),
        );
        report.probe(
            driver,
            "capture: cuEventQuery of an event recorded in the capture",
            (api.cuEventQuery)(event.handle()),
        );
        finish(report, "an event query");
        report.probe(
            driver,
            "capture: cuStreamIsCapturing after the captures",
            is_capturing(s, &mut status),
        );
    }
    stream.synchronize()?;
    Ok(())
}

/// Whether one copy may span several adjacent registrations, and at what speed: the question
/// behind registering a large region in chunks (a pinned pool block spanning two chunks is
/// only usable if the driver takes such a copy at pinned speed). A probe of the answer, then
/// 64 MiB copied from memory registered as 1, 2 and 8 pieces, and not registered (sanity
/// figures from 5 synchronous copies each, not a benchmark).
fn adjacent_registrations(report: &mut Report, driver: &Arc<Driver>, ctx: &Context) -> Result<()> {
    let api = *driver.api();
    let n = 64 * MIB;
    let mut heap = vec![0u8; n + 4096];
    let off = heap.as_ptr().align_offset(4096);
    let region = &mut heap[off..off + n];
    region.copy_from_slice(&pattern(n, 9));
    let base = region.as_mut_ptr();
    let dev = DeviceBuffer::new(ctx, n)?;
    // Registers `[base, base + len)` as `pieces` equal adjacent registrations.
    let register = |len: usize, pieces: usize| -> CUresult {
        let piece = len / pieces;
        for k in 0..pieces {
            // SAFETY: inside `region`, which stays alive and mapped until unregistered.
            let rc =
                unsafe { (api.cuMemHostRegister_v2)(base.add(k * piece) as *mut c_void, piece, 0) };
            if rc != CUDA_SUCCESS {
                return rc;
            }
        }
        CUDA_SUCCESS
    };
    let unregister = |len: usize, pieces: usize| {
        let piece = len / pieces;
        for k in 0..pieces {
            // SAFETY: a registration made by `register` above.
            unsafe { (api.cuMemHostUnregister)(base.add(k * piece) as *mut c_void) };
        }
    };
    driver.check("cuMemHostRegister_v2", register(8192, 2))?;
    // SAFETY (both probes): the host range is `region`'s first 8 KiB, the device range is
    // `dev`'s first 8 KiB.
    let up = unsafe { (api.cuMemcpyHtoD_v2)(dev.ptr().0, base as *const c_void, 8192) };
    report.probe(
        driver,
        "cuMemcpyHtoD_v2 across two adjacent registrations",
        up,
    );
    let down = unsafe { (api.cuMemcpyDtoH_v2)(base as *mut c_void, dev.ptr().0, 8192) };
    report.probe(
        driver,
        "cuMemcpyDtoH_v2 across two adjacent registrations",
        down,
    );
    unregister(8192, 2);
    if up != CUDA_SUCCESS {
        return Ok(());
    }
    let fixture = if driver.standin_marker().is_some() {
        " (CPU stand-in, a TEST FIXTURE: not a GPU figure)"
    } else {
        ""
    };
    for pieces in [1usize, 2, 8, 0] {
        if pieces > 0 {
            driver.check("cuMemHostRegister_v2", register(n, pieces))?;
        }
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = std::time::Instant::now();
            // SAFETY: `region` and `dev` are both `n` bytes and outlive the call.
            let rc = unsafe { (api.cuMemcpyHtoD_v2)(dev.ptr().0, base as *const c_void, n) };
            driver.check("cuMemcpyHtoD_v2", rc)?;
            times.push(t.elapsed().as_secs_f64());
        }
        if pieces > 0 {
            unregister(n, pieces);
        }
        times.sort_by(f64::total_cmp);
        let gbps = n as f64 / times[2] / 1e9;
        let what = match pieces {
            0 => "not registered".to_string(),
            1 => "one registration".to_string(),
            k => format!("{k} adjacent registrations"),
        };
        report.line(format!(
            "  64 MiB HtoD from memory {what}: {gbps:.1} GB/s (median of 5 synchronous copies){fixture}"
        ));
        report.fact(
            &format!("adjacent_registrations_{pieces}_htod_GBps"),
            format!("{gbps:.2}"),
        );
    }
    Ok(())
}
