//! How long the dashboard takes to render with 10,000 profiling runs in a SQLite store: the config
//! table (400 configs, latest run each, sorted by cost and by p99), and one run's page.

#[path = "../tests/common/seed.rs"]
mod seed;

use std::hint::black_box;

use axum::{body::Body, http::Request};
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use strata_controller::store::{self, ConfigSummaryQuery};
use tower::ServiceExt;

/// Profiling runs in the store.
const RUNS: usize = 10_000;

fn pages(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    let (app, run_id) = runtime.block_on(async {
        let store = store::open(&url).await.unwrap();
        seed::many_runs(&*store, RUNS).await;
        let run_id = store
            .list_config_summaries(&ConfigSummaryQuery::default())
            .await
            .unwrap()[0]
            .run_id;
        (strata_web::dashboard::router(store), run_id)
    });
    let mut group = c.benchmark_group("dashboard_10k_runs");
    group.sample_size(30);
    for (name, uri) in [
        ("configs_by_cost", "/configs".to_owned()),
        ("configs_by_ttft_p99", "/configs?sort=ttft_p99".to_owned()),
        (
            "configs_filtered",
            "/configs?weights=q8_0&threads=4".to_owned(),
        ),
        ("api_configs", "/api/configs".to_owned()),
        ("run", format!("/runs/{run_id}")),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let response = app
                    .clone()
                    .oneshot(Request::get(uri.as_str()).body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                assert!(response.status().is_success());
                black_box(response.into_body().collect().await.unwrap().to_bytes())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, pages);
criterion_main!(benches);
