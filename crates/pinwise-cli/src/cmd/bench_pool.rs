//! `pinwise bench pool`: one process's side of the pinned-pool benchmark
//! (`bench/gpu/pool/run.sh` starts several at once). It sets up SIZE bytes of pinned staging
//! in one of three ways, then measures host<->device bandwidth through it and the latency
//! of small copies:
//!
//! - `in-process`: `cuMemHostAlloc` in this process (every process pins its own copy);
//! - `shm-register`: one shared-memory file per node, mapped and `cuMemHostRegister`ed by
//!   every process (RAM once, one GPU mapping per process: the seed's "straightforward
//!   approach");
//! - `pool`: the named buffer of a running `pinwise pool serve` (RAM once, one GPU
//!   mapping, in the service), copies done by the service through CUDA IPC.
//!
//! Prints one JSON object. On the CPU stand-in for libcuda nothing it prints is a GPU figure.
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use pinwise_cuda::{Context, DeviceBuffer, DevicePtr, HostRegistration, PinnedHostRegion};
use pinwise_pool::{PoolBuffer, PoolClient, PoolDevice};

use super::calibrate::parse_size_or_ram_percent_usize;

/// How the staging memory is pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// cuMemHostAlloc in this process.
    InProcess,
    /// A shared-memory file registered by every process.
    ShmRegister,
    /// The named buffer of a running `pinwise pool serve`.
    Pool,
}

/// Arguments of `pinwise bench pool`.
#[derive(Debug, clap::Args)]
pub struct PoolBenchArgs {
    /// How the staging memory is pinned.
    #[arg(long, value_enum)]
    mode: Mode,
    /// Staging size.
    #[arg(long, value_parser = parse_size_or_ram_percent_usize, default_value = "8G")]
    size: usize,
    /// Bytes per copy (and the device buffer's size) in the bandwidth passes.
    #[arg(long, value_parser = parse_size_or_ram_percent_usize, default_value = "1G")]
    chunk: usize,
    /// Bandwidth passes over the whole staging, each direction (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Small copies timed one by one for the latency figures (0: none).
    #[arg(long, default_value_t = 2000)]
    latency_copies: usize,
    /// Size of each small copy.
    #[arg(long, value_parser = parse_size_or_ram_percent_usize, default_value = "4K")]
    latency_size: usize,
    /// Name of the shared staging (the pool's named buffer; /dev/shm/NAME for shm-register).
    #[arg(long, default_value = "pinwise-bench-staging")]
    name: String,
    /// The pool's socket [default: $PINWISE_POOL_SOCKET, else /run/pinwise/pool.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// After setting up, print `ready` on stderr and wait for stdin to close before
    /// measuring (a script samples memory meanwhile, with every process set up).
    #[arg(long)]
    hold: bool,
    /// After measuring, wait for stdin to close again before exiting.
    #[arg(long)]
    hold_after: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

/// The staging memory, however it was pinned.
enum Staging {
    InProcess(PinnedHostRegion),
    Shm {
        registration: HostRegistration<'static>,
        _map: pinwise_pool::shm::Mapping,
    },
    Pool {
        client: PoolClient,
        buffer: PoolBuffer,
        device: PoolDevice,
    },
}

impl Staging {
    fn ptr(&self) -> *mut u8 {
        match self {
            Staging::InProcess(r) => r.as_mut_ptr(),
            Staging::Shm { registration, .. } => registration.as_mut_ptr(),
            Staging::Pool { buffer, .. } => buffer.as_slice().as_ptr() as *mut u8,
        }
    }

    /// Copies `len` bytes at `off` of the staging to `dst` (or back, `to_device = false`).
    fn copy(
        &self,
        ctx: &Context,
        to_device: bool,
        off: usize,
        dev: DevicePtr,
        len: usize,
    ) -> Result<()> {
        match self {
            Staging::Pool {
                client,
                buffer,
                device,
            } => {
                if to_device {
                    client.copy_to_device(buffer, off, device, dev, len)?
                } else {
                    client.copy_from_device(buffer, off, device, dev, len)?
                }
            }
            _ => {
                // SAFETY: `off + len` is within the staging (callers stay inside `size`),
                // which is pinned and mapped while `self` lives; `dev` is this process's
                // device buffer; the copies are synchronous.
                unsafe {
                    let host = self.ptr().add(off);
                    if to_device {
                        ctx.copy_htod(dev, std::slice::from_raw_parts(host, len))?
                    } else {
                        ctx.copy_dtoh(std::slice::from_raw_parts_mut(host, len), dev)?
                    }
                }
            }
        }
        Ok(())
    }
}

fn wait_stdin() {
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
        sink.clear();
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Runs `pinwise bench pool`.
pub fn run(a: PoolBenchArgs) -> Result<ExitCode> {
    if a.chunk == 0 || a.size == 0 || a.chunk > a.size || a.latency_size > a.chunk {
        bail!("--chunk must be between --latency-size and --size, and sizes above 0");
    }
    let driver = pinwise_cuda::Driver::shared().context("loading the CUDA driver")?;
    let ctx = driver.device(a.device)?.primary_context()?;
    let dev = DeviceBuffer::new(&ctx, a.chunk).context("device buffer")?;
    ctx.synchronize()?;
    let free_before = ctx.mem_info()?.free;
    let t0 = Instant::now();
    let staging = match a.mode {
        Mode::InProcess => {
            let mut r = PinnedHostRegion::alloc_host(&ctx, a.size).context("cuMemHostAlloc")?;
            r.as_mut_slice().fill(1);
            Staging::InProcess(r)
        }
        Mode::ShmRegister => {
            let path = PathBuf::from("/dev/shm").join(&a.name);
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            if file.metadata()?.len() < a.size as u64 {
                file.set_len(a.size as u64)?;
            }
            let map = pinwise_pool::shm::Mapping::new(file.as_fd(), a.size)
                .with_context(|| format!("mapping {}", path.display()))?;
            let ptr = std::ptr::NonNull::new(map.as_ptr()).context("null mapping")?;
            // SAFETY: the mapping lives in the same `Staging` value and is dropped after the
            // registration (field order), so it stays mapped while registered.
            let registration = unsafe { HostRegistration::from_raw(&ctx, ptr, a.size, 0) }
                .context("cuMemHostRegister")?;
            Staging::Shm {
                registration,
                _map: map,
            }
        }
        Mode::Pool => {
            let client = match &a.socket {
                Some(s) => PoolClient::connect(s),
                None => PoolClient::connect_default(),
            }?;
            let mut buffer = client.alloc_shared(&a.name, a.size)?;
            if buffer.created() {
                buffer.as_mut_slice().fill(1);
            }
            let device = client.register_device(&ctx, dev.ptr())?;
            Staging::Pool {
                client,
                buffer,
                device,
            }
        }
    };
    let setup_s = t0.elapsed().as_secs_f64();
    ctx.synchronize()?;
    let free_after_setup = ctx.mem_info()?.free;
    if a.hold {
        eprintln!("ready");
        wait_stdin();
    }
    // Bandwidth: whole passes over the staging in chunks, each direction.
    let mut htod = Vec::new();
    let mut dtoh = Vec::new();
    for _ in 0..a.repeats {
        for (to_device, out) in [(true, &mut htod), (false, &mut dtoh)] {
            let t = Instant::now();
            let mut off = 0;
            while off < a.size {
                let n = a.chunk.min(a.size - off);
                staging.copy(&ctx, to_device, off, dev.ptr(), n)?;
                off += n;
            }
            out.push(a.size as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }
    // Latency of small synchronous copies.
    let mut lat = Vec::with_capacity(a.latency_copies);
    for _ in 0..a.latency_copies {
        let t = Instant::now();
        staging.copy(&ctx, true, 0, dev.ptr(), a.latency_size)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(f64::total_cmp);
    let p99 = lat.get(lat.len() * 99 / 100).copied().unwrap_or(f64::NAN);
    let out = serde_json::json!({
        "mode": format!("{:?}", a.mode),
        "pid": std::process::id(),
        "fixture": driver.path().contains("standin"),
        "size": a.size,
        "chunk": a.chunk,
        "setup_s": setup_s,
        "gpu_free_before": free_before,
        "gpu_free_after_setup": free_after_setup,
        "htod_gbps_median": median(&mut htod),
        "dtoh_gbps_median": median(&mut dtoh),
        "htod_gbps_all": htod,
        "dtoh_gbps_all": dtoh,
        "latency_size": a.latency_size,
        "latency_us_median": median(&mut lat.clone()),
        "latency_us_p99": p99,
        "vm_lck_kib": std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmLck:")?.split_whitespace().next()?.parse::<u64>().ok())
        }),
    });
    println!("{out}");
    if a.hold_after {
        wait_stdin();
    }
    drop(staging);
    Ok(ExitCode::SUCCESS)
}
