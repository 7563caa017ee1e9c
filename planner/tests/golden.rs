//! Golden files: worked examples (workload + catalog + profiles -> plan) compared byte for byte with
//! `tests/golden/*.json` and `*.txt`. Regenerate with `STRATA_BLESS=1 cargo test -p strata-planner --test golden`.

mod common;

use std::path::PathBuf;

use strata_planner::catalog::Catalog;
use strata_planner::plan::{Plan, PlanInput, plan};
use strata_planner::profile::ConfigProfile;
use strata_planner::workload::WorkloadFile;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `actual` with the golden file, or writes it when STRATA_BLESS=1.
fn check(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("STRATA_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with STRATA_BLESS=1 to create it)",
            path.display()
        )
    });
    if want != actual {
        let diff: Vec<String> = want
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(i, (a, b))| format!("line {}:\n- {a}\n+ {b}", i + 1))
            .collect();
        panic!(
            "{} differs from the plan ({} vs {} lines); first differences:\n{}\nrerun with STRATA_BLESS=1 if intended",
            path.display(),
            want.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}

fn check_plan(name: &str, p: &Plan) {
    let json = serde_json::to_string_pretty(p).expect("plan serializes") + "\n";
    check(&format!("{name}.json"), &json);
    check(&format!("{name}.txt"), &p.render_table());
    let back: Plan = serde_json::from_str(&json).expect("plan deserializes");
    let again = serde_json::to_string_pretty(&back).expect("plan serializes") + "\n";
    assert_eq!(again, json, "plan JSON round-trips");
}

#[test]
fn example_workload_on_builtin_catalog() {
    let mut input = common::example_input();
    input.sensitivity = true;
    input.validate_days = 1;
    input.seed = 7;
    check_plan("example", &plan(&input).expect("plan"));
}

#[test]
fn trace_with_per_token_fallback_and_tight_budget() {
    let dir = golden_path("trace_per_token");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("golden input");
    let file = WorkloadFile::from_toml_str(&read("workload.toml")).expect("workload");
    let trace = file.trace_file().map(read);
    let workload = file
        .into_workload(trace.as_deref())
        .expect("workload with trace");
    let mut catalog = Catalog::builtin();
    catalog.merge(Catalog::from_toml_str(&read("catalog.toml")).expect("user catalog"));
    let profiles = ConfigProfile::list_from_toml_str(&read("profiles.toml")).expect("profiles");
    let mut input = PlanInput::new(workload, catalog, profiles).expect("input");
    input.seed = 3;
    input.min_pool = 0;
    check_plan("trace_per_token", &plan(&input).expect("plan"));
}
