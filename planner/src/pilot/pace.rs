//! The replay's prediction over a spread of the engine's pace. A replay of a few minutes has its p99 set
//! by a handful of requests, and whether one of them gets its last token out just before or just after
//! a long prompt step can move that p99 by a fifth, on a pace a percent or two off. Any single
//! simulation on a point estimate of the pace lands on one side of such an edge by chance. So the
//! replay is simulated many times with the engine's pace spread as it was measured to move: each run
//! scales every step by a factor of its own (stratified quantiles of a log-normal, for how far the
//! calibrated pace may be off) and by a factor drawn afresh for each block of time (for the slower and
//! faster stretches within a run); the prediction is the p99 of the middle run (the runs' median: a
//! slow run's p99 rises more than a fast run's falls, and their mean would stand for no run), with the
//! band that the middle of them spans.

use serde::{Deserialize, Serialize};

use super::replay::predict_replay_drifting;
use crate::dist::{normal_quantile, r6};
use crate::error::Result;
use crate::plan::Plan;
use crate::profile::ConfigProfile;
use crate::sim::{ClassSim, PaceDrift, SimReport};
use crate::step::StepModel;
use crate::workload::{TraceRecord, Workload};

/// A replay to predict: the plan with its workload and profiles, the trace replayed, whether a GPU
/// endpoint takes the fallback, and the simulation's seed.
#[derive(Debug, Clone, Copy)]
pub struct ReplayCase<'a> {
    /// The plan whose chosen config serves the replay.
    pub plan: &'a Plan,
    /// Its workload.
    pub workload: &'a Workload,
    /// The profiles the plan was made from.
    pub profiles: &'a [ConfigProfile],
    /// The requests replayed.
    pub trace: &'a [TraceRecord],
    /// Whether a GPU endpoint takes the fallback.
    pub with_gpu: bool,
    /// The simulation's seed.
    pub seed: u64,
}

/// How the engine's pace is spread around its calibrated value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaceSpread {
    /// Standard deviation of the log of the step-time factors (0.03: about 3%).
    pub sigma: f64,
    /// Simulations, each with its whole-run factor at the quantile (i + 0.5) / runs.
    pub runs: u32,
    /// Seconds of each block with a factor of its own within a run (0: none).
    #[serde(default)]
    pub block_s: f64,
}

impl PaceSpread {
    /// No spread: one simulation at the given pace.
    pub const NONE: PaceSpread = PaceSpread {
        sigma: 0.0,
        runs: 1,
        block_s: 0.0,
    };
}

/// Lowest and highest value of the middle 80% of the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Band {
    /// 10th percentile of the runs' values.
    pub low: f64,
    /// 90th percentile of the runs' values.
    pub high: f64,
}

impl Band {
    /// The band of `values` (a point band for one value; `None` for none).
    pub fn of(values: &[f64]) -> Option<Band> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Band {
            low: r6(at(0.1)),
            high: r6(at(0.9)),
        })
    }
}

/// The p99 bands of one class (or of every request together).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct P99Bands {
    /// p99 TTFT over the runs, seconds.
    pub ttft_s: Band,
    /// p99 E2E over the runs, seconds.
    pub e2e_s: Band,
}

/// The replay predicted at each pace of a spread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpreadPrediction {
    /// The point prediction: the runs' median p99s, and their attainment, shares and costs averaged.
    pub point: SimReport,
    /// The step-time factor of each run (1: the calibrated pace).
    pub paces: Vec<f64>,
    /// Every request together.
    pub all: P99Bands,
    /// Per class, in the workload's order.
    pub classes: Vec<P99Bands>,
}

/// Predicts the replay of `trace` (as [`crate::pilot::predict_replay`]) with the chosen config's step
/// model (`steps` in its place when given) scaled by each whole-run factor of `spread`, its pace
/// drifting block by block. A profile without a usable step model has no pace to spread: its one
/// prediction comes back with point bands.
///
/// # Errors
/// As [`crate::pilot::predict_replay`].
pub fn predict_replay_over_paces(
    case: ReplayCase<'_>,
    steps: Option<&StepModel>,
    spread: PaceSpread,
) -> Result<SpreadPrediction> {
    let ReplayCase {
        plan,
        workload,
        profiles,
        trace,
        with_gpu,
        seed,
    } = case;
    let chosen = profiles
        .iter()
        .position(|p| p.id == plan.chosen.config)
        .and_then(|i| Some((i, steps.or(profiles[i].step_model.as_ref())?)))
        .filter(|(_, m)| m.is_usable());
    let paces = match chosen {
        Some(_) => pace_factors(spread),
        None => vec![1.0],
    };
    let drifts = chosen.is_some() && spread.block_s > 0.0 && spread.sigma > 0.0;
    let mut runs = Vec::with_capacity(paces.len());
    for (run, &pace) in paces.iter().enumerate() {
        let mut scaled = profiles.to_vec();
        if let Some((i, model)) = &chosen {
            scaled[*i].step_model = Some(model.scaled(pace, pace));
        }
        let drift = drifts.then(|| PaceDrift {
            block_s: spread.block_s,
            sigma: spread.sigma,
            seed: seed.wrapping_add(run as u64),
        });
        runs.push(predict_replay_drifting(
            plan, workload, &scaled, trace, with_gpu, seed, drift,
        )?);
    }
    Ok(SpreadPrediction {
        all: bands(&runs, |r| (r.ttft_p99_s, r.e2e_p99_s)),
        classes: (0..workload.classes.len())
            .map(|c| {
                bands(&runs, |r| {
                    r.classes
                        .get(c)
                        .map_or((0.0, 0.0), |k| (k.ttft_p99_s, k.e2e_p99_s))
                })
            })
            .collect(),
        point: point_report(&runs),
        paces: paces.into_iter().map(r6).collect(),
    })
}

/// The step-time factors of `spread`: exp(sigma x z) at the standard normal's quantiles
/// (i + 0.5) / runs, so that the runs stand for the spread in equal shares.
pub fn pace_factors(spread: PaceSpread) -> Vec<f64> {
    let runs = spread.runs.max(1);
    let sigma = if spread.sigma.is_finite() {
        spread.sigma.max(0.0)
    } else {
        0.0
    };
    (0..runs)
        .map(|i| (sigma * normal_quantile((f64::from(i) + 0.5) / f64::from(runs))).exp())
        .collect()
}

fn bands(runs: &[SimReport], p99s: impl Fn(&SimReport) -> (f64, f64)) -> P99Bands {
    let (ttft, e2e): (Vec<f64>, Vec<f64>) = runs.iter().map(p99s).unzip();
    let point = Band {
        low: 0.0,
        high: 0.0,
    };
    P99Bands {
        ttft_s: Band::of(&ttft).unwrap_or(point),
        e2e_s: Band::of(&e2e).unwrap_or(point),
    }
}

/// The runs' point report: median p99s, mean shares, attainment and costs (the first run's when there
/// is one run; runs share their seed, trace and plan, so their request counts agree).
fn point_report(runs: &[SimReport]) -> SimReport {
    let Some(first) = runs.first() else {
        return SimReport::empty(0);
    };
    let mean =
        |f: &dyn Fn(&SimReport) -> f64| r6(runs.iter().map(f).sum::<f64>() / runs.len() as f64);
    let median = |f: &dyn Fn(&SimReport) -> f64| r6(median_of(runs.iter().map(f).collect()));
    let classes = first
        .classes
        .iter()
        .enumerate()
        .map(|(c, k)| {
            let of = |f: &dyn Fn(&ClassSim) -> f64| {
                mean(&|r: &SimReport| r.classes.get(c).map_or(0.0, f))
            };
            let middle = |f: &dyn Fn(&ClassSim) -> f64| {
                median(&|r: &SimReport| r.classes.get(c).map_or(0.0, f))
            };
            let (ttft, e2e) = (middle(&|x| x.ttft_p99_s), middle(&|x| x.e2e_p99_s));
            let rejected_share = of(&|x| x.rejected_share);
            ClassSim {
                class: k.class.clone(),
                requests: k.requests,
                rejected_share,
                gpu_share: of(&|x| x.gpu_share),
                ttft_p99_s: ttft,
                e2e_p99_s: e2e,
                sla: k.sla,
                attainment: of(&|x| x.attainment),
                meets_sla: rejected_share == 0.0 && k.sla.met_by(ttft, e2e),
            }
        })
        .collect();
    SimReport {
        seed: first.seed,
        days: first.days,
        requests: first.requests,
        gpu_share: mean(&|r| r.gpu_share),
        rejected_share: mean(&|r| r.rejected_share),
        cpu_cost: mean(&|r| r.cpu_cost),
        gpu_cost: mean(&|r| r.gpu_cost),
        cost_per_day: mean(&|r| r.cost_per_day),
        ttft_p99_s: median(&|r| r.ttft_p99_s),
        e2e_p99_s: median(&|r| r.e2e_p99_s),
        cpu_ttft_p50_s: median(&|r| r.cpu_ttft_p50_s),
        classes,
    }
}

/// The median of `values` (the mean of the middle two for an even count; 0 for none).
fn median_of(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The factors centre on 1 in the log, rise with the quantile, and span about the spread's
    /// sigma on either side; no spread is the one pace.
    #[test]
    fn pace_factors_spread_as_the_log_normal() {
        let f = pace_factors(PaceSpread {
            sigma: 0.05,
            runs: 15,
            block_s: 0.0,
        });
        assert_eq!(f.len(), 15);
        assert!((f[7] - 1.0).abs() < 1e-12, "{f:?}");
        assert!(f.windows(2).all(|w| w[0] < w[1]), "{f:?}");
        let logs: Vec<f64> = f.iter().map(|x| x.ln()).collect();
        assert!(logs.iter().sum::<f64>().abs() < 1e-9);
        let sd = (logs.iter().map(|l| l * l).sum::<f64>() / 15.0).sqrt();
        assert!((sd - 0.05).abs() < 0.006, "{sd}");
        let still = |sigma, runs| PaceSpread {
            sigma,
            runs,
            block_s: 10.0,
        };
        assert_eq!(pace_factors(still(0.0, 3)), vec![1.0; 3]);
        assert_eq!(pace_factors(still(f64::NAN, 0)), vec![1.0]);
    }

    /// The band is the 10th to the 90th percentile of the values, whatever their order.
    #[test]
    fn a_band_is_the_middle_of_the_runs() {
        let v: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(
            Band::of(&v),
            Some(Band {
                low: 2.0,
                high: 18.0
            })
        );
        assert_eq!(
            Band::of(&[3.0]),
            Some(Band {
                low: 3.0,
                high: 3.0
            })
        );
        assert_eq!(Band::of(&[]), None);
    }
    /// The point prediction takes the middle run's p99s, not their mean (which one slow run would
    /// lift), and the mean of the costs.
    #[test]
    fn the_point_is_the_middle_run() {
        let run = |e2e: f64, cost: f64| SimReport {
            e2e_p99_s: e2e,
            ttft_p99_s: e2e / 2.0,
            cost_per_day: cost,
            ..SimReport::empty(7)
        };
        let point = point_report(&[run(3.0, 1.0), run(9.0, 2.0), run(2.5, 3.0)]);
        assert_eq!(point.e2e_p99_s, 3.0);
        assert_eq!(point.ttft_p99_s, 1.5);
        assert_eq!(point.cost_per_day, 2.0);
        assert_eq!(median_of(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median_of(Vec::new()), 0.0);
    }
}
