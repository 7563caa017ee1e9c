//! The replay: the plan's busiest hour per instance sent through a real gateway in front of a real
//! engine (and the GPU baseline endpoint when one is given), and set against the simulator's prediction
//! of the very same requests.

use std::{collections::BTreeMap, process::Command, time::Duration};

use chrono::Utc;

use strata_planner::{
    pace::{PaceSpread, ReplayCase, predict_replay_over_paces},
    pilot as decide,
    plan::Plan,
    profile::ConfigProfile,
    service::StepModel,
    workload::{TraceRecord, Workload},
};

use super::{
    Pilot, PilotError, Result, Step,
    calibration::{SampleSteps, calibration, pace_spread, sample_steps},
    capacity_search,
    gateway_file::ReplayGateway,
    gateway_predictions,
    host_load::HostLoadProbe,
    profiling_shape,
    report::{
        HeldCapacity, HostPace, ReplayInputs, ReplayPredictions, ReplayReport, ReplaySetup,
        SampleTime,
    },
};
use crate::{
    loadgen::{self, Api, Arrival, Lengths, LoadSpec, Shape, Sla, TimedRequest},
    process::ChildServer,
    profile::{self, EngineProcess, EngineSettings, NamedShape, Progress},
    store::pilot_replay_source,
};

/// Added to the pilot's seed for the pace measurements around the replay: with the replay's own seed
/// their prompts would open as the replay's first prompt does, and the engine's prefix cache would
/// serve that prompt from them.
const PACE_SEED: u64 = 0xface;

/// Replays the plan's busiest hour per instance (or `pilot.replay_load` of the chosen config's
/// `capacity_rps` on this host) through a real gateway and engine, and compares.
pub(super) async fn replay(
    pilot: &Pilot<'_>,
    plan: &Plan,
    profiles: &[ConfigProfile],
    profiled_paces: &BTreeMap<String, f64>,
    capacity_rps: Option<f64>,
    on_step: &mut impl FnMut(Step),
) -> Result<ReplayReport> {
    let spec = pilot.spec;
    let with_gpu = pilot.gpu_endpoint.is_some();
    let profile = profiles
        .iter()
        .find(|p| p.id == plan.chosen.config)
        .ok_or_else(|| PilotError::Server(format!("no profile {}", plan.chosen.config)))?;
    let profiled = EngineSettings {
        weights: profile.weights.clone(),
        threads: profile.threads as usize,
        max_batch: profile.max_batch as usize,
        numa: "none".into(),
        kv_mem_mib: spec.kv_mem_mib as usize,
        drain_hold: 0.0,
    };
    let settings = EngineSettings {
        drain_hold: spec.drain_hold,
        ..profiled.clone()
    };
    let mut load = decide::replay_load(plan, with_gpu);
    let mut held_capacity = None;
    // The capacity the replay's config serves with: searched again when the replay holds prompts.
    let mut capacity_rps = capacity_rps;
    if let Some(share) = spec.replay_load {
        let profiled_rps = capacity_rps.ok_or_else(|| {
            PilotError::Spec(format!(
                "pilot.replay_load: no capacity of {} is measured on this host to take a share of",
                plan.chosen.config
            ))
        })?;
        if settings.drain_hold > 0.0 {
            let held = search_held_capacity(pilot, &settings, profiled_rps, on_step).await?;
            capacity_rps = Some(held.capacity_rps);
            held_capacity = Some(held);
        }
        load = load.at_capacity_share(capacity_rps.unwrap_or(profiled_rps), share);
    }
    let trace = decide::replay_trace(pilot.workload, &load, spec.replay_s, spec.seed);
    // The prediction on `steps` in place of the chosen profile's step model (none: as profiled), over
    // `spread` (none: one simulation).
    let predict_on = |steps: Option<&StepModel>, spread: Option<PaceSpread>| {
        // Whatever measured the steps, the replay's engine orders them with the pilot's hold.
        let steps = steps.map(|m| StepModel {
            drain_hold: spec.drain_hold,
            ..m.clone()
        });
        let case = ReplayCase {
            plan,
            workload: pilot.workload,
            profiles,
            trace: &trace,
            with_gpu,
            seed: spec.seed,
        };
        predict_replay_over_paces(case, steps.as_ref(), spread.unwrap_or(PaceSpread::NONE))
    };
    let setup = ReplaySetup {
        workload: pilot.workload,
        gpu_fallback: &plan.gpu_fallback,
        load,
        held_capacity,
        trace: &trace,
        duration_s: spec.replay_s,
        config: settings.to_string(),
        with_gpu,
    };
    if trace.is_empty() {
        // The plan serves nothing on CPU (and there is no GPU endpoint): nothing to replay.
        let prediction = predict_on(None, None)?;
        return Ok(ReplayReport::new(ReplayInputs::nothing_sent(
            setup, prediction,
        )));
    }
    let served = pilot
        .gpu_endpoint
        .map_or(profile::SERVED_NAME, |g| g.model.as_str());
    let engine = EngineProcess::start_named(pilot.exe, pilot.model_file, &settings, served).await?;
    let host_hourly = plan.chosen.hourly_cost / plan.chosen.scaling.factor.max(1e-9);
    let gateway_file = ReplayGateway {
        workload: pilot.workload,
        profile,
        engine_url: &engine.base_url,
        served,
        host_hourly_usd: host_hourly,
        gpu: pilot.gpu_endpoint.map(|g| (g, &plan.gpu_fallback)),
    };
    let config_toml = gateway_file
        .to_toml()
        .map_err(|e| PilotError::Server(format!("the replay's gateway file: {e}")))?;
    let dir = tempfile::tempdir().map_err(|e| PilotError::Server(e.to_string()))?;
    let config_path = dir.path().join("pilot-gateway.toml");
    std::fs::write(&config_path, config_toml).map_err(|e| PilotError::Server(e.to_string()))?;
    let mut command = Command::new(pilot.exe);
    if let Some(url) = pilot.database_url {
        // Through the environment: a URL on the command line would show its password to `ps`.
        command.env(crate::store::ENV_DATABASE_URL, url);
    }
    // The replay's decisions go to the store under the pilot's name, apart from live traffic.
    command
        .arg("gateway")
        .arg("--config")
        .arg(&config_path)
        .args(["--listen", "127.0.0.1:0", "--decision-source"])
        .arg(pilot_replay_source(&pilot.workload.name));
    let gateway = ChildServer::spawn(command, "`strata gateway`")
        .await
        .map_err(PilotError::Server)?;
    let timed = timed_requests(pilot.workload, &trace);
    let load_spec = LoadSpec {
        base_url: gateway.base_url.clone(),
        model: served.to_owned(),
        api_key: None,
        api: Api::Completions,
        shape: Shape {
            prompt_tokens: Lengths::Fixed(1),
            output_tokens: Lengths::Fixed(1),
            arrival: Arrival::Closed { concurrency: 1 },
            requests: 1,
            duration_s: None,
            warmup: 0,
        },
        token_prompts: true,
        ignore_eos: true,
        sla: Sla::default(),
        seed: spec.seed,
        timeout: Duration::from_secs(600),
    };
    // Two unmeasured requests first: the engine's first steps fault its weights in.
    let warmup: Vec<TimedRequest> = timed
        .iter()
        .take(2)
        .cloned()
        .map(|mut r| {
            r.at_s = 0.0;
            r
        })
        .collect();
    let warmup_spec = LoadSpec {
        seed: spec.seed.wrapping_add(1),
        ..load_spec.clone()
    };
    loadgen::replay(&warmup_spec, &warmup).await?;
    // Without a step model in the profile there is nothing to calibrate, and no samples are sent.
    let sample = async |when| match &profile.step_model {
        Some(_) => sample_steps(pilot, &engine, &setup.load, &load_spec, when).await,
        None => Ok(None),
    };
    let sample_before = sample(SampleTime::BeforeReplay).await?;
    let pace_shape = profiling_shape(pilot.workload, spec);
    let pace_seed = spec.seed.wrapping_add(PACE_SEED);
    let before = measure_pace(&engine.base_url, served, &pace_shape, pace_seed).await?;
    on_step(Step::Replay {
        requests: timed.len(),
        seconds: spec.replay_s,
    });
    let steps_before = engine.step_times().await;
    let host_probe = HostLoadProbe::start(vec![std::process::id(), engine.pid(), gateway.id()]);
    let replay_start = Utc::now();
    let records = loadgen::replay(&load_spec, &timed).await?;
    // The gateway records a request as its last byte leaves, a moment after the client has it.
    let replay_window = (
        replay_start,
        Utc::now() + chrono::Duration::milliseconds(250),
    );
    let host_load = host_probe.and_then(HostLoadProbe::finish);
    let step_model = engine.step_model_since(steps_before).await;
    let sample_after = sample(SampleTime::AfterReplay).await?;
    let after = measure_pace(&engine.base_url, served, &pace_shape, pace_seed).await?;
    let mut gateway_predictions = gateway_predictions::replay_predictions(
        pilot.ctx.store,
        &pilot_replay_source(&pilot.workload.name),
        replay_window,
        records.len(),
    )
    .await?;
    if let Some(g) = gateway_predictions.as_mut() {
        g.load_over_capacity = capacity_rps.map(|c| setup.load.rate_rps / c);
    }
    drop(gateway);
    drop(engine);
    let samples: Vec<SampleSteps> = [sample_before, sample_after]
        .into_iter()
        .flatten()
        .collect();
    // The simulator's median TTFT of a calibration sample's requests on a step model.
    let sample_ttft_p50 = |sample: &[TraceRecord], steps: &StepModel| {
        let case = ReplayCase {
            plan,
            workload: pilot.workload,
            profiles,
            trace: sample,
            with_gpu,
            seed: spec.seed,
        };
        predict_replay_over_paces(case, Some(steps), PaceSpread::NONE)
            .map(|p| p.point.cpu_ttft_p50_s)
    };
    let calibration = match &profile.step_model {
        Some(model) => calibration(&samples, model, sample_ttft_p50)?,
        None => None,
    };
    let spread = calibration.as_ref().map(pace_spread);
    let predictions = ReplayPredictions {
        calibrated: predict_on(calibration.as_ref().map(|c| &c.step_model), spread)?,
        spread,
        on_replay_steps: step_model
            .as_ref()
            .map(|steps| predict_on(Some(steps), None))
            .transpose()?,
        as_profiled: spread
            .map(|spread| predict_on(None, Some(spread)))
            .transpose()?,
    };
    let host_pace = profiled_paces
        .get(&profiled.to_string())
        .map(|&profiled| HostPace {
            shape: pace_shape.name.clone(),
            profiled_output_tokens_per_s: profiled,
            before_replay_output_tokens_per_s: before,
            after_replay_output_tokens_per_s: after,
            replay_over_profiled: (before + after) / 2.0 / profiled,
        });
    Ok(ReplayReport::new(ReplayInputs {
        setup,
        host_hourly_usd: host_hourly,
        records: &records,
        host_pace,
        step_model,
        calibration,
        predictions,
        gateway_predictions,
        host_load,
    }))
}

/// Bisections of the search with the hold below the profiled capacity it starts from: down to an
/// eighth of it.
const HELD_CAPACITY_BISECTIONS: usize = 3;

/// The capacity of `settings` (the replay's config, with the pilot's drain hold) on this host, searched
/// as profiling searches it, from `profiled_rps` (the config's capacity without the hold). Nothing is
/// stored: the config's stored profile is the one without a hold.
async fn search_held_capacity(
    pilot: &Pilot<'_>,
    settings: &EngineSettings,
    profiled_rps: f64,
    on_step: &mut impl FnMut(Step),
) -> Result<HeldCapacity> {
    let search = capacity_search(pilot, HELD_CAPACITY_BISECTIONS);
    let shape = profiling_shape(pilot.workload, pilot.spec);
    on_step(Step::Profiling(settings.clone(), Progress::Starting));
    let engine = EngineProcess::start(pilot.exe, pilot.model_file, settings).await?;
    let capacity =
        profile::search_capacity(&engine, &shape, &search, profiled_rps, |point, met| {
            on_step(Step::Profiling(
                settings.clone(),
                Progress::Probe { point: *point, met },
            ));
        })
        .await?;
    if capacity.max_rps <= 0.0 {
        return Err(PilotError::Spec(format!(
            "pilot.drain_hold: with a hold of {}, {} met the capacity SLA at no rate probed \
             (down to {:.3} requests/s); replay without the hold or at the plan's load",
            settings.drain_hold,
            settings,
            profiled_rps / (1u32 << HELD_CAPACITY_BISECTIONS) as f64
        )));
    }
    Ok(HeldCapacity {
        drain_hold: settings.drain_hold,
        capacity_rps: capacity.max_rps,
        profiled_capacity_rps: profiled_rps,
        probes: capacity.curve,
    })
}

/// The workload's trace records as the load generator replays them.
pub(super) fn timed_requests(workload: &Workload, trace: &[TraceRecord]) -> Vec<TimedRequest> {
    trace
        .iter()
        .map(|r| TimedRequest {
            at_s: r.t_s,
            class: workload.classes[r.class].name.clone(),
            prompt_tokens: r.prompt_tokens as usize,
            output_tokens: r.output_tokens as usize,
        })
        .collect()
}

/// Output tokens/s of the profiling shape on the running engine, measured as profiling measured it
/// (straight to the engine, closed loop at the batch size).
async fn measure_pace(base_url: &str, served: &str, shape: &NamedShape, seed: u64) -> Result<f64> {
    let mut spec = profile::load_spec(base_url, shape, Sla::default(), seed);
    spec.model = served.to_owned();
    let report = loadgen::run(&spec).await?;
    Ok(report.output_tokens_per_s)
}
