//! Bad inputs are refused with errors that name the file kind, the entry, the key or the line.

mod common;

use strata_planner::PlannerError;
use strata_planner::catalog::Catalog;
use strata_planner::plan::{PlanInput, plan};
use strata_planner::workload::WorkloadFile;

#[test]
fn catalog_errors_name_line_and_key() {
    let err = Catalog::from_toml_str("[[instance]]\nprovider = \"gcp\"\nvcpus = \"eight\"\n")
        .expect_err("bad type");
    let msg = err.to_string();
    assert!(
        msg.starts_with("catalog:") && msg.contains("line 3") && msg.contains("vcpus"),
        "{msg}"
    );
}

#[test]
fn workload_errors_name_the_key() {
    let bad = common::WORKLOAD.replace("hourly_rps = [0.3, 0.2,", "hourly_rps = [0.2,");
    let err = WorkloadFile::from_toml_str(&bad)
        .and_then(|f| f.into_workload(None))
        .expect_err("23 rates");
    assert_eq!(
        err.to_string(),
        "workload: smol-assistant: `arrivals.hourly_rps` needs 24 values, got 23"
    );
    let bad = common::WORKLOAD.replace("sla = { e2e_p99_s = 15.0 }", "sla = {}");
    let err = WorkloadFile::from_toml_str(&bad)
        .and_then(|f| f.into_workload(None))
        .expect_err("no sla");
    assert_eq!(
        err.to_string(),
        "workload: summarize: `sla` needs ttft_p99_s and/or e2e_p99_s"
    );
    let bad = common::WORKLOAD.replace("kind = \"instance\"", "kind = \"tpu\"");
    let err = WorkloadFile::from_toml_str(&bad)
        .expect_err("unknown kind")
        .to_string();
    assert!(err.contains("tpu") && err.contains("line"), "{err}");
}

#[test]
fn trace_file_must_be_passed_in() {
    let with_trace =
        common::WORKLOAD.replace("hourly_rps = [", "trace_file = \"t.csv\"\nignored = [");
    let err = WorkloadFile::from_toml_str(&with_trace).expect_err("unknown key `ignored`");
    assert!(err.to_string().contains("ignored"));
    let f = WorkloadFile::from_toml_str(&common::WORKLOAD.replace(
        "hourly_rps = [0.3, 0.2, 0.2, 0.2, 0.2, 0.3, 0.5, 0.9, 1.6, 2.4, 3.0, 3.2,\n              3.2, 3.0, 3.2, 3.0, 2.6, 2.0, 1.5, 1.2, 0.9, 0.7, 0.5, 0.4]",
        "trace_file = \"t.csv\"",
    ))
    .expect("parses");
    assert_eq!(f.trace_file(), Some("t.csv"));
    let err = f.clone().into_workload(None).expect_err("trace not read");
    assert!(err.to_string().contains("`t.csv` was not read"), "{err}");
    let err = f
        .into_workload(Some(
            "timestamp_s,class,prompt_tokens,output_tokens\n1,chat,5\n",
        ))
        .expect_err("short line");
    assert_eq!(
        err,
        PlannerError::Csv {
            line: 2,
            problem: "expected 4 fields, got 3".into()
        }
    );
}

#[test]
fn plan_errors_instead_of_panicking() {
    let mut input = common::example_input();
    input.profiles.clear();
    assert!(matches!(plan(&input), Err(PlannerError::Infeasible(_))));
    let mut input = common::example_input();
    input.headroom = 1.5;
    assert!(
        plan(&input)
            .expect_err("headroom")
            .to_string()
            .contains("`headroom`")
    );
    let mut input = common::example_input();
    input.allow_estimates = false;
    assert!(
        matches!(plan(&input), Err(PlannerError::Infeasible(_))),
        "estimates are opt-in"
    );
    let err = PlanInput::from_texts(
        common::WORKLOAD,
        None,
        Some("[[instance]]\nname = 1\n"),
        common::PROFILES,
    )
    .expect_err("bad user catalog");
    assert!(err.to_string().starts_with("catalog:"), "{err}");
    let err = PlanInput::from_texts(common::WORKLOAD, None, None, "[{]").expect_err("bad profiles");
    assert!(
        err.to_string().starts_with("profiles:") && err.to_string().contains("line 1"),
        "{err}"
    );
}

#[test]
fn every_candidate_is_priced() {
    let input = common::example_input();
    let all = strata_planner::plan::candidate_costs(&input).expect("candidates");
    // 2 configs x 10 CPU entries in the builtin catalog (GPU types are not CPU candidates).
    assert_eq!(all.len(), 20);
    let cheapest = all
        .first()
        .and_then(|c| c.dollars_per_million_output)
        .expect("priced");
    assert!(
        all.iter()
            .all(|c| c.dollars_per_million_output.is_none_or(|d| d >= cheapest))
    );
    assert!(
        all.iter().all(|c| c.provenance.is_estimate()),
        "the example curves are labelled estimates"
    );
}

/// Profiles measured on random weights are labelled as such and never planned beside real models'.
#[test]
fn synthetic_weights_are_labelled_and_never_mixed_with_real_profiles() {
    use strata_planner::profile::{ConfigProfile, Provenance};
    let example = common::example_input();
    let mut profiles = ConfigProfile::list_from_json_str(common::PROFILES).expect("profiles");
    for p in &mut profiles {
        p.provenance = Provenance::Measured;
    }
    profiles[0].provenance = Provenance::SyntheticWeights;
    let err = PlanInput::new(
        example.workload.clone(),
        example.catalog.clone(),
        profiles.clone(),
    )
    .expect_err("mixed");
    let msg = err.to_string();
    assert!(
        msg.contains(&profiles[0].id) && msg.contains("synthetic weights"),
        "{msg}"
    );

    for p in &mut profiles {
        p.provenance = Provenance::SyntheticWeights;
    }
    let mut input = PlanInput::new(example.workload, example.catalog, profiles).expect("one kind");
    input.sensitivity = false;
    input.validate_days = 0;
    let table = plan(&input).expect("plans").render_table();
    assert!(
        table.contains(Provenance::SYNTHETIC_LABEL),
        "the plan says its weights were random:\n{table}"
    );
}
