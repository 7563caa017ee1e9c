//! The report in words, as `strata pilot` prints it: verdict, classes, quality, plan, and the replay
//! predicted against observed.

use std::fmt::Write as _;

use strata_planner::{pace::Band, pilot::ReplayLoad};

use super::{
    gateway_predictions::GatewayPredictions,
    report::{Comparison, HeldCapacity, HostLoad, PilotReport},
};
use crate::prediction_error::ErrorSummary;

impl PilotReport {
    /// The human summary: verdict, per-class findings, quality, plan, and predicted against observed.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let d = &self.decision;
        let _ = writeln!(
            out,
            "verdict: {} (exit {}) - {}",
            self.verdict, self.exit_code, self.summary
        );
        let _ = writeln!(
            out,
            "cost per month: ${:.2} planned vs ${:.2} all on the GPU baseline; savings ${:.2}",
            d.monthly_cost_usd, d.monthly_baseline_usd, d.monthly_savings_usd
        );
        for reason in &d.reasons {
            let _ = writeln!(out, "  - {reason}");
        }
        let _ = writeln!(
            out,
            "\n{:<14} {:>8} {:>10} {:>11} {:>11} {:>12}  notes",
            "class", "migrate", "CPU share", "attainment", "at 2x load", "GPU at 2x"
        );
        for c in &d.classes {
            let _ = writeln!(
                out,
                "{:<14} {:>8} {:>9.1}% {:>10.2}% {:>10.2}% {:>11.1}%  {}",
                c.class,
                if c.migrate { "yes" } else { "no" },
                c.cpu_share * 100.0,
                c.attainment * 100.0,
                c.attainment_2x * 100.0,
                c.gpu_share_2x * 100.0,
                c.reasons.join("; ")
            );
        }
        let _ = writeln!(out, "\nquality against f32 ({}):", crate::quality::TEXT_ID);
        for g in &self.quality {
            let tasks = g
                .measured
                .task_pass_rate
                .map(|t| format!(", tasks {:.0}%", t * 100.0))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<6} {} perplexity {:.3} ({:+.2}%), top-1 {:.1}%{tasks}{}",
                g.weights,
                if g.passed { "pass" } else { "FAIL" },
                g.measured.perplexity,
                g.perplexity_increase * 100.0,
                g.measured.top1_agreement * 100.0,
                if g.reasons.is_empty() {
                    String::new()
                } else {
                    format!(": {}", g.reasons.join("; "))
                }
            );
            for note in &g.notes {
                let _ = writeln!(out, "         {note}");
            }
        }
        if let Some(plan) = &self.plan {
            let _ = writeln!(
                out,
                "\nplan {}: {} on {} ({}), peak {} CPU instances, GPU share {:.1}%",
                plan.id,
                plan.config,
                plan.instance_type,
                plan.region,
                plan.peak_cpu_instances,
                plan.gpu_share * 100.0
            );
        }
        if let Some(replay) = self.replay.as_ref().filter(|r| r.requests == 0) {
            let _ = writeln!(
                out,
                "\nreplay: nothing to replay, the plan serves no traffic on CPU{}",
                if replay.with_gpu {
                    ""
                } else {
                    " (and no --gpu-endpoint was given)"
                }
            );
        }
        if let Some(replay) = self.replay.as_ref().filter(|r| r.requests > 0) {
            let offered = offered_load(&replay.load, replay.held_capacity.as_ref());
            let _ = writeln!(
                out,
                "\nreplay: {} requests over {:.0} s at {:.2} req/s ({offered}, one host of {}), {} errors",
                replay.requests,
                replay.duration_s,
                replay.load.rate_rps,
                replay.config,
                replay.errors
            );
            let _ = writeln!(
                out,
                "{:<14} {:>5} {:>22} {:>22}",
                "class", "reqs", "E2E p99 obs/pred (s)", "TTFT p99 obs/pred (s)"
            );
            for c in &replay.classes {
                comparison_row(&mut out, &c.class, &c.p99);
            }
            comparison_row(&mut out, "all requests", &replay.all);
            if let Some(as_profiled) = &replay.all_as_profiled {
                comparison_row(&mut out, "  as profiled", as_profiled);
            }
            if let Some(c) = &replay.calibration {
                let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}x"));
                let _ = writeln!(
                    out,
                    "calibration: {} requests over {:.0} s through the gateway, {}; engine steps {} (decode) and \
                     {} (prompts) of the profile's step model, which the prediction is scaled by",
                    c.requests,
                    c.duration_s,
                    c.timing(),
                    ratio(c.decode_over_profiled),
                    ratio(c.prompt_over_profiled)
                );
                let _ = writeln!(
                    out,
                    "time outside the engine's steps: {:.1} ms between steps ({} gaps), added to every step, and \
                     {:.0} ms per request outside the engine (the clients' mean TTFT less the engine's own), added to each \
                     request's TTFT and E2E",
                    c.step_gap_s * 1000.0,
                    c.step_gaps,
                    c.request_overhead_s * 1000.0
                );
            }
            if let Some(spread) = &replay.pace_spread {
                let band = |b: Option<Band>| {
                    b.map_or("-".into(), |b| format!("{:.2}-{:.2} s", b.low, b.high))
                };
                let _ = writeln!(
                    out,
                    "prediction: the median of {} simulations with the engine's pace spread by {:.1}% (for a whole \
                     run, and afresh every {:.0} s); p99 E2E {} and TTFT {} in the middle 80% of them",
                    spread.runs,
                    spread.sigma * 100.0,
                    spread.block_s,
                    band(replay.all.predicted_e2e_p99_band_s),
                    band(replay.all.predicted_ttft_p99_band_s)
                );
            }
            if let Some(g) = &replay.gateway_predictions {
                gateway_prediction_lines(&mut out, g);
            }
            if let Some(load) = &replay.host_load {
                host_load_line(&mut out, load);
            }
            let _ = writeln!(
                out,
                "replay cost ${:.4} observed vs ${:.4} predicted",
                replay.observed_cost_usd, replay.predicted_cost_usd
            );
            if let Some(pace) = &replay.host_pace {
                let _ = writeln!(
                    out,
                    "host pace ({}): {:.1} output tokens/s profiled, {:.1} before the replay, {:.1} after ({:.0}%)",
                    pace.shape,
                    pace.profiled_output_tokens_per_s,
                    pace.before_replay_output_tokens_per_s,
                    pace.after_replay_output_tokens_per_s,
                    pace.replay_over_profiled * 100.0
                );
            }
        }
        out
    }
}

/// The replay gateway's per-request prediction errors: a line per pool and latency, raw and
/// corrected.
fn gateway_prediction_lines(out: &mut String, g: &GatewayPredictions) {
    let load = g.load_over_capacity.map_or(String::new(), |l| {
        format!(" at {:.0}% of the config's capacity", l * 100.0)
    });
    let _ = writeln!(
        out,
        "gateway's per-request predictions ({} requests{load}): MAPE and p90 of |error|, raw -> corrected online",
        g.requests
    );
    let pct = |s: Option<ErrorSummary>, f: fn(&ErrorSummary) -> f64| {
        s.as_ref()
            .map_or("-".into(), |s| format!("{:.1}%", f(s) * 100.0))
    };
    for p in &g.pools {
        for (name, e) in [("TTFT", p.ttft), ("E2E", p.e2e)] {
            if e.corrected.is_none() {
                continue;
            }
            let _ = writeln!(
                out,
                "  {:<10} {:<4} MAPE {} -> {}, p90 {} -> {}",
                p.pool,
                name,
                pct(e.raw, |s| s.mape),
                pct(e.corrected, |s| s.mape),
                pct(e.raw, |s| s.p90),
                pct(e.corrected, |s| s.p90)
            );
        }
        if let (Some(none), Some(some)) = (p.e2e_by_later.none, p.e2e_by_later.some) {
            let _ = writeln!(
                out,
                "  {:<10} E2E  corrected, by later requests on the endpoint while it ran: none {} (MAPE {:.1}%), some {} (MAPE {:.1}%, bias {:+.1}%)",
                p.pool,
                none.requests,
                none.mape * 100.0,
                some.requests,
                some.mape * 100.0,
                some.bias * 100.0
            );
        }
    }
}

/// One line of the replay table: requests, then p99 E2E and TTFT observed/predicted with the error.
fn comparison_row(out: &mut String, name: &str, c: &Comparison) {
    let err = |e: Option<f64>| e.map_or("-".into(), |e| format!("{:+.0}%", e * 100.0));
    let _ = writeln!(
        out,
        "{:<14} {:>5} {:>8.2}/{:<6.2} {:>6} {:>8.2}/{:<6.2} {:>6}",
        name,
        c.requests,
        c.observed_e2e_p99_s,
        c.predicted_e2e_p99_s,
        err(c.e2e_p99_error),
        c.observed_ttft_p99_s,
        c.predicted_ttft_p99_s,
        err(c.ttft_p99_error)
    );
}

/// What the replay offered: the plan hour's load, or a share of the config's capacity (with the drain
/// hold's capacity when it was searched).
fn offered_load(load: &ReplayLoad, held: Option<&HeldCapacity>) -> String {
    let Some(share) = load.capacity_share else {
        return format!("plan hour {}", load.hour);
    };
    let held = held.map_or(String::new(), |h| {
        format!(
            " with the drain hold ({:.2} req/s; {:.2} as profiled, without it)",
            h.capacity_rps, h.profiled_capacity_rps
        )
    });
    format!(
        "{:.0}% of the capacity{held}, plan hour {}'s mix",
        share * 100.0,
        load.hour
    )
}

/// Whether the host was shared during the replay, and by how much.
fn host_load_line(out: &mut String, load: &HostLoad) {
    let _ = writeln!(
        out,
        "host during the replay: {}; other processes used {:.2} of {} cores on average (the pilot, its \
         engine and gateway {:.2}; shared above {:.2})",
        if load.shared { "SHARED" } else { "not shared" },
        load.other_cores,
        load.cores,
        load.pilot_cores,
        load.shared_above_cores
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offered_load_names_the_capacity_its_share_is_of() {
        let plan_hour = ReplayLoad {
            hour: 14,
            rate_rps: 1.05,
            class_shares: vec![0.6, 0.4],
            includes_gpu_traffic: false,
            capacity_share: None,
        };
        assert_eq!(offered_load(&plan_hour, None), "plan hour 14");
        let share = plan_hour.at_capacity_share(4.63, 0.65);
        assert_eq!(
            offered_load(&share, None),
            "65% of the capacity, plan hour 14's mix"
        );
        let held = HeldCapacity {
            drain_hold: 2.0,
            capacity_rps: 3.1,
            profiled_capacity_rps: 4.63,
            probes: Vec::new(),
        };
        assert_eq!(
            offered_load(&share, Some(&held)),
            "65% of the capacity with the drain hold (3.10 req/s; 4.63 as profiled, without it), \
             plan hour 14's mix"
        );
    }

    #[test]
    fn the_host_line_says_whether_the_host_was_shared() {
        let mut load = HostLoad {
            window_s: 60.0,
            cores: 2,
            pilot_cores: 1.4,
            other_cores: 0.52,
            shared_above_cores: 0.25,
            shared: true,
        };
        let mut out = String::new();
        host_load_line(&mut out, &load);
        assert!(out.contains("SHARED"), "{out}");
        assert!(out.contains("0.52 of 2 cores"), "{out}");
        load.shared = false;
        out.clear();
        host_load_line(&mut out, &load);
        assert!(out.contains("not shared"), "{out}");
    }
}
