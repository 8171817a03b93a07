//! `pinwise calibrate`: measure this machine's transfer and pinning costs and write the
//! calibration file the allocator (and `pinwise bench alloc --calibration`) loads.
//!
//! On the CPU stand-in for libcuda it runs too, but the file says it is TEST FIXTURE data,
//! not a GPU calibration.
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::PinBackend;
use pinwise_bench::calibrate::{calibrate, probe_round_trips, CalibrationConfig};
use pinwise_bench::CudaDevice;
use pinwise_core::units::format_size_exact;

/// Arguments of `pinwise calibrate`.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Where to write the calibration (CSV in the format of pinwise-core's built-in table).
    /// (`--out` is the older spelling.)
    #[arg(
        short,
        long = "output",
        alias = "out",
        default_value = "pinwise-calibration.csv"
    )]
    out: PathBuf,
    /// Replace the output file if it exists already.
    #[arg(long)]
    force: bool,
    /// Sizes to measure, comma-separated (e.g. `4K,64K,1M,16M,256M,1G`). Default: 4 KiB to
    /// 1 GiB in steps of 4.
    #[arg(long, value_delimiter = ',', value_parser = parse_size_or_ram_percent_usize)]
    sizes: Option<Vec<usize>>,
    /// Measurements per figure (the median is kept).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Instead of calibrating: time round trips (host to device and back) at small sizes
    /// (default 4K,16K,64K,256K,1M; `--sizes`) from pageable, `cuMemHostAlloc` and registered
    /// buffers four ways (as the calibration times copies, back to back, with the buffer
    /// written by the CPU first, and with that write timed too), and print the table. Writes
    /// no file (so `-o`, `--force`, `--copies-written-first` and `--copies-unwritten` do not
    /// go with it).
    #[arg(long, conflicts_with_all = ["out", "force", "copies_written_first", "copies_unwritten"])]
    probe_round_trips: bool,
    /// Time every host-to-device copy of a buffer the CPU has just written, as programs
    /// fill their data before uploading it (the default; the calibration's source says so).
    #[arg(long, conflicts_with = "copies_unwritten")]
    copies_written_first: bool,
    /// Time host-to-device copies of a buffer holding what the previous download left, not
    /// written by the CPU in between (the method before cache version 2: on the H100 and
    /// H200 it made pinned 4 KiB copies look faster than pageable ones where programs found
    /// them slower; bench/results/calibration-written-first.md).
    #[arg(long)]
    copies_unwritten: bool,
}

/// [`pinwise_core::units::parse_size_or_ram_percent`] (a size, or a percentage of RAM) as a
/// `usize`.
pub(crate) fn parse_size_or_ram_percent_usize(
    s: &str,
) -> Result<usize, pinwise_core::units::UnitError> {
    pinwise_core::units::parse_size_or_ram_percent(s).map(|v| v as usize)
}

/// Runs `pinwise calibrate`.
pub fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    if args.probe_round_trips {
        return probe(args);
    }
    // Checked before measuring, which takes a while.
    super::outputs::check_before_run("-o", &args.out, args.force)?;
    let driver = pinwise_cuda::Driver::shared()
        .context("pinwise calibrate needs the CUDA driver (libcuda.so.1, or PINWISE_LIBCUDA)")?;
    let backend = Arc::new(
        CudaBackend::on_device(&driver, args.device)
            .with_context(|| format!("CUDA device {}", args.device))?,
    );
    if backend.is_fixture() {
        eprintln!(
            "note: {} -- the calibration is labelled TEST FIXTURE data, not a GPU calibration",
            backend.describe()
        );
    }
    let mut config = CalibrationConfig::default();
    if let Some(sizes) = args.sizes {
        if sizes.is_empty() {
            return Err(super::outputs::usage("--sizes is empty"));
        }
        config.sizes = sizes;
        config.sizes.sort_unstable();
        config.sizes.dedup();
    }
    config.repeats = args.repeats.max(1);
    config.write_before_upload = args.copies_written_first || !args.copies_unwritten;
    let device = CudaDevice::new(backend.clone());
    let bar = ProgressBar::new(config.sizes.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} calibrating [{bar:30}] {pos}/{len} {msg} ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let model = calibrate(&config, &device, &mut |p| {
        bar.set_position(p.done as u64);
        bar.set_message(format_size_exact(p.size as u64));
    })
    .map_err(|e| anyhow::anyhow!("calibration failed: {e}"))?;
    bar.finish_and_clear();
    super::outputs::write_output("-o", &args.out, args.force, |w| {
        w.write_all(model.to_csv().as_bytes())
    })?;
    println!(
        "calibrated {} sizes in {:.1} s on {}; wrote {}",
        model.points().len(),
        started.elapsed().as_secs_f64(),
        backend.describe(),
        args.out.display()
    );
    if backend.is_fixture() {
        println!("(TEST FIXTURE data: measured on the CPU stand-in, not a GPU)");
    }
    println!(
        "{:>10} {:>13} {:>11} {:>13} {:>11} {:>14} {:>14}",
        "size",
        "pageable H2D",
        "pinned H2D",
        "pageable D2H",
        "pinned D2H",
        "cuMemHostAlloc",
        "register"
    );
    for p in model.points() {
        println!(
            "{:>10} {:>10.2} GB/s {:>8.2} GB/s {:>10.2} GB/s {:>8.2} GB/s {:>11.1} us {:>11.1} us",
            format_size_exact(p.size_bytes),
            p.pageable_h2d_gbps,
            p.pinned_h2d_gbps,
            p.pageable_d2h_gbps,
            p.pinned_d2h_gbps,
            p.mallochost_us,
            p.hostregister_us
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `pinwise calibrate --probe-round-trips`.
fn probe(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let driver = pinwise_cuda::Driver::shared()
        .context("pinwise calibrate needs the CUDA driver (libcuda.so.1, or PINWISE_LIBCUDA)")?;
    let backend = Arc::new(
        CudaBackend::on_device(&driver, args.device)
            .with_context(|| format!("CUDA device {}", args.device))?,
    );
    let sizes = match args.sizes {
        Some(s) if s.is_empty() => return Err(super::outputs::usage("--sizes is empty")),
        Some(mut s) => {
            s.sort_unstable();
            s.dedup();
            s
        }
        None => vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
    };
    let device = CudaDevice::new(backend.clone());
    let rows = probe_round_trips(&device, &sizes, 1024, args.repeats.max(1))
        .map_err(|e| anyhow::anyhow!("round-trip probe failed: {e}"))?;
    println!(
        "round trips (host to device and back) on {}{}; us per round trip, median of {} \
         repeats of 1024",
        backend.describe(),
        if backend.is_fixture() {
            " (TEST FIXTURE: not GPU figures)"
        } else {
            ""
        },
        args.repeats.max(1)
    );
    println!(
        "| size | buffer | as calibrate times it (each copy synchronized) | back to back | written by the CPU first | the write timed too |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            format_size_exact(r.size as u64),
            r.buffer.name(),
            r.calibrated_us,
            r.back_to_back_us,
            r.written_first_us,
            r.write_and_round_trip_us
        );
    }
    Ok(ExitCode::SUCCESS)
}
