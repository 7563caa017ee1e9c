//! The store's contract, written once and run on both backends.
//!
//! `store_tests!` stamps every test twice, as `sqlite::<name>` and `postgres::<name>`. Each run gets a
//! fresh database with the migrations applied: a file in a temporary folder for SQLite; for PostgreSQL a
//! `strata_test_*` database created on the server at `STRATA_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and dropped afterwards, also when the test fails.
//! When that server cannot be reached the PostgreSQL tests fail under CI (`CI=true`) and are skipped,
//! loudly, otherwise (`store::testing::with_postgres`).

use std::{collections::HashSet, sync::Arc};

use chrono::{DateTime, Duration, NaiveDate, SubsecRound, TimeZone, Utc};
use serde_json::json;
use strata_controller::store::{self, constraint, *};

mod harness {
    use std::{future::Future, sync::Arc};

    use strata_controller::store::{self, Store, testing};

    /// Runs `test` against a fresh SQLite file.
    pub(crate) async fn with_sqlite<F, Fut>(test: F)
    where
        F: FnOnce(Arc<dyn Store>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let dir = tempfile::tempdir().expect("temporary folder");
        let url = store::sqlite_url(&dir.path().join("strata.db"));
        let outcome = tokio::spawn(run(url, test)).await;
        if let Err(failure) = outcome {
            std::panic::resume_unwind(failure.into_panic());
        }
    }

    /// Runs `test` against a fresh PostgreSQL database, dropped afterwards whatever the outcome.
    pub(crate) async fn with_postgres<F, Fut>(name: &str, test: F)
    where
        F: FnOnce(Arc<dyn Store>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        testing::with_postgres(name, |url| run(url, test)).await;
    }

    async fn run<F, Fut>(url: String, test: F)
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let store = store::open(&url).await.expect("open the store");
        test(Arc::clone(&store)).await;
        store.close().await;
    }
}

/// Stamps each named test for every backend.
macro_rules! store_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::harness::with_sqlite(super::$name).await;
                }
            )*
        }

        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::harness::with_postgres(stringify!($name), super::$name).await;
                }
            )*
        }
    };
}

store_tests!(
    hardware_round_trips,
    duplicate_hardware_conflicts,
    models_round_trip,
    duplicate_models_conflict_by_name_and_by_hash,
    configs_round_trip_and_are_found_by_settings,
    duplicate_configs_conflict,
    rows_must_refer_to_existing_rows,
    profile_runs_round_trip_newest_first_per_config,
    capacity_and_quality_results_round_trip,
    config_summaries_join_the_latest_results,
    config_summaries_filter_sort_and_limit,
    catalog_prices_round_trip_with_latest_per_instance,
    duplicate_catalog_prices_conflict,
    workloads_round_trip,
    latest_plan_is_per_workload,
    pilots_move_through_their_states,
    gateway_decisions_list_within_a_window,
    ledger_sums_a_day_window,
    missing_rows_are_not_found,
    profile_jobs_move_through_their_states,
    an_expired_lease_hands_the_job_to_another_worker,
    concurrent_claimers_never_share_a_job,
    endpoint_runs_round_trip_newest_first_per_endpoint,
);

// Fixtures.

/// A time with sub-microsecond digits, which the store cuts to microseconds.
fn at(day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, day, hour, minute, 0).unwrap()
        + Duration::nanoseconds(123_456_789)
}

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

fn new_hardware(fingerprint: &str) -> NewHardware {
    NewHardware {
        fingerprint_hash: fingerprint.to_owned(),
        cpu_model: "AMD EPYC 9654 96-Core Processor".to_owned(),
        cores: 96,
        threads: 192,
        isa_flags: vec![
            "avx2".to_owned(),
            "avx512f".to_owned(),
            "avx512_vnni".to_owned(),
        ],
        l1d_cache_bytes: Some(32 << 10),
        l2_cache_bytes: Some(1 << 20),
        l3_cache_bytes: None,
        numa_nodes: 2,
        memory_bytes: 768 << 30,
        bandwidth_gb_per_s: Some(412.5),
        peak_int8_gops: Some(18_000.25),
        peak_f32_gops: None,
    }
}

fn new_model(name: &str, sha256: &str) -> NewModel {
    NewModel {
        name: name.to_owned(),
        path: format!("models/{name}.gguf"),
        format: "gguf".to_owned(),
        sha256: sha256.to_owned(),
        size_bytes: 270_000_000,
        parameters: Some(135_000_000),
        synthetic: false,
    }
}

fn new_config(model_id: ModelId, weight_type: &str, threads: i64) -> NewConfig {
    NewConfig {
        model_id,
        weight_type: weight_type.to_owned(),
        threads,
        max_batch: 8,
        numa_policy: "interleave".to_owned(),
        kv_memory_mib: 2048,
    }
}

fn new_run(
    config_id: ConfigId,
    hardware_id: HardwareId,
    started_at: DateTime<Utc>,
) -> NewProfileRun {
    NewProfileRun {
        config_id,
        hardware_id,
        started_at,
        finished_at: started_at + Duration::seconds(90),
        workload_shape: json!({"arrivals": "poisson", "rate": 4.0, "prompt_tokens": [128, 512]}),
        request_count: 400,
        error_count: 2,
        ttft_p50_ms: 81.5,
        ttft_p90_ms: 140.0,
        ttft_p95_ms: 171.25,
        ttft_p99_ms: 260.0,
        tpot_p50_ms: 21.0,
        tpot_p90_ms: 24.5,
        tpot_p95_ms: 26.0,
        tpot_p99_ms: 31.75,
        itl_p50_ms: 20.5,
        itl_p90_ms: 25.0,
        itl_p95_ms: 27.5,
        itl_p99_ms: 40.0,
        e2e_p50_ms: 2_900.0,
        e2e_p90_ms: 4_100.0,
        e2e_p95_ms: 4_600.0,
        e2e_p99_ms: 5_900.0,
        output_tokens_per_s: 412.0,
        total_tokens_per_s: 1_530.5,
        requests_per_s: 3.9,
        goodput_requests_per_s: 3.7,
        sla_attainment: 0.95,
        peak_rss_bytes: 1_400_000_000,
        cpu_utilization: 0.87,
        kernel_tier: "avx512_vnni".to_owned(),
        placement: "node0:cores0-47".to_owned(),
        engine_version: "0.1.0".to_owned(),
    }
}

/// A model, one config of it, and a host.
async fn seed(store: &dyn Store) -> (ModelRow, ConfigRow, HardwareRow) {
    let model = store
        .insert_model(&new_model("smollm2-135m", "ab12"))
        .await
        .unwrap();
    let config = store
        .insert_config(&new_config(model.id, "q8_0", 8))
        .await
        .unwrap();
    let hardware = store.insert_hardware(&new_hardware("fp-1")).await.unwrap();
    (model, config, hardware)
}

#[track_caller]
fn assert_conflict<T: std::fmt::Debug>(result: store::Result<T>, expected: &str) {
    match result {
        Err(StoreError::Conflict { constraint }) => assert_eq!(constraint, expected),
        other => panic!("expected a conflict on {expected}, got {other:?}"),
    }
}

#[track_caller]
fn assert_not_found<T: std::fmt::Debug>(result: store::Result<T>, expected_entity: &str) {
    match result {
        Err(StoreError::NotFound { entity, .. }) => assert_eq!(entity, expected_entity),
        other => panic!("expected {expected_entity} not found, got {other:?}"),
    }
}

// The contract.

async fn hardware_round_trips(store: Arc<dyn Store>) {
    let new = new_hardware("fp-1");
    let row = store.insert_hardware(&new).await.unwrap();
    assert_eq!(
        (
            row.fingerprint_hash.as_str(),
            row.cpu_model.as_str(),
            row.cores,
            row.threads
        ),
        (
            new.fingerprint_hash.as_str(),
            new.cpu_model.as_str(),
            new.cores,
            new.threads
        )
    );
    assert_eq!(row.isa_flags, new.isa_flags);
    assert_eq!(
        (row.l1d_cache_bytes, row.l2_cache_bytes, row.l3_cache_bytes),
        (Some(32 << 10), Some(1 << 20), None)
    );
    assert_eq!((row.numa_nodes, row.memory_bytes), (2, 768 << 30));
    assert_eq!(
        (
            row.bandwidth_gb_per_s,
            row.peak_int8_gops,
            row.peak_f32_gops
        ),
        (Some(412.5), Some(18_000.25), None)
    );
    assert!((Utc::now() - row.created_at).abs() < Duration::minutes(1));

    assert_eq!(store.get_hardware(row.id).await.unwrap(), row);
    assert_eq!(
        store.find_hardware_by_fingerprint("fp-1").await.unwrap(),
        Some(row.clone())
    );
    assert_eq!(
        store.find_hardware_by_fingerprint("fp-2").await.unwrap(),
        None
    );
    let other = store.insert_hardware(&new_hardware("fp-2")).await.unwrap();
    assert_eq!(store.list_hardware().await.unwrap(), vec![row, other]);
}

async fn duplicate_hardware_conflicts(store: Arc<dyn Store>) {
    store.insert_hardware(&new_hardware("fp-1")).await.unwrap();
    let err = store
        .insert_hardware(&new_hardware("fp-1"))
        .await
        .unwrap_err();
    assert!(
        err.is_conflict_on(constraint::HARDWARE_FINGERPRINT_HASH),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "already recorded (unique constraint hardware_fingerprint_hash_key)"
    );
}

async fn models_round_trip(store: Arc<dyn Store>) {
    let new = new_model("smollm2-135m", "ab12");
    let row = store.insert_model(&new).await.unwrap();
    assert_eq!(
        (
            &row.name,
            &row.path,
            &row.format,
            &row.sha256,
            row.size_bytes,
            row.parameters
        ),
        (
            &new.name,
            &new.path,
            &new.format,
            &new.sha256,
            new.size_bytes,
            new.parameters
        )
    );
    assert_eq!(store.get_model(row.id).await.unwrap(), row);
    assert_eq!(
        store.find_model_by_sha256("ab12").await.unwrap(),
        Some(row.clone())
    );
    assert_eq!(
        store.find_model_by_name("smollm2-135m").await.unwrap(),
        Some(row.clone())
    );
    assert_eq!(store.find_model_by_name("absent").await.unwrap(), None);

    let mut unsized_model = new_model("a-first-by-name", "cd34");
    unsized_model.parameters = None;
    unsized_model.synthetic = true;
    let first = store.insert_model(&unsized_model).await.unwrap();
    assert_eq!((first.parameters, first.synthetic), (None, true));
    assert!(!row.synthetic);
    assert_eq!(store.list_models().await.unwrap(), vec![first, row]);
}

async fn duplicate_models_conflict_by_name_and_by_hash(store: Arc<dyn Store>) {
    store
        .insert_model(&new_model("smollm2-135m", "ab12"))
        .await
        .unwrap();
    assert_conflict(
        store.insert_model(&new_model("smollm2-135m", "ffff")).await,
        constraint::MODELS_NAME,
    );
    assert_conflict(
        store.insert_model(&new_model("renamed", "ab12")).await,
        constraint::MODELS_SHA256,
    );
    assert_eq!(store.list_models().await.unwrap().len(), 1);
}

async fn configs_round_trip_and_are_found_by_settings(store: Arc<dyn Store>) {
    let model = store
        .insert_model(&new_model("smollm2-135m", "ab12"))
        .await
        .unwrap();
    let new = new_config(model.id, "q4_1", 4);
    let row = store.insert_config(&new).await.unwrap();
    assert_eq!(
        (
            row.model_id,
            &row.weight_type,
            row.threads,
            row.max_batch,
            &row.numa_policy,
            row.kv_memory_mib
        ),
        (
            new.model_id,
            &new.weight_type,
            new.threads,
            new.max_batch,
            &new.numa_policy,
            new.kv_memory_mib
        )
    );
    assert_eq!(store.get_config(row.id).await.unwrap(), row);
    assert_eq!(store.find_config(&new).await.unwrap(), Some(row.clone()));
    assert_eq!(
        store
            .find_config(&new_config(model.id, "q4_1", 8))
            .await
            .unwrap(),
        None
    );

    let other_model = store
        .insert_model(&new_model("other", "cd34"))
        .await
        .unwrap();
    let second = store
        .insert_config(&new_config(model.id, "f32", 4))
        .await
        .unwrap();
    store
        .insert_config(&new_config(other_model.id, "f32", 4))
        .await
        .unwrap();
    assert_eq!(
        store.list_configs_for_model(model.id).await.unwrap(),
        vec![row, second]
    );
}

async fn duplicate_configs_conflict(store: Arc<dyn Store>) {
    let model = store
        .insert_model(&new_model("smollm2-135m", "ab12"))
        .await
        .unwrap();
    store
        .insert_config(&new_config(model.id, "q8_0", 8))
        .await
        .unwrap();
    assert_conflict(
        store.insert_config(&new_config(model.id, "q8_0", 8)).await,
        constraint::CONFIGS_SETTINGS,
    );
    // Any one setting changed makes a new config.
    let mut other = new_config(model.id, "q8_0", 8);
    other.kv_memory_mib = 4096;
    store.insert_config(&other).await.unwrap();
}

async fn rows_must_refer_to_existing_rows(store: Arc<dyn Store>) {
    let result = store
        .insert_config(&new_config(ModelId(999), "q8_0", 8))
        .await;
    assert!(
        matches!(result, Err(StoreError::UnknownReference)),
        "{result:?}"
    );
    let (_, config, _) = seed(&*store).await;
    let result = store
        .insert_profile_run(&new_run(config.id, HardwareId(999), at(1, 10, 0)))
        .await;
    assert!(
        matches!(result, Err(StoreError::UnknownReference)),
        "{result:?}"
    );
}

async fn profile_runs_round_trip_newest_first_per_config(store: Arc<dyn Store>) {
    let (model, config, hardware) = seed(&*store).await;
    let other_config = store
        .insert_config(&new_config(model.id, "q4_0", 8))
        .await
        .unwrap();

    let new = new_run(config.id, hardware.id, at(1, 10, 0));
    let row = store.insert_profile_run(&new).await.unwrap();
    let expected = ProfileRunRow {
        id: row.id,
        config_id: new.config_id,
        hardware_id: new.hardware_id,
        started_at: micros(new.started_at),
        finished_at: micros(new.finished_at),
        workload_shape: new.workload_shape.clone(),
        request_count: new.request_count,
        error_count: new.error_count,
        ttft_p50_ms: new.ttft_p50_ms,
        ttft_p90_ms: new.ttft_p90_ms,
        ttft_p95_ms: new.ttft_p95_ms,
        ttft_p99_ms: new.ttft_p99_ms,
        tpot_p50_ms: new.tpot_p50_ms,
        tpot_p90_ms: new.tpot_p90_ms,
        tpot_p95_ms: new.tpot_p95_ms,
        tpot_p99_ms: new.tpot_p99_ms,
        itl_p50_ms: new.itl_p50_ms,
        itl_p90_ms: new.itl_p90_ms,
        itl_p95_ms: new.itl_p95_ms,
        itl_p99_ms: new.itl_p99_ms,
        e2e_p50_ms: new.e2e_p50_ms,
        e2e_p90_ms: new.e2e_p90_ms,
        e2e_p95_ms: new.e2e_p95_ms,
        e2e_p99_ms: new.e2e_p99_ms,
        output_tokens_per_s: new.output_tokens_per_s,
        total_tokens_per_s: new.total_tokens_per_s,
        requests_per_s: new.requests_per_s,
        goodput_requests_per_s: new.goodput_requests_per_s,
        sla_attainment: new.sla_attainment,
        peak_rss_bytes: new.peak_rss_bytes,
        cpu_utilization: new.cpu_utilization,
        kernel_tier: new.kernel_tier.clone(),
        placement: new.placement.clone(),
        engine_version: new.engine_version.clone(),
    };
    assert_eq!(row, expected);
    assert_eq!(store.get_profile_run(row.id).await.unwrap(), row);

    let later = store
        .insert_profile_run(&new_run(config.id, hardware.id, at(2, 9, 0)))
        .await
        .unwrap();
    let earlier = store
        .insert_profile_run(&new_run(config.id, hardware.id, at(1, 9, 59)))
        .await
        .unwrap();
    store
        .insert_profile_run(&new_run(other_config.id, hardware.id, at(3, 0, 0)))
        .await
        .unwrap();
    let ids: Vec<_> = store
        .list_profile_runs_for_config(config.id)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![later.id, row.id, earlier.id]);
}

/// The latest run per config and host, with the latest capacity and quality results, the reference
/// perplexity of the same model and text, and the run count.
async fn config_summaries_join_the_latest_results(store: Arc<dyn Store>) {
    let (model, config, hardware) = seed(&*store).await;
    assert!(
        store
            .list_config_summaries(&ConfigSummaryQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    let reference = store
        .insert_config(&new_config(model.id, "f32", 8))
        .await
        .unwrap();
    let other_host = store.insert_hardware(&new_hardware("fp-2")).await.unwrap();
    store
        .insert_profile_run(&new_run(config.id, hardware.id, at(1, 9, 0)))
        .await
        .unwrap();
    let mut latest = new_run(config.id, hardware.id, at(2, 9, 0));
    latest.output_tokens_per_s = 500.0;
    let latest = store.insert_profile_run(&latest).await.unwrap();
    let elsewhere = store
        .insert_profile_run(&new_run(config.id, other_host.id, at(1, 8, 0)))
        .await
        .unwrap();
    let reference_run = store
        .insert_profile_run(&new_run(reference.id, hardware.id, at(1, 7, 0)))
        .await
        .unwrap();
    for rate in [2.0, 3.5] {
        store
            .insert_capacity_result(&NewCapacityResult {
                config_id: config.id,
                hardware_id: hardware.id,
                run_id: Some(latest.id),
                sla_ttft_p99_ms: 500.0,
                sla_tpot_p99_ms: 50.0,
                max_requests_per_s: rate,
                load_curve: json!([]),
                step_model: None,
            })
            .await
            .unwrap();
    }
    for (config_id, perplexity, top1_agreement) in [
        (reference.id, 9.0, None),
        (config.id, 9.9, Some(0.9)),
        (config.id, 9.5, Some(0.93)),
    ] {
        store
            .insert_quality_result(&NewQualityResult {
                config_id,
                text_id: "wiki-1k".to_owned(),
                perplexity,
                top1_agreement,
            })
            .await
            .unwrap();
    }

    let rows = store
        .list_config_summaries(&ConfigSummaryQuery {
            sort: ConfigSort::StartedAt,
            descending: true,
            ..ConfigSummaryQuery::default()
        })
        .await
        .unwrap();
    let ids: Vec<_> = rows.iter().map(|r| r.run_id).collect();
    assert_eq!(ids, vec![latest.id, elsewhere.id, reference_run.id]);
    let top = &rows[0];
    assert_eq!(top.run_count, 2);
    assert_eq!(top.model_name, "smollm2-135m");
    assert_eq!(top.weight_type, "q8_0");
    assert_eq!(top.cpu_model, hardware.cpu_model);
    assert_eq!(top.started_at, micros(at(2, 9, 0)));
    assert_eq!(top.output_tokens_per_s, 500.0);
    assert_eq!(top.capacity_requests_per_s, Some(3.5));
    assert_eq!(top.capacity_sla_ttft_p99_ms, Some(500.0));
    assert_eq!(top.perplexity, Some(9.5));
    assert_eq!(top.top1_agreement, Some(0.93));
    assert_eq!(top.reference_perplexity, Some(9.0));
    assert_eq!(rows[1].run_count, 1);
    assert_eq!(rows[1].capacity_requests_per_s, None);
    assert_eq!(rows[2].top1_agreement, None);
    assert_eq!(rows[2].reference_perplexity, Some(9.0));
}

async fn config_summaries_filter_sort_and_limit(store: Arc<dyn Store>) {
    let (model, config, hardware) = seed(&*store).await;
    let other_model = store
        .insert_model(&new_model("qwen2-0.5b", "cd34"))
        .await
        .unwrap();
    let q4 = store
        .insert_config(&new_config(model.id, "q4_0", 4))
        .await
        .unwrap();
    let other = store
        .insert_config(&new_config(other_model.id, "q8_0", 16))
        .await
        .unwrap();
    let mut runs = Vec::new();
    for (config_id, tokens_per_s, ttft_p99_ms) in [
        (config.id, 300.0, 200.0),
        (q4.id, 450.0, 150.0),
        (other.id, 120.0, 900.0),
    ] {
        let mut run = new_run(config_id, hardware.id, at(1, 9, 0));
        run.output_tokens_per_s = tokens_per_s;
        run.ttft_p99_ms = ttft_p99_ms;
        runs.push(store.insert_profile_run(&run).await.unwrap().id);
    }
    let list = |query: ConfigSummaryQuery| {
        let store = Arc::clone(&store);
        async move {
            store
                .list_config_summaries(&query)
                .await
                .unwrap()
                .iter()
                .map(|r| r.run_id)
                .collect::<Vec<_>>()
        }
    };
    let by = |sort, descending| ConfigSummaryQuery {
        sort,
        descending,
        ..ConfigSummaryQuery::default()
    };
    assert_eq!(
        list(by(ConfigSort::OutputTokensPerS, true)).await,
        vec![runs[1], runs[0], runs[2]]
    );
    assert_eq!(
        list(by(ConfigSort::TtftP99, false)).await,
        vec![runs[1], runs[0], runs[2]]
    );
    assert_eq!(
        list(by(ConfigSort::Model, false)).await,
        vec![runs[2], runs[1], runs[0]]
    );
    assert_eq!(
        list(ConfigSummaryQuery {
            limit: Some(1),
            ..by(ConfigSort::TtftP99, true)
        })
        .await,
        vec![runs[2]]
    );
    assert_eq!(
        list(ConfigSummaryQuery {
            model: Some("smollm2-135m".to_owned()),
            ..by(ConfigSort::OutputTokensPerS, false)
        })
        .await,
        vec![runs[0], runs[1]]
    );
    assert_eq!(
        list(ConfigSummaryQuery {
            weight_type: Some("q8_0".to_owned()),
            threads: Some(16),
            ..ConfigSummaryQuery::default()
        })
        .await,
        vec![runs[2]]
    );
    assert_eq!(
        list(ConfigSummaryQuery {
            hardware_id: Some(hardware.id),
            max_batch: Some(8),
            numa_policy: Some("interleave".to_owned()),
            ..ConfigSummaryQuery::default()
        })
        .await
        .len(),
        3
    );
    assert!(
        list(ConfigSummaryQuery {
            numa_policy: Some("none".to_owned()),
            ..ConfigSummaryQuery::default()
        })
        .await
        .is_empty()
    );
    assert_eq!("ttft_p99".parse::<ConfigSort>(), Ok(ConfigSort::TtftP99));
    assert!(
        "price"
            .parse::<ConfigSort>()
            .unwrap_err()
            .to_string()
            .starts_with("unknown sort key \"price\"")
    );
}

async fn capacity_and_quality_results_round_trip(store: Arc<dyn Store>) {
    let (_, config, hardware) = seed(&*store).await;
    let run = store
        .insert_profile_run(&new_run(config.id, hardware.id, at(1, 10, 0)))
        .await
        .unwrap();

    let curve = json!([{"rate": 1.0, "ttft_p99_ms": 120.0}, {"rate": 4.0, "ttft_p99_ms": 480.5}]);
    let new = NewCapacityResult {
        config_id: config.id,
        hardware_id: hardware.id,
        run_id: Some(run.id),
        sla_ttft_p99_ms: 500.0,
        sla_tpot_p99_ms: 50.0,
        max_requests_per_s: 3.75,
        load_curve: curve.clone(),
        step_model: Some(json!({"prompt_token_s": 0.002, "decode_s_by_batch": [[1.0, 0.007]]})),
    };
    let first = store.insert_capacity_result(&new).await.unwrap();
    assert_eq!(
        (first.config_id, first.hardware_id, first.run_id),
        (config.id, hardware.id, Some(run.id))
    );
    assert_eq!(
        (
            first.sla_ttft_p99_ms,
            first.sla_tpot_p99_ms,
            first.max_requests_per_s
        ),
        (500.0, 50.0, 3.75)
    );
    assert_eq!(first.load_curve, curve);
    assert_eq!(first.step_model, new.step_model);
    let second = store
        .insert_capacity_result(&NewCapacityResult {
            run_id: None,
            step_model: None,
            ..new
        })
        .await
        .unwrap();
    assert_eq!((second.run_id, second.step_model.clone()), (None, None));
    assert_eq!(
        store
            .list_capacity_results_for_config(config.id)
            .await
            .unwrap(),
        vec![second, first]
    );

    let reference = NewQualityResult {
        config_id: config.id,
        text_id: "wikitext-2:0".to_owned(),
        perplexity: 12.25,
        top1_agreement: None,
    };
    let quality = store.insert_quality_result(&reference).await.unwrap();
    assert_eq!(
        (
            quality.config_id,
            quality.text_id.as_str(),
            quality.perplexity,
            quality.top1_agreement
        ),
        (config.id, "wikitext-2:0", 12.25, None)
    );
    let quantized = store
        .insert_quality_result(&NewQualityResult {
            top1_agreement: Some(0.975),
            ..reference
        })
        .await
        .unwrap();
    assert_eq!(quantized.top1_agreement, Some(0.975));
    assert_eq!(
        store
            .list_quality_results_for_config(config.id)
            .await
            .unwrap(),
        vec![quantized, quality]
    );
}

fn new_price(
    provider: &str,
    instance_type: &str,
    date: (i32, u32, u32),
    usd_per_hour: f64,
) -> NewCatalogPrice {
    NewCatalogPrice {
        provider: provider.to_owned(),
        region: "eu-west-1".to_owned(),
        instance_type: instance_type.to_owned(),
        vcpus: 64,
        memory_gib: 128.0,
        accelerator: None,
        accelerator_count: 0,
        on_demand_usd_per_hour: usd_per_hour,
        spot_usd_per_hour: Some(usd_per_hour / 3.0),
        committed_usd_per_hour: None,
        watts: Some(350.0),
        source: "price list".to_owned(),
        price_date: NaiveDate::from_ymd_opt(date.0, date.1, date.2).unwrap(),
    }
}

async fn catalog_prices_round_trip_with_latest_per_instance(store: Arc<dyn Store>) {
    let mut gpu = new_price("aws", "g5.xlarge", (2026, 2, 1), 1.006);
    gpu.accelerator = Some("nvidia-a10g".to_owned());
    gpu.accelerator_count = 1;
    gpu.committed_usd_per_hour = Some(0.63);
    let gpu_row = store.insert_catalog_price(&gpu).await.unwrap();
    assert_eq!(
        (
            &gpu_row.provider,
            &gpu_row.region,
            &gpu_row.instance_type,
            gpu_row.vcpus,
            gpu_row.memory_gib
        ),
        (
            &gpu.provider,
            &gpu.region,
            &gpu.instance_type,
            gpu.vcpus,
            gpu.memory_gib
        )
    );
    assert_eq!(
        (&gpu_row.accelerator, gpu_row.accelerator_count),
        (&gpu.accelerator, 1)
    );
    assert_eq!(
        (
            gpu_row.on_demand_usd_per_hour,
            gpu_row.spot_usd_per_hour,
            gpu_row.committed_usd_per_hour
        ),
        (
            gpu.on_demand_usd_per_hour,
            gpu.spot_usd_per_hour,
            gpu.committed_usd_per_hour
        )
    );
    assert_eq!(
        (gpu_row.watts, &gpu_row.source, gpu_row.price_date),
        (gpu.watts, &gpu.source, gpu.price_date)
    );

    let old = store
        .insert_catalog_price(&new_price("aws", "c7i.16xlarge", (2026, 1, 1), 2.856))
        .await
        .unwrap();
    let new = store
        .insert_catalog_price(&new_price("aws", "c7i.16xlarge", (2026, 3, 1), 2.7))
        .await
        .unwrap();
    let gcp = store
        .insert_catalog_price(&new_price("gcp", "c3-standard-44", (2026, 3, 1), 2.2))
        .await
        .unwrap();

    let latest = store
        .latest_catalog_price("aws", "eu-west-1", "c7i.16xlarge")
        .await
        .unwrap();
    assert_eq!(latest, Some(new.clone()));
    assert_eq!(
        store
            .latest_catalog_price("aws", "us-east-1", "c7i.16xlarge")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.list_catalog_prices(Some("aws")).await.unwrap(),
        vec![new, old, gpu_row]
    );
    assert_eq!(store.list_catalog_prices(None).await.unwrap().len(), 4);
    assert_eq!(
        store.list_catalog_prices(Some("gcp")).await.unwrap(),
        vec![gcp]
    );
}

async fn duplicate_catalog_prices_conflict(store: Arc<dyn Store>) {
    store
        .insert_catalog_price(&new_price("aws", "c7i.16xlarge", (2026, 3, 1), 2.7))
        .await
        .unwrap();
    assert_conflict(
        store
            .insert_catalog_price(&new_price("aws", "c7i.16xlarge", (2026, 3, 1), 2.9))
            .await,
        constraint::CATALOG_PRICES_INSTANCE_DATE,
    );
    store
        .insert_catalog_price(&new_price("aws", "c7i.16xlarge", (2026, 3, 2), 2.9))
        .await
        .unwrap();
}

async fn workloads_round_trip(store: Arc<dyn Store>) {
    let spec =
        json!({"hourly_rps": [1.5, 2.0, 8.25], "sla": {"interactive": {"ttft_p99_ms": 800}}});
    let row = store
        .insert_workload(&NewWorkload {
            name: "support-chat".to_owned(),
            spec: spec.clone(),
        })
        .await
        .unwrap();
    assert_eq!((row.name.as_str(), &row.spec), ("support-chat", &spec));
    assert_eq!(store.get_workload(row.id).await.unwrap(), row);
    assert_eq!(
        store.find_workload_by_name("support-chat").await.unwrap(),
        Some(row.clone())
    );
    assert_eq!(store.find_workload_by_name("absent").await.unwrap(), None);
    let again = store
        .insert_workload(&NewWorkload {
            name: "support-chat".to_owned(),
            spec: json!({}),
        })
        .await;
    assert_conflict(again, constraint::WORKLOADS_NAME);
    let batch = store
        .insert_workload(&NewWorkload {
            name: "batch-summaries".to_owned(),
            spec: json!([]),
        })
        .await
        .unwrap();
    assert_eq!(store.list_workloads().await.unwrap(), vec![batch, row]);
}

async fn latest_plan_is_per_workload(store: Arc<dyn Store>) {
    let chat = store
        .insert_workload(&NewWorkload {
            name: "chat".to_owned(),
            spec: json!({}),
        })
        .await
        .unwrap();
    let batch = store
        .insert_workload(&NewWorkload {
            name: "batch".to_owned(),
            spec: json!({}),
        })
        .await
        .unwrap();
    assert_eq!(store.latest_plan_for_workload(chat.id).await.unwrap(), None);

    let plan = |workload_id, version: i64| NewPlan {
        workload_id,
        plan: json!({"version": version, "hours": [{"pool": "cpu-a", "replicas": version}]}),
        total_cost_usd: 100.5 * version as f64,
        total_output_tokens: 1_000_000 * version,
    };
    let first = store.insert_plan(&plan(chat.id, 1)).await.unwrap();
    assert_eq!(
        (
            first.workload_id,
            first.total_cost_usd,
            first.total_output_tokens
        ),
        (chat.id, 100.5, 1_000_000)
    );
    assert_eq!(first.plan, plan(chat.id, 1).plan);
    let second = store.insert_plan(&plan(chat.id, 2)).await.unwrap();
    let other = store.insert_plan(&plan(batch.id, 3)).await.unwrap();

    assert_eq!(
        store.latest_plan_for_workload(chat.id).await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        store.latest_plan_for_workload(batch.id).await.unwrap(),
        Some(other)
    );
    assert_eq!(
        store.list_plans_for_workload(chat.id).await.unwrap(),
        vec![second, first]
    );
}

async fn pilots_move_through_their_states(store: Arc<dyn Store>) {
    let workload = store
        .insert_workload(&NewWorkload {
            name: "chat".to_owned(),
            spec: json!({}),
        })
        .await
        .unwrap();
    let pilot = store.insert_pilot(workload.id).await.unwrap();
    assert_eq!(
        (pilot.workload_id, pilot.status),
        (workload.id, PilotStatus::Pending)
    );
    assert_eq!(
        (pilot.verdict.as_deref(), pilot.report.as_ref()),
        (None, None)
    );
    assert_eq!(pilot.created_at, pilot.updated_at);

    let running = PilotUpdate {
        status: PilotStatus::Running,
        verdict: None,
        report: None,
    };
    assert_eq!(
        store.update_pilot(pilot.id, &running).await.unwrap().status,
        PilotStatus::Running
    );
    let report = json!({"savings_usd_per_month": 4210.5, "p99_risk": "low"});
    let done = PilotUpdate {
        status: PilotStatus::Done,
        verdict: Some("migrate".to_owned()),
        report: Some(report.clone()),
    };
    let updated = store.update_pilot(pilot.id, &done).await.unwrap();
    assert_eq!(
        (updated.status, updated.verdict.as_deref()),
        (PilotStatus::Done, Some("migrate"))
    );
    assert_eq!(updated.report, Some(report));
    assert_eq!(updated.created_at, pilot.created_at);
    assert!(updated.updated_at >= pilot.updated_at);
    assert_eq!(store.get_pilot(pilot.id).await.unwrap(), updated);

    let second = store.insert_pilot(workload.id).await.unwrap();
    assert_eq!(
        store.list_pilots_for_workload(workload.id).await.unwrap(),
        vec![second, updated]
    );
    assert_not_found(store.update_pilot(PilotId(999), &done).await, "pilot");
}

async fn gateway_decisions_list_within_a_window(store: Arc<dyn Store>) {
    let decision = |request_id: &str, decided_at| NewGatewayDecision {
        decided_at,
        request_id: request_id.to_owned(),
        sla_class: "interactive".to_owned(),
        pool: "cpu-a".to_owned(),
        endpoint: "http://10.0.0.7:8080".to_owned(),
        reason: "pool_meets_sla".to_owned(),
        predicted_latency_ms: Some(420.0),
        observed_latency_ms: None,
        prompt_tokens: 350,
        output_tokens: 120,
        cost_usd: 0.000_125,
        source: "pilot:support".to_owned(),
        predicted_ttft_ms: Some(95.5),
        observed_ttft_ms: None,
        raw_predicted_ttft_ms: Some(80.0),
        raw_predicted_latency_ms: Some(400.25),
        other_pools: Some(
            serde_json::to_value([PoolPrediction {
                pool: "gpu".to_owned(),
                ttft_ms: 250.0,
                e2e_ms: 1_774.0,
            }])
            .unwrap(),
        ),
    };
    let row = store
        .insert_gateway_decision(&decision("req-1", at(1, 10, 0)))
        .await
        .unwrap();
    let expected = decision("req-1", micros(at(1, 10, 0)));
    assert_eq!(
        (
            row.decided_at,
            &row.request_id,
            &row.sla_class,
            &row.pool,
            &row.endpoint,
            &row.reason
        ),
        (
            expected.decided_at,
            &expected.request_id,
            &expected.sla_class,
            &expected.pool,
            &expected.endpoint,
            &expected.reason
        )
    );
    assert_eq!(
        (
            row.predicted_latency_ms,
            row.observed_latency_ms,
            row.prompt_tokens,
            row.output_tokens,
            row.cost_usd,
            row.source.as_str()
        ),
        (Some(420.0), None, 350, 120, 0.000_125, "pilot:support")
    );
    assert_eq!(
        (
            row.predicted_ttft_ms,
            row.observed_ttft_ms,
            row.raw_predicted_ttft_ms,
            row.raw_predicted_latency_ms,
            &row.other_pools
        ),
        (
            Some(95.5),
            None,
            Some(80.0),
            Some(400.25),
            &expected.other_pools
        )
    );
    let others: Vec<PoolPrediction> =
        serde_json::from_value(row.other_pools.clone().unwrap()).unwrap();
    assert_eq!(others[0].pool, "gpu");
    let mut observed = decision("req-2", at(1, 11, 0));
    observed.observed_latency_ms = Some(388.5);
    observed.observed_ttft_ms = Some(91.0);
    observed.other_pools = None;
    let later = store.insert_gateway_decision(&observed).await.unwrap();
    assert_eq!(later.observed_latency_ms, Some(388.5));
    assert_eq!(
        (later.observed_ttft_ms, &later.other_pools),
        (Some(91.0), &None)
    );
    store
        .insert_gateway_decision(&decision("req-3", at(2, 0, 0)))
        .await
        .unwrap();

    let day = TimeWindow::day(NaiveDate::from_ymd_opt(2026, 3, 1).unwrap());
    assert_eq!(
        store.list_gateway_decisions(day, 10).await.unwrap(),
        vec![later.clone(), row]
    );
    assert_eq!(
        store.list_gateway_decisions(day, 1).await.unwrap(),
        vec![later]
    );
}

async fn ledger_sums_a_day_window(store: Arc<dyn Store>) {
    let day = TimeWindow::day(NaiveDate::from_ymd_opt(2026, 3, 2).unwrap());
    assert_eq!(
        store.ledger_total(day, None).await.unwrap(),
        LedgerTotal {
            amount_usd: 0.0,
            tokens: 0
        }
    );

    let entry = |recorded_at, pool: &str, amount_usd, tokens| NewLedgerEntry {
        recorded_at,
        pool: pool.to_owned(),
        amount_usd,
        tokens,
        note: None,
    };
    let last_of_day_before = day.start - Duration::microseconds(1);
    store
        .insert_ledger_entry(&entry(last_of_day_before, "cpu-a", 100.0, 1_000))
        .await
        .unwrap();
    let first = store
        .insert_ledger_entry(&entry(day.start, "cpu-a", 1.25, 10_000))
        .await
        .unwrap();
    let mut noted = entry(at(2, 12, 0), "gpu-fallback", 3.5, 2_000);
    noted.note = Some("spike".to_owned());
    let second = store.insert_ledger_entry(&noted).await.unwrap();
    assert_eq!(
        (second.pool.as_str(), second.amount_usd, second.tokens),
        ("gpu-fallback", 3.5, 2_000)
    );
    assert_eq!(
        (second.recorded_at, second.note.as_deref()),
        (micros(at(2, 12, 0)), Some("spike"))
    );
    let third = store
        .insert_ledger_entry(&entry(at(2, 23, 59), "cpu-a", 0.5, 500))
        .await
        .unwrap();
    store
        .insert_ledger_entry(&entry(day.end, "cpu-a", 1000.0, 1))
        .await
        .unwrap();

    assert_eq!(
        store.ledger_total(day, None).await.unwrap(),
        LedgerTotal {
            amount_usd: 5.25,
            tokens: 12_500
        }
    );
    assert_eq!(
        store.ledger_total(day, Some("cpu-a")).await.unwrap(),
        LedgerTotal {
            amount_usd: 1.75,
            tokens: 10_500
        }
    );
    assert_eq!(
        store.ledger_total(day, Some("nobody")).await.unwrap(),
        LedgerTotal::default()
    );
    assert_eq!(
        store.list_ledger_entries(day).await.unwrap(),
        vec![first, second, third]
    );
}

async fn missing_rows_are_not_found(store: Arc<dyn Store>) {
    assert_not_found(store.get_hardware(HardwareId(404)).await, "hardware");
    assert_not_found(store.get_model(ModelId(404)).await, "model");
    assert_not_found(store.get_config(ConfigId(404)).await, "config");
    assert_not_found(
        store.get_profile_run(ProfileRunId(404)).await,
        "profile run",
    );
    assert_not_found(store.get_workload(WorkloadId(404)).await, "workload");
    assert_not_found(store.get_pilot(PilotId(404)).await, "pilot");
    assert_not_found(
        store.get_profile_job(ProfileJobId(404)).await,
        "profile job",
    );
    let err = store.get_model(ModelId(404)).await.unwrap_err();
    assert_eq!(err.to_string(), "model 404 not found");
}

async fn an_expired_lease_hands_the_job_to_another_worker(store: Arc<dyn Store>) {
    use std::time::Duration;
    let hour = Duration::from_secs(3600);
    let job = store.enqueue_profile_job(&json!({"n": 1})).await.unwrap();
    let claimed = store
        .claim_next_profile_job_leased("worker-a", hour)
        .await
        .unwrap()
        .expect("the queued job");
    assert_eq!((claimed.id, claimed.attempts), (job.id, 1));
    assert!(
        store
            .renew_profile_job_lease(job.id, "worker-a")
            .await
            .unwrap()
    );
    // A fresh claim is not taken over.
    assert_eq!(
        store
            .claim_next_profile_job_leased("worker-b", hour)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.claim_next_profile_job("worker-b").await.unwrap(),
        None
    );
    // Once the lease has run out, another worker takes the job over.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = store
        .claim_next_profile_job_leased("worker-b", Duration::from_millis(5))
        .await
        .unwrap()
        .expect("the expired job");
    assert_eq!(taken.id, job.id);
    assert_eq!(taken.claimed_by.as_deref(), Some("worker-b"));
    assert_eq!(taken.attempts, 2);
    assert!(
        !store
            .renew_profile_job_lease(job.id, "worker-a")
            .await
            .unwrap()
    );
    assert!(
        store
            .renew_profile_job_lease(job.id, "worker-b")
            .await
            .unwrap()
    );
    store
        .complete_profile_job(job.id, &JobOutcome::Done { run_id: None })
        .await
        .unwrap();
    assert!(
        !store
            .renew_profile_job_lease(job.id, "worker-b")
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .claim_next_profile_job_leased("worker-c", Duration::ZERO)
            .await
            .unwrap(),
        None,
        "finished jobs are never claimed"
    );
}

async fn profile_jobs_move_through_their_states(store: Arc<dyn Store>) {
    assert_eq!(store.claim_next_profile_job("host-a").await.unwrap(), None);
    let first = store
        .enqueue_profile_job(&json!({"config": {"weight_type": "q8_0"}}))
        .await
        .unwrap();
    let second = store
        .enqueue_profile_job(&json!({"config": {"weight_type": "q4_1"}}))
        .await
        .unwrap();
    assert_eq!(
        (first.status, first.attempts, first.claimed_by.as_deref()),
        (JobStatus::Queued, 0, None)
    );
    assert_eq!(
        (
            first.claimed_at,
            first.finished_at,
            first.run_id,
            first.error.as_deref()
        ),
        (None, None, None, None)
    );

    let claimed = store
        .claim_next_profile_job("host-a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, first.id, "jobs are claimed oldest first");
    assert_eq!(
        (
            claimed.status,
            claimed.attempts,
            claimed.claimed_by.as_deref()
        ),
        (JobStatus::Running, 1, Some("host-a"))
    );
    assert!(claimed.claimed_at.is_some());
    assert_eq!(claimed.spec, first.spec);

    let (_, config, hardware) = seed(&*store).await;
    let run = store
        .insert_profile_run(&new_run(config.id, hardware.id, at(1, 10, 0)))
        .await
        .unwrap();
    let done = store
        .complete_profile_job(
            first.id,
            &JobOutcome::Done {
                run_id: Some(run.id),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (done.status, done.run_id, done.error.as_deref()),
        (JobStatus::Done, Some(run.id), None)
    );
    assert!(done.finished_at.is_some());
    let again = store
        .complete_profile_job(first.id, &JobOutcome::Done { run_id: None })
        .await;
    assert!(
        matches!(again, Err(StoreError::JobNotRunning { id }) if id == first.id),
        "{again:?}"
    );
    let queued = store
        .complete_profile_job(second.id, &JobOutcome::Done { run_id: None })
        .await;
    assert!(
        matches!(queued, Err(StoreError::JobNotRunning { .. })),
        "{queued:?}"
    );
    assert_not_found(
        store
            .complete_profile_job(ProfileJobId(404), &JobOutcome::Done { run_id: None })
            .await,
        "profile job",
    );

    let claimed = store
        .claim_next_profile_job("host-b")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, second.id);
    let outcome = JobOutcome::Failed {
        error: "engine exited with status 137".to_owned(),
    };
    let failed = store
        .complete_profile_job(second.id, &outcome)
        .await
        .unwrap();
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (JobStatus::Failed, Some("engine exited with status 137"))
    );
    assert_eq!(store.claim_next_profile_job("host-a").await.unwrap(), None);

    let third = store.enqueue_profile_job(&json!({})).await.unwrap();
    let ids = |jobs: Vec<ProfileJobRow>| jobs.into_iter().map(|job| job.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_profile_jobs(None).await.unwrap()),
        vec![first.id, second.id, third.id]
    );
    assert_eq!(
        ids(store
            .list_profile_jobs(Some(JobStatus::Queued))
            .await
            .unwrap()),
        vec![third.id]
    );
    assert_eq!(
        ids(store
            .list_profile_jobs(Some(JobStatus::Failed))
            .await
            .unwrap()),
        vec![second.id]
    );
    assert_eq!(store.get_profile_job(failed.id).await.unwrap(), failed);
}

async fn concurrent_claimers_never_share_a_job(store: Arc<dyn Store>) {
    const JOBS: usize = 40;
    const CLAIMERS: usize = 4;
    let mut enqueued = HashSet::new();
    for n in 0..JOBS {
        enqueued.insert(
            store
                .enqueue_profile_job(&json!({"n": n}))
                .await
                .unwrap()
                .id,
        );
    }
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|worker| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let name = format!("worker-{worker}");
                let mut mine = Vec::new();
                while let Some(job) = store.claim_next_profile_job(&name).await.unwrap() {
                    assert_eq!(job.claimed_by.as_deref(), Some(name.as_str()));
                    mine.push(job.id);
                    tokio::task::yield_now().await;
                }
                mine
            })
        })
        .collect();

    let mut claimed = Vec::new();
    for claimer in claimers {
        claimed.extend(claimer.await.unwrap());
    }
    let unique: HashSet<_> = claimed.iter().copied().collect();
    assert_eq!(
        claimed.len(),
        unique.len(),
        "a job was claimed twice: {claimed:?}"
    );
    assert_eq!(unique, enqueued);
    let running = store
        .list_profile_jobs(Some(JobStatus::Running))
        .await
        .unwrap();
    assert_eq!(running.len(), JOBS);
    assert!(running.iter().all(|job| job.attempts == 1));
}

fn new_endpoint_run(endpoint_id: EndpointId, started_at: DateTime<Utc>) -> NewEndpointRun {
    NewEndpointRun {
        endpoint_id,
        started_at,
        finished_at: started_at + Duration::seconds(30),
        api: "chat".into(),
        workload_shape: json!({"arrival": {"closed": {"concurrency": 4}}}),
        request_count: 32,
        error_count: 1,
        ttft_p50_ms: 120.5,
        ttft_p99_ms: 410.25,
        tpot_p50_ms: 9.5,
        tpot_p99_ms: 14.75,
        e2e_p50_ms: 1300.0,
        e2e_p99_ms: 2100.5,
        output_tokens_per_s: 410.0,
        requests_per_s: 3.25,
        goodput_requests_per_s: 3.0,
        sla_attainment: 0.96875,
        report: json!({"requests": 32, "ttft_ms": {"p90": 300.0}}),
        client_version: "0.1.0".into(),
    }
}

/// Endpoints are recorded once per URL and model, found again, and keep their runs apart, newest first.
async fn endpoint_runs_round_trip_newest_first_per_endpoint(store: Arc<dyn Store>) {
    let gpu = NewEndpoint {
        base_url: "http://gpu.internal:8000".into(),
        model_name: "smollm2".into(),
    };
    let endpoint = store.insert_endpoint(&gpu).await.unwrap();
    assert_eq!(endpoint.base_url, gpu.base_url);
    assert_eq!(endpoint.model_name, gpu.model_name);
    assert_eq!(
        store.find_endpoint(&gpu).await.unwrap(),
        Some(endpoint.clone())
    );
    assert_conflict(
        store.insert_endpoint(&gpu).await,
        constraint::ENDPOINTS_URL_MODEL,
    );
    let other_model = NewEndpoint {
        model_name: "llama".into(),
        ..gpu.clone()
    };
    assert_eq!(store.find_endpoint(&other_model).await.unwrap(), None);
    let other = store.insert_endpoint(&other_model).await.unwrap();
    let listed: Vec<_> = store
        .list_endpoints()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed, vec![other.id, endpoint.id]);

    let new = new_endpoint_run(endpoint.id, at(1, 10, 0));
    let row = store.insert_endpoint_run(&new).await.unwrap();
    let expected = EndpointRunRow {
        id: row.id,
        endpoint_id: new.endpoint_id,
        started_at: micros(new.started_at),
        finished_at: micros(new.finished_at),
        api: new.api.clone(),
        workload_shape: new.workload_shape.clone(),
        request_count: new.request_count,
        error_count: new.error_count,
        ttft_p50_ms: new.ttft_p50_ms,
        ttft_p99_ms: new.ttft_p99_ms,
        tpot_p50_ms: new.tpot_p50_ms,
        tpot_p99_ms: new.tpot_p99_ms,
        e2e_p50_ms: new.e2e_p50_ms,
        e2e_p99_ms: new.e2e_p99_ms,
        output_tokens_per_s: new.output_tokens_per_s,
        requests_per_s: new.requests_per_s,
        goodput_requests_per_s: new.goodput_requests_per_s,
        sla_attainment: new.sla_attainment,
        report: new.report.clone(),
        client_version: new.client_version.clone(),
    };
    assert_eq!(row, expected);
    let later = store
        .insert_endpoint_run(&new_endpoint_run(endpoint.id, at(2, 8, 0)))
        .await
        .unwrap();
    store
        .insert_endpoint_run(&new_endpoint_run(other.id, at(3, 8, 0)))
        .await
        .unwrap();
    let ids: Vec<_> = store
        .list_endpoint_runs(endpoint.id)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![later.id, row.id]);
    let missing = new_endpoint_run(EndpointId(9_999), at(1, 0, 0));
    assert!(store.insert_endpoint_run(&missing).await.is_err());
}
