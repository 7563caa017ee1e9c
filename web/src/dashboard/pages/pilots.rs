//! `GET /pilots`: each pilot's verdict, the evidence behind it and its replay against the prediction.

use std::sync::Arc;

use askama::Template;
use axum::{extract::State, response::Html};
use strata_controller::{
    pilot::{Comparison, PilotReport, ReplayReport},
    store::Store,
};
use strata_planner::{pace::Band, pilot::QualityGate};

use super::{PageResult, when};
use crate::dashboard::{fmt, view};

struct PilotCells {
    id: i64,
    workload: String,
    status: String,
    verdict: String,
    updated: String,
    detail: Option<PilotDetailCells>,
    error: String,
    problem: String,
    report: String,
}

/// A `strata pilot` report, formatted.
struct PilotDetailCells {
    kind: String,
    exit_code: String,
    monthly_cost: String,
    monthly_baseline: String,
    monthly_savings: String,
    reasons: Vec<String>,
    classes: Vec<PilotClassCells>,
    gates: Vec<PilotGateCells>,
    plan: Vec<(String, String)>,
    plan_id: String,
    replay: Option<PilotReplayCells>,
    reproduce: String,
}

struct PilotClassCells {
    class: String,
    migrate: &'static str,
    cpu_share: String,
    attainment: String,
    attainment_2x: String,
    gpu_share_2x: String,
    notes: String,
}

struct PilotGateCells {
    weights: String,
    result: &'static str,
    perplexity: String,
    increase: String,
    top1: String,
    tasks: String,
    notes: String,
}

struct PilotReplayCells {
    headline: String,
    pace: String,
    worst: String,
    cost: String,
    rows: Vec<PilotReplayRow>,
}

struct PilotReplayRow {
    class: String,
    requests: usize,
    gpu_requests: usize,
    e2e_observed: String,
    e2e_predicted: String,
    e2e_error: String,
    ttft_observed: String,
    ttft_predicted: String,
    ttft_error: String,
    attainment_observed: String,
    attainment_predicted: String,
}

/// A predicted p99 in seconds, with the band of its runs when it has one: `3.10 (2.90-3.40)`.
fn with_band(value: f64, band: Option<Band>) -> String {
    let point = fmt::num(value, 2);
    match band {
        Some(Band { low, high }) => format!("{point} ({low:.2}-{high:.2})"),
        None => point,
    }
}

fn signed_percent(value: Option<f64>) -> String {
    value.map_or_else(
        || fmt::MISSING.to_owned(),
        |v| format!("{:+.1}%", v * 100.0),
    )
}

/// The host's pace around the replay against its pace when profiled, the calibration that scaled
/// the prediction and the spread of paces it averages over, as sentences (empty for reports without
/// any of them).
fn host_pace_text(r: &ReplayReport) -> String {
    let spread = r.pace_spread.as_ref().map(|s| {
        let measured = r.calibration.as_ref().and_then(|c| {
            Some(format!(
                " (the samples' {} s blocks moved by {})",
                fmt::num(c.block_s, 0),
                fmt::percent(Some(c.pace_spread?), 1)
            ))
        });
        format!(
            " The prediction is the median of {} simulations with the engine's pace spread by {}{}, \
             for a whole run and afresh every {} s; the figures in brackets span the middle 80% of them.",
            s.runs,
            fmt::percent(Some(s.sigma), 1),
            measured.unwrap_or_default(),
            fmt::num(s.block_s, 0),
        )
    });
    let calibration = r.calibration.as_ref().map(|c| {
        let ratio = |v: Option<f64>| v.map_or(fmt::MISSING.to_owned(), |v| format!("{v:.2}x"));
        format!(
            "Calibration: {} requests over {} s through the gateway, {}, ran the engine's decode steps at \
             {} and its prompts at {} of the profile's step model; the prediction runs on the profile's \
             steps scaled by these ratios.{}",
            c.requests,
            fmt::num(c.duration_s, 0),
            c.timing(),
            ratio(c.decode_over_profiled),
            ratio(c.prompt_over_profiled),
            spread.unwrap_or_default(),
        )
    });
    let Some(pace) = &r.host_pace else {
        return calibration.unwrap_or_default();
    };
    let pace = format!(
        "Host pace on the profiling shape: {} output tokens/s when profiled, {} right before the replay, \
         {} right after ({} of the profiled pace around the replay).",
        fmt::num(pace.profiled_output_tokens_per_s, 1),
        fmt::num(pace.before_replay_output_tokens_per_s, 1),
        fmt::num(pace.after_replay_output_tokens_per_s, 1),
        fmt::percent(Some(pace.replay_over_profiled), 0),
    );
    match calibration {
        Some(c) => format!("{pace} {c}"),
        None => pace,
    }
}

/// A weight type's tasks: passed of all, and the paired test's counts against the reference.
fn tasks_text(g: &QualityGate) -> String {
    let Some(t) = &g.tasks else {
        return fmt::percent(g.measured.task_pass_rate, 0);
    };
    format!(
        "{}/{} ({} lost, {} gained, p = {:.3})",
        t.both_passed + t.gained,
        t.tasks,
        t.lost,
        t.gained,
        t.p_value
    )
}

/// The replay's load as a share of its config's capacity (and of the capacity with the drain hold,
/// when one was searched); empty when it offered the plan hour's load.
fn capacity_share(r: &ReplayReport) -> String {
    let Some(share) = r.load.capacity_share else {
        return String::new();
    };
    let held = r.held_capacity.as_ref().map_or_else(String::new, |h| {
        format!(
            " with the drain hold: {} req/s, {} without it",
            fmt::num(h.capacity_rps, 2),
            fmt::num(h.profiled_capacity_rps, 2)
        )
    });
    format!(" ({}% of its capacity{held})", fmt::num(share * 100.0, 0))
}

fn pilot_detail_cells(d: &PilotReport) -> PilotDetailCells {
    let dec = &d.decision;
    let plan = d.plan.as_ref();
    let plan_rows = plan.map_or_else(Vec::new, |p| {
        vec![
            ("config".to_owned(), p.config.clone()),
            ("instance type".to_owned(), p.instance_type.clone()),
            ("region".to_owned(), p.region.clone()),
            (
                "peak CPU instances".to_owned(),
                p.peak_cpu_instances.to_string(),
            ),
            ("GPU share".to_owned(), fmt::percent(Some(p.gpu_share), 1)),
            (
                "cost per day".to_owned(),
                fmt::usd(Some(p.cost_per_day_usd)),
            ),
        ]
    });
    PilotDetailCells {
        kind: d.verdict.clone(),
        exit_code: d.exit_code.to_string(),
        monthly_cost: fmt::usd(Some(dec.monthly_cost_usd)),
        monthly_baseline: fmt::usd(Some(dec.monthly_baseline_usd)),
        monthly_savings: fmt::usd(Some(dec.monthly_savings_usd)),
        reasons: dec.reasons.clone(),
        classes: dec
            .classes
            .iter()
            .map(|c| PilotClassCells {
                class: c.class.clone(),
                migrate: if c.migrate { "yes" } else { "no" },
                cpu_share: fmt::percent(Some(c.cpu_share), 1),
                attainment: fmt::percent(Some(c.attainment), 2),
                attainment_2x: fmt::percent(Some(c.attainment_2x), 2),
                gpu_share_2x: fmt::percent(Some(c.gpu_share_2x), 1),
                notes: c.reasons.join("; "),
            })
            .collect(),
        gates: d
            .quality
            .iter()
            .map(|g| PilotGateCells {
                weights: g.weights.clone(),
                result: if g.passed { "pass" } else { "fail" },
                perplexity: fmt::num(g.measured.perplexity, 3),
                increase: signed_percent(Some(g.perplexity_increase)),
                top1: fmt::percent(Some(g.measured.top1_agreement), 1),
                tasks: tasks_text(g),
                notes: g
                    .reasons
                    .iter()
                    .chain(&g.notes)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; "),
            })
            .collect(),
        plan: plan_rows,
        plan_id: plan.map_or_else(|| fmt::MISSING.to_owned(), |p| p.id.to_string()),
        replay: d.replay.as_ref().map(|r| PilotReplayCells {
            headline: format!(
                "{} requests over {} s at {} req/s{} on one host of {}{}, {} errors",
                r.requests,
                fmt::num(r.duration_s, 0),
                fmt::num(r.load.rate_rps, 2),
                capacity_share(r),
                r.config,
                if r.with_gpu {
                    " with the GPU endpoint"
                } else {
                    ""
                },
                r.errors
            ),
            pace: host_pace_text(r),
            worst: signed_percent(r.worst_e2e_p99_error)
                .trim_start_matches('+')
                .to_owned(),
            cost: format!(
                "{} observed, {} predicted",
                fmt::usd(Some(r.observed_cost_usd)),
                fmt::usd(Some(r.predicted_cost_usd))
            ),
            rows: std::iter::once(replay_row(
                "all requests",
                &r.all,
                r.classes.iter().map(|c| c.gpu_requests).sum(),
                None,
            ))
            .chain(r.classes.iter().map(|c| {
                replay_row(
                    &c.class,
                    &c.p99,
                    c.gpu_requests,
                    Some((c.observed_attainment, c.predicted_attainment)),
                )
            }))
            .collect(),
        }),
        reproduce: serde_json::to_string_pretty(&d.reproduce).unwrap_or_default(),
    }
}

/// One row of the replay's table.
fn replay_row(
    class: &str,
    c: &Comparison,
    gpu_requests: usize,
    attainment: Option<(f64, f64)>,
) -> PilotReplayRow {
    PilotReplayRow {
        class: class.to_owned(),
        requests: c.requests,
        gpu_requests,
        e2e_observed: fmt::num(c.observed_e2e_p99_s, 2),
        e2e_predicted: with_band(c.predicted_e2e_p99_s, c.predicted_e2e_p99_band_s),
        e2e_error: signed_percent(c.e2e_p99_error),
        ttft_observed: fmt::num(c.observed_ttft_p99_s, 2),
        ttft_predicted: with_band(c.predicted_ttft_p99_s, c.predicted_ttft_p99_band_s),
        ttft_error: signed_percent(c.ttft_p99_error),
        attainment_observed: fmt::percent(attainment.map(|a| a.0), 1),
        attainment_predicted: fmt::percent(attainment.map(|a| a.1), 1),
    }
}

#[derive(Template)]
#[template(path = "pilots.html")]
struct PilotsPage {
    title: String,
    active: &'static str,
    pilots: Vec<PilotCells>,
}

/// `GET /pilots`: each pilot's verdict, evidence and report.
pub(crate) async fn pilots(State(store): State<Arc<dyn Store>>) -> PageResult {
    let v = view::pilots(&*store).await?;
    let pilots = v
        .pilots
        .iter()
        .map(|p| PilotCells {
            id: p.id,
            workload: p.workload.clone(),
            status: p.status.clone(),
            verdict: p.verdict.clone().unwrap_or_else(|| "none yet".to_owned()),
            updated: when(p.updated_at),
            detail: p.detail.as_ref().map(pilot_detail_cells),
            error: p.error.clone().unwrap_or_default(),
            problem: p.problem.clone().unwrap_or_default(),
            report: p.report.as_ref().map_or_else(String::new, |r| {
                serde_json::to_string_pretty(r).unwrap_or_default()
            }),
        })
        .collect();
    let page = PilotsPage {
        title: "Pilots".to_owned(),
        active: "pilots",
        pilots,
    };
    Ok(Html(page.render()?))
}
