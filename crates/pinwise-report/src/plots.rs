//! The HTML report's plots, drawn with plotters' SVG backend into strings that the page
//! embeds (no image files, no network).

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use pinwise_core::history::AllocKind;

use crate::analysis::{Report, TRAFFIC_SERIES};
use crate::error::ReportError;
use crate::units;

/// Width of every plot, pixels.
pub const PLOT_WIDTH: u32 = 960;

const FONT: &str = "sans-serif";
const GRID: RGBColor = RGBColor(215, 215, 215);
const FINE_GRID: RGBColor = RGBColor(242, 242, 242);
const TEXT: RGBColor = RGBColor(40, 40, 40);

/// Colors of the traffic series, in [`TRAFFIC_SERIES`] order.
pub const TRAFFIC_COLORS: [RGBColor; 4] = [
    RGBColor(230, 85, 13),   // HtoD pageable: orange
    RGBColor(49, 130, 189),  // HtoD pinned: blue
    RGBColor(253, 174, 107), // DtoH pageable: light orange
    RGBColor(158, 202, 225), // DtoH pinned: light blue
];

/// Color of a kind of memory on the timeline.
pub fn kind_color(kind: AllocKind) -> RGBColor {
    match kind {
        AllocKind::Pageable => RGBColor(253, 174, 107),
        AllocKind::PinnedAlloc => RGBColor(107, 174, 214),
        AllocKind::Registered => RGBColor(116, 196, 118),
        AllocKind::Untracked => RGBColor(189, 189, 189),
    }
}

const PAGEABLE_MARK: RGBColor = RGBColor(166, 54, 3);
const PINNED_MARK: RGBColor = RGBColor(8, 69, 148);
const HOT: RGBColor = RGBColor(49, 130, 189);
const WARM: RGBColor = RGBColor(253, 208, 60);
const COLD: RGBColor = RGBColor(189, 189, 189);

/// Draws into an SVG string of `width` x `height`.
fn svg(
    plot: &'static str,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<String, ReportError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_error(plot, e))?;
        draw(&root).map_err(|message| ReportError::Plot { plot, message })?;
        root.present().map_err(|e| plot_error(plot, e))?;
    }
    Ok(out)
}

fn plot_error(plot: &'static str, e: impl std::fmt::Display) -> ReportError {
    ReportError::Plot {
        plot,
        message: e.to_string(),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Height of a plot that has nothing to show but a sentence.
const MESSAGE_HEIGHT: u32 = 48;

/// A plot with nothing to draw: one sentence saying so.
fn message(plot: &'static str, text: &str) -> Result<String, ReportError> {
    svg(plot, (PLOT_WIDTH, MESSAGE_HEIGHT), |root| {
        root.draw(&Text::new(
            text.to_owned(),
            (20, 16),
            (FONT, 16).into_font().color(&TEXT),
        ))
        .map_err(err)
    })
}

/// A formatter of seconds for an axis spanning `span` seconds.
fn seconds_axis(span: f64) -> impl Fn(&f64) -> String {
    move |v: &f64| {
        if *v == 0.0 {
            "0".into()
        } else if span >= 20.0 {
            format!("{v:.0} s")
        } else if span >= 2.0 {
            format!("{v:.1} s")
        } else if span >= 0.02 {
            format!("{:.0} ms", v * 1e3)
        } else {
            format!("{:.0} us", v * 1e6)
        }
    }
}

/// A count for an axis: whole numbers only (other ticks stay blank).
fn whole(v: &f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// A plain number for an axis: no decimals from 10 up.
fn number(v: &f64) -> String {
    if v.abs() >= 10.0 || *v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The binary unit (`B`, `KiB`, ...) in which `top` bytes reads best, and its size: an axis
/// drawn in that unit gets ticks on round numbers of it (16 MiB, not 16.78 MB).
fn byte_unit(top: f64) -> (&'static str, f64) {
    let mut unit = ("B", 1.0);
    for (name, size) in [
        ("KiB", 1024.0),
        ("MiB", 1024.0 * 1024.0),
        ("GiB", 1024.0 * 1024.0 * 1024.0),
        ("TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0),
    ] {
        if top >= size {
            unit = (name, size);
        }
    }
    unit
}

/// Bytes moved over the trace, stacked by direction and host memory state: a bar's height is
/// the bytes of the copies issued in its bucket (not a rate: a single large copy is one
/// bucket's bytes, whatever the bucket's width).
pub fn traffic(report: &Report) -> Result<String, ReportError> {
    let t = &report.plots.traffic;
    if t.buckets.iter().all(|b| b.iter().all(|&v| v == 0)) {
        return message(
            "bytes over time",
            "No host<->device transfer in this history.",
        );
    }
    svg("bytes over time", (PLOT_WIDTH, 340), |root| {
        let bucket_s = t.bucket_ns as f64 / 1e9;
        let most = t
            .buckets
            .iter()
            .map(|b| b.iter().map(|&v| v as f64).sum::<f64>())
            .fold(0.0, f64::max);
        let (unit, unit_bytes) = byte_unit(most);
        // Bytes in each bucket, in `unit`, cumulated bottom-up in series order.
        let stacked: Vec<[f64; 4]> = t
            .buckets
            .iter()
            .map(|b| {
                let mut acc = [0.0; 4];
                let mut sum = 0.0;
                for (i, v) in b.iter().enumerate() {
                    sum += *v as f64 / unit_bytes;
                    acc[i] = sum;
                }
                acc
            })
            .collect();
        let top = stacked.iter().map(|s| s[3]).fold(0.0, f64::max).max(1e-9) * 1.08;
        let x_end = (t.buckets.len() as f64 * bucket_s).max(1e-9);
        let seconds = seconds_axis(x_end);
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_end, 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .light_line_style(FINE_GRID)
            .bold_line_style(GRID)
            .x_desc("time since the first event")
            .y_desc(format!(
                "{unit} issued per bucket of {}",
                units::format_duration_ns(t.bucket_ns as f64)
            ))
            .x_label_formatter(&seconds)
            .y_label_formatter(&number)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for series in (0..4).rev() {
            let points = stacked.iter().enumerate().flat_map(|(i, s)| {
                // A step per bucket: flat over its width.
                [
                    (i as f64 * bucket_s, s[series]),
                    ((i + 1) as f64 * bucket_s, s[series]),
                ]
            });
            chart
                .draw_series(AreaSeries::new(
                    points,
                    0.0,
                    TRAFFIC_COLORS[series].filled(),
                ))
                .map_err(err)?
                .label(TRAFFIC_SERIES[series])
                .legend(move |(x, y)| {
                    Rectangle::new(
                        [(x, y - 5), (x + 14, y + 5)],
                        TRAFFIC_COLORS[series].filled(),
                    )
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(GRID)
            .label_font((FONT, 12))
            .draw()
            .map_err(err)
    })
}

/// The busiest allocations' lives, one row each, with a mark per transfer.
pub fn lifetimes(report: &Report) -> Result<String, ReportError> {
    let rows = &report.plots.lifetimes;
    let height = 90 + 18 * rows.len().max(1) as u32;
    if rows.is_empty() {
        return message("allocation lifetimes", "No allocation was transferred.");
    }
    svg("allocation lifetimes", (PLOT_WIDTH, height), |root| {
        let n = rows.len();
        let span = (report.overview.span_ns as f64 / 1e9).max(1e-9);
        let seconds = seconds_axis(span);
        let labels: Vec<String> = rows
            .iter()
            .map(|r| units::fit(&r.label, 44, false))
            .collect();
        // Row 0 at the top.
        let y_of = |i: usize| n - 1 - i;
        let label_of = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(y) | SegmentValue::Exact(y) if *y < n => {
                labels[n - 1 - *y].clone()
            }
            _ => String::new(),
        };
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .margin_top(34)
            .x_label_area_size(40)
            .y_label_area_size(300)
            .build_cartesian_2d(0f64..span, (0..n - 1).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(FINE_GRID)
            .bold_line_style(GRID)
            .y_labels(n)
            .x_desc("time since the first event")
            .x_label_formatter(&seconds)
            .y_label_formatter(&label_of)
            .label_style((FONT, 11))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        // Within the axis: a history file's times are what it says, and plotters' pixel
        // arithmetic overflows on points far outside the plotted range.
        let secs = |ns: u64| (ns as f64 / 1e9).min(span);
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let y = y_of(i);
                let color = kind_color(r.kind);
                let style = if r.ended {
                    color.filled()
                } else {
                    color.mix(0.55).filled()
                };
                let mut rect = Rectangle::new(
                    [
                        (secs(r.start_ns), SegmentValue::Exact(y)),
                        (
                            secs(r.end_ns).max(secs(r.start_ns)),
                            SegmentValue::Exact(y + 1),
                        ),
                    ],
                    style,
                );
                rect.set_margin(3, 3, 0, 0);
                rect
            }))
            .map_err(err)?;
        chart
            .draw_series(rows.iter().enumerate().flat_map(|(i, r)| {
                let y = y_of(i);
                r.transfers.iter().map(move |&(at, pinned)| {
                    let color = if pinned { PINNED_MARK } else { PAGEABLE_MARK };
                    let x = secs(at);
                    PathElement::new(
                        vec![(x, SegmentValue::Exact(y)), (x, SegmentValue::Exact(y + 1))],
                        color.stroke_width(1),
                    )
                })
            }))
            .map_err(err)?;
        // Legend: kinds and marks.
        let legend: [(&str, RGBColor); 6] = [
            ("pageable", kind_color(AllocKind::Pageable)),
            (
                "pinned (cuMemHostAlloc)",
                kind_color(AllocKind::PinnedAlloc),
            ),
            ("registered", kind_color(AllocKind::Registered)),
            ("untracked", kind_color(AllocKind::Untracked)),
            ("| copy, pageable", PAGEABLE_MARK),
            ("| copy, pinned", PINNED_MARK),
        ];
        let mut x = 12;
        for (name, color) in legend {
            root.draw(&Rectangle::new([(x, 10), (x + 12, 20)], color.filled()))
                .map_err(err)?;
            root.draw(&Text::new(
                name.to_owned(),
                (x + 16, 9),
                (FONT, 12).into_font().color(&TEXT),
            ))
            .map_err(err)?;
            x += 30 + 6 * name.len() as i32;
        }
        Ok(())
    })
}

/// A layer of the size-class bars: name, color, and its bottom and top in a class.
type Layer = (
    &'static str,
    RGBColor,
    fn(&crate::analysis::SizeClass) -> (u64, u64),
);

/// Allocations by size class: hot (pinning pays back), warm, cold (never transferred).
pub fn size_classes(report: &Report) -> Result<String, ReportError> {
    let classes = &report.plots.size_classes;
    if classes.is_empty() {
        return message("hot and cold by size", "No allocation in this history.");
    }
    svg("hot and cold by size", (PLOT_WIDTH, 340), |root| {
        let n = classes.len();
        let top = classes
            .iter()
            .map(|c| c.hot + c.warm + c.cold)
            .max()
            .unwrap_or(1) as f64
            * 1.3; // room for the legend
        let labels: Vec<String> = classes
            .iter()
            .map(|c| units::format_size(c.min_size).replace(".00", ""))
            .collect();
        let label_of = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) if *i < n => format!("{}+", labels[*i]),
            _ => String::new(),
        };
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(FINE_GRID)
            .bold_line_style(GRID)
            .x_labels(n)
            .x_label_formatter(&label_of)
            .x_desc("allocation size (class: from this size to twice it)")
            .y_desc("allocations")
            .y_label_formatter(&whole)
            .label_style((FONT, 11))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        let layers: [Layer; 3] = [
            ("hot: pinning pays back", HOT, |c| (0, c.hot)),
            ("warm: transferred, not enough to pay back", WARM, |c| {
                (c.hot, c.hot + c.warm)
            }),
            ("cold: never transferred", COLD, |c| {
                (c.hot + c.warm, c.hot + c.warm + c.cold)
            }),
        ];
        for (name, color, range) in layers {
            chart
                .draw_series(classes.iter().enumerate().map(|(i, c)| {
                    let (lo, hi) = range(c);
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), lo as f64),
                            (SegmentValue::Exact(i + 1), hi as f64),
                        ],
                        color.filled(),
                    );
                    r.set_margin(0, 0, 3, 3);
                    r
                }))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(GRID)
            .label_font((FONT, 12))
            .draw()
            .map_err(err)
    })
}

/// The budget curve as steps, in `x_unit` bytes and `y_unit` ns: the greedy curve's points
/// and the plan's own point (budget, saving), each budget's saving the best of those at or
/// below it (a budget that affords the plan's allocations nets at least the plan's saving),
/// so the curve passes through the plan's point.
fn curve_steps(
    curve: &[crate::budget::BudgetPoint],
    plan: crate::budget::BudgetPoint,
    x_unit: f64,
    y_unit: f64,
) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = curve
        .iter()
        .chain([&plan])
        .map(|p| (p.budget_bytes as f64 / x_unit, p.net_saving_ns / y_unit))
        .collect();
    points.sort_by(|p, q| p.0.total_cmp(&q.0));
    let mut best = f64::NEG_INFINITY;
    for p in &mut points {
        best = best.max(p.1);
        p.1 = best;
    }
    points
        .windows(2)
        .flat_map(|w| [w[0], (w[1].0, w[0].1), w[1]])
        .collect()
}

/// Net saving against the pinned budget, with the budget chosen for the asked share.
pub fn budget_curve(report: &Report) -> Result<String, ReportError> {
    let b = &report.budget;
    if b.curve.len() < 2 || b.attainable_ns <= 0.0 {
        return message(
            "saving versus pinned budget",
            "No allocation pays back its pinning: nothing to budget for.",
        );
    }
    svg("saving versus pinned budget", (PLOT_WIDTH, 340), |root| {
        let last = b
            .curve
            .last()
            .map_or(1, |p| p.budget_bytes)
            .max(b.budget_bytes);
        // Budgets in a binary unit, so that ticks fall on round numbers of it.
        let (x_unit, x_unit_bytes) = byte_unit(last as f64);
        let x_max = (last.max(1) as f64 * 1.02) / x_unit_bytes;
        // Milliseconds, or seconds for savings of more than 10 s.
        let (unit, unit_name) = if b.attainable_ns.max(b.plan_saving_ns) > 10e9 {
            (1e9, "s")
        } else {
            (1e6, "ms")
        };
        let y_max = b.attainable_ns.max(b.plan_saving_ns) / unit * 1.1;
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(err)?;
        let bytes_label = |v: &f64| format!("{} {x_unit}", number(v));
        chart
            .configure_mesh()
            .light_line_style(FINE_GRID)
            .bold_line_style(GRID)
            .x_desc("pinned budget (bytes pinned at once)")
            .y_desc(format!("net saving, {unit_name}"))
            .x_label_formatter(&bytes_label)
            .y_label_formatter(&number)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        let line = RGBColor(49, 130, 189);
        let plan = crate::budget::BudgetPoint {
            budget_bytes: b.budget_bytes,
            net_saving_ns: b.plan_saving_ns,
        };
        let steps = curve_steps(&b.curve, plan, x_unit_bytes, unit);
        chart
            .draw_series(LineSeries::new(steps, line.stroke_width(2)))
            .map_err(err)?
            .label("best allocations per pinned byte first")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], line.stroke_width(2))
            });
        let target = b.share_asked * b.attainable_ns / unit;
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, target), (x_max, target)],
                grey.stroke_width(1),
            )))
            .map_err(err)?
            .label(format!(
                "{} of the attainable saving",
                units::percent(b.share_asked)
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], grey.stroke_width(1))
            });
        let red = RGBColor(203, 24, 29);
        let (bx, by) = (
            b.budget_bytes as f64 / x_unit_bytes,
            b.plan_saving_ns / unit,
        );
        chart
            .draw_series([PathElement::new(
                vec![(bx, 0.0), (bx, by)],
                red.stroke_width(1),
            )])
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Circle::new((bx, by), 5, red.filled())))
            .map_err(err)?
            .label(format!(
                "budget {}: core's plan nets {}",
                units::format_size(b.budget_bytes),
                units::format_duration_ns(b.plan_saving_ns)
            ))
            .legend(move |(x, y)| Circle::new((x + 7, y), 4, red.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(GRID)
            .label_font((FONT, 12))
            .draw()
            .map_err(err)
    })
}

const REDUNDANT: RGBColor = RGBColor(222, 45, 38);

/// The fingerprinted copies of the allocations with the most time wasted on redundant
/// copies: redundant ones (red) over the others (blue), one bar per allocation.
pub fn redundant(report: &Report) -> Result<String, ReportError> {
    let rows = &report.redundant.allocations;
    if rows.is_empty() {
        return message(
            "redundant transfers",
            if report.redundant.mode == "off" {
                "Copies were not fingerprinted in this history."
            } else {
                "No redundant copy found."
            },
        );
    }
    svg("redundant transfers", (PLOT_WIDTH, 340), |root| {
        let n = rows.len();
        let copies = |r: &crate::redundant::RedundantRow| {
            let x = &r.redundancy;
            (
                u64::from(x.redundant_uploads) + u64::from(x.redundant_downloads),
                u64::from(x.uploads) + u64::from(x.downloads),
            )
        };
        let top = rows.iter().map(|r| copies(r).1).max().unwrap_or(1) as f64 * 1.3;
        let labels: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "#{} {}",
                    r.id,
                    units::format_size(r.size).replace(".00", "")
                )
            })
            .collect();
        let label_of = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) if *i < n => labels[*i].clone(),
            _ => String::new(),
        };
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(FINE_GRID)
            .bold_line_style(GRID)
            .x_labels(n)
            .x_label_formatter(&label_of)
            .x_desc("allocation (record id, size), most time wasted first")
            .y_desc("fingerprinted copies")
            .y_label_formatter(&whole)
            .label_style((FONT, 11))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(err)?;
        type Part = fn((u64, u64)) -> (u64, u64);
        let layers: [(&str, RGBColor, Part); 2] = [
            (
                "redundant: the other side had these bytes",
                REDUNDANT,
                |(r, _)| (0, r),
            ),
            ("not redundant", HOT, |(r, all)| (r, all)),
        ];
        for (name, color, part) in layers {
            chart
                .draw_series(rows.iter().enumerate().map(|(i, row)| {
                    let (lo, hi) = part(copies(row));
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), lo as f64),
                            (SegmentValue::Exact(i + 1), hi as f64),
                        ],
                        color.filled(),
                    );
                    r.set_margin(0, 0, 3, 3);
                    r
                }))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(GRID)
            .label_font((FONT, 12))
            .draw()
            .map_err(err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_axes_use_the_binary_unit_the_largest_value_reads_in() {
        assert_eq!(byte_unit(0.0), ("B", 1.0));
        assert_eq!(byte_unit(1000.0), ("B", 1.0));
        assert_eq!(byte_unit(32.0 * 1024.0 * 1024.0), ("MiB", 1024.0 * 1024.0));
        assert_eq!(byte_unit(3.5 * 1024.0 * 1024.0 * 1024.0).0, "GiB");
    }

    #[test]
    fn the_budget_curve_passes_through_the_plans_point() {
        use crate::budget::BudgetPoint;
        let point = |budget_bytes, net_saving_ns| BudgetPoint {
            budget_bytes,
            net_saving_ns,
        };
        // The greedy curve reaches the saving only past the plan's budget (64 MiB + a page).
        let curve = [point(0, 0.0), point((64 << 20) + 4096, 107e6)];
        let steps = curve_steps(&curve, point(64 << 20, 107e6), 1.0, 1e6);
        assert!(steps.contains(&((64 << 20) as f64, 107.0)), "{steps:?}");
        // Never decreasing, and ending at the curve's last point.
        assert!(steps
            .windows(2)
            .all(|w| w[1].1 >= w[0].1 && w[1].0 >= w[0].0));
        assert_eq!(steps.last(), Some(&(((64 << 20) + 4096) as f64, 107.0)));
    }
}
