//! The diff as text: [`render_text`], [`render_text_with`].

use std::fmt::Write as _;

use super::model::*;
use crate::text::{plural, wrap, Align, Table};
use crate::units::{count, fit, format_duration_ns, format_size, percent};

/// The text rendering of a diff, 100 columns wide.
pub fn render_text(d: &DiffReport) -> String {
    render_text_with(d, crate::layout::Layout::default())
}

/// The comparison for a terminal of `layout`'s width.
pub fn render_text_with(d: &DiffReport, layout: crate::layout::Layout) -> String {
    let out = crate::layout::with(layout, || render_now(d));
    debug_assert!(
        layout.wide
            || layout.color
            || out
                .lines()
                .all(|l| l.chars().count() <= layout.width.max(100)),
        "a line wider than {}",
        layout.width
    );
    out
}

fn render_now(d: &DiffReport) -> String {
    let mut out = String::new();
    let side = |name: &str, s: &Side| {
        format!(
            "{name}: {} ({}): {}, {} distinct allocations (call site and call number) at {} sites, {} allocations, {} transfers, {}",
            s.input.path,
            s.input.kind.describe(),
            plural(s.processes, "process", "processes"),
            count(s.tags),
            count(s.sites),
            count(s.allocations),
            count(s.transfers),
            format_size(s.bytes)
        )
    };
    let _ = writeln!(out, "{}", wrap(&side("A", &d.a), 3));
    let _ = writeln!(out, "{}", wrap(&side("B", &d.b), 3));
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", wrap(&d.verdict, 0));
    for m in &d.module_changes {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!("! {}: {} in A, {} in B", m.path, m.key_a, m.key_b),
                2
            )
        );
    }

    let _ = writeln!(out);
    let _ = writeln!(out, "CALL SITES (changes beyond {})", percent(d.threshold));
    let mut counts: Vec<String> = d
        .site_counts
        .iter()
        .map(|(c, n)| format!("{} {}", count(*n), c.as_str()))
        .collect();
    counts.push(format!("{} unchanged", count(d.sites_unchanged)));
    let _ = writeln!(out, "{}", wrap(&counts.join(", "), 2));
    if !d.sites.is_empty() {
        let t = Table::new(&[
            ("call site", 27, Align::Left),
            ("change", 16, Align::Left),
            ("allocs/proc A -> B", 19, Align::Right),
            ("xfers/alloc A -> B", 18, Align::Right),
            ("mean size A -> B", 16, Align::Right),
        ])
        .optional(&[4, 2, 3]);
        let full: Vec<String> = d.sites.iter().map(|s| s.site.short()).collect();
        let t = t.with_names(full.iter().map(String::as_str));
        let _ = writeln!(out, "{}", t.header());
        for s in &d.sites {
            let pair = |f: &dyn Fn(&SiteSide) -> String| {
                format!(
                    "{}->{}",
                    s.a.as_ref().map_or("-".into(), f),
                    s.b.as_ref().map_or("-".into(), f)
                )
            };
            let changes: Vec<&str> = s.changes.iter().map(|c| c.as_str()).collect();
            let _ = writeln!(
                out,
                "{}",
                t.row(&[
                    s.site.short_fit(t.name_width()),
                    changes.join(","),
                    pair(&|x| compact(x.allocations_per_process)),
                    pair(&|x| compact(x.transfers_per_allocation)),
                    pair(&|x| format_size(x.mean_size).replace(' ', "")),
                ])
            );
        }
    }

    let tg = &d.tags;
    let _ = writeln!(out);
    let _ = writeln!(out, "TAGS (call site + call number)");
    let _ = writeln!(
        out,
        "{}",
        wrap(
            &format!(
                "{} in both, {} only in A, {} only in B; of those in both: {} resized, {} hotter, {} colder",
                count(tg.matched),
                count(tg.only_a),
                count(tg.only_b),
                count(tg.resized),
                count(tg.hotter),
                count(tg.colder)
            ),
            2
        )
    );

    let p = &d.pinning;
    let _ = writeln!(out);
    let _ = writeln!(out, "PINNING ADVICE (cost model, no budget)");
    let _ = writeln!(
        out,
        "{}",
        wrap(
            &format!(
                "A: {} allocations pay back (net {}); B confirms {} of them ({}); B: {} allocations pay back.",
                count(p.pinned_a),
                format_duration_ns(p.saving_a_ns),
                count(p.confirmed),
                percent(p.share),
                count(p.pinned_b)
            ),
            2
        )
    );
    for (title, rows) in [
        ("advised by A, not confirmed by B", &p.lost),
        ("paying back in B, not advised by A", &p.missed),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{title}:");
        let t = Table::new(&[
            ("call site", 34, Align::Left),
            ("call#", 6, Align::Right),
            ("size A->B", 19, Align::Right),
            ("net A", 9, Align::Right),
            ("net B", 9, Align::Right),
            ("in B", 18, Align::Left),
        ])
        .optional(&[2, 5, 1]);
        let full: Vec<String> = rows.iter().map(|r| r.site.short()).collect();
        let t = t.with_names(full.iter().map(String::as_str));
        let _ = writeln!(out, "{}", t.header());
        for r in rows {
            let size = format!(
                "{}->{}",
                r.size_a
                    .map_or("-".into(), |s| format_size(s).replace(' ', "")),
                r.size_b
                    .map_or("-".into(), |s| format_size(s).replace(' ', ""))
            );
            let ns = |v: Option<f64>| v.map_or("-".into(), format_duration_ns);
            let _ = writeln!(
                out,
                "{}",
                t.row(&[
                    r.site.short_fit(t.name_width()),
                    r.call_no.to_string(),
                    size,
                    ns(r.net_a_ns),
                    ns(r.net_b_ns),
                    fit(&r.verdict_b, 18, false),
                ])
            );
        }
    }
    out
}

/// A number in at most 6 characters: `0.5`, `12.3`, `1.2k`, `3.4M`.
fn compact(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1}")
    } else if v < 1000.0 {
        format!("{v:.0}")
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{:.1}M", v / 1e6)
    }
}
