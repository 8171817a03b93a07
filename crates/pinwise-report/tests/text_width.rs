//! The text report fits the terminal: at 60, 80 and 120 columns no line is wider, the
//! columns that matter (names, sizes, bytes, whether pinning pays) are there, names keep
//! their meaningful end; `--wide` shows every column and whole names.
mod common;

use common::*;
use pinwise_core::fingerprint::Redundancy;
use pinwise_core::{CostModel, ModuleIdentity};
use pinwise_report::layout::Layout;
use pinwise_report::redundant::{RedundantRow, RedundantSiteRow};
use pinwise_report::text::{render_with, TextOptions};
use pinwise_report::{
    build_report, Progress, Report, ReportOptions, SourceLocation, SourceResolver,
};

const NAMESPACE: &str = "torch_extensions::data_pipeline::prefetch";

/// Names the scenario's sites as a C++ code base with long namespaces and paths would.
struct LongSymbols;

impl SourceResolver for LongSymbols {
    fn resolve(&mut self, module: &ModuleIdentity, offset: u64) -> Option<SourceLocation> {
        if module.path != APP {
            return None;
        }
        let function = match offset {
            HOT_SITE => "load_batch",
            PINNED_SITE => "make_staging",
            REGISTERED_SITE => "register_weights",
            SMALL_SITE => "small_params",
            _ => return None,
        };
        Some(SourceLocation {
            function: format!("{NAMESPACE}::BatchLoader<float>::{function}"),
            file: Some("/home/someone/src/torch_extensions/data_pipeline/loader.cc".into()),
            line: Some(41),
        })
    }
}

/// The scenario's report, with redundant copies (as a fingerprinted run would have) of the
/// allocations from two call sites.
fn report() -> Report {
    let s = scenario();
    let mut r = build_report(
        &s.history,
        info("/home/someone/experiments/2026-11-25/a-rather-long-directory-name/run.bin"),
        &CostModel::builtin(),
        &ReportOptions::default(),
        &mut LongSymbols,
        &mut Progress::hidden(),
    );
    // A stack as a Python program's would be, with long paths.
    r.hotspots[0].stack = vec![
        format!("{NAMESPACE}::BatchLoader<float>::load_batch (loader.cc:41)"),
        "prefetch_next (/home/someone/src/torch_extensions/data_pipeline/python/loader.py:120)"
            .into(),
        "<module> (/home/someone/experiments/2026-11-25/train_a_rather_large_model.py:7)".into(),
    ];
    r.redundant.mode = "sampled";
    for a in r.hotspots.clone().iter().take(2) {
        r.redundant.allocations.push(RedundantRow {
            id: 0,
            pid: a.pid,
            site: a.site.clone(),
            user_frame: None,
            size: a.size,
            redundancy: Redundancy {
                uploads: 70,
                redundant_uploads: 69,
                redundant_upload_bytes: 69 * a.size,
                ..Redundancy::default()
            },
            wasted_ns: 1e8,
            advice: "upload it once and keep it on the device: its bytes did not change".into(),
        });
        r.redundant.sites.push(RedundantSiteRow {
            site: a.site.clone(),
            allocations: 1,
            redundant_copies: 69,
            bytes: 69 * a.size,
            wasted_ns: 1e8,
        });
    }
    r
}

fn render(r: &Report, width: usize, wide: bool) -> String {
    render_options(r, width, wide, false)
}

fn render_options(r: &Report, width: usize, wide: bool, stacks: bool) -> String {
    render_with(
        r,
        TextOptions {
            stacks,
            layout: Layout {
                width,
                wide,
                color: false,
            },
        },
    )
}

/// The line of `text` after the one starting with `title` that starts with `column`: a
/// table's titles.
fn titles<'a>(text: &'a str, title: &str, column: &str) -> &'a str {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(title));
    lines
        .find(|l| l.starts_with(column))
        .unwrap_or_else(|| panic!("no {column:?} table after {title:?}:\n{text}"))
}

#[test]
fn no_line_is_wider_than_the_terminal_and_what_matters_is_there() {
    let r = report();
    for width in [60, 80, 120] {
        let text = render(&r, width, false);
        for line in text.lines() {
            assert!(
                line.chars().count() <= width,
                "{} columns in {width}: {line:?}\n{text}",
                line.chars().count()
            );
        }
        let hot = titles(&text, "HOTSPOTS", "allocated at");
        for column in ["size", "bytes", "pin pays"] {
            assert!(
                hot.contains(column),
                "{width}: hotspots lack {column}: {hot}"
            );
        }
        let sites = titles(&text, "CALL SITES", "allocated at");
        for column in ["xfers", "bytes"] {
            assert!(
                sites.contains(column),
                "{width}: sites lack {column}: {sites}"
            );
        }
        let redundant = titles(&text, "REDUNDANT TRANSFERS", "allocation");
        for column in ["redund. up", "redund. down", "wasted"] {
            assert!(
                redundant.contains(column),
                "{width}: redundant copies lack {column}: {redundant}"
            );
        }
        assert!(text.contains("by call site:"), "{text}");
        let directions = titles(&text, "TRANSFERS BY DIRECTION", "direction");
        for column in ["bytes", "est. time", "saving"] {
            assert!(
                directions.contains(column),
                "{width}: directions lack {column}: {directions}"
            );
        }
        // Names keep their end: the function's own name, whatever the namespace.
        let hot_rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("HOTSPOTS"))
            .skip(3)
            .take(3)
            .collect();
        assert!(
            hot_rows.iter().any(|l| l.contains("::load_batch")),
            "{width}: {hot_rows:#?}"
        );
        assert!(
            !text.contains(NAMESPACE),
            "{width}: a whole long name\n{text}"
        );
        // Narrow terminals say which columns they left out; 120 columns leave out none.
        assert_eq!(
            text.contains("not shown at this width"),
            width < 100,
            "{width}:\n{text}"
        );
    }
}

#[test]
fn wide_shows_every_column_and_whole_names() {
    let r = report();
    let text = render(&r, 60, true);
    assert!(text.contains(&format!(
        "{NAMESPACE}::BatchLoader<float>::load_batch (loader.cc:41)"
    )));
    assert!(!text.contains("not shown at this width"), "{text}");
    let hot = titles(&text, "HOTSPOTS", "allocated at");
    for column in [
        "call#", "size", "kind", "xfers", "bytes", "pageable", "pin pays",
    ] {
        assert!(hot.contains(column), "{hot}");
    }
    assert!(
        text.contains("/home/someone/experiments/2026-11-25/a-rather-long-directory-name/run.bin")
    );
}

#[test]
fn the_text_at_100_columns_is_as_designed() {
    // Not a terminal and no COLUMNS: 100 columns, every column of every table.
    let text = pinwise_report::text::render(&report());
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    assert!(!text.contains("not shown at this width"), "{text}");
    let hot = titles(&text, "HOTSPOTS", "allocated at");
    assert!(hot.contains("call#") && hot.contains("pageable"), "{hot}");
}

#[test]
fn stacks_fit_too_keeping_each_frames_end_and_are_whole_with_wide() {
    let r = report();
    for width in [60, 80, 120] {
        let text = render_options(&r, width, false, true);
        assert!(
            text.lines().all(|l| l.chars().count() <= width),
            "{width}:\n{text}"
        );
        assert!(text.contains("#0 "), "{width}: no stack\n{text}");
        assert!(text.contains("loader.py:120)"), "{width}:\n{text}");
        assert!(
            text.contains("train_a_rather_large_model.py:7)"),
            "{width}:\n{text}"
        );
    }
    let wide = render_options(&r, 60, true, true);
    assert!(wide.contains(
        "#2 <module> (/home/someone/experiments/2026-11-25/train_a_rather_large_model.py:7)"
    ));
}
