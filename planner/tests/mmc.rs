//! The simulator's FCFS station and its continuously batching host (with an instant prefill, a pace
//! that does not depend on the batch and steps a thousandth of the mean service time, it is an M/M/c
//! queue too) against the M/M/c closed form (Erlang C): mean wait and probability of waiting within 2%.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use strata_planner::dist::exponential;
use strata_planner::queueing::{erlang_c, mmc_mean_wait};
use strata_planner::service::ServiceCurve;
use strata_planner::sim::{BatchingHost, Station};

fn run(lambda: f64, mu: f64, c: u32, n: usize, seed: u64) -> (f64, f64) {
    let mut arrivals = ChaCha8Rng::seed_from_u64(seed);
    let mut service = ChaCha8Rng::seed_from_u64(seed.wrapping_add(1));
    let mut st = Station::new(c);
    let (mut t, mut wait_sum, mut waited) = (0.0, 0.0, 0usize);
    let warmup = n / 20;
    for i in 0..n {
        t += exponential(&mut arrivals, lambda);
        let (start, _) = st.admit(t, |_| exponential(&mut service, mu));
        if i >= warmup {
            wait_sum += start - t;
            waited += usize::from(start > t);
        }
    }
    let m = (n - warmup) as f64;
    (wait_sum / m, waited as f64 / m)
}

#[test]
fn mmc_matches_erlang_c_within_2_percent() {
    for &(lambda, mu, c) in &[(3.2, 1.0, 4u32), (6.0, 1.0, 8), (0.7, 1.0, 1)] {
        let (wq, pw) = run(lambda, mu, c, 2_000_000, 7);
        let want_wq = mmc_mean_wait(lambda, mu, c).expect("stable");
        let want_pw = erlang_c(lambda, mu, c).expect("stable");
        let (ew, ep) = (
            (wq - want_wq).abs() / want_wq,
            (pw - want_pw).abs() / want_pw,
        );
        let rho = lambda / (mu * f64::from(c));
        eprintln!(
            "M/M/{c} rho {rho:.2}: Wq {wq:.4} vs {want_wq:.4}, P(wait) {pw:.4} vs {want_pw:.4}"
        );
        assert!(
            ew < 0.02,
            "M/M/{c} lambda {lambda}: mean wait {wq:.4} vs {want_wq:.4} ({:.2}%)",
            ew * 100.0
        );
        assert!(
            ep < 0.02,
            "M/M/{c} lambda {lambda}: P(wait) {pw:.4} vs {want_pw:.4} ({:.2}%)",
            ep * 100.0
        );
    }
}

/// Mean wait and probability of waiting on a [`BatchingHost`] whose steps last a millisecond whatever
/// the batch, with exponentially many tokens per request (a mean of `1000 / mu`) and no prefill time. A
/// request has waited when its first token came more than two steps after it arrived (a request that
/// finds a free slot still waits for the step in flight).
/// The batching host's step, seconds.
const STEP_S: f64 = 1e-3;

fn run_batching(lambda: f64, mu: f64, c: u32, n: usize, seed: u64) -> (f64, f64) {
    let mut arrivals = ChaCha8Rng::seed_from_u64(seed);
    let mut service = ChaCha8Rng::seed_from_u64(seed.wrapping_add(1));
    let mut host = BatchingHost::new(&ServiceCurve {
        slots: c,
        prefill_tokens_per_s: 1e300,
        // The same pace up to a full batch (beyond the last point the curve's token rate would stay flat).
        tpot_by_batch: vec![(1.0, STEP_S), (f64::from(c.max(2)), STEP_S)],
        copies: 1.0,
        decode_step_by_batch: Vec::new(),
        step_prefill_tokens_per_s: None,
        prompt_step_s: 0.0,
        prompt_step_decode_s: None,
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        drain_hold: 0.0,
    });
    let warmup = n / 20;
    let mut t = 0.0;
    for _ in 0..n {
        t += exponential(&mut arrivals, lambda);
        host.admit(t, 0, 1.0, 1.0 + exponential(&mut service, mu) / STEP_S);
    }
    host.finish_all();
    let mut done = host.take_finished();
    done.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    let measured = &done[warmup..];
    let m = measured.len() as f64;
    let wait_sum: f64 = measured.iter().map(|f| f.first_token - f.arrival).sum();
    let waited = measured
        .iter()
        .filter(|f| f.first_token - f.arrival > 2.0 * STEP_S)
        .count();
    (wait_sum / m, waited as f64 / m)
}

#[test]
fn the_batching_host_matches_erlang_c_within_2_percent() {
    for &(lambda, mu, c) in &[(3.2, 1.0, 4u32), (0.7, 1.0, 1)] {
        let (wq, pw) = run_batching(lambda, mu, c, 1_000_000, 11);
        let want_wq = mmc_mean_wait(lambda, mu, c).expect("stable");
        let want_pw = erlang_c(lambda, mu, c).expect("stable");
        let (ew, ep) = (
            (wq - want_wq).abs() / want_wq,
            (pw - want_pw).abs() / want_pw,
        );
        assert!(
            ew < 0.02 && ep < 0.02,
            "M/M/{c} at {lambda}: wait {wq} vs {want_wq}, P(wait) {pw} vs {want_pw}"
        );
    }
}
