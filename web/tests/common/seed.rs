//! Demo data for the dashboard's tests and bench, written by the producers' own types: configs with
//! runs, capacity results (profiling's `StoredLoadPoint`s) and quality results, the builtin catalog's
//! prices, the example pilot workload with the plan `plan()` makes of the stored profiles, pilots, and
//! gateway traffic (live and a pilot's replay) from the last few minutes.

use chrono::{Duration, Utc};
use serde_json::json;
use strata_controller::{
    planning::{self, StoredLoadPoint},
    store::*,
};
use strata_planner::{
    catalog::Catalog,
    plan::{Plan, PlanInput, plan},
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

/// The plan of the example workload over the store's profiles, recorded, as the pilot and
/// `strata plan` make it.
#[allow(dead_code)]
pub(crate) async fn record_example_plan(store: &dyn Store) -> Plan {
    let workload = example_workload();
    let profiles = planning::profiles_from_store(store, None)
        .await
        .expect("profiles from the store");
    let input = PlanInput::new(workload.clone(), Catalog::builtin(), profiles).expect("plan input");
    let plan = plan(&input).expect("a plan of the example workload");
    planning::record_plan(store, &workload, &plan)
        .await
        .expect("the plan is recorded");
    plan
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
        workload_shape: json!({"arrivals": "poisson", "rate": 2.0, "prompt_tokens": 256, "output_tokens": 128}),
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
    let plan = record_example_plan(store).await;
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
    let pilot = store.insert_pilot(workload.id).await.unwrap();
    store
        .update_pilot(
            pilot.id,
            &PilotUpdate {
                status: PilotStatus::Done,
                verdict: Some("migrate chat and extract to CPU".to_owned()),
                report: Some(json!({
                    "savings_usd_per_month": 520.0,
                    "risk": "extract p99 within 10% of its SLA at 12:00",
                    "evidence": [{"config": "q8_0 t8", "p99_ms": 900.0, "sla_ms": 1000.0}]
                })),
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
                verdict: Some("migrate chat; keep extract on GPU".to_owned()),
                report: Some(json!({
                    "schema_version": 1,
                    "workload": "support",
                    "verdict": "partial",
                    "exit_code": 3,
                    "summary": "migrate chat; keep extract on GPU",
                    "monthly_savings_usd": 410.5,
                    "decision": {
                        "kind": "partial",
                        "summary": "migrate chat; keep extract on GPU",
                        "monthly_cost_usd": 300.0,
                        "monthly_baseline_usd": 710.5,
                        "monthly_savings_usd": 410.5,
                        "reasons": [],
                        "classes": [
                            {"class": "chat", "migrate": true, "cpu_share": 1.0, "attainment": 0.998,
                             "attainment_2x": 0.97, "gpu_share_2x": 0.2,
                             "reasons": ["risk: at twice the traffic only 97.0% meet the SLA"]},
                            {"class": "extract", "migrate": false, "cpu_share": 0.1, "attainment": 0.999,
                             "attainment_2x": 0.99, "gpu_share_2x": 0.95,
                             "reasons": ["the plan serves only 10% of it on CPU (50% needed)"]}
                        ]
                    },
                    "quality": [
                        {"weights": "q8_0", "passed": true, "perplexity_increase": 0.004,
                         "measured": {"weights": "q8_0", "reference_weights": "f32", "perplexity": 12.05,
                                      "reference_perplexity": 12.0, "top1_agreement": 0.97,
                                      "task_pass_rate": 1.0, "reference_task_pass_rate": 1.0},
                         "reasons": []},
                        {"weights": "q4_0", "passed": false, "perplexity_increase": 0.21,
                         "measured": {"weights": "q4_0", "reference_weights": "f32", "perplexity": 14.5,
                                      "reference_perplexity": 12.0, "top1_agreement": 0.81},
                         "reasons": ["perplexity 14.500 is 20.8% above f32's 12.000 (at most 10.0% allowed)"]}
                    ],
                    "plan": {"id": 1, "config": "m-q8_0-t8-b8-hw1", "instance_type": "c4-standard-8",
                             "region": "us-central1", "peak_cpu_instances": 3, "gpu_share": 0.12,
                             "cost_per_day_usd": 9.86},
                    "replay": {
                        "duration_s": 60.0, "requests": 91, "errors": 0, "config": "q8_0 t8 b8 kv128 numa=none",
                        "with_gpu": false, "load": {"hour": 11, "rate_rps": 1.52},
                        "worst_e2e_p99_error": 0.083,
                        "host_pace": {"shape": "pilot-mix", "profiled_output_tokens_per_s": 61.6,
                                      "before_replay_output_tokens_per_s": 55.8,
                                      "after_replay_output_tokens_per_s": 61.4,
                                      "replay_over_profiled": 0.951},
                        "calibration": {"duration_s": 80.0, "requests": 84,
                                        "samples": [{"when": "before_replay", "duration_s": 40.0, "requests": 42},
                                                    {"when": "after_replay", "duration_s": 40.0, "requests": 42}],
                                        "decode_over_profiled": 1.07, "prompt_over_profiled": 1.18,
                                        "block_s": 10.0, "block_decode_over_profiled": [1.05, 1.08, 1.09],
                                        "pace_spread": 0.024},
                        "pace_spread": {"sigma": 0.024, "runs": 15, "block_s": 10.0},
                        "all": {"requests": 91, "observed_e2e_p99_s": 3.3, "predicted_e2e_p99_s": 3.0,
                                "predicted_e2e_p99_band_s": {"low": 2.8, "high": 3.2},
                                "e2e_p99_error": -0.0909, "observed_ttft_p99_s": 0.95,
                                "predicted_ttft_p99_s": 0.9, "ttft_p99_error": -0.0526}, "observed_cost_usd": 0.0066, "predicted_cost_usd": 0.0066,
                        "classes": [
                            {"class": "chat", "requests": 80, "gpu_requests": 0, "observed_ttft_p99_s": 0.91,
                             "predicted_ttft_p99_s": 0.84, "observed_e2e_p99_s": 3.1, "predicted_e2e_p99_s": 2.85,
                             "e2e_p99_error": -0.0806, "ttft_p99_error": -0.077, "observed_attainment": 1.0,
                             "predicted_attainment": 1.0},
                            {"class": "extract", "requests": 11, "gpu_requests": 0}
                        ]
                    },
                    "reproduce": {"seed": 1, "engine_version": "0.1.0", "hardware": {"fingerprint": "abc123"}}
                })),
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
