//! The HTML report: one self-contained page (inline CSS, SVG and a little JS; a Content
//! Security Policy that forbids loading anything), with the text report's content and
//! five plots. The page is a [`maud`] template: every name and sentence is escaped by the
//! template, only the plots' SVG (drawn by [`plots`]) and the page's own CSS and script
//! (`page.css`, `page.js`, next to this file) go in as they are.
//!
//! The page's script makes the tables sortable and the plots zoomable (wheel), pannable (drag)
//! and restorable (double click), the labels keeping their size when a plot is zoomed; and
//! it checks the page: when every plot and table is in place, no table or plot is clipped at
//! the window's width, and each plot zooms with its labels unscaled, it sets
//! `data-pinwise-check="ok"` on the `<html>` element and logs `pinwise-report: ok` to the
//! console; otherwise it logs an error saying what is wrong.
//! The test suite loads the page in headless Chromium and reads both.

use std::path::Path;

use maud::{html, Markup, PreEscaped, Render, DOCTYPE};

use crate::analysis::{AllocationRow, Report};
use crate::error::ReportError;
use crate::plots;
use crate::text::{
    budget_sentence, events_sentence, kind_name, overview_sentence, saving_sentence, state_name,
    waste_sentence,
};
use crate::units::{count, format_duration_ns, format_size, percent};

/// Number of plots on the page (the page's self-check expects this many).
pub const PLOTS: usize = 5;

/// The page's style sheet.
const STYLE: &str = include_str!("page.css");

/// The page's script: sortable tables, zoomable plots, the self-check.
const SCRIPT: &str = include_str!("page.js");

/// The Content Security Policy: nothing loaded, inline style and script only.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; \
                   img-src data:";

/// The page, as a string.
pub fn render(report: &Report) -> Result<String, ReportError> {
    let traffic = plots::traffic(report)?;
    let lifetimes = plots::lifetimes(report)?;
    let sizes = plots::size_classes(report)?;
    let curve = plots::budget_curve(report)?;
    let redundant_plot = plots::redundant(report)?;
    let r = report;

    let traffic_caption = format!(
        "Bytes moved over time, by direction and host memory state: a bar's height is the \
         bytes of the copies issued in its bucket of {} (a copy counts whole in the bucket \
         where it started; the plot shows no rate).{}",
        format_duration_ns(r.plots.traffic.bucket_ns as f64),
        if r.plots.traffic.incomplete {
            " Some transfers are missing: events past the per-allocation cap are counted \
             but not kept."
        } else {
            ""
        }
    );
    let lifetimes_caption = format!(
        "Lifetimes of the {} allocations that moved the most bytes, one mark per transfer \
         (paler bars: end not seen).",
        r.plots.lifetimes.len()
    );
    let sizes_caption = format!(
        "Allocations by size class: hot when their transfers pay back pinning by {} (policy \
         of pinwise-core, cost model {}), warm when transferred too little, cold when never.",
        crate::text::method_name(r.budget.method),
        r.cost_model
    );
    let redundant_caption = format!(
        "Fingerprinted copies of the allocations with the most time wasted on redundant \
         copies ({} in all, cost model {}).",
        format_duration_ns(r.redundant.wasted_ns),
        r.cost_model
    );

    let page = html! {
        (DOCTYPE)
        html lang="en" data-plots=(PLOTS) {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "pinwise report: " (r.input.path) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                (header(r))
                (cards(r))

                h2 { "Transfers by direction" }
                (directions(r))
                p { (saving_sentence(r)) }
                (figure(&traffic, &traffic_caption))

                h2 { "Pinned budget the smart allocator would need" }
                p { (budget_sentence(r)) }
                (figure(&curve,
                    "Net saving against the pinned budget: allocations taken best saving per \
                     pinned byte first (the order of core's plan); a budget is the most bytes \
                     they hold pinned at once. The curve is a lower bound of the plan at each \
                     budget and passes through the red point, core's plan at the chosen budget."))

                h2 { "Hotspots: the allocations with the most transfers" }
                (allocation_table(&r.hotspots, "No allocation was transferred."))
                (figure(&lifetimes, &lifetimes_caption))

                h2 { "Coldspots: the allocations with the fewest transfers (largest first)" }
                (allocation_table(&r.coldspots, "No allocation recorded."))
                (figure(&sizes, &sizes_caption))

                h2 { "Call sites by bytes transferred" }
                (sites(r))

                h2 { "Pinned for nothing: pinned memory whose transfers did not pay back its pinning" }
                p { (waste_sentence(r)) }
                (waste(r))

                h2 { "Redundant transfers: copies whose bytes the other side already had" }
                (redundant(r))
                (figure(&redundant_plot, &redundant_caption))

                @if let Some(p) = &r.pool {
                    h2 { "Pinned pool: pinned memory served by the node's pool (pinwise run --pool)" }
                    (pool(p))
                }

                h2 { "Source: what the tracer and the history say about themselves" }
                (source(r))

                p.muted {
                    "Made by pinwise " (r.pinwise_version) ". Sites show function (file:line) \
                     when symbols were found, else module+offset."
                }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    };
    Ok(page.into_string())
}

/// Writes the page to `path`.
pub fn write(report: &Report, path: &Path) -> Result<(), ReportError> {
    let page = render(report)?;
    pinwise_core::safe_file::write_bytes(path, page.as_bytes()).map_err(|source| {
        ReportError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// A plot (SVG drawn by [`plots`], inserted as it is) and its caption.
fn figure(svg: &str, caption: &str) -> Markup {
    html! {
        figure.plot {
            (PreEscaped(svg))
            figcaption {
                (caption) " "
                span.hint { "Wheel: zoom; drag: pan; double click: the whole plot." }
            }
        }
    }
}

fn header(r: &Report) -> Markup {
    let banner = if r.provenance.cpu_standin {
        "banner warn"
    } else {
        "banner"
    };
    html! {
        h1 { "pinwise report" }
        p {
            code { (r.input.path) } " "
            span.muted { "(" (r.input.kind.describe()) ", " (format_size(r.input.file_bytes)) ")" }
        }
        p { (overview_sentence(r)) }
        p.muted { "cost model: " (r.cost_model) }
        div class=(banner) {
            (r.provenance.note)
            @if !r.provenance.evidence.is_empty() {
                " "
                span.muted { "(evidence: " (r.provenance.evidence.join("; ")) ")" }
            }
        }
    }
}

fn cards(r: &Report) -> Markup {
    let dir = |i: usize| &r.directions[i];
    let items = [
        (
            format_size(dir(0).bytes),
            format!("host to device, {} transfers", count(dir(0).transfers)),
        ),
        (
            format_size(dir(1).bytes),
            format!("device to host, {} transfers", count(dir(1).transfers)),
        ),
        (
            percent(r.pageable_share),
            "of host<->device bytes from pageable memory".to_owned(),
        ),
        (
            format_duration_ns(r.saving.net_saving_pin_worthwhile_ns),
            "pinning would save (net, estimated)".to_owned(),
        ),
        (
            format_size(r.budget.budget_bytes),
            format!(
                "pinned budget for {} of the saving",
                percent(r.budget.share_asked)
            ),
        ),
        (
            format_size(r.pinned_for_nothing.wasted_bytes),
            "pinned for nothing".to_owned(),
        ),
        (count(r.overview.records), "allocation records".to_owned()),
        (
            // Saturating: the counts are whatever the history file says.
            count(
                r.source
                    .losses
                    .values()
                    .fold(0u64, |a, &v| a.saturating_add(v)),
            ),
            "lost or doubtful events the sources report".to_owned(),
        ),
    ];
    html! {
        div.cards {
            @for (v, k) in &items {
                div.card { div.v { (v) } div.k { (k) } }
            }
        }
    }
}

/// A number cell: the text shown, and the value sorting uses.
fn num(shown: impl Render, value: f64) -> Markup {
    html! { td data-v=(value) { (shown) } }
}

/// A number cell showing `-` when there is no value.
fn num_or_dash(value: Option<f64>, show: impl Fn(f64) -> String) -> Markup {
    match value {
        Some(v) => num(show(v), v),
        None => num("-", 0.0),
    }
}

/// A sortable table in a box that must never scroll (the page's self-check): `columns` are
/// the titles and whether they are left-aligned (text) rather than right-aligned (numbers).
fn table(columns: &[(&str, bool)], rows: Markup) -> Markup {
    html! {
        div.scroll {
            table.sortable {
                thead {
                    tr {
                        @for (name, left) in columns {
                            th class=[left.then_some("l")] { (name) }
                        }
                    }
                }
                tbody { (rows) }
            }
        }
    }
}

/// The share of `part` in `whole`, 0 when `whole` is 0.
fn share(part: u64, whole: u64) -> f64 {
    if whole > 0 {
        part as f64 / whole as f64
    } else {
        0.0
    }
}

/// A share cell: `-` (sorting as 0) when there is nothing to share.
fn share_cell(part: u64, whole: u64) -> Markup {
    let s = share(part, whole);
    num(if whole > 0 { percent(s) } else { "-".into() }, s)
}

fn directions(r: &Report) -> Markup {
    let rows = html! {
        @for d in &r.directions {
            @let saving = match (d.estimated_ns, d.estimated_if_pinned_ns) {
                (Some(a), Some(b)) => Some(a - b),
                _ => None,
            };
            tr {
                td.l { (d.direction.as_str()) }
                (num(count(d.transfers), d.transfers as f64))
                (num(format_size(d.bytes), d.bytes as f64))
                (share_cell(d.attributed.pageable_bytes, d.attributed.bytes()))
                (num_or_dash(d.estimated_ns, format_duration_ns))
                (num_or_dash(d.estimated_if_pinned_ns, format_duration_ns))
                (num_or_dash(saving, format_duration_ns))
                (num(count(d.unattributed_transfers), d.unattributed_transfers as f64))
            }
        }
    };
    table(
        &[
            ("direction", true),
            ("transfers", false),
            ("bytes", false),
            ("from pageable", false),
            ("est. time", false),
            ("if pinned", false),
            ("saving", false),
            ("unattributed transfers", false),
        ],
        rows,
    )
}

/// An allocation's tooltip: its call site and its whole stack.
fn allocation_tip(a: &AllocationRow) -> String {
    let mut tip = format!("call site: {}", a.site.long());
    for (i, f) in a.stack.iter().enumerate() {
        tip.push_str(&format!("\n#{i} {f}"));
    }
    tip
}

fn allocation_row(a: &AllocationRow) -> Markup {
    html! {
        tr {
            // The user frame in the cell; the call site and the whole stack in its tooltip.
            td.l.site title=(allocation_tip(a)) {
                (a.user_frame.clone().unwrap_or_else(|| a.site.short()))
            }
            (num(if a.call_no > 0 { a.call_no.to_string() } else { "-".into() }, f64::from(a.call_no)))
            (num(a.pid, f64::from(a.pid)))
            (num(format_size(a.size), a.size as f64))
            td.l { (kind_name(a.kind)) }
            td.l { (state_name(a.state)) }
            (num(count(a.transfers), a.transfers as f64))
            (num(format!("{} / {}", count(a.htod), count(a.dtoh)), a.htod as f64))
            (num(format_size(a.bytes), a.bytes as f64))
            (share_cell(a.pageable_bytes, a.bytes))
            @match a.lifetime_ns {
                Some(ns) => (num(format_duration_ns(ns as f64), ns as f64)),
                None => (num("not seen", f64::MAX)),
            }
            @if a.pinning_pays {
                td.l.reason.yes data-v=(a.net_saving_ns) title=(a.reason) {
                    "yes, +" (format_duration_ns(a.net_saving_ns))
                }
            } @else {
                td.l.reason data-v=(a.net_saving_ns) { "no: " (a.reason) }
            }
        }
    }
}

fn allocation_table(rows: &[AllocationRow], empty: &str) -> Markup {
    if rows.is_empty() {
        return html! { p.muted { (empty) } };
    }
    table(
        &[
            ("call site", true),
            ("call #", false),
            ("pid", false),
            ("size", false),
            ("kind", true),
            ("state", true),
            ("transfers", false),
            ("HtoD / DtoH", false),
            ("bytes", false),
            ("pageable", false),
            ("lifetime", false),
            ("pinning pays", true),
        ],
        html! { @for a in rows { (allocation_row(a)) } },
    )
}

fn sites(r: &Report) -> Markup {
    if r.sites.is_empty() {
        return html! { p.muted { "No call site." } };
    }
    let rows = html! {
        @for s in &r.sites {
            @let tip = match (&s.user_frame, s.user_frames) {
                (Some(f), _) => format!("{}\nallocations made from {f}", s.site.long()),
                (None, n) if n > 1 => format!("{}\nreached from {n} call paths", s.site.long()),
                _ => s.site.long(),
            };
            tr {
                td.l.site title=(tip) { (s.site.short()) }
                (num(count(s.allocations), s.allocations as f64))
                (num(count(s.implicit_records), s.implicit_records as f64))
                (num(count(s.transfers), s.transfers as f64))
                (num(format_size(s.bytes), s.bytes as f64))
                (share_cell(s.pageable_bytes, s.bytes))
                (num(format_size(s.min_size), s.min_size as f64))
                (num(format_size(s.max_size), s.max_size as f64))
                (num(count(u64::from(s.max_call_no)), f64::from(s.max_call_no)))
            }
        }
    };
    table(
        &[
            ("call site", true),
            ("allocations", false),
            ("untracked records", false),
            ("transfers", false),
            ("bytes", false),
            ("pageable", false),
            ("smallest", false),
            ("largest", false),
            ("max call #", false),
        ],
        rows,
    )
}

fn waste(r: &Report) -> Markup {
    let p = &r.pinned_for_nothing;
    if p.sites.is_empty() {
        return html! {};
    }
    let rows = html! {
        @for w in &p.sites {
            tr {
                td.l.site title=(w.site.long()) { (w.site.short()) }
                (num(count(w.allocations), w.allocations as f64))
                (num(count(w.never_transferred), w.never_transferred as f64))
                (num(format_size(w.bytes), w.bytes as f64))
                (num(count(w.transfers), w.transfers as f64))
                (num(format_size(w.max_size), w.max_size as f64))
                (num(format_duration_ns(w.wasted_ns), w.wasted_ns))
            }
        }
    };
    table(
        &[
            ("call site", true),
            ("allocations", false),
            ("never transferred", false),
            ("bytes", false),
            ("transfers", false),
            ("largest", false),
            ("unearned pinning cost", false),
        ],
        rows,
    )
}

fn redundant(r: &Report) -> Markup {
    let x = &r.redundant;
    let rows = html! {
        @for a in &x.allocations {
            @let rd = &a.redundancy;
            @let bytes = rd.redundant_upload_bytes + rd.redundant_download_bytes;
            tr {
                td.l.site title=(a.site.long()) {
                    (a.user_frame.clone().unwrap_or_else(|| a.site.short()))
                }
                (num(format_size(a.size), a.size as f64))
                (num(count(u64::from(rd.uploads)), f64::from(rd.uploads)))
                (num(count(u64::from(rd.redundant_uploads)), f64::from(rd.redundant_uploads)))
                (num(count(u64::from(rd.downloads)), f64::from(rd.downloads)))
                (num(count(u64::from(rd.redundant_downloads)), f64::from(rd.redundant_downloads)))
                (num(format_size(bytes), bytes as f64))
                (num(format_duration_ns(a.wasted_ns), a.wasted_ns))
                td.l { (a.advice) }
            }
        }
    };
    html! {
        p { (x.note) }
        @if !x.allocations.is_empty() {
            (table(
                &[
                    ("allocation", true),
                    ("size", false),
                    ("uploads", false),
                    ("redundant", false),
                    ("downloads", false),
                    ("redundant", false),
                    ("bytes", false),
                    ("est. time wasted", false),
                    ("what to do", true),
                ],
                rows,
            ))
        }
    }
}

fn pool(p: &crate::pool::PoolSection) -> Markup {
    let s = &p.stats;
    let rows = html! {
        tr { td.l { "pinned RAM served via the pool (peak)" } (num(format_size(p.pinned_bytes_via_pool_peak), p.pinned_bytes_via_pool_peak as f64)) }
        tr { td.l { "requests served from the pool" } (num(count(s.buffers), s.buffers as f64)) }
        tr { td.l { "GPU page tables kept by the service instead (est.)" } (num(format_size(p.gpu_pagetable_bytes_moved_estimate), p.gpu_pagetable_bytes_moved_estimate as f64)) }
        tr { td.l { "GPU page tables saved on the node by shared buffers (est.)" } (num(format_size(p.gpu_pagetable_bytes_saved_estimate), p.gpu_pagetable_bytes_saved_estimate as f64)) }
        tr { td.l { "copies done by the service" } (num(count(s.copies), s.copies as f64)) }
        tr { td.l { "requests pinned in-process instead (fallback)" } (num(count(s.alloc_fallbacks), s.alloc_fallbacks as f64)) }
        tr { td.l { "pool buffers registered in the program (fallback)" } (num(count(s.buffers_registered_here), s.buffers_registered_here as f64)) }
    };
    html! {
        p { (p.note) }
        (table(&[("", true), ("", false)], rows))
    }
}

fn source(r: &Report) -> Markup {
    let stats = html! {
        @for (k, v) in &r.source.stats {
            tr {
                td class=(if r.source.losses.contains_key(k) { "l loss" } else { "l" }) { (k) }
                (num(count(*v), *v as f64))
            }
        }
    };
    html! {
        p { (events_sentence(r)) }
        @if r.source.stats.is_empty() {
            p.muted { "No source statistics recorded in this history." }
        } @else {
            (table(&[("statistic", true), ("value", false)], stats))
        }
        @if r.source.warnings.is_empty() {
            p.muted { "No drops or losses reported." }
        } @else {
            ul.warnings {
                @for w in &r.source.warnings { li { (w) } }
            }
        }
    }
}
