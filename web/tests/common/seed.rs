//! Demo data for the dashboard's tests and bench, written by the producers' own types: configs with
//! runs, capacity results (profiling's `StoredLoadPoint`s) and quality results, the builtin catalog's
//! prices, the example pilot workload with the plan `plan()` makes of the stored profiles, pilots, and
//! gateway traffic (live and a pilot's replay) from the last few minutes.

use chrono::{Duration, Utc};
use serde_json::json;
use strata_controller::{
    loadgen::{Arrival, Lengths, ReplayRecord, RequestRecord, Sla},
    pilot::{
        Calibration, CalibrationSample, ClassComparison, Comparison, HostLoad, HostPace,
        PilotReport, REPORT_SCHEMA_VERSION, ReplayInputs, ReplayPredictions, ReplayReport,
        ReplaySetup, ReportInputs, SampleTime, SimulationPair, plan_summary,
    },
    planning::{self, StoredLoadPoint},
    profile::{self, NamedShape},
    store::*,
};
use strata_planner::{
    catalog::Catalog,
    pace::{Band, PaceSpread, ReplayCase, predict_replay_over_paces},
    pilot::{
        PairedTasks, PilotSpec, VerdictInput, WeightQuality, gate_quality, replay_load,
        replay_trace, verdict,
    },
    plan::{Plan, PlanInput, plan},
    profile::ConfigProfile,
    service::StepModel,
    sim::{SimOptions, simulate},
    workload::{Workload, WorkloadFile},
};

/// The workload of README's first command.
pub(crate) const EXAMPLE_WORKLOAD: &str = include_str!("../../../examples/pilot-workload.toml");

/// The example workload, validated.
pub(crate) fn example_workload() -> Workload {
    WorkloadFile::from_toml_str(EXAMPLE_WORKLOAD)
        .and_then(|file| file.into_workload(None))
        .expect("the example workload is valid")
}

/// The example workload's `[pilot]` settings.
pub(crate) fn example_pilot_spec() -> PilotSpec {
    WorkloadFile::from_toml_str(EXAMPLE_WORKLOAD)
        .expect("the example workload parses")
        .pilot
        .expect("the example workload has a [pilot] table")
}

/// The example workload planned over the store's profiles and recorded, as the pilot and
/// `strata plan` make it: the workload, the profiles, the plan and its id in the store.
#[allow(dead_code)]
pub(crate) async fn record_example_plan(
    store: &dyn Store,
) -> (Workload, Vec<ConfigProfile>, Plan, PlanId) {
    let workload = example_workload();
    let profiles = planning::profiles_from_store(store, None)
        .await
        .expect("profiles from the store");
    let input =
        PlanInput::new(workload.clone(), Catalog::builtin(), profiles.clone()).expect("plan input");
    let plan = plan(&input).expect("a plan of the example workload");
    let (_, row) = planning::record_plan(store, &workload, &plan)
        .await
        .expect("the plan is recorded");
    (workload, profiles, plan, row.id)
}

/// A p99 comparison of `requests` replayed requests, observed against predicted (seconds).
fn comparison(
    requests: usize,
    ttft: (f64, f64),
    e2e: (f64, f64),
    band: Option<Band>,
) -> Comparison {
    let error = |(observed, predicted): (f64, f64)| Some((predicted - observed) / observed);
    Comparison {
        requests,
        observed_ttft_p99_s: ttft.0,
        predicted_ttft_p99_s: ttft.1,
        predicted_ttft_p99_band_s: None,
        observed_e2e_p99_s: e2e.0,
        predicted_e2e_p99_s: e2e.1,
        predicted_e2e_p99_band_s: band,
        e2e_p99_error: error(e2e),
        ttft_p99_error: error(ttft),
    }
}

/// The report `strata pilot` writes for `plan`, made with its own types: the planner's quality gates
/// (q8_0 loses one of the 24 tasks f32 answers: not enough to tell; q4_0's perplexity fails), its
/// simulations and verdict, and a replay with a calibration around it.
#[allow(dead_code)]
pub(crate) fn pilot_report(
    workload: &Workload,
    profiles: &[ConfigProfile],
    plan: &Plan,
    plan_id: PlanId,
) -> PilotReport {
    let spec = example_pilot_spec();
    let quality = |weights: &str, perplexity: f64, top1: f64, tasks: Option<usize>| WeightQuality {
        weights: weights.to_owned(),
        reference_weights: "f32".to_owned(),
        perplexity,
        reference_perplexity: 12.0,
        top1_agreement: top1,
        task_pass_rate: tasks.map(|t| t as f64 / 24.0),
        reference_task_pass_rate: tasks.map(|_| 22.0 / 24.0),
        tasks: tasks.map(|t| {
            PairedTasks::new(
                (0..24).map(|i| i < t).collect(),
                (0..24).map(|i| i < 22).collect(),
            )
        }),
    };
    let gates = vec![
        gate_quality(&quality("q8_0", 12.05, 0.97, Some(21)), &spec.quality),
        gate_quality(&quality("q4_0", 14.5, 0.81, None), &spec.quality),
    ];
    let planned = simulate(plan, workload, profiles, spec.seed, &SimOptions::default())
        .expect("the plan simulates");
    let double = simulate(
        plan,
        workload,
        profiles,
        spec.seed,
        &SimOptions {
            traffic_scale: 2.0,
            ..SimOptions::default()
        },
    )
    .expect("the plan simulates at twice the traffic");
    let decision = verdict(&VerdictInput {
        plan,
        at_planned: &planned,
        at_double: &double,
        gates: &gates,
        spec: &spec,
        replay: &[],
    });
    let step_model = StepModel {
        decode_s_by_batch: vec![(1.0, 0.02), (8.0, 0.05)],
        prompt_token_s: 0.0004,
        prompt_step_s: 0.003,
        prompt_step_decode_s: None,
        steps: 900,
        step_gap_s: 0.0021,
        request_overhead_s: 0.034,
        drain_hold: 0.0,
    };
    let sample = |when, requests| CalibrationSample {
        when,
        duration_s: 40.0,
        requests,
        decode_over_profiled: Some(1.07),
        prompt_over_profiled: Some(1.18),
        step_gap_s: Some(0.0021),
        observed_ttft_p50_s: Some(0.31),
        predicted_ttft_p50_s: Some(0.276),
        client_ttft_mean_s: Some(0.33),
        engine_ttft_mean_s: Some(0.296),
    };
    let replay = ReplayReport {
        load: replay_load(plan, false),
        held_capacity: None,
        duration_s: 60.0,
        requests: 91,
        errors: 0,
        config: "q8_0 t8 b8 kv128 numa=none".to_owned(),
        with_gpu: false,
        host_pace: Some(HostPace {
            shape: "pilot-mix".to_owned(),
            profiled_output_tokens_per_s: 61.6,
            before_replay_output_tokens_per_s: 55.8,
            after_replay_output_tokens_per_s: 61.4,
            replay_over_profiled: 0.951,
        }),
        all: comparison(
            91,
            (0.95, 0.9),
            (3.3, 3.0),
            Some(Band {
                low: 2.8,
                high: 3.2,
            }),
        ),
        classes: vec![
            ClassComparison {
                class: "chat".to_owned(),
                p99: comparison(80, (0.91, 0.84), (3.1, 2.85), None),
                gpu_requests: 0,
                observed_attainment: 1.0,
                predicted_attainment: 1.0,
            },
            ClassComparison {
                class: "extract".to_owned(),
                p99: comparison(11, (0.5, 0.5), (1.2, 1.1), None),
                gpu_requests: 0,
                observed_attainment: 1.0,
                predicted_attainment: 1.0,
            },
        ],
        worst_e2e_p99_error: Some(0.083),
        observed_cost_usd: 0.0066,
        predicted_cost_usd: 0.0066,
        step_model: None,
        all_with_replay_steps: None,
        calibration: Some(Calibration {
            duration_s: 80.0,
            requests: 84,
            samples: vec![
                sample(SampleTime::BeforeReplay, 42),
                sample(SampleTime::AfterReplay, 42),
            ],
            decode_over_profiled: Some(1.07),
            prompt_over_profiled: Some(1.18),
            block_s: 10.0,
            block_decode_over_profiled: vec![1.05, 1.08, 1.09],
            pace_spread: Some(0.024),
            step_gaps: 3120,
            step_gap_s: 0.0021,
            request_overhead_s: 0.034,
            step_model,
        }),
        pace_spread: Some(PaceSpread {
            sigma: 0.024,
            runs: 15,
            block_s: 10.0,
        }),
        all_as_profiled: None,
        gateway_predictions: None,
        host_load: Some(HostLoad {
            window_s: 60.0,
            cores: 8,
            pilot_cores: 3.1,
            other_cores: 0.62,
            shared_above_cores: 0.25,
            shared: true,
        }),
    };
    let now = Utc::now();
    PilotReport::new(ReportInputs {
        workload: workload.name.clone(),
        started_at: now - Duration::minutes(12),
        finished_at: now - Duration::minutes(1),
        decision,
        reproduce: json!({"seed": spec.seed, "engine_version": "0.1.0", "hardware": {"fingerprint": "abc123"}}),
        quality: gates,
        configs: Vec::new(),
        plan: Some(plan_summary(plan, plan_id.0)),
        simulation: SimulationPair { planned, double },
        replay: Some(replay),
    })
}

/// The report `strata pilot` builds from a replay, made by its own constructors: the example
/// workload's busiest hour sampled at the plan's load, each request answered at a pace that grows with
/// its lengths, set against the simulator's prediction of the same requests over a spread of paces.
#[allow(dead_code)]
pub(crate) fn replayed_pilot_report(
    workload: &Workload,
    profiles: &[ConfigProfile],
    plan: &Plan,
    plan_id: PlanId,
) -> PilotReport {
    let spec = example_pilot_spec();
    let mut report = pilot_report(workload, profiles, plan, plan_id);
    let load = replay_load(plan, false);
    let trace = replay_trace(workload, &load, spec.replay_s, spec.seed);
    let records: Vec<ReplayRecord> = trace
        .iter()
        .map(|r| {
            let ttft_s = 0.05 + 0.0004 * f64::from(r.prompt_tokens);
            ReplayRecord {
                class: workload.classes[r.class].name.clone(),
                record: RequestRecord {
                    arrival_s: r.t_s,
                    ttft_s,
                    itl_s: Vec::new(),
                    e2e_s: ttft_s + 0.03 * f64::from(r.output_tokens),
                    prompt_tokens: r.prompt_tokens as usize,
                    output_tokens: r.output_tokens as usize,
                    error: None,
                    route: Some("pool=cpu-pilot endpoint=cpu-0".to_owned()),
                },
            }
        })
        .collect();
    let spread = PaceSpread {
        sigma: 0.03,
        runs: 5,
        block_s: 10.0,
    };
    let predict = |steps: Option<&StepModel>, spread: PaceSpread| {
        let case = ReplayCase {
            plan,
            workload,
            profiles,
            trace: &trace,
            with_gpu: false,
            seed: spec.seed,
        };
        predict_replay_over_paces(case, steps, spread).expect("the replay is predicted")
    };
    let replay_steps = profiles
        .iter()
        .find(|p| p.id == plan.chosen.config)
        .and_then(|p| p.step_model.as_ref())
        .map(|m| m.scaled(1.04, 1.1));
    let predictions = ReplayPredictions {
        calibrated: predict(None, spread),
        spread: Some(spread),
        on_replay_steps: replay_steps
            .as_ref()
            .map(|steps| predict(Some(steps), PaceSpread::NONE)),
        as_profiled: Some(predict(None, spread)),
    };
    let replay = ReplayReport::new(ReplayInputs {
        setup: ReplaySetup {
            workload,
            gpu_fallback: &plan.gpu_fallback,
            load,
            held_capacity: None,
            trace: &trace,
            duration_s: spec.replay_s,
            config: plan.chosen.config.clone(),
            with_gpu: false,
        },
        host_hourly_usd: plan.chosen.hourly_cost,
        records: &records,
        host_pace: None,
        step_model: replay_steps,
        calibration: None,
        predictions,
        gateway_predictions: None,
        host_load: Some(HostLoad {
            window_s: spec.replay_s,
            cores: 4,
            pilot_cores: 2.2,
            other_cores: 0.1,
            shared_above_cores: 0.25,
            shared: false,
        }),
    });
    report.replay = Some(replay);
    report
}

/// A capacity curve point at `rate` requests/s.
pub(crate) fn load_point(rate: f64, e2e_p99_ms: f64, output_tokens_per_s: f64) -> StoredLoadPoint {
    StoredLoadPoint {
        rate_rps: rate,
        ttft_p99_ms: e2e_p99_ms / 6.0,
        tpot_p99_ms: 30.0,
        e2e_p99_ms,
        output_tokens_per_s,
        total_tokens_per_s: output_tokens_per_s * 3.0,
        ttft_p50_ms: Some(e2e_p99_ms / 12.0),
        tpot_p50_ms: Some(20.0),
    }
}

/// Ids the tests look up.
#[allow(dead_code)]
pub(crate) struct Seeded {
    /// The q8_0 config's latest run.
    pub(crate) q8_run: ProfileRunId,
    /// The GPU endpoint's run.
    pub(crate) gpu_run: ProfileRunId,
    /// The host.
    pub(crate) hardware: HardwareId,
}

/// A host fingerprint.
pub(crate) fn hardware(fingerprint: &str) -> NewHardware {
    NewHardware {
        fingerprint_hash: fingerprint.to_owned(),
        cpu_model: "Intel Xeon Platinum 8581C".to_owned(),
        cores: 8,
        threads: 16,
        isa_flags: vec!["avx2".to_owned(), "avx512_vnni".to_owned()],
        l1d_cache_bytes: Some(48 << 10),
        l2_cache_bytes: Some(2 << 20),
        l3_cache_bytes: Some(260 << 20),
        numa_nodes: 1,
        memory_bytes: 32 << 30,
        bandwidth_gb_per_s: Some(61.5),
        peak_int8_gops: Some(2400.0),
        peak_f32_gops: Some(600.0),
    }
}

/// A run whose latencies scale with `slow` and whose throughput is `tokens_per_s`.
pub(crate) fn run(
    config_id: ConfigId,
    hardware_id: HardwareId,
    minutes_ago: i64,
    slow: f64,
    tokens_per_s: f64,
    tier: &str,
) -> NewProfileRun {
    let started_at = Utc::now() - Duration::minutes(minutes_ago);
    NewProfileRun {
        config_id,
        hardware_id,
        started_at,
        finished_at: started_at + Duration::seconds(60),
        workload_shape: profile::shape_json(
            &NamedShape {
                name: "poisson-2".to_owned(),
                prompt_tokens: Lengths::Fixed(256),
                output_tokens: Lengths::Fixed(128),
                arrival: Arrival::Poisson { rate: 2.0 },
                requests: 120,
                duration_s: None,
                warmup: 2,
            },
            &Sla::default(),
        ),
        request_count: 120,
        error_count: 0,
        ttft_p50_ms: 90.0 * slow,
        ttft_p90_ms: 150.0 * slow,
        ttft_p95_ms: 180.0 * slow,
        ttft_p99_ms: 260.0 * slow,
        tpot_p50_ms: 20.0 * slow,
        tpot_p90_ms: 24.0 * slow,
        tpot_p95_ms: 26.0 * slow,
        tpot_p99_ms: 31.0 * slow,
        itl_p50_ms: 19.0 * slow,
        itl_p90_ms: 25.0 * slow,
        itl_p95_ms: 28.0 * slow,
        itl_p99_ms: 40.0 * slow,
        e2e_p50_ms: 2600.0 * slow,
        e2e_p90_ms: 3300.0 * slow,
        e2e_p95_ms: 3600.0 * slow,
        e2e_p99_ms: 4200.0 * slow,
        output_tokens_per_s: tokens_per_s,
        total_tokens_per_s: tokens_per_s * 3.0,
        requests_per_s: tokens_per_s / 128.0,
        goodput_requests_per_s: tokens_per_s / 130.0,
        sla_attainment: 0.97,
        peak_rss_bytes: 400 << 20,
        cpu_utilization: 0.9,
        kernel_tier: tier.to_owned(),
        placement: "node0:cores0-7".to_owned(),
        engine_version: "0.1.0".to_owned(),
    }
}

/// Seeds the demo data.
#[allow(dead_code)]
pub(crate) async fn demo(store: &dyn Store) -> Seeded {
    let host = store.insert_hardware(&hardware("fp-demo")).await.unwrap();
    let model = store
        .insert_model(&NewModel {
            name: "smollm2-135m-instruct".to_owned(),
            path: "smollm2.gguf".to_owned(),
            format: "gguf".to_owned(),
            sha256: "aa11".to_owned(),
            size_bytes: 94 << 20,
            parameters: Some(135_000_000),
            synthetic: false,
        })
        .await
        .unwrap();
    let config = |weight_type: &str, threads: i64, numa: &str| NewConfig {
        model_id: model.id,
        weight_type: weight_type.to_owned(),
        threads,
        max_batch: 8,
        numa_policy: numa.to_owned(),
        kv_memory_mib: 512,
    };
    let f32 = store
        .insert_config(&config("f32", 8, "none"))
        .await
        .unwrap();
    let q8 = store
        .insert_config(&config("q8_0", 8, "none"))
        .await
        .unwrap();
    let q4 = store
        .insert_config(&config("q4_1", 4, "interleave"))
        .await
        .unwrap();
    let gpu = store
        .insert_config(&config("f16", 1, "none"))
        .await
        .unwrap();

    store
        .insert_profile_run(&run(q8.id, host.id, 300, 1.2, 250.0, "avx512_vnni"))
        .await
        .unwrap();
    let q8_run = store
        .insert_profile_run(&run(q8.id, host.id, 60, 1.0, 300.0, "avx512_vnni"))
        .await
        .unwrap();
    store
        .insert_profile_run(&run(f32.id, host.id, 50, 2.0, 120.0, "avx512_vnni"))
        .await
        .unwrap();
    store
        .insert_profile_run(&run(q4.id, host.id, 40, 1.3, 380.0, "avx2"))
        .await
        .unwrap();
    let gpu_run = store
        .insert_profile_run(&run(gpu.id, host.id, 30, 0.2, 2500.0, "cuda-l4"))
        .await
        .unwrap();

    store
        .insert_capacity_result(&NewCapacityResult {
            config_id: q8.id,
            hardware_id: host.id,
            run_id: Some(q8_run.id),
            sla_ttft_p99_ms: 1000.0,
            sla_tpot_p99_ms: 50.0,
            max_requests_per_s: 2.25,
            load_curve: serde_json::to_value(vec![
                load_point(0.5, 3100.0, 64.0),
                load_point(1.0, 4200.0, 127.0),
                load_point(2.0, 7600.0, 250.0),
                load_point(3.0, 19000.0, 290.0),
            ])
            .expect("a curve"),
            step_model: None,
        })
        .await
        .unwrap();
    for (config_id, perplexity, top1) in [
        (f32.id, 12.5, None),
        (q8.id, 12.56, Some(0.985)),
        (q4.id, 13.4, Some(0.91)),
    ] {
        store
            .insert_quality_result(&NewQualityResult {
                config_id,
                text_id: "wiki-2k".to_owned(),
                perplexity,
                top1_agreement: top1,
            })
            .await
            .unwrap();
    }
    planning::record_builtin_prices(store).await.unwrap();
    let (example, profiles, plan, plan_id) = record_example_plan(store).await;
    let report = pilot_report(&example, &profiles, &plan, plan_id);
    let workload = store
        .find_workload_by_name(&plan.workload)
        .await
        .unwrap()
        .expect("the plan's workload");
    let endpoint = store
        .insert_endpoint(&NewEndpoint {
            base_url: "http://gpu-l4.internal:8000".to_owned(),
            model_name: "smollm2-135m-instruct".to_owned(),
        })
        .await
        .unwrap();
    let started_at = Utc::now() - Duration::minutes(20);
    store
        .insert_endpoint_run(&NewEndpointRun {
            endpoint_id: endpoint.id,
            started_at,
            finished_at: started_at + Duration::seconds(30),
            api: "chat".to_owned(),
            workload_shape: json!({"prompt_tokens": {"fixed": 128}, "duration_s": 30.0}),
            request_count: 240,
            error_count: 2,
            ttft_p50_ms: 41.0,
            ttft_p99_ms: 187.0,
            tpot_p50_ms: 6.5,
            tpot_p99_ms: 9.25,
            e2e_p50_ms: 880.0,
            e2e_p99_ms: 1320.0,
            output_tokens_per_s: 2410.5,
            requests_per_s: 8.0,
            goodput_requests_per_s: 7.9,
            sla_attainment: 0.9876,
            report: json!({"requests": 240}),
            client_version: "0.1.0".to_owned(),
        })
        .await
        .unwrap();
    // A failed pilot, a pending one and a finished one, as `strata pilot` records them.
    let failed = store.insert_pilot(workload.id).await.unwrap();
    store
        .update_pilot(
            failed.id,
            &PilotUpdate {
                status: PilotStatus::Failed,
                verdict: None,
                report: Some(
                    serde_json::to_value(strata_controller::pilot::FailedReport {
                        schema_version: REPORT_SCHEMA_VERSION,
                        error: "profiling q8_0 t8 b8: the engine exited".to_owned(),
                    })
                    .unwrap(),
                ),
            },
        )
        .await
        .unwrap();
    store.insert_pilot(workload.id).await.unwrap();
    let pilot = store.insert_pilot(workload.id).await.unwrap();
    store
        .update_pilot(
            pilot.id,
            &PilotUpdate {
                status: PilotStatus::Done,
                verdict: Some(report.summary.clone()),
                report: Some(serde_json::to_value(&report).unwrap()),
            },
        )
        .await
        .unwrap();

    let now = Utc::now();
    for i in 0..48i64 {
        let (pool, class, reason, latency) = match i % 4 {
            0 => ("cpu-a", "chat", "cpu_meets_sla", 800.0 + i as f64),
            1 => (
                "cpu-a",
                "extract",
                "cpu_meets_sla",
                2500.0 + 30.0 * i as f64,
            ),
            2 => ("gpu-l4", "chat", "cpu_would_miss_sla", 300.0),
            _ => ("gpu-l4", "extract", "breaker_open", 400.0),
        };
        store
            .insert_gateway_decision(&NewGatewayDecision {
                decided_at: now - Duration::seconds(10 * i),
                request_id: format!("req-{i}"),
                sla_class: class.to_owned(),
                pool: pool.to_owned(),
                endpoint: if pool == "cpu-a" {
                    "http://10.0.0.5:8000"
                } else {
                    "https://gpu.example/v1"
                }
                .to_owned(),
                reason: reason.to_owned(),
                predicted_latency_ms: Some(latency * 0.9),
                observed_latency_ms: Some(latency),
                prompt_tokens: 300,
                output_tokens: 120,
                cost_usd: if pool == "cpu-a" { 0.0004 } else { 0.002 },
                // The last 8 are a pilot's replay.
                source: if i < 40 {
                    LIVE_TRAFFIC.to_owned()
                } else {
                    pilot_replay_source(&plan.workload)
                },
                predicted_ttft_ms: Some(latency * 0.2),
                observed_ttft_ms: Some(latency * 0.21),
                raw_predicted_ttft_ms: Some(latency * 0.15),
                raw_predicted_latency_ms: Some(latency * 0.8),
                other_pools: None,
            })
            .await
            .unwrap();
    }
    for pool in ["cpu-a", "gpu-l4"] {
        store
            .insert_ledger_entry(&NewLedgerEntry {
                recorded_at: now - Duration::seconds(5),
                pool: pool.to_owned(),
                amount_usd: 2.25,
                tokens: 500_000,
                note: None,
            })
            .await
            .unwrap();
    }
    Seeded {
        q8_run: q8_run.id,
        gpu_run: gpu_run.id,
        hardware: host.id,
    }
}

/// Seeds `runs` profiling runs over `runs / 25` configs (25 runs each) of two models on one host, for
/// the bench.
#[allow(dead_code)]
pub(crate) async fn many_runs(store: &dyn Store, runs: usize) {
    let host = store.insert_hardware(&hardware("fp-bench")).await.unwrap();
    let mut configs = Vec::new();
    for (m, name) in ["model-a", "model-b"].iter().enumerate() {
        let model = store
            .insert_model(&NewModel {
                name: (*name).to_owned(),
                path: format!("{name}.gguf"),
                format: "gguf".to_owned(),
                sha256: format!("bench{m}"),
                size_bytes: 1 << 30,
                parameters: None,
                synthetic: false,
            })
            .await
            .unwrap();
        for weights in ["f32", "f16", "q8_0", "q4_0", "q4_1"] {
            for threads in [1, 2, 4, 8, 16] {
                for batch in [1, 2, 4, 8, 16, 32, 64, 128] {
                    configs.push(NewConfig {
                        model_id: model.id,
                        weight_type: weights.to_owned(),
                        threads,
                        max_batch: batch,
                        numa_policy: "none".to_owned(),
                        kv_memory_mib: 512,
                    });
                }
            }
        }
    }
    let wanted = runs.div_ceil(25).min(configs.len());
    let mut ids = Vec::new();
    for config in &configs[..wanted] {
        ids.push(store.insert_config(config).await.unwrap().id);
    }
    planning::record_builtin_prices(store).await.unwrap();
    for i in 0..runs {
        let config = ids[i % ids.len()];
        let slow = 0.5 + (i % 97) as f64 / 40.0;
        store
            .insert_profile_run(&run(
                config,
                host.id,
                (runs - i) as i64,
                slow,
                50.0 + (i % 89) as f64 * 5.0,
                "avx2",
            ))
            .await
            .unwrap();
    }
}
