//! How an [`super::Engine`] is set up: its mode, the flags of a request, and where advice (use
//! mode) and events (profile mode) come from and go.

use std::sync::Arc;

pub use pinwise_core::decide::rules::Advised;
use pinwise_core::decide::rules::Ask;
use pinwise_core::{Event, ModuleTable, Policy, Tag};

use crate::budget::default_budget_bytes;
use crate::error::AllocError;
use crate::predict::DEFAULT_HISTORY_BITS;

/// How the allocator decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Learn within the run, per call site (no profile).
    Adaptive,
    /// Behave as adaptive and record what happens, for a profile written at the end.
    Profile,
    /// Follow a profile's advice where it matches this run; adaptive elsewhere.
    Use,
}

impl Mode {
    /// `adaptive`, `profile` or `use`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::Profile => "profile",
            Mode::Use => "use",
        }
    }
}

/// Flags of one allocation request (a C-friendly bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocFlags(pub u32);

impl AllocFlags {
    /// No constraint: the engine decides.
    pub const NONE: AllocFlags = AllocFlags(0);
    /// The caller needs page-locked memory (e.g. it asked CUDA for pinned memory): pin it or
    /// fail, never serve it pageable.
    pub const REQUIRE_PINNED: AllocFlags = AllocFlags(1);
    /// Never pin this allocation (not even by promotion).
    pub const NEVER_PIN: AllocFlags = AllocFlags(2);
    /// The caller asked for pinned memory but can take pageable (a program's plain
    /// `cuMemHostAlloc`, which a framework makes for buffers it copies asynchronously):
    /// pinned unless there is evidence against it (a profile's advice, or the call site's
    /// earlier allocations turning out cold), so that a first use is never slower than
    /// plain CUDA. Within the budget like any other pinned block.
    pub const PREFER_PINNED: AllocFlags = AllocFlags(4);
    /// With [`AllocFlags::PREFER_PINNED`]: without evidence either way, serve it pageable
    /// and leave its registration to the caller, whom its copies must convince
    /// ([`pinwise_core::decide::earn`]); the engine does not promote it itself.
    pub const EARN_PINNED: AllocFlags = AllocFlags(8);

    /// Whether all bits of `other` are set.
    pub const fn contains(self, other: AllocFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of a request as pinwise-core's rules read them.
    pub const fn ask(self) -> Ask {
        Ask {
            require_pinned: self.contains(AllocFlags::REQUIRE_PINNED),
            never_pin: self.contains(AllocFlags::NEVER_PIN),
            prefer_pinned: self.contains(AllocFlags::PREFER_PINNED),
            earn_pinned: self.contains(AllocFlags::EARN_PINNED),
        }
    }

    /// The flags for what pinwise-core's rules ask.
    pub const fn from_ask(ask: Ask) -> AllocFlags {
        let mut bits = 0;
        if ask.require_pinned {
            bits |= AllocFlags::REQUIRE_PINNED.0;
        }
        if ask.never_pin {
            bits |= AllocFlags::NEVER_PIN.0;
        }
        if ask.prefer_pinned {
            bits |= AllocFlags::PREFER_PINNED.0;
        }
        if ask.earn_pinned {
            bits |= AllocFlags::EARN_PINNED.0;
        }
        AllocFlags(bits)
    }
}

/// Advice for use mode: implemented by [`crate::plan::ProfileAdvice`] (a profile planned
/// by pinwise-core's [`pinwise_core::decide::plan::PinPlan`]), or by anything else that can say pin or not per tag.
pub trait Advice: Send + Sync {
    /// The advice for allocation `tag` of `size` bytes.
    fn advise(&self, tag: &Tag, size: usize) -> Advised;

    /// Whether the profiled allocation `tag` of `size` bytes was pinned and copied more than
    /// once (a buffer in use, not pinned for nothing). A request that prefers pinned memory
    /// ([`AllocFlags::PREFER_PINNED`]) with such a history is served pinned even where the
    /// plan's pricing advises pageable: the program asked for pinned memory for a buffer it
    /// copies again and again, and pinwise's own promotion would pin it on its first copies.
    fn pinned_and_reused(&self, _tag: &Tag, _size: usize) -> bool {
        false
    }
}

/// Receives the engine's events (profile mode; a recorder, such as the preload's
/// `Recorder`, is what feeds events into a history; this is where the engine hands them): implemented by
/// [`crate::record::HistoryRecorder`], which feeds a `MemHistory` and writes the profile.
pub trait EventSink: Send + Sync {
    /// One event; called outside the engine's locks.
    fn record(&self, event: Event);
    /// Called once when the engine shuts down (writes the profile).
    fn finish(&self) -> Result<(), AllocError>;
}

/// Settings of an [`Engine`](crate::engine::Engine).
#[derive(Clone)]
pub struct EngineConfig {
    /// How decisions are made.
    pub mode: Mode,
    /// Hard cap on pinned bytes; `None`: a quarter of the machine's memory.
    pub budget_bytes: Option<u64>,
    /// Bytes of freed large pageable mappings kept warm for reuse (see [`crate::pageable`]);
    /// `None`: `PINWISE_PAGEABLE_CACHE` if set, else an eighth of the machine's memory.
    pub pageable_cache_bytes: Option<usize>,
    /// The cache of warm pageable mappings is given back to the OS while `MemAvailable` is
    /// below this many bytes (see [`crate::pressure`]); `None`: a sixteenth of `MemTotal`.
    pub low_memory_bytes: Option<u64>,
    /// Smallest pinned segment obtained at once (small blocks are carved from it).
    pub min_segment_bytes: usize,
    /// Outcomes remembered per call site by the predictor.
    pub history_bits: u8,
    /// Advise large pageable mappings to use transparent huge pages, and populate them at
    /// allocation; carve mid-sized ones from chunks of huge pages (see [`crate::pageable`]).
    pub huge_pages: bool,
    /// Most reuses a new pinned block is credited with (from the site's run of hot outcomes).
    pub max_reuse_credit: u32,
    /// pinwise-core's policy (and its cost model): every pin-or-not decision is its.
    pub policy: Arc<Policy>,
    /// Use mode: the advice (a planned profile).
    pub advice: Option<Arc<dyn Advice>>,
    /// Profile mode: where events go.
    pub recorder: Option<Arc<dyn EventSink>>,
    /// The module table call sites are interned in (shared with the advice and recorder).
    pub modules: Arc<ModuleTable>,
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("mode", &self.mode)
            .field("budget_bytes", &self.budget_bytes)
            .field("pageable_cache_bytes", &self.pageable_cache_bytes)
            .field("low_memory_bytes", &self.low_memory_bytes)
            .field("min_segment_bytes", &self.min_segment_bytes)
            .field("history_bits", &self.history_bits)
            .field("huge_pages", &self.huge_pages)
            .field("max_reuse_credit", &self.max_reuse_credit)
            .field("advice", &self.advice.is_some())
            .field("recorder", &self.recorder.is_some())
            .finish_non_exhaustive()
    }
}

impl EngineConfig {
    /// Adaptive mode with defaults, deciding with `policy`.
    pub fn new(policy: Policy) -> Self {
        EngineConfig {
            mode: Mode::Adaptive,
            budget_bytes: None,
            pageable_cache_bytes: None,
            low_memory_bytes: None,
            min_segment_bytes: crate::grade::PAGE,
            history_bits: DEFAULT_HISTORY_BITS,
            huge_pages: true,
            max_reuse_credit: 8,
            policy: Arc::new(policy),
            advice: None,
            recorder: None,
            modules: ModuleTable::shared(),
        }
    }
}

impl EngineConfig {
    /// Use mode following `profile`, planned with this configuration's costs, budget and
    /// module table. The plan's summary is logged.
    pub fn with_profile(mut self, profile: &pinwise_core::profile::Profile) -> Self {
        let budget = self.budget_bytes.unwrap_or_else(default_budget_bytes);
        let plan = crate::plan::ProfileAdvice::new(profile, &self.policy, budget, &self.modules);
        let s = plan.summary();
        tracing::info!(
            entries = s.entries,
            pinned = s.pinned,
            peak_bytes = s.peak_bytes,
            unknown_modules = s.unknown_modules,
            "use mode: profile planned"
        );
        self.mode = Mode::Use;
        self.advice = Some(Arc::new(plan));
        self
    }

    /// Use mode following the profile in `path`. A profile that cannot be read is an error
    /// that names the file and the problem.
    pub fn with_profile_file(self, path: &std::path::Path) -> Result<Self, AllocError> {
        let profile =
            pinwise_core::profile::Profile::load(path).map_err(|e| AllocError::Profile {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        Ok(self.with_profile(&profile))
    }

    /// Profile mode: record the run; the profile is written to `output` (if any) when the
    /// engine shuts down, and is available from the returned recorder.
    pub fn recording(
        mut self,
        output: Option<std::path::PathBuf>,
    ) -> (Self, Arc<crate::record::HistoryRecorder>) {
        let rec = Arc::new(crate::record::HistoryRecorder::new(
            self.modules.clone(),
            output,
        ));
        self.mode = Mode::Profile;
        self.recorder = Some(rec.clone());
        (self, rec)
    }
}
