//! The HTML page's structure and escaping, without a browser: every section there, and
//! hostile names (a call site, a file, the input's path, a source statistic) shown as text,
//! never as markup.
mod common;

use common::*;
use pinwise_core::{CostModel, ModuleIdentity};
use pinwise_report::{build_report, html, Progress, ReportOptions, SourceLocation, SourceResolver};

const HOSTILE_FUNCTION: &str = "<script>alert(\"x\")</script>&'";
const HOSTILE_FILE: &str = "/src/\"q\"&'<b>.cc";
const HOSTILE_INPUT: &str = "<img src=x onerror=alert(1)>\"&'.bin";

/// Names every scenario site with markup, quotes and ampersands.
struct HostileSymbols;

impl SourceResolver for HostileSymbols {
    fn resolve(&mut self, module: &ModuleIdentity, _offset: u64) -> Option<SourceLocation> {
        (module.path == APP).then(|| SourceLocation {
            function: HOSTILE_FUNCTION.into(),
            file: Some(HOSTILE_FILE.into()),
            line: Some(7),
        })
    }
}

fn hostile_page() -> String {
    let mut s = scenario();
    s.history
        .set_source_stats([("tracer.<b>\"drops\"</b>", 5u64), ("tracer.records", 120)]);
    let r = build_report(
        &s.history,
        info(HOSTILE_INPUT),
        &CostModel::builtin(),
        &ReportOptions::default(),
        &mut HostileSymbols,
        &mut Progress::hidden(),
    );
    html::render(&r).unwrap()
}

#[test]
fn hostile_names_are_text_never_markup() {
    let page = hostile_page();
    // The page's own script is the only script, and no element came from a name.
    assert_eq!(page.matches("<script").count(), 1, "one script only");
    assert!(!page.contains("<img"), "the input's path made an element");
    assert!(!page.contains("<b>"), "a name made an element");
    // Quotes in names never end an attribute, and `&` never starts an entity.
    assert!(!page.contains("alert(\"x\")"), "a raw quote from a name");
    assert!(!page.contains("\"q\""), "a raw quote from a file name");
    // The names are there, escaped: in cells, in tooltips (attributes), in the title.
    let function = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;";
    assert!(
        page.matches(function).count() >= 4,
        "the call site's name is shown escaped in the tables and tooltips"
    );
    assert!(
        page.contains("title=\"call site: &lt;script&gt;alert(&quot;x&quot;)"),
        "an allocation's tooltip names its call site"
    );
    assert!(
        page.contains("&quot;q&quot;&amp;"),
        "the file name, escaped"
    );
    assert!(
        page.contains("<title>pinwise report: &lt;img src=x onerror=alert(1)&gt;&quot;&amp;"),
        "the title names the input, escaped"
    );
    assert!(page.contains("<code>&lt;img src=x onerror=alert(1)&gt;&quot;&amp;"));
    assert!(page.contains("tracer.&lt;b&gt;&quot;drops&quot;&lt;/b&gt;"));
}

#[test]
fn the_page_has_every_section_plot_and_table() {
    let page = hostile_page();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains(&format!(
        "<html lang=\"en\" data-plots=\"{}\">",
        html::PLOTS
    )));
    assert!(page.contains("<meta charset=\"utf-8\">"));
    assert!(page.contains(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
    ));
    assert!(page.contains("<h1>pinwise report</h1>"));
    // The sections, in order.
    let sections = [
        "Transfers by direction",
        "Pinned budget the smart allocator would need",
        "Hotspots: the allocations with the most transfers",
        "Coldspots: the allocations with the fewest transfers (largest first)",
        "Call sites by bytes transferred",
        "Pinned for nothing: pinned memory whose transfers did not pay back its pinning",
        "Redundant transfers: copies whose bytes the other side already had",
        "Source: what the tracer and the history say about themselves",
    ];
    let mut at = 0;
    for s in sections {
        let found = page[at..]
            .find(&format!("<h2>{s}</h2>"))
            .unwrap_or_else(|| panic!("section {s:?} missing or out of order"));
        at += found;
    }
    assert_eq!(page.matches("<h2>").count(), sections.len());
    assert_eq!(
        page.matches("<figure class=\"plot\"><svg").count(),
        html::PLOTS
    );
    assert_eq!(page.matches("Wheel: zoom; drag: pan").count(), html::PLOTS);
    // Directions, hotspots, coldspots, sites, pinned for nothing, source statistics.
    assert_eq!(
        page.matches("<div class=\"scroll\"><table class=\"sortable\"><thead><tr>")
            .count(),
        6
    );
    // Eight cards; sortable numbers carry their value.
    assert_eq!(page.matches("<div class=\"card\">").count(), 8);
    assert!(
        page.contains("<td data-v=\"70\">70</td>"),
        "HtoD+DtoH count of a row"
    );
    // The page ends with the script and closes.
    assert!(page.trim_end().ends_with("</html>"));
    assert!(page.rfind("<script>") > page.rfind("</figure>"));
}
