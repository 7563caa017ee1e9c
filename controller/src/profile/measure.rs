//! Measuring one config: a shape's load run, recorded as a profile run, and the capacity search at
//! an SLA with the step model fitted from the engine's own timings.

use std::time::Duration;

use chrono::Utc;
use serde::Serialize;
use serde_json::{Value, json};
use strata_planner::service::StepModel;

use super::{CapacitySearch, EngineProcess, EngineSettings, NamedShape, Result, SERVED_NAME};
use crate::{
    loadgen::{self, Api, Arrival, LoadReport, LoadSpec, Shape, Sla},
    planning::StoredLoadPoint,
    store::{
        ConfigRow, HardwareRow, ModelRow, NewCapacityResult, NewConfig, NewProfileRun,
        ProfileRunRow, Store, StoreError,
    },
};

/// What one (config, shape) run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    /// The engine settings.
    pub settings: EngineSettings,
    /// The shape's name.
    pub shape: String,
    /// The load generator's report.
    pub report: LoadReport,
    /// Peak resident memory of the server, bytes.
    pub peak_rss_bytes: u64,
    /// Mean CPU utilization of the server over its threads, 0 to 1.
    pub cpu_utilization: f64,
    /// The stored run, when recorded.
    pub run_id: Option<i64>,
    /// Whether a stored run was reused instead of measuring.
    pub reused: bool,
}

/// A capacity curve point as stored: offered rate, p99 latencies in ms, throughputs.
pub type CurvePoint = StoredLoadPoint;

fn curve_point(rate: f64, r: &LoadReport) -> CurvePoint {
    StoredLoadPoint {
        rate_rps: rate,
        ttft_p99_ms: r.ttft_ms.p99,
        tpot_p99_ms: r.tpot_ms.p99,
        e2e_p99_ms: r.e2e_ms.p99,
        output_tokens_per_s: r.output_tokens_per_s,
        total_tokens_per_s: r.total_tokens_per_s,
        ttft_p50_ms: Some(r.ttft_ms.p50),
        tpot_p50_ms: Some(r.tpot_ms.p50),
    }
}

/// The highest Poisson rate meeting the SLA, every probe, and the engine's steps during them.
#[derive(Debug, Clone, Serialize)]
pub struct Capacity {
    /// Highest rate found to meet the SLA (0 when even the lowest probe misses it).
    pub max_rps: f64,
    /// Every probe, sorted by rate.
    pub curve: Vec<CurvePoint>,
    /// The step model fitted from the engine's timings of the probes' steps, when it had enough.
    pub step_model: Option<StepModel>,
}

/// The engine's and the store's identity of one measurement.
pub struct RunContext<'a> {
    /// The store.
    pub store: &'a dyn Store,
    /// This host.
    pub hardware: &'a HardwareRow,
    /// The model.
    pub model: &'a ModelRow,
    /// The version of the engine under test.
    pub engine_version: &'a str,
}

/// The config row for `settings` of `model`, created on first use.
///
/// # Errors
/// When the store fails.
pub async fn ensure_config(
    store: &dyn Store,
    model: &ModelRow,
    settings: &EngineSettings,
) -> Result<ConfigRow> {
    let new = NewConfig {
        model_id: model.id,
        weight_type: settings.weights.clone(),
        threads: settings.threads as i64,
        max_batch: settings.max_batch as i64,
        numa_policy: settings.numa.clone(),
        kv_memory_mib: settings.kv_mem_mib as i64,
    };
    if let Some(row) = store.find_config(&new).await? {
        return Ok(row);
    }
    match store.insert_config(&new).await {
        Ok(row) => Ok(row),
        Err(StoreError::Conflict { .. }) => Ok(store
            .find_config(&new)
            .await?
            .ok_or_else(|| StoreError::not_found("config", settings))?),
        Err(e) => Err(e.into()),
    }
}

/// The stored run of `config` for `shape` on this host and engine version, if any.
///
/// # Errors
/// When the store fails.
pub async fn find_existing(
    ctx: &RunContext<'_>,
    config: &ConfigRow,
    shape: &Value,
) -> Result<Option<ProfileRunRow>> {
    Ok(ctx
        .store
        .list_profile_runs_for_config(config.id)
        .await?
        .into_iter()
        .find(|r| {
            r.hardware_id == ctx.hardware.id
                && r.engine_version == ctx.engine_version
                && &r.workload_shape == shape
        }))
}

/// The JSON that identifies a shape in stored runs.
pub fn shape_json(shape: &NamedShape, sla: &Sla) -> Value {
    let mut identity = json!({
        "name": shape.name,
        "prompt_tokens": shape.prompt_tokens,
        "output_tokens": shape.output_tokens,
        "arrival": shape.arrival,
        "requests": shape.requests,
        "warmup": shape.warmup,
        "sla": sla,
    });
    // Count-only shapes keep the identity their runs were stored under before durations existed.
    if let (Some(duration), Some(fields)) = (shape.duration_s, identity.as_object_mut()) {
        fields.insert("duration_s".into(), json!(duration));
    }
    identity
}

/// The load spec for `shape` against a profiled server.
pub fn load_spec(base_url: &str, shape: &NamedShape, sla: Sla, seed: u64) -> LoadSpec {
    LoadSpec {
        base_url: base_url.to_owned(),
        model: SERVED_NAME.into(),
        api_key: None,
        api: Api::Completions,
        shape: Shape {
            prompt_tokens: shape.prompt_tokens,
            output_tokens: shape.output_tokens,
            arrival: shape.arrival,
            requests: shape.requests,
            duration_s: shape.duration_s,
            warmup: shape.warmup,
        },
        token_prompts: true,
        ignore_eos: true,
        sla,
        seed,
        timeout: Duration::from_secs(600),
    }
}

/// Measures one shape on a running server and records the run.
///
/// # Errors
/// When the load generator cannot run or the store fails.
pub async fn measure_shape(
    ctx: &RunContext<'_>,
    server: &EngineProcess,
    config: &ConfigRow,
    settings: &EngineSettings,
    shape: &NamedShape,
    sla: Sla,
    seed: u64,
) -> Result<RunOutcome> {
    let spec = load_spec(&server.base_url, shape, sla, seed);
    let cpu_before = server.cpu_seconds().unwrap_or(0.0);
    let started_at = Utc::now();
    let report = loadgen::run(&spec).await?;
    let finished_at = Utc::now();
    let cpu = server.cpu_seconds().unwrap_or(cpu_before) - cpu_before;
    let wall = (finished_at - started_at).as_seconds_f64().max(1e-9);
    let cpu_utilization = (cpu / wall / settings.threads.max(1) as f64).clamp(0.0, 1.0);
    let peak_rss_bytes = server.peak_rss_bytes().unwrap_or(0);
    let health = &server.health;
    let new = NewProfileRun {
        config_id: config.id,
        hardware_id: ctx.hardware.id,
        started_at,
        finished_at,
        workload_shape: shape_json(shape, &sla),
        request_count: report.requests as i64,
        error_count: report.errors as i64,
        ttft_p50_ms: report.ttft_ms.p50,
        ttft_p90_ms: report.ttft_ms.p90,
        ttft_p95_ms: report.ttft_ms.p95,
        ttft_p99_ms: report.ttft_ms.p99,
        tpot_p50_ms: report.tpot_ms.p50,
        tpot_p90_ms: report.tpot_ms.p90,
        tpot_p95_ms: report.tpot_ms.p95,
        tpot_p99_ms: report.tpot_ms.p99,
        itl_p50_ms: report.itl_ms.p50,
        itl_p90_ms: report.itl_ms.p90,
        itl_p95_ms: report.itl_ms.p95,
        itl_p99_ms: report.itl_ms.p99,
        e2e_p50_ms: report.e2e_ms.p50,
        e2e_p90_ms: report.e2e_ms.p90,
        e2e_p95_ms: report.e2e_ms.p95,
        e2e_p99_ms: report.e2e_ms.p99,
        output_tokens_per_s: report.output_tokens_per_s,
        total_tokens_per_s: report.total_tokens_per_s,
        requests_per_s: report.requests_per_s,
        goodput_requests_per_s: report.goodput_requests_per_s,
        sla_attainment: report.sla_attainment,
        peak_rss_bytes: peak_rss_bytes as i64,
        cpu_utilization,
        kernel_tier: health["kernel_tier"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned(),
        // As the server applied it, with the host's node count: `pin (1 NUMA node)`.
        placement: health["placement"].as_str().unwrap_or("unknown").to_owned(),
        engine_version: ctx.engine_version.to_owned(),
    };
    let row = ctx.store.insert_profile_run(&new).await?;
    Ok(RunOutcome {
        settings: settings.clone(),
        shape: shape.name.clone(),
        report,
        peak_rss_bytes,
        cpu_utilization,
        run_id: Some(row.id.0),
        reused: false,
    })
}

/// [`search_capacity`] on `config`'s engine, with the result and the curve recorded.
///
/// # Errors
/// When the load generator cannot run or the store fails.
pub async fn capacity_search(
    ctx: &RunContext<'_>,
    server: &EngineProcess,
    config: &ConfigRow,
    shape: &NamedShape,
    search: &CapacitySearch,
    start_rps: f64,
    on_probe: impl FnMut(&CurvePoint, bool),
) -> Result<Capacity> {
    let capacity = search_capacity(server, shape, search, start_rps, on_probe).await?;
    ctx.store
        .insert_capacity_result(&NewCapacityResult {
            config_id: config.id,
            hardware_id: ctx.hardware.id,
            run_id: None,
            sla_ttft_p99_ms: search.ttft_p99_ms,
            sla_tpot_p99_ms: search.tpot_p99_ms,
            max_requests_per_s: capacity.max_rps,
            load_curve: serde_json::to_value(&capacity.curve).unwrap_or_default(),
            step_model: capacity
                .step_model
                .as_ref()
                .and_then(|m| serde_json::to_value(m).ok()),
        })
        .await?;
    Ok(capacity)
}

/// Searches the highest Poisson rate whose p99 TTFT and TPOT meet `search`'s targets: doubles the
/// rate from `start_rps` until a probe misses, then bisects; a rate counts as met only when
/// `confirmations` probes at it (different seeds) all meet the SLA. Records nothing.
///
/// # Errors
/// When the load generator cannot run.
pub async fn search_capacity(
    server: &EngineProcess,
    shape: &NamedShape,
    search: &CapacitySearch,
    start_rps: f64,
    mut on_probe: impl FnMut(&CurvePoint, bool),
) -> Result<Capacity> {
    let sla = Sla {
        ttft_ms: Some(search.ttft_p99_ms),
        tpot_ms: Some(search.tpot_p99_ms),
        e2e_ms: None,
    };
    let mut curve = Vec::new();
    // Every probe draws fresh prompts: a repeated prompt would be answered from the prefix cache.
    let mut probes = 0u64;
    let mut probe = async |rate: f64, seed: u64, curve: &mut Vec<CurvePoint>| -> Result<bool> {
        probes += 1;
        let seed = seed.wrapping_add(probes.wrapping_mul(0x9E37_79B9));
        let requests = search
            .probe_requests
            .max((rate * search.min_probe_s).ceil() as usize);
        let probe_shape = NamedShape {
            arrival: Arrival::Poisson { rate },
            requests,
            duration_s: None,
            warmup: 0,
            ..shape.clone()
        };
        let report = loadgen::run(&load_spec(&server.base_url, &probe_shape, sla, seed)).await?;
        let point = curve_point(rate, &report);
        let met = report.errors == 0
            && report.ttft_ms.p99 <= search.ttft_p99_ms
            && report.tpot_ms.p99 <= search.tpot_p99_ms;
        on_probe(&point, met);
        curve.push(point);
        Ok(met)
    };
    let confirmations = search.confirmations.max(1) as u64;
    let mut met_twice = async |rate: f64, curve: &mut Vec<CurvePoint>| -> Result<bool> {
        for i in 0..confirmations {
            if !probe(rate, 11 + 12 * i, curve).await? {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let steps_before = server.step_times().await;
    let (mut low, mut high) = (0.0f64, start_rps.max(0.01));
    // Bracket: double until the SLA is missed (at most 8 doublings).
    let mut bracketed = false;
    for _ in 0..8 {
        if met_twice(high, &mut curve).await? {
            low = high;
            high *= 2.0;
        } else {
            bracketed = true;
            break;
        }
    }
    if bracketed {
        for _ in 0..search.bisections {
            let mid = (low + high) / 2.0;
            if met_twice(mid, &mut curve).await? {
                low = mid;
            } else {
                high = mid;
            }
        }
    }
    curve.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps));
    let step_model = server.step_model_since(steps_before).await;
    Ok(Capacity {
        max_rps: low,
        curve,
        step_model,
    })
}

impl RunOutcome {
    /// A stored run, shown as an outcome.
    pub fn stored(settings: &EngineSettings, shape: &str, run: &ProfileRunRow) -> Self {
        use crate::loadgen::Percentiles;
        let p = |p50, p90, p95, p99| Percentiles { p50, p90, p95, p99 };
        Self {
            settings: settings.clone(),
            shape: shape.to_owned(),
            report: LoadReport {
                duration_s: (run.finished_at - run.started_at).as_seconds_f64(),
                requests: run.request_count as usize,
                errors: run.error_count as usize,
                ttft_ms: p(
                    run.ttft_p50_ms,
                    run.ttft_p90_ms,
                    run.ttft_p95_ms,
                    run.ttft_p99_ms,
                ),
                tpot_ms: p(
                    run.tpot_p50_ms,
                    run.tpot_p90_ms,
                    run.tpot_p95_ms,
                    run.tpot_p99_ms,
                ),
                itl_ms: p(
                    run.itl_p50_ms,
                    run.itl_p90_ms,
                    run.itl_p95_ms,
                    run.itl_p99_ms,
                ),
                e2e_ms: p(
                    run.e2e_p50_ms,
                    run.e2e_p90_ms,
                    run.e2e_p95_ms,
                    run.e2e_p99_ms,
                ),
                output_tokens_per_s: run.output_tokens_per_s,
                total_tokens_per_s: run.total_tokens_per_s,
                requests_per_s: run.requests_per_s,
                goodput_requests_per_s: run.goodput_requests_per_s,
                sla_attainment: run.sla_attainment,
                error_samples: Vec::new(),
                records: Vec::new(),
            },
            peak_rss_bytes: run.peak_rss_bytes as u64,
            cpu_utilization: run.cpu_utilization,
            run_id: Some(run.id.0),
            reused: true,
        }
    }
}
