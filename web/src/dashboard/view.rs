//! The view models behind each page: read from the store, computed once, then either rendered into a
//! template or returned as JSON by the API.
//!
//! Everything is read with its producer's own types: plans as the planner's [`Plan`], workloads as its
//! [`Workload`], load curves as profiling's [`StoredLoadPoint`]s, prices through the planner's catalog
//! and TCO. A stored value that does not read as its type is shown as an error on its page, not as a
//! blank.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use strata_controller::{
    planning::{self, StoredLoadPoint},
    store::{
        CapacityResultRow, ConfigId, ConfigRow, ConfigSort, ConfigSummaryQuery, ConfigSummaryRow,
        HardwareId, HardwareRow, ModelRow, PlanRow, ProfileRunId, ProfileRunRow, QualityResultRow,
        Store, WorkloadRow,
    },
};
use strata_planner::{
    catalog::{Catalog, InstanceType, PriceModel},
    plan::Plan,
    profile::{MeasuredOn, Scaling},
    tco::{CostInputs, SiteCosts, dollars_per_million_tokens},
    workload::{GpuFallback, Workload},
};

use super::{
    error::DashboardError,
    query::{ConfigsParams, SortKey},
};

mod gateway;
mod pilots;

pub(crate) use gateway::{CalibrationPoint, GatewayView, gateway};
pub(crate) use pilots::{PilotsView, pilots};

/// The config table and Pareto chart.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConfigsView {
    /// The parameters in effect, defaults filled in where they matter.
    pub(crate) query: BTreeMap<&'static str, String>,
    pub(crate) pricing: Pricing,
    /// Instance types with a recorded price, for the picker.
    pub(crate) instances: Vec<InstanceChoice>,
    pub(crate) rows: Vec<ConfigView>,
    /// The GPU baseline of the latest workload, as a point of its own.
    pub(crate) gpu_baseline: Option<GpuBaseline>,
}

/// What the $ per 1M tokens column was computed with.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Pricing {
    pub(crate) price_model: PriceModel,
    pub(crate) site: SiteCosts,
    /// The instance CPU configs are costed on, when one was chosen (`instance=`); else each host's
    /// own, see `hosts`.
    pub(crate) cpu_instance: Option<InstanceCost>,
    /// The instance type each host's CPU configs are costed on when none was chosen: the type with
    /// the host's vCPUs, else the cheapest that fits.
    pub(crate) hosts: Vec<HostInstance>,
    /// The instance GPU endpoints are costed on.
    pub(crate) gpu_instance: Option<InstanceCost>,
}

/// One instance type's hourly cost under the chosen price model.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InstanceCost {
    pub(crate) name: String,
    pub(crate) provider: String,
    pub(crate) region: String,
    pub(crate) vcpus: u32,
    pub(crate) price_date: String,
    pub(crate) source: String,
    /// `None` when the catalog has no price under the chosen model.
    pub(crate) usd_per_hour: Option<f64>,
}

impl InstanceCost {
    fn of(instance: &InstanceType, model: PriceModel, site: &SiteCosts) -> Self {
        InstanceCost {
            name: instance.name.clone(),
            provider: instance.provider.clone(),
            region: instance.region.clone(),
            vcpus: instance.vcpus,
            price_date: instance.price_date.clone(),
            source: instance.source.clone(),
            usd_per_hour: CostInputs::for_instance(instance, model, site).map(|c| c.hourly_cost()),
        }
    }
}

/// The instance type a host's configs are costed on by default.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HostInstance {
    pub(crate) hardware_id: HardwareId,
    /// The host's hardware threads.
    pub(crate) vcpus: u32,
    pub(crate) instance: InstanceCost,
    /// True when the type has exactly the host's vCPUs; false when it is the cheapest that fits.
    pub(crate) exact: bool,
}

/// An instance type in the picker.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InstanceChoice {
    pub(crate) name: String,
    pub(crate) gpu: bool,
}

/// One row of the config table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConfigView {
    #[serde(flatten)]
    pub(crate) summary: ConfigSummaryRow,
    /// Measured on a GPU endpoint (its kernel tier names an accelerator).
    pub(crate) gpu: bool,
    /// Perplexity minus the reference run's, on the same text.
    pub(crate) perplexity_delta: Option<f64>,
    /// The instance type the row is costed on.
    pub(crate) instance: Option<String>,
    /// How the host's measured rate carries over to that instance type (the planner's rule).
    pub(crate) scaling: Option<Scaling>,
    /// The host's output tokens/s the row is costed at (before scaling to the instance type).
    pub(crate) costed_output_tokens_per_s: f64,
    /// Where that rate comes from.
    pub(crate) cost_basis: CostBasis,
    /// $ per 1M output tokens at that rate, scaled to the instance type.
    pub(crate) usd_per_million_output_tokens: Option<f64>,
    /// On the Pareto frontier of cost against E2E p99.
    pub(crate) pareto: bool,
}

impl ConfigView {
    /// A short name for chart labels: weights, threads, batch.
    pub(crate) fn label(&self) -> String {
        let s = &self.summary;
        format!("{} t{} b{}", s.weight_type, s.threads, s.max_batch)
    }
}

/// The output rate a config is costed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CostBasis {
    /// At its capacity within the SLA, on its newest capacity curve.
    Capacity,
    /// At its latest run's measured rate (no capacity result).
    MeasuredRun,
}

/// Output tokens/s at `rps` requests/s on a curve sorted by rate: linear between points, from the
/// origin below the first, the last point's above it; `None` for an empty curve or a rate not above 0.
pub(crate) fn output_rate_at(points: &[StoredLoadPoint], rps: f64) -> Option<f64> {
    if !(rps.is_finite() && rps > 0.0) {
        return None;
    }
    let mut below = (0.0, 0.0);
    for p in points {
        if p.rate_rps >= rps {
            let (r0, t0) = below;
            let span = p.rate_rps - r0;
            let t = if span > 0.0 {
                t0 + (p.output_tokens_per_s - t0) * (rps - r0) / span
            } else {
                p.output_tokens_per_s
            };
            return t.is_finite().then_some(t);
        }
        below = (p.rate_rps, p.output_tokens_per_s);
    }
    points.last().map(|p| p.output_tokens_per_s)
}

/// The GPU baseline of a workload as a point on the cost-latency chart.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GpuBaseline {
    /// The workload whose baseline it is.
    pub(crate) workload: String,
    /// The GPU instance type or endpoint.
    pub(crate) name: String,
    /// $ per 1M output tokens of the workload's mean request.
    pub(crate) usd_per_million_output_tokens: f64,
    /// p99 TTFT plus p99 TPOT for each further output token of the workload's mean request, ms.
    pub(crate) e2e_p99_ms: f64,
    /// Where the figures come from.
    pub(crate) basis: String,
}

/// Kernel tiers that run on an accelerator rather than the CPU.
const GPU_TIERS: [&str; 5] = ["cuda", "rocm", "metal", "vulkan", "gpu"];

/// Whether a run's kernel tier names an accelerator.
pub(crate) fn is_gpu_tier(tier: &str) -> bool {
    let tier = tier.to_ascii_lowercase();
    GPU_TIERS.iter().any(|gpu| tier.starts_with(gpu))
}

/// The instance type called `name` in `catalog` (its cheapest region), or a 400 naming the known ones.
fn chosen<'a>(
    catalog: &'a Catalog,
    name: &str,
    param: &'static str,
) -> Result<&'a InstanceType, DashboardError> {
    // The cheapest region's price when the type is sold in several.
    catalog
        .instances
        .iter()
        .filter(|i| i.name == name)
        .min_by(|a, b| a.on_demand_per_hour.total_cmp(&b.on_demand_per_hour))
        .ok_or_else(|| {
            DashboardError::bad_query(
                param,
                if catalog.instances.is_empty() {
                    format!("no instance prices are recorded, so {name:?} cannot be priced")
                } else {
                    let mut known: Vec<&str> =
                        catalog.instances.iter().map(|i| i.name.as_str()).collect();
                    known.dedup();
                    format!(
                        "no recorded price for instance type {name:?}; known: {}",
                        known.join(", ")
                    )
                },
            )
        })
}

/// Builds the config table for `params`.
pub(crate) async fn configs(
    store: &dyn Store,
    params: &ConfigsParams,
) -> Result<ConfigsView, DashboardError> {
    let catalog = planning::catalog_of_prices(&store.list_catalog_prices(None).await?);
    let cpu_choice = params
        .instance
        .as_deref()
        .map(|name| chosen(&catalog, name, "instance"))
        .transpose()?;
    let gpu_choice = match params.gpu_instance.as_deref() {
        Some(name) => Some(chosen(&catalog, name, "gpu_instance")?),
        // Without a choice, the cheapest GPU instance type (on-demand).
        None => catalog
            .instances
            .iter()
            .filter(|i| i.is_gpu())
            .min_by(|a, b| a.on_demand_per_hour.total_cmp(&b.on_demand_per_hour)),
    };

    let by_cost = params.sort == SortKey::Cost;
    let query = ConfigSummaryQuery {
        model: params.model.clone(),
        weight_type: params.weights.clone(),
        hardware_id: params.host,
        threads: params.threads,
        max_batch: params.batch,
        numa_policy: params.numa.clone(),
        sort: match params.sort {
            SortKey::Cost => ConfigSort::OutputTokensPerS,
            SortKey::Store(sort) => sort,
        },
        descending: if by_cost { true } else { params.descending },
        limit: (!by_cost).then_some(params.limit),
    };
    let summaries = store.list_config_summaries(&query).await?;
    let mut hosts: BTreeMap<HardwareId, HardwareRow> = BTreeMap::new();
    for s in &summaries {
        if let std::collections::btree_map::Entry::Vacant(slot) = hosts.entry(s.hardware_id) {
            slot.insert(store.get_hardware(s.hardware_id).await?);
        }
    }
    // Each row is costed at its output rate at its capacity within the SLA, read off its newest
    // capacity curve on its host (DESIGN's cost), else at its latest run's measured rate.
    let mut at_capacity: HashMap<(ConfigId, HardwareId), f64> = HashMap::new();
    for s in summaries
        .iter()
        .filter(|s| s.capacity_requests_per_s.is_some())
    {
        let newest = store
            .list_capacity_results_for_config(s.config_id)
            .await?
            .into_iter()
            .find(|c| c.hardware_id == s.hardware_id);
        if let Some(c) = newest
            && let Ok(points) = load_points(&c)
            && let Some(rate) = output_rate_at(&points, c.max_requests_per_s)
        {
            at_capacity.insert((s.config_id, s.hardware_id), rate);
        }
    }
    let host_vcpus = |h: &HardwareRow| u32::try_from(h.threads).unwrap_or(1).max(1);
    let host_instances: BTreeMap<HardwareId, &InstanceType> = hosts
        .values()
        .filter_map(|h| Some((h.id, catalog.cpu_instance_for_host(host_vcpus(h))?)))
        .collect();
    let site = &params.site;
    let mut rows: Vec<ConfigView> = summaries
        .into_iter()
        .map(|summary| {
            let gpu = is_gpu_tier(&summary.kernel_tier);
            let priced = if gpu {
                gpu_choice.map(|i| {
                    let scaling = Scaling {
                        rule: strata_planner::profile::ScalingRule::MeasuredOnType,
                        factor: 1.0,
                    };
                    (i, Some(scaling))
                })
            } else {
                let host = hosts.get(&summary.hardware_id);
                let instance =
                    cpu_choice.or_else(|| host_instances.get(&summary.hardware_id).copied());
                instance.map(|i| {
                    let scaling = host.and_then(|h| {
                        measured_on(h).scaling_to(
                            u32::try_from(summary.threads).unwrap_or(1),
                            i,
                            None,
                        )
                    });
                    (i, scaling)
                })
            };
            let capacity_rate = at_capacity
                .get(&(summary.config_id, summary.hardware_id))
                .copied();
            let costed_rate = capacity_rate.unwrap_or(summary.output_tokens_per_s);
            let usd = priced.and_then(|(i, scaling)| {
                let hourly = CostInputs::for_instance(i, params.price, site)?.hourly_cost();
                dollars_per_million_tokens(hourly, costed_rate * scaling?.factor)
            });
            let perplexity_delta = summary
                .perplexity
                .zip(summary.reference_perplexity)
                .map(|(p, r)| p - r);
            ConfigView {
                summary,
                gpu,
                perplexity_delta,
                instance: priced.map(|(i, _)| i.name.clone()),
                scaling: priced.and_then(|(_, s)| s),
                costed_output_tokens_per_s: costed_rate,
                cost_basis: if capacity_rate.is_some() {
                    CostBasis::Capacity
                } else {
                    CostBasis::MeasuredRun
                },
                usd_per_million_output_tokens: usd,
                pareto: false,
            }
        })
        .collect();
    if by_cost {
        // Unpriced rows last; the store already ordered them by throughput, a stable sort keeps that.
        rows.sort_by(|a, b| {
            let (a, b) = (
                a.usd_per_million_output_tokens,
                b.usd_per_million_output_tokens,
            );
            match (a, b) {
                (Some(a), Some(b)) if params.descending => b.total_cmp(&a),
                (Some(a), Some(b)) => a.total_cmp(&b),
                (a, b) => b.is_some().cmp(&a.is_some()),
            }
        });
        rows.truncate(usize::try_from(params.limit).unwrap_or(usize::MAX));
    }
    for index in pareto_frontier(&rows) {
        rows[index].pareto = true;
    }
    let pricing = Pricing {
        price_model: params.price,
        site: params.site,
        cpu_instance: cpu_choice.map(|i| InstanceCost::of(i, params.price, site)),
        hosts: hosts
            .values()
            .filter_map(|h| {
                let i = host_instances.get(&h.id)?;
                Some(HostInstance {
                    hardware_id: h.id,
                    vcpus: host_vcpus(h),
                    instance: InstanceCost::of(i, params.price, site),
                    exact: i.vcpus == host_vcpus(h),
                })
            })
            .collect(),
        gpu_instance: gpu_choice.map(|i| InstanceCost::of(i, params.price, site)),
    };
    let mut query = params.to_pairs();
    query.insert("price", params.price.to_string());
    if let Some(i) = &pricing.cpu_instance {
        query.insert("instance", i.name.clone());
    }
    if let Some(i) = &pricing.gpu_instance {
        query.insert("gpu_instance", i.name.clone());
    }
    let mut instances: Vec<InstanceChoice> = Vec::new();
    for i in &catalog.instances {
        if !instances.iter().any(|c| c.name == i.name) {
            instances.push(InstanceChoice {
                name: i.name.clone(),
                gpu: i.is_gpu(),
            });
        }
    }
    let gpu_baseline = gpu_baseline(store, &catalog, params).await?;
    Ok(ConfigsView {
        query,
        pricing,
        instances,
        rows,
        gpu_baseline,
    })
}

/// The host a profile was measured on, as the planner's scaling rules read it.
fn measured_on(host: &HardwareRow) -> MeasuredOn {
    MeasuredOn {
        host: format!("hardware {} ({})", host.id, host.cpu_model),
        instance_type: None,
        vcpus: u32::try_from(host.threads).unwrap_or(1).max(1),
        mem_bandwidth_gbs: host.bandwidth_gb_per_s.unwrap_or(0.0),
        int8_gops: host.peak_int8_gops.unwrap_or(0.0),
    }
}

/// The workload planned last (else the newest one), with its latest plan.
async fn latest_workload(
    store: &dyn Store,
) -> Result<Option<(WorkloadRow, Option<PlanRow>)>, DashboardError> {
    let mut latest: Option<(WorkloadRow, Option<PlanRow>)> = None;
    for workload in store.list_workloads().await? {
        let plan = store.latest_plan_for_workload(workload.id).await?;
        let at = |w: &WorkloadRow, p: &Option<PlanRow>| {
            p.as_ref()
                .map_or(w.created_at, |p| p.created_at.max(w.created_at))
        };
        let newer = latest
            .as_ref()
            .is_none_or(|(w, p)| at(&workload, &plan) >= at(w, p));
        if newer {
            latest = Some((workload, plan));
        }
    }
    Ok(latest)
}

/// The share-weighted mean of a per-class length over the workload's classes.
fn mix_mean(w: &Workload, length: impl Fn(&strata_planner::workload::RequestClass) -> f64) -> f64 {
    let total: f64 = w.classes.iter().map(|c| c.share.max(0.0)).sum();
    if total > 0.0 {
        w.classes
            .iter()
            .map(|c| c.share.max(0.0) * length(c))
            .sum::<f64>()
            / total
    } else {
        w.classes.iter().map(length).sum::<f64>() / w.classes.len().max(1) as f64
    }
}

/// The GPU baseline of the latest workload under the page's prices: its `[gpu_fallback]` priced from
/// the store's catalog, else as its latest plan priced it. `None` without a workload that has one.
async fn gpu_baseline(
    store: &dyn Store,
    catalog: &Catalog,
    params: &ConfigsParams,
) -> Result<Option<GpuBaseline>, DashboardError> {
    let Some((row, plan)) = latest_workload(store).await? else {
        return Ok(None);
    };
    let workload = read_workload(&row)?;
    let Some(spec) = &workload.gpu_fallback else {
        return Ok(None);
    };
    let (fallback, basis) = match GpuFallback::resolve(spec, catalog, params.price, &params.site) {
        Ok(f) => (f, format!("{} price recorded in the store", params.price)),
        Err(_) => {
            let Some(plan) = plan else { return Ok(None) };
            let plan = read_plan(&plan)?;
            (
                plan.gpu_fallback,
                format!("{} price of plan {}", plan.price_model, row.name),
            )
        }
    };
    let prompt = mix_mean(&workload, |c| c.prompt_tokens.mean());
    let output = mix_mean(&workload, |c| c.output_tokens.mean()).max(1.0);
    let usd = fallback.request_cost(prompt, output) / output * 1e6;
    let e2e_s = fallback.ttft_p99_s + fallback.tpot_p99_s * (output - 1.0).max(0.0);
    Ok(usd.is_finite().then(|| GpuBaseline {
        workload: row.name.clone(),
        name: fallback.name.clone(),
        usd_per_million_output_tokens: usd,
        e2e_p99_ms: e2e_s * 1000.0,
        basis: format!(
            "{basis}; latency as the workload states it (TTFT p99 {:.3} s, TPOT p99 {:.4} s) over its mean request of {output:.0} output tokens",
            fallback.ttft_p99_s, fallback.tpot_p99_s
        ),
    }))
}

/// A stored workload as the planner's [`Workload`].
pub(crate) fn read_workload(row: &WorkloadRow) -> Result<Workload, DashboardError> {
    serde_json::from_value(row.spec.clone())
        .map_err(|e| DashboardError::Stored(format!("workload {} ({}): {e}", row.id, row.name)))
}

/// A stored plan as the planner's [`Plan`].
pub(crate) fn read_plan(row: &PlanRow) -> Result<Plan, DashboardError> {
    serde_json::from_value(row.plan.clone())
        .map_err(|e| DashboardError::Stored(format!("plan {}: {e}", row.id)))
}

/// The indices of the rows no other row beats on both $ per 1M tokens and E2E p99 (lower is better
/// on both), cheapest first. Rows without a cost are not ranked, nor are rows of models with random
/// weights, whose quality cannot stand beside real models'.
pub(crate) fn pareto_frontier(rows: &[ConfigView]) -> Vec<usize> {
    let mut priced: Vec<(usize, f64, f64)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.summary.model_synthetic)
        .filter_map(|(i, r)| {
            let usd = r.usd_per_million_output_tokens?;
            let p99 = r.summary.e2e_p99_ms;
            (usd.is_finite() && p99.is_finite()).then_some((i, usd, p99))
        })
        .collect();
    priced.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)));
    let mut frontier = Vec::new();
    let mut best_p99 = f64::INFINITY;
    for (i, _, p99) in priced {
        if p99 < best_p99 {
            best_p99 = p99;
            frontier.push(i);
        }
    }
    frontier
}

/// One run in full.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunView {
    pub(crate) run: ProfileRunRow,
    pub(crate) config: ConfigRow,
    pub(crate) model: ModelRow,
    pub(crate) hardware: HardwareRow,
    /// The capacity result read from this run, else the latest of its config on its host.
    pub(crate) capacity: Option<CapacityResultRow>,
    /// The capacity result's load curve, by offered rate.
    pub(crate) load_curve: Vec<StoredLoadPoint>,
    /// Why the capacity result's curve could not be read, when it could not.
    pub(crate) load_curve_problem: Option<String>,
    /// The config's quality results, newest first.
    pub(crate) quality: Vec<QualityResultRow>,
    /// Other runs of the same config, newest first.
    pub(crate) sibling_runs: Vec<ProfileRunId>,
}

/// Builds the page of run `id`.
pub(crate) async fn run(store: &dyn Store, id: ProfileRunId) -> Result<RunView, DashboardError> {
    let run = store.get_profile_run(id).await?;
    let config = store.get_config(run.config_id).await?;
    let model = store.get_model(config.model_id).await?;
    let hardware = store.get_hardware(run.hardware_id).await?;
    let capacities: Vec<CapacityResultRow> = store
        .list_capacity_results_for_config(config.id)
        .await?
        .into_iter()
        .filter(|c| c.hardware_id == hardware.id)
        .collect();
    let capacity = capacities
        .iter()
        .find(|c| c.run_id == Some(run.id))
        .or(capacities.first())
        .cloned();
    let (load_curve, load_curve_problem) = match capacity.as_ref().map(load_points) {
        Some(Ok(points)) => (points, None),
        Some(Err(problem)) => (Vec::new(), Some(problem)),
        None => (Vec::new(), None),
    };
    let quality = store.list_quality_results_for_config(config.id).await?;
    let sibling_runs = store
        .list_profile_runs_for_config(config.id)
        .await?
        .into_iter()
        .map(|r| r.id)
        .filter(|r| *r != run.id)
        .take(20)
        .collect();
    Ok(RunView {
        run,
        config,
        model,
        hardware,
        capacity,
        load_curve,
        load_curve_problem,
        quality,
        sibling_runs,
    })
}

/// The points of a capacity result's load curve, as profiling stores them, by offered rate; the
/// reason when the curve does not read as [`StoredLoadPoint`]s.
pub(crate) fn load_points(capacity: &CapacityResultRow) -> Result<Vec<StoredLoadPoint>, String> {
    let mut points: Vec<StoredLoadPoint> = serde_json::from_value(capacity.load_curve.clone())
        .map_err(|e| format!("capacity result {}: load_curve: {e}", capacity.id))?;
    points.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps));
    Ok(points)
}

/// The latest plan of every workload.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlansView {
    pub(crate) plans: Vec<PlanView>,
}

/// One plan, read as the planner's [`Plan`].
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlanView {
    pub(crate) workload: String,
    pub(crate) plan_id: i64,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) total_cost_usd: f64,
    pub(crate) total_output_tokens: i64,
    /// The chosen config and instance type, as the planner names them.
    pub(crate) config: Option<String>,
    pub(crate) instance_type: Option<String>,
    /// The cost of serving the same traffic on GPUs alone.
    pub(crate) all_gpu_cost_usd: Option<f64>,
    pub(crate) savings_usd: Option<f64>,
    pub(crate) hours: Vec<PlanHour>,
    /// Why the stored plan does not read as the planner's type, when it does not.
    pub(crate) problem: Option<String>,
    pub(crate) plan: Value,
}

/// One planned hour.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlanHour {
    pub(crate) hour: u32,
    pub(crate) cpu_instances: u32,
    pub(crate) gpu_share: f64,
    pub(crate) cost_usd: f64,
    pub(crate) classes: Vec<ClassLatency>,
}

/// A class's simulated p99 in one hour, against its SLA.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClassLatency {
    pub(crate) class: String,
    pub(crate) p99_ms: f64,
    pub(crate) sla_ms: Option<f64>,
    pub(crate) met: bool,
}

/// Builds the plans page.
pub(crate) async fn plans(store: &dyn Store) -> Result<PlansView, DashboardError> {
    let mut plans = Vec::new();
    for workload in store.list_workloads().await? {
        let Some(row) = store.latest_plan_for_workload(workload.id).await? else {
            continue;
        };
        let mut view = PlanView {
            workload: workload.name,
            plan_id: row.id.0,
            created_at: row.created_at,
            total_cost_usd: row.total_cost_usd,
            total_output_tokens: row.total_output_tokens,
            config: None,
            instance_type: None,
            all_gpu_cost_usd: None,
            savings_usd: None,
            hours: Vec::new(),
            problem: None,
            plan: Value::Null,
        };
        match read_plan(&row) {
            Ok(plan) => {
                view.config = Some(plan.chosen.config.clone());
                view.instance_type = Some(plan.chosen.instance_type.clone());
                view.all_gpu_cost_usd = Some(plan.totals.all_gpu_cost_per_day);
                view.savings_usd = Some(plan.totals.savings_per_day);
                view.hours = plan_hours(&plan);
            }
            Err(e) => view.problem = Some(e.to_string()),
        }
        view.plan = row.plan;
        plans.push(view);
    }
    Ok(PlansView { plans })
}

/// The hours of a plan, with each class's simulated p99 E2E against its SLA (E2E, else TTFT).
pub(crate) fn plan_hours(plan: &Plan) -> Vec<PlanHour> {
    plan.hours
        .iter()
        .map(|h| {
            let rps: f64 = h.classes.iter().map(|c| c.rps).sum();
            let sent: f64 = h.classes.iter().map(|c| c.rps * c.gpu_share).sum();
            PlanHour {
                hour: h.hour,
                cpu_instances: h.cpu_instances,
                gpu_share: if rps > 0.0 { sent / rps } else { 0.0 },
                cost_usd: h.cost,
                classes: h
                    .classes
                    .iter()
                    .map(|c| {
                        let (p99_s, sla_s) = match (c.sla.e2e_p99_s, c.sla.ttft_p99_s) {
                            (Some(e2e), _) => (c.e2e_p99_s, Some(e2e)),
                            (None, Some(ttft)) => (c.ttft_p99_s, Some(ttft)),
                            (None, None) => (c.e2e_p99_s, None),
                        };
                        ClassLatency {
                            class: c.class.clone(),
                            p99_ms: p99_s * 1000.0,
                            sla_ms: sla_s.map(|s| s * 1000.0),
                            met: c.meets_sla,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn load_curves_read_as_profiling_stores_them() {
        let point = |rate: f64| StoredLoadPoint {
            rate_rps: rate,
            ttft_p99_ms: 100.0 * rate,
            tpot_p99_ms: 20.0,
            e2e_p99_ms: 900.0 * rate,
            output_tokens_per_s: 30.0 * rate,
            total_tokens_per_s: 90.0 * rate,
            ttft_p50_ms: None,
            tpot_p50_ms: Some(15.0),
        };
        let row = |curve: Value| CapacityResultRow {
            id: strata_controller::store::CapacityResultId(7),
            config_id: strata_controller::store::ConfigId(1),
            hardware_id: HardwareId(1),
            run_id: None,
            sla_ttft_p99_ms: 1000.0,
            sla_tpot_p99_ms: 50.0,
            max_requests_per_s: 1.5,
            load_curve: curve,
            step_model: None,
            created_at: Utc::now(),
        };
        let curve = serde_json::to_value(vec![point(2.0), point(0.5)]).unwrap();
        let points = load_points(&row(curve)).unwrap();
        assert_eq!(points, vec![point(0.5), point(2.0)]);
        // A curve in another shape is named as such, not read as empty.
        let problem =
            load_points(&row(json!([{"offered_rps": 2.0, "p99_ms": 900.0}]))).unwrap_err();
        assert!(
            problem.starts_with("capacity result 7: load_curve:"),
            "{problem}"
        );
        assert!(problem.contains("rate_rps"), "{problem}");
    }

    #[test]
    fn the_output_rate_at_capacity_is_read_off_the_curve() {
        let point = |rate: f64, tokens: f64| StoredLoadPoint {
            rate_rps: rate,
            ttft_p99_ms: 1.0,
            tpot_p99_ms: 1.0,
            e2e_p99_ms: 1.0,
            output_tokens_per_s: tokens,
            total_tokens_per_s: tokens,
            ttft_p50_ms: None,
            tpot_p50_ms: None,
        };
        let curve = [point(1.0, 100.0), point(2.0, 250.0), point(3.0, 290.0)];
        assert_eq!(output_rate_at(&curve, 2.25), Some(260.0));
        assert_eq!(output_rate_at(&curve, 2.0), Some(250.0));
        assert_eq!(output_rate_at(&curve, 0.5), Some(50.0));
        assert_eq!(output_rate_at(&curve, 9.0), Some(290.0));
        assert_eq!(output_rate_at(&curve, 0.0), None);
        assert_eq!(output_rate_at(&[], 1.0), None);
    }

    #[test]
    fn gpu_tiers_are_recognized() {
        assert!(is_gpu_tier("cuda-l4"));
        assert!(is_gpu_tier("GPU"));
        assert!(!is_gpu_tier("avx512_vnni"));
    }
}
