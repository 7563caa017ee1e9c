use chrono::{TimeZone, Utc};
use serde_json::json;

use strata_planner::{catalog::Catalog, profile::Provenance, service::StepModel};

use super::*;
use crate::{
    loadgen::{Arrival, Lengths},
    store::{
        self, ConfigRow, HardwareId, HardwareRow, ModelRow, NewConfig, NewHardware, NewModel,
        NewProfileRun, ProfileRunId, Store,
    },
};

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
        prompt_step_decode_s: None,
        steps: 400,
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        drain_hold: 0.0,
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
        include_str!("../../../planner/examples/workload.toml"),
        None,
        None,
        include_str!("../../../planner/examples/profiles.json"),
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
