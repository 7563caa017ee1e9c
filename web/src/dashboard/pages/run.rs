//! `GET /runs/{id}`: one profiling run's latency percentiles, capacity curve, quality and host.

use std::sync::Arc;

use askama::Template;
use axum::{
    extract::{Path, State},
    response::Html,
};
use strata_controller::store::{ProfileRunId, Store};

use super::{PageResult, when};
use crate::dashboard::{
    charts,
    error::DashboardError,
    fmt::{self, MISSING},
    view,
};

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    title: String,
    active: &'static str,
    run_id: i64,
    model: String,
    config_label: String,
    tokens: String,
    rps: String,
    attainment: String,
    rss: String,
    latency_svg: String,
    latency: Vec<(&'static str, String, String, String, String)>,
    capacity_note: String,
    curve_problem: String,
    has_curve: bool,
    curve_latency_svg: String,
    curve_throughput_svg: String,
    quality: Vec<(String, String, String, String)>,
    hardware: Vec<(&'static str, String)>,
    details: Vec<(&'static str, String)>,
    siblings: Vec<i64>,
}

/// Parses a run id from the path.
fn run_id(raw: &str) -> Result<ProfileRunId, DashboardError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .map(ProfileRunId)
        .ok_or_else(|| DashboardError::bad_query("id", format!("{raw:?} is not a run id")))
}

/// `GET /runs/{id}`: one run's latency percentiles, capacity curve, quality and host.
pub(crate) async fn run(State(store): State<Arc<dyn Store>>, Path(id): Path<String>) -> PageResult {
    let v = view::run(&*store, run_id(&id)?).await?;
    let r = &v.run;
    let pct = |a: f64, b: f64, c: f64, d: f64| {
        (
            fmt::num(a, 1),
            fmt::num(b, 1),
            fmt::num(c, 1),
            fmt::num(d, 1),
        )
    };
    let row = |name, (a, b, c, d)| (name, a, b, c, d);
    let latency = vec![
        row(
            "TTFT",
            pct(r.ttft_p50_ms, r.ttft_p90_ms, r.ttft_p95_ms, r.ttft_p99_ms),
        ),
        row(
            "TPOT",
            pct(r.tpot_p50_ms, r.tpot_p90_ms, r.tpot_p95_ms, r.tpot_p99_ms),
        ),
        row(
            "ITL",
            pct(r.itl_p50_ms, r.itl_p90_ms, r.itl_p95_ms, r.itl_p99_ms),
        ),
        row(
            "E2E",
            pct(r.e2e_p50_ms, r.e2e_p90_ms, r.e2e_p95_ms, r.e2e_p99_ms),
        ),
    ];
    let capacity_note = v.capacity.as_ref().map_or_else(String::new, |c| {
        format!(
            "Sustains {:.2} requests/s within TTFT p99 ≤ {:.0} ms and TPOT p99 ≤ {:.0} ms (recorded {}).",
            c.max_requests_per_s,
            c.sla_ttft_p99_ms,
            c.sla_tpot_p99_ms,
            when(c.created_at)
        )
    });
    let has_curve = !v.load_curve.is_empty();
    let h = &v.hardware;
    let cache = |b: Option<i64>| b.map_or_else(|| MISSING.to_owned(), fmt::bytes);
    let hardware = vec![
        ("CPU", h.cpu_model.clone()),
        ("cores / threads", format!("{} / {}", h.cores, h.threads)),
        ("NUMA nodes", h.numa_nodes.to_string()),
        ("memory", fmt::bytes(h.memory_bytes)),
        (
            "L1d / L2 / L3",
            format!(
                "{} / {} / {}",
                cache(h.l1d_cache_bytes),
                cache(h.l2_cache_bytes),
                cache(h.l3_cache_bytes)
            ),
        ),
        ("ISA", h.isa_flags.join(" ")),
        ("bandwidth", fmt::opt(h.bandwidth_gb_per_s, 1) + " GB/s"),
        (
            "peak int8 / f32",
            format!(
                "{} / {} GOPS",
                fmt::opt(h.peak_int8_gops, 0),
                fmt::opt(h.peak_f32_gops, 0)
            ),
        ),
        ("fingerprint", h.fingerprint_hash.clone()),
    ];
    let c = &v.config;
    let details = vec![
        ("started", when(r.started_at)),
        ("finished", when(r.finished_at)),
        (
            "requests (errors)",
            format!("{} ({})", r.request_count, r.error_count),
        ),
        ("total tokens/s", fmt::num(r.total_tokens_per_s, 1)),
        ("CPU utilization", fmt::percent(Some(r.cpu_utilization), 0)),
        ("kernel tier", r.kernel_tier.clone()),
        ("placement", r.placement.clone()),
        ("NUMA policy", c.numa_policy.clone()),
        ("KV memory", format!("{} MiB", c.kv_memory_mib)),
        ("engine", r.engine_version.clone()),
        ("workload shape", r.workload_shape.to_string()),
    ];
    let page = RunPage {
        title: format!("Run {}", r.id),
        active: "configs",
        run_id: r.id.0,
        model: v.model.name.clone(),
        config_label: format!(
            "{} · {} threads · batch {}",
            c.weight_type, c.threads, c.max_batch
        ),
        tokens: fmt::num(r.output_tokens_per_s, 1),
        rps: format!(
            "{} ({})",
            fmt::num(r.requests_per_s, 2),
            fmt::num(r.goodput_requests_per_s, 2)
        ),
        attainment: fmt::percent(Some(r.sla_attainment), 1),
        rss: fmt::bytes(r.peak_rss_bytes),
        latency_svg: charts::latency_percentiles(&v),
        latency,
        capacity_note,
        curve_problem: v.load_curve_problem.clone().unwrap_or_default(),
        has_curve,
        curve_latency_svg: if has_curve {
            charts::load_curve(
                &v.load_curve,
                |p| p.ttft_p99_ms,
                "TTFT p99 (ms)",
                v.capacity.as_ref().map(|c| c.sla_ttft_p99_ms),
            )
        } else {
            String::new()
        },
        curve_throughput_svg: if has_curve {
            charts::load_curve(
                &v.load_curve,
                |p| p.output_tokens_per_s,
                "output tokens/s",
                None,
            )
        } else {
            String::new()
        },
        quality: v
            .quality
            .iter()
            .map(|q| {
                (
                    q.text_id.clone(),
                    fmt::num(q.perplexity, 3),
                    q.top1_agreement
                        .map_or_else(|| "reference".to_owned(), |a| fmt::percent(Some(a), 1)),
                    when(q.created_at),
                )
            })
            .collect(),
        hardware,
        details,
        siblings: v.sibling_runs.iter().map(|r| r.0).collect(),
    };
    Ok(Html(page.render()?))
}
