//! The demo's workload: a few hot and cold host buffers, like a training loop's.
//!
//! Runs as a child process (`pinwise demo --workload`) so that pinwise can trace it and
//! preload into it exactly as it would any user's program. It talks to libcuda through
//! pinwise-cuda (which `dlopen`s the driver, as cudart does), and prints one line that the
//! demo reads back: a checksum of everything copied back from the device, the time the loop
//! took, and the pinned bytes it asked for.
use std::time::Instant;

use anyhow::{Context as _, Result};
use pinwise_cuda::{DeviceBuffer, Driver, PinnedHostRegion};

/// What one buffer of the workload is, and how often it moves.
struct BufferPlan {
    name: &'static str,
    bytes: usize,
    /// `true`: asked for pinned (`cuMemHostAlloc`), as a program that pins everything would.
    pinned: bool,
    /// Round trips (host to device, then device to host) per iteration.
    round_trips: usize,
    /// One-way host-to-device copies per iteration.
    uploads: usize,
}

/// The workload's buffers per iteration; `unit` (bytes) scales the large ones.
fn plans(unit: usize) -> Vec<BufferPlan> {
    let m = unit.max(4096);
    vec![
        BufferPlan {
            name: "hot pinned (round trips)",
            bytes: 2 * m,
            pinned: true,
            round_trips: 12,
            uploads: 0,
        },
        BufferPlan {
            name: "hot pageable (uploads)",
            bytes: 2 * m,
            pinned: false,
            round_trips: 0,
            uploads: 12,
        },
        BufferPlan {
            name: "cold pinned (copied once)",
            bytes: 4 * m,
            pinned: true,
            round_trips: 0,
            uploads: 1,
        },
        BufferPlan {
            name: "pinned, never copied",
            bytes: 2 * m,
            pinned: true,
            round_trips: 0,
            uploads: 0,
        },
        BufferPlan {
            name: "small hot pinned (4 KiB)",
            bytes: 4096,
            pinned: true,
            round_trips: 24,
            uploads: 0,
        },
    ]
}

/// Host memory of one buffer: pinned by the driver or a plain vector.
enum Host {
    Pinned(PinnedHostRegion),
    Pageable(Vec<u8>),
}

impl Host {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Host::Pinned(p) => p.as_mut_slice(),
            Host::Pageable(v) => v.as_mut_slice(),
        }
    }
}

/// Runs the workload and prints `pinwise-demo-workload checksum=.. elapsed_ms=.. pinned_asked=..`.
pub fn run(iterations: usize, unit: usize) -> Result<()> {
    let driver = Driver::shared().context("the demo workload needs libcuda")?;
    let device = driver.device(0).context("no CUDA device")?;
    let ctx = device
        .primary_context()
        .context("cannot retain the primary context")?;
    ctx.make_current()?;
    let plans = plans(unit);
    let largest = plans.iter().map(|p| p.bytes).max().unwrap_or(0);
    let device_buf = DeviceBuffer::new(&ctx, largest).context("cudaMalloc-equivalent failed")?;
    let mut back = vec![0u8; largest];
    let mut checksum = Fnv::new();
    let mut pinned_asked = 0u64;

    let start = Instant::now();
    for iteration in 0..iterations {
        // Allocate this iteration's buffers (same call sites every iteration: the call
        // number tells them apart across runs).
        let mut hosts = Vec::with_capacity(plans.len());
        for plan in &plans {
            let host = if plan.pinned {
                pinned_asked += plan.bytes as u64;
                Host::Pinned(PinnedHostRegion::new(&ctx, plan.bytes, 0).with_context(|| {
                    format!("cuMemHostAlloc({} bytes) for {}", plan.bytes, plan.name)
                })?)
            } else {
                Host::Pageable(vec![0u8; plan.bytes])
            };
            hosts.push(host);
        }
        for (i, (plan, host)) in plans.iter().zip(hosts.iter_mut()).enumerate() {
            let data = host.as_mut_slice();
            fill(data, iteration as u8 ^ i as u8);
            for _ in 0..plan.uploads {
                device_buf.copy_from_host(data)?;
            }
            for _ in 0..plan.round_trips {
                device_buf.copy_from_host(data)?;
                device_buf.copy_to_host(&mut back[..plan.bytes])?;
                checksum.add(&back[..plan.bytes]);
            }
            if plan.uploads > 0 && plan.round_trips == 0 {
                // Read back once so the checksum covers what the uploads delivered.
                device_buf.copy_to_host(&mut back[..plan.bytes])?;
                checksum.add(&back[..plan.bytes]);
            }
        }
        drop(hosts);
    }
    ctx.synchronize()?;
    let elapsed = start.elapsed();
    println!(
        "pinwise-demo-workload checksum={:016x} elapsed_ms={:.3} pinned_asked={} iterations={}",
        checksum.0,
        elapsed.as_secs_f64() * 1e3,
        pinned_asked,
        iterations
    );
    Ok(())
}

/// Describes the workload for people, one line per buffer.
pub fn describe(unit: usize) -> Vec<String> {
    plans(unit)
        .iter()
        .map(|p| {
            let moves = match (p.round_trips, p.uploads) {
                (0, 0) => "never copied".to_string(),
                (r, 0) => format!("{r} round trips"),
                (0, u) => format!("{u} upload(s)"),
                (r, u) => format!("{r} round trips + {u} uploads"),
            };
            format!(
                "{:<28} {:>9}  asked {:<9} {moves} per iteration",
                p.name,
                pinwise_core::units::format_size(p.bytes as u64),
                if p.pinned { "pinned" } else { "pageable" },
            )
        })
        .collect()
}

fn fill(data: &mut [u8], seed: u8) {
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

/// FNV-1a over everything copied back, sampled every 64 bytes to stay cheap.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, data: &[u8]) {
        for b in data.iter().step_by(64) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 ^= data.len() as u64;
    }
}
