//! The HTML pages: each handler builds its view model (see `view`), formats it into cells and renders
//! an askama template. Render failures are 500s; bad query values are 400s with the reason.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::Html,
};
use chrono::{DateTime, Utc};
use strata_controller::{
    pilot::{Comparison, PilotReport, ReplayReport},
    store::{ConfigSort, ProfileRunId, Store},
};
use strata_planner::{pace::Band, pilot::QualityGate, profile::Provenance};

use super::{
    charts,
    error::{DashboardError, PageError},
    fmt::{self, MISSING},
    query::{self, ConfigsParams, PRICE_MODELS, SortKey},
    view::{self, ConfigView, ConfigsView},
};

type PageResult = Result<Html<String>, PageError>;

/// A timestamp as pages print it.
fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: String,
    active: &'a str,
    status: String,
    message: &'a str,
}

/// The HTML of an error page.
pub(crate) fn error_page(status: StatusCode, message: &str) -> String {
    let page = ErrorPage {
        title: status.to_string(),
        active: "",
        status: status.to_string(),
        message,
    };
    page.render()
        .unwrap_or_else(|_| format!("<!doctype html><title>{status}</title><p>{status}</p>"))
}

/// Any path the dashboard does not serve.
pub(crate) async fn not_found(uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    if uri.path().starts_with("/api/") {
        return super::error::ApiError(DashboardError::NotFound(
            "no such API path: the dashboard's API has /api/configs, /api/runs/ID, /api/plans, \
             /api/pilots, /api/gateway and /api/openapi.json"
                .to_owned(),
        ))
        .into_response();
    }
    PageError(DashboardError::NotFound(
        "no such page: the dashboard has /configs, /runs/ID, /plans, /pilots and /gateway"
            .to_owned(),
    ))
    .into_response()
}

/// A sortable column heading.
struct Header {
    label: &'static str,
    class: &'static str,
    href: String,
    arrow: &'static str,
}

/// One config table row, formatted.
struct ConfigCells {
    href: String,
    pareto: bool,
    model: String,
    weights: String,
    threads: i64,
    batch: i64,
    numa: String,
    host: String,
    host_title: String,
    kind: &'static str,
    tokens: String,
    ttft50: String,
    ttft99: String,
    tpot50: String,
    tpot99: String,
    e2e50: String,
    e2e99: String,
    capacity: String,
    ppl_delta: String,
    top1: String,
    usd: String,
}

impl From<&ConfigView> for ConfigCells {
    fn from(r: &ConfigView) -> Self {
        let s = &r.summary;
        ConfigCells {
            href: format!("/runs/{}", s.run_id),
            pareto: r.pareto,
            model: if s.model_synthetic {
                format!("{} ({})", s.model_name, Provenance::SYNTHETIC_LABEL)
            } else {
                s.model_name.clone()
            },
            weights: s.weight_type.clone(),
            threads: s.threads,
            batch: s.max_batch,
            numa: s.numa_policy.clone(),
            host: format!("#{} {}c", s.hardware_id, s.cores),
            host_title: format!("{} ({} NUMA nodes)", s.cpu_model, s.numa_nodes),
            kind: if r.gpu { "GPU" } else { "CPU" },
            tokens: fmt::num(s.output_tokens_per_s, 1),
            ttft50: fmt::num(s.ttft_p50_ms, 1),
            ttft99: fmt::num(s.ttft_p99_ms, 1),
            tpot50: fmt::num(s.tpot_p50_ms, 1),
            tpot99: fmt::num(s.tpot_p99_ms, 1),
            e2e50: fmt::num(s.e2e_p50_ms, 0),
            e2e99: fmt::num(s.e2e_p99_ms, 0),
            capacity: s
                .capacity_requests_per_s
                .map_or_else(|| MISSING.to_owned(), |c| format!("{c:.2} req/s")),
            ppl_delta: r
                .perplexity_delta
                .map_or_else(|| MISSING.to_owned(), |d| format!("{d:+.3}")),
            top1: fmt::percent(s.top1_agreement, 1),
            usd: fmt::usd(r.usd_per_million_output_tokens),
        }
    }
}

#[derive(Template)]
#[template(path = "configs.html")]
struct ConfigsPage {
    title: String,
    active: &'static str,
    f_model: String,
    f_weights: String,
    f_threads: String,
    f_batch: String,
    f_numa: String,
    f_host: String,
    f_instance: String,
    f_gpu_instance: String,
    f_price: String,
    f_sort: String,
    f_dir: String,
    cpu_instances: Vec<String>,
    gpu_instances: Vec<String>,
    price_models: Vec<String>,
    pricing_note: String,
    baseline_note: String,
    filtered: bool,
    store_hint: &'static str,
    pareto_svg: String,
    headers: Vec<Header>,
    rows: Vec<ConfigCells>,
    endpoints: Vec<EndpointCells>,
    api_href: String,
}

/// One measured endpoint's newest run, formatted.
struct EndpointCells {
    url: String,
    model: String,
    api: String,
    runs: usize,
    requests: String,
    tokens: String,
    ttft50: String,
    ttft99: String,
    tpot50: String,
    tpot99: String,
    e2e99: String,
    attainment: String,
    when: String,
}

/// Every endpoint measured with `strata profile --endpoint`, by its newest run.
async fn endpoint_cells(store: &dyn Store) -> Result<Vec<EndpointCells>, DashboardError> {
    let mut cells = Vec::new();
    for endpoint in store.list_endpoints().await? {
        let runs = store.list_endpoint_runs(endpoint.id).await?;
        let Some(newest) = runs.first() else {
            continue;
        };
        cells.push(EndpointCells {
            url: endpoint.base_url,
            model: endpoint.model_name,
            api: newest.api.clone(),
            runs: runs.len(),
            requests: format!("{} ({} failed)", newest.request_count, newest.error_count),
            tokens: fmt::num(newest.output_tokens_per_s, 1),
            ttft50: fmt::num(newest.ttft_p50_ms, 0),
            ttft99: fmt::num(newest.ttft_p99_ms, 0),
            tpot50: fmt::num(newest.tpot_p50_ms, 1),
            tpot99: fmt::num(newest.tpot_p99_ms, 1),
            e2e99: fmt::num(newest.e2e_p99_ms, 0),
            attainment: fmt::percent(Some(newest.sla_attainment), 1),
            when: newest.started_at.format("%Y-%m-%d %H:%M UTC").to_string(),
        });
    }
    Ok(cells)
}

/// The config table's columns: heading, alignment, sort key if sortable.
const COLUMNS: [(&str, &str, Option<SortKey>); 18] = [
    ("model", "text", Some(SortKey::Store(ConfigSort::Model))),
    ("weights", "text", None),
    ("threads", "", None),
    ("batch", "", None),
    ("NUMA", "text", None),
    ("host", "text", None),
    ("kind", "text", None),
    (
        "tok/s",
        "",
        Some(SortKey::Store(ConfigSort::OutputTokensPerS)),
    ),
    ("TTFT p50", "", Some(SortKey::Store(ConfigSort::TtftP50))),
    ("TTFT p99", "", Some(SortKey::Store(ConfigSort::TtftP99))),
    ("TPOT p50", "", None),
    ("TPOT p99", "", Some(SortKey::Store(ConfigSort::TpotP99))),
    ("E2E p50", "", None),
    ("E2E p99", "", Some(SortKey::Store(ConfigSort::E2eP99))),
    (
        "capacity @SLA",
        "",
        Some(SortKey::Store(ConfigSort::Capacity)),
    ),
    ("ΔPPL", "", None),
    ("top-1", "", Some(SortKey::Store(ConfigSort::Top1Agreement))),
    ("$/1M tok", "", Some(SortKey::Cost)),
];

fn pricing_note(view: &ConfigsView) -> String {
    let p = &view.pricing;
    if view.instances.is_empty() {
        return "No instance prices are recorded in the store, so $ per 1M tokens is blank: `strata plan`, `strata pilot` and every command that opens the store record the builtin catalog's prices.".to_owned();
    }
    let describe = |i: &view::InstanceCost| {
        format!(
            "{} ({} vCPUs, {} {}, {} price of {} from {}: {})",
            i.name,
            i.vcpus,
            i.provider,
            i.region,
            p.price_model,
            i.price_date,
            i.source,
            i.usd_per_hour
                .map_or_else(|| "no such price".to_owned(), |h| format!("${h:.4}/h")),
        )
    };
    let cpu = match &p.cpu_instance {
        Some(i) => format!("CPU configs on {}", describe(i)),
        None if p.hosts.is_empty() => "no CPU host to cost".to_owned(),
        None => p
            .hosts
            .iter()
            .map(|h| {
                format!(
                    "CPU configs of host #{} ({} vCPUs) on {}, {}",
                    h.hardware_id,
                    h.vcpus,
                    if h.exact {
                        "the type with its vCPUs"
                    } else {
                        "the cheapest type that fits it"
                    },
                    describe(&h.instance)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    };
    let gpu = p.gpu_instance.as_ref().map_or_else(
        || "no GPU instance price recorded".to_owned(),
        |i| format!("GPU endpoints on {}", describe(i)),
    );
    format!(
        "$ per 1M output tokens at each config's output rate at its capacity within the SLA (its latest run's rate when it has no capacity result), carried from the host to the instance type by the planner's scaling rule: {cpu}; {gpu}. Site: PUE {}, ${}/kWh, ${}/h ops.",
        p.site.pue, p.site.energy_price_per_kwh, p.site.ops_per_hour
    )
}

/// `GET /configs`: every measured config, sortable and filterable by query, with the Pareto chart.
pub(crate) async fn configs(
    State(store): State<Arc<dyn Store>>,
    Query(raw): Query<HashMap<String, String>>,
) -> PageResult {
    let params = ConfigsParams::parse(&raw)?;
    let view = view::configs(&*store, &params).await?;
    let headers = COLUMNS
        .iter()
        .map(|(label, class, sort)| Header {
            label,
            class,
            href: sort.map(|s| params.sort_href(s)).unwrap_or_default(),
            arrow: match sort {
                Some(s) if *s == params.sort && params.descending => " ▼",
                Some(s) if *s == params.sort => " ▲",
                _ => "",
            },
        })
        .collect();
    let q = |key: &str| view.query.get(key).cloned().unwrap_or_default();
    let (gpu_instances, cpu_instances) = view.instances.iter().partition::<Vec<_>, _>(|i| i.gpu);
    let page = ConfigsPage {
        title: "Configs".to_owned(),
        active: "configs",
        f_model: q("model"),
        f_weights: q("weights"),
        f_threads: q("threads"),
        f_batch: q("batch"),
        f_numa: q("numa"),
        f_host: q("host"),
        f_instance: q("instance"),
        f_gpu_instance: q("gpu_instance"),
        f_price: q("price"),
        f_sort: q("sort"),
        f_dir: q("dir"),
        cpu_instances: cpu_instances.into_iter().map(|i| i.name.clone()).collect(),
        gpu_instances: gpu_instances.into_iter().map(|i| i.name.clone()).collect(),
        price_models: PRICE_MODELS.map(|m| m.as_str().to_owned()).to_vec(),
        pricing_note: pricing_note(&view),
        filtered: params.model.is_some()
            || params.weights.is_some()
            || params.host.is_some()
            || params.threads.is_some()
            || params.batch.is_some()
            || params.numa.is_some(),
        store_hint: "the store named by --database-url, else the local SQLite file",
        pareto_svg: if view.rows.is_empty() {
            String::new()
        } else {
            charts::pareto(&view.rows, view.gpu_baseline.as_ref())
        },
        baseline_note: view.gpu_baseline.as_ref().map_or_else(String::new, |b| {
            format!(
                "GPU baseline of workload {}: {} at {} per 1M output tokens, E2E p99 {} ms ({}).",
                b.workload,
                b.name,
                fmt::usd(Some(b.usd_per_million_output_tokens)),
                fmt::num(b.e2e_p99_ms, 0),
                b.basis
            )
        }),
        headers,
        rows: view.rows.iter().map(ConfigCells::from).collect(),
        endpoints: endpoint_cells(&*store).await?,
        api_href: format!("/api/configs?{}", query::encode_pairs(&params.to_pairs())),
    };
    Ok(Html(page.render()?))
}

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
                "{} requests over {} s at {} req/s on one host of {}{}, {} errors",
                r.requests,
                fmt::num(r.duration_s, 0),
                fmt::num(r.load.rate_rps, 2),
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
