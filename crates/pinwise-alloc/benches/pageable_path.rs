//! The engine's pageable path against `malloc`, per iteration of the `bench alloc` matrix's
//! h1 c8 r1 shape without its copies (nine buffers of one size allocated, all written, all
//! freed; none is ever copied, so the engine serves every one pageable): the time of the
//! nine allocations and frees, the time of the writes, and the minor page faults
//! (`getrusage`), per iteration. Each strategy starts fresh for each run (a new engine, as
//! the matrix does); strategies are interleaved within each repeat, in an order that changes
//! from repeat to repeat. The first two iterations of a run are not counted (the matrix runs
//! 64 iterations at 1 MiB: its steady state is what it measures).
//!
//! The engine runs on the mock backend (a test fixture: nothing is pinned here). Results:
//! bench/results/alloc-engine-overhead.md.
//!
//!   cargo bench -p pinwise-alloc --bench pageable_path [-- REPEATS [SIZE_KIB...]]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{AllocFlags, Engine, EngineConfig};
use pinwise_core::{CostModel, ModuleId, Policy, Site};

const BUFFERS: usize = 9;
const WARM_UP: usize = 2;

/// Per-iteration figures of one run.
#[derive(Debug, Clone, Copy)]
struct Run {
    alloc_free_ns: f64,
    write_ns: f64,
    minflt: f64,
    /// The first iteration (nothing cached yet): alloc + writes + free, ns, and its faults.
    first_ns: f64,
    first_minflt: f64,
}

fn minflt() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt
    }
}

/// One strategy: allocate `size` bytes for role `role`, and free.
trait Strategy {
    fn alloc(&mut self, size: usize, role: usize) -> *mut u8;
    fn free(&mut self, p: *mut u8);
}

struct Malloc;

impl Strategy for Malloc {
    fn alloc(&mut self, size: usize, _: usize) -> *mut u8 {
        // SAFETY: malloc of a non-zero size.
        let p = unsafe { libc::malloc(size) } as *mut u8;
        assert!(!p.is_null());
        p
    }
    fn free(&mut self, p: *mut u8) {
        // SAFETY: from malloc above, freed once.
        unsafe { libc::free(p as *mut libc::c_void) }
    }
}

struct Smart(Engine);

impl Smart {
    fn new() -> Self {
        let c = EngineConfig::new(Policy::new(CostModel::builtin()));
        Smart(Engine::new(Arc::new(MockBackend::new()), c).unwrap())
    }
}

impl Strategy for Smart {
    fn alloc(&mut self, size: usize, role: usize) -> *mut u8 {
        let site = Site {
            module: ModuleId(1),
            offset: 100 + role as u64,
        };
        let a = self.0.alloc(size, site, AllocFlags::NONE).unwrap();
        assert!(!a.pinned, "nothing is copied: every buffer is pageable");
        a.ptr
    }
    fn free(&mut self, p: *mut u8) {
        // SAFETY: allocated by this engine in this iteration, freed once.
        unsafe { self.0.free(p).unwrap() }
    }
}

fn run(s: &mut dyn Strategy, size: usize, iterations: usize) -> Run {
    let (mut af, mut w, mut flt) = (0u64, 0u64, 0i64);
    let (mut first_ns, mut first_minflt) = (0.0, 0.0);
    for it in 0..iterations + WARM_UP {
        let f0 = minflt();
        let t0 = Instant::now();
        let mut ptrs = [std::ptr::null_mut(); BUFFERS];
        for (role, p) in ptrs.iter_mut().enumerate() {
            *p = s.alloc(size, role);
        }
        let t1 = Instant::now();
        for &p in &ptrs {
            // SAFETY: a live allocation of `size` bytes.
            unsafe { std::ptr::write_bytes(black_box(p), it as u8, size) };
        }
        let t2 = Instant::now();
        for p in ptrs {
            s.free(black_box(p));
        }
        let t3 = Instant::now();
        let f1 = minflt();
        if it == 0 {
            first_ns = (t3 - t0).as_nanos() as f64;
            first_minflt = (f1 - f0) as f64;
        }
        if it >= WARM_UP {
            af += ((t1 - t0) + (t3 - t2)).as_nanos() as u64;
            w += (t2 - t1).as_nanos() as u64;
            flt += f1 - f0;
        }
    }
    let n = iterations as f64;
    Run {
        alloc_free_ns: af as f64 / n,
        write_ns: w as f64 / n,
        minflt: flt as f64 / n,
        first_ns,
        first_minflt,
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    // Numbers only (cargo bench passes `--bench` too): repeats, then sizes in KiB.
    let nums: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let repeats = nums.first().copied().unwrap_or(7).max(1);
    let sizes: Vec<usize> = if nums.len() > 1 {
        nums[1..].iter().map(|k| k << 10).collect()
    } else {
        vec![16 << 10, 256 << 10, 1 << 20, 4 << 20]
    };
    println!(
        "| size | strategy | alloc+free µs/it (median [min, max]) | writes µs/it | minflt/it |"
    );
    println!("|---|---|---|---|---|");
    for size in sizes {
        // About 64 MiB written per run.
        let iterations = ((64 << 20) / (BUFFERS * size)).clamp(16, 1024);
        let names = ["malloc", "smart"];
        let mut runs: [Vec<Run>; 2] = Default::default();
        for r in 0..repeats {
            for k in 0..2 {
                let which = (k + r) % 2;
                let got = if which == 0 {
                    run(&mut Malloc, size, iterations)
                } else {
                    run(&mut Smart::new(), size, iterations)
                };
                runs[which].push(got);
            }
        }
        for (name, rs) in names.iter().zip(&runs) {
            let a = stats(rs.iter().map(|r| r.alloc_free_ns / 1e3).collect());
            let w = stats(rs.iter().map(|r| r.write_ns / 1e3).collect());
            let f = stats(rs.iter().map(|r| r.minflt).collect());
            let t1 = stats(rs.iter().map(|r| r.first_ns / 1e3).collect());
            let f1 = stats(rs.iter().map(|r| r.first_minflt).collect());
            println!(
                "| {} KiB | {name} | {:.2} [{:.2}, {:.2}] | {:.1} [{:.1}, {:.1}] | {:.1} [{:.1}, {:.1}] | {:.0} [{:.0}, {:.0}] | {:.0} [{:.0}, {:.0}] |",
                size >> 10,
                a.0,
                a.1,
                a.2,
                w.0,
                w.1,
                w.2,
                f.0,
                f.1,
                f.2,
                t1.0,
                t1.1,
                t1.2,
                f1.0,
                f1.1,
                f1.2
            );
        }
    }
}
