//! Invariants over seeded random cases: same seed gives the same plan; more traffic never lowers the
//! unconstrained cost; more budget never raises a class's simulated p99 (rejections count as misses).

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strata_planner::plan::plan;
use strata_planner::sim::{SimOptions, simulate};
use strata_planner::workload::Arrivals;

#[test]
fn same_seed_same_plan() {
    let mut input = common::example_input();
    input.validate_days = 1;
    input.sensitivity = true;
    input.seed = 42;
    let a = plan(&input).expect("plan");
    let b = plan(&input).expect("plan");
    assert_eq!(a, b);
    assert_eq!(
        serde_json::to_string(&a).ok(),
        serde_json::to_string(&b).ok()
    );
    input.seed = 43;
    let c = plan(&input).expect("plan");
    assert_eq!(a.hours, c.hours, "the search does not depend on the seed");
    assert_ne!(a.validation, c.validation, "the validating replay does");
}

#[test]
fn more_traffic_never_lowers_cost() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut base = common::example_input();
    base.workload.budget.per_day = None;
    for case in 0..40 {
        let rates: Vec<f64> = (0..24).map(|_| rng.random::<f64>() * 4.0).collect();
        base.workload.arrivals = Arrivals::Hourly(rates);
        base.min_pool = rng.random_range(0..3);
        base.headroom = rng.random::<f64>() * 0.5;
        let k1 = 0.1 + rng.random::<f64>() * 2.0;
        let k2 = k1 * (1.0 + rng.random::<f64>());
        let mut lo = base.clone();
        lo.workload = base.workload.scaled(k1);
        let mut hi = base.clone();
        hi.workload = base.workload.scaled(k2);
        let (a, b) = (plan(&lo).expect("plan"), plan(&hi).expect("plan"));
        assert!(
            b.totals.cost_per_day >= a.totals.cost_per_day - 1e-9,
            "case {case}: traffic x{k1:.3} costs {} but x{k2:.3} costs {}",
            a.totals.cost_per_day,
            b.totals.cost_per_day
        );
    }
}

/// p99 over arrivals, a rejected share above 1% counting as an unbounded p99.
fn effective_p99(e2e: f64, rejected: f64) -> f64 {
    if rejected > 0.01 { f64::INFINITY } else { e2e }
}

#[test]
fn more_budget_never_raises_simulated_p99() {
    let mut input = common::example_input();
    input.workload.budget.policy.clear();
    input.workload.arrivals = match &input.workload.arrivals {
        Arrivals::Hourly(r) => Arrivals::Hourly(r.iter().map(|x| x * 2.0).collect()),
        other => other.clone(),
    };
    let opts = SimOptions::default();
    let mut last: Option<Vec<f64>> = None;
    let mut last_rejected: Option<Vec<f64>> = None;
    for budget in [8.0, 12.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 22.0, 25.0] {
        input.workload.budget.per_day = Some(budget);
        let p = plan(&input).expect("plan");
        let r = simulate(&p, &input.workload, &input.profiles, 5, &opts).expect("sim");
        let now: Vec<f64> = r
            .classes
            .iter()
            .map(|c| effective_p99(c.e2e_p99_s, c.rejected_share))
            .collect();
        if let Some(prev) = &last {
            for ((a, b), c) in prev.iter().zip(&now).zip(&r.classes) {
                assert!(
                    *b <= a * 1.02,
                    "budget {budget}: {} p99 e2e rose from {a} to {b}",
                    c.class
                );
            }
        }
        let rejected: Vec<f64> = r.classes.iter().map(|c| c.rejected_share).collect();
        if let Some(prev) = &last_rejected {
            for ((a, b), c) in prev.iter().zip(&rejected).zip(&r.classes) {
                assert!(
                    *b <= a + 0.005,
                    "budget {budget}: {} rejected share rose from {a} to {b}",
                    c.class
                );
            }
        }
        last = Some(now);
        last_rejected = Some(rejected);
    }
}
