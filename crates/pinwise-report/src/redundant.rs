//! Redundant transfers: copies whose bytes the other side already had (see
//! `pinwise_core::fingerprint`), per allocation and per call site, with the time they cost
//! (from the cost model), advice in words, and how far the fingerprints can be trusted.

use std::collections::BTreeMap;

use serde::Serialize;

use pinwise_core::fingerprint::{FingerprintMode, Redundancy, SAMPLE_LINES};
use pinwise_core::history::AllocationView;
use pinwise_core::{CostModel, Direction, MemHistory, ModuleTable, Site};

use crate::sites::{SiteLabel, SiteNames};

/// The REDUNDANT TRANSFERS section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedundantTransfers {
    /// How copies were fingerprinted: `off`, `sampled` or `full`.
    pub mode: &'static str,
    /// In sampled mode, the share of copies also hashed in full.
    pub check_share: f64,
    /// Uploads fingerprinted.
    pub uploads: u64,
    /// Downloads fingerprinted.
    pub downloads: u64,
    /// Copies that could not be fingerprinted (pitched copies; asynchronous downloads that
    /// a later copy touched, or whose completion was not seen, before they could be hashed:
    /// in `run` by its own event, in a trace by a sync call or query of their stream,
    /// event or context).
    pub skipped: u64,
    /// Copies that were to be hashed in full but were larger than the source's cap
    /// (`pinwise trace --fingerprint-full-max`): fingerprinted by their sampled lines only.
    pub full_over_cap: u64,
    /// Copies whose verdict was decided on full hashes (the sampled verdict checked).
    pub checked: u64,
    /// Of those, copies the sampled fingerprint alone would have called redundant although
    /// their bytes differed.
    pub sampled_false_positives: u64,
    /// Measured false-positive rate of the sampled fingerprint (`None`: nothing checked).
    pub false_positive_rate: Option<f64>,
    /// Measured false-negative rate of the sampled fingerprint (`None`: nothing checked).
    pub false_negative_rate: Option<f64>,
    /// Redundant uploads, all allocations.
    pub redundant_uploads: u64,
    /// Their bytes.
    pub redundant_upload_bytes: u64,
    /// Redundant downloads (results fetched unchanged).
    pub redundant_downloads: u64,
    /// Their bytes.
    pub redundant_download_bytes: u64,
    /// Estimated time they took (cost model), ns.
    pub wasted_ns: f64,
    /// The allocations with the most time wasted.
    pub allocations: Vec<RedundantRow>,
    /// Call sites by time wasted.
    pub sites: Vec<RedundantSiteRow>,
    /// What the numbers mean and how far to trust them, in words.
    pub note: String,
}

/// One allocation with redundant copies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedundantRow {
    /// Record id in the history.
    pub id: u32,
    /// Process.
    pub pid: u32,
    /// Call site of the allocation.
    pub site: SiteLabel,
    /// The frame of its stack a reader can change, named, when a stack was captured.
    pub user_frame: Option<String>,
    /// Size.
    pub size: u64,
    /// The summary (uploads, downloads, redundant ones and their bytes, first repeats).
    pub redundancy: Redundancy,
    /// Estimated time of its redundant copies, ns.
    pub wasted_ns: f64,
    /// What to do, in words.
    pub advice: String,
}

/// One call site's redundant copies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedundantSiteRow {
    /// The call site of the allocations.
    pub site: SiteLabel,
    /// Allocations from there with redundant copies.
    pub allocations: u64,
    /// Redundant copies (uploads and downloads).
    pub redundant_copies: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their estimated time, ns.
    pub wasted_ns: f64,
}

/// Estimated time of `n` copies of `bytes` in total in `direction`, from an allocation
/// whose copies in that direction were pinned for `pinned_share` of their bytes.
fn copies_ns(cost: &CostModel, direction: Direction, n: u32, bytes: u64, pinned_share: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let each = bytes / u64::from(n);
    let t = pinned_share * cost.transfer_ns(direction, each, true)
        + (1.0 - pinned_share) * cost.transfer_ns(direction, each, false);
    t * f64::from(n)
}

fn wasted(cost: &CostModel, v: &AllocationView<'_>, r: &Redundancy) -> f64 {
    let c = v.counters();
    let share = |d: Direction| {
        let x = c.direction(d);
        let all = x.pinned_bytes + x.pageable_bytes;
        if all == 0 {
            0.0
        } else {
            x.pinned_bytes as f64 / all as f64
        }
    };
    copies_ns(
        cost,
        Direction::HtoD,
        r.redundant_uploads,
        r.redundant_upload_bytes,
        share(Direction::HtoD),
    ) + copies_ns(
        cost,
        Direction::DtoH,
        r.redundant_downloads,
        r.redundant_download_bytes,
        share(Direction::DtoH),
    )
}

/// What to do about an allocation's redundant copies, in words.
pub fn advice(r: &Redundancy) -> String {
    let mut parts = Vec::new();
    if r.redundant_uploads > 0 {
        let repeat = match r.first_upload {
            Some((n, 0)) => format!("upload #{n} sent bytes the device range already held"),
            Some((n, k)) => format!("upload #{n} is identical to upload #{k}"),
            None => String::new(),
        };
        if r.device_held > 0 {
            parts.push(format!(
                "keep it on the device: {repeat}; {} of {} uploads re-sent bytes the device \
                 range still held (unless a kernel wrote it in between)",
                r.redundant_uploads, r.uploads
            ));
        } else {
            parts.push(format!(
                "upload once: {repeat}; {} of {} uploads re-sent the same bytes to a device \
                 range that was overwritten meanwhile (keep a device copy of each instead)",
                r.redundant_uploads, r.uploads
            ));
        }
    }
    if r.redundant_downloads > 0 {
        let repeat = match r.first_download {
            Some((n, k)) => format!("download #{n} is identical to download #{k}"),
            None => String::new(),
        };
        parts.push(format!(
            "fetch it once, or only when it changes: {repeat}; {} of {} downloads brought \
             the same bytes again",
            r.redundant_downloads, r.downloads
        ));
    }
    parts.join("; ")
}

/// Builds the section from `history`'s redundancy summaries.
pub fn analyse(
    history: &MemHistory,
    cost: &CostModel,
    top: usize,
    names: &mut SiteNames<'_>,
    modules: &ModuleTable,
) -> RedundantTransfers {
    let st = *history.fingerprint_stats();
    let mode = st.mode();
    let mut rows: Vec<(u32, f64, Redundancy)> = Vec::new();
    let mut by_site: BTreeMap<Site, (u64, u64, u64, f64)> = BTreeMap::new();
    let mut totals = (0u64, 0u64, 0u64, 0u64, 0.0f64);
    for (record, r) in history.redundancy().records() {
        if !r.any() {
            continue;
        }
        let Some(v) = history.view(pinwise_core::history::RecordId(record)) else {
            continue;
        };
        let w = wasted(cost, &v, &r);
        totals.0 += u64::from(r.redundant_uploads);
        totals.1 += r.redundant_upload_bytes;
        totals.2 += u64::from(r.redundant_downloads);
        totals.3 += r.redundant_download_bytes;
        totals.4 += w;
        let e = by_site.entry(v.site()).or_default();
        e.0 += 1;
        e.1 += u64::from(r.redundant_uploads) + u64::from(r.redundant_downloads);
        e.2 += r.redundant_upload_bytes + r.redundant_download_bytes;
        e.3 += w;
        rows.push((record, w, r));
    }
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let allocations = rows
        .iter()
        .take(top)
        .filter_map(|&(record, w, r)| {
            let v = history.view(pinwise_core::history::RecordId(record))?;
            Some(RedundantRow {
                id: record,
                pid: v.pid(),
                site: names.site(modules, v.site()),
                user_frame: crate::analysis::stack_labels(history, &v).0,
                size: v.size(),
                redundancy: r,
                wasted_ns: w,
                advice: advice(&r),
            })
        })
        .collect();
    let mut sites: Vec<(Site, (u64, u64, u64, f64))> = by_site.into_iter().collect();
    sites.sort_by(|a, b| b.1 .3.total_cmp(&a.1 .3).then(a.0.cmp(&b.0)));
    let sites = sites
        .into_iter()
        .take(top)
        .map(|(site, (allocations, copies, bytes, w))| RedundantSiteRow {
            site: names.site(modules, site),
            allocations,
            redundant_copies: copies,
            bytes,
            wasted_ns: w,
        })
        .collect();
    let check_share = st.check_ppm as f64 / 1e6;
    let stat = |name: &str| history.source_stats().get(name).copied();
    let over_cap = (
        stat(pinwise_core::fingerprint::FULL_OVER_CAP_STAT).unwrap_or(0),
        stat(pinwise_core::fingerprint::FULL_CAP_BYTES_STAT),
    );
    RedundantTransfers {
        mode: mode.as_str(),
        check_share,
        uploads: st.uploads,
        downloads: st.downloads,
        skipped: st.skipped,
        full_over_cap: over_cap.0,
        checked: st.checked,
        sampled_false_positives: st.sampled_false_same,
        false_positive_rate: st.false_positive_rate(),
        false_negative_rate: st.false_negative_rate(),
        redundant_uploads: totals.0,
        redundant_upload_bytes: totals.1,
        redundant_downloads: totals.2,
        redundant_download_bytes: totals.3,
        wasted_ns: totals.4,
        allocations,
        sites,
        note: note(mode, check_share, &st, over_cap),
    }
}

/// The words under the section. `over_cap`: copies above the full-hash cap of a tracer
/// (hashed by their sampled lines only) and that cap, when the source has one.
fn note(
    mode: FingerprintMode,
    check_share: f64,
    st: &pinwise_core::fingerprint::FingerprintStats,
    over_cap: (u64, Option<u64>),
) -> String {
    let cap = match over_cap {
        (0, _) => String::new(),
        (n, cap) => format!(
            " {n} copies above the full-hash cap{} were sampled (their sampled lines only: \
             the blind spot below applies to them; `pinwise trace --fingerprint-full-max` \
             raises the cap).",
            cap.map(|c| format!(" of {}", pinwise_core::units::format_size(c)))
                .unwrap_or_default()
        ),
    };
    let rates = match st.false_positive_rate() {
        Some(fp) => format!(
            "of {} copies also checked on full hashes, the sampled fingerprint alone would have \
             called {} redundant although their bytes differed (false-positive rate {}); \
             false-negative rate {} (equal bytes always have equal fingerprints)",
            st.checked,
            st.sampled_false_same,
            crate::units::percent(fp),
            crate::units::percent(st.false_negative_rate().unwrap_or(0.0)),
        ),
        None => "no copy was checked on full hashes, so the sampled fingerprint's error was not \
                 measured here"
            .to_owned(),
    };
    match mode {
        FingerprintMode::Off => "copies were not fingerprinted: run with `pinwise run \
            --fingerprint sampled` (the default) or `full`, or `pinwise trace --fingerprint`"
            .to_owned(),
        FingerprintMode::Sampled => format!(
            "fingerprints: sampled ({SAMPLE_LINES} cache lines of 64 B spread over each copy, \
             plus its length; copies up to 512 B are covered entirely), {} of copies also \
             hashed in full; {rates}. A change between the sampled lines goes unseen (the \
             copy is then called redundant wrongly): `--fingerprint full` removes that blind \
             spot at the cost of hashing every byte. Only copies are seen: a kernel that \
             writes a device range between two identical uploads makes the second one needed.",
            crate::units::percent(check_share)
        ),
        FingerprintMode::Full => format!(
            "fingerprints: full (every byte of every copy hashed: by `pinwise run` in the copy \
             hook, by `pinwise trace` in BPF at the copy's entry, an asynchronous download's \
             when a sync call or query says it completed; a copy with a page that could not \
             be read, or an asynchronous download whose completion was not seen, counted as \
             skipped, never redundant; exact up to 64-bit hash collisions); {rates}.{cap} \
             Only copies are seen: a kernel that writes a device range between two \
             identical uploads makes the second one needed."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_names_the_repeat_and_what_to_do() {
        let r = Redundancy {
            uploads: 5,
            redundant_uploads: 3,
            redundant_upload_bytes: 3 << 20,
            device_held: 3,
            first_upload: Some((2, 1)),
            ..Redundancy::default()
        };
        let a = advice(&r);
        assert!(
            a.starts_with("keep it on the device: upload #2 is identical to upload #1"),
            "{a}"
        );
        assert!(a.contains("3 of 5 uploads"), "{a}");
        let r = Redundancy {
            uploads: 2,
            redundant_uploads: 1,
            first_upload: Some((2, 1)),
            downloads: 3,
            redundant_downloads: 1,
            first_download: Some((2, 1)),
            ..Redundancy::default()
        };
        let a = advice(&r);
        assert!(a.starts_with("upload once:"), "{a}");
        assert!(
            a.contains(
                "fetch it once, or only when it changes: download #2 is identical to download #1"
            ),
            "{a}"
        );
    }

    #[test]
    fn wasted_time_follows_the_cost_model_at_the_mean_size() {
        let cost = CostModel::builtin();
        let one = cost.transfer_ns(Direction::HtoD, 1 << 20, false);
        let t = copies_ns(&cost, Direction::HtoD, 3, 3 << 20, 0.0);
        assert!((t - 3.0 * one).abs() < 1e-6 * t, "{t} vs {one}");
        let pinned = copies_ns(&cost, Direction::HtoD, 3, 3 << 20, 1.0);
        assert!(pinned < t, "pinned copies are modelled faster");
        assert_eq!(copies_ns(&cost, Direction::HtoD, 0, 0, 0.0), 0.0);
    }
}
