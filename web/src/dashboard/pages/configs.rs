//! `GET /configs`: every measured config as a sortable, filterable table beside the Pareto chart and
//! the endpoints measured with `strata profile --endpoint`.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Query, State},
    response::Html,
};
use strata_controller::store::{ConfigSort, Store};
use strata_planner::profile::Provenance;

use super::PageResult;
use crate::dashboard::{
    charts,
    error::DashboardError,
    fmt::{self, MISSING},
    query::{self, ConfigsParams, PRICE_MODELS, SortKey},
    view::{self, ConfigView, ConfigsView},
};

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
