//! The HTML report: one self-contained page (inline CSS, SVG and a little JS; a Content
//! Security Policy that forbids loading anything), with the text report's content and
//! four plots.
//!
//! The page's script makes the tables sortable and the plots zoomable (wheel), pannable (drag)
//! and restorable (double click), and checks the page: when every plot and table is in place,
//! no table or plot is clipped at the window's width, and each plot zooms, it sets
//! `data-pinwise-check="ok"` on the `<html>` element and logs `pinwise-report: ok` to the
//! console; otherwise it logs an error saying what is wrong.
//! The test suite loads the page in headless Chromium and reads both.

use std::fmt::Write as _;
use std::path::Path;

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

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root { --fg: #222; --muted: #666; --line: #ddd; --accent: #3182bd; --warn: #b45309; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 24px 32px 48px; max-width: 1180px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
p { margin: 6px 0; }
.muted { color: var(--muted); }
.banner { padding: 8px 12px; border-radius: 6px; background: #f3f6fa; margin: 10px 0; }
.banner.warn { background: #fff4e5; border: 1px solid #f0b46b; color: #6b3a00; font-weight: 600; }
.cards { display: grid; grid-template-columns: repeat(4, 1fr); gap: 10px; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 12.5px; }
th, td { padding: 4px 6px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #fafafa; cursor: pointer; user-select: none; position: sticky; top: 0; }
th.sorted-asc::after { content: " \25B2"; font-size: 10px; }
th.sorted-desc::after { content: " \25BC"; font-size: 10px; }
td.l, th.l { text-align: left; }
td.site { max-width: 300px; overflow: hidden; text-overflow: ellipsis; }
td.reason { white-space: normal; min-width: 140px; max-width: 220px; font-size: 12px; }
.scroll { overflow-x: auto; }
.yes { color: #1a7f37; font-weight: 600; }
figure { margin: 12px 0 20px; }
figure svg { width: 100%; height: auto; display: block; }
figure svg.zoomable { cursor: grab; touch-action: none; }
figcaption { color: var(--muted); font-size: 12.5px; margin-top: 4px; }
code { font-size: 12.5px; }
.hint { font-size: 11.5px; }
th { white-space: normal; vertical-align: bottom; }
/* Nothing clipped from 1000 px windows up (checked by the page's script and the browser test
   at 1000, 1400 and 1920 px): narrower padding, names and reasons below 1240 px. */
@media (max-width: 1240px) {
  body { padding: 20px 16px 40px; }
  th, td { padding: 3px 4px; }
  td.site { max-width: 220px; }
  td.reason { min-width: 120px; max-width: 180px; }
}
.warnings li, td.loss { color: var(--warn); font-weight: 600; }
"#;

const SCRIPT: &str = r#"
(function () {
  "use strict";
  function cellValue(td) {
    var v = td.getAttribute("data-v");
    if (v !== null && v !== "") { return parseFloat(v); }
    return td.textContent.trim().toLowerCase();
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var desc = !th.classList.contains("sorted-desc");
    rows.sort(function (a, b) {
      var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
      var r = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return desc ? -r : r;
    });
    Array.prototype.forEach.call(th.parentNode.children, function (h) {
      h.classList.remove("sorted-asc", "sorted-desc");
    });
    th.classList.add(desc ? "sorted-desc" : "sorted-asc");
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
  // Zoom and pan on every plot: the wheel zooms around the pointer, a drag pans, a double
  // click shows the whole plot again. The view never leaves the plot.
  function zoomable(svg) {
    var vb = svg.viewBox && svg.viewBox.baseVal;
    if (!vb || !vb.width || !vb.height) { return null; }
    var home = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    function show(x, y, w, h) {
      w = Math.min(home.w, w); h = Math.min(home.h, h);
      x = Math.max(home.x, Math.min(home.x + home.w - w, x));
      y = Math.max(home.y, Math.min(home.y + home.h - h, y));
      svg.setAttribute("viewBox", x + " " + y + " " + w + " " + h);
    }
    function at(e) {
      var r = svg.getBoundingClientRect();
      return { x: vb.x + (e.clientX - r.left) / r.width * vb.width,
               y: vb.y + (e.clientY - r.top) / r.height * vb.height };
    }
    svg.addEventListener("wheel", function (e) {
      e.preventDefault();
      var p = at(e), k = e.deltaY < 0 ? 0.8 : 1.25;
      var w = Math.min(home.w, vb.width * k), h = Math.min(home.h, vb.height * k);
      show(p.x - (p.x - vb.x) * w / vb.width, p.y - (p.y - vb.y) * h / vb.height, w, h);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("pointerdown", function (e) {
      drag = { x: e.clientX, y: e.clientY, vx: vb.x, vy: vb.y };
      if (svg.setPointerCapture && e.pointerId !== undefined) {
        try { svg.setPointerCapture(e.pointerId); } catch (err) { /* synthetic event */ }
      }
    });
    svg.addEventListener("pointermove", function (e) {
      if (!drag) { return; }
      var r = svg.getBoundingClientRect();
      show(drag.vx - (e.clientX - drag.x) / r.width * vb.width,
           drag.vy - (e.clientY - drag.y) / r.height * vb.height, vb.width, vb.height);
    });
    svg.addEventListener("pointerup", function () { drag = null; });
    svg.addEventListener("pointercancel", function () { drag = null; });
    svg.addEventListener("dblclick", function () { show(home.x, home.y, home.w, home.h); });
    svg.classList.add("zoomable");
    return home;
  }
  var problems = [];
  var expected = parseInt(document.documentElement.getAttribute("data-plots"), 10);
  var plots = document.querySelectorAll("figure.plot svg");
  var width = document.documentElement.clientWidth;
  if (plots.length !== expected) { problems.push(plots.length + " plots of " + expected); }
  Array.prototype.forEach.call(plots, function (svg, i) {
    if (svg.childElementCount === 0) { problems.push("plot " + (i + 1) + " is empty"); }
    var box = svg.getBoundingClientRect();
    if (box.width < 100 || box.height < 20) { problems.push("plot " + (i + 1) + " is not laid out"); }
    if (box.right > width + 0.5) { problems.push("plot " + (i + 1) + " is clipped at " + width + " px"); }
    var home = zoomable(svg);
    if (!home) { problems.push("plot " + (i + 1) + " has no viewBox to zoom"); return; }
    // The zoom works: a wheel step in the middle narrows the view, a double click restores it.
    var mid = { clientX: box.left + box.width / 2, clientY: box.top + box.height / 2,
                deltaY: -100, bubbles: true, cancelable: true };
    svg.dispatchEvent(new WheelEvent("wheel", mid));
    var zoomed = svg.viewBox.baseVal.width;
    svg.dispatchEvent(new MouseEvent("dblclick", mid));
    if (!(zoomed < home.w) || svg.viewBox.baseVal.width !== home.w) {
      problems.push("plot " + (i + 1) + " does not zoom");
    }
  });
  if (tables.length === 0) { problems.push("no table"); }
  // Nothing clipped: every table fits its column without a scroll bar, and the page fits the
  // window.
  Array.prototype.forEach.call(document.querySelectorAll(".scroll"), function (div, i) {
    if (div.scrollWidth > div.clientWidth + 1) {
      problems.push("table " + (i + 1) + " is clipped at " + width + " px (" + div.scrollWidth +
                    " px wide in " + div.clientWidth + ")");
    }
  });
  if (document.documentElement.scrollWidth > width + 1) {
    problems.push("the page is " + document.documentElement.scrollWidth + " px wide in a " + width + " px window");
  }
  if (problems.length === 0) {
    document.documentElement.setAttribute("data-pinwise-check", "ok");
    console.log("pinwise-report: ok (" + plots.length + " plots, " + tables.length + " tables, " +
                width + " px, nothing clipped, plots zoom)");
  } else {
    document.documentElement.setAttribute("data-pinwise-check", "failed: " + problems.join("; "));
    console.error("pinwise-report: " + problems.join("; "));
  }
})();
"#;

/// The page, as a string.
pub fn render(report: &Report) -> Result<String, ReportError> {
    let traffic = plots::traffic(report)?;
    let lifetimes = plots::lifetimes(report)?;
    let sizes = plots::size_classes(report)?;
    let curve = plots::budget_curve(report)?;
    let redundant_plot = plots::redundant(report)?;

    let mut h = String::with_capacity(256 * 1024);
    let title = format!("pinwise report: {}", report.input.path);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\" data-plots=\"{PLOTS}\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&title)
    );
    header(&mut h, report);
    cards(&mut h, report);

    section(&mut h, "Transfers by direction");
    directions(&mut h, report);
    let _ = writeln!(h, "<p>{}</p>", escape(&saving_sentence(report)));
    figure(
        &mut h,
        &traffic,
        &format!(
            "Bytes moved over time, by direction and host memory state: a bar's height is the \
             bytes of the copies issued in its bucket of {} (a copy counts whole in the bucket \
             where it started; the plot shows no rate).{}",
            format_duration_ns(report.plots.traffic.bucket_ns as f64),
            if report.plots.traffic.incomplete {
                " Some transfers are missing: events past the per-allocation cap are counted \
                 but not kept."
            } else {
                ""
            }
        ),
    );

    section(&mut h, "Pinned budget the smart allocator would need");
    let _ = writeln!(h, "<p>{}</p>", escape(&budget_sentence(report)));
    figure(
        &mut h,
        &curve,
        "Net saving against the pinned budget: allocations taken best saving per pinned byte \
         first (the order of core's plan); a budget is the most bytes they hold pinned at once. \
         The curve is a lower bound of the plan at each budget and passes through the red point, \
         core's plan at the chosen budget.",
    );

    section(&mut h, "Hotspots: the allocations with the most transfers");
    allocation_table(&mut h, &report.hotspots, "No allocation was transferred.");
    figure(
        &mut h,
        &lifetimes,
        &format!(
            "Lifetimes of the {} allocations that moved the most bytes, one mark per transfer \
             (paler bars: end not seen).",
            report.plots.lifetimes.len()
        ),
    );

    section(
        &mut h,
        "Coldspots: the allocations with the fewest transfers (largest first)",
    );
    allocation_table(&mut h, &report.coldspots, "No allocation recorded.");
    figure(
        &mut h,
        &sizes,
        &format!(
            "Allocations by size class: hot when their transfers pay back pinning by {} (policy \
             of pinwise-core, cost model {}), warm when transferred too little, cold when never.",
            crate::text::method_name(report.budget.method),
            report.cost_model
        ),
    );

    section(&mut h, "Call sites by bytes transferred");
    sites(&mut h, report);

    section(
        &mut h,
        "Pinned for nothing: pinned memory whose transfers did not pay back its pinning",
    );
    let _ = writeln!(h, "<p>{}</p>", escape(&waste_sentence(report)));
    waste(&mut h, report);

    section(
        &mut h,
        "Redundant transfers: copies whose bytes the other side already had",
    );
    redundant(&mut h, report);
    figure(
        &mut h,
        &redundant_plot,
        &format!(
            "Fingerprinted copies of the allocations with the most time wasted on redundant \
             copies ({} in all, cost model {}).",
            format_duration_ns(report.redundant.wasted_ns),
            report.cost_model
        ),
    );

    section(
        &mut h,
        "Source: what the tracer and the history say about themselves",
    );
    source(&mut h, report);

    let _ = write!(
        h,
        "<p class=\"muted\">Made by pinwise {}. Sites show function (file:line) when symbols were \
         found, else module+offset.</p>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        escape(report.pinwise_version)
    );
    Ok(h)
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

fn section(h: &mut String, title: &str) {
    let _ = writeln!(h, "<h2>{}</h2>", escape(title));
}

fn figure(h: &mut String, svg: &str, caption: &str) {
    let _ = writeln!(
        h,
        "<figure class=\"plot\">{svg}<figcaption>{} <span class=\"hint\">Wheel: zoom; drag: \
         pan; double click: the whole plot.</span></figcaption></figure>",
        escape(caption)
    );
}

fn header(h: &mut String, r: &Report) {
    let _ = writeln!(
        h,
        "<h1>pinwise report</h1>\n<p><code>{}</code> <span class=\"muted\">({}, {})</span></p>\n<p>{}</p>\n\
         <p class=\"muted\">cost model: {}</p>",
        escape(&r.input.path),
        escape(r.input.kind.describe()),
        escape(&format_size(r.input.file_bytes)),
        escape(&overview_sentence(r)),
        escape(&r.cost_model)
    );
    let class = if r.provenance.cpu_standin {
        "banner warn"
    } else {
        "banner"
    };
    let _ = write!(h, "<div class=\"{class}\">{}", escape(&r.provenance.note));
    if !r.provenance.evidence.is_empty() {
        let _ = write!(
            h,
            " <span class=\"muted\">(evidence: {})</span>",
            escape(&r.provenance.evidence.join("; "))
        );
    }
    let _ = writeln!(h, "</div>");
}

fn cards(h: &mut String, r: &Report) {
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
    let _ = writeln!(h, "<div class=\"cards\">");
    for (v, k) in items {
        let _ = writeln!(
            h,
            "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
            escape(&v),
            escape(&k)
        );
    }
    let _ = writeln!(h, "</div>");
}

/// A cell: shown text, and the value sorting uses.
fn num(shown: String, value: f64) -> String {
    format!("<td data-v=\"{value}\">{}</td>", escape(&shown))
}

fn text_cell(shown: &str, class: &str) -> String {
    format!("<td class=\"{class}\">{}</td>", escape(shown))
}

fn table_head(h: &mut String, columns: &[(&str, bool)]) {
    let _ = write!(
        h,
        "<div class=\"scroll\"><table class=\"sortable\"><thead><tr>"
    );
    for (name, left) in columns {
        let class = if *left { " class=\"l\"" } else { "" };
        let _ = write!(h, "<th{class}>{}</th>", escape(name));
    }
    let _ = writeln!(h, "</tr></thead><tbody>");
}

fn table_end(h: &mut String) {
    let _ = writeln!(h, "</tbody></table></div>");
}

fn directions(h: &mut String, r: &Report) {
    table_head(
        h,
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
    );
    for d in &r.directions {
        let host = d.attributed.bytes();
        let share = if host > 0 {
            d.attributed.pageable_bytes as f64 / host as f64
        } else {
            0.0
        };
        let time = |v: Option<f64>| match v {
            Some(ns) => num(format_duration_ns(ns), ns),
            None => num("-".into(), 0.0),
        };
        let saving = match (d.estimated_ns, d.estimated_if_pinned_ns) {
            (Some(a), Some(b)) => Some(a - b),
            _ => None,
        };
        let _ = writeln!(
            h,
            "<tr>{}{}{}{}{}{}{}{}</tr>",
            text_cell(d.direction.as_str(), "l"),
            num(count(d.transfers), d.transfers as f64),
            num(format_size(d.bytes), d.bytes as f64),
            num(if host > 0 { percent(share) } else { "-".into() }, share),
            time(d.estimated_ns),
            time(d.estimated_if_pinned_ns),
            time(saving),
            num(
                count(d.unattributed_transfers),
                d.unattributed_transfers as f64
            ),
        );
    }
    table_end(h);
}

fn allocation_table(h: &mut String, rows: &[AllocationRow], empty: &str) {
    if rows.is_empty() {
        let _ = writeln!(h, "<p class=\"muted\">{}</p>", escape(empty));
        return;
    }
    table_head(
        h,
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
    );
    for a in rows {
        let pageable = if a.bytes > 0 {
            a.pageable_bytes as f64 / a.bytes as f64
        } else {
            0.0
        };
        let pays = if a.pinning_pays {
            format!(
                "<td class=\"l reason yes\" data-v=\"{}\" title=\"{}\">yes, +{}</td>",
                a.net_saving_ns,
                escape(&a.reason),
                escape(&format_duration_ns(a.net_saving_ns))
            )
        } else {
            format!(
                "<td class=\"l reason\" data-v=\"{}\">{}</td>",
                a.net_saving_ns,
                escape(&format!("no: {}", a.reason))
            )
        };
        // The user frame in the cell; the call site and the whole stack in its tooltip.
        let mut tip = format!("call site: {}", a.site.long());
        for (i, f) in a.stack.iter().enumerate() {
            tip.push_str(&format!("\n#{i} {f}"));
        }
        let _ = writeln!(
            h,
            "<tr><td class=\"l site\" title=\"{}\">{}</td>{}{}{}{}{}{}{}{}{}{}{pays}</tr>",
            escape(&tip),
            escape(a.user_frame.as_deref().unwrap_or(&a.site.short())),
            num(
                if a.call_no > 0 {
                    a.call_no.to_string()
                } else {
                    "-".into()
                },
                f64::from(a.call_no)
            ),
            num(a.pid.to_string(), f64::from(a.pid)),
            num(format_size(a.size), a.size as f64),
            text_cell(kind_name(a.kind), "l"),
            text_cell(state_name(a.state), "l"),
            num(count(a.transfers), a.transfers as f64),
            num(
                format!("{} / {}", count(a.htod), count(a.dtoh)),
                a.htod as f64
            ),
            num(format_size(a.bytes), a.bytes as f64),
            num(
                if a.bytes > 0 {
                    percent(pageable)
                } else {
                    "-".into()
                },
                pageable
            ),
            match a.lifetime_ns {
                Some(ns) => num(format_duration_ns(ns as f64), ns as f64),
                None => num("not seen".into(), f64::MAX),
            },
        );
    }
    table_end(h);
}

fn sites(h: &mut String, r: &Report) {
    if r.sites.is_empty() {
        let _ = writeln!(h, "<p class=\"muted\">No call site.</p>");
        return;
    }
    table_head(
        h,
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
    );
    for s in &r.sites {
        let pageable = if s.bytes > 0 {
            s.pageable_bytes as f64 / s.bytes as f64
        } else {
            0.0
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"l site\" title=\"{}\">{}</td>{}{}{}{}{}{}{}{}</tr>",
            escape(&match (&s.user_frame, s.user_frames) {
                (Some(f), _) => format!("{}\nallocations made from {f}", s.site.long()),
                (None, n) if n > 1 => format!("{}\nreached from {n} call paths", s.site.long()),
                _ => s.site.long(),
            }),
            escape(&s.site.short()),
            num(count(s.allocations), s.allocations as f64),
            num(count(s.implicit_records), s.implicit_records as f64),
            num(count(s.transfers), s.transfers as f64),
            num(format_size(s.bytes), s.bytes as f64),
            num(
                if s.bytes > 0 {
                    percent(pageable)
                } else {
                    "-".into()
                },
                pageable
            ),
            num(format_size(s.min_size), s.min_size as f64),
            num(format_size(s.max_size), s.max_size as f64),
            num(count(u64::from(s.max_call_no)), f64::from(s.max_call_no)),
        );
    }
    table_end(h);
}

fn waste(h: &mut String, r: &Report) {
    let p = &r.pinned_for_nothing;
    if p.sites.is_empty() {
        return;
    }
    table_head(
        h,
        &[
            ("call site", true),
            ("allocations", false),
            ("never transferred", false),
            ("bytes", false),
            ("transfers", false),
            ("largest", false),
            ("unearned pinning cost", false),
        ],
    );
    for w in &p.sites {
        let _ = writeln!(
            h,
            "<tr><td class=\"l site\" title=\"{}\">{}</td>{}{}{}{}{}{}</tr>",
            escape(&w.site.long()),
            escape(&w.site.short()),
            num(count(w.allocations), w.allocations as f64),
            num(count(w.never_transferred), w.never_transferred as f64),
            num(format_size(w.bytes), w.bytes as f64),
            num(count(w.transfers), w.transfers as f64),
            num(format_size(w.max_size), w.max_size as f64),
            num(format_duration_ns(w.wasted_ns), w.wasted_ns),
        );
    }
    table_end(h);
}

fn redundant(h: &mut String, r: &Report) {
    let x = &r.redundant;
    let _ = writeln!(h, "<p>{}</p>", escape(&x.note));
    if x.allocations.is_empty() {
        return;
    }
    table_head(
        h,
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
    );
    for a in &x.allocations {
        let rd = &a.redundancy;
        let name = a.user_frame.clone().unwrap_or_else(|| a.site.short());
        let b = rd.redundant_upload_bytes + rd.redundant_download_bytes;
        let _ = writeln!(
            h,
            "<tr><td class=\"l site\" title=\"{}\">{}</td>{}{}{}{}{}{}{}{}</tr>",
            escape(&a.site.long()),
            escape(&name),
            num(format_size(a.size), a.size as f64),
            num(count(u64::from(rd.uploads)), f64::from(rd.uploads)),
            num(
                count(u64::from(rd.redundant_uploads)),
                f64::from(rd.redundant_uploads)
            ),
            num(count(u64::from(rd.downloads)), f64::from(rd.downloads)),
            num(
                count(u64::from(rd.redundant_downloads)),
                f64::from(rd.redundant_downloads)
            ),
            num(format_size(b), b as f64),
            num(format_duration_ns(a.wasted_ns), a.wasted_ns),
            text_cell(&a.advice, "l"),
        );
    }
    table_end(h);
}

fn source(h: &mut String, r: &Report) {
    let _ = writeln!(h, "<p>{}</p>", escape(&events_sentence(r)));
    if r.source.stats.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"muted\">No source statistics recorded in this history.</p>"
        );
    } else {
        table_head(h, &[("statistic", true), ("value", false)]);
        for (k, v) in &r.source.stats {
            let class = if r.source.losses.contains_key(k) {
                "l loss"
            } else {
                "l"
            };
            let _ = writeln!(
                h,
                "<tr>{}{}</tr>",
                text_cell(k, class),
                num(count(*v), *v as f64)
            );
        }
        table_end(h);
    }
    if r.source.warnings.is_empty() {
        let _ = writeln!(h, "<p class=\"muted\">No drops or losses reported.</p>");
    } else {
        let _ = writeln!(h, "<ul class=\"warnings\">");
        for w in &r.source.warnings {
            let _ = writeln!(h, "<li>{}</li>", escape(w));
        }
        let _ = writeln!(h, "</ul>");
    }
}
