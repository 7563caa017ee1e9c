//! Profiling one config end to end: start its engine, run or reuse every shape, search its capacity.

use std::path::Path;

use serde::Serialize;

use super::{
    CurvePoint, EngineProcess, EngineSettings, ProfileError, Result, RunContext, RunOutcome, Sweep,
    capacity_search, ensure_config, find_existing, measure_shape, shape_json,
};

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
    /// The latest capacity stored for this host before this run.
    pub stored_capacity_rps: Option<f64>,
}

impl ConfigOutcome {
    /// The config's capacity on this host: this run's search, else the latest stored.
    pub fn known_capacity_rps(&self) -> Option<f64> {
        self.capacity_rps.or(self.stored_capacity_rps)
    }
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
    // Newest first: the first of this host's is its latest.
    let stored_capacity_rps = ctx
        .store
        .list_capacity_results_for_config(config.id)
        .await?
        .iter()
        .find(|c| c.hardware_id == ctx.hardware.id)
        .map(|c| c.max_requests_per_s);
    let wants_capacity = sweep.capacity.is_some() && (force || stored_capacity_rps.is_none());
    if pending.is_empty() && !wants_capacity {
        return Ok(ConfigOutcome {
            runs,
            capacity_rps: None,
            stored_capacity_rps,
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
    Ok(ConfigOutcome {
        runs,
        capacity_rps,
        stored_capacity_rps,
    })
}
