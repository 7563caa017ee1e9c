//! Strata across real network hops on one machine: engine hosts, gateway replicas, the load generator,
//! a GPU stand-in and PostgreSQL each behind their own address (network namespaces on a bridge), with
//! faults injected in turn. Needs root; skipped with a message elsewhere, failed under `CI=true`.

mod cluster;
#[path = "../common/mod.rs"]
#[allow(dead_code)]
mod common;
mod load;
mod net;
mod pg;

use std::{
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use cluster::{Cluster, Ledger};
use load::{Answer, Load, Outcome};

/// The scenarios share the machine's two cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Whether namespaces can be made here; a reason to skip otherwise (a failure under CI).
fn namespaces_or_skip(test: &str) -> bool {
    match net::can_create_namespaces() {
        Ok(()) => true,
        Err(why) if common::in_ci() => panic!("{test}: cannot create network namespaces: {why}"),
        Err(why) => {
            eprintln!("skipping {test}: cannot create network namespaces: {why}");
            false
        }
    }
}

/// A fault injected a third of the way into a phase and undone at two thirds.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Engine host 0 is killed (SIGKILL), then started again.
    EngineKilled,
    /// Gateway replica 0 is stopped the way Kubernetes stops a pod (SIGTERM, drain), then started again.
    GatewayKilled,
    /// PostgreSQL stops, stays down for a while, and starts again.
    PostgresRestarted,
    /// Engine host 1 loses its link, then gets it back.
    EnginePartitioned,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::EngineKilled => "engine-killed",
            Fault::GatewayKilled => "gateway-killed",
            Fault::PostgresRestarted => "postgres-restarted",
            Fault::EnginePartitioned => "engine-partitioned",
        }
    }

    fn inject(self, cluster: &mut Cluster) {
        match self {
            Fault::EngineKilled => cluster.engines[0].kill(),
            Fault::GatewayKilled => cluster.gateways[0].terminate(),
            Fault::PostgresRestarted => cluster.pg.down().expect("PostgreSQL stops"),
            Fault::EnginePartitioned => cluster.engine_hosts[1].partition().expect("link down"),
        }
    }

    fn undo(self, cluster: &mut Cluster) {
        match self {
            Fault::EngineKilled => cluster.restart_engine(0),
            Fault::GatewayKilled => cluster.restart_gateway(0),
            Fault::PostgresRestarted => cluster.pg.up().expect("PostgreSQL starts again"),
            Fault::EnginePartitioned => cluster.engine_hosts[1].heal().expect("link up"),
        }
    }
}

/// What one phase counted.
#[derive(Debug)]
struct Tally {
    sent: usize,
    answered: usize,
    clean_errors: usize,
    lost: usize,
    duplicated: usize,
    unaccounted: usize,
    retried: usize,
    ledger_difference_usd: f64,
}

/// Runs `requests` requests through both gateways, injecting `fault` (if any) at a third and undoing
/// it at two thirds, then waits for the accounting to settle and counts.
fn phase(cluster: &mut Cluster, fault: Option<Fault>, requests: usize) -> (Tally, Vec<Outcome>) {
    let name = fault.map_or("steady", Fault::name);
    let before = cluster.ledger();
    let done = AtomicUsize::new(0);
    let gateways = cluster.gateway_urls();
    let load = Load {
        gateways: &gateways,
        model: common::SMOLLM2,
        prefix: name,
        requests,
        concurrency: 12,
        class: "standard",
        max_tokens: 4,
    };
    let client_host = cluster.client_host.clone();
    let outcomes = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            client_host.run(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(load.run(&done))
            })
        });
        if let Some(fault) = fault {
            wait_for(&done, requests / 3);
            eprintln!(
                "{name}: injecting at {} answers",
                done.load(Ordering::Relaxed)
            );
            fault.inject(cluster);
            wait_for(&done, 2 * requests / 3);
            eprintln!(
                "{name}: undoing at {} answers",
                done.load(Ordering::Relaxed)
            );
            fault.undo(cluster);
        }
        running.join().expect("the load generator finishes")
    });
    cluster.wait_for_accounting();
    let after = cluster.ledger();
    let tally = count(&outcomes, &before, &after, name);
    eprintln!("{name}: {tally:?}");
    for o in outcomes
        .iter()
        .filter(|o| matches!(o.answer, Answer::Lost { .. }))
        .take(5)
    {
        eprintln!(
            "{name}: lost {} after {} attempts: {:?}",
            o.id, o.attempts, o.answer
        );
    }
    (tally, outcomes)
}

/// Waits until `n` requests finished (at most two minutes).
fn wait_for(done: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The phase's counts against the store's decisions and ledger.
fn count(outcomes: &[Outcome], before: &Ledger, after: &Ledger, prefix: &str) -> Tally {
    let answered: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| matches!(o.answer, Answer::Answered { .. }))
        .collect();
    let decisions = after.decisions_with_prefix(prefix);
    let duplicated = decisions.values().filter(|d| d.count > 1).count();
    let unaccounted = answered
        .iter()
        .filter(|o| !decisions.contains_key(&o.id))
        .count();
    let answered_cost: f64 = answered
        .iter()
        .filter_map(|o| decisions.get(&o.id))
        .map(|d| d.cost_usd)
        .sum();
    Tally {
        sent: outcomes.len(),
        answered: answered.len(),
        clean_errors: outcomes
            .iter()
            .filter(|o| matches!(o.answer, Answer::CleanError { .. }))
            .count(),
        lost: outcomes
            .iter()
            .filter(|o| matches!(o.answer, Answer::Lost { .. }))
            .count(),
        duplicated,
        unaccounted,
        retried: outcomes.iter().filter(|o| o.attempts > 1).count(),
        ledger_difference_usd: (after.total_usd - before.total_usd) - answered_cost,
    }
}

#[test]
fn requests_survive_a_killed_engine_a_killed_gateway_a_postgres_restart_and_a_partition() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !namespaces_or_skip("multi-host faults") {
        return;
    }
    let mut cluster = Cluster::start(None);
    let mut report = Vec::new();
    for fault in [
        None,
        Some(Fault::EngineKilled),
        Some(Fault::GatewayKilled),
        Some(Fault::PostgresRestarted),
        Some(Fault::EnginePartitioned),
    ] {
        let (tally, _) = phase(&mut cluster, fault, 600);
        report.push((fault.map_or("steady", Fault::name), tally));
    }
    eprintln!(
        "fault | sent | answered | clean errors | lost | duplicated | unaccounted | retried by the client | ledger difference USD"
    );
    for (name, t) in &report {
        eprintln!(
            "{name} | {} | {} | {} | {} | {} | {} | {} | {:.9}",
            t.sent,
            t.answered,
            t.clean_errors,
            t.lost,
            t.duplicated,
            t.unaccounted,
            t.retried,
            t.ledger_difference_usd
        );
    }
    for (name, t) in &report {
        assert_eq!(t.sent, 600, "{name}: every request was sent");
        assert_eq!(
            t.lost, 0,
            "{name}: a request got no answer and no clean error"
        );
        assert_eq!(t.duplicated, 0, "{name}: a request was answered twice");
        assert_eq!(
            t.unaccounted, 0,
            "{name}: an answered request has no decision"
        );
        assert!(
            t.ledger_difference_usd.abs() < 1e-9,
            "{name}: the ledger differs from the answered requests' costs by {} USD",
            t.ledger_difference_usd
        );
        assert!(
            t.answered * 10 >= t.sent * 9,
            "{name}: fewer than 90% answered: {t:?}"
        );
    }
}

#[test]
fn two_replicas_enforce_one_daily_budget_at_its_threshold_not_at_twice() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !namespaces_or_skip("budget across replicas") {
        return;
    }
    // One answer costs about 8e-6 USD on the CPU pool: the budget holds about 250 of them, spread
    // over both replicas; past it, priority-0 requests are refused.
    let budget_usd = 0.002;
    let budget = format!(
        "[budget]\nper_day_usd = {budget_usd}\n[[budget.action]]\naction = \"reject_below_priority\"\nat_spent_fraction = 1.0\npriority = 1\n"
    );
    let mut cluster = Cluster::start(Some(&budget));
    let gateways = cluster.gateway_urls();
    let done = AtomicUsize::new(0);
    let load = Load {
        gateways: &gateways,
        model: common::SMOLLM2,
        prefix: "budget",
        requests: 600,
        concurrency: 12,
        class: "batch",
        max_tokens: 4,
    };
    let client_host = cluster.client_host.clone();
    let outcomes = client_host.run(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(load.run(&done))
    });
    cluster.wait_for_accounting();
    let ledger = cluster.ledger();
    let answered = outcomes
        .iter()
        .filter(|o| matches!(o.answer, Answer::Answered { .. }))
        .count();
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o.answer, Answer::CleanError { status: 429 }))
        .count();
    let first_refusal = outcomes
        .iter()
        .filter(|o| matches!(o.answer, Answer::CleanError { status: 429 }))
        .map(|o| o.at)
        .min();
    let spent_fraction = ledger.total_usd / budget_usd;
    eprintln!(
        "budget: {answered} answered, {refused} refused (first at {first_refusal:?}), spent {:.6} USD of {budget_usd} ({:.3}x)",
        ledger.total_usd, spent_fraction
    );
    assert!(refused > 0, "the budget never fired");
    assert_eq!(
        answered + refused,
        outcomes.len(),
        "only answers and refusals"
    );
    assert!(
        spent_fraction >= 1.0,
        "refused before the threshold: {spent_fraction:.3}x"
    );
    // Each replica sees the other's spend at the store's refresh (250 ms) after its flush (200 ms):
    // the overshoot is what both answer in that window, far from the 2x of replicas that count alone.
    assert!(
        spent_fraction < 1.15,
        "the replicas overshot the shared budget: {spent_fraction:.3}x"
    );
    drop(cluster.gateways.drain(..));
}

/// A worker process, killed and reaped when dropped.
struct Worker(std::process::Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A sweep of four small configs, a few seconds each.
const SWEEP: &str = r#"
model = "smollm2-135m-instruct"
weights = ["q8_0", "q4_1"]
threads = [1]
max_batch = [1, 2]
kv_mem_mib = [64]
seed = 1

[[shape]]
name = "short"
prompt_tokens = 16
output_tokens = 8
arrival = { kind = "closed", concurrency = 2 }
requests = 6
warmup = 1
"#;

#[test]
fn profiling_workers_on_two_hosts_split_one_sweep_and_a_killed_one_is_taken_over() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !namespaces_or_skip("profiling workers on two hosts") {
        return;
    }
    let model = common::smollm2_path();
    let mut net = net::Network::create().expect("a bridge");
    let pg = pg::Postgres::start(net.root_ip(), 55432).expect("PostgreSQL starts");
    pg.create_database("strata").expect("a database");
    let url = pg.url("strata");
    let dir = tempfile::tempdir().expect("tempdir");
    let sweep = dir.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        SWEEP.replace("smollm2-135m-instruct", &model.display().to_string()),
    )
    .expect("writes the sweep");
    let enqueue = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["profile", "--sweep"])
        .arg(&sweep)
        .args(["--enqueue", "--database-url", &url])
        .output()
        .expect("strata profile --enqueue runs");
    assert!(
        enqueue.status.success(),
        "enqueue: {}",
        String::from_utf8_lossy(&enqueue.stderr)
    );
    let hosts = [
        net.add_host("w1").expect("host w1"),
        net.add_host("w2").expect("host w2"),
    ];
    let worker = |i: usize| {
        let mut command = hosts[i].command(env!("CARGO_BIN_EXE_strata"));
        command
            .args(["worker", "--name", &format!("host-w{}", i + 1)])
            .args([
                "--lease-secs",
                "4",
                "--exit-when-idle",
                "--database-url",
                &url,
            ])
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        Worker(command.spawn().expect("a worker starts"))
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let jobs = |status: &str| -> Vec<(i64, Option<String>)> {
        runtime.block_on(async {
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("the store answers");
            let rows = sqlx::query_as(
                "SELECT id, claimed_by FROM profile_jobs WHERE status = $1 ORDER BY id",
            )
            .bind(status)
            .fetch_all(&pool)
            .await
            .expect("reads the jobs");
            pool.close().await;
            rows
        })
    };
    assert_eq!(
        jobs("queued").len(),
        4,
        "the sweep's four configs are queued"
    );
    let mut first = worker(0);
    let mut second = worker(1);
    // Kill the first worker as soon as it holds a job.
    let deadline = Instant::now() + Duration::from_secs(120);
    let killed_job = loop {
        let running = jobs("running");
        if let Some((id, _)) = running
            .iter()
            .find(|(_, by)| by.as_deref() == Some("host-w1"))
        {
            std::thread::sleep(Duration::from_millis(500));
            first.0.kill().expect("kills worker 1");
            first.0.wait().expect("reaps worker 1");
            break *id;
        }
        assert!(Instant::now() < deadline, "worker 1 never claimed a job");
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = second.0.wait().expect("worker 2 finishes");
    assert!(status.success(), "worker 2 exited with {status}");
    let done = jobs("done");
    assert_eq!(
        done.len(),
        4,
        "every config done: {done:?}, failed {:?}",
        jobs("failed")
    );
    let taken_over = done.iter().find(|(id, _)| *id == killed_job);
    assert_eq!(
        taken_over.and_then(|(_, by)| by.as_deref()),
        Some("host-w2"),
        "the killed worker's job was taken over"
    );
    let (runs, distinct, fingerprints): (i64, i64, Vec<String>) = runtime.block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.expect("the store answers");
        let counts: (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COUNT(DISTINCT config_id) FROM profile_runs",
        )
        .fetch_one(&pool)
        .await
        .expect("counts the runs");
        let fingerprints = sqlx::query_scalar(
            "SELECT DISTINCT h.fingerprint_hash FROM profile_runs r JOIN hardware h ON h.id = r.hardware_id",
        )
        .fetch_all(&pool)
        .await
        .expect("reads the fingerprints");
        pool.close().await;
        (counts.0, counts.1, fingerprints)
    });
    eprintln!(
        "workers: {runs} runs of {distinct} configs, job {killed_job} taken over by host-w2, fingerprints {fingerprints:?}"
    );
    assert_eq!(
        (runs, distinct),
        (4, 4),
        "each config measured exactly once"
    );
    assert_eq!(
        fingerprints.len(),
        1,
        "both hosts are this machine: {fingerprints:?}"
    );
    drop(net);
}
