//! Measured runs as the planner's [`ConfigProfile`]s: stored load points, service curves and the
//! profile of each config on each host.

use std::collections::{BTreeMap, HashMap, hash_map::Entry};

use serde::{Deserialize, Serialize};
use strata_planner::{
    profile::{ConfigProfile, LoadPoint, MeasuredOn, Provenance, Scaling, ScalingRule},
    service::{ServiceCurve, StepModel},
};

use super::{PlanningError, Result};
use crate::{
    loadgen::{Arrival, Lengths},
    store::{
        CapacityResultRow, ConfigRow, HardwareId, HardwareRow, ModelRow, ProfileRunRow, Store,
    },
};

/// One point of a capacity result's `load_curve`, as profiling records it: at `rate_rps` offered load,
/// these p99 latencies (milliseconds) and throughputs. Unknown keys (other percentiles) are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StoredLoadPoint {
    /// Offered load, requests/s (`requests_per_s` and `rate` are read too).
    #[serde(alias = "requests_per_s", alias = "rate")]
    pub rate_rps: f64,
    /// p99 time to first token, ms.
    pub ttft_p99_ms: f64,
    /// p99 time per output token, ms.
    pub tpot_p99_ms: f64,
    /// p99 arrival to last token, ms.
    pub e2e_p99_ms: f64,
    /// Output tokens/s achieved.
    pub output_tokens_per_s: f64,
    /// Prompt and output tokens/s achieved.
    pub total_tokens_per_s: f64,
    /// Median time to first token, ms (absent from curves stored before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms: Option<f64>,
    /// Median time per output token, ms (likewise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p50_ms: Option<f64>,
}

impl StoredLoadPoint {
    /// The planner's point: the same figures with latencies in seconds.
    pub fn to_planner(self) -> LoadPoint {
        LoadPoint {
            rate_rps: self.rate_rps,
            ttft_p99_s: self.ttft_p99_ms / 1000.0,
            tpot_p99_s: self.tpot_p99_ms / 1000.0,
            e2e_p99_s: self.e2e_p99_ms / 1000.0,
            output_tokens_per_s: self.output_tokens_per_s,
            total_tokens_per_s: self.total_tokens_per_s,
            ttft_p50_s: self.ttft_p50_ms.map(|ms| ms / 1000.0),
            tpot_p50_s: self.tpot_p50_ms.map(|ms| ms / 1000.0),
        }
    }

    /// The operating point a single profiling run measured. The rate is the offered one when the run's
    /// `workload_shape` records Poisson arrivals (the profiler's [`Arrival`]), else the completed
    /// requests/s (a closed loop offers no rate of its own).
    pub fn from_run(run: &ProfileRunRow) -> Self {
        let arrival = run
            .workload_shape
            .get("arrival")
            .and_then(|arrival| Arrival::deserialize(arrival).ok());
        let offered = match arrival {
            Some(Arrival::Poisson { rate }) => Some(rate),
            Some(Arrival::Closed { .. }) | None => None,
        };
        Self {
            rate_rps: offered.unwrap_or(run.requests_per_s),
            ttft_p99_ms: run.ttft_p99_ms,
            tpot_p99_ms: run.tpot_p99_ms,
            e2e_p99_ms: run.e2e_p99_ms,
            output_tokens_per_s: run.output_tokens_per_s,
            total_tokens_per_s: run.total_tokens_per_s,
            ttft_p50_ms: Some(run.ttft_p50_ms),
            tpot_p50_ms: Some(run.tpot_p50_ms),
        }
    }
}

/// Builds one [`ConfigProfile`] per (config, host) from the store's measurements, of every model or of
/// the one named `model`, in model, config and host order.
///
/// The curve is the newest capacity result's `load_curve` ([`StoredLoadPoint`]s) for that config and
/// host, and the engine's steps that result's fitted `step_model` when it has one; without a result,
/// each profiling run of the pair is one point ([`StoredLoadPoint::from_run`]), the latest run kept when
/// two share a rate and runs where every request failed left out. Mean prompt and output tokens are the
/// `mean_prompt_tokens` / `mean_output_tokens` of the newest run's `workload_shape` when recorded (or
/// the means of its `prompt_tokens` / `output_tokens` lengths: a fixed number, or uniform `min`..`max`),
/// else derived from the curve: output tokens/s over requests/s, and (total - output) tokens/s over
/// requests/s. The host is the hardware row: `vcpus` = its hardware threads, bandwidth and int8 GOPS as
/// measured (0 when not measured, which rules out the memory-bandwidth scaling rule). Pairs with no
/// usable point are skipped.
///
/// # Errors
/// [`PlanningError::Store`], [`PlanningError::LoadCurve`] naming the capacity result and point,
/// [`PlanningError::OutOfRange`] and [`PlanningError::Profile`] naming the config.
pub async fn profiles_from_store(
    store: &dyn Store,
    model: Option<&str>,
) -> Result<Vec<ConfigProfile>> {
    let models = match model {
        Some(name) => store.find_model_by_name(name).await?.into_iter().collect(),
        None => store.list_models().await?,
    };
    let mut hosts: HashMap<HardwareId, HardwareRow> = HashMap::new();
    let mut profiles = Vec::new();
    for model in &models {
        for config in store.list_configs_for_model(model.id).await? {
            let capacity = store.list_capacity_results_for_config(config.id).await?;
            let runs = store.list_profile_runs_for_config(config.id).await?;
            let mut by_host: BTreeMap<
                HardwareId,
                (Option<&CapacityResultRow>, Vec<&ProfileRunRow>),
            > = BTreeMap::new();
            // Both lists come newest first: the first capacity result per host is its newest.
            for result in &capacity {
                by_host
                    .entry(result.hardware_id)
                    .or_default()
                    .0
                    .get_or_insert(result);
            }
            for run in &runs {
                by_host.entry(run.hardware_id).or_default().1.push(run);
            }
            for (hardware_id, (result, runs)) in by_host {
                let (points, step_model) = match result {
                    Some(result) => (curve_of(result)?, step_model_of(result)?),
                    None => (curve_of_runs(&runs), None),
                };
                if points.is_empty() {
                    continue;
                }
                let host = match hosts.entry(hardware_id) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(slot) => slot.insert(store.get_hardware(hardware_id).await?),
                };
                let mut profile = profile_of(model, &config, host, points, runs.first().copied())?;
                profile.step_model = step_model;
                profile.validate().map_err(PlanningError::Profile)?;
                profiles.push(profile);
            }
        }
    }
    Ok(profiles)
}

/// Which stored profile a gateway pool's service model comes from: a model's config by its settings,
/// on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSelector {
    /// The model's name in the store.
    pub model: String,
    /// Runtime weight type.
    pub weights: String,
    /// Engine threads.
    pub threads: u32,
    /// Most sequences per batch.
    pub max_batch: u32,
    /// The host (hardware id) it was measured on; needed only when several hosts measured it.
    #[serde(default)]
    pub hardware: Option<i64>,
}

impl std::fmt::Display for ProfileSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} t{} b{}",
            self.model, self.weights, self.threads, self.max_batch
        )?;
        if let Some(host) = self.hardware {
            write!(f, " on hardware {host}")?;
        }
        Ok(())
    }
}

/// The service model of one engine of the selected config, as measured (no scaling: the endpoint is
/// taken to run on the host type it was measured on): its slots, prefill rate and TPOT by batch from the
/// newest capacity curve (or runs) in the store.
///
/// # Errors
/// [`PlanningError::NoProfile`] when nothing matches, [`PlanningError::SeveralHosts`] when several hosts
/// match and none was chosen, and the errors of [`profiles_from_store`].
pub async fn stored_service_curve(
    store: &dyn Store,
    selector: &ProfileSelector,
) -> Result<ServiceCurve> {
    let wanted = selector.to_string();
    let suffix = selector.hardware.map(|h| format!("-hw{h}"));
    let matching: Vec<ConfigProfile> = profiles_from_store(store, Some(&selector.model))
        .await?
        .into_iter()
        .filter(|p| {
            p.weights == selector.weights
                && p.threads == selector.threads
                && p.max_batch == selector.max_batch
                && suffix.as_ref().is_none_or(|s| p.id.ends_with(s.as_str()))
        })
        .collect();
    match matching.as_slice() {
        [] => Err(PlanningError::NoProfile { wanted }),
        [profile] => Ok(ServiceCurve::from_profile(
            profile,
            Scaling {
                rule: ScalingRule::MeasuredOnType,
                factor: 1.0,
            },
        )),
        several => Err(PlanningError::SeveralHosts {
            wanted,
            hosts: several
                .iter()
                .filter_map(|p| p.id.rsplit_once("-hw").map(|(_, host)| host.to_owned()))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// A capacity result's fitted step model, when it has one.
fn step_model_of(result: &CapacityResultRow) -> Result<Option<StepModel>> {
    result
        .step_model
        .as_ref()
        .map(|v| {
            serde_json::from_value(v.clone()).map_err(|e| PlanningError::StepModel {
                id: result.id.0,
                problem: e.to_string(),
            })
        })
        .transpose()
}

/// A capacity result's points, in increasing rate.
fn curve_of(result: &CapacityResultRow) -> Result<Vec<LoadPoint>> {
    let bad = |index: usize, problem: String| PlanningError::LoadCurve {
        id: result.id.0,
        index,
        problem,
    };
    let items = result
        .load_curve
        .as_array()
        .ok_or_else(|| bad(0, "the curve is not a JSON list".to_owned()))?;
    let mut points = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let point: StoredLoadPoint =
            serde_json::from_value(item.clone()).map_err(|e| bad(index, e.to_string()))?;
        points.push(point.to_planner());
    }
    points.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps));
    Ok(merge_equal_rates(points))
}

/// The larger of two optional figures (either alone when the other is missing).
fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// One point per offered rate: probes repeated at a rate (with other seeds) merge into their worst
/// latencies and mean throughputs, so that the curve's rates strictly increase. `points` are sorted.
fn merge_equal_rates(points: Vec<LoadPoint>) -> Vec<LoadPoint> {
    let mut merged: Vec<(LoadPoint, f64)> = Vec::with_capacity(points.len());
    for p in points {
        match merged.last_mut() {
            Some((m, n)) if m.rate_rps == p.rate_rps => {
                m.ttft_p99_s = m.ttft_p99_s.max(p.ttft_p99_s);
                m.tpot_p99_s = m.tpot_p99_s.max(p.tpot_p99_s);
                m.e2e_p99_s = m.e2e_p99_s.max(p.e2e_p99_s);
                m.ttft_p50_s = max_of(m.ttft_p50_s, p.ttft_p50_s);
                m.tpot_p50_s = max_of(m.tpot_p50_s, p.tpot_p50_s);
                m.output_tokens_per_s =
                    (m.output_tokens_per_s * *n + p.output_tokens_per_s) / (*n + 1.0);
                m.total_tokens_per_s =
                    (m.total_tokens_per_s * *n + p.total_tokens_per_s) / (*n + 1.0);
                *n += 1.0;
            }
            _ => merged.push((p, 1.0)),
        }
    }
    merged.into_iter().map(|(p, _)| p).collect()
}

/// One point per run, in increasing rate; `runs` newest first, so the newest run wins a tie.
fn curve_of_runs(runs: &[&ProfileRunRow]) -> Vec<LoadPoint> {
    let mut by_rate: Vec<LoadPoint> = Vec::new();
    for run in runs {
        if run.request_count <= run.error_count {
            continue;
        }
        let point = StoredLoadPoint::from_run(run).to_planner();
        if point.rate_rps > 0.0 && !by_rate.iter().any(|p| p.rate_rps == point.rate_rps) {
            by_rate.push(point);
        }
    }
    by_rate.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps));
    by_rate
}

/// The planner's id of a stored config's profile on a host: `MODEL-WEIGHTS-tTHREADS-bBATCH-hwHOST`.
pub fn profile_id(
    model: &str,
    weights: &str,
    threads: i64,
    max_batch: i64,
    host: HardwareId,
) -> String {
    format!("{model}-{weights}-t{threads}-b{max_batch}-hw{host}")
}

fn profile_of(
    model: &ModelRow,
    config: &ConfigRow,
    host: &HardwareRow,
    load_curve: Vec<LoadPoint>,
    newest_run: Option<&ProfileRunRow>,
) -> Result<ConfigProfile> {
    let count = |field: &'static str, value: i64| {
        u32::try_from(value).map_err(|_| PlanningError::OutOfRange {
            config: config.id.0,
            field,
            value,
        })
    };
    let shape_mean = |key: &str| {
        newest_run
            .and_then(|run| run.workload_shape.get(key))
            .and_then(|v| serde_json::from_value::<Lengths>(v.clone()).ok())
            .map(Lengths::mean)
            .filter(|v| *v > 0.0)
    };
    let rate: f64 = load_curve.iter().map(|p| p.rate_rps).sum();
    let output: f64 = load_curve.iter().map(|p| p.output_tokens_per_s).sum();
    let prompt: f64 = load_curve
        .iter()
        .map(|p| (p.total_tokens_per_s - p.output_tokens_per_s).max(0.0))
        .sum();
    Ok(ConfigProfile {
        id: profile_id(
            &model.name,
            &config.weight_type,
            config.threads,
            config.max_batch,
            host.id,
        ),
        model: model.name.clone(),
        weights: config.weight_type.clone(),
        threads: count("threads", config.threads)?,
        max_batch: count("max_batch", config.max_batch)?,
        measured_on: MeasuredOn {
            host: format!("hardware {} ({})", host.id, host.cpu_model),
            instance_type: None,
            vcpus: count("hardware threads", host.threads)?,
            mem_bandwidth_gbs: host.bandwidth_gb_per_s.unwrap_or(0.0),
            int8_gops: host.peak_int8_gops.unwrap_or(0.0),
        },
        mean_prompt_tokens: shape_mean("mean_prompt_tokens")
            .or_else(|| shape_mean("prompt_tokens"))
            .unwrap_or(prompt / rate),
        mean_output_tokens: shape_mean("mean_output_tokens")
            .or_else(|| shape_mean("output_tokens"))
            .unwrap_or(output / rate),
        load_curve,
        prompt_token_weight: 0.2,
        prefill_tokens_per_s: None,
        step_model: None,
        provenance: if model.synthetic {
            Provenance::SyntheticWeights
        } else {
            Provenance::Measured
        },
    })
}
