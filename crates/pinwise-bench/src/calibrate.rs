//! `pinwise calibrate`: measures, on this machine's GPU, the curves pinwise-core's cost
//! model reads, and returns them as a [`CostModel`] (written with [`CostModel::to_csv`], the
//! format of `crates/pinwise-core/data/h200-transfer-and-pin-costs.csv`).
//!
//! For each size: host-to-device and device-to-host bandwidth from pageable memory (touched
//! `malloc` memory), from `cuMemHostAlloc` memory and (host to device) from registered
//! memory; and the time of `cuMemHostAlloc`, `cuMemFreeHost`, `cuMemHostRegister` of touched
//! memory, `cuMemHostUnregister`, and of mapping plus touching fresh memory. Each figure is
//! the median of several measurements; copies are synchronous driver copies on a real device
//! buffer, timed after a warm-up. The default sizes (4 KiB to 1 GiB) take a few seconds on
//! an H200.

use crate::BenchError;
use std::time::Instant;

use pinwise_core::cost::CalibrationPoint;
use pinwise_core::CostModel;

use crate::BenchDevice;
use pinwise_alloc::backend::{DevicePtr, PinBackend, StreamHandle};

/// What to measure: kept in pinwise-alloc, whose automatic calibration
/// ([`pinwise_alloc::autocal::quick_config`]) chooses its own settings.
pub use pinwise_alloc::calibrate::CalibrationConfig;
use pinwise_alloc::grade::PAGE;
use pinwise_alloc::pageable;

/// Progress of a calibration.
#[derive(Debug, Clone)]
pub struct CalibrationProgress {
    /// Sizes done.
    pub done: usize,
    /// Sizes in all.
    pub total: usize,
    /// The size being measured.
    pub size: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A page-aligned anonymous mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Result<Mapping, BenchError> {
        Self::map(len, false)
    }
    /// Fresh memory obtained the way the allocator obtains it before registering it
    /// (large mappings advised to use huge pages and populated at once), so that the
    /// calibration's "map and touch" cost is the one the engine will pay.
    fn like_engine(len: usize) -> Result<Mapping, BenchError> {
        Self::map(len, true)
    }
    fn map(len: usize, huge: bool) -> Result<Mapping, BenchError> {
        let len = len.next_multiple_of(PAGE);
        let ptr = pageable::map_anonymous(len, huge)
            .ok_or_else(|| BenchError::OutOfMemory("mmap failed".into()))?;
        Ok(Mapping { ptr, len })
    }
    /// Populates every page as the engine does before registering (one write per page).
    fn touch(&self) {
        // SAFETY: our own writable mapping of `len` bytes, used by nobody else.
        unsafe { pageable::touch_pages(self.ptr, self.len) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, not registered (callers unregister first).
        unsafe { pageable::unmap(self.ptr, self.len) };
    }
}

/// Measures the calibration on `device`. The model's source names the device, and says
/// "TEST FIXTURE" when the backend is one.
pub fn calibrate(
    config: &CalibrationConfig,
    device: &dyn BenchDevice,
    progress: &mut dyn FnMut(&CalibrationProgress),
) -> Result<CostModel, BenchError> {
    let backend = device.backend();
    let b: &dyn PinBackend = &*backend;
    let max = config
        .sizes
        .iter()
        .copied()
        .max()
        .ok_or_else(|| BenchError::invalid("no sizes to calibrate"))?;
    let dev = device.alloc_device(max)?;
    let result = (|| -> Result<Vec<CalibrationPoint>, BenchError> {
        // Source buffers, touched once: pageable (a mapping) and pinned.
        let pageable_buf = Mapping::new(max)?;
        pageable_buf.touch();
        let pinned_buf = b.alloc_pinned(max, 0)?;
        let pinned = PinnedGuard(b, pinned_buf);
        // Warm-up: the first copies of a process pay one-off costs.
        copy_time(b, dev, pageable_buf.ptr, PAGE, true)?;
        copy_time(b, dev, pinned.1, PAGE, true)?;
        let mut points = Vec::new();
        for (i, &size) in config.sizes.iter().enumerate() {
            progress(&CalibrationProgress {
                done: i,
                total: config.sizes.len(),
                size,
            });
            points.push(measure_size(config, b, dev, &pageable_buf, pinned.1, size)?);
        }
        progress(&CalibrationProgress {
            done: config.sizes.len(),
            total: config.sizes.len(),
            size: max,
        });
        Ok(points)
    })();
    device.free_device(dev);
    let points = result?;
    let source = if backend.is_fixture() {
        format!(
            "TEST FIXTURE, not a GPU calibration: {}",
            backend.describe()
        )
    } else {
        format!("pinwise calibrate on {}", backend.describe())
    };
    let source = if config.write_before_upload {
        format!("{source}; uploads of buffers the CPU has just written")
    } else {
        source
    };
    Ok(CostModel::from_points(points, &source)?)
}

struct PinnedGuard<'a>(&'a dyn PinBackend, *mut u8);

impl Drop for PinnedGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_pinned in `calibrate`, freed once here.
        let _ = unsafe { self.0.free_pinned(self.1) };
    }
}

/// The CPU's write of `len` bytes of `host` (a program filling its data), untimed.
fn write_buffer(host: *mut u8, len: usize, value: u8) {
    // SAFETY: callers pass a live buffer of at least `len` bytes that nothing else uses.
    unsafe { std::ptr::write_bytes(host, value, len) };
}

/// Seconds of one synchronous copy of `len` bytes between `host` and `dev`.
fn copy_time(
    b: &dyn PinBackend,
    dev: DevicePtr,
    host: *mut u8,
    len: usize,
    htod: bool,
) -> Result<f64, BenchError> {
    let t = Instant::now();
    // SAFETY: `host` is a live buffer of at least `len` bytes and `dev` a device buffer of at
    // least `len` bytes; the copy is synchronous.
    unsafe {
        if htod {
            b.copy_htod(dev, host, len, None)
        } else {
            b.copy_dtoh(host, dev, len, None)
        }
    }?;
    // Pageable host-to-device copies may return once staged: wait for the transfer.
    b.synchronize_stream(StreamHandle::DEFAULT)?;
    Ok(t.elapsed().as_secs_f64())
}

/// GB/s of copies of `len` bytes: the median over repeats of (copies per repeat x len /
/// time), with enough copies per repeat to move `min_bytes_per_figure`.
///
/// Each timed copy follows an untimed copy the other way on the same buffer: buffers worth
/// pinning move in round trips (upload, compute, download), and there a pageable copy costs
/// more than in a one-way loop (on an H200, a 16 KiB pageable round trip took 23.6 us where
/// one-way loops summed to 16.2 us; pinned round trips matched their one-way sum within 4 %:
/// bench/results/gpu-alloc.md).
fn bandwidth(
    config: &CalibrationConfig,
    b: &dyn PinBackend,
    dev: DevicePtr,
    host: *mut u8,
    len: usize,
    htod: bool,
) -> Result<f64, BenchError> {
    let copies = config.min_bytes_per_figure.div_ceil(len).clamp(1, 4096);
    let mut rates = Vec::new();
    for _ in 0..config.repeats.max(1) {
        let mut secs = 0.0;
        for i in 0..copies {
            copy_time(b, dev, host, len, !htod)?;
            if htod && config.write_before_upload {
                write_buffer(host, len, i as u8);
            }
            secs += copy_time(b, dev, host, len, htod)?;
        }
        rates.push((copies * len) as f64 / secs / 1e9);
    }
    Ok(median(rates))
}

fn micros(f: impl FnOnce() -> Result<(), BenchError>) -> Result<f64, BenchError> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

fn measure_size(
    config: &CalibrationConfig,
    b: &dyn PinBackend,
    dev: DevicePtr,
    pageable_buf: &Mapping,
    pinned: *mut u8,
    size: usize,
) -> Result<CalibrationPoint, BenchError> {
    let pageable_h2d = bandwidth(config, b, dev, pageable_buf.ptr, size, true)?;
    let pageable_d2h = bandwidth(config, b, dev, pageable_buf.ptr, size, false)?;
    let pinned_h2d = bandwidth(config, b, dev, pinned, size, true)?;
    let pinned_d2h = bandwidth(config, b, dev, pinned, size, false)?;

    let reps = config.repeats.max(1);
    let (mut alloc_us, mut free_us, mut reg_us, mut unreg_us, mut touch_us, mut reg_bw) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        // cuMemHostAlloc / cuMemFreeHost of fresh pinned memory.
        let mut p = std::ptr::null_mut();
        alloc_us.push(micros(|| {
            p = b.alloc_pinned(size, 0)?;
            Ok(())
        })?);
        // SAFETY: allocated just above, freed once.
        free_us.push(micros(|| {
            unsafe { b.free_pinned(p) }.map_err(BenchError::from)
        })?);

        // Mapping and touching fresh memory the way the engine does before registering it
        // (what fresh registered memory costs beyond the registration itself).
        let mut m = None;
        touch_us.push(micros(|| {
            let fresh = Mapping::like_engine(size)?;
            fresh.touch();
            m = Some(fresh);
            Ok(())
        })?);
        let m = m.expect("mapped above");
        // Registering that touched memory, copying from it, unregistering it.
        // SAFETY: our own mapping, mapped until `m` drops after the unregister below.
        reg_us.push(micros(|| {
            unsafe { b.register(m.ptr, m.len) }.map_err(BenchError::from)
        })?);
        let copies = config.min_bytes_per_figure.div_ceil(size).clamp(1, 1024) / reps + 1;
        let mut secs = 0.0;
        for i in 0..copies {
            if config.write_before_upload {
                write_buffer(m.ptr, size, i as u8);
            }
            secs += copy_time(b, dev, m.ptr, size, true)?;
        }
        reg_bw.push((copies * size) as f64 / secs / 1e9);
        // SAFETY: registered just above.
        unreg_us.push(micros(|| {
            unsafe { b.unregister(m.ptr) }.map_err(BenchError::from)
        })?);
    }
    Ok(CalibrationPoint {
        size_bytes: size as u64,
        pageable_h2d_gbps: pageable_h2d,
        pinned_h2d_gbps: pinned_h2d,
        registered_h2d_gbps: median(reg_bw),
        pageable_d2h_gbps: pageable_d2h,
        pinned_d2h_gbps: pinned_d2h,
        mallochost_us: median(alloc_us),
        freehost_us: median(free_us),
        hostregister_us: median(reg_us),
        hostunregister_us: median(unreg_us),
        malloc_touch_us: median(touch_us),
    })
}

/// The host memory a round trip of [`probe_round_trips`] copies from and into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeBuffer {
    /// A touched anonymous mapping of the size (what `malloc` gives large requests).
    Pageable,
    /// `cuMemHostAlloc` of exactly the size (a caching pool's block, pin-each).
    MallocHost,
    /// A touched mapping of the size, registered (pinwise's small pool segments).
    Registered,
}

impl ProbeBuffer {
    /// All three, in table order.
    pub const ALL: [ProbeBuffer; 3] = [
        ProbeBuffer::Pageable,
        ProbeBuffer::MallocHost,
        ProbeBuffer::Registered,
    ];

    /// Its name in tables.
    pub const fn name(self) -> &'static str {
        match self {
            ProbeBuffer::Pageable => "pageable",
            ProbeBuffer::MallocHost => "cuMemHostAlloc",
            ProbeBuffer::Registered => "registered",
        }
    }
}

/// One (size, buffer) of [`probe_round_trips`]: microseconds per host-to-device plus
/// device-to-host round trip, the median over repeats, timed four ways.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundTripProbe {
    /// Bytes copied each way.
    pub size: usize,
    /// The host buffer.
    pub buffer: ProbeBuffer,
    /// As `pinwise calibrate` times copies: each copy followed by a stream synchronize,
    /// host-to-device and device-to-host timed apart and summed.
    pub calibrated_us: f64,
    /// Host-to-device then device-to-host, back to back (the second waits for the first in
    /// stream order), no synchronize between.
    pub back_to_back_us: f64,
    /// As `back_to_back_us`, the CPU having written the whole buffer just before (untimed),
    /// as the matrix's workload and most programs do.
    pub written_first_us: f64,
    /// The CPU's write of the whole buffer, timed, then the round trip: a program's cycle.
    /// Against `written_first_us`, what writing costs after the last download (a
    /// download into pinned memory by DMA leaves none of it in the CPU's caches; the
    /// driver's copy out of its staging buffer into pageable memory does).
    pub write_and_round_trip_us: f64,
}

/// Measures round trips at small sizes four ways ([`RoundTripProbe`]), from pageable,
/// `cuMemHostAlloc` and registered buffers of each size, to see whether the calibration's
/// way of timing copies (each synchronized on its own, on a buffer the CPU has not just
/// written) predicts what a program's round trip costs. Small sizes only: at 4 KiB the
/// calibration gave pinned copies a 10 % edge on an H100 that the matrix's workload did not
/// show (`bench/results/alloc-adaptive-analysis.md`, section 4). `round_trips` per repeat,
/// `repeats` repeats (medians), after a warm-up.
pub fn probe_round_trips(
    device: &dyn BenchDevice,
    sizes: &[usize],
    round_trips: usize,
    repeats: usize,
) -> Result<Vec<RoundTripProbe>, BenchError> {
    let backend = device.backend();
    let b: &dyn PinBackend = &*backend;
    let max = sizes.iter().copied().max().unwrap_or(PAGE).max(PAGE);
    let dev = device.alloc_device(max)?;
    let result = (|| -> Result<Vec<RoundTripProbe>, BenchError> {
        let mut out = Vec::new();
        for &size in sizes {
            for buffer in ProbeBuffer::ALL {
                out.push(probe_one(b, dev, size, buffer, round_trips, repeats)?);
            }
        }
        Ok(out)
    })();
    device.free_device(dev);
    result
}

fn probe_one(
    b: &dyn PinBackend,
    dev: DevicePtr,
    size: usize,
    buffer: ProbeBuffer,
    round_trips: usize,
    repeats: usize,
) -> Result<RoundTripProbe, BenchError> {
    let size = size.max(1);
    let mapping = match buffer {
        ProbeBuffer::MallocHost => None,
        _ => {
            let m = Mapping::new(size)?;
            m.touch();
            Some(m)
        }
    };
    let host = match (&mapping, buffer) {
        (Some(m), ProbeBuffer::Registered) => {
            // SAFETY: our own mapping, unregistered below before it is unmapped.
            unsafe { b.register(m.ptr, m.len) }?;
            m.ptr
        }
        (Some(m), _) => m.ptr,
        (None, _) => b.alloc_pinned(size, 0)?,
    };
    let measured = (|| -> Result<RoundTripProbe, BenchError> {
        let n = round_trips.max(1);
        let write = |v: u8| {
            // SAFETY: `host` is a live buffer of at least `size` bytes.
            unsafe { std::ptr::write_bytes(host, v, size) };
        };
        let round_trip = |fill: Option<u8>| -> Result<f64, BenchError> {
            if let Some(v) = fill {
                write(v);
            }
            let t = Instant::now();
            // SAFETY: `host` and `dev` hold at least `size` bytes; the copies are
            // synchronous.
            unsafe {
                b.copy_htod(dev, host, size, None)?;
                b.copy_dtoh(host, dev, size, None)?;
            }
            Ok(t.elapsed().as_secs_f64())
        };
        for i in 0..8 {
            round_trip(Some(i as u8))?;
        }
        let (mut cal, mut b2b, mut written, mut cycle) = (vec![], vec![], vec![], vec![]);
        for _ in 0..repeats.max(1) {
            let mut secs = 0.0;
            for _ in 0..n {
                secs += copy_time(b, dev, host, size, true)?;
                secs += copy_time(b, dev, host, size, false)?;
            }
            cal.push(secs / n as f64 * 1e6);
            let mut secs = 0.0;
            for _ in 0..n {
                secs += round_trip(None)?;
            }
            b2b.push(secs / n as f64 * 1e6);
            let mut secs = 0.0;
            for i in 0..n {
                secs += round_trip(Some(i as u8))?;
            }
            written.push(secs / n as f64 * 1e6);
            let t = Instant::now();
            for i in 0..n {
                write(i as u8);
                round_trip(None)?;
            }
            cycle.push(t.elapsed().as_secs_f64() / n as f64 * 1e6);
        }
        Ok(RoundTripProbe {
            size,
            buffer,
            calibrated_us: median(cal),
            back_to_back_us: median(b2b),
            written_first_us: median(written),
            write_and_round_trip_us: median(cycle),
        })
    })();
    match (&mapping, buffer) {
        // SAFETY: registered above; the mapping is unmapped when `mapping` drops after this.
        (Some(m), ProbeBuffer::Registered) => unsafe { b.unregister(m.ptr) }?,
        (Some(_), _) => {}
        // SAFETY: allocated above by alloc_pinned, freed once.
        (None, _) => unsafe { b.free_pinned(host) }?,
    }
    measured
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MockDevice;
    use pinwise_alloc::testing::MockBackend;
    use std::sync::Arc;

    /// The probe runs every buffer kind at every size and gives positive times (the mock's
    /// times mean nothing: a fixture).
    #[test]
    fn the_round_trip_probe_covers_every_buffer_and_size() {
        let mock = Arc::new(MockBackend::new());
        let dev = MockDevice(mock.clone());
        let rows = probe_round_trips(&dev, &[4096, 65536], 4, 3).unwrap();
        assert_eq!(rows.len(), 6);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r.size, [4096, 65536][i / 3]);
            assert_eq!(r.buffer, ProbeBuffer::ALL[i % 3]);
            assert!(r.calibrated_us > 0.0 && r.back_to_back_us > 0.0 && r.written_first_us > 0.0);
            assert!(r.write_and_round_trip_us > 0.0);
        }
        // Every pinned and registered buffer was given back.
        assert_eq!(mock.pinned_bytes(), 0);
        assert!(mock.peak_pinned_bytes() >= 65536);
    }

    /// With `write_before_upload` (the default), every timed host-to-device copy uploads
    /// what the CPU has just written (the last value written is on the device); without, the
    /// buffer holds what the download before it left (zeros here).
    #[test]
    fn uploads_are_of_buffers_the_cpu_has_just_written_when_asked() {
        for write in [false, true] {
            let mock = MockBackend::new();
            let len = 4096;
            let dev = mock.alloc_device(len);
            let mut host = vec![0u8; len];
            let config = CalibrationConfig {
                sizes: vec![len],
                repeats: 1,
                min_bytes_per_figure: 4 * len,
                write_before_upload: write,
            };
            let gbps = bandwidth(&config, &mock, dev, host.as_mut_ptr(), len, true).unwrap();
            assert!(gbps > 0.0);
            let mut back = vec![0u8; len];
            // SAFETY: both buffers hold `len` bytes; the mock copies synchronously.
            unsafe { mock.copy_dtoh(back.as_mut_ptr(), dev, len, None) }.unwrap();
            let want = if write { 3 } else { 0 };
            assert!(
                back.iter().all(|&v| v == want),
                "write {write}: {:?}",
                &back[..4]
            );
            mock.free_device(dev);
        }
        // The default, for `pinwise calibrate` and the automatic calibration alike.
        assert!(CalibrationConfig::default().write_before_upload);
        assert!(pinwise_alloc::autocal::quick_config().write_before_upload);
        let dev = MockDevice(Arc::new(MockBackend::new()));
        let config = CalibrationConfig {
            sizes: vec![4096],
            repeats: 1,
            min_bytes_per_figure: 4096,
            ..CalibrationConfig::default()
        };
        let model = calibrate(&config, &dev, &mut |_| {}).unwrap();
        assert!(
            model
                .source()
                .contains("uploads of buffers the CPU has just written"),
            "{}",
            model.source()
        );
    }

    #[test]
    fn calibration_on_the_mock_is_labelled_and_loads_back() {
        let dev = MockDevice(Arc::new(MockBackend::new()));
        let config = CalibrationConfig {
            write_before_upload: false,
            sizes: vec![4096, 65536, 1 << 20],
            repeats: 3,
            min_bytes_per_figure: 1 << 20,
        };
        let mut calls = 0;
        let model = calibrate(&config, &dev, &mut |_| calls += 1).unwrap();
        assert_eq!(calls, 4);
        assert_eq!(model.points().len(), 3);
        assert!(
            model.source().contains("TEST FIXTURE"),
            "{}",
            model.source()
        );
        let csv = model.to_csv();
        assert!(csv.contains("TEST FIXTURE"));
        let back = CostModel::from_csv_str(&csv, "round trip").unwrap();
        assert_eq!(back.points().len(), 3);
        assert!(back.points().iter().all(|p| p.pinned_h2d_gbps > 0.0));
    }
}
