//! The view models behind each page: read from the store, computed once, then either rendered into a
//! template or returned as JSON by the API.
//!
//! Plans and pilot reports are JSON whose shape the planner owns; they are read defensively (known
//! keys where present, the raw keys and JSON otherwise).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_controller::store::{
    CapacityResultRow, CatalogPriceRow, ConfigRow, ConfigSort, ConfigSummaryQuery,
    ConfigSummaryRow, GatewayDecisionRow, HardwareRow, ModelRow, ProfileRunId, ProfileRunRow,
    QualityResultRow, Store, TimeWindow,
};

use super::{
    cost::{self, PriceModel, SiteCosts},
    error::DashboardError,
    query::{ConfigsParams, SortKey},
};

/// The config table and Pareto chart.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConfigsView {
    /// The parameters in effect, defaults filled in where they matter.
    pub(crate) query: BTreeMap<&'static str, String>,
    pub(crate) pricing: Pricing,
    /// Instance types with a recorded price, for the picker.
    pub(crate) instances: Vec<InstanceChoice>,
    pub(crate) rows: Vec<ConfigView>,
}

/// What the $ per 1M tokens column was computed with.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Pricing {
    pub(crate) price_model: PriceModel,
    pub(crate) site: SiteCosts,
    /// The instance CPU configs are costed on.
    pub(crate) cpu_instance: Option<InstanceCost>,
    /// The instance GPU endpoints are costed on.
    pub(crate) gpu_instance: Option<InstanceCost>,
}

/// One instance type's hourly cost under the chosen price model.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InstanceCost {
    pub(crate) name: String,
    pub(crate) provider: String,
    pub(crate) region: String,
    pub(crate) price_date: String,
    /// `None` when the catalog has no price under the chosen model.
    pub(crate) usd_per_hour: Option<f64>,
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
    /// $ per 1M output tokens at the run's measured output rate on the chosen instance.
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

/// Kernel tiers that run on an accelerator rather than the CPU.
const GPU_TIERS: [&str; 5] = ["cuda", "rocm", "metal", "vulkan", "gpu"];

/// Whether a run's kernel tier names an accelerator.
pub(crate) fn is_gpu_tier(tier: &str) -> bool {
    let tier = tier.to_ascii_lowercase();
    GPU_TIERS.iter().any(|gpu| tier.starts_with(gpu))
}

/// Builds the config table for `params`.
pub(crate) async fn configs(
    store: &dyn Store,
    params: &ConfigsParams,
) -> Result<ConfigsView, DashboardError> {
    let prices = cost::latest_by_instance(store.list_catalog_prices(None).await?);
    let pick = |name: &Option<String>, param: &'static str, gpu: bool| match name {
        Some(name) => prices.get(name).map(Some).ok_or_else(|| {
            DashboardError::bad_query(
                param,
                if prices.is_empty() {
                    format!("no instance prices are recorded, so {name:?} cannot be priced")
                } else {
                    format!(
                        "no recorded price for instance type {name:?}; known: {}",
                        prices.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                },
            )
        }),
        // Without a choice, the cheapest instance type of the kind (on-demand).
        None => Ok(prices
            .values()
            .filter(|p| p.accelerator.is_some() == gpu)
            .min_by(|a, b| {
                a.on_demand_usd_per_hour
                    .total_cmp(&b.on_demand_usd_per_hour)
            })),
    };
    let cpu_price = pick(&params.instance, "instance", false)?;
    let gpu_price = pick(&params.gpu_instance, "gpu_instance", true)?;
    let cost_of = |price: Option<&CatalogPriceRow>| {
        price.map(|p| InstanceCost {
            name: p.instance_type.clone(),
            provider: p.provider.clone(),
            region: p.region.clone(),
            price_date: p.price_date.to_string(),
            usd_per_hour: cost::hourly_cost(p, params.price, &params.site),
        })
    };
    let pricing = Pricing {
        price_model: params.price,
        site: params.site,
        cpu_instance: cost_of(cpu_price),
        gpu_instance: cost_of(gpu_price),
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
    let hourly = |gpu: bool| {
        let instance = if gpu {
            &pricing.gpu_instance
        } else {
            &pricing.cpu_instance
        };
        instance.as_ref().and_then(|i| i.usd_per_hour)
    };
    let mut rows: Vec<ConfigView> = store
        .list_config_summaries(&query)
        .await?
        .into_iter()
        .map(|summary| {
            let gpu = is_gpu_tier(&summary.kernel_tier);
            let usd = hourly(gpu)
                .and_then(|h| cost::dollars_per_million_tokens(h, summary.output_tokens_per_s));
            let perplexity_delta = summary
                .perplexity
                .zip(summary.reference_perplexity)
                .map(|(p, r)| p - r);
            ConfigView {
                summary,
                gpu,
                perplexity_delta,
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
    let mut query = params.to_pairs();
    query.insert("price", params.price.to_string());
    if let Some(i) = &pricing.cpu_instance {
        query.insert("instance", i.name.clone());
    }
    if let Some(i) = &pricing.gpu_instance {
        query.insert("gpu_instance", i.name.clone());
    }
    let instances = prices
        .values()
        .map(|p| InstanceChoice {
            name: p.instance_type.clone(),
            gpu: p.accelerator.is_some(),
        })
        .collect();
    Ok(ConfigsView {
        query,
        pricing,
        instances,
        rows,
    })
}

/// The indices of the rows no other row beats on both $ per 1M tokens and E2E p99 (lower is better
/// on both), cheapest first. Rows without a cost are not ranked.
pub(crate) fn pareto_frontier(rows: &[ConfigView]) -> Vec<usize> {
    let mut priced: Vec<(usize, f64, f64)> = rows
        .iter()
        .enumerate()
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
    /// The capacity result's load curve, as far as its points could be read.
    pub(crate) load_curve: Vec<LoadPoint>,
    /// The config's quality results, newest first.
    pub(crate) quality: Vec<QualityResultRow>,
    /// Other runs of the same config, newest first.
    pub(crate) sibling_runs: Vec<ProfileRunId>,
}

/// One point of a capacity curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct LoadPoint {
    pub(crate) offered_requests_per_s: f64,
    pub(crate) p99_ms: Option<f64>,
    pub(crate) output_tokens_per_s: Option<f64>,
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
    let load_curve = capacity
        .as_ref()
        .map(|c| load_points(&c.load_curve))
        .unwrap_or_default();
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
        quality,
        sibling_runs,
    })
}

/// The first of `keys` that `object` holds as a number.
fn number(object: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter()
        .find_map(|k| object.get(*k).and_then(Value::as_f64))
        .filter(|v| v.is_finite())
}

/// The points of a load curve: an array of objects (or `{"points": [...]}`) with an offered rate and
/// any of a p99 latency and a throughput, sorted by offered rate.
pub(crate) fn load_points(curve: &Value) -> Vec<LoadPoint> {
    let points = curve
        .as_array()
        .or_else(|| curve.get("points").and_then(Value::as_array));
    let mut out: Vec<LoadPoint> = points
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(LoadPoint {
                offered_requests_per_s: number(
                    p,
                    &[
                        "offered_requests_per_s",
                        "offered_rps",
                        "rate",
                        "rps",
                        "requests_per_s",
                        "load",
                    ],
                )?,
                p99_ms: number(
                    p,
                    &["p99_ms", "e2e_p99_ms", "ttft_p99_ms", "latency_p99_ms"],
                )
                .or_else(|| number(p, &["p99_s", "e2e_p99_s"]).map(|s| s * 1000.0)),
                output_tokens_per_s: number(
                    p,
                    &["output_tokens_per_s", "tokens_per_s", "throughput"],
                ),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.offered_requests_per_s
            .total_cmp(&b.offered_requests_per_s)
    });
    out
}

/// The latest plan of every workload.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlansView {
    pub(crate) plans: Vec<PlanView>,
}

/// One plan, with what could be read of its hours.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlanView {
    pub(crate) workload: String,
    pub(crate) plan_id: i64,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) total_cost_usd: f64,
    pub(crate) total_output_tokens: i64,
    /// The cost of serving the same traffic on GPUs alone, when the plan states it.
    pub(crate) all_gpu_cost_usd: Option<f64>,
    pub(crate) savings_usd: Option<f64>,
    pub(crate) hours: Vec<PlanHour>,
    /// The plan's top-level keys, for plans whose shape is not (yet) understood.
    pub(crate) keys: Vec<String>,
    pub(crate) plan: Value,
}

/// One planned hour.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlanHour {
    pub(crate) hour: i64,
    pub(crate) cpu_instances: Option<f64>,
    pub(crate) gpu_share: Option<f64>,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) classes: Vec<ClassLatency>,
}

/// A class's simulated p99 in one hour, against its SLA.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClassLatency {
    pub(crate) class: String,
    pub(crate) p99_ms: Option<f64>,
    pub(crate) sla_ms: Option<f64>,
    pub(crate) met: Option<bool>,
}

/// Builds the plans page.
pub(crate) async fn plans(store: &dyn Store) -> Result<PlansView, DashboardError> {
    let mut plans = Vec::new();
    for workload in store.list_workloads().await? {
        if let Some(plan) = store.latest_plan_for_workload(workload.id).await? {
            let hours = plan_hours(&plan.plan);
            let all_gpu_cost_usd = number(
                &plan.plan,
                &["all_gpu_cost_usd", "gpu_only_cost_usd", "baseline_cost_usd"],
            )
            .or_else(|| {
                plan.plan
                    .get("all_gpu")
                    .and_then(|g| number(g, &["cost_usd", "total_cost_usd"]))
            })
            .or_else(|| {
                // The planner's own shape: `totals.all_gpu_cost_per_day`.
                plan.plan
                    .get("totals")
                    .and_then(|t| number(t, &["all_gpu_cost_per_day"]))
            });
            let keys = plan
                .plan
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            plans.push(PlanView {
                workload: workload.name,
                plan_id: plan.id.0,
                created_at: plan.created_at,
                total_cost_usd: plan.total_cost_usd,
                total_output_tokens: plan.total_output_tokens,
                all_gpu_cost_usd,
                savings_usd: all_gpu_cost_usd.map(|g| g - plan.total_cost_usd),
                hours,
                keys,
                plan: plan.plan,
            });
        }
    }
    Ok(PlansView { plans })
}

/// The hours of a plan: `hours` (or `hourly`) as an array of objects.
pub(crate) fn plan_hours(plan: &Value) -> Vec<PlanHour> {
    let hours = plan
        .get("hours")
        .or_else(|| plan.get("hourly"))
        .and_then(Value::as_array);
    hours
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(index, h)| {
            let cpu_instances =
                number(h, &["cpu_instances", "cpu_hosts", "instances"]).or_else(|| {
                    // A map or list of instance counts.
                    let counts = h.get("cpu").or_else(|| h.get("cpu_instances"))?;
                    let sum = match counts {
                        Value::Object(o) => o.values().filter_map(Value::as_f64).sum(),
                        Value::Array(a) => a
                            .iter()
                            .filter_map(|x| x.as_f64().or_else(|| number(x, &["count"])))
                            .sum(),
                        _ => return None,
                    };
                    Some(sum)
                });
            let classes = match h.get("classes") {
                Some(Value::Object(o)) => o
                    .iter()
                    .map(|(name, c)| class_latency(name.clone(), c))
                    .collect(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|c| {
                        let name = c
                            .get("class")
                            .or_else(|| c.get("name"))
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                            .to_owned();
                        class_latency(name, c)
                    })
                    .collect(),
                _ => Vec::new(),
            };
            PlanHour {
                hour: h
                    .get("hour")
                    .and_then(Value::as_i64)
                    .unwrap_or(index as i64),
                cpu_instances,
                gpu_share: number(h, &["gpu_share", "gpu_fraction"])
                    .or_else(|| weighted_gpu_share(h)),
                cost_usd: number(h, &["cost_usd", "cost_per_hour", "cost"]),
                classes,
            }
        })
        .collect()
}

/// The share of an hour's requests sent to GPU: the classes' shares weighted by their rates.
fn weighted_gpu_share(hour: &Value) -> Option<f64> {
    let classes = hour.get("classes")?.as_array()?;
    let (mut sent, mut total) = (0.0, 0.0);
    for c in classes {
        let rps = number(c, &["rps"])?;
        sent += rps * number(c, &["gpu_share"])?;
        total += rps;
    }
    (total > 0.0).then(|| sent / total)
}

fn class_latency(class: String, c: &Value) -> ClassLatency {
    let ms = |ms_keys: &[&str], s_keys: &[&str]| {
        number(c, ms_keys).or_else(|| number(c, s_keys).map(|s| s * 1000.0))
    };
    let p99_ms = ms(
        &["p99_ms", "e2e_p99_ms", "simulated_p99_ms"],
        &["p99_s", "e2e_p99_s"],
    );
    let sla_ms = ms(&["sla_ms", "sla_p99_ms"], &["sla_s", "sla_p99_s"]).or_else(|| {
        // The planner's own shape: `sla.e2e_p99_s`, else `sla.ttft_p99_s`.
        let sla = c.get("sla")?;
        number(sla, &["e2e_p99_s"])
            .or_else(|| number(sla, &["ttft_p99_s"]))
            .map(|s| s * 1000.0)
    });
    let met = c
        .get("met")
        .or_else(|| c.get("meets_sla"))
        .and_then(Value::as_bool)
        .or_else(|| p99_ms.zip(sla_ms).map(|(p, s)| p <= s));
    ClassLatency {
        class,
        p99_ms,
        sla_ms,
        met,
    }
}

/// Every pilot, newest first.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PilotsView {
    pub(crate) pilots: Vec<PilotView>,
}

/// One pilot with its verdict and report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PilotView {
    pub(crate) id: i64,
    pub(crate) workload: String,
    pub(crate) status: String,
    pub(crate) verdict: Option<String>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    /// The report's top-level numbers and strings, as (key, text).
    pub(crate) summary: Vec<(String, String)>,
    /// The report's `evidence`, when it has one.
    pub(crate) evidence: Option<Value>,
    /// The report read as `strata pilot` writes it (schema version 1), when it is one.
    pub(crate) detail: Option<PilotDetail>,
    pub(crate) report: Option<Value>,
}

/// The parts of a `strata pilot` report (schema version 1) the page shows; missing keys read as empty.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotDetail {
    pub(crate) verdict: String,
    pub(crate) exit_code: Option<u8>,
    pub(crate) summary: String,
    pub(crate) error: Option<String>,
    pub(crate) decision: PilotDecision,
    pub(crate) quality: Vec<PilotGate>,
    pub(crate) plan: Value,
    pub(crate) replay: Option<PilotReplay>,
    pub(crate) reproduce: Value,
}

/// The verdict's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotDecision {
    pub(crate) classes: Vec<PilotClass>,
    pub(crate) monthly_cost_usd: Option<f64>,
    pub(crate) monthly_baseline_usd: Option<f64>,
    pub(crate) monthly_savings_usd: Option<f64>,
    pub(crate) reasons: Vec<String>,
}

/// One class's finding.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotClass {
    pub(crate) class: String,
    pub(crate) migrate: bool,
    pub(crate) cpu_share: Option<f64>,
    pub(crate) attainment: Option<f64>,
    pub(crate) attainment_2x: Option<f64>,
    pub(crate) gpu_share_2x: Option<f64>,
    pub(crate) reasons: Vec<String>,
}

/// One weight type's quality gate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotGate {
    pub(crate) weights: String,
    pub(crate) passed: bool,
    pub(crate) perplexity_increase: Option<f64>,
    pub(crate) measured: PilotQuality,
    pub(crate) reasons: Vec<String>,
}

/// A weight type's measured quality.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotQuality {
    pub(crate) perplexity: Option<f64>,
    pub(crate) reference_weights: String,
    pub(crate) top1_agreement: Option<f64>,
    pub(crate) task_pass_rate: Option<f64>,
}

/// The replay against its prediction.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotReplay {
    pub(crate) duration_s: Option<f64>,
    pub(crate) requests: usize,
    pub(crate) errors: usize,
    pub(crate) config: String,
    pub(crate) with_gpu: bool,
    pub(crate) load: Value,
    /// The host's speed on the profiling shape: profiled, before and after the replay.
    pub(crate) host_pace: Option<PilotHostPace>,
    /// The engine's steps under a sample sent through the gateway before the replay, against the
    /// profile's step model: the prediction's scale.
    pub(crate) calibration: Option<PilotCalibration>,
    /// The spread of the engine's pace the prediction is the mean over.
    pub(crate) pace_spread: Option<PilotPaceSpread>,
    /// Every request together (its `class` is empty).
    pub(crate) all: Option<PilotReplayClass>,
    pub(crate) classes: Vec<PilotReplayClass>,
    pub(crate) worst_e2e_p99_error: Option<f64>,
    pub(crate) observed_cost_usd: Option<f64>,
    pub(crate) predicted_cost_usd: Option<f64>,
}

/// The host's pace around the replay (output tokens/s of the profiling shape).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotHostPace {
    pub(crate) profiled_output_tokens_per_s: Option<f64>,
    pub(crate) before_replay_output_tokens_per_s: Option<f64>,
    pub(crate) after_replay_output_tokens_per_s: Option<f64>,
    pub(crate) replay_over_profiled: Option<f64>,
}

/// The spread of paces the replay's prediction averages over.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotPaceSpread {
    pub(crate) sigma: Option<f64>,
    pub(crate) runs: usize,
    pub(crate) block_s: Option<f64>,
}

/// The middle 80% of a prediction's runs, seconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotBand {
    pub(crate) low: Option<f64>,
    pub(crate) high: Option<f64>,
}

/// The calibration samples around the replay.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotCalibration {
    pub(crate) duration_s: Option<f64>,
    pub(crate) requests: usize,
    pub(crate) samples: Vec<PilotCalibrationSample>,
    pub(crate) decode_over_profiled: Option<f64>,
    pub(crate) prompt_over_profiled: Option<f64>,
    pub(crate) block_s: Option<f64>,
    pub(crate) pace_spread: Option<f64>,
}

/// One calibration sample: when it ran against the replay (`before_replay`, `after_replay`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotCalibrationSample {
    pub(crate) when: String,
    pub(crate) requests: usize,
}

/// One class in the replay.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotReplayClass {
    pub(crate) class: String,
    pub(crate) requests: usize,
    pub(crate) gpu_requests: usize,
    pub(crate) observed_ttft_p99_s: Option<f64>,
    pub(crate) predicted_ttft_p99_s: Option<f64>,
    pub(crate) observed_e2e_p99_s: Option<f64>,
    pub(crate) predicted_e2e_p99_s: Option<f64>,
    pub(crate) predicted_ttft_p99_band_s: Option<PilotBand>,
    pub(crate) predicted_e2e_p99_band_s: Option<PilotBand>,
    pub(crate) e2e_p99_error: Option<f64>,
    pub(crate) ttft_p99_error: Option<f64>,
    pub(crate) observed_attainment: Option<f64>,
    pub(crate) predicted_attainment: Option<f64>,
}

/// The structured report, when `report` carries `schema_version` 1.
fn pilot_detail(report: Option<&Value>) -> Option<PilotDetail> {
    let report = report?;
    (report.get("schema_version").and_then(Value::as_u64) == Some(1))
        .then(|| serde_json::from_value(report.clone()).ok())
        .flatten()
}

/// Builds the pilots page.
pub(crate) async fn pilots(store: &dyn Store) -> Result<PilotsView, DashboardError> {
    let mut pilots = Vec::new();
    for workload in store.list_workloads().await? {
        for pilot in store.list_pilots_for_workload(workload.id).await? {
            let summary = pilot
                .report
                .as_ref()
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .filter_map(|(k, v)| {
                            let text = match v {
                                Value::String(s) => s.clone(),
                                Value::Number(n) => n.to_string(),
                                Value::Bool(b) => b.to_string(),
                                _ => return None,
                            };
                            Some((k.clone(), text))
                        })
                        .collect()
                })
                .unwrap_or_default();
            pilots.push(PilotView {
                id: pilot.id.0,
                workload: workload.name.clone(),
                status: pilot.status.to_string(),
                verdict: pilot.verdict,
                created_at: pilot.created_at,
                updated_at: pilot.updated_at,
                summary,
                evidence: pilot
                    .report
                    .as_ref()
                    .and_then(|r| r.get("evidence"))
                    .cloned(),
                detail: pilot_detail(pilot.report.as_ref()),
                report: pilot.report,
            });
        }
    }
    pilots.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    Ok(PilotsView { pilots })
}

/// The gateway's recent traffic.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GatewayView {
    pub(crate) window_minutes: i64,
    pub(crate) generated_at: DateTime<Utc>,
    pub(crate) requests: usize,
    /// Requests by pool and SLA class.
    pub(crate) traffic: Vec<TrafficRow>,
    pub(crate) spend: Spend,
    /// The latest breaker event of each endpoint that had one.
    pub(crate) breakers: Vec<BreakerState>,
    /// The newest decisions.
    pub(crate) recent: Vec<GatewayDecisionRow>,
}

/// Requests of one class sent to one pool.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TrafficRow {
    pub(crate) pool: String,
    pub(crate) class: String,
    pub(crate) requests: usize,
    pub(crate) p99_latency_ms: Option<f64>,
    /// The class's E2E p99 objective, from the workload that defines it.
    pub(crate) sla_ms: Option<f64>,
    /// The fraction of requests with an observed latency that met the objective.
    pub(crate) sla_attainment: Option<f64>,
    pub(crate) cost_usd: f64,
}

/// Today's spend against the daily budget.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Spend {
    pub(crate) today_usd: f64,
    pub(crate) today_tokens: i64,
    pub(crate) budget_per_day_usd: Option<f64>,
    /// The workload whose budget it is.
    pub(crate) budget_workload: Option<String>,
    pub(crate) used_fraction: Option<f64>,
}

/// An endpoint's circuit breaker, as the gateway last recorded it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BreakerState {
    pub(crate) endpoint: String,
    pub(crate) pool: String,
    pub(crate) state: String,
    pub(crate) at: DateTime<Utc>,
}

/// Most decisions read for one gateway view.
const MAX_DECISIONS: i64 = 20_000;

/// Builds the gateway page for the last `window_minutes`, as of `now`.
pub(crate) async fn gateway(
    store: &dyn Store,
    window_minutes: i64,
    now: DateTime<Utc>,
) -> Result<GatewayView, DashboardError> {
    let window = TimeWindow {
        start: now - Duration::minutes(window_minutes),
        end: now + Duration::seconds(1),
    };
    let decisions = store.list_gateway_decisions(window, MAX_DECISIONS).await?;
    let workloads = store.list_workloads().await?;
    let mut slas: HashMap<String, f64> = HashMap::new();
    let mut budget = None;
    for w in &workloads {
        let classes = w.spec.get("class").or_else(|| w.spec.get("classes"));
        for class in classes.and_then(Value::as_array).into_iter().flatten() {
            let name = class.get("name").and_then(Value::as_str);
            let bound = class.get("sla").and_then(|s| {
                number(s, &["e2e_p99_ms"]).or_else(|| number(s, &["e2e_p99_s"]).map(|v| v * 1000.0))
            });
            if let (Some(name), Some(bound)) = (name, bound) {
                slas.entry(name.to_owned()).or_insert(bound);
            }
        }
        if budget.is_none() {
            budget = w
                .spec
                .get("budget")
                .and_then(|b| number(b, &["per_day", "per_day_usd", "daily_usd"]))
                .map(|b| (b, w.name.clone()));
        }
    }

    let mut groups: BTreeMap<(String, String), Vec<&GatewayDecisionRow>> = BTreeMap::new();
    for d in &decisions {
        groups
            .entry((d.pool.clone(), d.sla_class.clone()))
            .or_default()
            .push(d);
    }
    let traffic = groups
        .into_iter()
        .map(|((pool, class), ds)| {
            let mut latencies: Vec<f64> = ds.iter().filter_map(|d| d.observed_latency_ms).collect();
            latencies.sort_by(f64::total_cmp);
            let p99_latency_ms = percentile(&latencies, 0.99);
            let sla_ms = slas.get(&class).copied();
            let sla_attainment = sla_ms.filter(|_| !latencies.is_empty()).map(|bound| {
                latencies.iter().filter(|l| **l <= bound).count() as f64 / latencies.len() as f64
            });
            TrafficRow {
                requests: ds.len(),
                cost_usd: ds.iter().map(|d| d.cost_usd).sum(),
                pool,
                class,
                p99_latency_ms,
                sla_ms,
                sla_attainment,
            }
        })
        .collect();

    let mut breakers: BTreeMap<String, BreakerState> = BTreeMap::new();
    // Decisions come newest first: the first breaker event per endpoint is its current state.
    for d in decisions.iter().filter(|d| d.reason.contains("breaker")) {
        breakers
            .entry(d.endpoint.clone())
            .or_insert_with(|| BreakerState {
                endpoint: d.endpoint.clone(),
                pool: d.pool.clone(),
                state: d.reason.clone(),
                at: d.decided_at,
            });
    }

    let today = store
        .ledger_total(TimeWindow::day(now.date_naive()), None)
        .await?;
    let spend = Spend {
        today_usd: today.amount_usd,
        today_tokens: today.tokens,
        budget_per_day_usd: budget.as_ref().map(|b| b.0),
        budget_workload: budget.as_ref().map(|b| b.1.clone()),
        used_fraction: budget
            .as_ref()
            .filter(|b| b.0 > 0.0)
            .map(|b| today.amount_usd / b.0),
    };
    Ok(GatewayView {
        window_minutes,
        generated_at: now,
        requests: decisions.len(),
        traffic,
        spend,
        breakers: breakers.into_values().collect(),
        recent: decisions.into_iter().take(20).collect(),
    })
}

/// The `q` quantile (nearest rank) of sorted values.
fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn load_curves_are_read_from_common_shapes() {
        let points = load_points(&json!([
            {"offered_rps": 2.0, "p99_ms": 900.0, "output_tokens_per_s": 300.0},
            {"rate": 1.0, "e2e_p99_s": 0.5},
            {"no_rate": 3.0}
        ]));
        assert_eq!(points.len(), 2);
        assert_eq!(points[0].offered_requests_per_s, 1.0);
        assert_eq!(points[0].p99_ms, Some(500.0));
        assert_eq!(points[1].output_tokens_per_s, Some(300.0));
        assert_eq!(load_points(&json!({"points": [{"rps": 1}]})).len(), 1);
        assert!(load_points(&json!("nonsense")).is_empty());
    }

    #[test]
    fn plan_hours_read_counts_shares_and_class_latencies() {
        let hours = plan_hours(&json!({"hours": [
            {"hour": 9, "cpu": {"c4-standard-8": 2, "c4-standard-16": 1}, "gpu_share": 0.25,
             "cost_usd": 1.5, "classes": {"chat": {"p99_ms": 800.0, "sla_ms": 1000.0}}},
            {"cpu_instances": 1, "classes": [{"name": "extract", "p99_s": 4.0, "sla_s": 3.0}]}
        ]}));
        assert_eq!(hours[0].hour, 9);
        assert_eq!(hours[0].cpu_instances, Some(3.0));
        assert_eq!(hours[0].classes[0].met, Some(true));
        assert_eq!(hours[1].hour, 1);
        assert_eq!(hours[1].classes[0].p99_ms, Some(4000.0));
        assert_eq!(hours[1].classes[0].met, Some(false));
        assert!(plan_hours(&json!({"other": 1})).is_empty());
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&[], 0.99), None);
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
    }

    #[test]
    fn gpu_tiers_are_recognized() {
        assert!(is_gpu_tier("cuda-l4"));
        assert!(is_gpu_tier("GPU"));
        assert!(!is_gpu_tier("avx512_vnni"));
    }
}
