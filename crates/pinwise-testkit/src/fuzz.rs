//! A small mutation fuzzer for pinwise's readers, on stable Rust.
//!
//! `cargo fuzz` (libFuzzer) needs a nightly compiler, and this project builds with stable
//! Rust only, so the readers are fuzzed by this loop instead: seeds from a corpus kept in the
//! repository (`fuzz/corpus/<target>/`), mutated with a seeded generator (bit flips, byte
//! overwrites with interesting values, cuts, duplicated and deleted ranges, splices of two
//! seeds), each input given to the target under `catch_unwind`. It has no coverage
//! guidance (weaker than libFuzzer at finding deep paths); it finds panics, and the
//! per-input time limit finds hangs. Every file in `fuzz/regressions/<target>/` (crashes
//! found earlier) is replayed first.
//!
//! Bounds: `PINWISE_FUZZ_SECONDS` per target (default 5; CI sets more) and
//! `PINWISE_FUZZ_SEED` (default: a fixed seed, so a run is repeatable). A crash writes the
//! input to `fuzz/crashes/<target>-<n>.bin` (copy it into `fuzz/regressions/<target>/` to keep
//! it as a regression test) and fails the test with the input's first bytes.
use crate::rng::Rng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// What a fuzz run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuzzRun {
    /// Seeds and regressions read.
    pub seeds: usize,
    /// Inputs tried (seeds and regressions included).
    pub inputs: u64,
}

const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    let rounds = 1 + rng.index(4);
    for _ in 0..rounds {
        let len = input.len();
        match rng.index(8) {
            0 if len > 0 => {
                let i = rng.index(len);
                input[i] ^= 1 << rng.index(8);
            }
            1 if len > 0 => {
                let i = rng.index(len);
                input[i] = rng.next_u64() as u8;
            }
            2 if len > 0 => {
                // An interesting little-endian value of 1, 2, 4 or 8 bytes.
                let v = INTERESTING[rng.index(INTERESTING.len())].to_le_bytes();
                let w = [1, 2, 4, 8][rng.index(4)];
                let i = rng.index(len);
                for (k, b) in v.iter().take(w).enumerate() {
                    if let Some(x) = input.get_mut(i + k) {
                        *x = *b;
                    }
                }
            }
            3 => input.truncate(rng.index(len + 1)),
            4 if len > 0 => {
                let a = rng.index(len);
                let b = (a + 1 + rng.index(64)).min(len);
                let piece = input[a..b].to_vec();
                let at = rng.index(len + 1);
                input.splice(at..at, piece);
            }
            5 if len > 0 => {
                let a = rng.index(len);
                let b = (a + 1 + rng.index(64)).min(len);
                input.drain(a..b);
            }
            6 if !other.is_empty() => {
                let cut = rng.index(input.len() + 1);
                let from = rng.index(other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            _ => {
                // An ASCII digit run (numbers in JSON, CSV and settings).
                let at = rng.index(len + 1);
                let digits: Vec<u8> = (0..1 + rng.index(24))
                    .map(|_| b'0' + rng.index(10) as u8)
                    .collect();
                input.splice(at..at, digits);
            }
        }
    }
}

fn read_dir_files(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    paths
        .iter()
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The longest one input may take before it counts as a hang.
const PER_INPUT: Duration = Duration::from_secs(10);

/// Fuzzes `target` (which must never panic, whatever the bytes) from the corpus of `name`.
/// Panics, after saving the input, if an input makes it panic or take longer than 10 s.
pub fn run(name: &str, target: impl Fn(&[u8])) -> FuzzRun {
    let dir = fuzz_dir();
    let seeds = read_dir_files(&dir.join("corpus").join(name));
    assert!(
        !seeds.is_empty(),
        "no seeds in {}",
        dir.join("corpus").join(name).display()
    );
    let regressions = read_dir_files(&dir.join("regressions").join(name));
    let budget = Duration::from_secs(env_u64("PINWISE_FUZZ_SECONDS", 5));
    let mut rng = Rng::new(env_u64("PINWISE_FUZZ_SEED", 0x5eed_f00d_1234_5678));
    let started = Instant::now();
    let mut inputs = 0u64;
    let mut try_one = |input: &[u8]| {
        inputs += 1;
        let t = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target(input)));
        let slow = t.elapsed() > PER_INPUT;
        if r.is_err() || slow {
            let crashes = dir.join("crashes");
            let _ = std::fs::create_dir_all(&crashes);
            let file = crashes.join(format!("{name}-{inputs}.bin"));
            let _ = std::fs::write(&file, input);
            let head: Vec<String> = input.iter().take(64).map(|b| format!("{b:02x}")).collect();
            panic!(
                "fuzz target {name}: input {inputs} {} (saved to {}; first bytes {})",
                if slow {
                    "took longer than 10 s"
                } else {
                    "panicked"
                },
                file.display(),
                head.join("")
            );
        }
    };
    for s in regressions.iter().chain(&seeds) {
        try_one(s);
    }
    let mut input = Vec::new();
    while started.elapsed() < budget {
        let a = &seeds[rng.index(seeds.len())];
        let b = &seeds[rng.index(seeds.len())];
        input.clear();
        input.extend_from_slice(a);
        mutate(&mut rng, &mut input, b);
        try_one(&input);
    }
    eprintln!(
        "fuzz {name}: {inputs} inputs ({} seeds, {} regressions) in {:.1} s, no panic",
        seeds.len(),
        regressions.len(),
        started.elapsed().as_secs_f64()
    );
    FuzzRun {
        seeds: seeds.len() + regressions.len(),
        inputs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_repeatable_and_change_the_input() {
        let seed = b"{\"format\": \"x\", \"n\": 12}".to_vec();
        let run = |s: u64| {
            let mut rng = Rng::new(s);
            (0..50)
                .map(|_| {
                    let mut v = seed.clone();
                    mutate(&mut rng, &mut v, b"other");
                    v
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert!(run(7).iter().filter(|v| **v != seed).count() > 40);
    }
}
