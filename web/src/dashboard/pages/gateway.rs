//! `GET /gateway`: the gateway's requests by pool and class, SLA attainment, spend and breakers.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Query, State},
    response::Html,
};
use chrono::Utc;
use strata_controller::store::Store;

use super::PageResult;
use crate::dashboard::{fmt, query, view};

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
