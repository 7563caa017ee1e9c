//! `GET /gateway`: the gateway's requests by pool and class, SLA attainment, the prediction errors
//! with a calibration plot, spend and breakers.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Query, State},
    response::Html,
};
use chrono::Utc;
use strata_controller::store::Store;

use super::PageResult;
use strata_controller::prediction_error::{ErrorSummary, LatencyErrors, PoolErrors};

use crate::dashboard::{charts, fmt, query, view};

#[derive(Template)]
#[template(path = "gateway.html")]
struct GatewayPage {
    title: String,
    active: &'static str,
    window: i64,
    generated: String,
    requests: usize,
    source: String,
    sources: Vec<(String, usize)>,
    spend: String,
    budget: String,
    budget_used: String,
    traffic: Vec<TrafficCells>,
    predictions: Vec<PredictionCells>,
    calibration_chart: String,
    breakers: Vec<(String, String, String, String)>,
}

/// One traffic row, formatted: source, pool, class, requests, p99, SLA, attainment, cost.
type TrafficCells = (
    String,
    String,
    String,
    usize,
    String,
    String,
    String,
    String,
);

/// One pool's prediction errors of one latency, formatted: pool, latency, requests scored, MAPE raw
/// and corrected, p90 raw and corrected, bias corrected.
type PredictionCells = (
    String,
    &'static str,
    usize,
    String,
    String,
    String,
    String,
    String,
);

/// The rows of the prediction table: each pool's TTFT and E2E errors, then its corrected E2E errors
/// split by whether later requests routed to the same endpoint met the request (they share its
/// steps, and no routing-time prediction knows them).
fn prediction_cells(pools: &[PoolErrors]) -> Vec<PredictionCells> {
    let share = |s: Option<ErrorSummary>, f: fn(ErrorSummary) -> f64| fmt::percent(s.map(f), 1);
    let row = |pool: &PoolErrors, name: &'static str, e: LatencyErrors| {
        e.corrected.map(|c| {
            (
                pool.pool.clone(),
                name,
                c.requests,
                share(e.raw, |s| s.mape),
                share(e.corrected, |s| s.mape),
                share(e.raw, |s| s.p90),
                share(e.corrected, |s| s.p90),
                share(e.corrected, |s| s.bias),
            )
        })
    };
    let corrected_only = |corrected| LatencyErrors {
        raw: None,
        corrected,
    };
    pools
        .iter()
        .flat_map(|p| {
            [
                row(p, "TTFT", p.ttft),
                row(p, "E2E", p.e2e),
                row(p, LATER_NONE, corrected_only(p.e2e_by_later.none)),
                row(p, LATER_SOME, corrected_only(p.e2e_by_later.some)),
            ]
        })
        .flatten()
        .collect()
}

/// The latency names of the later-arrival split's rows (the page's script writes the same).
const LATER_NONE: &str = "E2E, no later arrival";
const LATER_SOME: &str = "E2E, met later arrivals";

/// `GET /gateway`: requests by pool and class, SLA attainment, spend against budget, breakers.
pub(crate) async fn gateway(
    State(store): State<Arc<dyn Store>>,
    Query(raw): Query<HashMap<String, String>>,
) -> PageResult {
    let window = query::window_minutes(&raw)?;
    let source = query::gateway_source(&raw);
    let v = view::gateway(&*store, window, source.as_deref(), Utc::now()).await?;
    let page = GatewayPage {
        title: "Gateway".to_owned(),
        active: "gateway",
        window,
        generated: v
            .generated_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        requests: v.requests,
        source: v.source.clone().unwrap_or_default(),
        sources: v
            .sources
            .iter()
            .map(|s| (s.source.clone(), s.requests))
            .collect(),
        spend: fmt::usd(Some(v.spend.today_usd)),
        budget: match (&v.spend.budget_per_day_usd, &v.spend.budget_workload) {
            (Some(b), Some(w)) => format!("{} ({w})", fmt::usd(Some(*b))),
            _ => "not set".to_owned(),
        },
        budget_used: fmt::percent(v.spend.used_fraction, 1),
        traffic: v
            .traffic
            .iter()
            .map(|t| {
                (
                    t.source.clone(),
                    t.pool.clone(),
                    t.class.clone(),
                    t.requests,
                    fmt::opt(t.p99_latency_ms, 0),
                    fmt::opt(t.sla_ms, 0),
                    fmt::percent(t.sla_attainment, 1),
                    fmt::usd(Some(t.cost_usd)),
                )
            })
            .collect(),
        predictions: prediction_cells(&v.predictions),
        calibration_chart: charts::calibration(&v.calibration),
        breakers: v
            .breakers
            .iter()
            .map(|b| {
                (
                    b.endpoint.clone(),
                    b.pool.clone(),
                    b.state.clone(),
                    b.at.to_rfc3339(),
                )
            })
            .collect(),
    };
    Ok(Html(page.render()?))
}
