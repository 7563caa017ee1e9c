//! The dashboard's charts: SVG drawn on the server with plotters. Text and axes are a mid grey that
//! reads on light and dark backgrounds (the page's CSS also sets text to the theme colour); series
//! use saturated colours that hold up on both.

use std::ops::Range;

use plotters::{coord::Shift, prelude::*};

use strata_controller::planning::StoredLoadPoint;

use super::view::{CalibrationPoint, ConfigView, GpuBaseline, PlanHour, RunView};

const AXIS: RGBColor = RGBColor(128, 128, 128);
const CPU: RGBColor = RGBColor(37, 99, 235);
const GPU: RGBColor = RGBColor(234, 88, 12);
const FRONTIER: RGBColor = RGBColor(22, 163, 74);
const SLA: RGBColor = RGBColor(220, 38, 38);
const SERIES: [RGBColor; 4] = [CPU, GPU, FRONTIER, RGBColor(147, 51, 234)];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type ChartResult = Result<(), Box<dyn std::error::Error + 'static>>;

/// Draws into a `width` x `height` SVG; a drawing failure becomes a short notice instead of a chart.
fn svg(width: u32, height: u32, draw: impl FnOnce(&Area<'_>) -> ChartResult) -> String {
    let mut out = String::new();
    let outcome = {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        draw(&root).and_then(|()| root.present().map_err(Into::into))
    };
    match outcome {
        Ok(()) => out,
        Err(err) => {
            tracing::warn!(error = %err, "chart could not be drawn");
            "<p class=\"empty\">This chart could not be drawn.</p>".to_owned()
        }
    }
}

fn font(size: u32) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&AXIS)
}

/// `lo..hi` of the values, widened by a margin, and never empty.
fn span(values: impl IntoIterator<Item = f64>, floor_at_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    let pad = if hi > lo {
        (hi - lo) * 0.08
    } else {
        hi.abs().max(1.0) * 0.5
    };
    let lo = if floor_at_zero {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    lo..hi + pad
}

/// $ per 1M output tokens against E2E p99, one mark per priced config (circles CPU, triangles GPU),
/// the frontier drawn and labelled, and the workload's GPU baseline as a labelled diamond.
pub(crate) fn pareto(rows: &[ConfigView], baseline: Option<&GpuBaseline>) -> String {
    let points: Vec<(&ConfigView, f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r, r.usd_per_million_output_tokens?, r.summary.e2e_p99_ms)))
        .filter(|(_, x, y)| x.is_finite() && y.is_finite())
        .collect();
    let baseline = baseline
        .map(|b| (b, b.usd_per_million_output_tokens, b.e2e_p99_ms))
        .filter(|(_, x, y)| x.is_finite() && y.is_finite());
    svg(760, 420, |root| {
        let x = span(
            points.iter().map(|p| p.1).chain(baseline.map(|b| b.1)),
            true,
        );
        let y = span(
            points.iter().map(|p| p.2).chain(baseline.map(|b| b.2)),
            true,
        );
        let mut chart = ChartBuilder::on(root)
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc("$ per 1M output tokens")
            .y_desc("E2E p99 (ms)")
            .axis_style(AXIS)
            .light_line_style(AXIS.mix(0.12))
            .bold_line_style(AXIS.mix(0.25))
            .label_style(font(12))
            .axis_desc_style(font(13))
            .draw()?;
        let mut frontier: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.0.pareto)
            .map(|p| (p.1, p.2))
            .collect();
        frontier.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(frontier.clone(), FRONTIER.stroke_width(2)))?
            .label("Pareto frontier")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], FRONTIER.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .filter(|p| !p.0.gpu)
                    .map(|p| Circle::new((p.1, p.2), 5, CPU.mix(0.85).filled())),
            )?
            .label("CPU config")
            .legend(|(x, y)| Circle::new((x + 8, y), 5, CPU.filled()));
        chart
            .draw_series(
                points
                    .iter()
                    .filter(|p| p.0.gpu)
                    .map(|p| TriangleMarker::new((p.1, p.2), 7, GPU.filled())),
            )?
            .label("GPU endpoint")
            .legend(|(x, y)| TriangleMarker::new((x + 8, y), 7, GPU.filled()));
        if let Some((b, x, y)) = baseline {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((x, y))
                        + Polygon::new(
                            vec![(0, -8), (8, 0), (0, 8), (-8, 0)],
                            SLA.mix(0.9).filled(),
                        )
                        + Text::new(format!("GPU baseline {}", b.name), (10, 4), font(11)),
                ))?
                .label("GPU baseline")
                .legend(|(x, y)| {
                    Polygon::new(
                        vec![(x + 8, y - 6), (x + 14, y), (x + 8, y + 6), (x + 2, y)],
                        SLA.filled(),
                    )
                });
        }
        chart.draw_series(points.iter().filter(|p| p.0.pareto).map(|p| {
            EmptyElement::at((p.1, p.2))
                + Text::new(
                    format!("{} {}", p.0.summary.model_name, p.0.label()),
                    (8, -14),
                    font(11),
                )
        }))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(font(12))
            .border_style(AXIS.mix(0.4))
            .background_style(AXIS.mix(0.08))
            .draw()?;
        Ok(())
    })
}

/// TTFT, TPOT, ITL and E2E percentiles (p50 to p99) of a run, latency on a log axis: the upper part
/// of each latency distribution's CDF.
pub(crate) fn latency_percentiles(view: &RunView) -> String {
    let r = &view.run;
    let series = [
        (
            "TTFT",
            [r.ttft_p50_ms, r.ttft_p90_ms, r.ttft_p95_ms, r.ttft_p99_ms],
        ),
        (
            "TPOT",
            [r.tpot_p50_ms, r.tpot_p90_ms, r.tpot_p95_ms, r.tpot_p99_ms],
        ),
        (
            "ITL",
            [r.itl_p50_ms, r.itl_p90_ms, r.itl_p95_ms, r.itl_p99_ms],
        ),
        (
            "E2E",
            [r.e2e_p50_ms, r.e2e_p90_ms, r.e2e_p95_ms, r.e2e_p99_ms],
        ),
    ];
    const QUANTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];
    svg(760, 360, |root| {
        let positive = series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = positive.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        let (lo, hi) = if lo.is_finite() {
            (lo / 1.5, hi * 1.5)
        } else {
            (1.0, 10.0)
        };
        let mut chart = ChartBuilder::on(root)
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 45.0..100.0)?;
        chart
            .configure_mesh()
            .x_desc("latency (ms, log scale)")
            .y_desc("percentile")
            .axis_style(AXIS)
            .light_line_style(AXIS.mix(0.12))
            .bold_line_style(AXIS.mix(0.25))
            .label_style(font(12))
            .axis_desc_style(font(13))
            .draw()?;
        for ((name, values), color) in series.iter().zip(SERIES) {
            let points: Vec<(f64, f64)> = values
                .iter()
                .zip(QUANTILES)
                .filter(|(v, _)| v.is_finite() && **v > 0.0)
                .map(|(v, q)| (*v, q))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font(font(12))
            .border_style(AXIS.mix(0.4))
            .background_style(AXIS.mix(0.08))
            .draw()?;
        Ok(())
    })
}

/// One measure of a capacity curve against offered load, with an optional horizontal target.
pub(crate) fn load_curve(
    points: &[StoredLoadPoint],
    measure: fn(&StoredLoadPoint) -> f64,
    y_desc: &str,
    target: Option<f64>,
) -> String {
    let line: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.rate_rps, measure(p)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    svg(470, 320, |root| {
        let x = span(line.iter().map(|p| p.0), true);
        let y = span(line.iter().map(|p| p.1).chain(target), true);
        let mut chart = ChartBuilder::on(root)
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x.clone(), y)?;
        chart
            .configure_mesh()
            .x_desc("offered load (requests/s)")
            .y_desc(y_desc)
            .axis_style(AXIS)
            .light_line_style(AXIS.mix(0.12))
            .bold_line_style(AXIS.mix(0.25))
            .label_style(font(12))
            .axis_desc_style(font(13))
            .draw()?;
        if let Some(target) = target {
            chart
                .draw_series(LineSeries::new(
                    vec![(x.start, target), (x.end, target)],
                    SLA.stroke_width(1),
                ))?
                .label("SLA target")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], SLA.stroke_width(1)));
        }
        chart
            .draw_series(LineSeries::new(line.clone(), CPU.stroke_width(2)))?
            .label(y_desc)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], CPU.stroke_width(2)));
        chart.draw_series(line.iter().map(|p| Circle::new(*p, 3, CPU.filled())))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(font(11))
            .border_style(AXIS.mix(0.4))
            .background_style(AXIS.mix(0.08))
            .draw()?;
        Ok(())
    })
}

/// A plan's hours: CPU instances as bars, the GPU share of traffic as a line on the right axis.
pub(crate) fn plan_hours(hours: &[PlanHour]) -> String {
    svg(760, 320, |root| {
        let max_instances = hours
            .iter()
            .map(|h| f64::from(h.cpu_instances))
            .fold(1.0f64, f64::max);
        let last_hour = f64::from(hours.iter().map(|h| h.hour).max().unwrap_or(23));
        let x = -0.5..last_hour + 0.5;
        let mut chart = ChartBuilder::on(root)
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .right_y_label_area_size(56)
            .build_cartesian_2d(x.clone(), 0.0..max_instances * 1.15)?
            .set_secondary_coord(x, 0.0..100.0);
        chart
            .configure_mesh()
            .x_desc("hour (UTC)")
            .y_desc("CPU instances")
            .axis_style(AXIS)
            .light_line_style(AXIS.mix(0.12))
            .bold_line_style(AXIS.mix(0.25))
            .label_style(font(12))
            .axis_desc_style(font(13))
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("GPU share (%)")
            .axis_style(AXIS)
            .label_style(font(12))
            .axis_desc_style(font(13))
            .draw()?;
        chart
            .draw_series(hours.iter().map(|h| {
                let x = f64::from(h.hour);
                Rectangle::new(
                    [(x - 0.38, 0.0), (x + 0.38, f64::from(h.cpu_instances))],
                    CPU.mix(0.8).filled(),
                )
            }))?
            .label("CPU instances")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], CPU.filled()));
        let share: Vec<(f64, f64)> = hours
            .iter()
            .map(|h| (f64::from(h.hour), h.gpu_share * 100.0))
            .collect();
        chart
            .draw_secondary_series(LineSeries::new(share.clone(), GPU.stroke_width(2)))?
            .label("GPU share")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GPU.stroke_width(2)));
        chart.draw_secondary_series(share.iter().map(|p| Circle::new(*p, 3, GPU.filled())))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(font(11))
            .border_style(AXIS.mix(0.4))
            .background_style(AXIS.mix(0.08))
            .draw()?;
        Ok(())
    })
}

/// Observed against predicted end-to-end latency, one mark per request on log axes, the diagonal of a
/// perfect prediction drawn: the corrected prediction (the one routing used) filled, the service
/// model's raw one hollow and grey, so the correction's effect shows as the filled marks closing on the
/// diagonal.
pub(crate) fn calibration(points: &[CalibrationPoint]) -> String {
    let finite = |v: f64| v.is_finite() && v > 0.0;
    let corrected: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.predicted_ms, p.observed_ms))
        .filter(|(x, y)| finite(*x) && finite(*y))
        .collect();
    let raw: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.raw_predicted_ms?, p.observed_ms)))
        .filter(|(x, y)| finite(*x) && finite(*y))
        .collect();
    svg(560, 460, |root| {
        let (lo, hi) = corrected
            .iter()
            .chain(&raw)
            .flat_map(|(x, y)| [*x, *y])
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let (lo, hi) = if lo.is_finite() {
            (lo / 1.3, hi * 1.3)
        } else {
            (1.0, 10.0)
        };
        let mut chart = ChartBuilder::on(root)
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("predicted E2E (ms, log scale)")
            .y_desc("observed E2E (ms, log scale)")
            .axis_style(AXIS)
            .light_line_style(AXIS.mix(0.12))
            .bold_line_style(AXIS.mix(0.25))
            .label_style(font(12))
            .axis_desc_style(font(13))
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                [(lo, lo), (hi, hi)],
                FRONTIER.stroke_width(1),
            ))?
            .label("observed = predicted")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], FRONTIER.stroke_width(1)));
        chart
            .draw_series(raw.iter().map(|p| Circle::new(*p, 3, AXIS.stroke_width(1))))?
            .label("service model (raw)")
            .legend(|(x, y)| Circle::new((x + 8, y), 3, AXIS.stroke_width(1)));
        chart
            .draw_series(
                corrected
                    .iter()
                    .map(|p| Circle::new(*p, 3, CPU.mix(0.7).filled())),
            )?
            .label("corrected (routed on)")
            .legend(|(x, y)| Circle::new((x + 8, y), 3, CPU.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(font(12))
            .border_style(AXIS.mix(0.4))
            .background_style(AXIS.mix(0.08))
            .draw()?;
        Ok(())
    })
}
