//! The diff's computation: both inputs reduced to per-tag profile entries ([`entries_of`]),
//! matched by module identity, and compared ([`diff`]).

use std::collections::BTreeMap;

use pinwise_core::policy::{PinRequest, PredictedTransfers};
use pinwise_core::profile::{Profile, ProfileEntry};
use pinwise_core::{Decision, PinMethod, Policy};

use super::model::*;
use crate::input::{InputInfo, Loaded};
use crate::sites::{SiteNames, SourceResolver};
use crate::units::{count, percent};

/// The profile entries of an input.
pub fn entries_of(loaded: &Loaded) -> Profile {
    match loaded {
        Loaded::Profile(p) => (**p).clone(),
        Loaded::History(h) => crate::tags::profile_of(h),
    }
}

type SiteKey = (String, u64);
/// A changed site while sorting: weight, key, changes, A's side, B's side.
type ChangedSite = (
    f64,
    SiteKey,
    Vec<Change>,
    Option<SiteSide>,
    Option<SiteSide>,
);
type TagKey = (String, u64, u32);

/// A profile indexed by module key.
struct Indexed<'p> {
    profile: &'p Profile,
    /// Ordered, so that sums over it (savings) come out bit-identical on every run.
    tags: BTreeMap<TagKey, &'p ProfileEntry>,
    sites: BTreeMap<SiteKey, SiteSide>,
    processes: f64,
}

impl<'p> Indexed<'p> {
    fn new(profile: &'p Profile) -> Self {
        let key = |e: &ProfileEntry| profile.modules[e.module as usize].key.clone();
        let processes = profile.processes.max(1) as f64;
        let mut tags = BTreeMap::new();
        // Per site: instances, transfers, bytes, size sum, max size, max call number.
        let mut acc: BTreeMap<SiteKey, (u64, u64, u64, u128, u64, u32)> = BTreeMap::new();
        for e in &profile.entries {
            let k = key(e);
            let a = acc.entry((k.clone(), e.offset)).or_default();
            let inst = u64::from(e.instances);
            // Saturating: a profile's counts are whatever its file says.
            a.0 += inst;
            a.1 = a.1.saturating_add(e.transfers.transfers());
            a.2 = a.2.saturating_add(e.transfers.bytes());
            a.3 += u128::from(e.size) * u128::from(inst);
            a.4 = a.4.max(e.size);
            a.5 = a.5.max(e.call_no);
            tags.insert((k, e.offset, e.call_no), e);
        }
        let sites = acc
            .into_iter()
            .map(|(k, (inst, xfers, b, size_sum, max, call))| {
                let n = inst.max(1) as f64;
                (
                    k,
                    SiteSide {
                        allocations_per_process: inst as f64 / processes,
                        transfers_per_allocation: xfers as f64 / n,
                        bytes_per_process: b as f64 / processes,
                        mean_size: (size_sum / u128::from(inst.max(1))) as u64,
                        max_size: max,
                        max_call_no: call,
                    },
                )
            })
            .collect();
        Indexed {
            profile,
            tags,
            sites,
            processes,
        }
    }

    fn side(&self, input: InputInfo) -> Side {
        let p = self.profile;
        Side {
            input,
            processes: p.processes,
            tags: p.entries.len() as u64,
            sites: self.sites.len() as u64,
            allocations: p.entries.iter().map(|e| u64::from(e.instances)).sum(),
            // Saturating: a profile's counts are whatever its file says.
            transfers: p
                .entries
                .iter()
                .fold(0u64, |a, e| a.saturating_add(e.transfers.transfers())),
            bytes: p
                .entries
                .iter()
                .fold(0u64, |a, e| a.saturating_add(e.transfers.bytes())),
        }
    }

    fn path_of(&self, key: &str) -> String {
        self.profile
            .modules
            .iter()
            .find(|m| m.key == key)
            .map_or_else(|| "?".into(), |m| m.path.clone())
    }
}

fn relative(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (b - a) / a.abs().max(1e-9)
    }
}

fn decide(policy: &Policy, e: &ProfileEntry, method: PinMethod) -> Decision {
    policy.decide(&PinRequest {
        size: e.size,
        transfers: PredictedTransfers::from_profile_entry(e),
        remaining_budget: u64::MAX,
        method,
    })
}

/// A site of the profiles named: from the names a profile stored (`a`'s first), else
/// through the resolver.
fn profile_label(
    names: &mut SiteNames<'_>,
    a: &Profile,
    b: &Profile,
    key: &str,
    path: &str,
    offset: u64,
) -> crate::sites::SiteLabel {
    match a.symbol(key, offset).or_else(|| b.symbol(key, offset)) {
        Some(s) => crate::sites::SiteLabel {
            module_key: key.to_owned(),
            module_path: path.to_owned(),
            offset,
            location: Some(crate::sites::SourceLocation {
                function: s.function.clone(),
                file: s.file.clone(),
                line: s.line,
            }),
        },
        None => names.profile_site(key, path, offset),
    }
}

/// Compares `a` (the reference) with `b`.
#[allow(clippy::too_many_arguments)]
pub fn diff(
    a: &Profile,
    a_info: InputInfo,
    b: &Profile,
    b_info: InputInfo,
    policy: &Policy,
    options: &DiffOptions,
    resolver: &mut dyn SourceResolver,
) -> DiffReport {
    let mut names = SiteNames::new(resolver);
    let (a_profile, b_profile) = (a, b);
    let ia = Indexed::new(a);
    let ib = Indexed::new(b);
    let t = options.threshold;

    // Modules at the same path with another identity.
    let mut module_changes = Vec::new();
    for ma in &a.modules {
        for mb in &b.modules {
            if ma.path == mb.path && ma.key != mb.key && ma.path != "?" {
                module_changes.push(ModuleChange {
                    path: ma.path.clone(),
                    key_a: ma.key.clone(),
                    key_b: mb.key.clone(),
                });
            }
        }
    }

    // Sites.
    let mut keys: Vec<&SiteKey> = ia.sites.keys().chain(ib.sites.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut site_counts: BTreeMap<Change, u64> = BTreeMap::new();
    let mut unchanged = 0;
    let mut changed: Vec<ChangedSite> = Vec::new();
    for k in keys {
        let (sa, sb) = (ia.sites.get(k).copied(), ib.sites.get(k).copied());
        let mut changes = Vec::new();
        match (sa, sb) {
            (Some(_), None) => changes.push(Change::Disappeared),
            (None, Some(_)) => changes.push(Change::Appeared),
            (Some(x), Some(y)) => {
                let heat = relative(x.transfers_per_allocation, y.transfers_per_allocation);
                let moved = (y.transfers_per_allocation - x.transfers_per_allocation).abs();
                if heat > t && moved >= 0.5 {
                    changes.push(Change::Hotter);
                } else if heat < -t && moved >= 0.5 {
                    changes.push(Change::Colder);
                }
                if relative(x.mean_size as f64, y.mean_size as f64).abs() > t {
                    changes.push(Change::Resized);
                }
                let allocs = relative(x.allocations_per_process, y.allocations_per_process);
                if allocs > t {
                    changes.push(Change::MoreAllocations);
                } else if allocs < -t {
                    changes.push(Change::FewerAllocations);
                }
            }
            (None, None) => {}
        }
        if changes.is_empty() {
            unchanged += 1;
            continue;
        }
        for c in &changes {
            *site_counts.entry(*c).or_default() += 1;
        }
        let weight = (sb.map_or(0.0, |s| s.bytes_per_process)
            - sa.map_or(0.0, |s| s.bytes_per_process))
        .abs()
        .max(1.0)
            * sa.or(sb)
                .map_or(1.0, |s| 1.0 + s.transfers_per_allocation.min(1.0));
        changed.push((weight, k.clone(), changes, sa, sb));
    }
    changed.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let sites: Vec<SiteDiff> = changed
        .into_iter()
        .take(options.top)
        .map(|(_, (key, offset), changes, a, b)| {
            let path = if a.is_some() {
                ia.path_of(&key)
            } else {
                ib.path_of(&key)
            };
            SiteDiff {
                site: profile_label(&mut names, a_profile, b_profile, &key, &path, offset),
                changes,
                a,
                b,
            }
        })
        .collect();

    // Tags.
    let mut tags = TagCounts::default();
    for (k, ea) in &ia.tags {
        match ib.tags.get(k) {
            None => tags.only_a += 1,
            Some(eb) => {
                tags.matched += 1;
                if ea.size != eb.size {
                    tags.resized += 1;
                }
                let per = |e: &ProfileEntry| {
                    e.transfers.transfers() as f64 / f64::from(e.instances.max(1))
                };
                let (x, y) = (per(ea), per(eb));
                let r = relative(x, y);
                if r > t && (y - x) >= 0.5 {
                    tags.hotter += 1;
                } else if r < -t && (x - y) >= 0.5 {
                    tags.colder += 1;
                }
            }
        }
    }
    tags.only_b = ib.tags.keys().filter(|k| !ia.tags.contains_key(*k)).count() as u64;

    // Pinning advice.
    let method = options.pin_method;
    let mut saving_a = 0.0;
    let mut confirmed_ns = 0.0;
    let (mut pinned_a, mut confirmed) = (0u64, 0u64);
    let mut lost: Vec<(f64, TagKey)> = Vec::new();
    for (k, ea) in &ia.tags {
        let da = decide(policy, ea, method);
        if !da.pin {
            continue;
        }
        pinned_a += 1;
        saving_a += da.net_ns();
        match ib.tags.get(k).map(|eb| decide(policy, eb, method)) {
            Some(db) if db.pin => {
                confirmed += 1;
                confirmed_ns += da.net_ns();
            }
            _ => lost.push((da.net_ns(), k.clone())),
        }
    }
    let mut missed: Vec<(f64, TagKey)> = Vec::new();
    let mut pinned_b = 0;
    for (k, eb) in &ib.tags {
        let db = decide(policy, eb, method);
        if !db.pin {
            continue;
        }
        pinned_b += 1;
        let a_pins = ia
            .tags
            .get(k)
            .is_some_and(|ea| decide(policy, ea, method).pin);
        if !a_pins {
            missed.push((db.net_ns(), k.clone()));
        }
    }
    let by_saving = |v: &mut Vec<(f64, TagKey)>| {
        v.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        v.truncate(options.top);
    };
    by_saving(&mut lost);
    by_saving(&mut missed);
    let mut tag_change = |k: &TagKey| {
        let ea = ia.tags.get(k).copied();
        let eb = ib.tags.get(k).copied();
        let path = if ea.is_some() {
            ia.path_of(&k.0)
        } else {
            ib.path_of(&k.0)
        };
        TagChange {
            site: profile_label(&mut names, a_profile, b_profile, &k.0, &path, k.1),
            call_no: k.2,
            size_a: ea.map(|e| e.size),
            size_b: eb.map(|e| e.size),
            net_a_ns: ea.map(|e| decide(policy, e, method).net_ns()),
            net_b_ns: eb.map(|e| decide(policy, e, method).net_ns()),
            verdict_b: match eb {
                None => "not in B".into(),
                Some(e) => {
                    let d = decide(policy, e, method);
                    if d.pin {
                        "pays back".into()
                    } else {
                        d.reason.to_string()
                    }
                }
            },
        }
    };
    let lost: Vec<TagChange> = lost.iter().map(|(_, k)| tag_change(k)).collect();
    let missed: Vec<TagChange> = missed.iter().map(|(_, k)| tag_change(k)).collect();
    let share = if saving_a > 0.0 {
        confirmed_ns / saving_a
    } else {
        1.0
    };
    let pinning = PinAgreement {
        pinned_a,
        saving_a_ns: saving_a,
        confirmed,
        confirmed_ns,
        share,
        pinned_b,
        lost,
        missed,
    };
    let verdict = verdict(&pinning, &module_changes, &tags);
    let _ = (ia.processes, ib.processes);
    DiffReport {
        format: crate::json::DIFF_FORMAT,
        version: crate::json::DIFF_VERSION,
        a: ia.side(a_info),
        b: ib.side(b_info),
        threshold: t,
        module_changes,
        site_counts,
        sites_unchanged: unchanged,
        sites,
        tags,
        pinning,
        verdict,
    }
}

fn verdict(p: &PinAgreement, modules: &[ModuleChange], tags: &TagCounts) -> String {
    let rebuilt = if modules.is_empty() {
        String::new()
    } else {
        format!(
            " {} module(s) changed identity (rebuilt?): their call sites cannot match; profile again.",
            modules.len()
        )
    };
    if tags.matched == 0 && (tags.only_a > 0 || tags.only_b > 0) {
        return format!("No allocation (call site and call number) in common: A and B are not the same program (or build).{rebuilt}");
    }
    if p.pinned_a == 0 {
        return format!(
            "A advises pinning nothing; B finds {} allocations worth pinning.{rebuilt}",
            count(p.pinned_b)
        );
    }
    let how = if p.share >= 0.9 {
        "still matches"
    } else if p.share >= 0.5 {
        "partly matches"
    } else {
        "no longer matches"
    };
    format!(
        "A's advice {how} B: {} of the {} allocations A would pin also pay back in B, {} of A's \
         estimated saving.{rebuilt}",
        count(p.confirmed),
        count(p.pinned_a),
        percent(p.share)
    )
}
