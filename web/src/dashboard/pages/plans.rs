//! `GET /plans`: the latest plan of each workload, hour by hour.

use std::sync::Arc;

use askama::Template;
use axum::{extract::State, response::Html};
use strata_controller::store::Store;

use super::{PageResult, when};
use crate::dashboard::{
    charts,
    fmt::{self, MISSING},
    view,
};

struct PlanCells {
    workload: String,
    id: i64,
    created_at: String,
    total_cost: String,
    all_gpu_cost: String,
    savings: String,
    tokens: String,
    chosen: String,
    problem: String,
    hours: Vec<HourCells>,
    svg: String,
    json: String,
}

struct HourCells {
    hour: u32,
    cpu: String,
    gpu: String,
    cost: String,
    /// (text, CSS class) per class.
    classes: Vec<(String, &'static str)>,
}

#[derive(Template)]
#[template(path = "plans.html")]
struct PlansPage {
    title: String,
    active: &'static str,
    plans: Vec<PlanCells>,
}

/// `GET /plans`: the latest plan of each workload, hour by hour.
pub(crate) async fn plans(State(store): State<Arc<dyn Store>>) -> PageResult {
    let v = view::plans(&*store).await?;
    let plans = v
        .plans
        .iter()
        .map(|p| PlanCells {
            workload: p.workload.clone(),
            id: p.plan_id,
            created_at: when(p.created_at),
            total_cost: fmt::usd(Some(p.total_cost_usd)),
            all_gpu_cost: fmt::usd(p.all_gpu_cost_usd),
            savings: match (p.savings_usd, p.all_gpu_cost_usd) {
                (Some(s), Some(g)) if g > 0.0 => {
                    format!("{} ({:.0}%)", fmt::usd(Some(s)), s / g * 100.0)
                }
                (s, _) => fmt::usd(s),
            },
            tokens: p.total_output_tokens.to_string(),
            chosen: match (&p.config, &p.instance_type) {
                (Some(c), Some(i)) => format!("{c} on {i}"),
                _ => MISSING.to_owned(),
            },
            problem: p.problem.clone().unwrap_or_default(),
            hours: p
                .hours
                .iter()
                .map(|h| HourCells {
                    hour: h.hour,
                    cpu: h.cpu_instances.to_string(),
                    gpu: fmt::percent(Some(h.gpu_share), 0),
                    cost: fmt::usd(Some(h.cost_usd)),
                    classes: h
                        .classes
                        .iter()
                        .map(|c| {
                            let text = format!(
                                "{}: {} / {} ms",
                                c.class,
                                fmt::num(c.p99_ms, 0),
                                fmt::opt(c.sla_ms, 0)
                            );
                            let class = if c.met { "good" } else { "bad" };
                            (text, class)
                        })
                        .collect(),
                })
                .collect(),
            svg: if p.hours.is_empty() {
                String::new()
            } else {
                charts::plan_hours(&p.hours)
            },
            json: serde_json::to_string_pretty(&p.plan).unwrap_or_default(),
        })
        .collect();
    let page = PlansPage {
        title: "Plans".to_owned(),
        active: "plans",
        plans,
    };
    Ok(Html(page.render()?))
}
