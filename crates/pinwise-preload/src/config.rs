//! The library's configuration, from the environment (see the crate documentation).
//!
//! Parsing never fails: a value that cannot be understood is reported in
//! [`Config::problems`] (logged, and written to the statistics so that `pinwise run` shows
//! it) and its default is used.

use std::path::PathBuf;

use pinwise_alloc::Mode;
use pinwise_core::fingerprint::FingerprintMode;

/// Environment variable names.
pub mod env {
    /// `adaptive`, `profile` or `use`.
    pub const MODE: &str = "PINWISE_MODE";
    /// Profile to write or read.
    pub const PROFILE: &str = "PINWISE_PROFILE";
    /// History to write (appended to while the program runs, completed at exit).
    pub const HISTORY: &str = "PINWISE_HISTORY";
    /// Directory for per-process statistics.
    pub const STATS_DIR: &str = "PINWISE_STATS_DIR";
    /// Pinned budget.
    pub const BUDGET: &str = "PINWISE_BUDGET";
    /// Calibration CSV.
    pub const CALIBRATION: &str = "PINWISE_CALIBRATION";
    /// Log destination.
    pub const LOG: &str = "PINWISE_LOG";
    /// Log level.
    pub const LOG_LEVEL: &str = "PINWISE_LOG_LEVEL";
    /// Signal that writes the outputs.
    pub const DUMP_SIGNAL: &str = "PINWISE_DUMP_SIGNAL";
    /// Serve every pinned request pinned.
    pub const KEEP_PINNED: &str = "PINWISE_KEEP_PINNED";
    /// Serve a program's pinned requests without evidence pageable first (opt-in).
    pub const PAGEABLE_FIRST: &str = "PINWISE_PAGEABLE_FIRST";
    /// Register hot pageable buffers of the program.
    pub const PROMOTE_PAGEABLE: &str = "PINWISE_PROMOTE_PAGEABLE";
    /// Hand out driver wrappers through `dlsym`/`cuGetProcAddress`.
    pub const DRIVER_HOOKS: &str = "PINWISE_DRIVER_HOOKS";
    /// Forward everything, record nothing.
    pub const DISABLE: &str = "PINWISE_DISABLE";
    /// The pid of `pinwise run`.
    pub const LAUNCHER_PID: &str = "PINWISE_LAUNCHER_PID";
    /// malloc-family allocations of at least this size are recorded (default 64 KiB).
    pub const MIN_TRACKED: &str = "PINWISE_MIN_TRACKED";
    /// `0`: the malloc-family hooks only forward (nothing recorded).
    pub const MALLOC_HOOKS: &str = "PINWISE_MALLOC_HOOKS";
    /// `0`: recorded allocations carry their call site only, no stack.
    pub const STACKS: &str = "PINWISE_STACKS";
    /// What events are stamped with: `counter` (the default: the CPU's counter where it is
    /// the clock's own, see `stamp`) or `clock` (`CLOCK_MONOTONIC` read at each event).
    pub const TIMESTAMPS: &str = "PINWISE_TIMESTAMPS";
    /// How often the history is appended to while the program runs (`1s` default;
    /// `0`/`off`: only at the end).
    pub const FLUSH_EVERY: &str = "PINWISE_FLUSH_EVERY";
    /// How copies are fingerprinted to find redundant transfers: `off` (the default),
    /// `sampled` or `full`.
    pub const FINGERPRINT: &str = "PINWISE_FINGERPRINT";
    /// In sampled mode, the fraction of copies (chosen by host range, device range and
    /// length, so that repeats of a copy are all chosen; at most 4 MiB unless the fraction
    /// is 1) also hashed in full, to measure the sampled fingerprint's error (`0.0625`
    /// default; 0 to 1).
    pub const FINGERPRINT_CHECK: &str = "PINWISE_FINGERPRINT_CHECK";
    /// The socket of the node's pinned pool (`pinwise pool serve`) that serves the
    /// program's pinned requests (`pinwise run --pool`); unset: no pool.
    pub const POOL: &str = "PINWISE_POOL";
    /// Pinned requests of at least this size go to the pool (default 8 MiB; the size
    /// grammar of `PINWISE_BUDGET`). See `pool::wants`.
    pub const POOL_MIN: &str = "PINWISE_POOL_MIN";
}

/// The default of [`Config::pool_min_bytes`].
pub const DEFAULT_POOL_MIN: u64 = pinwise_core::decide::rules::NODE_POOL_MIN_BYTES;

/// The default of [`Config::fingerprint_check`].
pub const DEFAULT_FINGERPRINT_CHECK: f64 = 0.0625;

/// The default of [`Config::flush_every`].
pub const DEFAULT_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The shortest interval [`env::FLUSH_EVERY`] takes.
pub const MIN_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
/// The longest interval [`env::FLUSH_EVERY`] takes.
pub const MAX_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Where log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// Nowhere (the default: a library inside someone else's program stays quiet).
    Off,
    /// The program's stderr.
    Stderr,
    /// A file (appended to).
    File(PathBuf),
}

/// The parsed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Forward everything, record nothing.
    pub disabled: bool,
    /// How pinned requests are decided.
    pub mode: Mode,
    /// Profile to write (profile mode) or follow (use mode).
    pub profile_path: Option<PathBuf>,
    /// History to write (appended to while the program runs, completed at exit).
    pub history_path: Option<PathBuf>,
    /// Directory for statistics.
    pub stats_dir: Option<PathBuf>,
    /// Pinned budget in bytes; `None`: the allocator's default.
    pub budget_bytes: Option<u64>,
    /// Calibration CSV.
    pub calibration: Option<PathBuf>,
    /// Log destination.
    pub log: LogTarget,
    /// Log level (`tracing` filter directive).
    pub log_level: String,
    /// Signal number that writes the outputs.
    pub dump_signal: Option<i32>,
    /// Serve every pinned request pinned.
    pub keep_pinned: bool,
    /// Serve a program's pinned requests of 1 MiB or more without evidence pageable first,
    /// registered once their own copies show them hot (`pinwise_core::decide::earn`). Off by
    /// default: a kernel that reads pinned memory through its host pointer (all pinned
    /// memory is device-accessible under unified addressing) would fault on a buffer served
    /// pageable, and a cold buffer's copies run at pageable speed.
    pub pageable_first: bool,
    /// Register hot pageable buffers of the program in place.
    pub promote_pageable: bool,
    /// Hand out driver wrappers through `dlsym` and `cuGetProcAddress`.
    pub driver_hooks: bool,
    /// Stamp events with `CLOCK_MONOTONIC` even where the CPU's counter could be used
    /// (`PINWISE_TIMESTAMPS=clock`).
    pub clock_stamps: bool,
    /// The pid of the `pinwise run` that started the program.
    pub launcher_pid: Option<u32>,
    /// How often the drain thread appends what changed to the history file (`None`: only
    /// at the end, as a whole file). See `persist`.
    pub flush_every: Option<std::time::Duration>,
    /// How copies are fingerprinted (redundant transfers).
    pub fingerprint: FingerprintMode,
    /// In sampled mode, the fraction of copies also hashed in full.
    pub fingerprint_check: f64,
    /// The pinned pool's socket (`pinwise run --pool`).
    pub pool_socket: Option<PathBuf>,
    /// The smallest pinned request served from the pool.
    pub pool_min_bytes: u64,
    /// Values that could not be understood, each with what was done instead.
    pub problems: Vec<String>,
}

impl Config {
    /// The configuration of this process's environment.
    pub fn from_env() -> Config {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// The configuration `get` describes (`get(name)` is the variable's value, if set).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let mut problems = Vec::new();
        let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let path = |k: &str| set(k).map(PathBuf::from);
        let mut flag = |k: &str, default: bool| match set(k) {
            None => default,
            Some(v) => match parse_bool(&v) {
                Some(b) => b,
                None => {
                    problems.push(format!(
                        "{k}={v:?} is not 0/1/true/false/yes/no/on/off; using {}",
                        u8::from(default)
                    ));
                    default
                }
            },
        };
        let disabled = flag(env::DISABLE, false);
        let keep_pinned = flag(env::KEEP_PINNED, false);
        let pageable_first = flag(env::PAGEABLE_FIRST, false);
        let promote_pageable = flag(env::PROMOTE_PAGEABLE, true);
        let driver_hooks = flag(env::DRIVER_HOOKS, true);
        // Read when the library is loaded (crate::malloc); checked here to report them.
        let _ = flag(env::MALLOC_HOOKS, true);
        let _ = flag(env::STACKS, true);
        let clock_stamps = match set(env::TIMESTAMPS).as_deref().map(str::trim) {
            None | Some("counter") => false,
            Some("clock") => true,
            Some(other) => {
                problems.push(format!(
                    "{}={other:?} is not counter or clock; using counter",
                    env::TIMESTAMPS
                ));
                false
            }
        };
        if let Some(v) = set(env::MIN_TRACKED) {
            if let Err(e) = pinwise_core::units::parse_size_or_ram_percent(&v) {
                problems.push(format!(
                    "{}: {e}; tracking malloc-family allocations of at least 64 KiB",
                    env::MIN_TRACKED
                ));
            }
        }
        let profile_path = path(env::PROFILE);
        let mut mode = match set(env::MODE).as_deref().map(str::trim) {
            None => Mode::Adaptive,
            Some("adaptive") => Mode::Adaptive,
            Some("profile") => Mode::Profile,
            Some("use") => Mode::Use,
            Some(other) => {
                problems.push(format!(
                    "{}={other:?} is not adaptive, profile or use; using adaptive",
                    env::MODE
                ));
                Mode::Adaptive
            }
        };
        if mode == Mode::Use && profile_path.is_none() {
            problems.push(format!(
                "{}=use needs {} (the profile to follow); using adaptive",
                env::MODE,
                env::PROFILE
            ));
            mode = Mode::Adaptive;
        }
        let budget_bytes = set(env::BUDGET).and_then(|v| {
            match pinwise_core::units::parse_size_or_ram_percent(&v) {
                Ok(b) => Some(b),
                Err(e) => {
                    problems.push(format!("{}: {e}; using the default budget", env::BUDGET));
                    None
                }
            }
        });
        let log = match set(env::LOG) {
            None => LogTarget::Off,
            Some(v) if v == "stderr" || v == "-" => LogTarget::Stderr,
            Some(v) => LogTarget::File(PathBuf::from(v)),
        };
        let log_level = set(env::LOG_LEVEL).unwrap_or_else(|| "warn".to_string());
        let dump_signal = set(env::DUMP_SIGNAL).and_then(|v| match parse_signal(&v) {
            Some(s) => Some(s),
            None => {
                problems.push(format!(
                    "{}={v:?} is not a signal this library may take (USR1, USR2, a real-time \
                     signal, or their numbers); no dump signal",
                    env::DUMP_SIGNAL
                ));
                None
            }
        });
        let launcher_pid = set(env::LAUNCHER_PID).and_then(|v| v.trim().parse().ok());
        let flush_every = match set(env::FLUSH_EVERY) {
            None => Some(DEFAULT_FLUSH_EVERY),
            Some(v) => parse_flush_every(&v).unwrap_or_else(|e| {
                problems.push(format!("{}: {e}; flushing every second", env::FLUSH_EVERY));
                Some(DEFAULT_FLUSH_EVERY)
            }),
        };
        let fingerprint = match set(env::FINGERPRINT) {
            None => FingerprintMode::Off,
            Some(v) => FingerprintMode::parse(&v).unwrap_or_else(|| {
                problems.push(format!(
                    "{}={v:?} is not off, sampled or full; fingerprinting is off",
                    env::FINGERPRINT
                ));
                FingerprintMode::Off
            }),
        };
        let fingerprint_check = match set(env::FINGERPRINT_CHECK) {
            None => DEFAULT_FINGERPRINT_CHECK,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(f) if (0.0..=1.0).contains(&f) => f,
                _ => {
                    problems.push(format!(
                        "{}={v:?} is not a fraction between 0 and 1; using {DEFAULT_FINGERPRINT_CHECK}",
                        env::FINGERPRINT_CHECK
                    ));
                    DEFAULT_FINGERPRINT_CHECK
                }
            },
        };
        let pool_min_bytes = match set(env::POOL_MIN) {
            None => DEFAULT_POOL_MIN,
            Some(v) => match pinwise_core::pool_use::parse_min_bytes(&v) {
                Ok(b) => b,
                Err(e) => {
                    problems.push(format!(
                        "{}: {e}; serving pinned requests of at least 8 MiB from the pool",
                        env::POOL_MIN
                    ));
                    DEFAULT_POOL_MIN
                }
            },
        };
        Config {
            pool_socket: path(env::POOL),
            pool_min_bytes,
            disabled,
            mode,
            profile_path,
            history_path: path(env::HISTORY),
            stats_dir: path(env::STATS_DIR),
            budget_bytes,
            calibration: path(env::CALIBRATION),
            log,
            log_level,
            dump_signal,
            keep_pinned,
            pageable_first,
            promote_pageable,
            driver_hooks,
            clock_stamps,
            launcher_pid,
            flush_every,
            fingerprint,
            fingerprint_check,
            problems,
        }
    }
}

/// `1/0`, `true/false`, `yes/no`, `on/off` (any case, blanks around ignored). Allocates
/// nothing: the library reads `PINWISE_DISABLE` and `PINWISE_DRIVER_HOOKS` with it when it
/// is loaded, before `main`.
pub fn parse_bool(v: &str) -> Option<bool> {
    let v = v.trim();
    let any = |words: [&str; 4]| words.iter().any(|w| v.eq_ignore_ascii_case(w));
    if any(["1", "true", "yes", "on"]) {
        Some(true)
    } else if any(["0", "false", "no", "off"]) {
        Some(false)
    } else {
        None
    }
}

/// [`env::FLUSH_EVERY`]: `0` or `off` (`None`: no incremental writing), or a duration
/// between [`MIN_FLUSH_EVERY`] and [`MAX_FLUSH_EVERY`]: `500ms`, `2s`, `1.5s`, `1m`, or a
/// bare number of seconds (the grammar of `pinwise trace --dump-every`).
pub fn parse_flush_every(v: &str) -> Result<Option<std::time::Duration>, String> {
    let v = v.trim();
    if v == "0" || v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a duration (examples: 1s, 500ms, 0 for off)"))?;
    let secs = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "m" | "min" => value * 60.0,
        other => {
            return Err(format!(
                "unknown time unit {other:?} in {v:?} (use ms, s, m)"
            ))
        }
    };
    let (min, max) = (MIN_FLUSH_EVERY.as_secs_f64(), MAX_FLUSH_EVERY.as_secs_f64());
    if !(secs.is_finite() && (min..=max).contains(&secs)) {
        return Err(format!(
            "{v:?} is out of range: between 10ms and 1h (or 0 for off)"
        ));
    }
    Ok(Some(std::time::Duration::from_secs_f64(secs)))
}

/// A signal the library may install a handler for: `USR1`, `USR2` (with or without `SIG`),
/// `RTMIN+n`, or a number among those. Signals with another meaning (`INT`, `TERM`, `SEGV`,
/// ...) are refused: taking them over would change how the program behaves.
pub fn parse_signal(v: &str) -> Option<i32> {
    let v = v.trim();
    let name = v
        .strip_prefix("SIG")
        .or_else(|| v.strip_prefix("sig"))
        .unwrap_or(v);
    let n = match name.to_ascii_uppercase().as_str() {
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        s if s.starts_with("RTMIN+") => {
            libc::SIGRTMIN() + s["RTMIN+".len()..].parse::<i32>().ok()?
        }
        s => s.parse().ok()?,
    };
    let allowed = n == libc::SIGUSR1
        || n == libc::SIGUSR2
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n);
    allowed.then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(pairs: &[(&str, &str)]) -> Config {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_adaptive_quiet_and_enabled() {
        let c = config(&[]);
        assert_eq!(c.mode, Mode::Adaptive);
        assert!(!c.disabled && !c.keep_pinned && c.promote_pageable && c.driver_hooks);
        assert_eq!(c.log, LogTarget::Off);
        assert!(c.problems.is_empty());
        assert_eq!(c.budget_bytes, None);
    }

    #[test]
    fn timestamps_are_the_counter_unless_the_clock_is_asked_for() {
        assert!(!config(&[]).clock_stamps);
        assert!(!config(&[(env::TIMESTAMPS, "counter")]).clock_stamps);
        let c = config(&[(env::TIMESTAMPS, " clock ")]);
        assert!(c.clock_stamps && c.problems.is_empty(), "{:?}", c.problems);
        let c = config(&[(env::TIMESTAMPS, "tsc")]);
        assert!(!c.clock_stamps);
        assert_eq!(c.problems.len(), 1);
        assert!(
            c.problems[0].contains("PINWISE_TIMESTAMPS"),
            "{:?}",
            c.problems
        );
    }

    #[test]
    fn the_pool_threshold_takes_the_cli_grammar_and_names_a_bad_value() {
        for (v, bytes) in [("8MiB", 8 << 20), ("16M", 16 << 20), ("4096", 4096)] {
            let c = config(&[(env::POOL_MIN, v)]);
            assert_eq!((c.pool_min_bytes, c.problems.len()), (bytes, 0), "{v}");
        }
        // `--pool-min` refuses these; so does the variable, saying which value it refused.
        for bad in ["25%", "0", "8Q"] {
            let c = config(&[(env::POOL_MIN, bad)]);
            assert_eq!(c.pool_min_bytes, DEFAULT_POOL_MIN, "{bad}");
            assert!(
                c.problems
                    .iter()
                    .any(|p| p.contains("PINWISE_POOL_MIN") && p.contains(&format!("`{bad}`"))),
                "{bad}: {:?}",
                c.problems
            );
        }
    }

    #[test]
    fn values_are_read() {
        let c = config(&[
            (env::MODE, "use"),
            (env::PROFILE, "/tmp/p.json"),
            (env::BUDGET, "512M"),
            (env::LOG, "stderr"),
            (env::DUMP_SIGNAL, "SIGUSR2"),
            (env::KEEP_PINNED, "yes"),
            (env::PROMOTE_PAGEABLE, "off"),
            (env::LAUNCHER_PID, "42"),
        ]);
        assert_eq!(c.mode, Mode::Use);
        assert_eq!(c.profile_path, Some(PathBuf::from("/tmp/p.json")));
        assert_eq!(c.budget_bytes, Some(512 << 20));
        assert_eq!(c.log, LogTarget::Stderr);
        assert_eq!(c.dump_signal, Some(libc::SIGUSR2));
        assert!(c.keep_pinned && !c.promote_pageable);
        assert_eq!(c.launcher_pid, Some(42));
        assert!(c.problems.is_empty(), "{:?}", c.problems);
    }

    #[test]
    fn bad_values_are_reported_and_defaulted() {
        let c = config(&[
            (env::MODE, "fast"),
            (env::BUDGET, "lots"),
            (env::DUMP_SIGNAL, "INT"),
            (env::DISABLE, "maybe"),
        ]);
        assert_eq!(c.mode, Mode::Adaptive);
        assert_eq!(c.budget_bytes, None);
        assert_eq!(c.dump_signal, None);
        assert!(!c.disabled);
        assert_eq!(c.problems.len(), 4, "{:?}", c.problems);
        assert!(c.problems[0].contains("PINWISE_DISABLE"));
        assert!(c.problems.iter().any(|p| p.contains("\"fast\"")));
    }

    #[test]
    fn fingerprint_settings_are_read_and_checked() {
        let c = config(&[]);
        assert_eq!(c.fingerprint, FingerprintMode::Off, "off unless asked for");
        assert_eq!(c.fingerprint_check, DEFAULT_FINGERPRINT_CHECK);
        let c = config(&[(env::FINGERPRINT, "full"), (env::FINGERPRINT_CHECK, "1")]);
        assert_eq!(c.fingerprint, FingerprintMode::Full);
        assert_eq!(c.fingerprint_check, 1.0);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(
            config(&[(env::FINGERPRINT, "off")]).fingerprint,
            FingerprintMode::Off
        );
        let c = config(&[(env::FINGERPRINT, "most"), (env::FINGERPRINT_CHECK, "2")]);
        assert_eq!(c.fingerprint, FingerprintMode::Off);
        assert_eq!(c.fingerprint_check, DEFAULT_FINGERPRINT_CHECK);
        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
        assert!(c.problems[0].contains("PINWISE_FINGERPRINT=\"most\""));
        assert!(c.problems[1].contains("PINWISE_FINGERPRINT_CHECK"));
    }

    #[test]
    fn use_mode_without_a_profile_falls_back() {
        let c = config(&[(env::MODE, "use")]);
        assert_eq!(c.mode, Mode::Adaptive);
        assert!(c.problems[0].contains("PINWISE_PROFILE"));
    }

    #[test]
    fn booleans_in_any_case_with_blanks() {
        assert_eq!(parse_bool(" TRUE "), Some(true));
        assert_eq!(parse_bool("Off"), Some(false));
        assert_eq!(parse_bool("1"), Some(true));
        assert_eq!(parse_bool("maybe"), None);
        assert_eq!(parse_bool(""), None);
    }

    #[test]
    fn flush_intervals_are_range_checked() {
        use std::time::Duration;
        assert_eq!(config(&[]).flush_every, Some(DEFAULT_FLUSH_EVERY));
        for (v, want) in [
            ("250ms", Some(Duration::from_millis(250))),
            (" 2 ", Some(Duration::from_secs(2))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("1m", Some(Duration::from_secs(60))),
            ("10ms", Some(MIN_FLUSH_EVERY)),
            ("3600", Some(MAX_FLUSH_EVERY)),
            ("0", None),
            ("OFF", None),
        ] {
            assert_eq!(parse_flush_every(v), Ok(want), "{v}");
            let c = config(&[(env::FLUSH_EVERY, v)]);
            assert_eq!(c.flush_every, want, "{v}");
            assert!(c.problems.is_empty(), "{v}: {:?}", c.problems);
        }
        for bad in [
            "9ms",
            "0.001",
            "2h",
            "-1s",
            "soon",
            "1 fortnight",
            "NaN",
            "inf",
        ] {
            assert!(parse_flush_every(bad).is_err(), "{bad}");
            let c = config(&[(env::FLUSH_EVERY, bad)]);
            assert_eq!(c.flush_every, Some(DEFAULT_FLUSH_EVERY), "{bad}");
            assert_eq!(c.problems.len(), 1, "{bad}");
            assert!(c.problems[0].contains("PINWISE_FLUSH_EVERY"), "{bad}");
        }
        assert!(parse_flush_every("5ms")
            .unwrap_err()
            .contains("between 10ms and 1h"));
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("USR1"), Some(libc::SIGUSR1));
        assert_eq!(parse_signal("sigusr2"), Some(libc::SIGUSR2));
        assert_eq!(parse_signal("12"), Some(12));
        assert_eq!(parse_signal("RTMIN+2"), Some(libc::SIGRTMIN() + 2));
        assert_eq!(parse_signal("TERM"), None);
        assert_eq!(parse_signal("9"), None);
        assert_eq!(parse_signal("nonsense"), None);
    }

    /// The preload's settings come from the environment of someone else's program: no value
    /// may make parsing panic. Inputs are `NAME=value` lines (see `pinwise_testkit::fuzz`;
    /// seeds in `fuzz/corpus/preload_config/`). Paths are not opened while parsing (the
    /// calibration is read only when named by `PINWISE_CALIBRATION`, which these inputs
    /// leave out).
    #[test]
    fn fuzz_config_parsing() {
        let run = pinwise_testkit::fuzz::run("preload_config", |bytes| {
            let text = String::from_utf8_lossy(bytes);
            let map: HashMap<String, String> = text
                .lines()
                .filter_map(|l| l.split_once('='))
                .filter(|(k, _)| *k != env::CALIBRATION)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let _ = Config::from_lookup(|k| map.get(k).cloned());
            for v in map.values() {
                let _ = parse_signal(v);
                let _ = parse_bool(v);
                let _ = parse_flush_every(v);
            }
        });
        assert!(run.inputs > run.seeds as u64);
    }
}
