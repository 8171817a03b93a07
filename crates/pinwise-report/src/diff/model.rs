//! The diff's model: [`DiffReport`] and its parts, and [`DiffOptions`].

use std::collections::BTreeMap;

use serde::Serialize;

use pinwise_core::PinMethod;

use crate::input::InputInfo;
use crate::sites::SiteLabel;

/// What to compare, and how sensitively.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiffOptions {
    /// Rows of each table.
    pub top: usize,
    /// Relative change that counts (0.25: 25 %).
    pub threshold: f64,
    /// How pinning is costed for the pin agreement.
    pub pin_method: PinMethod,
}

impl Default for DiffOptions {
    /// 15 rows, 25 %, pinning by registration.
    fn default() -> Self {
        DiffOptions {
            top: 15,
            threshold: 0.25,
            pin_method: PinMethod::RegisterTouched,
        }
    }
}

/// One input, summed up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The file.
    pub input: InputInfo,
    /// Processes it covers (per-process figures divide by this).
    pub processes: u64,
    /// Tags (call site + call number).
    pub tags: u64,
    /// Call sites.
    pub sites: u64,
    /// Allocations (tag instances).
    pub allocations: u64,
    /// Transfers attributed to them.
    pub transfers: u64,
    /// Bytes.
    pub bytes: u64,
}

/// A change of one call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Only in B.
    Appeared,
    /// Only in A.
    Disappeared,
    /// More transfers per allocation in B.
    Hotter,
    /// Fewer transfers per allocation in B.
    Colder,
    /// Another mean allocation size.
    Resized,
    /// More allocations per process.
    MoreAllocations,
    /// Fewer allocations per process.
    FewerAllocations,
}

impl Change {
    /// How it is written.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Appeared => "appeared",
            Change::Disappeared => "disappeared",
            Change::Hotter => "hotter",
            Change::Colder => "colder",
            Change::Resized => "resized",
            Change::MoreAllocations => "more allocs",
            Change::FewerAllocations => "fewer allocs",
        }
    }
}

/// A call site in one input.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SiteSide {
    /// Allocations made there, per process.
    pub allocations_per_process: f64,
    /// Transfers per allocation.
    pub transfers_per_allocation: f64,
    /// Bytes moved, per process.
    pub bytes_per_process: f64,
    /// Mean size (of each tag's largest instance).
    pub mean_size: u64,
    /// Largest.
    pub max_size: u64,
    /// Highest call number.
    pub max_call_no: u32,
}

/// One call site in both inputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteDiff {
    /// The site.
    pub site: SiteLabel,
    /// What changed (empty: nothing beyond the threshold).
    pub changes: Vec<Change>,
    /// In A.
    pub a: Option<SiteSide>,
    /// In B.
    pub b: Option<SiteSide>,
}

/// Tags compared one to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TagCounts {
    /// In both.
    pub matched: u64,
    /// Only in A.
    pub only_a: u64,
    /// Only in B.
    pub only_b: u64,
    /// In both, with another size.
    pub resized: u64,
    /// In both, more transfers per instance in B (beyond the threshold).
    pub hotter: u64,
    /// In both, fewer.
    pub colder: u64,
}

/// A tag whose pinning advice differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TagChange {
    /// Its call site.
    pub site: SiteLabel,
    /// Its call number.
    pub call_no: u32,
    /// Size in A, if there.
    pub size_a: Option<u64>,
    /// Size in B, if there.
    pub size_b: Option<u64>,
    /// Net saving of pinning it, per A (ns), if there.
    pub net_a_ns: Option<f64>,
    /// Net saving of pinning it, per B (ns), if there.
    pub net_b_ns: Option<f64>,
    /// What B says of pinning it.
    pub verdict_b: String,
}

/// Whether the pinning A advises holds in B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PinAgreement {
    /// Tags that pay back per A.
    pub pinned_a: u64,
    /// Their net saving per A, ns.
    pub saving_a_ns: f64,
    /// Of those, tags that also pay back per B.
    pub confirmed: u64,
    /// Their net saving per A, ns.
    pub confirmed_ns: f64,
    /// `confirmed_ns / saving_a_ns` (1 when A advises nothing).
    pub share: f64,
    /// Tags that pay back per B.
    pub pinned_b: u64,
    /// A's advice that B does not confirm, most saving first.
    pub lost: Vec<TagChange>,
    /// What pays back per B but A does not advise, most saving first.
    pub missed: Vec<TagChange>,
}

/// A module at the same path with another identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleChange {
    /// The path.
    pub path: String,
    /// Its identity key in A.
    pub key_a: String,
    /// In B.
    pub key_b: String,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    /// `"pinwise-diff"` ([`crate::json::DIFF_FORMAT`]).
    pub format: &'static str,
    /// Version of this JSON layout ([`crate::json::DIFF_VERSION`]).
    pub version: u32,
    /// Input A (the reference: e.g. the profile).
    pub a: Side,
    /// Input B (e.g. a new run).
    pub b: Side,
    /// The threshold used.
    pub threshold: f64,
    /// Modules whose identity changed (rebuilt): their sites cannot match.
    pub module_changes: Vec<ModuleChange>,
    /// Sites per change.
    pub site_counts: BTreeMap<Change, u64>,
    /// Sites in both inputs with nothing changed beyond the threshold.
    pub sites_unchanged: u64,
    /// The changed sites, largest change (bytes per process) first.
    pub sites: Vec<SiteDiff>,
    /// Tags one to one.
    pub tags: TagCounts,
    /// Whether A's pinning advice holds in B.
    pub pinning: PinAgreement,
    /// One sentence.
    pub verdict: String,
}
