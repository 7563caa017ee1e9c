//! The time-compressed replay: the load one measured host is offered, a seeded sample of it, and the
//! simulator's prediction for that sample.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dist::{exponential, r6};
use crate::error::Result;
use crate::plan::data::{Plan, PlanHour};
use crate::profile::{ConfigProfile, Scaling, ScalingRule};
use crate::sim::{PaceDrift, SimOptions, SimReport, simulate};
use crate::workload::{Arrivals, TraceRecord, Workload};

/// The requests/s one measured host is offered in the replay, and the classes' shares of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayLoad {
    /// The plan hour sampled (its busiest per-instance CPU load).
    pub hour: u32,
    /// Requests/s offered to one measured host.
    pub rate_rps: f64,
    /// Per class, its share of the offered requests.
    pub class_shares: Vec<f64>,
    /// True when requests the router sends to GPU are part of the sample (a GPU endpoint is there).
    pub includes_gpu_traffic: bool,
    /// When the rate is set as a share of the host's measured capacity (`pilot.replay_load`) in place
    /// of the plan hour's: that share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_share: Option<f64>,
}

impl ReplayLoad {
    /// The same class mix offered at `share` of `capacity_rps`, requests/s of one host.
    pub fn at_capacity_share(self, capacity_rps: f64, share: f64) -> ReplayLoad {
        ReplayLoad {
            rate_rps: r6(capacity_rps * share),
            capacity_share: Some(share),
            ..self
        }
    }
}

/// The replay's load: the plan's busiest hour per CPU instance, carried back to one measured host
/// (divided by the scaling factor). Without a GPU endpoint only the CPU-served part of each class is
/// sampled; with one, the whole hour's mix is, and the gateway routes it.
pub fn replay_load(plan: &Plan, with_gpu: bool) -> ReplayLoad {
    let factor = plan.chosen.scaling.factor.max(1e-9);
    let per_host = |h: &PlanHour| -> Vec<f64> {
        let n = f64::from(h.cpu_instances.max(1)) * factor;
        h.classes
            .iter()
            .map(|c| {
                let served = if with_gpu {
                    1.0 - c.shed_share
                } else {
                    1.0 - c.gpu_share - c.shed_share
                };
                c.rps * served.max(0.0) / n
            })
            .collect()
    };
    let busiest = plan
        .hours
        .iter()
        .filter(|h| h.cpu_instances > 0)
        .max_by(|a, b| {
            let sa: f64 = per_host(a).iter().sum();
            let sb: f64 = per_host(b).iter().sum();
            sa.total_cmp(&sb)
        });
    let Some(hour) = busiest else {
        return ReplayLoad {
            hour: 0,
            rate_rps: 0.0,
            class_shares: Vec::new(),
            includes_gpu_traffic: with_gpu,
            capacity_share: None,
        };
    };
    let rates = per_host(hour);
    let total: f64 = rates.iter().sum();
    ReplayLoad {
        hour: hour.hour,
        rate_rps: r6(total),
        class_shares: rates
            .iter()
            .map(|r| if total > 0.0 { r / total } else { 0.0 })
            .collect(),
        includes_gpu_traffic: with_gpu,
        capacity_share: None,
    }
}

/// A seeded sample of `duration_s` seconds at `load`: Poisson arrivals, each request's class drawn from
/// the shares and its lengths from the class's distributions.
pub fn replay_trace(
    workload: &Workload,
    load: &ReplayLoad,
    duration_s: f64,
    seed: u64,
) -> Vec<TraceRecord> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    if load.rate_rps <= 0.0 || load.class_shares.len() != workload.classes.len() {
        return out;
    }
    let mut t = exponential(&mut rng, load.rate_rps);
    while t < duration_s {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut class = load.class_shares.len() - 1;
        for (i, s) in load.class_shares.iter().enumerate() {
            acc += s;
            if u < acc {
                class = i;
                break;
            }
        }
        let c = &workload.classes[class];
        out.push(TraceRecord {
            t_s: r6(t),
            class,
            prompt_tokens: c.prompt_tokens.sample(&mut rng).max(1),
            output_tokens: c.output_tokens.sample(&mut rng).max(1),
        });
        t += exponential(&mut rng, load.rate_rps);
    }
    out
}

/// The simulator's prediction for the replay: `trace` offered to one measured host of the plan's config
/// (scaling factor 1), the router overflowing to GPU only when a GPU endpoint takes part, no budget actions.
///
/// # Errors
/// As [`simulate`]: the plan's config missing from `profiles`.
pub fn predict_replay(
    plan: &Plan,
    workload: &Workload,
    profiles: &[ConfigProfile],
    trace: &[TraceRecord],
    with_gpu: bool,
    seed: u64,
) -> Result<SimReport> {
    predict_replay_drifting(plan, workload, profiles, trace, with_gpu, seed, None)
}

/// As [`predict_replay`], with the host's pace moving over time as `drift` says (none: steady).
///
/// # Errors
/// As [`simulate`]: the plan's config missing from `profiles`.
pub fn predict_replay_drifting(
    plan: &Plan,
    workload: &Workload,
    profiles: &[ConfigProfile],
    trace: &[TraceRecord],
    with_gpu: bool,
    seed: u64,
    drift: Option<PaceDrift>,
) -> Result<SimReport> {
    let mut one_host = plan.clone();
    one_host.chosen.scaling = Scaling {
        rule: ScalingRule::MeasuredOnType,
        factor: 1.0,
    };
    for hour in &mut one_host.hours {
        hour.cpu_instances = 1;
        hour.warm_instances = 0;
        for c in &mut hour.classes {
            c.gpu_share = 0.0;
            c.shed_share = 0.0;
        }
    }
    let mut sample = workload.clone();
    sample.arrivals = Arrivals::Trace(trace.to_vec());
    sample.budget.policy.clear();
    let opts = SimOptions {
        days: 1,
        traffic_scale: 1.0,
        overflow_to_gpu: with_gpu,
        budget_policy: false,
        pace_drift: drift,
    };
    simulate(&one_host, &sample, profiles, seed, &opts)
}
