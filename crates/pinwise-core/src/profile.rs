//! Profiles: what the allocator needs from a past run.
//!
//! For every tag (call site + call number) of a recorded run: the allocation's size, its
//! transfers by direction (so the next run can predict them), its lifetime relative to the
//! start of its process; per call site, aggregates across call numbers (for allocations
//! the profile did not see, e.g. a longer run); and the module identities the sites refer
//! to, by key, so that a profile applies to any run of the same build whatever ASLR does.
//!
//! A profile is a JSON file (`"format": "pinwise-profile"`), written atomically.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::event::Direction;
use crate::format::{FormatError, FormatErrorKind};
use crate::history::{AllocKind, AllocState, MemHistory, TransferCounters};
use crate::tag::{ModuleTable, Tag};

/// The `format` field of a profile.
pub const PROFILE_FORMAT: &str = "pinwise-profile";
/// The profile version this build writes (it reads this one and version 1, which had no
/// `symbols`).
pub const PROFILE_VERSION: u64 = 2;

/// Transfers of one direction: how many, and the bytes they moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionTotals {
    /// Transfers.
    pub transfers: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Transfers by direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerDirection {
    /// Host to device.
    #[serde(rename = "HtoD")]
    pub htod: DirectionTotals,
    /// Device to host.
    #[serde(rename = "DtoH")]
    pub dtoh: DirectionTotals,
    /// Device to device (never attributed to host memory; kept for completeness).
    #[serde(rename = "DtoD")]
    pub dtod: DirectionTotals,
    /// Host to host.
    #[serde(rename = "HtoH")]
    pub htoh: DirectionTotals,
}

impl PerDirection {
    /// The totals of one direction.
    pub fn get(&self, d: Direction) -> &DirectionTotals {
        match d {
            Direction::HtoD => &self.htod,
            Direction::DtoH => &self.dtoh,
            Direction::DtoD => &self.dtod,
            Direction::HtoH => &self.htoh,
        }
    }

    /// The totals of one direction, to change.
    pub fn get_mut(&mut self, d: Direction) -> &mut DirectionTotals {
        match d {
            Direction::HtoD => &mut self.htod,
            Direction::DtoH => &mut self.dtoh,
            Direction::DtoD => &mut self.dtod,
            Direction::HtoH => &mut self.htoh,
        }
    }

    /// All transfers.
    pub fn transfers(&self) -> u64 {
        Direction::ALL
            .iter()
            .fold(0u64, |a, d| a.saturating_add(self.get(*d).transfers))
    }

    /// All bytes.
    pub fn bytes(&self) -> u64 {
        Direction::ALL
            .iter()
            .fold(0u64, |a, d| a.saturating_add(self.get(*d).bytes))
    }

    fn add(&mut self, c: &TransferCounters) {
        for d in Direction::ALL {
            let t = self.get_mut(d);
            let c = c.direction(d);
            t.transfers = t.transfers.saturating_add(c.transfers());
            t.bytes = t.bytes.saturating_add(c.bytes());
        }
    }
}

/// The name of one of a profile's sites, as the history it was made from stored it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSymbol {
    /// Index into [`Profile::modules`].
    pub module: u32,
    /// Offset of the site in the module.
    pub offset: u64,
    /// The function.
    pub function: String,
    /// The source file, when known.
    pub file: Option<String>,
    /// The line, when known.
    pub line: Option<u32>,
}

/// A module a profile's sites refer to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileModule {
    /// Identity key (`buildid:<hex>` or `path:<path>`): what lookups match on.
    pub key: String,
    /// Path when recorded (for people).
    pub path: String,
}

/// What a past run says about one tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileEntry {
    /// Index into [`Profile::modules`].
    pub module: u32,
    /// Offset of the call site in the module.
    pub offset: u64,
    /// Call number at the site.
    pub call_no: u32,
    /// Size (the largest, if processes differed).
    pub size: u64,
    /// Kind of memory it was.
    pub kind: AllocKind,
    /// Processes in which this tag occurred (totals below are over all of them).
    pub instances: u32,
    /// Transfers by direction, totals over the instances.
    pub transfers: PerDirection,
    /// When it was allocated, ns after its process's first event (earliest instance).
    pub start_ns: u64,
    /// When it ended, ns after its process's first event (latest instance); `None`: it
    /// lived until its process ended (or the trace did).
    pub end_ns: Option<u64>,
}

impl ProfileEntry {
    /// Predicted transfers per run in `direction` (total over instances / instances).
    pub fn predicted_transfers(&self, direction: Direction) -> f64 {
        self.transfers.get(direction).transfers as f64 / f64::from(self.instances.max(1))
    }

    /// Predicted bytes per run in `direction`.
    pub fn predicted_bytes(&self, direction: Direction) -> f64 {
        self.transfers.get(direction).bytes as f64 / f64::from(self.instances.max(1))
    }

    /// Lifetime in ns, if it ended.
    pub fn lifetime_ns(&self) -> Option<u64> {
        self.end_ns.map(|e| e.saturating_sub(self.start_ns))
    }
}

/// What a past run says about one call site, across call numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteProfile {
    /// Index into [`Profile::modules`].
    pub module: u32,
    /// Offset of the call site.
    pub offset: u64,
    /// Allocations made there (all processes).
    pub allocations: u64,
    /// Processes it allocated in.
    pub processes: u64,
    /// Of those allocations, how many had at least one transfer.
    pub transferred: u64,
    /// Mean allocation size.
    pub mean_size: u64,
    /// Largest allocation.
    pub max_size: u64,
    /// Highest call number.
    pub max_call_no: u32,
    /// Transfers by direction, totals.
    pub transfers: PerDirection,
}

impl SiteProfile {
    /// Mean transfers per allocation in `direction`.
    pub fn mean_transfers(&self, direction: Direction) -> f64 {
        if self.allocations == 0 {
            0.0
        } else {
            self.transfers.get(direction).transfers as f64 / self.allocations as f64
        }
    }

    /// Mean bytes per allocation in `direction`.
    pub fn mean_bytes(&self, direction: Direction) -> f64 {
        if self.allocations == 0 {
            0.0
        } else {
            self.transfers.get(direction).bytes as f64 / self.allocations as f64
        }
    }
}

/// A profile. Build one with [`Profile::from_history`], read one with [`Profile::load`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`PROFILE_FORMAT`].
    pub format: String,
    /// Always [`PROFILE_VERSION`].
    pub version: u64,
    /// Processes the run had.
    pub processes: u64,
    /// The modules sites refer to.
    pub modules: Vec<ProfileModule>,
    /// Per tag, ordered by (module, offset, call number).
    pub entries: Vec<ProfileEntry>,
    /// Per site, ordered by (module, offset).
    pub sites: Vec<SiteProfile>,
    /// Names of its sites (from the history's stored names), ordered by (module, offset).
    #[serde(default)]
    pub symbols: Vec<ProfileSymbol>,
    #[serde(skip)]
    index: ProfileIndex,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct ProfileIndex {
    modules: HashMap<String, u32>,
    entries: HashMap<(u32, u64, u32), usize>,
    sites: HashMap<(u32, u64), usize>,
}

impl Profile {
    /// Builds the profile of a recorded history: one entry per tag (allocations whose
    /// allocation was seen; implicit records have no tag to predict).
    pub fn from_history(history: &MemHistory) -> Profile {
        let table = history.modules();
        let mut modules: Vec<ProfileModule> = Vec::new();
        let mut module_index: HashMap<u32, u32> = HashMap::new();
        let mut module_of = |id: crate::tag::ModuleId| -> u32 {
            *module_index.entry(id.0).or_insert_with(|| {
                let identity = table
                    .get(id)
                    .unwrap_or_else(|| crate::tag::ModuleIdentity::from_path("?"));
                modules.push(ProfileModule {
                    key: identity.key(),
                    path: identity.path,
                });
                (modules.len() - 1) as u32
            })
        };
        let process_start: Vec<u64> = history.processes().map(|p| p.first_ts_ns).collect();
        let mut entries: HashMap<(u32, u64, u32), ProfileEntry> = HashMap::new();
        // Per site: the profile so far, its total size and the processes it allocated in.
        let mut sites: HashMap<(u32, u64), (SiteProfile, u64, Vec<u32>)> = HashMap::new();
        // One pass over the records: implicit records (call number 0) have no tag to
        // predict and are left out.
        for v in history.allocations() {
            let tag = v.tag();
            if tag.call_no == 0 {
                continue;
            }
            let module = module_of(tag.site.module);
            let process = v.process_index();
            let base = process_start[process as usize];
            let start_ns = v.alloc_ts_ns().saturating_sub(base);
            let end_ns = match v.state() {
                AllocState::Live | AllocState::Exited => None,
                AllocState::Freed | AllocState::Unmapped => v.end_ts_ns(),
                // The end was not seen: its last event is the latest we know it lived.
                AllocState::Replaced => Some(v.last_event_ts_ns()),
            }
            // Events can arrive out of order (a free seen on another CPU before the
            // allocation's return): a lifetime never ends before it starts.
            .map(|e| e.saturating_sub(base).max(start_ns));
            let counters = v.counters();
            let e = entries
                .entry((module, tag.site.offset, tag.call_no))
                .or_insert_with(|| ProfileEntry {
                    module,
                    offset: tag.site.offset,
                    call_no: tag.call_no,
                    size: 0,
                    kind: v.kind(),
                    instances: 0,
                    transfers: PerDirection::default(),
                    start_ns,
                    end_ns: Some(0),
                });
            e.instances += 1;
            e.size = e.size.max(v.size());
            e.transfers.add(&counters);
            e.start_ns = e.start_ns.min(start_ns);
            e.end_ns = match (e.end_ns, end_ns) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
            let (s, total_size, procs) =
                sites.entry((module, tag.site.offset)).or_insert_with(|| {
                    (
                        SiteProfile {
                            module,
                            offset: tag.site.offset,
                            allocations: 0,
                            processes: 0,
                            transferred: 0,
                            mean_size: 0,
                            max_size: 0,
                            max_call_no: 0,
                            transfers: PerDirection::default(),
                        },
                        0,
                        Vec::new(),
                    )
                });
            s.allocations += 1;
            s.transferred += u64::from(counters.transfers() > 0);
            s.max_size = s.max_size.max(v.size());
            s.max_call_no = s.max_call_no.max(tag.call_no);
            s.transfers.add(&counters);
            *total_size = total_size.saturating_add(v.size());
            if !procs.contains(&process) {
                procs.push(process);
            }
        }
        let mut entries: Vec<ProfileEntry> = entries.into_values().collect();
        entries.sort_by_key(|e| (e.module, e.offset, e.call_no));
        let mut sites: Vec<SiteProfile> = sites
            .into_values()
            .map(|(mut s, total_size, procs)| {
                s.mean_size = total_size / s.allocations.max(1);
                s.processes = procs.len() as u64;
                s
            })
            .collect();
        sites.sort_by_key(|s| (s.module, s.offset));
        let mut p = Profile {
            format: PROFILE_FORMAT.to_owned(),
            version: PROFILE_VERSION,
            processes: history.processes().count() as u64,
            modules,
            entries,
            sites,
            symbols: Vec::new(),
            index: ProfileIndex::default(),
        };
        p.build_index();
        p.add_symbols(history);
        p
    }

    /// Takes the names of its sites from `history` (the one it was made from, or the same
    /// run's history once names were stored in it); names it already has stay.
    pub fn add_symbols(&mut self, history: &MemHistory) {
        let table = history.modules();
        let mut have: std::collections::HashSet<(u32, u64)> =
            self.symbols.iter().map(|s| (s.module, s.offset)).collect();
        for (site, sym) in history.symbols() {
            let Some(identity) = table.get(site.module) else {
                continue;
            };
            let Some(&module) = self.index.modules.get(&identity.key()) else {
                continue;
            };
            if !self.index.sites.contains_key(&(module, site.offset))
                || !have.insert((module, site.offset))
            {
                continue;
            }
            self.symbols.push(ProfileSymbol {
                module,
                offset: site.offset,
                function: sym.function.clone(),
                file: sym.file.clone(),
                line: sym.line,
            });
        }
        self.symbols.sort_by_key(|s| (s.module, s.offset));
    }

    /// The stored name of the site at `offset` in the module with identity key `key`.
    pub fn symbol(&self, key: &str, offset: u64) -> Option<&ProfileSymbol> {
        let module = *self.index.modules.get(key)?;
        let i = self
            .symbols
            .binary_search_by_key(&(module, offset), |s| (s.module, s.offset))
            .ok()?;
        self.symbols.get(i)
    }

    /// A profile from its parts (checked as a loaded one is: module indices in range, no
    /// tag or site twice, lifetimes that end after they start).
    pub fn from_parts(
        processes: u64,
        modules: Vec<ProfileModule>,
        entries: Vec<ProfileEntry>,
        sites: Vec<SiteProfile>,
    ) -> Result<Profile, FormatError> {
        let mut p = Profile {
            format: PROFILE_FORMAT.to_owned(),
            version: PROFILE_VERSION,
            processes,
            modules,
            entries,
            sites,
            symbols: Vec::new(),
            index: ProfileIndex::default(),
        };
        p.validate()?;
        p.build_index();
        Ok(p)
    }

    fn build_index(&mut self) {
        self.index = ProfileIndex {
            modules: self
                .modules
                .iter()
                .enumerate()
                .map(|(i, m)| (m.key.clone(), i as u32))
                .collect(),
            entries: self
                .entries
                .iter()
                .enumerate()
                .map(|(i, e)| ((e.module, e.offset, e.call_no), i))
                .collect(),
            sites: self
                .sites
                .iter()
                .enumerate()
                .map(|(i, s)| ((s.module, s.offset), i))
                .collect(),
        };
    }

    /// The index of the module with this identity key, if the profile knows it.
    pub fn module_index(&self, key: &str) -> Option<u32> {
        self.index.modules.get(key).copied()
    }

    /// The entry for (module key, offset, call number).
    pub fn lookup(&self, module_key: &str, offset: u64, call_no: u32) -> Option<&ProfileEntry> {
        let m = self.module_index(module_key)?;
        self.lookup_in(m, offset, call_no)
    }

    /// The entry for (module index, offset, call number): no string hashing, for hot paths
    /// (resolve the module once with [`Profile::module_index`]).
    pub fn lookup_in(&self, module: u32, offset: u64, call_no: u32) -> Option<&ProfileEntry> {
        self.index
            .entries
            .get(&(module, offset, call_no))
            .map(|&i| &self.entries[i])
    }

    /// The entry for a tag of a live run, whose module ids refer to `modules`.
    pub fn lookup_tag(&self, tag: &Tag, modules: &ModuleTable) -> Option<&ProfileEntry> {
        let key = modules.get(tag.site.module)?.key();
        self.lookup(&key, tag.site.offset, tag.call_no)
    }

    /// The aggregate of a call site (module key, offset).
    pub fn lookup_site(&self, module_key: &str, offset: u64) -> Option<&SiteProfile> {
        let m = self.module_index(module_key)?;
        self.lookup_site_in(m, offset)
    }

    /// The aggregate of a call site (module index, offset).
    pub fn lookup_site_in(&self, module: u32, offset: u64) -> Option<&SiteProfile> {
        self.index
            .sites
            .get(&(module, offset))
            .map(|&i| &self.sites[i])
    }

    /// Writes the profile to `path` (JSON, atomically).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), FormatError> {
        self.save_with(path, crate::safe_file::Durability::Synced)
    }

    /// [`Profile::save`], synced to the disk or not as `durability` says.
    pub fn save_with(
        &self,
        path: impl AsRef<Path>,
        durability: crate::safe_file::Durability,
    ) -> Result<(), FormatError> {
        let path = path.as_ref();
        crate::safe_file::write_with_durability(path, durability, |w| {
            serde_json::to_writer(&mut *w, self).map_err(|e| FormatError::io(e.into()))?;
            w.write_all(b"\n").map_err(FormatError::io)
        })
        .map_err(|e| e.in_file(path))
    }

    /// The profile as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<Profile, FormatError> {
        let path = path.as_ref();
        let bytes = crate::format::read_checked(path).map_err(|e| e.in_file(path))?;
        Self::from_json_bytes(&bytes).map_err(|e| e.in_file(path))
    }

    /// Parses a profile.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Profile, FormatError> {
        #[derive(Deserialize)]
        struct Header {
            format: Option<String>,
            version: Option<u64>,
        }
        let json_error = |e: serde_path_to_error::Error<serde_json::Error>| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            FormatError::json(path, inner.line(), inner.column(), inner.to_string())
        };
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let header: Header = serde_path_to_error::deserialize(de).map_err(json_error)?;
        match header.format.as_deref() {
            Some(PROFILE_FORMAT) => {}
            Some(crate::format::JSON_FORMAT) => {
                return Err(FormatError::json(
                    "format",
                    0,
                    0,
                    "this is a history dump, not a profile (make one with `Profile::from_history`)",
                ))
            }
            other => {
                return Err(FormatError::json(
                    "format",
                    0,
                    0,
                    format!("expected \"{PROFILE_FORMAT}\", found {other:?}"),
                ))
            }
        }
        if !header
            .version
            .is_some_and(|v| (1..=PROFILE_VERSION).contains(&v))
        {
            return Err(FormatError::new(FormatErrorKind::UnsupportedVersion {
                format: "profile",
                found: header.version.unwrap_or(0),
                supported: PROFILE_VERSION,
            }));
        }
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let mut p: Profile = serde_path_to_error::deserialize(de).map_err(json_error)?;
        p.version = PROFILE_VERSION;
        p.symbols.sort_by_key(|s| (s.module, s.offset));
        p.validate()?;
        p.build_index();
        Ok(p)
    }

    fn validate(&self) -> Result<(), FormatError> {
        let n = self.modules.len() as u32;
        let bad = |path: String, m: String| FormatError::json(path, 0, 0, m);
        if let Some((i, s)) = self.symbols.iter().enumerate().find(|(_, s)| s.module >= n) {
            return Err(bad(
                format!("symbols[{i}].module"),
                format!("module {} but only {n} modules", s.module),
            ));
        }
        let mut seen_modules = HashMap::new();
        for (i, m) in self.modules.iter().enumerate() {
            if seen_modules.insert(m.key.as_str(), i).is_some() {
                return Err(bad(
                    format!("modules[{i}].key"),
                    format!("module \"{}\" listed twice", m.key),
                ));
            }
        }
        let mut seen = HashMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            if e.module >= n {
                return Err(bad(
                    format!("entries[{i}].module"),
                    format!("module {} but only {n} modules", e.module),
                ));
            }
            if e.instances == 0 {
                return Err(bad(
                    format!("entries[{i}].instances"),
                    "an entry has at least one instance".into(),
                ));
            }
            if let Some(end) = e.end_ns {
                if end < e.start_ns {
                    return Err(bad(
                        format!("entries[{i}].end_ns"),
                        "ends before it starts".into(),
                    ));
                }
            }
            if seen.insert((e.module, e.offset, e.call_no), i).is_some() {
                return Err(bad(
                    format!("entries[{i}]"),
                    "the same tag appears twice".into(),
                ));
            }
        }
        let mut seen_sites = HashMap::new();
        for (i, s) in self.sites.iter().enumerate() {
            if s.module >= n {
                return Err(bad(
                    format!("sites[{i}].module"),
                    format!("module {} but only {n} modules", s.module),
                ));
            }
            if seen_sites.insert((s.module, s.offset), i).is_some() {
                return Err(bad(
                    format!("sites[{i}]"),
                    "the same site appears twice".into(),
                ));
            }
        }
        Ok(())
    }
}
