//! `strata profile --sweep` on the real model: a 3 weight types x 2 thread counts x 2 batch sizes sweep
//! runs end to end, each config as a real server driven over HTTP, and lands in the store (SQLite and
//! PostgreSQL) and in the summary table; a second run reuses what this host already measured.

use std::process::Command;

use strata_controller::store;

use crate::common::{in_ci, smollm2_path};

const SWEEP: &str = r#"
model = "MODEL"
weights = ["q8_0", "q4_1", "f16"]
threads = [1, 2]
max_batch = [1, 4]
kv_mem_mib = [32]

[sla]
ttft_ms = 60000.0

[[shape]]
name = "tiny"
prompt_tokens = 8
output_tokens = 4
arrival = { kind = "closed", concurrency = 2 }
requests = 2
"#;

fn sweep_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("sweep.toml");
    let model = smollm2_path();
    std::fs::write(&path, SWEEP.replace("MODEL", &model.display().to_string())).expect("write");
    path
}

fn profile(url: &str, sweep: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["--database-url", url, "profile", "--sweep"])
        .arg(sweep)
        .env_remove("RUST_LOG")
        .output()
        .expect("strata profile runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "strata profile failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

async fn stored_runs(url: &str) -> usize {
    let store = store::open(url).await.expect("store opens");
    let mut runs = 0;
    for model in store.list_models().await.expect("models") {
        for config in store
            .list_configs_for_model(model.id)
            .await
            .expect("configs")
        {
            runs += store
                .list_profile_runs_for_config(config.id)
                .await
                .expect("runs")
                .len();
        }
    }
    store.close().await;
    runs
}

async fn sweep_lands_in(url: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sweep = sweep_file(dir.path());
    let table = profile(url, &sweep);
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(" tiny ")).collect();
    assert_eq!(rows.len(), 12, "one row per config:\n{table}");
    for weights in ["q8_0", "q4_1", "f16"] {
        for threads in ["t1", "t2"] {
            for batch in ["b1", "b4"] {
                let name = format!("{weights} {threads} {batch} kv32");
                assert!(
                    rows.iter().any(|r| r.starts_with(&name)),
                    "{name} missing:\n{table}"
                );
            }
        }
    }
    assert!(table.contains("host: "), "{table}");
    assert_eq!(stored_runs(url).await, 12);
    // Measured on this host and engine version already: nothing runs again.
    let again = profile(url, &sweep);
    assert_eq!(again.matches("(stored)").count(), 12, "{again}");
    assert_eq!(stored_runs(url).await, 12);
}

#[tokio::test]
async fn a_sweep_runs_end_to_end_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    sweep_lands_in(&url).await;
}

#[tokio::test]
async fn a_sweep_runs_end_to_end_on_postgres() {
    use sqlx::{Connection, Executor, PgConnection};
    let server = std::env::var("STRATA_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let mut admin = match PgConnection::connect(&server).await {
        Ok(admin) => admin,
        Err(e) if in_ci() => panic!("CI needs PostgreSQL at {server}: {e}"),
        Err(e) => {
            eprintln!("skipped: PostgreSQL at {server} is unreachable: {e}");
            return;
        }
    };
    let database = format!("strata_test_profile_{}", std::process::id());
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .await
        .expect("create database");
    let url = match server.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{database}"),
        None => panic!("a database URL: {server}"),
    };
    let outcome = tokio::spawn(async move { sweep_lands_in(&url).await }).await;
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
        )))
        .await
        .expect("drop database");
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}
