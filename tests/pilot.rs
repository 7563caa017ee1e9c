//! `strata pilot` on the real model: quality gate with a task, a capacity search, the plan, a short replay
//! through a real gateway in front of a real engine, and the verdict, whose exit status matches the
//! report; the report is stored and shown by the dashboard. On a host another process keeps busy, the
//! report says so and the calibration measures the time lost outside the engine's steps. Bad input is
//! refused with a clear error.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use rustix::process::{Pid, Signal, kill_process};

use serde_json::Value;
use strata_controller::{
    pilot,
    store::{self, PilotStatus},
};

use crate::common::{SMOLLM2, ServerProcess, smollm2_path};

const WORKLOAD: &str = r#"
name = "pilot-e2e"

[[class]]
name = "chat"
share = 0.7
priority = 1
prompt_tokens = { dist = "uniform", min = 24, max = 48 }
output_tokens = { dist = "uniform", min = 4, max = 8 }
sla = { ttft_p99_s = 5.0, e2e_p99_s = 10.0 }

[[class]]
name = "extract"
share = 0.3
prompt_tokens = { dist = "uniform", min = 40, max = 64 }
output_tokens = { dist = "fixed", tokens = 4 }
sla = { e2e_p99_s = 10.0 }

[arrivals]
hourly_rps = [0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0,
              1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.3, 0.2, 0.2, 0.2, 0.2]

[gpu_fallback]
kind = "instance"
instance = "g2-standard-8"
output_tokens_per_s = 2000.0
ttft_p99_s = 0.25
tpot_p99_s = 0.012
basis = "assumed for the test"

[pilot]
model = "MODEL"
weights = ["q8_0"]
max_batch = [4]
kv_mem_mib = 32
probe_requests = 6
replay_s = 8
seed = 5

[[pilot.task]]
prompt = "What is the capital of France? Answer in one word."
expect = "Paris"
"#;

fn write_workload(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("workload.toml");
    let model = smollm2_path();
    std::fs::write(&path, text.replace("MODEL", &model.display().to_string())).expect("write");
    path
}

fn pilot(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["--database-url", url, "pilot"])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("strata pilot runs")
}

/// `strata pilot ARGS --json --exit-zero`, which must succeed, and its report.
fn pilot_report(url: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--json", "--exit-zero"]);
    let output = pilot(url, &args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    serde_json::from_str(&stdout).expect("a JSON report")
}

/// [`WORKLOAD`] without its task, which only the quality gate's test needs.
fn workload_without_task() -> String {
    let task = "[[pilot.task]]\nprompt = \"What is the capital of France? Answer in one word.\"\nexpect = \"Paris\"\n";
    assert!(WORKLOAD.contains(task));
    WORKLOAD.replace(task, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pilot_runs_end_to_end_and_its_exit_status_is_its_verdict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    let workload = write_workload(dir.path(), WORKLOAD);
    let output = pilot(
        &url,
        &["--workload", workload.to_str().expect("utf-8"), "--json"],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}):\n{stdout}\n{stderr}"));
    let code = output.status.code().expect("exit status");
    let expected = match report["verdict"].as_str() {
        Some("migrate") => 0,
        Some("partial") => 3,
        Some("stay") => 4,
        other => panic!("unknown verdict {other:?}"),
    };
    assert_eq!(code, expected, "{stdout}\n{stderr}");
    assert_eq!(report["exit_code"], expected);
    assert_eq!(report["schema_version"], 2);

    // Quality: q8_0 against f32, with the task answered by both.
    let gate = &report["quality"][0];
    assert_eq!(gate["weights"], "q8_0");
    let ppl = gate["measured"]["perplexity"].as_f64().expect("perplexity");
    let reference = gate["measured"]["reference_perplexity"]
        .as_f64()
        .expect("f32");
    assert!(ppl > 1.0 && reference > 1.0, "{gate}");
    assert!(gate["measured"]["task_pass_rate"].is_number(), "{gate}");
    // The task check is the paired test against f32 on the same task, at the stated level.
    assert_eq!(gate["tasks"]["tasks"], 1, "{gate}");
    assert_eq!(gate["tasks"]["significance"], 0.05, "{gate}");
    // One task can never show a significant drop.
    assert_eq!(gate["tasks"]["significant_drop"], false, "{gate}");

    // Capacity was searched, the plan recorded and simulated.
    assert!(
        report["configs"][0]["capacity_rps"].is_number(),
        "{}",
        report["configs"]
    );
    assert!(report["plan"]["id"].is_number(), "{}", report["plan"]);
    assert_eq!(
        report["simulation"]["double"]["classes"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // The replay went through the gateway to the engine and was predicted.
    let replay = &report["replay"];
    let sent = replay["requests"].as_u64().expect("requests");
    assert!(sent > 0, "{replay}");
    assert_eq!(replay["errors"], 0, "{replay}");
    let classes = replay["classes"].as_array().expect("classes");
    let by_class: u64 = classes
        .iter()
        .map(|c| c["requests"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(by_class, sent);
    for c in classes.iter().filter(|c| c["requests"].as_u64() > Some(0)) {
        assert!(c["observed_e2e_p99_s"].as_f64() > Some(0.0), "{c}");
        assert!(c["predicted_e2e_p99_s"].as_f64() > Some(0.0), "{c}");
        assert!(c["e2e_p99_error"].is_number(), "{c}");
    }
    // The host's pace on the profiling shape, when profiled and around the replay.
    let pace = &replay["host_pace"];
    for key in [
        "profiled_output_tokens_per_s",
        "before_replay_output_tokens_per_s",
        "after_replay_output_tokens_per_s",
        "replay_over_profiled",
    ] {
        assert!(pace[key].as_f64() > Some(0.0), "{key}: {pace}");
    }
    // A calibration sample scaled the prediction, and the unscaled one is kept beside it.
    let calibration = &replay["calibration"];
    assert_eq!(
        calibration.is_object(),
        replay["all_as_profiled"].is_object(),
        "{replay}"
    );
    if calibration.is_object() {
        assert!(calibration["requests"].as_u64() > Some(0), "{calibration}");
        // The samples bracket the replay, and together they are the calibration.
        let samples = calibration["samples"].as_array().expect("samples");
        let whens: Vec<&str> = samples.iter().filter_map(|s| s["when"].as_str()).collect();
        assert!(
            !whens.is_empty()
                && whens.len() == samples.len()
                && whens.iter().is_sorted_by_key(|w| *w == "after_replay")
                && whens
                    .iter()
                    .all(|w| ["before_replay", "after_replay"].contains(w)),
            "{calibration}"
        );
        let requests: u64 = samples.iter().filter_map(|s| s["requests"].as_u64()).sum();
        assert_eq!(
            Some(requests),
            calibration["requests"].as_u64(),
            "{calibration}"
        );
        let ratios = ["decode_over_profiled", "prompt_over_profiled"].map(|k| &calibration[k]);
        assert!(
            ratios.iter().any(|r| r.as_f64() > Some(0.0)),
            "{calibration}"
        );
        // The prediction is the mean over a spread of the engine's pace, with its band.
        let spread = &replay["pace_spread"];
        assert_eq!(spread["runs"], 15, "{replay}");
        let sigma = spread["sigma"].as_f64().expect("sigma");
        assert!((0.02..=0.15).contains(&sigma), "{spread}");
        for key in ["predicted_e2e_p99_band_s", "predicted_ttft_p99_band_s"] {
            let band = &replay["all"][key];
            let (low, high) = (band["low"].as_f64(), band["high"].as_f64());
            assert!(low > Some(0.0) && low <= high, "{key}: {band}");
        }
    }

    // Stored with its verdict; reproducible settings are part of it.
    let db = store::open(&url).await.expect("store");
    let workload_row = db
        .find_workload_by_name("pilot-e2e")
        .await
        .expect("query")
        .expect("workload recorded");
    let pilots = db
        .list_pilots_for_workload(workload_row.id)
        .await
        .expect("pilots");
    assert_eq!(pilots.len(), 1);
    assert_eq!(pilots[0].status, PilotStatus::Done);
    assert_eq!(pilots[0].verdict.as_deref(), report["summary"].as_str());
    let stored = pilots[0].report.as_ref().expect("report");
    // The stored report reads back as the report type, equal to the one printed.
    let printed: pilot::PilotReport =
        serde_json::from_value(report.clone()).expect("the printed report reads as a report");
    match pilot::read_stored(stored) {
        Ok(pilot::StoredReport::Done(read)) => assert_eq!(*read, printed),
        other => panic!("the stored report does not read back: {other:?}"),
    }
    assert_eq!(stored["reproduce"]["seed"], 5);
    assert!(stored["reproduce"]["hardware"]["fingerprint"].is_string());
    // The replay's gateway recorded its decisions under the pilot's name, none as live traffic.
    let window = store::TimeWindow {
        start: pilots[0].created_at,
        end: chrono::Utc::now() + chrono::Duration::seconds(1),
    };
    let decisions = db
        .list_gateway_decisions(window, 100_000)
        .await
        .expect("decisions");
    let replayed = decisions
        .iter()
        .filter(|d| d.source == "pilot:pilot-e2e")
        .count();
    assert!(
        replayed as u64 >= sent,
        "{replayed} decisions for {sent} requests"
    );
    assert!(decisions.iter().all(|d| d.source != "live"));
    db.close().await;

    // The dashboard shows it: the report, the configs priced, the replay's requests.
    let mut command = Command::new(env!("CARGO_BIN_EXE_strata"));
    command.args(["dashboard", "--bind", "127.0.0.1:0", "--database-url", &url]);
    let dashboard = ServerProcess::announcing(command, "dashboard listening on ");
    let get = async |path: &str| {
        reqwest::get(format!("{}{path}", dashboard.base))
            .await
            .expect("answers")
            .text()
            .await
            .expect("body")
    };
    let page = get("/pilots").await;
    assert!(page.contains("class=\"pilot-replay\""), "{page}");
    assert!(page.contains("pilot-e2e"), "{page}");
    assert!(page.contains("Host pace on the profiling shape"), "{page}");
    let configs: Value = serde_json::from_str(&get("/api/configs").await).expect("JSON");
    let rows = configs["rows"].as_array().expect("rows");
    assert!(!rows.is_empty(), "{configs}");
    assert!(
        rows.iter()
            .all(|r| r["usd_per_million_output_tokens"].as_f64() > Some(0.0)),
        "{configs}"
    );
    assert!(rows.iter().any(|r| r["pareto"] == true), "{configs}");
    assert_eq!(
        configs["gpu_baseline"]["name"], "g2-standard-8",
        "{configs}"
    );
    let gateway: Value =
        serde_json::from_str(&get("/api/gateway?source=pilot:pilot-e2e").await).expect("JSON");
    assert_eq!(
        gateway["requests"].as_u64(),
        Some(replayed as u64),
        "{gateway}"
    );
}

/// With `--gpu-endpoint`, the replay's gateway has a GPU pool: a chat SLA the CPU engine cannot meet sends
/// chat there (here a second engine stands in for the GPU baseline, serving the same model name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pilot_replays_through_the_gpu_endpoint_when_one_is_given() {
    let gpu = ServerProcess::start(&["--threads", "1", "--max-batch", "4", "--kv-mem", "32"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    let tight = workload_without_task().replace(
        "sla = { ttft_p99_s = 5.0, e2e_p99_s = 10.0 }",
        "sla = { ttft_p99_s = 0.001, e2e_p99_s = 10.0 }",
    );
    let workload = write_workload(dir.path(), &tight);
    let report = pilot_report(
        &url,
        &[
            "--workload",
            workload.to_str().expect("utf-8"),
            "--gpu-endpoint",
            &gpu.base,
            "--gpu-model",
            SMOLLM2,
        ],
    );
    let replay = &report["replay"];
    assert_eq!(replay["with_gpu"], true, "{replay}");
    assert_eq!(replay["load"]["includes_gpu_traffic"], true, "{replay}");
    assert_eq!(replay["errors"], 0, "{replay}");
    let chat = &replay["classes"][0];
    assert_eq!(chat["class"], "chat");
    if chat["requests"].as_u64() > Some(0) {
        assert_eq!(chat["gpu_requests"], chat["requests"], "{chat}");
    }
    assert!(report["quality"][0]["measured"]["task_pass_rate"].is_null());
    // The chat class cannot meet a 1 ms TTFT on CPU: it does not migrate.
    let classes = report["decision"]["classes"].as_array().expect("classes");
    assert_eq!(classes[0]["migrate"], false, "{}", report["decision"]);
}

/// A shell spinning on a core for `duty` of every `period` (stopped and continued by a thread of the
/// test), as another tenant of the host; stopped, killed and reaped when dropped, on every path.
struct CpuHog {
    child: Child,
    running: Arc<AtomicBool>,
    toggler: Option<JoinHandle<()>>,
}

impl CpuHog {
    fn start(period: Duration, duty: f64) -> Self {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("sh starts");
        let pid = Pid::from_child(&child);
        let running = Arc::new(AtomicBool::new(true));
        let (on, off) = (period.mul_f64(duty), period.mul_f64(1.0 - duty));
        let toggler = std::thread::spawn({
            let running = running.clone();
            move || {
                while running.load(Ordering::Relaxed) {
                    std::thread::sleep(on);
                    let _ = kill_process(pid, Signal::STOP);
                    std::thread::sleep(off);
                    let _ = kill_process(pid, Signal::CONT);
                }
            }
        });
        Self {
            child,
            running,
            toggler: Some(toggler),
        }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        // The toggler stops before the shell is reaped, so that no signal can reach a reused pid.
        self.running.store(false, Ordering::Relaxed);
        if let Some(toggler) = self.toggler.take() {
            let _ = toggler.join();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Another process holding a core half the time beside the pilot: the report says the host was
/// shared, the calibration measured the gaps between the engine's steps and the time requests spent
/// outside it, and put both into the step model of the prediction, which is then no lower than the
/// prediction from the profile as it was measured, scaled by the calibration's step ratios.
#[test]
fn a_pilot_on_a_busy_host_says_so_and_predicts_the_time_outside_the_steps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    let workload = write_workload(dir.path(), &workload_without_task());
    let report = {
        let _hog = CpuHog::start(Duration::from_millis(100), 0.5);
        pilot_report(&url, &["--workload", workload.to_str().expect("utf-8")])
    };
    let replay = &report["replay"];
    assert!(replay["requests"].as_u64() > Some(0), "{replay}");
    // What the replay found, for `--nocapture`.
    eprintln!(
        "busy host: {}\ncalibration: {}\nobserved against calibrated: {}\nas profiled: {}",
        replay["host_load"], replay["calibration"], replay["all"], replay["all_as_profiled"]
    );

    let load = &replay["host_load"];
    assert_eq!(load["shared"], true, "{load}");
    let others = load["other_cores"].as_f64().expect("other cores");
    assert!(others > 0.25, "{load}");
    assert!(load["pilot_cores"].as_f64() > Some(0.0), "{load}");

    let calibration = &replay["calibration"];
    assert!(calibration["step_gaps"].as_u64() > Some(0), "{calibration}");
    let gap = calibration["step_gap_s"].as_f64().expect("a gap");
    let overhead = calibration["request_overhead_s"]
        .as_f64()
        .expect("an overhead");
    assert!(gap > 0.0 && gap < 1.0, "{calibration}");
    assert!((0.0..10.0).contains(&overhead), "{calibration}");
    let steps = &calibration["step_model"];
    assert_eq!(steps["step_gap_s"].as_f64(), Some(gap), "{calibration}");
    assert_eq!(
        steps["request_overhead_s"].as_f64().unwrap_or(0.0),
        overhead,
        "{calibration}"
    );
    for sample in calibration["samples"].as_array().expect("samples") {
        assert!(
            sample["observed_ttft_p50_s"].as_f64() > Some(0.0),
            "{sample}"
        );
        assert!(
            sample["predicted_ttft_p50_s"].as_f64() > Some(0.0),
            "{sample}"
        );
    }

    // The calibration scales the profile's steps by its measured ratios and only adds time outside
    // them: its prediction is no lower than the profile's scaled by the smaller ratio (the profile's
    // own when the host ran no faster than profiled).
    let ratio = |key: &str| calibration[key].as_f64().unwrap_or(1.0);
    let floor = ratio("decode_over_profiled")
        .min(ratio("prompt_over_profiled"))
        .min(1.0);
    let (calibrated, as_profiled) = (&replay["all"], &replay["all_as_profiled"]);
    for key in ["predicted_ttft_p99_s", "predicted_e2e_p99_s"] {
        let c = calibrated[key].as_f64().expect("calibrated");
        let p = as_profiled[key].as_f64().expect("as profiled");
        assert!(
            p > 0.0 && c >= p * floor,
            "{key}: {c} < {p} x {floor}\n{replay}"
        );
    }
}

#[test]
fn a_pilot_with_a_drain_hold_takes_its_load_share_of_the_capacity_with_the_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    let text = workload_without_task().replace("replay_s = 8", "replay_s = 8\nreplay_load = 0.5");
    assert!(text.contains("replay_load"));
    let workload = write_workload(dir.path(), &text);
    let report = pilot_report(
        &url,
        &[
            "--workload",
            workload.to_str().expect("utf-8"),
            "--drain-hold",
            "2",
        ],
    );
    let replay = &report["replay"];
    let held = &replay["held_capacity"];
    eprintln!("capacity with the hold: {held}");
    assert_eq!(held["drain_hold"].as_f64(), Some(2.0), "{held}");
    let profiled = report["configs"][0]["capacity_rps"]
        .as_f64()
        .expect("a profiled capacity");
    assert_eq!(held["profiled_capacity_rps"].as_f64(), Some(profiled));
    // The search starts at the capacity without the hold and bisects from there.
    let probes = held["probes"].as_array().expect("probes");
    let rates: Vec<f64> = probes
        .iter()
        .filter_map(|p| p["rate_rps"].as_f64())
        .collect();
    assert!(rates.contains(&profiled), "{held}");
    let capacity = held["capacity_rps"].as_f64().expect("a capacity");
    assert!(capacity > 0.0 && rates.contains(&capacity), "{held}");
    // The replay's load is its share of that capacity, served with the hold.
    let rate = replay["load"]["rate_rps"].as_f64().expect("a rate");
    assert!((rate - 0.5 * capacity).abs() < 1e-5, "{rate} {held}");
    assert!(
        replay["config"]
            .as_str()
            .is_some_and(|c| c.contains("hold=2")),
        "{}",
        replay["config"]
    );
    if let Some(share) = replay["gateway_predictions"]["load_over_capacity"].as_f64() {
        assert!((share - 0.5).abs() < 1e-3, "{share}");
    }
}

#[test]
fn bad_pilot_input_is_refused_with_the_key_at_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store::sqlite_url(&dir.path().join("strata.db"));
    for (text, extra, words) in [
        (
            WORKLOAD.replace("replay_s = 8", "replay_s = 0"),
            None,
            "pilot.replay_s",
        ),
        (
            WORKLOAD.replace("replay_s = 8", "replay_s = 8\nreplay_load = 3"),
            None,
            "pilot.replay_load",
        ),
        (
            WORKLOAD.replace("probe_requests", "probe_requets"),
            None,
            "probe_requets",
        ),
        (
            WORKLOAD.to_owned(),
            Some("c4-standard-8"),
            "not a GPU baseline",
        ),
        (WORKLOAD.to_owned(), Some("cheap"), "neither"),
    ] {
        let workload = write_workload(dir.path(), &text);
        let mut args = vec!["--workload", workload.to_str().expect("utf-8")];
        if let Some(b) = extra {
            args.extend(["--baseline", b]);
        }
        let output = pilot(&url, &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{words}: {stderr}");
        assert!(stderr.contains(words), "{words}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
