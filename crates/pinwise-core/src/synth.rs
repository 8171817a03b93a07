//! Deterministic synthetic event streams, for benchmarks and tests.
//!
//! A stream looks like a program that keeps a window of live host buffers, allocates from a
//! few dozen call sites, copies some buffers often and most rarely, sometimes through
//! interior pointers, frees them, and reuses freed addresses. Nothing here is a
//! measurement of a real program: it exercises the history's paths at realistic ratios.
//!
//! The random numbers come from SplitMix64 (a dozen lines, seeded, the same on every
//! machine), so a seed always gives the same stream.

use crate::event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
use crate::tag::{ModuleId, ModuleIdentity, ModuleTable, Site};

/// What stream to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthConfig {
    /// Seed of the random numbers.
    pub seed: u64,
    /// Allocations to make (each is allocated and freed: 2 events).
    pub allocations: u64,
    /// Events to aim for in total (transfers fill what allocations and frees leave; the
    /// exact number varies by a fraction of a percent).
    pub events: u64,
    /// Live allocations kept at once.
    pub live_window: usize,
    /// Call sites allocations come from.
    pub alloc_sites: u32,
    /// Call sites copies come from.
    pub copy_sites: u32,
    /// Smallest allocation.
    pub min_size: u64,
    /// Largest allocation.
    pub max_size: u64,
    /// Process id of the events.
    pub pid: u32,
}

impl Default for SynthConfig {
    /// 10 000 allocations, 100 000 events, 1024 live, 64 + 16 sites, 4 KiB to 64 MiB.
    fn default() -> Self {
        SynthConfig {
            seed: 1,
            allocations: 10_000,
            events: 100_000,
            live_window: 1024,
            alloc_sites: 64,
            copy_sites: 16,
            min_size: 4096,
            max_size: 64 << 20,
            pid: 4242,
        }
    }
}

/// SplitMix64.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Live {
    start: u64,
    size: u64,
    transfers_left: u64,
}

/// The stream: an iterator of [`Event`]s.
#[derive(Debug, Clone)]
pub struct SynthEvents {
    cfg: SynthConfig,
    module: ModuleId,
    rng: Rng,
    ts: u64,
    next_addr: u64,
    freed: Vec<(u64, u64)>,
    live: Vec<Live>,
    allocs_left: u64,
    mean_transfers: f64,
    emitted: u64,
}

impl SynthEvents {
    /// A stream whose call sites lie in a module `synthetic` interned in `modules`.
    pub fn new(cfg: SynthConfig, modules: &ModuleTable) -> Self {
        let module = modules.intern(&ModuleIdentity::with_build_id(
            "/synthetic/app",
            b"pinwise-synthetic".to_vec(),
        ));
        let transfers = cfg.events.saturating_sub(2 * cfg.allocations);
        SynthEvents {
            cfg,
            module,
            rng: Rng(cfg.seed),
            ts: 1_000_000_000_000,
            next_addr: 0x7f00_0000_0000,
            freed: Vec::new(),
            live: Vec::with_capacity(cfg.live_window),
            allocs_left: cfg.allocations,
            mean_transfers: transfers as f64 / cfg.allocations.max(1) as f64,
            emitted: 0,
        }
    }

    fn event(&mut self, probe: ProbeKind, site: Site, kind: EventKind) -> Event {
        self.ts += 500 + self.rng.below(50_000);
        self.emitted += 1;
        Event::new(self.ts, self.cfg.pid, self.cfg.pid, probe, kind).with_site(site)
    }

    fn alloc(&mut self) -> Event {
        self.allocs_left -= 1;
        let span = (self.cfg.max_size as f64 / self.cfg.min_size.max(1) as f64).max(1.0);
        let size =
            ((self.cfg.min_size as f64 * span.powf(self.rng.unit())) as u64 / 256 * 256).max(256);
        // Reuse a freed address now and then (address reuse must start a new record).
        let reuse = self
            .freed
            .iter()
            .position(|&(_, s)| s >= size)
            .filter(|_| self.rng.unit() < 0.3);
        let start = match reuse {
            Some(i) => self.freed.swap_remove(i).0,
            None => {
                let s = self.next_addr;
                self.next_addr += size.div_ceil(4096) * 4096 + 4096;
                s
            }
        };
        // Transfers per allocation: many cold, some warm, a few hot; mean as configured.
        let x = match self.rng.below(10) {
            0..=2 => 0.0,
            3..=5 => 0.5,
            6..=8 => 1.5,
            _ => 4.0,
        };
        let transfers_left = (self.mean_transfers * x + self.rng.unit()) as u64;
        self.live.push(Live {
            start,
            size,
            transfers_left,
        });
        let site = Site {
            module: self.module,
            offset: 0x1000 + 16 * self.rng.below(u64::from(self.cfg.alloc_sites.max(1))),
        };
        let kind = if self.rng.below(4) == 0 {
            HostMemKind::PinnedAlloc
        } else {
            HostMemKind::Pageable
        };
        self.event(
            ProbeKind::AllocatorCallback,
            site,
            EventKind::Alloc {
                start,
                size,
                kind,
                flags: 0,
            },
        )
    }
}

impl Iterator for SynthEvents {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        if self.live.len() < self.cfg.live_window && self.allocs_left > 0 {
            return Some(self.alloc());
        }
        if self.live.is_empty() {
            return None;
        }
        let i = self.rng.below(self.live.len() as u64) as usize;
        let l = self.live[i];
        if l.transfers_left == 0 {
            self.live.swap_remove(i);
            self.freed.push((l.start, l.size));
            if self.freed.len() > 4096 {
                self.freed.swap_remove(0);
            }
            let site = Site {
                module: self.module,
                offset: 0x3000,
            };
            return Some(self.event(
                ProbeKind::AllocatorCallback,
                site,
                EventKind::Free { start: l.start },
            ));
        }
        self.live[i].transfers_left -= 1;
        // One copy in five goes through an interior pointer.
        let (host, bytes) = if self.rng.below(5) == 0 {
            let off = self.rng.below(l.size) / 64 * 64;
            (l.start + off, l.size - off)
        } else {
            (l.start, l.size)
        };
        let direction = if self.rng.below(10) < 7 {
            Direction::HtoD
        } else {
            Direction::DtoH
        };
        let site = Site {
            module: self.module,
            offset: 0x2000 + 16 * self.rng.below(u64::from(self.cfg.copy_sites.max(1))),
        };
        let is_async = self.rng.below(2) == 0;
        let stream = if is_async {
            0x5555_0000 + self.rng.below(4)
        } else {
            0
        };
        Some(self.event(
            ProbeKind::Uprobe,
            site,
            EventKind::Transfer {
                direction,
                host,
                device: 0x7000_0000_0000 + host % (1 << 30),
                bytes,
                is_async,
                stream,
                host_state: HostState::Unknown,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_stream_of_about_the_asked_size() {
        let cfg = SynthConfig {
            allocations: 2000,
            events: 20_000,
            live_window: 64,
            ..SynthConfig::default()
        };
        let t = ModuleTable::new();
        let a: Vec<Event> = SynthEvents::new(cfg, &t).collect();
        let b: Vec<Event> = SynthEvents::new(cfg, &t).collect();
        assert_eq!(a, b);
        let allocs = a
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Alloc { .. }))
            .count();
        let frees = a
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Free { .. }))
            .count();
        assert_eq!((allocs, frees), (2000, 2000));
        let n = a.len() as f64;
        assert!((n - 20_000.0).abs() < 0.05 * 20_000.0, "{n} events");
        assert!(a.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
    }
}
