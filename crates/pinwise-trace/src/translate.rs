//! From ring-buffer records to [`pinwise_core::Event`]s.
//!
//! The translator knows, per traced process, the host ranges it reported (CUDA pinned
//! allocations, registrations, large mmaps) and the device ranges CUDA handed out, so
//! that it can:
//! - tell the direction of a unified `cuMemcpy` (device range, else host range, else the
//!   process's maps: no mapping, a PROT_NONE reservation or `/dev/nvidia*` is device memory);
//! - report a registration of memory it never saw allocated as a `Registered` allocation
//!   (so it has a tag with a call number), and one of known memory as pinned pages of it;
//! - keep page faults only on tracked ranges;
//! - drop mmaps CUDA makes for itself (the stack passes through CUDA before any
//!   application frame).
//!
//! Kernel page-lock events from inside a CUDA allocation arrive before that allocation's
//! own event (which is sent when the call returns); they are held back and emitted after it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use pinwise_core::{
    Direction, Event, EventKind, Frame, HostMemKind, HostState, ModuleIdentity, ProbeKind, Site,
    StackId, StackTable,
};

use crate::async_dl::{AsyncDownloads, PendingDownload};
use crate::python::PythonProcess;
use crate::raw::{kinds, memtypes, py_status, site_sources, Header, PyStackRecord, RawEvent};
use crate::sites::{ExactAddr, SiteResolver};

/// What the tracer must do about a process, besides recording its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessNews {
    /// A traced process forked a child, now traced too.
    Forked {
        /// The parent.
        parent: u32,
        /// The child.
        child: u32,
    },
    /// A traced process called exec: its executable changed.
    Exec(u32),
    /// A traced process mapped an executable file: a library was loaded.
    LibraryMapped(u32),
    /// A traced process exited.
    Exited(u32),
    /// Node-wide mode: a process joined the traced set at its first CUDA call.
    Enrolled {
        /// The process.
        pid: u32,
        /// Its cgroup v2 id then (the inode number of its cgroup directory).
        cgroup_id: u64,
        /// Its command name then (NUL-padded).
        comm: [u8; 16],
    },
}

/// Counters of the translation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TranslateStats {
    /// Records translated.
    pub records: u64,
    /// CUDA allocations, registrations or device allocations that returned an error.
    pub failed_cuda_calls: u64,
    /// Anonymous mappings CUDA made for itself (not reported).
    pub cuda_internal_mmaps: u64,
    /// Page faults outside tracked ranges (not reported).
    pub faults_outside_tracked: u64,
    /// Kernel page locks that failed (status not NV_OK).
    pub failed_page_locks: u64,
    /// Host allocations whose call site lies outside the application (fallback used).
    pub sites_outside_application: u64,
    /// Host allocations with no call site at all.
    pub sites_unknown: u64,
    /// Unified copies whose direction was inferred from the process's maps.
    pub directions_from_maps: u64,
    /// Ranges pinned before the attach (see [`crate::preattach`]) that copies touched, and
    /// that were therefore reported as pinned allocations.
    pub preattach_pinned_reported: u64,
    /// Events that carried a user call chain from BPF (allocations, sampled copies).
    pub stacks_captured: u64,
    /// Frames of those chains that lay in no known module (dropped from the stack).
    pub frames_unplaced: u64,
    /// malloc-family blocks CUDA allocated for itself (not reported, nor their frees).
    pub cuda_internal_mallocs: u64,
    /// Allocation stacks unwound with `.eh_frame` (`--dwarf-stacks`).
    pub stacks_unwound: u64,
    /// Events of Python processes whose stacks got Python frames (see [`crate::python`]).
    pub python_stacks: u64,
    /// Python frames BPF captured that could not be named (the code object was gone or
    /// unreadable by the time the event was read).
    pub python_frames_unnamed: u64,
    /// Events of Python processes from threads without a Python thread state.
    pub python_no_thread: u64,
    /// Events of Python processes whose frames BPF could not read (see `pw_py_status`).
    pub python_failed: u64,
    /// Events whose Python stack was cut (more than 32 frames, or an unreadable frame).
    pub python_truncated: u64,
    /// Copies whose fingerprint lines, or whose every byte in full mode, BPF could not
    /// read (a page not present): not fingerprinted (their content is unknown, so never
    /// called redundant).
    pub fingerprint_reads_failed: u64,
    /// Copies that were to be hashed in full but were larger than the cap
    /// ([`crate::loader::BpfConfig::fingerprint_full_max_bytes`]): fingerprinted by their
    /// sampled lines only.
    pub fingerprint_full_over_cap: u64,
    /// Asynchronous downloads given their fingerprint late (once a call guaranteed they
    /// completed; see [`crate::async_dl`]) and compared by the history.
    pub async_downloads_fingerprinted: u64,
    /// Asynchronous downloads left unknown (see [`crate::async_dl`]): never called
    /// redundant; counted with the skipped copies.
    pub async_downloads_unknown: u64,
}

#[derive(Debug, Default)]
struct ProcessRanges {
    /// Host ranges reported: start -> end.
    host: BTreeMap<u64, u64>,
    /// Device ranges: start -> end.
    device: BTreeMap<u64, u64>,
    /// Ranges the driver had pinned before the attach, not reported yet: start -> end.
    preattach: BTreeMap<u64, u64>,
    /// malloc blocks CUDA made for itself (not reported): their frees are not either.
    cuda_mallocs: std::collections::HashSet<u64>,
    /// When the tracer attached (CLOCK_MONOTONIC ns), for the events of `preattach` ranges.
    attach_ts: u64,
}

/// The range of `ranges` that `addr` lies in.
fn range_of(ranges: &BTreeMap<u64, u64>, addr: u64) -> Option<(u64, u64)> {
    ranges
        .range(..=addr)
        .next_back()
        .filter(|(_, &end)| addr < end)
        .map(|(&s, &e)| (s, e))
}

fn contains(ranges: &BTreeMap<u64, u64>, addr: u64) -> bool {
    ranges
        .range(..=addr)
        .next_back()
        .is_some_and(|(_, &end)| addr < end)
}

fn remove_inside(ranges: &mut BTreeMap<u64, u64>, start: u64, end: u64) {
    let doomed: Vec<u64> = ranges
        .range(start..end)
        .filter(|(_, &e)| e <= end)
        .map(|(&s, _)| s)
        .collect();
    for s in doomed {
        ranges.remove(&s);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Host,
    Device,
}

/// Translates records into events. Owned by the tracer's event thread.
pub struct Translator {
    sites: SiteResolver,
    /// Where call chains are interned (none: chains are dropped).
    stacks: Option<Arc<StackTable>>,
    ranges: HashMap<u32, ProcessRanges>,
    /// Kernel page-lock events held until the CUDA call they happened in returns, by tid.
    held: HashMap<u32, Vec<Event>>,
    /// Traced processes running CPython, whose events carry Python frames.
    python: HashMap<u32, PythonProcess>,
    /// Python frames named ahead of their events' translation, by (tid, timestamp).
    python_named: HashMap<(u32, u64), Vec<pinwise_core::PyFrame>>,
    /// Registers and stack for the next allocation of a thread (`--dwarf-stacks`), by tid.
    pending_unwind: HashMap<u32, Box<crate::raw::UnwindRecord>>,
    unwinder: crate::unwind::StackUnwinder,
    /// Asynchronous downloads waiting for their late fingerprint.
    async_dls: AsyncDownloads,
    /// Late fingerprints ready for the history (see [`Translator::take_late`]).
    late: Vec<LateFingerprint>,
    stats: TranslateStats,
}

/// The fingerprint of an asynchronous download, known after its transfer event was made:
/// the history compares it with [`pinwise_core::MemHistory::observe_late_fingerprint`],
/// once every event translated before it was ingested.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LateFingerprint {
    /// The download.
    pub download: PendingDownload,
    /// Its host bytes' fingerprint.
    pub fingerprint: pinwise_core::fingerprint::Fingerprint,
}

impl Translator {
    /// A translator resolving call sites with `sites`.
    pub fn new(sites: SiteResolver) -> Self {
        Translator {
            sites,
            stacks: None,
            ranges: HashMap::new(),
            held: HashMap::new(),
            python: HashMap::new(),
            python_named: HashMap::new(),
            pending_unwind: HashMap::new(),
            unwinder: crate::unwind::StackUnwinder::default(),
            async_dls: AsyncDownloads::default(),
            late: Vec::new(),
            stats: TranslateStats::default(),
        }
    }

    /// The same translator, interning the call chains BPF captured into `stacks` (the
    /// history's stack table) and attaching them to their events.
    pub fn with_stacks(mut self, stacks: Arc<StackTable>) -> Self {
        self.stacks = Some(stacks);
        self
    }

    /// Process `pid` runs CPython: its events' Python frames are named from now on.
    pub fn set_python(&mut self, pid: u32, process: PythonProcess) {
        self.python.insert(pid, process);
    }

    /// Whether some traced process runs CPython.
    pub fn has_python(&self) -> bool {
        !self.python.is_empty()
    }

    /// The interpreter process `pid` runs, if known.
    pub fn python(&self, pid: u32) -> Option<&PythonProcess> {
        self.python.get(&pid)
    }

    /// Process `pid` no longer runs the interpreter it ran (exit, exec).
    pub fn forget_python(&mut self, pid: u32) {
        self.python.remove(&pid);
    }

    /// Names the Python frames of a batch of records before the batch is translated: the
    /// code objects are read as soon as possible after the events (an interpreter frees
    /// its code objects as it shuts down, and a process that exits takes them along), not
    /// after the slower work of translating the records before them.
    ///
    /// Returns the (process, code object) pairs of the events whose frames were all named:
    /// the code objects now remembered.
    pub fn name_python_frames<'r>(
        &mut self,
        records: impl IntoIterator<Item = &'r RawEvent>,
    ) -> Vec<(u32, u64)> {
        // Names of the batch before are all taken by now (a record that was not
        // translated, none should be, leaves nothing behind).
        self.python_named.clear();
        let mut named_codes = Vec::new();
        if self.python.is_empty() {
            return named_codes;
        }
        for raw in records {
            let (h, py) = match raw {
                RawEvent::CopyStack(c) => (&c.copy.h, &c.py),
                RawEvent::Range(r) => (&r.h, &r.py),
                _ => continue,
            };
            if py.nframes == 0 || !self.python.contains_key(&h.pid) {
                continue;
            }
            let named = self.python_frames(h.pid, h.tid, h.ts_ns, py);
            let n = (py.nframes as usize).min(py.frames.len());
            if named.len() == n {
                named_codes.extend(py.frames[..n].iter().map(|f| (h.pid, f.code)));
            }
            self.python_named.insert((h.tid, h.ts_ns), named);
        }
        named_codes.sort_unstable();
        named_codes.dedup();
        named_codes
    }

    /// The Python frames BPF captured with an event of `pid`, named now (the process is
    /// alive, or just exited: its code objects are read at once), or earlier by
    /// [`Translator::name_python_frames`].
    fn python_frames(
        &mut self,
        pid: u32,
        tid: u32,
        ts: u64,
        py: &PyStackRecord,
    ) -> Vec<pinwise_core::PyFrame> {
        if let Some(named) = self.python_named.remove(&(tid, ts)) {
            return named;
        }
        match py.status {
            s if s == py_status::NONE => return Vec::new(),
            s if s == py_status::NO_THREAD => {
                self.stats.python_no_thread += 1;
                return Vec::new();
            }
            s if s == py_status::FAILED => {
                self.stats.python_failed += 1;
                return Vec::new();
            }
            s if s == py_status::TRUNCATED => self.stats.python_truncated += 1,
            _ => {}
        }
        let Some(process) = self.python.get_mut(&pid) else {
            return Vec::new();
        };
        let frames = process.resolve(pid, py);
        let captured = (py.nframes as usize).min(py.frames.len());
        self.stats.python_frames_unnamed += (captured - frames.len().min(captured)) as u64;
        if !frames.is_empty() {
            self.stats.python_stacks += 1;
        }
        frames
    }

    /// A call chain from BPF (return addresses, innermost first) as an interned stack of
    /// sites; frames in no known module are left out. The event's call site, when the
    /// chain lacks it, goes in after the innermost frame: a chain captured at a function's
    /// entry (copies), or inside a wrapper that keeps no frame (libc's mmap), starts at the
    /// function and continues at its caller's caller, because the frame-pointer walk reads
    /// the caller's return address from a frame the callee has not made.
    ///
    /// Python frames captured with the event replace the interpreter's own native frames,
    /// as the preload's stacks have them ([`pinwise_core::stack::merge_python_frames`]).
    fn stack(
        &mut self,
        h: &Header,
        frames: &[u64],
        site: Option<Site>,
        py: &PyStackRecord,
    ) -> Option<StackId> {
        let table = self.stacks.clone()?;
        let pid = h.pid;
        let python = self.python_frames(pid, h.tid, h.ts_ns, py);
        if frames.is_empty() && python.is_empty() {
            return None;
        }
        self.stats.stacks_captured += 1;
        let mut out = Vec::with_capacity(frames.len());
        for &addr in frames.iter().take(pinwise_core::stack::MAX_FRAMES) {
            match self.sites.site(pid, addr) {
                Some(site) => out.push(Frame::Native(site)),
                None => self.stats.frames_unplaced += 1,
            }
        }
        if let Some(site) = site {
            let frame = Frame::Native(site);
            if !out.contains(&frame) {
                out.insert(out.len().min(1), frame);
                out.truncate(pinwise_core::stack::MAX_FRAMES);
            }
        }
        if !python.is_empty() {
            let text = self.python.get(&pid).map(|p| p.text);
            let interpreter = text.and_then(|t| self.sites.site(pid, t)).map(|s| s.module);
            let native: Vec<Site> = out.iter().filter_map(Frame::site).collect();
            out = pinwise_core::stack::merge_python_frames(native, python, |m| {
                interpreter.map(|i| i == m)
            });
        }
        table.intern(&out)
    }

    /// The call-site resolver.
    pub fn sites(&mut self) -> &mut SiteResolver {
        &mut self.sites
    }

    /// Counters so far.
    pub fn stats(&self) -> TranslateStats {
        let mut s = self.stats;
        s.async_downloads_unknown = self.async_dls.unknown();
        s
    }

    /// The late fingerprints translated since the last call. The caller gives them to the
    /// history after every event translated before them, and before any translated after
    /// them (it feeds the events first), then says how each went ([`Translator::late_applied`]).
    pub fn take_late(&mut self) -> Vec<LateFingerprint> {
        std::mem::take(&mut self.late)
    }

    /// Whether late fingerprints wait for [`Translator::take_late`].
    pub fn has_late(&self) -> bool {
        !self.late.is_empty()
    }

    /// Whether the history compared a late fingerprint (`false`: its host memory was gone
    /// or reused; the download is unknown).
    pub fn late_applied(&mut self, compared: bool) {
        if compared {
            self.stats.async_downloads_fingerprinted += 1;
        } else {
            self.async_dls.not_fingerprinted();
        }
    }

    /// Emits every held event (at the end of a trace).
    pub fn flush(&mut self, out: &mut Vec<Event>) {
        let mut held: Vec<Event> = self.held.drain().flat_map(|(_, v)| v).collect();
        held.sort_by_key(|e| e.ts_ns);
        out.extend(held);
        // Downloads whose completion was never seen.
        self.async_dls.give_up_all();
    }

    fn ranges(&mut self, pid: u32) -> &mut ProcessRanges {
        self.ranges.entry(pid).or_default()
    }

    /// Tells the translator which ranges of process `pid` the driver had pinned before the
    /// tracer attached at `attach_ts` (see [`crate::preattach`]). Each is reported as a
    /// pinned allocation (no call site) when a copy first touches it.
    pub fn learn_preattach(&mut self, pid: u32, pinned: &BTreeMap<u64, u64>, attach_ts: u64) {
        let r = self.ranges(pid);
        r.preattach.extend(pinned.iter().map(|(&s, &e)| (s, e)));
        r.attach_ts = attach_ts;
    }

    /// Reports the pre-attach pinned range `addr` lies in, if any and not reported yet.
    fn report_preattach(&mut self, pid: u32, tid: u32, addr: u64, out: &mut Vec<Event>) {
        let Some(r) = self.ranges.get_mut(&pid) else {
            return;
        };
        let Some((start, end)) = range_of(&r.preattach, addr) else {
            return;
        };
        if contains(&r.host, addr) {
            return;
        }
        r.preattach.remove(&start);
        r.host.insert(start, end);
        let attach_ts = r.attach_ts;
        self.stats.preattach_pinned_reported += 1;
        // Its allocation happened before the attach and was not seen: its call site is the
        // pseudo-module saying so. It is recorded with the probe kind of the call it stands
        // for (a uprobe on the driver's allocation entry point), at the attach time.
        let module = self.sites.modules().intern(&ModuleIdentity::from_path(
            crate::preattach::PREATTACH_MODULE,
        ));
        let e = Event::new(
            attach_ts,
            pid,
            tid,
            ProbeKind::Uprobe,
            EventKind::Alloc {
                start,
                size: end - start,
                kind: HostMemKind::PinnedAlloc,
                flags: 0,
            },
        );
        out.push(e.with_site(Site { module, offset: 0 }));
    }

    /// Translates one record, appending its events to `out`; returns what the tracer must
    /// do about the process, if anything.
    pub fn translate(&mut self, raw: &RawEvent, out: &mut Vec<Event>) -> Option<ProcessNews> {
        self.stats.records += 1;
        let h = *raw.header();
        let (pid, tid, ts) = (h.pid, h.tid, h.ts_ns);
        let is_range = matches!(raw, RawEvent::Range(_));
        // Held page locks of this thread go out after its next range event, or before any
        // other event of it.
        if !is_range && !matches!(raw, RawEvent::Pin(_)) {
            if let Some(held) = self.held.remove(&tid) {
                out.extend(held);
            }
        }
        let news = match raw {
            RawEvent::Copy(c) => {
                self.copy(c, None, None, out);
                None
            }
            RawEvent::CopyStack(c) => {
                let n = (c.nframes as usize).min(c.frames.len());
                let site = self.sites.site(pid, c.copy.call_site);
                let stack = self.stack(&c.copy.h, &c.frames[..n], site, &c.py);
                self.copy(&c.copy, stack, Some(&c.fp), out);
                None
            }
            RawEvent::CopyFp(c) => {
                self.copy(&c.copy, None, Some(&c.fp), out);
                None
            }
            RawEvent::LateFp(l) => {
                self.late_fp(l);
                None
            }
            RawEvent::Unwind(u) => {
                self.pending_unwind.insert(tid, u.clone());
                None
            }
            RawEvent::Range(r) => {
                self.range(r, out);
                if let Some(held) = self.held.remove(&tid) {
                    out.extend(held);
                }
                None
            }
            RawEvent::Release(r) => {
                let base = Event::new(
                    ts,
                    pid,
                    tid,
                    ProbeKind::Uprobe,
                    EventKind::Free { start: r.addr },
                );
                match h.kind {
                    kinds::MALLOC_FREE => {
                        if let Some(ranges) = self.ranges.get_mut(&pid) {
                            if ranges.cuda_mallocs.remove(&r.addr) {
                                return None;
                            }
                            ranges.host.remove(&r.addr);
                        }
                        let site = self.sites.site(pid, r.call_site);
                        out.push(with_site(base, site));
                    }
                    kinds::HOST_FREE => {
                        if let Some(ranges) = self.ranges.get_mut(&pid) {
                            ranges.host.remove(&r.addr);
                            ranges.preattach.remove(&r.addr);
                        }
                        let site = self.sites.site(pid, r.call_site);
                        out.push(with_site(base, site));
                    }
                    kinds::HOST_UNREGISTER => {
                        let site = self.sites.site(pid, r.call_site);
                        let unpin = EventKind::UnpinPages {
                            start: r.addr,
                            pages: None,
                        };
                        out.push(with_site(
                            Event {
                                kind: unpin,
                                ..base
                            },
                            site,
                        ));
                    }
                    kinds::DEV_FREE => {
                        if let Some(ranges) = self.ranges.get_mut(&pid) {
                            ranges.device.remove(&r.addr);
                        }
                    }
                    kinds::MUNMAP => {
                        let end = r.addr.saturating_add(r.len);
                        if let Some(ranges) = self.ranges.get_mut(&pid) {
                            remove_inside(&mut ranges.host, r.addr, end);
                            remove_inside(&mut ranges.preattach, r.addr, end);
                        }
                        out.push(Event {
                            probe: ProbeKind::Tracepoint,
                            kind: EventKind::Munmap {
                                start: r.addr,
                                len: r.len,
                            },
                            ..base
                        });
                    }
                    _ => {}
                }
                None
            }
            RawEvent::Pin(p) => {
                if h.kind == kinds::PIN_PAGES && p.status != 0 {
                    self.stats.failed_page_locks += 1;
                    return None;
                }
                let kind = if h.kind == kinds::PIN_PAGES {
                    EventKind::PinPages {
                        start: p.addr,
                        bytes: p.pages.saturating_mul(pinwise_core::history::PAGE_SIZE),
                        pages: Some(p.pages),
                    }
                } else {
                    EventKind::UnpinPages {
                        start: p.addr,
                        pages: Some(p.pages),
                    }
                };
                let e = Event::new(ts, pid, tid, ProbeKind::KernelHook, kind);
                if p.in_cuda_call != 0 {
                    self.held.entry(tid).or_default().push(e);
                } else {
                    out.push(e);
                }
                None
            }
            RawEvent::Fault(f) => {
                let tracked = self
                    .ranges
                    .get(&pid)
                    .is_some_and(|r| contains(&r.host, f.addr));
                if tracked {
                    out.push(Event::new(
                        ts,
                        pid,
                        tid,
                        ProbeKind::Tracepoint,
                        EventKind::PageFault { addr: f.addr },
                    ));
                } else {
                    self.stats.faults_outside_tracked += 1;
                }
                None
            }
            RawEvent::Proc(p) => match h.kind {
                kinds::PROC_FORK => {
                    // The child runs the parent's interpreter at the same addresses (BPF
                    // gave it the parent's entry): its events, perhaps in this very batch,
                    // have Python frames to name.
                    if let Some(py) = self.python.get(&pid).map(PythonProcess::forked) {
                        self.python.insert(p.child, py);
                    }
                    // The child starts with a copy of the parent's address space.
                    if let Some(parent) = self.ranges.get(&pid) {
                        let copy = ProcessRanges {
                            host: parent.host.clone(),
                            device: parent.device.clone(),
                            preattach: parent.preattach.clone(),
                            cuda_mallocs: parent.cuda_mallocs.clone(),
                            attach_ts: parent.attach_ts,
                        };
                        self.ranges.insert(p.child, copy);
                    }
                    Some(ProcessNews::Forked {
                        parent: pid,
                        child: p.child,
                    })
                }
                kinds::PROC_EXEC => {
                    // A new address space: read it now, while the process surely lives.
                    self.ranges.remove(&pid);
                    self.async_dls.process_ended(pid);
                    self.sites.forget(pid);
                    self.sites.refresh(pid);
                    Some(ProcessNews::Exec(pid))
                }
                kinds::EXEC_MAP => {
                    self.sites.mark_stale(pid);
                    Some(ProcessNews::LibraryMapped(pid))
                }
                kinds::PROC_EXIT => {
                    self.ranges.remove(&pid);
                    self.async_dls.process_ended(pid);
                    self.unwinder.forget(pid);
                    Some(ProcessNews::Exited(pid))
                }
                kinds::PROC_ENROLL => Some(ProcessNews::Enrolled {
                    pid,
                    cgroup_id: p.cgroup_id,
                    comm: p.comm,
                }),
                _ => None,
            },
        };
        news
    }

    fn side(&mut self, pid: u32, addr: u64, memtype: u8) -> Side {
        match memtype {
            memtypes::HOST => return Side::Host,
            memtypes::DEVICE | memtypes::ARRAY => return Side::Device,
            _ => {}
        }
        if let Some(r) = self.ranges.get(&pid) {
            if contains(&r.device, addr) {
                return Side::Device;
            }
            if contains(&r.host, addr) || contains(&r.preattach, addr) {
                return Side::Host;
            }
        }
        self.stats.directions_from_maps += 1;
        match self.sites.mapping_of(pid, addr) {
            None => Side::Device,
            Some(m) => {
                let device_file = m
                    .path
                    .as_deref()
                    .is_some_and(|p| p.starts_with("/dev/nvidia"));
                if device_file || (!m.read && !m.write) {
                    Side::Device
                } else {
                    Side::Host
                }
            }
        }
    }

    fn copy(
        &mut self,
        c: &crate::raw::CopyRecord,
        stack: Option<StackId>,
        fp: Option<&crate::raw::FpRecord>,
        out: &mut Vec<Event>,
    ) {
        let pid = c.h.pid;
        let src = self.side(pid, c.src, c.src_type);
        let dst = self.side(pid, c.dst, c.dst_type);
        let (direction, host, device) = match (src, dst) {
            (Side::Host, Side::Device) => (Direction::HtoD, c.src, c.dst),
            (Side::Device, Side::Host) => (Direction::DtoH, c.dst, c.src),
            (Side::Device, Side::Device) => (Direction::DtoD, 0, c.dst),
            (Side::Host, Side::Host) => (Direction::HtoH, c.src, 0),
        };
        if host != 0 {
            self.report_preattach(pid, c.h.tid, host, out);
        }
        // Pending asynchronous downloads this copy touches are unknown from now on.
        self.async_dls.touch(pid, host, device, c.bytes);
        let mut e = Event::new(
            c.h.ts_ns,
            pid,
            c.h.tid,
            ProbeKind::Uprobe,
            EventKind::Transfer {
                direction,
                host,
                device,
                bytes: c.bytes,
                is_async: c.is_async != 0,
                stream: c.stream,
                host_state: HostState::Unknown,
            },
        );
        if let Some(site) = self.sites.site(pid, c.call_site) {
            e = e.with_site(site);
        }
        if let Some(stack) = stack {
            e = e.with_stack(stack);
        }
        match fp {
            // The lines of the host side: an upload's source, read at its entry, or a
            // synchronous download's destination, read at its return; and every byte of it
            // when BPF hashed it in full.
            Some(f) if f.state == 1 && matches!(direction, Direction::HtoD | Direction::DtoH) => {
                match f.full_state {
                    FULL_FAILED => self.stats.fingerprint_reads_failed += 1,
                    state => {
                        if state == FULL_OVER_CAP {
                            self.stats.fingerprint_full_over_cap += 1;
                        }
                        let mut fingerprint = fingerprint_of(c.bytes, &f.lines);
                        fingerprint.full = (state == FULL_DONE).then_some(f.full);
                        e = e.with_fingerprint(fingerprint);
                    }
                }
            }
            Some(f) if f.state == 2 => self.stats.fingerprint_reads_failed += 1,
            Some(f) if f.state == FP_PENDING && direction == Direction::DtoH => {
                self.async_dls.start(
                    c.h.tid,
                    PendingDownload {
                        pid,
                        host,
                        device,
                        bytes: c.bytes,
                        ts: c.h.ts_ns,
                    },
                );
            }
            Some(f) if f.state == FP_PENDING || f.state == FP_UNTRACKED => {
                self.async_dls.untracked()
            }
            _ => {}
        }
        out.push(e);
    }

    /// The late fingerprint of an asynchronous download (see [`crate::async_dl`]).
    fn late_fp(&mut self, l: &crate::raw::LateFpRecord) {
        let Some(download) = self.async_dls.finish(l.copy_tid, l.copy_ts_ns) else {
            return;
        };
        let f = &l.fp;
        if f.state != 1 || f.full_state == FULL_FAILED {
            self.async_dls.not_fingerprinted();
            return;
        }
        if f.full_state == FULL_OVER_CAP {
            self.stats.fingerprint_full_over_cap += 1;
        }
        let mut fingerprint = fingerprint_of(download.bytes, &f.lines);
        fingerprint.full = (f.full_state == FULL_DONE).then_some(f.full);
        self.late.push(LateFingerprint {
            download,
            fingerprint,
        });
    }

    /// The call chain unwound with `.eh_frame` from the registers and stack BPF sent just
    /// before allocation record `r` (`--dwarf-stacks`), when it did.
    fn unwound(&mut self, r: &crate::raw::RangeRecord) -> Option<Vec<u64>> {
        let u = self.pending_unwind.remove(&r.h.tid)?;
        if u.sp != r.stack_sp || u.h.pid != r.h.pid {
            return None;
        }
        let len = (u.len as usize).min(u.stack.len());
        let (unwinder, sites) = (&mut self.unwinder, &mut self.sites);
        let frames = unwinder.unwind(r.h.pid, u.ip, u.sp, u.bp, &u.stack[..len], |a| {
            sites
                .mapping_of(r.h.pid, a)
                .filter(|m| m.exec && m.is_file())
        });
        self.stats.stacks_unwound += 1;
        Some(frames)
    }

    /// The application's call site of a range event.
    fn range_site(&mut self, r: &crate::raw::RangeRecord) -> (Option<Site>, bool) {
        let exact = if r.site_source == site_sources::NONE || r.call_site == 0 {
            None
        } else {
            Some(ExactAddr {
                addr: r.call_site,
                file: (r.site_ino != 0).then_some((r.site_dev, r.site_ino)),
                offset: r.site_offset,
            })
        };
        let len = (r.stack_len as usize).min(r.stack.len());
        let choice = self
            .sites
            .choose(r.h.pid, exact.as_slice(), &r.stack[..len]);
        if choice.site.is_none() {
            self.stats.sites_unknown += 1;
        } else if !choice.in_application && r.site_source != site_sources::RUNTIME {
            self.stats.sites_outside_application += 1;
        }
        (choice.site, choice.through_cuda)
    }

    fn range(&mut self, r: &crate::raw::RangeRecord, out: &mut Vec<Event>) {
        let (pid, tid, ts) = (r.h.pid, r.h.tid, r.h.ts_ns);
        let stack_of = |t: &mut Self, site: Option<Site>| {
            let n = (r.nframes as usize).min(r.frames.len());
            t.stack(&r.h, &r.frames[..n], site, &r.py)
        };
        let end = r.addr.saturating_add(r.len);
        let ev = |kind: EventKind| Event::new(ts, pid, tid, ProbeKind::Uprobe, kind);
        match r.h.kind {
            kinds::DEV_ALLOC => {
                if r.result != 0 || r.addr == 0 {
                    self.stats.failed_cuda_calls += 1;
                    return;
                }
                self.ranges(pid).device.insert(r.addr, end);
            }
            kinds::HOST_ALLOC => {
                if r.result != 0 || r.addr == 0 {
                    self.stats.failed_cuda_calls += 1;
                    return;
                }
                let (site, _) = self.range_site(r);
                let stack = stack_of(self, site);
                self.ranges(pid).host.insert(r.addr, end);
                let e = ev(EventKind::Alloc {
                    start: r.addr,
                    size: r.len,
                    kind: HostMemKind::PinnedAlloc,
                    flags: r.flags,
                });
                out.push(with_stack(with_site(e, site), stack));
            }
            kinds::HOST_REGISTER => {
                if r.result != 0 {
                    self.stats.failed_cuda_calls += 1;
                    return;
                }
                let (site, _) = self.range_site(r);
                let known = self
                    .ranges
                    .get(&pid)
                    .is_some_and(|rs| contains(&rs.host, r.addr));
                if !known {
                    let stack = stack_of(self, site);
                    self.ranges(pid).host.insert(r.addr, end);
                    out.push(with_stack(
                        with_site(
                            ev(EventKind::Alloc {
                                start: r.addr,
                                size: r.len,
                                kind: HostMemKind::Registered,
                                flags: r.flags,
                            }),
                            site,
                        ),
                        stack,
                    ));
                }
                out.push(with_site(
                    ev(EventKind::PinPages {
                        start: r.addr,
                        bytes: r.len,
                        pages: None,
                    }),
                    site,
                ));
            }
            kinds::MALLOC => {
                let (site, through_cuda) = self.range_site(r);
                if through_cuda {
                    self.stats.cuda_internal_mallocs += 1;
                    self.ranges(pid).cuda_mallocs.insert(r.addr);
                    return;
                }
                let stack = match self.unwound(r) {
                    Some(frames) => self.stack(&r.h, &frames, site, &r.py),
                    None => stack_of(self, site),
                };
                let r_host = self.ranges(pid);
                r_host.cuda_mallocs.remove(&r.addr);
                r_host.host.insert(r.addr, end);
                out.push(with_stack(
                    with_site(
                        ev(EventKind::Alloc {
                            start: r.addr,
                            size: r.len,
                            kind: HostMemKind::Pageable,
                            flags: 0,
                        }),
                        site,
                    ),
                    stack,
                ));
            }
            kinds::MMAP => {
                let (site, through_cuda) = self.range_site(r);
                if through_cuda {
                    self.stats.cuda_internal_mmaps += 1;
                    return;
                }
                let stack = stack_of(self, site);
                self.ranges(pid).host.insert(r.addr, end);
                let tp = |kind| Event::new(ts, pid, tid, ProbeKind::Tracepoint, kind);
                out.push(with_stack(
                    with_site(
                        tp(EventKind::Alloc {
                            start: r.addr,
                            size: r.len,
                            kind: HostMemKind::Pageable,
                            flags: 0,
                        }),
                        site,
                    ),
                    stack,
                ));
                out.push(with_site(
                    tp(EventKind::Mmap {
                        start: r.addr,
                        len: r.len,
                    }),
                    site,
                ));
            }
            _ => {}
        }
    }
}

/// `pw_fp.state` (pinwise_events.h): an asynchronous download remembered until it completes.
const FP_PENDING: u32 = 3;
/// `pw_fp.state`: an asynchronous download that could not be remembered (unknown).
const FP_UNTRACKED: u32 = 4;
/// `pw_fp.full_state` (pinwise_events.h): BPF hashed every byte into `pw_fp.full`.
const FULL_DONE: u32 = 1;
/// `pw_fp.full_state`: a chunk of the full hash could not be read; the content is unknown.
const FULL_FAILED: u32 = 2;
/// `pw_fp.full_state`: the copy was above the full-hash cap; sampled lines only.
const FULL_OVER_CAP: u32 = 3;

/// The sampled fingerprint of a `bytes`-byte copy from the lines BPF read (see `struct
/// pw_fp`): the same value `pinwise_core::fingerprint::sampled` gives for the buffer.
pub fn fingerprint_of(bytes: u64, lines: &[u8]) -> pinwise_core::fingerprint::Fingerprint {
    use pinwise_core::fingerprint::{hash_samples, line_len, SAMPLE_BYTES, SAMPLE_LINES};
    let l = line_len(bytes) as usize;
    let sampled = if l < pinwise_core::fingerprint::LINE as usize {
        // One short line, read once: the sampled form repeats it for every line.
        let mut buf = [0u8; SAMPLE_BYTES];
        for i in 0..SAMPLE_LINES {
            buf[i * l..(i + 1) * l].copy_from_slice(&lines[..l]);
        }
        hash_samples(bytes, &buf[..SAMPLE_LINES * l])
    } else {
        hash_samples(bytes, &lines[..SAMPLE_BYTES])
    };
    pinwise_core::fingerprint::Fingerprint {
        sampled,
        full: None,
    }
}

fn with_site(e: Event, site: Option<Site>) -> Event {
    match site {
        Some(s) => e.with_site(s),
        None => e,
    }
}

fn with_stack(e: Event, stack: Option<StackId>) -> Event {
    match stack {
        Some(s) => e.with_stack(s),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{CopyRecord, Header, PinRecord, ProcRecord, RangeRecord, ReleaseRecord};
    use pinwise_core::ModuleTable;

    fn translator() -> Translator {
        Translator::new(SiteResolver::new(ModuleTable::shared()))
    }

    // A pid with no /proc entry: nothing resolves through maps, which the tests rely on.
    const PID: u32 = u32::MAX - 7;

    fn header(kind: u16, ts: u64) -> Header {
        Header {
            ts_ns: ts,
            pid: PID,
            tid: PID,
            kind,
            ..Header::default()
        }
    }

    fn range(kind: u16, ts: u64, addr: u64, len: u64) -> RawEvent {
        RawEvent::Range(Box::new(RangeRecord {
            h: header(kind, ts),
            addr,
            len,
            ..RangeRecord::default()
        }))
    }

    fn copy(ts: u64, dst: u64, src: u64, dst_type: u8, src_type: u8) -> RawEvent {
        RawEvent::Copy(CopyRecord {
            h: header(kinds::COPY, ts),
            dst,
            src,
            bytes: 64,
            dst_type,
            src_type,
            ..CopyRecord::default()
        })
    }

    fn direction(e: &Event) -> Direction {
        match e.kind {
            EventKind::Transfer { direction, .. } => direction,
            other => panic!("not a transfer: {other:?}"),
        }
    }

    #[test]
    fn fingerprints_from_bpf_lines_equal_the_in_process_ones() {
        use pinwise_core::fingerprint::{sample_offsets, sampled, LINE};
        for len in [1usize, 10, 63, 64, 65, 300, 4096, 1 << 20] {
            let buf: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            // What read_fp in pinwise.bpf.c leaves in pw_fp.lines.
            let mut lines = [0u8; 512];
            if (len as u64) < LINE {
                lines[..len].copy_from_slice(&buf);
            } else {
                for (i, off) in sample_offsets(len as u64).iter().enumerate() {
                    let off = *off as usize;
                    lines[i * 64..(i + 1) * 64].copy_from_slice(&buf[off..off + 64]);
                }
            }
            let fp = fingerprint_of(len as u64, &lines);
            assert_eq!(fp.sampled, sampled(&buf), "len {len}");
            assert_eq!(fp.full, None);
        }
    }

    #[test]
    fn infers_the_direction_of_unified_copies_from_known_ranges() {
        let mut t = translator();
        let mut out = Vec::new();
        t.translate(&range(kinds::DEV_ALLOC, 1, 0xd000, 0x1000), &mut out);
        t.translate(&range(kinds::HOST_ALLOC, 2, 0x5000, 0x1000), &mut out);
        assert_eq!(out.len(), 1, "device allocations are not history events");
        out.clear();
        let u = memtypes::UNIFIED;
        t.translate(&copy(3, 0xd010, 0x5010, u, u), &mut out);
        t.translate(&copy(4, 0x5020, 0xd020, u, u), &mut out);
        t.translate(&copy(5, 0xd100, 0xd200, u, u), &mut out);
        t.translate(&copy(6, 0x5100, 0x5200, u, u), &mut out);
        let dirs: Vec<Direction> = out.iter().map(direction).collect();
        assert_eq!(
            dirs,
            [
                Direction::HtoD,
                Direction::DtoH,
                Direction::DtoD,
                Direction::HtoH
            ]
        );
        match out[0].kind {
            EventKind::Transfer { host, device, .. } => {
                assert_eq!((host, device), (0x5010, 0xd010))
            }
            _ => unreachable!(),
        }
        // After the device free, the address is no longer known as device memory; with no
        // maps for this pid it is taken as device memory (no host mapping there).
        out.clear();
        t.translate(
            &RawEvent::Release(ReleaseRecord {
                h: header(kinds::DEV_FREE, 7),
                addr: 0xd000,
                ..ReleaseRecord::default()
            }),
            &mut out,
        );
        t.translate(&copy(8, 0x5000, 0xd000, u, u), &mut out);
        assert_eq!(direction(&out[0]), Direction::DtoH);
        assert_eq!(t.stats().directions_from_maps, 1);
    }

    #[test]
    fn explicit_copy_forms_keep_their_direction() {
        let mut t = translator();
        let mut out = Vec::new();
        t.translate(
            &copy(1, 0xd000, 0x5000, memtypes::DEVICE, memtypes::HOST),
            &mut out,
        );
        t.translate(
            &copy(2, 0x5000, 0, memtypes::HOST, memtypes::ARRAY),
            &mut out,
        );
        assert_eq!(direction(&out[0]), Direction::HtoD);
        assert_eq!(direction(&out[1]), Direction::DtoH);
    }

    #[test]
    fn registration_of_unknown_memory_becomes_a_registered_allocation() {
        let mut t = translator();
        let mut out = Vec::new();
        t.translate(&range(kinds::HOST_REGISTER, 1, 0x9000, 0x2000), &mut out);
        assert!(matches!(
            out[0].kind,
            EventKind::Alloc {
                kind: HostMemKind::Registered,
                start: 0x9000,
                size: 0x2000,
                ..
            }
        ));
        assert!(matches!(
            out[1].kind,
            EventKind::PinPages {
                start: 0x9000,
                bytes: 0x2000,
                ..
            }
        ));
        // Registering part of it again only pins.
        out.clear();
        t.translate(&range(kinds::HOST_REGISTER, 2, 0x9000, 0x1000), &mut out);
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0].kind, EventKind::PinPages { .. }));
    }

    #[test]
    fn failed_calls_are_counted_not_reported() {
        let mut t = translator();
        let mut out = Vec::new();
        let mut r = RangeRecord {
            h: header(kinds::HOST_ALLOC, 1),
            addr: 0,
            len: 4096,
            result: 2,
            ..RangeRecord::default()
        };
        t.translate(&RawEvent::Range(Box::new(r)), &mut out);
        r.h.kind = kinds::HOST_REGISTER;
        t.translate(&RawEvent::Range(Box::new(r)), &mut out);
        assert!(out.is_empty());
        assert_eq!(t.stats().failed_cuda_calls, 2);
    }

    #[test]
    fn page_locks_inside_a_cuda_call_follow_its_allocation() {
        let mut t = translator();
        let mut out = Vec::new();
        let lock = RawEvent::Pin(PinRecord {
            h: header(kinds::PIN_PAGES, 1),
            addr: 0x7000,
            pages: 2,
            in_cuda_call: 1,
            ..PinRecord::default()
        });
        t.translate(&lock, &mut out);
        assert!(out.is_empty(), "held until the allocation is reported");
        t.translate(&range(kinds::HOST_ALLOC, 2, 0x7000, 0x2000), &mut out);
        assert!(matches!(out[0].kind, EventKind::Alloc { .. }));
        assert!(matches!(
            out[1].kind,
            EventKind::PinPages {
                start: 0x7000,
                bytes: 8192,
                pages: Some(2)
            }
        ));
        assert_eq!(out[1].probe, ProbeKind::KernelHook);
        // A held lock with no allocation after it comes out at the end.
        out.clear();
        t.translate(&lock, &mut out);
        t.flush(&mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn mmaps_become_pageable_allocations_and_munmaps_end_them() {
        let mut t = translator();
        let mut out = Vec::new();
        t.translate(&range(kinds::MMAP, 1, 0x10_0000, 0x40_0000), &mut out);
        assert!(matches!(
            out[0].kind,
            EventKind::Alloc {
                kind: HostMemKind::Pageable,
                ..
            }
        ));
        assert!(matches!(out[1].kind, EventKind::Mmap { .. }));
        assert_eq!(out[0].probe, ProbeKind::Tracepoint);
        out.clear();
        // A unified copy from inside it is host to device.
        t.translate(&range(kinds::DEV_ALLOC, 2, 0xd000, 0x1000), &mut out);
        let u = memtypes::UNIFIED;
        t.translate(&copy(3, 0xd000, 0x10_1000, u, u), &mut out);
        assert_eq!(direction(&out[0]), Direction::HtoD);
        t.translate(
            &RawEvent::Release(ReleaseRecord {
                h: header(kinds::MUNMAP, 4),
                addr: 0x10_0000,
                len: 0x40_0000,
                ..ReleaseRecord::default()
            }),
            &mut out,
        );
        assert!(matches!(out.last().unwrap().kind, EventKind::Munmap { .. }));
        assert!(t.ranges.get(&PID).unwrap().host.is_empty());
    }

    #[test]
    fn ranges_pinned_before_the_attach_become_pinned_allocations_when_copied() {
        let mut t = translator();
        let mut out = Vec::new();
        let pinned: BTreeMap<u64, u64> = [(0x40_0000, 0x60_0000), (0x80_0000, 0x90_0000)].into();
        t.learn_preattach(PID, &pinned, 5);
        t.translate(&range(kinds::DEV_ALLOC, 10, 0xd000, 0x1000), &mut out);
        // A unified copy from inside the first range is host to device, and the range is
        // reported first, as a pinned allocation at the attach time, without a site.
        let u = memtypes::UNIFIED;
        t.translate(&copy(11, 0xd000, 0x40_1000, u, u), &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].ts_ns, 5);
        let site = out[0].site.expect("a pseudo site");
        assert_eq!(site.offset, 0);
        assert_eq!(
            t.sites().modules().get(site.module).unwrap().path,
            crate::preattach::PREATTACH_MODULE
        );
        assert!(matches!(
            out[0].kind,
            EventKind::Alloc {
                start: 0x40_0000,
                size: 0x20_0000,
                kind: HostMemKind::PinnedAlloc,
                ..
            }
        ));
        assert_eq!(direction(&out[1]), Direction::HtoD);
        // Only once.
        out.clear();
        t.translate(
            &copy(12, 0x40_2000, 0xd000, memtypes::HOST, memtypes::DEVICE),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(t.stats().preattach_pinned_reported, 1);
        // A range freed before any copy is never reported; a copy of its addresses later
        // is of unknown memory.
        t.translate(
            &RawEvent::Release(ReleaseRecord {
                h: header(kinds::HOST_FREE, 13),
                addr: 0x80_0000,
                ..ReleaseRecord::default()
            }),
            &mut out,
        );
        out.clear();
        t.translate(
            &copy(14, 0xd000, 0x80_0000, memtypes::DEVICE, memtypes::HOST),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0].kind, EventKind::Transfer { .. }));
        assert_eq!(t.stats().preattach_pinned_reported, 1);
    }

    #[inline(never)]
    fn frame_a() -> u64 {
        std::hint::black_box(1)
    }
    #[inline(never)]
    fn frame_b() -> u64 {
        std::hint::black_box(2)
    }
    #[inline(never)]
    fn frame_c() -> u64 {
        std::hint::black_box(3)
    }

    #[test]
    fn sampled_copy_chains_become_stacks_with_the_call_site_after_the_innermost_frame() {
        let modules = ModuleTable::shared();
        let stacks = Arc::new(StackTable::new());
        let mut t = Translator::new(SiteResolver::new(modules)).with_stacks(stacks.clone());
        let me = std::process::id();
        let addr = |f: fn() -> u64| f as *const () as u64 + 1;
        assert_eq!(frame_a() + frame_b() + frame_c(), 6);
        let mut rec = crate::raw::CopyStackRecord::default();
        rec.copy.h = Header {
            pid: me,
            tid: me,
            kind: kinds::COPY_STACK,
            ..Header::default()
        };
        rec.copy.bytes = 8;
        rec.copy.src_type = memtypes::HOST;
        rec.copy.dst_type = memtypes::DEVICE;
        rec.copy.call_site = addr(frame_c);
        rec.frames[0] = addr(frame_a);
        rec.frames[1] = addr(frame_b);
        // An address in no mapping is dropped.
        rec.frames[2] = 0x10;
        rec.nframes = 3;
        let mut out = Vec::new();
        t.translate(&RawEvent::CopyStack(Box::new(rec)), &mut out);
        let id = out[0].stack.expect("a stack");
        let frames = stacks.get(id).unwrap();
        let want: Vec<Site> = [frame_a as fn() -> u64, frame_c, frame_b]
            .into_iter()
            .map(|f| t.sites.site(me, addr(f)).unwrap())
            .collect();
        assert_eq!(
            frames.iter().filter_map(Frame::site).collect::<Vec<_>>(),
            want
        );
        assert_eq!(t.stats().stacks_captured, 1);
        assert_eq!(t.stats().frames_unplaced, 1);
        // Without a stack table, chains are dropped.
        let mut plain = translator();
        let mut out = Vec::new();
        plain.translate(&RawEvent::CopyStack(Box::new(rec)), &mut out);
        assert!(out[0].stack.is_none());
    }

    #[test]
    fn process_life_is_reported_as_news() {
        let mut t = translator();
        let mut out = Vec::new();
        let proc_ev = |kind, child| {
            RawEvent::Proc(ProcRecord {
                h: header(kind, 1),
                child,
                ..ProcRecord::default()
            })
        };
        assert_eq!(
            t.translate(&proc_ev(kinds::PROC_FORK, 77), &mut out),
            Some(ProcessNews::Forked {
                parent: PID,
                child: 77
            })
        );
        assert_eq!(
            t.translate(&proc_ev(kinds::EXEC_MAP, 0), &mut out),
            Some(ProcessNews::LibraryMapped(PID))
        );
        assert_eq!(
            t.translate(&proc_ev(kinds::PROC_EXIT, 0), &mut out),
            Some(ProcessNews::Exited(PID))
        );
        assert!(out.is_empty());
    }
}
