//! Pricing: what pinning costs, at what the allocator engine will actually do, and which
//! cost table prices it. Every pin-or-not decision (the engine's, the plan's, the report's,
//! the preload's promotions) is priced here.
//!
//! **The table** ([`pricing_table`]): a calibration named explicitly; else this GPU's
//! calibration cached by the automatic calibration ([`cache_file`], one file per GPU under
//! [`cache_dir`]); else the built-in H200 table, and [`TableSource`] says which was used.
//!
//! The curves (measured transfer and pinning times, interpolated by size) are
//! [`crate::CostModel`]; whether a predicted use pays for pinning is
//! [`crate::Policy::decide_priced`], at the price [`price`] gives:
//!
//! | how the engine gets the memory ([`Obtain`]) | price | copies timed at |
//! |---|---|---|
//! | a free pool block | nothing (the pool holds it anyway) | `cuMemHostAlloc` memory |
//! | registering a warm cached mapping | register + unregister + hold | `registered_h2d_GBps` |
//! | fresh memory | the cheaper of `cuMemHostAlloc` + free and map + touch + register + unregister ([`cheapest_fresh`]), less the page faults a fresh pageable mapping would take anyway (`malloc_touch_us`), + hold | that method's column |
//!
//! **Holding** pinned memory has a price too ([`hold_ns`]): the GPU page table it takes
//! (8 bytes per 4 KiB page, [`crate::pagetable`], priced like RAM), and the RAM that
//! is no longer pageable, priced at what faulting in that much fresh memory costs
//! (`malloc_touch_us`) times how full the pinned budget will be (0 with an empty budget, the whole price at its cap): the
//! closer pinned memory comes to the cap, the more a new pin must save. So "pays back"
//! means the saving covers obtaining, giving back and holding the memory.

use std::path::{Path, PathBuf};

use crate::cost::{CostModel, PinMethod};
use crate::decide::policy::{Decision, PinPrice, PinRequest, Policy, PredictedTransfers};
use crate::event::Direction;

/// How the engine would obtain pinned memory for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obtain {
    /// A free block of the pinned pool.
    PoolHit,
    /// Registering a warm mapping of the pageable cache (or a live one, in place).
    RegisterCached,
    /// Fresh memory, the cheaper way ([`cheapest_fresh`]).
    Fresh,
}

/// The price of holding `bytes` pinned when `pinned_after` bytes (these included) of a
/// budget of `budget` bytes will be pinned, ns: the GPU page table (8 bytes per 4 KiB page,
/// priced at the `malloc_touch_us` curve like RAM) plus the RAM no longer pageable, priced
/// at `malloc_touch_us` times the budget's fill (`pinned_after / budget`, at most 1).
pub fn hold_ns(p: &Policy, bytes: u64, pinned_after: u64, budget: u64) -> f64 {
    let cost = p.cost_model();
    let fill = (pinned_after as f64 / budget.max(1) as f64).clamp(0.0, 1.0);
    cost.malloc_touch_ns(CostModel::page_table_bytes(bytes)) + cost.malloc_touch_ns(bytes) * fill
}

/// What pinning `bytes` obtained by `obtain` costs, with `pinned_after` bytes of `budget`
/// pinned afterwards (see the module documentation).
pub fn price(p: &Policy, bytes: u64, obtain: Obtain, pinned_after: u64, budget: u64) -> PinPrice {
    match obtain {
        Obtain::PoolHit => PinPrice {
            cost_ns: 0.0,
            bandwidth_of: PinMethod::MallocHost,
        },
        Obtain::RegisterCached => PinPrice {
            cost_ns: register_touched_ns(p, bytes) + hold_ns(p, bytes, pinned_after, budget),
            bandwidth_of: PinMethod::RegisterTouched,
        },
        Obtain::Fresh => {
            // Fresh memory costs its page faults whether it is pinned or not: left pageable,
            // a fresh mapping (the cache had none to reuse) faults in as the program writes
            // it. Only what pinning adds is charged.
            let (method, cost) = cheapest_fresh(p, bytes);
            let faults_anyway = p.cost_model().malloc_touch_ns(bytes);
            PinPrice {
                cost_ns: (cost - faults_anyway).max(0.0) + hold_ns(p, bytes, pinned_after, budget),
                bandwidth_of: method,
            }
        }
    }
}

/// The policy's decision on pinning `size` bytes for `transfers` at `price`, with
/// `remaining_budget` bytes left.
pub fn decide_priced(
    p: &Policy,
    size: u64,
    transfers: PredictedTransfers,
    remaining_budget: u64,
    price: &PinPrice,
) -> Decision {
    p.decide_priced(
        &PinRequest {
            size,
            transfers,
            remaining_budget,
            method: price.bandwidth_of,
        },
        price,
    )
}

/// Time one copy of `bytes` in `dir` saves when the host side is pinned, ns (never negative).
pub fn saving_ns(p: &Policy, bytes: u64, dir: Direction) -> f64 {
    p.cost_model().transfer_saving_ns(dir, bytes).max(0.0)
}

/// The cheapest way to obtain `bytes` of fresh pinned memory, and its cost (pin and later
/// unpin): allocate it pinned, or map it, touch it and register it.
pub fn cheapest_fresh(p: &Policy, bytes: u64) -> (PinMethod, f64) {
    let alloc = p.pin_cost_ns(bytes, PinMethod::MallocHost);
    let register =
        p.cost_model().malloc_touch_ns(bytes) + p.pin_cost_ns(bytes, PinMethod::RegisterTouched);
    if register < alloc {
        (PinMethod::RegisterTouched, register)
    } else {
        (PinMethod::MallocHost, alloc)
    }
}

/// The cost of registering `bytes` of memory that is already touched, and unregistering it.
pub fn register_touched_ns(p: &Policy, bytes: u64) -> f64 {
    p.pin_cost_ns(bytes, PinMethod::RegisterTouched)
}

/// The policy's decision on pinning `size` bytes by `method` for `transfers`, with
/// `remaining_budget` bytes left.
pub fn decide(
    p: &Policy,
    size: u64,
    transfers: PredictedTransfers,
    remaining_budget: u64,
    method: PinMethod,
) -> Decision {
    p.decide(&PinRequest {
        size,
        transfers,
        remaining_budget,
        method,
    })
}

/// Whether an allocation with transfers `t` (seen, or predicted) is worth holding pinned at
/// all: it is copied more than once, and pinning makes its copies faster. A buffer copied
/// once gains at most one faster copy, while its pinned memory stays pinned for its whole
/// life; pinned memory is for reused buffers. (Whether a worthy allocation is then pinned is
/// the policy's decision on what pinning it costs.)
pub fn worth_pinning(p: &Policy, t: &PredictedTransfers) -> bool {
    t.total() >= 2.0 && p.saving_ns(t) > 0.0
}

/// `t` scaled so that its total is `count` transfers (same mix of directions and sizes).
pub fn scaled(t: &PredictedTransfers, count: f64) -> PredictedTransfers {
    let total = t.total();
    if total <= 0.0 {
        return PredictedTransfers::none();
    }
    let k = count / total;
    let mut out = *t;
    for i in 0..4 {
        out.count[i] *= k;
        out.bytes[i] *= k;
    }
    out
}

/// Environment variable naming the calibration cache directory (default: the user's cache
/// directory, e.g. `~/.cache/pinwise`).
pub const CACHE_DIR_ENV: &str = "PINWISE_CACHE_DIR";

/// The directory calibrations are cached in: `$PINWISE_CACHE_DIR`, else `pinwise` under
/// the user's cache directory (`$XDG_CACHE_HOME` or `~/.cache`). `None` when there is none.
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => dirs::cache_dir().map(|d| d.join("pinwise")),
    }
}

/// The version of the automatic calibration's method, named in its cache files: 2 since
/// host-to-device copies are timed from buffers the CPU has just written, as programs fill
/// their data before uploading it (`bench/results/calibration-written-first.md`). A file of
/// version 1 ([`old_cache_file`]) prices decisions only where nothing newer is cached, and
/// [`pricing_table`] then says so; the automatic calibration measures again.
pub const CACHE_VERSION: u32 = 2;

/// `key` reduced to letters, digits, `-` and `_` (at most 120 characters).
fn safe_key(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect()
}

/// The cache file of the GPU `key` in `dir`: `calibration-v<CACHE_VERSION>-<key>.csv`, the
/// key reduced to letters, digits, `-` and `_`.
pub fn cache_file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!(
        "calibration-v{CACHE_VERSION}-{}.csv",
        safe_key(key)
    ))
}

/// The cache file of version 1 (an older pinwise, uploads timed from buffers the CPU had
/// not just written): `calibration-<key>.csv`.
pub fn old_cache_file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("calibration-{}.csv", safe_key(key)))
}

/// The cached calibration of GPU `key` in `dir`, without measuring (for code running inside
/// someone else's program, which must not start GPU work of its own): `Ok(None)` when none
/// is cached, an error naming the file when it cannot be read.
pub fn cached(key: &str, dir: &Path) -> Result<Option<CostModel>, String> {
    let p = cache_file(dir, key);
    if !p.exists() {
        return Ok(None);
    }
    CostModel::from_csv_file(&p).map(Some).map_err(|e| {
        format!(
            "the cached calibration {} cannot be used ({e})",
            p.display()
        )
    })
}

/// Where the table that prices decisions came from.
#[derive(Debug, Clone, PartialEq)]
pub enum TableSource {
    /// A calibration named explicitly (`--calibration`, `PINWISE_CALIBRATION`).
    Named(PathBuf),
    /// This GPU's calibration from the automatic calibration's cache.
    Cached(PathBuf),
    /// The built-in H200 table, and why.
    BuiltIn(String),
}

impl std::fmt::Display for TableSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableSource::Named(p) => write!(f, "calibration {}", p.display()),
            TableSource::Cached(p) => write!(f, "cached calibration of this GPU {}", p.display()),
            TableSource::BuiltIn(why) => write!(f, "built-in H200 table ({why})"),
        }
    }
}

/// The cost table decisions are priced with, where it came from, and problems met.
#[derive(Debug, Clone)]
pub struct PricingTable {
    /// The table.
    pub model: CostModel,
    /// Where it came from.
    pub source: TableSource,
    /// Problems met on the way (a file that could not be read), each naming the file.
    pub problems: Vec<String>,
}

/// The table to price with, without measuring anything: `named` if given and readable;
/// else the cached calibration of GPU `gpu_key` in `cache_dir`; else the built-in table
/// (with why). An unreadable file is a problem that names it, and the next choice is used.
pub fn pricing_table(
    named: Option<&Path>,
    gpu_key: Option<&str>,
    cache_dir: Option<&Path>,
) -> PricingTable {
    let mut problems = Vec::new();
    if let Some(path) = named {
        match CostModel::from_csv_file(path) {
            Ok(model) => {
                return PricingTable {
                    model,
                    source: TableSource::Named(path.to_path_buf()),
                    problems,
                }
            }
            Err(e) => problems.push(format!("calibration {}: {e}", path.display())),
        }
    }
    let why = match (gpu_key, cache_dir) {
        (None, _) => "the GPU could not be identified".to_string(),
        (Some(_), None) => "no cache directory".to_string(),
        (Some(key), Some(dir)) => match cached(key, dir) {
            Ok(Some(model)) => {
                return PricingTable {
                    model,
                    source: TableSource::Cached(cache_file(dir, key)),
                    problems,
                }
            }
            Ok(None) => {
                let old = old_cache_file(dir, key);
                match old
                    .exists()
                    .then(|| CostModel::from_csv_file(&old))
                    .and_then(Result::ok)
                {
                    Some(model) => {
                        problems.push(format!(
                            "the cached calibration {} was measured by an older pinwise \
                             (uploads of buffers the CPU had not just written); pricing with \
                             it until `pinwise bench alloc` measures this GPU again",
                            old.display()
                        ));
                        return PricingTable {
                            model,
                            source: TableSource::Cached(old),
                            problems,
                        };
                    }
                    None => format!("no calibration cached for {key}"),
                }
            }
            Err(e) => {
                problems.push(e);
                format!("the cached calibration of {key} cannot be used")
            }
        },
    };
    PricingTable {
        model: CostModel::builtin(),
        source: TableSource::BuiltIn(why),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decisions' building blocks on the built-in H200 calibration.
    #[test]
    fn h200_figures() {
        let p = Policy::new(CostModel::builtin());
        // 4 KiB: pinned copies are not faster; nothing to save.
        assert_eq!(saving_ns(&p, 4096, Direction::HtoD), 0.0);
        // 1 GiB host-to-device: ~100 ms pageable vs ~19 ms pinned.
        let s = saving_ns(&p, 1 << 30, Direction::HtoD);
        assert!((75e6..90e6).contains(&s), "{s}");
        // Registering touched memory is far cheaper than cuMemHostAlloc at 1 GiB...
        let reg = register_touched_ns(&p, 1 << 30);
        assert!((40e6..50e6).contains(&reg), "{reg}");
        // ...but fresh memory is cheaper allocated pinned than mapped, touched and registered.
        assert_eq!(cheapest_fresh(&p, 1 << 30).0, PinMethod::MallocHost);
        // One 1 GiB copy pays for registering the buffer it comes from.
        let once = PredictedTransfers::none().with(Direction::HtoD, 1.0, 1 << 30);
        assert!(decide(&p, 1 << 30, once, u64::MAX, PinMethod::RegisterTouched).pin);
        let scaled = scaled(&once, 4.0);
        assert_eq!(scaled.total(), 4.0);
        assert_eq!(
            scaled.bytes[Direction::HtoD.index()],
            4.0 * (1u64 << 30) as f64
        );
    }

    /// Prices: a pool hit is free; registering a cached mapping costs its registration and
    /// holding it, with registered bandwidth; fresh memory the cheaper way plus holding it;
    /// holding costs more as the budget fills, so more transfers are needed to pay back.
    #[test]
    fn prices_follow_what_the_engine_does() {
        let p = Policy::new(CostModel::builtin());
        let mib = 1u64 << 20;
        let size = 16 * mib;
        let budget = 1u64 << 34;
        let hit = price(&p, size, Obtain::PoolHit, size, budget);
        assert_eq!(hit.cost_ns, 0.0);
        let reg = price(&p, size, Obtain::RegisterCached, size, budget);
        assert_eq!(reg.bandwidth_of, PinMethod::RegisterTouched);
        let hold_empty = hold_ns(&p, size, size, budget);
        assert!((reg.cost_ns - register_touched_ns(&p, size) - hold_empty).abs() < 1.0);
        let fresh = price(&p, size, Obtain::Fresh, size, budget);
        let (method, cost) = cheapest_fresh(&p, size);
        assert_eq!(fresh.bandwidth_of, method);
        let faults = p.cost_model().malloc_touch_ns(size);
        let adds = (cost - faults).max(0.0);
        assert!((fresh.cost_ns - adds - hold_empty).abs() < 1.0);
        // The page table alone: 16 MiB pins 4096 pages, 32 KiB of GPU page table.
        assert_eq!(CostModel::page_table_bytes(size), 32 << 10);
        assert!(hold_ns(&p, size, 0, budget) > 0.0);
        // A full budget charges the whole malloc_touch price of the RAM held.
        let full = hold_ns(&p, size, budget, budget);
        let ram = p.cost_model().malloc_touch_ns(size);
        assert!(
            (full - hold_ns(&p, size, 0, budget) - ram).abs() < 1.0,
            "{full} {ram}"
        );
        // So a use that pays back at an empty budget may not at a full one.
        let per_copy = saving_ns(&p, size, Direction::HtoD);
        let copies = (fresh.cost_ns / per_copy).floor() + 1.0;
        let t = PredictedTransfers::none().with(Direction::HtoD, copies, size);
        assert!(decide_priced(&p, size, t, u64::MAX, &fresh).pin);
        let dear = price(&p, size, Obtain::Fresh, budget, budget);
        assert!(!decide_priced(&p, size, t, u64::MAX, &dear).pin);
        // A pool hit pays whenever the copies save anything.
        let one = PredictedTransfers::none().with(Direction::HtoD, 1.0, size);
        assert!(decide_priced(&p, size, one, u64::MAX, &hit).pin);
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;

    fn write_model(path: &Path) {
        std::fs::write(path, CostModel::builtin().to_csv()).unwrap();
    }

    /// Named, else cached for this GPU, else built-in; each choice said, and an unreadable
    /// file named as a problem.
    #[test]
    fn the_table_is_named_else_cached_else_built_in() {
        let dir = tempfile::tempdir().unwrap();
        let named = dir.path().join("mine.csv");
        write_model(&named);
        let t = pricing_table(Some(&named), Some("GPU-1"), Some(dir.path()));
        assert_eq!(t.source, TableSource::Named(named.clone()));
        assert!(t.problems.is_empty());
        // Nothing cached for GPU-1: built-in, and why.
        let t = pricing_table(None, Some("GPU-1"), Some(dir.path()));
        assert!(
            matches!(&t.source, TableSource::BuiltIn(w) if w.contains("no calibration cached for GPU-1"))
        );
        assert!(t.source.to_string().starts_with("built-in H200 table"));
        // Cached for GPU-1: that file.
        let file = cache_file(dir.path(), "GPU-1");
        write_model(&file);
        let t = pricing_table(None, Some("GPU-1"), Some(dir.path()));
        assert_eq!(t.source, TableSource::Cached(file.clone()));
        assert!(t.source.to_string().contains("calibration-v2-GPU-1.csv"));
        // An unreadable named file: a problem naming it, then the cache.
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, "junk").unwrap();
        let t = pricing_table(Some(&bad), Some("GPU-1"), Some(dir.path()));
        assert_eq!(t.source, TableSource::Cached(file.clone()));
        assert!(t.problems[0].contains("bad.csv"), "{:?}", t.problems);
        // A corrupt cache file: named, built-in.
        std::fs::write(&file, "junk").unwrap();
        let t = pricing_table(None, Some("GPU-1"), Some(dir.path()));
        assert!(matches!(t.source, TableSource::BuiltIn(_)));
        assert!(
            t.problems[0].contains("calibration-v2-GPU-1.csv"),
            "{:?}",
            t.problems
        );
        // No GPU identity.
        let t = pricing_table(None, None, Some(dir.path()));
        assert!(
            matches!(&t.source, TableSource::BuiltIn(w) if w.contains("could not be identified"))
        );
    }

    /// A cache of the older method (version 1, no version in its name) still prices where
    /// nothing newer is cached, marked as such; a current one is preferred.
    #[test]
    fn an_old_cache_is_used_only_marked_and_only_without_a_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let old = old_cache_file(dir.path(), "GPU-7");
        assert!(old.ends_with("calibration-GPU-7.csv"));
        write_model(&old);
        let t = pricing_table(None, Some("GPU-7"), Some(dir.path()));
        assert_eq!(t.source, TableSource::Cached(old.clone()));
        assert_eq!(t.problems.len(), 1);
        assert!(
            t.problems[0].contains("calibration-GPU-7.csv")
                && t.problems[0].contains("older pinwise")
                && t.problems[0].contains("not just written"),
            "{:?}",
            t.problems
        );
        let current = cache_file(dir.path(), "GPU-7");
        write_model(&current);
        let t = pricing_table(None, Some("GPU-7"), Some(dir.path()));
        assert_eq!(t.source, TableSource::Cached(current));
        assert!(t.problems.is_empty());
        // An unreadable old file is no table: built-in.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(old_cache_file(dir.path(), "GPU-7"), "junk").unwrap();
        let t = pricing_table(None, Some("GPU-7"), Some(dir.path()));
        assert!(matches!(t.source, TableSource::BuiltIn(_)));
    }

    #[test]
    fn keys_become_safe_file_names() {
        let p = cache_file(Path::new("/c"), "NVIDIA H100 at 0000:18:00.0/../x");
        assert_eq!(
            p,
            Path::new("/c/calibration-v2-NVIDIA_H100_at_0000_18_00_0____x.csv")
        );
    }
}
