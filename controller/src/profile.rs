//! Profiling sweeps: every combination of a sweep's engine settings is started as a real
//! `strata serve` process on loopback, driven over HTTP by the load generator for each workload
//! shape (after a warm-up), watched for peak memory and CPU time, optionally searched for its
//! capacity at an SLA (with the engine's step model fitted from its own timings of the search's
//! steps), and recorded in the store with the host's fingerprint.

use std::{path::Path, process::Command, time::Duration};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use strata_engine::{placement::Placement, serve::StepTimes};
use strata_planner::service::StepModel;

use crate::{
    loadgen::{self, Api, Arrival, Lengths, LoadReport, LoadSpec, Shape, Sla},
    planning::StoredLoadPoint,
    process::ChildServer,
    step_fit,
    store::{
        ConfigRow, HardwareRow, ModelRow, NewCapacityResult, NewConfig, NewProfileRun,
        ProfileRunRow, Store, StoreError,
    },
};

/// Errors of a profiling sweep.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The sweep file is wrong; the message names the key.
    #[error("sweep file: {0}")]
    Sweep(String),
    /// The engine server did not start or answer.
    #[error("engine server: {0}")]
    Server(String),
    /// The load generator could not run.
    #[error(transparent)]
    Load(#[from] loadgen::LoadError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Result type of this module.
pub type Result<T> = std::result::Result<T, ProfileError>;

/// One workload shape of a sweep, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedShape {
    /// Its name in tables.
    pub name: String,
    /// Prompt lengths in tokens.
    pub prompt_tokens: Lengths,
    /// Output lengths in tokens.
    pub output_tokens: Lengths,
    /// Arrival process.
    pub arrival: Arrival,
    /// Measured requests; with `duration_s`, the most sent (0 or absent: no limit but the duration).
    #[serde(default)]
    pub requests: usize,
    /// Send for this many seconds instead of a request count.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Unmeasured warm-up requests.
    #[serde(default)]
    pub warmup: usize,
}

/// Capacity search settings: the SLA and how much load each probe sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacitySearch {
    /// p99 TTFT target, milliseconds.
    pub ttft_p99_ms: f64,
    /// p99 TPOT target, milliseconds.
    pub tpot_p99_ms: f64,
    /// The shape (by name) whose lengths the probes use.
    pub shape: String,
    /// Requests per probe.
    #[serde(default = "default_probe_requests")]
    pub probe_requests: usize,
    /// Bisection steps after bracketing.
    #[serde(default = "default_bisections")]
    pub bisections: usize,
    /// Probes (different seeds) that must all meet the SLA for a rate to count as met.
    #[serde(default = "default_confirmations")]
    pub confirmations: usize,
    /// Shortest probe, seconds of arrivals: faster probes send `rate x min_probe_s` requests, so that a
    /// rate above capacity builds a queue long enough to show.
    #[serde(default = "default_min_probe_s")]
    pub min_probe_s: f64,
}

fn default_min_probe_s() -> f64 {
    10.0
}

fn default_confirmations() -> usize {
    2
}

fn default_probe_requests() -> usize {
    24
}

fn default_bisections() -> usize {
    3
}

/// A sweep file (TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// A model file, folder or cached model name.
    pub model: String,
    /// Runtime weight types.
    #[serde(default = "default_weights")]
    pub weights: Vec<String>,
    /// Engine thread counts.
    #[serde(default = "default_threads")]
    pub threads: Vec<usize>,
    /// Most sequences per batch.
    #[serde(default = "default_batch")]
    pub max_batch: Vec<usize>,
    /// NUMA placement policies.
    #[serde(default = "default_numa")]
    pub numa: Vec<String>,
    /// Key/value memory budgets, MiB.
    #[serde(default = "default_kv")]
    pub kv_mem_mib: Vec<usize>,
    /// Workload shapes run against every config.
    #[serde(rename = "shape")]
    pub shapes: Vec<NamedShape>,
    /// Targets for goodput and attainment.
    #[serde(default)]
    pub sla: Sla,
    /// Capacity search, if wanted.
    #[serde(default)]
    pub capacity: Option<CapacitySearch>,
    /// Seed of the load generator.
    #[serde(default)]
    pub seed: u64,
    /// Also score each weight type's output quality (perplexity and top-1 agreement with f32).
    #[serde(default)]
    pub quality: bool,
}

fn default_weights() -> Vec<String> {
    vec!["q8_0".into()]
}
fn default_threads() -> Vec<usize> {
    vec![std::thread::available_parallelism().map_or(1, |n| n.get())]
}
fn default_batch() -> Vec<usize> {
    vec![16]
}
fn default_numa() -> Vec<String> {
    vec!["none".into()]
}
fn default_kv() -> Vec<usize> {
    vec![256]
}

/// One engine configuration of a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EngineSettings {
    /// Runtime weight type.
    pub weights: String,
    /// Engine threads.
    pub threads: usize,
    /// Most sequences per batch.
    pub max_batch: usize,
    /// NUMA placement policy.
    pub numa: String,
    /// Key/value memory, MiB.
    pub kv_mem_mib: usize,
}

impl std::fmt::Display for EngineSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} t{} b{} kv{} numa={}",
            self.weights, self.threads, self.max_batch, self.kv_mem_mib, self.numa
        )
    }
}

const WEIGHT_TYPES: &[&str] = &["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"];

impl Sweep {
    /// Parses and checks a sweep file.
    ///
    /// # Errors
    /// [`ProfileError::Sweep`] naming the key at fault.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let sweep: Self = toml::from_str(text).map_err(|e| ProfileError::Sweep(e.to_string()))?;
        sweep.check()?;
        Ok(sweep)
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(ProfileError::Sweep(m));
        if let Some(w) = self
            .weights
            .iter()
            .find(|w| !WEIGHT_TYPES.contains(&w.as_str()))
        {
            return bad(format!(
                "weights: unknown type `{w}` (one of {})",
                WEIGHT_TYPES.join(", ")
            ));
        }
        if let Some(e) = self.numa.iter().find_map(|n| n.parse::<Placement>().err()) {
            return bad(format!("numa: {e}"));
        }
        for (key, values) in [
            ("threads", &self.threads),
            ("max_batch", &self.max_batch),
            ("kv_mem_mib", &self.kv_mem_mib),
        ] {
            if values.is_empty() || values.contains(&0) {
                return bad(format!("{key}: give at least one value, each at least 1"));
            }
        }
        if self.shapes.is_empty() {
            return bad("shape: give at least one [[shape]]".into());
        }
        for s in &self.shapes {
            match s.duration_s {
                None if s.requests == 0 => {
                    return bad(format!(
                        "shape `{}`: give requests (at least 1) or duration_s",
                        s.name
                    ));
                }
                Some(d) if !(d.is_finite() && d > 0.0) => {
                    return bad(format!(
                        "shape `{}`: duration_s must be a positive number of seconds",
                        s.name
                    ));
                }
                _ => {}
            }
        }
        if let Some(c) = &self.capacity
            && !self.shapes.iter().any(|s| s.name == c.shape)
        {
            return bad(format!("capacity.shape: no [[shape]] named `{}`", c.shape));
        }
        Ok(())
    }

    /// Every combination of the sweep's settings.
    pub fn configs(&self) -> Vec<EngineSettings> {
        let mut out = Vec::new();
        for weights in &self.weights {
            for &threads in &self.threads {
                for &max_batch in &self.max_batch {
                    for numa in &self.numa {
                        for &kv_mem_mib in &self.kv_mem_mib {
                            out.push(EngineSettings {
                                weights: weights.clone(),
                                threads,
                                max_batch,
                                numa: numa.clone(),
                                kv_mem_mib,
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// A running `strata serve` process, stopped when dropped.
pub struct EngineProcess {
    server: ChildServer,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// What `/health` reported at start.
    pub health: Value,
}

/// The name the profiler serves models under.
pub const SERVED_NAME: &str = "profiled";

impl EngineProcess {
    /// Starts `exe serve` for `model` with `settings` on a free loopback port and waits until it
    /// answers `/health`.
    ///
    /// # Errors
    /// When the process does not start, exits, or does not answer.
    pub async fn start(exe: &Path, model: &Path, settings: &EngineSettings) -> Result<Self> {
        Self::start_named(exe, model, settings, SERVED_NAME).await
    }

    /// As [`EngineProcess::start`], serving the model under `served_name`.
    ///
    /// # Errors
    /// When the process does not start, exits, or does not answer.
    pub async fn start_named(
        exe: &Path,
        model: &Path,
        settings: &EngineSettings,
        served_name: &str,
    ) -> Result<Self> {
        let mut command = Command::new(exe);
        command
            .arg("serve")
            .arg("--model")
            .arg(model)
            .args(["--weights", &settings.weights])
            .args(["--threads", &settings.threads.to_string()])
            .args(["--max-batch", &settings.max_batch.to_string()])
            .args(["--kv-mem", &settings.kv_mem_mib.to_string()])
            .args(["--numa", &settings.numa])
            .args(["--port", "0", "--served-model-name", served_name]);
        let server = ChildServer::spawn(command, &format!("`strata serve` for {settings}"))
            .await
            .map_err(ProfileError::Server)?;
        let base_url = server.base_url.clone();
        let health = reqwest::get(format!("{base_url}/health"))
            .await
            .map_err(|e| ProfileError::Server(e.to_string()))?
            .json::<Value>()
            .await
            .map_err(|e| ProfileError::Server(e.to_string()))?;
        Ok(Self {
            server,
            base_url,
            health,
        })
    }

    /// The engine's step timings so far (its `/steps`).
    ///
    /// # Errors
    /// When the server does not answer with them.
    pub async fn step_times(&self) -> Result<StepTimes> {
        let failed = |e: reqwest::Error| ProfileError::Server(format!("step timings: {e}"));
        reqwest::get(format!("{}/steps", self.base_url))
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(failed)?
            .json::<StepTimes>()
            .await
            .map_err(failed)
    }

    /// The step model fitted to the steps run since `before` (an earlier [`Self::step_times`]);
    /// `None` when the steps were too few or a reading failed (logged: the planner then derives the
    /// steps from the load curve).
    pub async fn step_model_since(&self, before: Result<StepTimes>) -> Option<StepModel> {
        step_fit::fit(&self.steps_since(before).await?)
    }

    /// The steps run since `before` (an earlier [`Self::step_times`]); `None` when a reading failed
    /// (logged).
    pub async fn steps_since(&self, before: Result<StepTimes>) -> Option<StepTimes> {
        match (before, self.step_times().await) {
            (Ok(before), Ok(after)) => Some(after.since(&before)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "no step timings from the engine");
                None
            }
        }
    }

    /// Peak resident memory so far (VmHWM), bytes.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.server.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib << 10)
    }

    /// CPU time used so far (user + system), seconds; clock ticks taken as 100 per second, the
    /// Linux default.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.server.id())).ok()?;
        // Fields after the command name (which may hold spaces) start after the last ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        Some((utime + stime) / 100.0)
    }
}

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

/// Searches the highest Poisson rate whose p99 TTFT and TPOT meet `search`'s targets: doubles the
/// rate from `start_rps` until a probe misses, then bisects; a rate counts as met only when
/// `confirmations` probes at it (different seeds) all meet the SLA. Records the result and the curve.
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
    let capacity = Capacity {
        max_rps: low,
        curve,
        step_model,
    };
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

/// Progress of a config's profiling, for a progress bar.
#[derive(Debug, Clone)]
pub enum Progress {
    /// The engine server is starting.
    Starting,
    /// A shape is being measured.
    Measuring(String),
    /// A shape is done (measured or reused).
    ShapeDone,
    /// A capacity probe finished.
    Probe {
        /// Its offered rate and p99s.
        point: CurvePoint,
        /// Whether it met the SLA.
        met: bool,
    },
}

/// What profiling one config produced.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigOutcome {
    /// One outcome per shape.
    pub runs: Vec<RunOutcome>,
    /// The capacity found, when searched.
    pub capacity_rps: Option<f64>,
}

/// Profiles one config of `sweep`: reuses shapes this host and engine version already measured
/// (unless `force`), starts the engine only when something is left to measure, measures the rest,
/// and searches capacity when the sweep asks and none is stored for this host.
///
/// # Errors
/// When the engine does not start, the load generator cannot run, or the store fails.
pub async fn run_config(
    ctx: &RunContext<'_>,
    exe: &Path,
    model_file: &Path,
    sweep: &Sweep,
    settings: &EngineSettings,
    force: bool,
    mut progress: impl FnMut(Progress),
) -> Result<ConfigOutcome> {
    let config = ensure_config(ctx.store, ctx.model, settings).await?;
    let mut runs = Vec::new();
    let mut pending = Vec::new();
    for shape in &sweep.shapes {
        let key = shape_json(shape, &sweep.sla);
        match find_existing(ctx, &config, &key).await? {
            Some(run) if !force => {
                progress(Progress::ShapeDone);
                runs.push(RunOutcome::stored(settings, &shape.name, &run));
            }
            _ => pending.push(shape),
        }
    }
    let wants_capacity = sweep.capacity.is_some()
        && (force
            || ctx
                .store
                .list_capacity_results_for_config(config.id)
                .await?
                .iter()
                .all(|c| c.hardware_id != ctx.hardware.id));
    if pending.is_empty() && !wants_capacity {
        return Ok(ConfigOutcome {
            runs,
            capacity_rps: None,
        });
    }
    progress(Progress::Starting);
    let server = EngineProcess::start(exe, model_file, settings).await?;
    for shape in pending {
        progress(Progress::Measuring(shape.name.clone()));
        let outcome = measure_shape(
            ctx, &server, &config, settings, shape, sweep.sla, sweep.seed,
        )
        .await?;
        progress(Progress::ShapeDone);
        runs.push(outcome);
    }
    let mut capacity_rps = None;
    if let Some(search) = sweep.capacity.as_ref().filter(|_| wants_capacity) {
        let shape = sweep
            .shapes
            .iter()
            .find(|s| s.name == search.shape)
            .ok_or_else(|| ProfileError::Sweep(format!("no shape named `{}`", search.shape)))?;
        // Start the bracket near half of what the measured run completed.
        let start = runs
            .iter()
            .find(|o| o.shape == search.shape)
            .map_or(0.5, |o| (o.report.requests_per_s * 0.5).max(0.05));
        let capacity =
            capacity_search(ctx, &server, &config, shape, search, start, |point, met| {
                progress(Progress::Probe { point: *point, met });
            })
            .await?;
        capacity_rps = Some(capacity.max_rps);
    }
    Ok(ConfigOutcome { runs, capacity_rps })
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

#[cfg(test)]
mod tests {
    use super::*;

    const SWEEP: &str = r#"
model = "smollm2-135m-instruct"
weights = ["q8_0", "q4_1", "f16"]
threads = [1, 2]
max_batch = [1, 8]

[sla]
ttft_ms = 1000.0
tpot_ms = 100.0

[[shape]]
name = "chat"
prompt_tokens = 128
output_tokens = { min = 16, max = 64 }
arrival = { kind = "closed", concurrency = 4 }
requests = 16
warmup = 2

[capacity]
ttft_p99_ms = 1000.0
tpot_p99_ms = 100.0
shape = "chat"
"#;

    #[test]
    fn a_sweep_expands_to_every_combination() {
        let sweep = Sweep::from_toml_str(SWEEP).expect("parses");
        let configs = sweep.configs();
        assert_eq!(configs.len(), 12);
        assert_eq!(configs[0].to_string(), "q8_0 t1 b1 kv256 numa=none");
        assert_eq!(sweep.shapes[0].prompt_tokens, Lengths::Fixed(128));
        assert_eq!(
            sweep.shapes[0].output_tokens,
            Lengths::Uniform { min: 16, max: 64 }
        );
        let capacity = sweep.capacity.expect("capacity");
        assert_eq!((capacity.probe_requests, capacity.confirmations), (24, 2));
    }

    #[test]
    fn a_shape_may_run_for_a_duration_and_keeps_it_in_its_identity() {
        let text = SWEEP.replace("requests = 16", "duration_s = 30.0");
        let sweep = Sweep::from_toml_str(&text).expect("parses");
        let shape = &sweep.shapes[0];
        assert_eq!((shape.requests, shape.duration_s), (0, Some(30.0)));
        let identity = shape_json(shape, &sweep.sla);
        assert_eq!(identity["duration_s"], 30.0);
        let counted = Sweep::from_toml_str(SWEEP).expect("parses");
        let identity = shape_json(&counted.shapes[0], &counted.sla);
        assert!(identity.get("duration_s").is_none(), "{identity}");
        assert_eq!(
            load_spec("http://127.0.0.1:1", shape, Sla::default(), 1)
                .shape
                .duration_s,
            Some(30.0)
        );
    }

    #[test]
    fn bad_sweeps_name_the_key() {
        let cases = [
            (SWEEP.replace("\"f16\"", "\"q3_k\""), "weights"),
            (
                SWEEP.replace("threads = [1, 2]", "threads = [0]"),
                "threads",
            ),
            (
                SWEEP.replace("shape = \"chat\"", "shape = \"nope\""),
                "capacity.shape",
            ),
            (SWEEP.replace("max_batch", "max_bach"), "max_bach"),
            (
                SWEEP.replace("requests = 16", "requests = \"many\""),
                "requests",
            ),
            (format!("numa = [\"spread\"]\n{SWEEP}"), "numa"),
            (SWEEP.replace("requests = 16", "requests = 0"), "duration_s"),
            (
                SWEEP.replace("requests = 16", "duration_s = -3.0"),
                "duration_s must be a positive",
            ),
        ];
        for (text, key) in cases {
            let err = Sweep::from_toml_str(&text).expect_err(key).to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }
}
