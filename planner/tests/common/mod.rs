//! Inputs shared by the integration tests: the shipped example workload and profiles.

#![allow(dead_code, unreachable_pub)]

use strata_planner::catalog::Catalog;
use strata_planner::plan::PlanInput;
use strata_planner::profile::ConfigProfile;
use strata_planner::workload::Workload;

pub const WORKLOAD: &str = include_str!("../../examples/workload.toml");
pub const PROFILES: &str = include_str!("../../examples/profiles.json");

/// The example plan input: sensitivity and validation off unless a test turns them on.
pub fn example_input() -> PlanInput {
    let w = Workload::from_toml_str(WORKLOAD).expect("example workload parses");
    let p = ConfigProfile::list_from_json_str(PROFILES).expect("example profiles parse");
    let mut input = PlanInput::new(w, Catalog::builtin(), p).expect("example has a GPU fallback");
    input.allow_estimates = true;
    input.sensitivity = false;
    input.validate_days = 0;
    input
}
