//! `strata plan`, run as a process against a SQLite store of each test's own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `strata ARGS` on the store in `dir`, with the example files' folder at hand.
fn strata(dir: &Path, args: &[&str]) -> Output {
    let url = format!("sqlite://{}", dir.join("strata.db").display());
    let output = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .args(["--database-url", &url])
        .env_remove("RUST_LOG")
        .env_remove("STRATA_DATABASE_URL")
        .output()
        .expect("run strata");
    eprintln!(
        "--- strata {args:?}: {}\n--- stdout:\n{}--- stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn example(name: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "planner", "examples", name]
        .iter()
        .collect();
    path.display().to_string()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The line of `strata store status` that starts with `label`, its count.
fn status_count(dir: &Path, label: &str) -> usize {
    let output = strata(dir, &["store", "status"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} line in:\n{out}"));
    line[label.len()..].trim().parse().expect("a count")
}

#[test]
fn plan_prints_the_table_and_records_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (workload, profiles) = (example("workload.toml"), example("profiles.json"));
    let args = [
        "plan",
        "--workload",
        &workload,
        "--profiles",
        &profiles,
        "--allow-estimates",
    ];
    let output = strata(dir.path(), &args);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    for needle in [
        "smol-assistant",
        "ESTIMATE",
        "g2-standard-8",
        "chat",
        "summarize",
    ] {
        assert!(table.contains(needle), "{needle} missing from:\n{table}");
    }
    assert_eq!(status_count(dir.path(), "workloads"), 1);
    assert_eq!(status_count(dir.path(), "plans"), 1);
    assert!(status_count(dir.path(), "prices") > 0);

    // Planning again reuses the workload row, adds a plan, and leaves the prices as they were.
    let prices = status_count(dir.path(), "prices");
    let output = strata(
        dir.path(),
        &[&args[..], &["--json", "--seed", "7"]].concat(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON plan");
    assert_eq!(json["workload"], "smol-assistant");
    assert_eq!(json["hours"].as_array().map(Vec::len), Some(24));
    assert!(
        !stderr(&output).contains("differs"),
        "same file, same workload"
    );
    assert_eq!(status_count(dir.path(), "workloads"), 1);
    assert_eq!(status_count(dir.path(), "plans"), 2);
    assert_eq!(status_count(dir.path(), "prices"), prices);
}

#[test]
fn estimates_need_allow_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let (workload, profiles) = (example("workload.toml"), example("profiles.json"));
    let output = strata(
        dir.path(),
        &["plan", "--workload", &workload, "--profiles", &profiles],
    );
    assert!(!output.status.success());
    assert_eq!(status_count(dir.path(), "plans"), 0);
}

#[test]
fn without_profiles_or_runs_the_error_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let workload = example("workload.toml");
    let output = strata(dir.path(), &["plan", "--workload", &workload]);
    assert!(!output.status.success());
    let err = stderr(&output);
    for needle in [
        "no measured runs",
        "strata profile",
        "--profiles",
        "--allow-estimates",
    ] {
        assert!(err.contains(needle), "{needle} missing from:\n{err}");
    }
}

#[test]
fn bad_input_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = example("profiles.json");

    let missing = dir.path().join("no-such-workload.toml");
    let missing = missing.display().to_string();
    let output = strata(
        dir.path(),
        &["plan", "--workload", &missing, "--profiles", &profiles],
    );
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(&format!("reading workload file {missing}")),
        "{err}"
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\n[[class]\nname = 1\n").unwrap();
    let bad = bad.display().to_string();
    let output = strata(
        dir.path(),
        &["plan", "--workload", &bad, "--profiles", &profiles],
    );
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(&format!("{bad}: not a valid workload")),
        "{err}"
    );
    assert!(err.contains("line 2"), "the TOML error's line: {err}");

    let workload = example("workload.toml");
    let catalog = dir.path().join("prices.toml");
    std::fs::write(&catalog, "[[instance]]\nprovider = \"gcp\"\n").unwrap();
    let catalog = catalog.display().to_string();
    let output = strata(
        dir.path(),
        &[
            "plan",
            "--workload",
            &workload,
            "--catalog",
            &catalog,
            "--profiles",
            &profiles,
        ],
    );
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(&format!("{catalog}: not a valid catalog")),
        "{err}"
    );
    assert_eq!(status_count(dir.path(), "plans"), 0);
}
