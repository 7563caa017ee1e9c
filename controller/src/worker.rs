//! Profiling jobs: a sweep becomes one job per config in the store, and workers (on this host or
//! others sharing the PostgreSQL store) claim them with a lease they keep renewing. A worker that dies
//! stops renewing; once its lease runs out another worker takes the job over, and shapes already
//! recorded are reused rather than measured twice.

use std::{path::PathBuf, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    profile::{self, EngineSettings, Progress, RunContext, Sweep},
    store::{HardwareRow, JobOutcome, ModelId, ProfileJobId, ProfileJobRow, Store},
};

/// What one profiling job measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The sweep the config comes from (shapes, SLA, capacity search, seed).
    pub sweep: Sweep,
    /// The config.
    pub settings: EngineSettings,
    /// The model's store id.
    pub model_id: ModelId,
    /// The model file on the worker's host.
    pub model_path: PathBuf,
}

/// Queues one job per config of `sweep`.
///
/// # Errors
/// When the store fails.
pub async fn enqueue_sweep(
    store: &dyn Store,
    sweep: &Sweep,
    model_id: ModelId,
    model_path: PathBuf,
) -> crate::store::Result<Vec<ProfileJobRow>> {
    let mut jobs = Vec::new();
    for settings in sweep.configs() {
        let spec = JobSpec {
            sweep: sweep.clone(),
            settings,
            model_id,
            model_path: model_path.clone(),
        };
        let value = serde_json::to_value(&spec).unwrap_or_default();
        jobs.push(store.enqueue_profile_job(&value).await?);
    }
    Ok(jobs)
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its name in the store (`claimed_by`).
    pub name: String,
    /// How long a claim holds without renewal.
    pub lease: Duration,
    /// Return when no job is queued or running anywhere instead of waiting for more.
    pub exit_when_idle: bool,
    /// How often to look for jobs while idle.
    pub poll: Duration,
    /// The `strata` binary that serves the engine.
    pub exe: PathBuf,
    /// The engine version recorded with runs.
    pub engine_version: String,
}

/// What happened to one job.
#[derive(Debug, Clone)]
pub enum JobEvent {
    /// A job was claimed.
    Claimed(ProfileJobId, EngineSettings),
    /// A job finished.
    Done(ProfileJobId),
    /// A job failed.
    Failed(ProfileJobId, String),
    /// The lease was lost to another worker; the job was left to it.
    LeaseLost(ProfileJobId),
}

/// Claims and runs jobs until none is left (with `exit_when_idle`) or forever. Returns the number of
/// jobs this worker finished.
///
/// # Errors
/// When the store fails outside a job.
pub async fn work(
    store: Arc<dyn Store>,
    hardware: &HardwareRow,
    options: &WorkerOptions,
    mut on_event: impl FnMut(JobEvent),
) -> crate::store::Result<usize> {
    let mut finished = 0;
    loop {
        let Some(job) = store
            .claim_next_profile_job_leased(&options.name, options.lease)
            .await?
        else {
            // Jobs other workers hold may still come back when their leases run out.
            let others_running = !store
                .list_profile_jobs(Some(crate::store::JobStatus::Running))
                .await?
                .is_empty();
            if options.exit_when_idle && !others_running {
                return Ok(finished);
            }
            tokio::time::sleep(options.poll).await;
            continue;
        };
        let spec: JobSpec = match serde_json::from_value(job.spec.clone()) {
            Ok(spec) => spec,
            Err(e) => {
                let error = format!("the job's spec is not a profiling job: {e}");
                fail(store.as_ref(), job.id, error, &mut on_event).await?;
                continue;
            }
        };
        on_event(JobEvent::Claimed(job.id, spec.settings.clone()));
        match run_job(store.clone(), hardware, options, &job, &spec).await? {
            JobResult::Done(run_id) => {
                store
                    .complete_profile_job(job.id, &JobOutcome::Done { run_id })
                    .await?;
                finished += 1;
                on_event(JobEvent::Done(job.id));
            }
            JobResult::Failed(error) => fail(store.as_ref(), job.id, error, &mut on_event).await?,
            JobResult::LeaseLost => on_event(JobEvent::LeaseLost(job.id)),
        }
    }
}

/// Marks job `id` failed with `error` and reports it.
async fn fail(
    store: &dyn Store,
    id: ProfileJobId,
    error: String,
    on_event: &mut impl FnMut(JobEvent),
) -> crate::store::Result<()> {
    store
        .complete_profile_job(
            id,
            &JobOutcome::Failed {
                error: error.clone(),
            },
        )
        .await?;
    on_event(JobEvent::Failed(id, error));
    Ok(())
}

enum JobResult {
    Done(Option<crate::store::ProfileRunId>),
    Failed(String),
    LeaseLost,
}

/// Runs one job while renewing its lease every third of the lease; stops if the lease is lost.
async fn run_job(
    store: Arc<dyn Store>,
    hardware: &HardwareRow,
    options: &WorkerOptions,
    job: &ProfileJobRow,
    spec: &JobSpec,
) -> crate::store::Result<JobResult> {
    let model = store.get_model(spec.model_id).await?;
    let ctx = RunContext {
        store: store.as_ref(),
        hardware,
        model: &model,
        engine_version: &options.engine_version,
    };
    let run = profile::run_config(
        &ctx,
        &options.exe,
        &spec.model_path,
        &spec.sweep,
        &spec.settings,
        false,
        |_: Progress| {},
    );
    let renew = async {
        loop {
            tokio::time::sleep(options.lease / 3).await;
            match store.renew_profile_job_lease(job.id, &options.name).await {
                Ok(true) => continue,
                Ok(false) => return,
                // A store outage: keep trying; the lease decides who owns the job.
                Err(e) => tracing::warn!(error = %e, job = %job.id, "cannot renew the job's lease"),
            }
        }
    };
    tokio::select! {
        outcome = run => Ok(match outcome {
            Ok(outcome) => JobResult::Done(
                outcome.runs.iter().filter_map(|r| r.run_id).next_back().map(crate::store::ProfileRunId),
            ),
            Err(e) => JobResult::Failed(e.to_string()),
        }),
        () = renew => Ok(JobResult::LeaseLost),
    }
}
