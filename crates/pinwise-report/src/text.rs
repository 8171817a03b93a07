//! The terminal rendering of a [`Report`]: plain text in the layout's width
//! ([`crate::layout`]; [`WIDTH`] columns by default): names cut in the middle keeping their
//! end, less important table columns left out on narrow terminals, unless `--wide`.

use std::fmt::Write as _;

use pinwise_core::history::{AllocKind, AllocState};
use pinwise_core::{Direction, PinMethod};

use crate::analysis::{AllocationRow, Report};
use crate::units::{count, fit, format_duration_ns, format_size, percent};

/// Columns the text report fits in when not on a terminal.
pub const WIDTH: usize = crate::layout::BASE_WIDTH;

/// How a table column is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A text table that fits the layout's width: its first column (names) takes what the
/// other columns leave, down to [`crate::layout::MIN_NAME`] columns; below that, the
/// optional columns ([`Table::optional`]) are left out, least important first, and the
/// header says which. With `--wide` every column is there and names are whole.
pub(crate) struct Table {
    columns: Vec<(&'static str, usize, Align)>,
    /// Optional columns, by index, in the order they are left out.
    optional: Vec<usize>,
    /// Columns shown.
    shown: Vec<bool>,
}

impl Table {
    pub(crate) fn new(columns: &[(&'static str, usize, Align)]) -> Self {
        let t = Table {
            columns: columns.to_vec(),
            optional: Vec::new(),
            shown: vec![true; columns.len()],
        };
        debug_assert!(t.width() <= WIDTH, "table wider than {WIDTH}");
        t
    }

    /// Columns (by index, never the first) that may be left out on a narrow terminal, the
    /// least important first.
    pub(crate) fn optional(mut self, columns: &[usize]) -> Self {
        debug_assert!(columns.iter().all(|&c| c > 0 && c < self.columns.len()));
        self.optional = columns.to_vec();
        self
    }

    /// The same table with its first column (names) as wide as the longest of `names`, but
    /// no wider than the layout's width leaves it unless `--wide`; optional columns left
    /// out while the names would get fewer than [`crate::layout::MIN_NAME`] columns.
    pub(crate) fn with_names<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        let layout = crate::layout::current();
        let title = self.columns[0].0;
        // No wider than the longest name (nor narrower than the title).
        let longest = names
            .into_iter()
            .map(|n| n.chars().count())
            .max()
            .unwrap_or(0)
            .max(title.chars().count());
        if layout.wide {
            self.columns[0].1 = longest;
            return self;
        }
        let wanted = crate::layout::MIN_NAME.min(longest);
        // As designed at 100 columns, plus what a wider terminal has more.
        let designed = self.columns[0].1 + layout.width.saturating_sub(WIDTH);
        let mut optional = self.optional.iter();
        loop {
            let room = layout.width.saturating_sub(self.others_width());
            if room >= wanted {
                self.columns[0].1 = room.min(designed).min(longest).max(wanted);
                return self;
            }
            match optional.next() {
                Some(&c) => self.shown[c] = false,
                None => {
                    // Nothing more to leave out: the names get what there is.
                    self.columns[0].1 = room.max(title.chars().count().min(wanted));
                    return self;
                }
            }
        }
    }

    /// Width of the first column.
    pub(crate) fn name_width(&self) -> usize {
        self.columns[0].1
    }

    /// Width of the shown columns after the first, with their separators.
    fn others_width(&self) -> usize {
        self.columns
            .iter()
            .zip(&self.shown)
            .skip(1)
            .filter(|(_, shown)| **shown)
            .map(|(c, _)| c.1 + 1)
            .sum()
    }

    fn width(&self) -> usize {
        self.columns[0].1 + self.others_width()
    }

    /// The titles, underlined; first a line naming the columns left out, if any.
    pub(crate) fn header(&self) -> String {
        let mut s = String::new();
        let hidden: Vec<&str> = self
            .columns
            .iter()
            .zip(&self.shown)
            .filter(|(_, shown)| !**shown)
            .map(|(c, _)| c.0)
            .collect();
        if !hidden.is_empty() {
            s.push_str(&wrap(
                &format!(
                    "(not shown at this width: {}; --wide shows every column)",
                    hidden.join(", ")
                ),
                1,
            ));
            s.push('\n');
        }
        let titles: Vec<String> = self.columns.iter().map(|c| c.0.to_owned()).collect();
        s.push_str(&crate::layout::bold(&self.row(&titles)));
        s.push('\n');
        s.push_str(&"-".repeat(self.width()));
        s
    }

    pub(crate) fn row(&self, cells: &[String]) -> String {
        let mut line = String::new();
        let columns = self.columns.iter().zip(&self.shown).zip(cells).enumerate();
        for (i, (((_, width, align), shown), cell)) in columns {
            if !shown {
                continue;
            }
            if i > 0 {
                line.push(' ');
            }
            // Names (the first column) keep their end.
            let cell = fit(cell, *width, i == 0);
            match align {
                Align::Left => {
                    let _ = write!(line, "{cell:<width$}");
                }
                Align::Right => {
                    let _ = write!(line, "{cell:>width$}");
                }
            }
        }
        line.trim_end().to_owned()
    }
}

/// Wraps `text` at the layout's width (at least 40 columns), each line after the first
/// indented by `indent`. Words are never split, nor at hyphens: a word wider than the line
/// (a long path) has a line of its own.
pub(crate) fn wrap(text: &str, indent: usize) -> String {
    let width = crate::layout::current().width.max(40);
    // One paragraph: the text's own line breaks and runs of spaces are not kept.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let pad = " ".repeat(indent);
    let options = textwrap::Options::new(width)
        .subsequent_indent(&pad)
        .break_words(false)
        .word_splitter(textwrap::WordSplitter::NoHyphenation);
    textwrap::fill(&flat, options)
}

/// Short name of a kind of memory (at most 8 characters; `unknown`: memory pinwise did not
/// see allocated, known only from the copies that touched it).
pub(crate) fn kind_name(kind: AllocKind) -> &'static str {
    match kind {
        AllocKind::Pageable => "pageable",
        AllocKind::PinnedAlloc => "pinned",
        AllocKind::Registered => "register",
        AllocKind::Untracked => "unknown",
    }
}

/// Short name of a state.
pub(crate) fn state_name(state: AllocState) -> &'static str {
    match state {
        AllocState::Live => "live",
        AllocState::Freed => "freed",
        AllocState::Replaced => "replaced",
        AllocState::Unmapped => "unmapped",
        AllocState::Exited => "exited",
    }
}

/// How a pin method is named in sentences.
pub(crate) fn method_name(method: PinMethod) -> &'static str {
    match method {
        PinMethod::RegisterTouched => "registering touched memory (cuMemHostRegister)",
        PinMethod::MallocHost => "allocating pinned memory (cuMemHostAlloc)",
    }
}

fn section(out: &mut String, title: &str) {
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", crate::layout::bold(&wrap(title, 2)));
}

/// How much the text report shows, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextOptions {
    /// Each allocation's whole stack under its row (else its user frame only).
    pub stacks: bool,
    /// Width, full names, colour.
    pub layout: crate::layout::Layout,
}

/// The text report.
pub fn render(report: &Report) -> String {
    render_with(report, TextOptions::default())
}

/// The text report, showing what `options` asks for.
pub fn render_with(report: &Report, options: TextOptions) -> String {
    crate::layout::with(options.layout, || render_now(report, options))
}

fn render_now(report: &Report, options: TextOptions) -> String {
    let mut out = String::new();
    header(&mut out, report);
    directions(&mut out, report);
    budget(&mut out, report);
    allocations(
        &mut out,
        "HOTSPOTS: the allocations with the most transfers",
        &report.hotspots,
        "no allocation was transferred",
        options,
    );
    allocations(
        &mut out,
        "COLDSPOTS: the allocations with the fewest transfers (largest first)",
        &report.coldspots,
        "no allocation recorded",
        options,
    );
    sites(&mut out, report);
    pinned_for_nothing(&mut out, report);
    redundant(&mut out, report);
    pool(&mut out, report);
    source(&mut out, report);
    out
}

fn pool(out: &mut String, r: &Report) {
    let Some(p) = &r.pool else { return };
    section(
        out,
        "PINNED POOL: pinned memory served by the node's pool (pinwise run --pool)",
    );
    let _ = writeln!(out, "{}", wrap(&p.note, 0));
}

fn header(out: &mut String, r: &Report) {
    // The input's path takes what the rest of the line leaves, keeping its end.
    let layout = crate::layout::current();
    let about = format!(
        " ({}, {})",
        r.input.kind.describe(),
        format_size(r.input.file_bytes)
    );
    let room = if layout.wide {
        usize::MAX
    } else {
        layout
            .width
            .saturating_sub("pinwise report: ".len() + about.chars().count())
    };
    let _ = writeln!(
        out,
        "{}",
        fit(
            &format!("pinwise report: {}{about}", fit(&r.input.path, room, true)),
            if layout.wide {
                usize::MAX
            } else {
                layout.width
            },
            true
        )
    );
    if let Some(s) = &r.input.salvaged {
        let _ = writeln!(out, "{}", crate::layout::warn(&wrap(&format!("!! {s}"), 2)));
    }
    for w in &r.source.warnings {
        if w.starts_with(crate::health::CONTRADICTION) {
            let _ = writeln!(out, "{}", crate::layout::warn(&wrap(&format!("!! {w}"), 2)));
        }
    }
    let _ = writeln!(out, "{}", wrap(&overview_sentence(r), 2));
    let _ = writeln!(out, "{}", wrap(&format!("cost model: {}", r.cost_model), 2));
    let mark = if r.provenance.cpu_standin {
        "!!"
    } else {
        "note:"
    };
    let _ = writeln!(out, "{}", wrap(&format!("{mark} {}", r.provenance.note), 2));
    for e in &r.provenance.evidence {
        let _ = writeln!(out, "{}", wrap(&format!("   evidence: {e}"), 4));
    }
}

fn directions(out: &mut String, r: &Report) {
    section(
        out,
        "TRANSFERS BY DIRECTION (estimated times from the cost model)",
    );
    let t = Table::new(&[
        ("direction", 9, Align::Left),
        ("transfers", 13, Align::Right),
        ("bytes", 10, Align::Right),
        ("from pageable", 13, Align::Right),
        ("est. time", 10, Align::Right),
        ("if pinned", 10, Align::Right),
        ("saving", 10, Align::Right),
        ("unattributed", 14, Align::Right),
    ])
    .optional(&[7, 5, 3, 1])
    .with_names(r.directions.iter().map(|d| d.direction.as_str()));
    let _ = writeln!(out, "{}", t.header());
    for d in &r.directions {
        let host_bytes = d.attributed.bytes();
        let time = |v: Option<f64>| v.map_or("-".to_owned(), format_duration_ns);
        let saving = match (d.estimated_ns, d.estimated_if_pinned_ns) {
            (Some(a), Some(b)) => format_duration_ns(a - b),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{}",
            t.row(&[
                d.direction.as_str().to_owned(),
                count(d.transfers),
                format_size(d.bytes),
                if host_bytes > 0 {
                    percent(d.attributed.pageable_bytes as f64 / host_bytes as f64)
                } else {
                    "-".into()
                },
                time(d.estimated_ns),
                time(d.estimated_if_pinned_ns),
                saving,
                if d.unattributed_transfers > 0 {
                    format!("{} xfers", count(d.unattributed_transfers))
                } else {
                    "-".into()
                },
            ])
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", wrap(&saving_sentence(r), 0));
}

/// What pinning would save, in one paragraph.
pub(crate) fn saving_sentence(r: &Report) -> String {
    let s = &r.saving;
    format!(
        "From pageable memory: {} of host<->device bytes. Pinning that memory would save {} \
         of transfer time; pinning every allocation with pageable transfers would cost {} \
         (net {}); pinning only the {} of those where it pays back nets {}.{}",
        percent(r.pageable_share),
        format_duration_ns(s.transfer_saving_ns),
        format_duration_ns(s.pin_all_cost_ns),
        format_duration_ns(s.net_saving_pin_all_ns),
        plural(s.allocations_worth_pinning, "allocation", "allocations"),
        format_duration_ns(s.net_saving_pin_worthwhile_ns),
        if s.approximate {
            " (approximate: some allocations' events were capped, their sizes are averages)"
        } else {
            ""
        },
    ) + &attach_sentence(r)
}

/// What a trace attached to a running process could not know, as a sentence to add (empty
/// for other histories).
pub(crate) fn attach_sentence(r: &Report) -> String {
    use pinwise_core::history::{
        ATTACHED_SOURCE_STAT, ATTACH_PINNED_BYTES_STAT, ATTACH_POSSIBLY_PINNED_BYTES_STAT,
        ATTACH_UNKNOWN_COUNTED_STAT,
    };
    let stat = |k: &str| r.source.stats.get(k).copied().unwrap_or(0);
    if stat(ATTACHED_SOURCE_STAT) == 0 {
        return String::new();
    }
    let possibly_pinned = match stat(ATTACH_POSSIBLY_PINNED_BYTES_STAT) {
        0 => String::new(),
        b => format!(
            " It also found {} of shared anonymous memory, which is how the NVIDIA driver \
             (580 and later) maps the pinned memory it allocates, and also how a program's own \
             shared memory looks: nothing in /proc tells them apart, so that memory counts as \
             of unknown state.",
            format_size(b)
        ),
    };
    if stat(ATTACH_UNKNOWN_COUNTED_STAT) != 0 {
        return format!(
            " This trace attached to a running process, and its history counted memory whose \
             allocation it did not see as pageable (untracked records), though that memory \
             may have been pinned before the attach: the saving above may be overstated \
             (`pinwise trace --pid` does not make such records). The driver had pinned {} \
             before the attach.{possibly_pinned}",
            format_size(stat(ATTACH_PINNED_BYTES_STAT)),
        );
    }
    let (transfers, moved) = r
        .directions
        .iter()
        .filter(|d| matches!(d.direction, Direction::HtoD | Direction::DtoH))
        .fold((0, 0), |(t, b), d| {
            (t + d.unattributed_transfers, b + d.unattributed_bytes)
        });
    format!(
        " This trace attached to a running process, so it did not see what the process \
         allocated before: the driver had pinned {} then (copies of that memory count as \
         pinned); {} host<->device transfers ({}) touched memory whose allocation the trace \
         did not see, whose pinned state cannot be known (it may have been registered before \
         the attach): they are left out of these figures and of the pinning plan.{possibly_pinned}",
        format_size(stat(ATTACH_PINNED_BYTES_STAT)),
        count(transfers),
        format_size(moved),
    )
}

/// The pinned budget the smart allocator would need, in one paragraph.
pub(crate) fn budget_sentence(r: &Report) -> String {
    let b = &r.budget;
    if b.tags_worth_pinning == 0 {
        return format!(
            "No allocation of this history pays back its pinning (of {} allocations, counted \
             by call site and call number), priced as the smart allocator pins (pool blocks \
             reused, fresh memory the cheaper way, holding it): it would pin nothing.",
            count(b.tags),
        );
    }
    let per_run = match r.overview.pids.len() {
        0 | 1 => String::new(),
        n => format!(
            " Per run: a profile predicts one process's transfers (here the mean of {n} \
             processes), so these savings are for one of them."
        ),
    };
    // The saving sentence counts pageable memory only; this one counts every tag, those
    // the run had already pinned too (the smart allocator would pin them as well).
    let pinned_in_run = match b.tags_pinned_in_run {
        0 => String::new(),
        n => format!(
            " This run had pinned {} of these allocations already ({} of the {}): the saving above, \
             over this run's pageable memory, leaves {}.",
            count(n),
            format_duration_ns(b.pinned_in_run_ns),
            format_duration_ns(b.attainable_ns),
            if n == 1 { "it out" } else { "them out" },
        ),
    };
    format!(
        "Priced as the smart allocator pins (pool blocks reused, fresh memory the cheaper way, \
         holding it), its plan pins {} of {} allocations (counted by call site and call \
         number); they net {} (against pageable memory) and hold {} pinned at once. To \
         capture {} of that, a budget of {} suffices: the plan for that budget, which \
         `pinwise run --mode use` follows, pins {} (at most {} at once) and nets {} ({}).\
         {pinned_in_run}{per_run}",
        count(b.tags_worth_pinning),
        count(b.tags),
        format_duration_ns(b.attainable_ns),
        format_size(b.attainable_peak_bytes),
        percent(b.share_asked),
        format_size(b.budget_bytes),
        plural(b.plan_pinned_tags, "allocation", "allocations"),
        format_size(b.plan_peak_bytes),
        format_duration_ns(b.plan_saving_ns),
        percent(b.plan_share()),
    )
}

/// `1 tag`, `2 tags`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// Pinned memory that did not pay back, in one sentence.
pub(crate) fn waste_sentence(r: &Report) -> String {
    let p = &r.pinned_for_nothing;
    if p.pinned_allocations == 0 {
        return "No pinned memory in this history.".into();
    }
    format!(
        "{} of {} pinned allocations ({} of {}) did not pay back: {} never transferred, {} too \
         rarely; pinning cost not earned back: {}.",
        count(p.never_transferred + p.rarely_transferred),
        count(p.pinned_allocations),
        format_size(p.wasted_bytes),
        format_size(p.pinned_bytes),
        count(p.never_transferred),
        count(p.rarely_transferred),
        format_duration_ns(p.wasted_ns)
    )
}

/// The history's own bookkeeping, in one sentence.
pub(crate) fn events_sentence(r: &Report) -> String {
    let s = &r.history_stats;
    format!(
        "events: {} ingested, {} kept, {} over the per-allocation cap; {} unattributed; {} \
         unmatched frees; {} replaced records",
        count(s.events_ingested),
        count(s.events_retained),
        count(s.events_dropped_by_cap),
        count(s.unattributed_events),
        count(s.unmatched_frees),
        count(s.replaced_records)
    )
}

/// The overview line: processes, records, span.
pub(crate) fn overview_sentence(r: &Report) -> String {
    let o = &r.overview;
    let pids = match o.pids.len() {
        0 => "no process".to_owned(),
        1 => format!("1 process (pid {})", o.pids[0]),
        n => format!("{n} processes"),
    };
    format!(
        "{pids}; {} allocations ({} of them known only from their copies, {} live at the end); \
         trace span {}",
        count(o.records),
        count(o.implicit_records),
        count(o.live),
        format_duration_ns(o.span_ns as f64)
    )
}

fn budget(out: &mut String, r: &Report) {
    section(out, "PINNED BUDGET the smart allocator would need");
    let _ = writeln!(out, "{}", wrap(&budget_sentence(r), 0));
}

/// Where an allocation was made, for its table cell: its user frame when its stack is
/// known, else its call site.
fn where_made(a: &AllocationRow, width: usize) -> String {
    match &a.user_frame {
        Some(f) => fit_frame(f, width),
        None => a.site.short_fit(width),
    }
}

/// A frame label in `width` characters, keeping its end (a Python frame's function and
/// line, a native frame's file and line).
fn fit_frame(label: &str, width: usize) -> String {
    crate::units::fit(label, width, true)
}

fn allocations(
    out: &mut String,
    title: &str,
    rows: &[AllocationRow],
    empty: &str,
    options: TextOptions,
) {
    section(out, title);
    if rows.is_empty() {
        let _ = writeln!(out, "({empty})");
        return;
    }
    let t = Table::new(&[
        ("allocated at", 34, Align::Left),
        ("call#", 6, Align::Right),
        ("size", 9, Align::Right),
        ("kind", 8, Align::Left),
        ("xfers", 9, Align::Right),
        ("bytes", 9, Align::Right),
        ("pageable", 8, Align::Right),
        ("pin pays", 9, Align::Left),
    ])
    .optional(&[1, 6, 3, 4]);
    let full: Vec<String> = rows.iter().map(|a| where_made(a, usize::MAX)).collect();
    let t = t.with_names(full.iter().map(String::as_str));
    let _ = writeln!(out, "{}", t.header());
    for a in rows {
        let _ = writeln!(
            out,
            "{}",
            t.row(&[
                where_made(a, t.name_width()),
                if a.call_no > 0 {
                    a.call_no.to_string()
                } else {
                    "-".into()
                },
                format_size(a.size),
                kind_name(a.kind).to_owned(),
                count(a.transfers),
                format_size(a.bytes),
                if a.bytes > 0 {
                    percent(a.pageable_bytes as f64 / a.bytes as f64)
                } else {
                    "-".into()
                },
                if a.pinning_pays {
                    format!("+{}", format_duration_ns(a.net_saving_ns))
                } else {
                    "no".into()
                },
            ])
        );
        if options.stacks {
            // Whole with --wide; else cut in the middle to the width, keeping each frame's
            // end (its function and line).
            let layout = crate::layout::current();
            let width = if layout.wide {
                usize::MAX
            } else {
                layout.width
            };
            let call_site = format!("    call site: {}", a.site.long());
            let _ = writeln!(out, "{}", fit(&call_site, width, true));
            for (i, f) in a.stack.iter().enumerate() {
                let mark = if a.user_frame.as_deref() == Some(f.as_str()) {
                    '>'
                } else {
                    ' '
                };
                let head = format!("   {mark}#{i} ");
                let room = width.saturating_sub(head.chars().count());
                let _ = writeln!(out, "{head}{}", fit(f, room, true));
            }
        }
    }
    if rows.iter().any(|a| a.user_frame.is_some()) && !options.stacks {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                "(allocated at: the first frame outside CUDA, frameworks and runtimes; \
                 --stacks: whole stacks)",
                1
            )
        );
    }
}

fn sites(out: &mut String, r: &Report) {
    section(out, "CALL SITES by bytes transferred");
    if r.sites.is_empty() {
        let _ = writeln!(out, "(no call site)");
        return;
    }
    let t = Table::new(&[
        ("allocated at", 32, Align::Left),
        ("allocs", 9, Align::Right),
        ("xfers", 10, Align::Right),
        ("bytes", 9, Align::Right),
        ("pageable", 8, Align::Right),
        ("sizes", 17, Align::Right),
        ("max call#", 9, Align::Right),
    ])
    .optional(&[6, 5, 4, 1]);
    let t = t.with_names(
        r.sites
            .iter()
            .map(|s| site_row_name(s, usize::MAX))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    let _ = writeln!(out, "{}", t.header());
    for s in &r.sites {
        let sizes = if s.allocations == 0 {
            "-".to_owned()
        } else if s.min_size == s.max_size {
            format_size(s.max_size)
        } else {
            format!("{}-{}", format_size(s.min_size), format_size(s.max_size)).replace(' ', "")
        };
        let allocs = if s.implicit_records > 0 {
            format!("{}+{}", count(s.allocations), count(s.implicit_records))
        } else {
            count(s.allocations)
        };
        let _ = writeln!(
            out,
            "{}",
            t.row(&[
                site_row_name(s, t.name_width()),
                allocs,
                count(s.transfers),
                format_size(s.bytes),
                if s.bytes > 0 {
                    percent(s.pageable_bytes as f64 / s.bytes as f64)
                } else {
                    "-".into()
                },
                sizes,
                if s.max_call_no > 0 {
                    count(u64::from(s.max_call_no))
                } else {
                    "-".into()
                },
            ])
        );
    }
    if r.sites.iter().any(|s| s.implicit_records > 0) {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                "(allocs +N unknown: N buffers pinwise did not see allocated, first touched \
                 by copies from the site)",
                1
            )
        );
    }
}

/// A call site's name in the sites table, in `width` characters.
fn site_row_name(s: &crate::model::SiteRow, width: usize) -> String {
    match (&s.user_frame, s.user_frames) {
        (Some(f), _) if *f != s.site.short() => fit_frame(f, width),
        (None, n) if n > 1 => {
            crate::units::fit(&format!("{} ({n} call paths)", s.site.short()), width, true)
        }
        _ => s.site.short_fit(width),
    }
}

fn pinned_for_nothing(out: &mut String, r: &Report) {
    let p = &r.pinned_for_nothing;
    section(
        out,
        "PINNED FOR NOTHING: pinned memory whose transfers did not pay back its pinning",
    );
    if p.pinned_allocations == 0 {
        let _ = writeln!(out, "(no pinned memory in this history)");
        return;
    }
    let _ = writeln!(out, "{}", wrap(&waste_sentence(r), 0));
    if p.sites.is_empty() {
        return;
    }
    let t = Table::new(&[
        ("call site", 36, Align::Left),
        ("allocs", 9, Align::Right),
        ("never", 9, Align::Right),
        ("bytes", 9, Align::Right),
        ("xfers", 9, Align::Right),
        ("largest", 9, Align::Right),
        ("unearned", 10, Align::Right),
    ])
    .optional(&[5, 4, 2]);
    let full: Vec<String> = p.sites.iter().map(|w| w.site.short()).collect();
    let t = t.with_names(full.iter().map(String::as_str));
    let _ = writeln!(out, "{}", t.header());
    for w in &p.sites {
        let _ = writeln!(
            out,
            "{}",
            t.row(&[
                w.site.short_fit(t.name_width()),
                count(w.allocations),
                count(w.never_transferred),
                format_size(w.bytes),
                count(w.transfers),
                format_size(w.max_size),
                format_duration_ns(w.wasted_ns),
            ])
        );
    }
}

fn redundant(out: &mut String, r: &Report) {
    let x = &r.redundant;
    section(
        out,
        "REDUNDANT TRANSFERS: copies whose bytes the other side already had",
    );
    if x.mode != "off" || x.uploads + x.downloads > 0 {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!(
                    "{} of {} uploads ({}) and {} of {} downloads ({}) were redundant: \
                     {} estimated (cost model). {} copies not fingerprinted.",
                    count(x.redundant_uploads),
                    count(x.uploads),
                    format_size(x.redundant_upload_bytes),
                    count(x.redundant_downloads),
                    count(x.downloads),
                    format_size(x.redundant_download_bytes),
                    format_duration_ns(x.wasted_ns),
                    count(x.skipped),
                ),
                0
            )
        );
    }
    let _ = writeln!(out, "{}", wrap(&x.note, 0));
    if x.allocations.is_empty() {
        if x.mode != "off" {
            let _ = writeln!(out, "(no redundant copy found)");
        }
        return;
    }
    let t = Table::new(&[
        ("allocation", 29, Align::Left),
        ("size", 9, Align::Right),
        ("up", 7, Align::Right),
        ("redund. up", 10, Align::Right),
        ("down", 7, Align::Right),
        ("redund. down", 12, Align::Right),
        ("bytes", 9, Align::Right),
        ("wasted", 10, Align::Right),
    ])
    .optional(&[1, 6, 2, 4]);
    let names: Vec<String> = x
        .allocations
        .iter()
        .map(|a| a.user_frame.clone().unwrap_or_else(|| a.site.short()))
        .collect();
    let t = t.with_names(names.iter().map(String::as_str));
    let _ = writeln!(out, "{}", t.header());
    for (a, name) in x.allocations.iter().zip(&names) {
        let rd = &a.redundancy;
        let _ = writeln!(
            out,
            "{}",
            t.row(&[
                fit(name, t.name_width(), true),
                format_size(a.size),
                count(u64::from(rd.uploads)),
                count(u64::from(rd.redundant_uploads)),
                count(u64::from(rd.downloads)),
                count(u64::from(rd.redundant_downloads)),
                format_size(rd.redundant_upload_bytes + rd.redundant_download_bytes),
                format_duration_ns(a.wasted_ns),
            ])
        );
        let _ = writeln!(out, "{}", wrap(&format!("-> {}", a.advice), 4));
    }
    if x.sites.len() > 1 {
        let _ = writeln!(out, "by call site:");
        // The name takes what the figures (49 columns) leave, 44 at most unless --wide; on
        // a terminal too narrow for a name of [`MIN_NAME`] beside them, a line of its own.
        let layout = crate::layout::current();
        let room = layout.width.saturating_sub(51);
        let own_line = !layout.wide && room < crate::layout::MIN_NAME;
        let width = if layout.wide {
            x.sites
                .iter()
                .map(|s| s.site.short().chars().count())
                .max()
                .unwrap_or(0)
                .max(44)
        } else if own_line {
            0
        } else {
            room.min(44)
        };
        for s in &x.sites {
            let name = if own_line {
                let _ = writeln!(out, "  {}", s.site.short_fit(layout.width - 2));
                String::new()
            } else {
                s.site.short_fit(width)
            };
            let _ = writeln!(
                out,
                "  {name:<width$} {:>5} allocs {:>7} copies {:>9} {:>10}",
                count(s.allocations),
                count(s.redundant_copies),
                format_size(s.bytes),
                format_duration_ns(s.wasted_ns),
            );
        }
    }
}

fn source(out: &mut String, r: &Report) {
    section(
        out,
        "SOURCE: what the tracer and the history say about themselves",
    );
    let _ = writeln!(out, "{}", wrap(&events_sentence(r), 2));
    if r.source.stats.is_empty() {
        let _ = writeln!(out, "no source statistics recorded in this history");
    }
    // The statistic's name takes what its value (17 columns) leaves, 44 at most.
    let layout = crate::layout::current();
    let width = if layout.wide {
        r.source
            .stats
            .keys()
            .map(|k| k.chars().count())
            .max()
            .unwrap_or(0)
            .max(44)
    } else {
        layout.width.saturating_sub(19).clamp(8, 44)
    };
    for (k, v) in &r.source.stats {
        let flag = if r.source.losses.contains_key(k) {
            "!"
        } else {
            " "
        };
        let _ = writeln!(
            out,
            "{flag} {:<width$} {:>16}",
            fit(k, width, true),
            count(*v)
        );
    }
    for w in &r.source.warnings {
        let _ = writeln!(out, "{}", wrap(&format!("! {w}"), 2));
    }
    if r.source.warnings.is_empty() {
        let _ = writeln!(out, "no drops or losses reported");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_lines_within_the_width() {
        let text = "word ".repeat(100);
        for line in wrap(&text, 2).lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?}");
        }
        assert_eq!(wrap("short text", 0), "short text");
        // At 40 columns: a path wider than the line has one of its own, whole; hyphenated
        // words and the text's own line breaks are not kept apart.
        let narrow = crate::layout::Layout {
            width: 40,
            ..Default::default()
        };
        let path = "/home/someone/experiments/2026-11-25/run.bin";
        let text = format!("read {path} as a\n pageable-only history of twenty-two bytes");
        assert_eq!(
            crate::layout::with(narrow, || wrap(&text, 2)),
            format!("read\n  {path}\n  as a pageable-only history of\n  twenty-two bytes")
        );
    }

    #[test]
    fn tables_fit_cells_and_align() {
        let t = Table::new(&[("a", 4, Align::Left), ("b", 5, Align::Right)]);
        // The first column (names) keeps its end.
        assert_eq!(t.row(&["toolong".into(), "1".into()]), "…ong     1");
        assert_eq!(t.header().lines().nth(1), Some("----------"));
    }

    fn long_names_report() -> Report {
        let h = pinwise_core::MemHistory::default();
        let info = crate::input::InputInfo {
            path: "x".into(),
            kind: crate::input::InputKind::JsonHistory,
            file_bytes: 0,
            salvaged: None,
        };
        let mut r = crate::build_report(
            &h,
            info,
            &pinwise_core::CostModel::builtin(),
            &crate::ReportOptions::default(),
            &mut crate::NoSymbols,
            &mut crate::Progress::hidden(),
        );
        let site = |function: &str| crate::SiteLabel {
            module_key: "path:/app".into(),
            module_path: "/app".into(),
            offset: 0x10,
            location: Some(crate::SourceLocation {
                function: function.into(),
                file: Some("/src/buffers.cpp".into()),
                line: Some(42),
            }),
        };
        for (i, f) in [
            "pinwise::examples::very_long_namespace::DeviceBuffer<float>::resize",
            "pinwise::examples::very_long_namespace::DeviceBuffer<float>::upload",
        ]
        .iter()
        .enumerate()
        {
            r.pinned_for_nothing.sites.push(crate::model::WasteRow {
                site: site(f),
                allocations: 1 + i as u64,
                never_transferred: 0,
                bytes: 1 << 20,
                transfers: 1,
                max_size: 1 << 20,
                wasted_ns: 1000.0,
            });
        }
        r.pinned_for_nothing.pinned_allocations = 2;
        r
    }

    #[test]
    fn names_keep_their_end_fit_the_width_and_are_whole_with_wide() {
        use crate::layout::Layout;
        let r = long_names_report();
        let render = |layout| {
            render_with(
                &r,
                TextOptions {
                    stacks: false,
                    layout,
                },
            )
        };
        // 100 columns: cut at the front, the two names still told apart by their ends.
        let text = render(Layout::default());
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(
            text.contains("…fer<float>::resize (buffers.cpp:42)"),
            "{text}"
        );
        assert!(
            text.contains("…fer<float>::upload (buffers.cpp:42)"),
            "{text}"
        );
        // A wider terminal shows more of them; --wide shows them whole.
        let wide_terminal = render(Layout {
            width: 160,
            ..Layout::default()
        });
        assert!(wide_terminal
            .contains("pinwise::examples::very_long_namespace::DeviceBuffer<float>::resize"));
        assert!(wide_terminal.lines().all(|l| l.chars().count() <= 160));
        let wide = render(Layout {
            wide: true,
            ..Layout::default()
        });
        assert!(wide.contains(
            "pinwise::examples::very_long_namespace::DeviceBuffer<float>::upload (buffers.cpp:42)"
        ));
        // Colour only when asked for (a terminal without NO_COLOR): bold titles.
        assert!(!text.contains('\x1b'));
        let color = render(Layout {
            color: true,
            ..Layout::default()
        });
        assert!(color.contains("\x1b[1mPINNED FOR NOTHING"), "{color}");
    }
}
