//! The bridge between the store and the planner: measured runs become [`ConfigProfile`]s, and a plan, its
//! workload and the prices it used are recorded.
//!
//! Units: the store keeps latencies in milliseconds (`_ms`), the planner in seconds (`_s`); rates are
//! requests/s and tokens/s on both sides. Every conversion happens here, once.

use std::collections::{BTreeMap, HashMap, hash_map::Entry};

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_planner::{
    PlannerError,
    catalog::{Catalog, HOURS_PER_MONTH, InstanceType},
    plan::Plan,
    profile::{ConfigProfile, LoadPoint, MeasuredOn, Provenance, Scaling, ScalingRule},
    service::{ServiceCurve, StepModel},
    workload::Workload,
};

use crate::loadgen::{Arrival, Lengths};
use crate::store::{
    CapacityResultRow, CatalogPriceRow, ConfigRow, HardwareId, HardwareRow, ModelRow,
    NewCatalogPrice, NewPlan, NewWorkload, PlanRow, ProfileRunRow, Store, StoreError, WorkloadRow,
    constraint,
};

/// Why measured runs could not be turned into profiles, or a plan could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanningError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A capacity result's `load_curve` is not a list of [`StoredLoadPoint`]s.
    #[error("capacity result {id}: load_curve point {index}: {problem}")]
    LoadCurve {
        /// The capacity result's id.
        id: i64,
        /// The 0-based index of the point (0 when the curve is not a list at all).
        index: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// A capacity result's `step_model` is not a [`StepModel`].
    #[error("capacity result {id}: step_model: {problem}")]
    StepModel {
        /// The capacity result's id.
        id: i64,
        /// What is wrong with it.
        problem: String,
    },
    /// A stored count does not fit the planner's type (e.g. a negative thread count).
    #[error("config {config}: `{field}` is {value}, which the planner cannot use")]
    OutOfRange {
        /// The config's id.
        config: i64,
        /// The field.
        field: &'static str,
        /// Its stored value.
        value: i64,
    },
    /// The profile built from stored rows does not validate.
    #[error("profile built from the store: {0}")]
    Profile(#[source] PlannerError),
    /// No stored profile matches what a gateway pool asked for.
    #[error(
        "no stored profile of {wanted} (profile it with `strata profile` or `strata pilot` first)"
    )]
    NoProfile {
        /// The selector, as `MODEL WEIGHTS tTHREADS bBATCH [on hardware N]`.
        wanted: String,
    },
    /// Profiles of the selected config exist on several hosts and none was chosen.
    #[error(
        "{wanted} was profiled on several hosts (hardware {hosts}): choose one with `hardware = N`"
    )]
    SeveralHosts {
        /// The selector.
        wanted: String,
        /// The hardware ids, comma separated.
        hosts: String,
    },
    /// A plan or workload could not be turned into JSON.
    #[error("cannot encode the {what} as JSON: {source}")]
    Json {
        /// "plan" or "workload".
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Result with [`PlanningError`] as the default error.
pub type Result<T, E = PlanningError> = std::result::Result<T, E>;

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

/// The store's price row for an instance type. The store keeps one committed price per hour: the
/// one-year commitment, per month divided by [`HOURS_PER_MONTH`]. `accelerator_count` is the leading
/// `Nx` of the accelerator text (1 when absent). `None` when the price date is not `YYYY-MM-DD`.
pub fn catalog_price_row(instance: &InstanceType) -> Option<NewCatalogPrice> {
    let price_date = NaiveDate::parse_from_str(&instance.price_date, "%Y-%m-%d").ok()?;
    let accelerator = instance
        .accelerator
        .clone()
        .filter(|a| !a.trim().is_empty());
    let accelerator_count = accelerator.as_deref().map_or(0, |a| {
        a.split_once('x')
            .and_then(|(n, _)| n.trim().parse().ok())
            .unwrap_or(1)
    });
    Some(NewCatalogPrice {
        provider: instance.provider.clone(),
        region: instance.region.clone(),
        instance_type: instance.name.clone(),
        vcpus: i64::from(instance.vcpus),
        memory_gib: instance.memory_gib,
        accelerator,
        accelerator_count,
        on_demand_usd_per_hour: instance.on_demand_per_hour,
        spot_usd_per_hour: instance.spot_per_hour,
        committed_usd_per_hour: instance.committed_1y_per_month.map(|m| m / HOURS_PER_MONTH),
        watts: Some(instance.power_watts),
        source: instance.source.clone(),
        price_date,
    })
}

/// The planner's instance type for a stored price row, the inverse of [`catalog_price_row`]: the
/// stored committed price per hour is the one-year commitment (per month again), the three-year one is
/// not stored, and neither is the instance's memory bandwidth.
pub fn instance_type_of(row: &CatalogPriceRow) -> InstanceType {
    InstanceType {
        provider: row.provider.clone(),
        region: row.region.clone(),
        name: row.instance_type.clone(),
        vcpus: u32::try_from(row.vcpus).unwrap_or(0),
        memory_gib: row.memory_gib,
        accelerator: row.accelerator.clone(),
        on_demand_per_hour: row.on_demand_usd_per_hour,
        spot_per_hour: row.spot_usd_per_hour,
        committed_1y_per_month: row.committed_usd_per_hour.map(|h| h * HOURS_PER_MONTH),
        committed_3y_per_month: None,
        power_watts: row.watts.unwrap_or(0.0),
        source: row.source.clone(),
        price_date: row.price_date.format("%Y-%m-%d").to_string(),
        mem_bandwidth_gbs: None,
    }
}

/// The catalog of the store's prices: the latest price of each provider, region and instance type
/// (the store lists them latest date first), in the store's order.
pub fn catalog_of_prices(rows: &[CatalogPriceRow]) -> Catalog {
    let mut catalog = Catalog::default();
    for row in rows {
        let seen = catalog.instances.iter().any(|i| {
            i.provider == row.provider && i.region == row.region && i.name == row.instance_type
        });
        if !seen {
            catalog.instances.push(instance_type_of(row));
        }
    }
    catalog
}

/// Records the builtin catalog's prices (with their sources and dates) unless they are already
/// recorded: what a store holds on first use, so that the dashboard can cost configs with no extra step.
///
/// # Errors
/// [`PlanningError::Store`].
pub async fn record_builtin_prices(store: &dyn Store) -> Result<PricesRecorded> {
    record_catalog_prices(store, &Catalog::builtin()).await
}

/// What [`record_catalog_prices`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PricesRecorded {
    /// New rows.
    pub inserted: usize,
    /// Instance types whose price for that date was already recorded (left as they were).
    pub already_recorded: usize,
    /// Instance types skipped because their price date is not `YYYY-MM-DD`.
    pub undated: usize,
}

/// Records the catalog's instance prices; a price already recorded for the same provider, region, type
/// and date is left as it is. Per-token endpoints have no table in the store and are not recorded.
///
/// # Errors
/// [`PlanningError::Store`] for anything but that duplicate.
pub async fn record_catalog_prices(store: &dyn Store, catalog: &Catalog) -> Result<PricesRecorded> {
    let mut done = PricesRecorded::default();
    let recorded = store.list_catalog_prices(None).await?;
    for instance in &catalog.instances {
        let Some(row) = catalog_price_row(instance) else {
            done.undated += 1;
            continue;
        };
        let known = recorded.iter().any(|r| {
            r.provider == row.provider
                && r.region == row.region
                && r.instance_type == row.instance_type
                && r.price_date == row.price_date
        });
        if known {
            done.already_recorded += 1;
            continue;
        }
        match store.insert_catalog_price(&row).await {
            Ok(_) => done.inserted += 1,
            Err(e) if e.is_conflict_on(constraint::CATALOG_PRICES_INSTANCE_DATE) => {
                done.already_recorded += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// Output tokens a plan serves in its day: per hour and class, requests not shed x the class's mean
/// output length.
pub fn plan_output_tokens(plan: &Plan, workload: &Workload) -> i64 {
    let mut tokens = 0.0;
    for hour in &plan.hours {
        for class in &hour.classes {
            let Some(spec) = workload.classes.iter().find(|c| c.name == class.class) else {
                continue;
            };
            tokens += class.rps * 3600.0 * (1.0 - class.shed_share) * spec.output_tokens.mean();
        }
    }
    // Saturating float-to-int conversion; a day's tokens are far below i64::MAX.
    tokens.round() as i64
}

/// Records a plan under its workload: the workload row with the workload's name is reused (with a
/// warning when its spec differs), or recorded (spec = the validated workload as JSON); the plan row holds the plan as JSON, its cost per day and
/// [`plan_output_tokens`].
///
/// # Errors
/// [`PlanningError::Store`], [`PlanningError::Json`].
pub async fn record_plan(
    store: &dyn Store,
    workload: &Workload,
    plan: &Plan,
) -> Result<(WorkloadRow, PlanRow)> {
    let json = |what, value: Result<Value, serde_json::Error>| {
        value.map_err(|source| PlanningError::Json { what, source })
    };
    let workload_row = ensure_workload(store, workload).await?;
    let new = NewPlan {
        workload_id: workload_row.id,
        plan: json("plan", serde_json::to_value(plan))?,
        total_cost_usd: plan.totals.cost_per_day,
        total_output_tokens: plan_output_tokens(plan, workload),
    };
    let plan_row = store.insert_plan(&new).await?;
    Ok((workload_row, plan_row))
}

/// The workload's row: the one of its name (with a warning when its spec differs), or a new one whose
/// spec is the validated workload as JSON.
///
/// # Errors
/// [`PlanningError::Store`], [`PlanningError::Json`].
pub async fn ensure_workload(store: &dyn Store, workload: &Workload) -> Result<WorkloadRow> {
    let spec = serde_json::to_value(workload).map_err(|source| PlanningError::Json {
        what: "workload",
        source,
    })?;
    let workload_row = match store.find_workload_by_name(&workload.name).await? {
        Some(row) => {
            if row.spec != spec {
                tracing::warn!(
                    workload = %row.name,
                    id = %row.id,
                    "the stored workload of this name differs from the file; the plan is recorded under \
                     the stored one (rename the workload to keep both)"
                );
            }
            row
        }
        None => {
            let new = NewWorkload {
                name: workload.name.clone(),
                spec,
            };
            match store.insert_workload(&new).await {
                Ok(row) => row,
                // Recorded meanwhile by another process.
                Err(e) if e.is_conflict_on(constraint::WORKLOADS_NAME) => store
                    .find_workload_by_name(&workload.name)
                    .await?
                    .ok_or(e)?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    Ok(workload_row)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::store::{self, NewConfig, NewHardware, NewModel, NewProfileRun, ProfileRunId};

    async fn temp_store(dir: &tempfile::TempDir) -> std::sync::Arc<dyn Store> {
        store::open(&store::sqlite_url(&dir.path().join("strata.db")))
            .await
            .unwrap()
    }

    fn hardware() -> NewHardware {
        NewHardware {
            fingerprint_hash: "fp-zen4-2".to_owned(),
            cpu_model: "AMD EPYC 9R14".to_owned(),
            cores: 1,
            threads: 2,
            isa_flags: vec!["avx2".to_owned()],
            l1d_cache_bytes: None,
            l2_cache_bytes: None,
            l3_cache_bytes: None,
            numa_nodes: 1,
            memory_bytes: 8 << 30,
            bandwidth_gb_per_s: Some(29.0),
            peak_int8_gops: None,
            peak_f32_gops: None,
        }
    }

    /// A run at `rate` requests/s offered: 200 prompt and 100 output tokens per request.
    fn run(
        config_id: store::ConfigId,
        hardware_id: HardwareId,
        rate: f64,
        minute: u32,
    ) -> NewProfileRun {
        let started_at = Utc.with_ymd_and_hms(2026, 3, 1, 9, minute, 0).unwrap();
        NewProfileRun {
            config_id,
            hardware_id,
            started_at,
            finished_at: started_at + chrono::Duration::seconds(60),
            workload_shape: crate::profile::shape_json(
                &crate::profile::NamedShape {
                    name: "steady".into(),
                    prompt_tokens: Lengths::Fixed(200),
                    output_tokens: Lengths::Fixed(100),
                    arrival: Arrival::Poisson { rate },
                    requests: 60,
                    duration_s: None,
                    warmup: 0,
                },
                &crate::loadgen::Sla::default(),
            ),
            request_count: 60,
            error_count: 0,
            ttft_p50_ms: 100.0,
            ttft_p90_ms: 150.0,
            ttft_p95_ms: 180.0,
            ttft_p99_ms: 200.0 * (1.0 + rate),
            tpot_p50_ms: 10.0,
            tpot_p90_ms: 12.0,
            tpot_p95_ms: 13.0,
            tpot_p99_ms: 15.0 * (1.0 + rate),
            itl_p50_ms: 10.0,
            itl_p90_ms: 12.0,
            itl_p95_ms: 13.0,
            itl_p99_ms: 20.0,
            e2e_p50_ms: 1_000.0,
            e2e_p90_ms: 1_500.0,
            e2e_p95_ms: 1_800.0,
            e2e_p99_ms: 2_000.0 * (1.0 + rate),
            output_tokens_per_s: 100.0 * rate,
            total_tokens_per_s: 300.0 * rate,
            requests_per_s: rate * 0.98,
            goodput_requests_per_s: rate,
            sla_attainment: 1.0,
            peak_rss_bytes: 300 << 20,
            cpu_utilization: 0.9,
            kernel_tier: "avx2".to_owned(),
            placement: "none".to_owned(),
            engine_version: "0.1.0".to_owned(),
        }
    }

    async fn seed(store: &dyn Store) -> (ModelRow, ConfigRow, HardwareRow) {
        let model = store
            .insert_model(&NewModel {
                name: "smollm2-135m-instruct".to_owned(),
                path: "/models/smollm2.gguf".to_owned(),
                format: "gguf".to_owned(),
                sha256: "ab12".to_owned(),
                size_bytes: 98_362_432,
                parameters: Some(134_515_008),
                synthetic: false,
            })
            .await
            .unwrap();
        let config = store
            .insert_config(&NewConfig {
                model_id: model.id,
                weight_type: "q8_0".to_owned(),
                threads: 2,
                max_batch: 8,
                numa_policy: "none".to_owned(),
                kv_memory_mib: 256,
            })
            .await
            .unwrap();
        let host = store.insert_hardware(&hardware()).await.unwrap();
        (model, config, host)
    }

    #[tokio::test]
    async fn an_empty_store_has_no_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        assert!(profiles_from_store(&*store, None).await.unwrap().is_empty());
        seed(&*store).await;
        // A config without runs or capacity results gives no profile either.
        assert!(profiles_from_store(&*store, None).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn runs_become_a_curve_in_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        let (_, config, host) = seed(&*store).await;
        for (minute, rate) in [(0, 0.5), (5, 0.1), (10, 1.0)] {
            store
                .insert_profile_run(&run(config.id, host.id, rate, minute))
                .await
                .unwrap();
        }
        let mut failed = run(config.id, host.id, 2.0, 15);
        failed.error_count = failed.request_count;
        store.insert_profile_run(&failed).await.unwrap();

        let profiles = profiles_from_store(&*store, None).await.unwrap();
        assert_eq!(profiles.len(), 1);
        let p = &profiles[0];
        assert_eq!(
            p.id,
            format!("smollm2-135m-instruct-q8_0-t2-b8-hw{}", host.id)
        );
        assert_eq!(
            (p.model.as_str(), p.weights.as_str()),
            ("smollm2-135m-instruct", "q8_0")
        );
        assert_eq!((p.threads, p.max_batch), (2, 8));
        assert_eq!(p.measured_on.vcpus, 2);
        assert_eq!(p.measured_on.mem_bandwidth_gbs, 29.0);
        assert_eq!(p.measured_on.int8_gops, 0.0);
        assert_eq!(p.provenance, Provenance::Measured);
        let rates: Vec<f64> = p.load_curve.iter().map(|q| q.rate_rps).collect();
        assert_eq!(
            rates,
            vec![0.1, 0.5, 1.0],
            "offered rates, failed run left out"
        );
        let first = p.load_curve[0];
        assert!((first.ttft_p99_s - 0.22).abs() < 1e-12, "{first:?}");
        assert!((first.tpot_p99_s - 0.0165).abs() < 1e-12, "{first:?}");
        assert!((first.e2e_p99_s - 2.2).abs() < 1e-12, "{first:?}");
        assert!((p.mean_output_tokens - 100.0).abs() < 1e-9);
        assert!((p.mean_prompt_tokens - 200.0).abs() < 1e-9);

        assert_eq!(
            profiles_from_store(&*store, Some("smollm2-135m-instruct"))
                .await
                .unwrap(),
            profiles
        );
        assert!(
            profiles_from_store(&*store, Some("other-model"))
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// A gateway pool's service model comes from the selected config's stored curve; a selector that
    /// matches nothing, or several hosts, is refused naming what it asked for.
    #[tokio::test]
    async fn a_stored_service_curve_is_found_by_settings_and_host() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        let (_, config, host) = seed(&*store).await;
        for (minute, rate) in [(0, 0.5), (5, 1.0)] {
            store
                .insert_profile_run(&run(config.id, host.id, rate, minute))
                .await
                .unwrap();
        }
        let mut selector = ProfileSelector {
            model: "smollm2-135m-instruct".into(),
            weights: "q8_0".into(),
            threads: 2,
            max_batch: 8,
            hardware: None,
        };
        let curve = stored_service_curve(&*store, &selector).await.unwrap();
        assert_eq!(curve.slots, 8);
        assert_eq!(curve.copies, 1.0);
        // Median TPOT 10 ms at 50 and 100 output tokens/s: 0.5 and 1 streams decode together, so the
        // first point is lifted to one stream.
        assert_eq!(curve.tpot_by_batch, vec![(1.0, 0.01)]);
        assert!(curve.prefill_tokens_per_s > 0.0);

        selector.weights = "q4_1".into();
        let err = stored_service_curve(&*store, &selector)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no stored profile of smollm2-135m-instruct q4_1 t2 b8"),
            "{err}"
        );

        selector.weights = "q8_0".into();
        let mut other = hardware();
        other.fingerprint_hash = "fp-other".into();
        let other = store.insert_hardware(&other).await.unwrap();
        store
            .insert_profile_run(&run(config.id, other.id, 0.5, 30))
            .await
            .unwrap();
        let err = stored_service_curve(&*store, &selector)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("several hosts") && err.contains("hardware = N"),
            "{err}"
        );
        selector.hardware = Some(other.id.0);
        assert!(stored_service_curve(&*store, &selector).await.is_ok());
    }

    #[tokio::test]
    async fn the_newest_capacity_curve_wins_over_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        let (_, config, host) = seed(&*store).await;
        let newest_run = store
            .insert_profile_run(&run(config.id, host.id, 0.5, 0))
            .await
            .unwrap();
        let curve = |scale: f64| {
            json!([
                { "rate_rps": 1.0, "ttft_p99_ms": 300.0 * scale, "tpot_p99_ms": 20.0,
                  "e2e_p99_ms": 2500.0, "output_tokens_per_s": 50.0, "total_tokens_per_s": 450.0,
                  "ttft_p50_ms": 120.0 },
                { "requests_per_s": 0.25, "ttft_p99_ms": 250.0, "tpot_p99_ms": 15.0,
                  "e2e_p99_ms": 1800.0, "output_tokens_per_s": 12.5, "total_tokens_per_s": 112.5 }
            ])
        };
        for scale in [9.0, 1.0] {
            store
                .insert_capacity_result(&store::NewCapacityResult {
                    config_id: config.id,
                    hardware_id: host.id,
                    run_id: Some(newest_run.id),
                    sla_ttft_p99_ms: 500.0,
                    sla_tpot_p99_ms: 50.0,
                    max_requests_per_s: 1.0,
                    load_curve: curve(scale),
                    step_model: None,
                })
                .await
                .unwrap();
        }
        let profiles = profiles_from_store(&*store, None).await.unwrap();
        assert_eq!(profiles.len(), 1);
        let p = &profiles[0];
        let points: Vec<(f64, f64)> = p
            .load_curve
            .iter()
            .map(|q| (q.rate_rps, q.ttft_p99_s))
            .collect();
        assert_eq!(
            points,
            vec![(0.25, 0.25), (1.0, 0.3)],
            "sorted, newest result, seconds"
        );
        // Means from the newest run's shape, as the profiler records it: 100 output, 200 prompt tokens.
        assert!(
            (p.mean_output_tokens - 100.0).abs() < 1e-9,
            "{}",
            p.mean_output_tokens
        );
        assert!(
            (p.mean_prompt_tokens - 200.0).abs() < 1e-9,
            "{}",
            p.mean_prompt_tokens
        );

        // A newer run of one mean request (a profiling shape) gives the means, whatever the curve's
        // overloaded points achieved.
        let mut shaped = run(config.id, host.id, 0.5, 5);
        shaped.workload_shape = json!({ "name": "mix", "prompt_tokens": 114, "output_tokens": 22 });
        store.insert_profile_run(&shaped).await.unwrap();
        let profiles = profiles_from_store(&*store, None).await.unwrap();
        let p = &profiles[0];
        assert_eq!((p.mean_prompt_tokens, p.mean_output_tokens), (114.0, 22.0));
        // So does a shape of uniform lengths.
        let mut spread = run(config.id, host.id, 0.5, 6);
        spread.workload_shape = json!({ "name": "mix",
            "prompt_tokens": { "min": 57, "max": 171 }, "output_tokens": 22 });
        store.insert_profile_run(&spread).await.unwrap();
        let profiles = profiles_from_store(&*store, None).await.unwrap();
        assert_eq!(profiles[0].mean_prompt_tokens, 114.0);
    }

    #[tokio::test]
    async fn a_malformed_curve_names_the_result_and_point() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        let (_, config, host) = seed(&*store).await;
        let result = store
            .insert_capacity_result(&store::NewCapacityResult {
                config_id: config.id,
                hardware_id: host.id,
                run_id: None::<ProfileRunId>,
                sla_ttft_p99_ms: 500.0,
                sla_tpot_p99_ms: 50.0,
                max_requests_per_s: 1.0,
                load_curve: json!([{ "rate": 1.0, "ttft_p99_ms": 120.0 }]),
                step_model: None,
            })
            .await
            .unwrap();
        let err = profiles_from_store(&*store, None).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "capacity result {}: load_curve point 0: missing field",
                result.id
            )),
            "{text}"
        );
    }

    /// The newest capacity result's step model reaches the profile; a malformed one is named.
    #[tokio::test]
    async fn the_step_model_comes_with_the_capacity_result() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        let (_, config, host) = seed(&*store).await;
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.006), (2.0, 0.007)],
            prompt_token_s: 0.002,
            prompt_step_s: 0.003,
            steps: 400,
        };
        let point = json!([{ "rate_rps": 1.0, "ttft_p99_ms": 120.0, "tpot_p99_ms": 12.0,
            "e2e_p99_ms": 900.0, "output_tokens_per_s": 40.0, "total_tokens_per_s": 140.0 }]);
        let mut new = store::NewCapacityResult {
            config_id: config.id,
            hardware_id: host.id,
            run_id: None::<ProfileRunId>,
            sla_ttft_p99_ms: 500.0,
            sla_tpot_p99_ms: 50.0,
            max_requests_per_s: 1.0,
            load_curve: point,
            step_model: Some(serde_json::to_value(&model).unwrap()),
        };
        store.insert_capacity_result(&new).await.unwrap();
        let profiles = profiles_from_store(&*store, None).await.unwrap();
        assert_eq!(profiles[0].step_model.as_ref(), Some(&model));
        new.step_model = Some(json!({ "prompt_token_s": "fast" }));
        let bad = store.insert_capacity_result(&new).await.unwrap();
        let text = profiles_from_store(&*store, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            text.starts_with(&format!("capacity result {}: step_model: ", bad.id)),
            "{text}"
        );
    }

    #[tokio::test]
    async fn prices_are_recorded_once_and_plans_under_one_workload() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(&dir).await;
        let catalog = Catalog::builtin();
        let first = record_catalog_prices(&*store, &catalog).await.unwrap();
        assert_eq!(first.inserted, catalog.instances.len());
        let again = record_catalog_prices(&*store, &catalog).await.unwrap();
        assert_eq!(
            (again.inserted, again.already_recorded),
            (0, catalog.instances.len())
        );
        assert_eq!(
            store.list_catalog_prices(None).await.unwrap().len(),
            catalog.instances.len()
        );
        let l4 = catalog
            .instances
            .iter()
            .find(|i| i.is_gpu())
            .and_then(catalog_price_row)
            .unwrap();
        assert!(l4.accelerator_count >= 1, "{l4:?}");

        let mut input = strata_planner::plan::PlanInput::from_texts(
            include_str!("../../planner/examples/workload.toml"),
            None,
            None,
            include_str!("../../planner/examples/profiles.json"),
        )
        .unwrap();
        input.allow_estimates = true;
        input.sensitivity = false;
        input.validate_days = 0;
        let plan = strata_planner::plan::plan(&input).unwrap();
        let (workload, first) = record_plan(&*store, &input.workload, &plan).await.unwrap();
        let (same, second) = record_plan(&*store, &input.workload, &plan).await.unwrap();
        assert_eq!(
            (workload.name.as_str(), same.id),
            ("smol-assistant", workload.id)
        );
        assert_eq!(first.total_cost_usd, plan.totals.cost_per_day);
        assert!(first.total_output_tokens > 0);
        assert_eq!(first.plan["workload"], "smol-assistant");
        let plans = store.list_plans_for_workload(workload.id).await.unwrap();
        assert_eq!(
            plans.iter().map(|p| p.id).collect::<Vec<_>>(),
            vec![second.id, first.id]
        );
    }
}
