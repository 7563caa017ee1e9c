//! The routing policy as a pure function: request + pool states + budget state + plan -> where to send the
//! request and why. The simulator and the gateway both call [`route`], so plan and gateway decide alike.
//! No allocation, no clock, no randomness: the caller supplies the random draws.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::service::ServiceCurve;
use crate::workload::{BudgetAction, RequestClass, Sla};

/// One request as the router sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteRequest {
    /// Index of the request's class in the workload.
    pub class: usize,
    /// Class priority (higher is more important).
    pub priority: u32,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens to plan for (e.g. the class's p99 or the request's max_tokens).
    pub expected_output_tokens: u32,
    /// The SLA that applies: the class's, with the request's own TTFT target in its place when it
    /// brought one.
    pub sla: Sla,
    /// The request's own time-per-output-token target, seconds (none: no TPOT bound).
    pub tpot_s: Option<f64>,
    /// Uniform draw in [0, 1) for the plan's GPU split, supplied by the caller.
    pub draw: f64,
    /// Two instance indices drawn by the caller for power-of-two-choices (taken modulo the pool size).
    pub pick: [usize; 2],
}

/// Load of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct InstanceLoad {
    /// Requests admitted and not finished (queued included).
    pub in_flight: u32,
    /// Requests waiting for a slot.
    pub queue_depth: u32,
    /// Prompt tokens of requests sent to the instance that have not had their first token yet: a new
    /// request's prompt is prefilled after (or beside) them.
    #[serde(default)]
    pub prompt_tokens_ahead: u32,
    /// What the request at hand would get here when the instance's own requests are replayed step by
    /// step ([`crate::sim::BatchingHost::project`] on a mirror of the instance), before the client's
    /// overhead: when given, it replaces the closed-form estimate from the counts above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projected: Option<Prediction>,
    /// The same projection on a mirror running at the instance's corrected pace (its online
    /// [`Correction`] applied to the steps, so that a slower host also meets more of the requests
    /// arriving meanwhile): when given, the corrected prediction, in place of the correction applied
    /// to `projected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced: Option<Prediction>,
}

/// What kind of pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// CPU instances serving the chosen config.
    Cpu,
    /// GPU fallback (an instance pool or a per-token API).
    Gpu,
}

/// A pool's state at decision time.
#[derive(Debug, Clone, Copy)]
pub struct PoolState<'a> {
    /// CPU or GPU.
    pub kind: PoolKind,
    /// False when health checks fail; unhealthy pools get nothing.
    pub healthy: bool,
    /// Per-instance load (CPU pools; may be empty for GPU).
    pub instances: &'a [InstanceLoad],
    /// EWMA of observed TTFT, seconds (0 when unknown).
    pub ewma_ttft_s: f64,
    /// EWMA of observed E2E, seconds (0 when unknown).
    pub ewma_e2e_s: f64,
    /// Service model of one instance (CPU pools; a CPU pool without one gets nothing). GPU pools use the
    /// fixed p99s below.
    pub service: Option<&'a ServiceCurve>,
    /// GPU: p99 TTFT, seconds.
    pub gpu_ttft_s: f64,
    /// GPU: p99 TPOT, seconds.
    pub gpu_tpot_s: f64,
    /// Online corrections of the service model: per instance for a CPU pool (in the order of
    /// `instances`), per endpoint for a GPU pool (their mean applies). Missing: none.
    pub corrections: &'a [Correction],
}

/// A latency prediction, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Prediction {
    /// Time to first token.
    pub ttft_s: f64,
    /// End to end.
    pub e2e_s: f64,
}

impl Prediction {
    /// Seconds per output token after the first, for an answer of `output_tokens` (0 for one token).
    pub fn tpot_s(&self, output_tokens: u32) -> f64 {
        if output_tokens > 1 {
            (self.e2e_s - self.ttft_s).max(0.0) / f64::from(output_tokens - 1)
        } else {
            0.0
        }
    }

    /// The same prediction, made for `planned` output tokens, for an answer of `output_tokens`: the
    /// first token as predicted, then the predicted pace for each token after it.
    pub fn for_output(&self, planned: u32, output_tokens: u32) -> Prediction {
        let tpot = self.tpot_s(planned);
        Prediction {
            ttft_s: self.ttft_s,
            e2e_s: self.ttft_s + tpot * f64::from(output_tokens.saturating_sub(1)),
        }
    }
}

/// The online correction of one endpoint's service model: how much longer than predicted its first
/// tokens and its decode pace turned out (1: as predicted).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// Observed over predicted time to first token.
    pub first_token: f64,
    /// Observed over predicted time per output token after the first.
    pub decode: f64,
}

impl Correction {
    /// No correction.
    pub const NONE: Correction = Correction {
        first_token: 1.0,
        decode: 1.0,
    };

    /// `raw` corrected: its first token scaled by `first_token`, the time after it by `decode`.
    pub fn apply(self, raw: Prediction) -> Prediction {
        let ttft = raw.ttft_s * self.first_token;
        Prediction {
            ttft_s: ttft,
            e2e_s: ttft + (raw.e2e_s - raw.ttft_s).max(0.0) * self.decode,
        }
    }

    /// The geometric mean of `corrections` (none: [`Correction::NONE`]).
    pub fn mean(corrections: &[Correction]) -> Correction {
        if corrections.is_empty() {
            return Correction::NONE;
        }
        let n = corrections.len() as f64;
        let mean = |f: fn(&Correction) -> f64| {
            (corrections.iter().map(|c| f(c).ln()).sum::<f64>() / n).exp()
        };
        Correction {
            first_token: mean(|c| c.first_token),
            decode: mean(|c| c.decode),
        }
    }
}

impl Default for Correction {
    fn default() -> Self {
        Correction::NONE
    }
}

/// What one pool is predicted to give a request: the instance it would take (CPU pools), the service
/// model's own prediction and the corrected one that routing uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolPrediction {
    /// The instance the request would go to (CPU pools; none for GPU).
    pub instance: Option<usize>,
    /// The service model's prediction.
    pub raw: Prediction,
    /// `raw` after the online correction.
    pub corrected: Prediction,
}

/// What `pool` is predicted to give `req`: on a CPU pool at the less loaded of the request's two picks,
/// on a GPU pool at its fixed figures; none for an unhealthy pool, a CPU pool without instances or
/// service model.
pub fn predict_pool(pool: &PoolState<'_>, req: &RouteRequest) -> Option<PoolPrediction> {
    if !pool.healthy {
        return None;
    }
    match pool.kind {
        PoolKind::Gpu => {
            let out = f64::from(req.expected_output_tokens);
            let raw = Prediction {
                ttft_s: pool.gpu_ttft_s,
                e2e_s: pool.gpu_ttft_s + pool.gpu_tpot_s * (out - 1.0).max(0.0),
            };
            Some(PoolPrediction {
                instance: None,
                raw,
                corrected: Correction::mean(pool.corrections).apply(raw),
            })
        }
        PoolKind::Cpu => {
            let service = pool.service?;
            let n = pool.instances.len();
            if n == 0 {
                return None;
            }
            let (a, b) = (req.pick[0] % n, req.pick[1] % n);
            let instance = if pool.instances[b].in_flight < pool.instances[a].in_flight {
                b
            } else {
                a
            };
            let load = pool.instances[instance];
            let (ttft_s, e2e_s) = predict_cpu(service, load, req);
            let raw = Prediction { ttft_s, e2e_s };
            let corrected = match load.paced {
                Some(paced) => {
                    let at_pace = InstanceLoad {
                        projected: Some(paced),
                        ..load
                    };
                    let (ttft_s, e2e_s) = predict_cpu(service, at_pace, req);
                    Prediction { ttft_s, e2e_s }
                }
                None => pool
                    .corrections
                    .get(instance)
                    .copied()
                    .unwrap_or_default()
                    .apply(raw),
            };
            Some(PoolPrediction {
                instance: Some(instance),
                raw,
                corrected,
            })
        }
    }
}

/// Spend so far.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BudgetState {
    /// $ spent today.
    pub spent_today: f64,
    /// $ per day; `None` = unlimited.
    pub budget_per_day: Option<f64>,
    /// Share of today's requests sent to GPU so far.
    pub gpu_share_today: f64,
}

impl BudgetState {
    /// Spent fraction of the day's budget (0 when unlimited).
    pub fn spent_fraction(&self) -> f64 {
        match self.budget_per_day {
            Some(b) if b > 0.0 => self.spent_today / b,
            Some(_) => f64::INFINITY,
            None => 0.0,
        }
    }
}

/// Budget actions compiled against the workload's classes (class names resolved to indices once).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BudgetRules {
    /// (threshold, class index, factor).
    pub relax: Vec<(f64, usize, f64)>,
    /// (threshold, max GPU share).
    pub cap_gpu: Vec<(f64, f64)>,
    /// (threshold, priority below which requests are rejected).
    pub reject_below: Vec<(f64, u32)>,
}

impl BudgetRules {
    /// Resolves `actions` against `classes`; actions naming unknown classes are dropped (the workload
    /// parser already refuses them).
    pub fn compile(actions: &[BudgetAction], classes: &[RequestClass]) -> BudgetRules {
        let mut r = BudgetRules::default();
        for a in actions {
            match a {
                BudgetAction::RelaxSla {
                    at_spent_fraction,
                    class,
                    factor,
                } => {
                    if let Some(i) = classes.iter().position(|c| &c.name == class) {
                        r.relax.push((*at_spent_fraction, i, *factor));
                    }
                }
                BudgetAction::CapGpuShare {
                    at_spent_fraction,
                    max_share,
                } => {
                    r.cap_gpu.push((*at_spent_fraction, *max_share));
                }
                BudgetAction::RejectBelowPriority {
                    at_spent_fraction,
                    priority,
                } => {
                    r.reject_below.push((*at_spent_fraction, *priority));
                }
            }
        }
        r
    }
}

/// The plan's part of the policy for the current hour.
#[derive(Debug, Clone, Copy)]
pub struct RoutePolicy<'a> {
    /// Planned GPU share per class.
    pub gpu_share: &'a [f64],
    /// Planned rejected share per class (non-zero only when the budget forced the plan to shed).
    pub shed_share: &'a [f64],
    /// Send a request to GPU when the CPU pool is predicted to miss its SLA.
    pub overflow_to_gpu: bool,
    /// Budget thresholds and actions.
    pub budget: &'a BudgetRules,
}

/// Where the request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// CPU pool `pool`, instance `instance`.
    Cpu {
        /// Index into the pools slice.
        pool: usize,
        /// Instance within the pool.
        instance: usize,
    },
    /// GPU pool `pool`.
    Gpu {
        /// Index into the pools slice.
        pool: usize,
    },
    /// Not served.
    Reject,
}

/// Why a decision was made.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// The plan sends this share of the class to GPU and the draw fell inside it.
    PlanGpuShare {
        /// Planned share.
        share: f64,
    },
    /// The CPU instance is predicted to meet the SLA.
    CpuMeetsSla,
    /// The CPU instance is predicted to miss the SLA.
    CpuPredictedMiss {
        /// Predicted TTFT, s.
        ttft_s: f64,
        /// Predicted E2E, s.
        e2e_s: f64,
    },
    /// The CPU instance is predicted to miss the request's own TPOT target.
    CpuPredictedSlowTokens {
        /// Predicted time per output token, s.
        tpot_s: f64,
    },
    /// Recent observed latency (EWMA) of the CPU pool is over the SLA.
    CpuEwmaOverSla,
    /// No healthy CPU pool with instances and a service model.
    NoCpu,
    /// No healthy GPU pool.
    NoGpu,
    /// The budget caps the GPU share and it is reached.
    GpuShareCapped {
        /// The cap.
        max_share: f64,
    },
    /// The budget relaxes this class's SLA.
    SlaRelaxed {
        /// SLA multiplier.
        factor: f64,
    },
    /// The plan sheds this share of the class (its budget cannot pay for it) and the draw fell inside it.
    PlanShed {
        /// Planned shed share.
        share: f64,
    },
    /// The budget rejects classes below this priority.
    BudgetReject {
        /// Priority threshold.
        below: u32,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Reason::PlanGpuShare { share } => {
                write!(f, "plan sends {:.0}% of this class to GPU", share * 100.0)
            }
            Reason::CpuMeetsSla => f.write_str("CPU predicted within SLA"),
            Reason::CpuPredictedMiss { ttft_s, e2e_s } => {
                write!(
                    f,
                    "CPU predicted to miss SLA (ttft {ttft_s:.2}s, e2e {e2e_s:.2}s)"
                )
            }
            Reason::CpuPredictedSlowTokens { tpot_s } => write!(
                f,
                "CPU predicted to miss the TPOT target ({:.0}ms per token)",
                tpot_s * 1e3
            ),
            Reason::CpuEwmaOverSla => f.write_str("CPU pool's recent latency is over SLA"),
            Reason::NoCpu => f.write_str("no healthy CPU pool"),
            Reason::NoGpu => f.write_str("no healthy GPU pool"),
            Reason::GpuShareCapped { max_share } => {
                write!(f, "budget caps GPU share at {:.0}%", max_share * 100.0)
            }
            Reason::SlaRelaxed { factor } => write!(f, "budget relaxes this class's SLA x{factor}"),
            Reason::PlanShed { share } => {
                write!(f, "plan sheds {:.0}% of this class", share * 100.0)
            }
            Reason::BudgetReject { below } => write!(f, "budget rejects priority below {below}"),
        }
    }
}

/// Up to [`Reasons::CAP`] reasons, stored inline (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reasons {
    items: [Option<Reason>; Reasons::CAP],
    len: usize,
}

impl Reasons {
    /// Most reasons one decision records.
    pub const CAP: usize = 6;

    fn push(&mut self, r: Reason) {
        if self.len < Self::CAP {
            self.items[self.len] = Some(r);
            self.len += 1;
        }
    }

    /// The reasons in the order they were found.
    pub fn iter(&self) -> impl Iterator<Item = &Reason> {
        self.items[..self.len].iter().flatten()
    }

    /// Number of reasons.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The router's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteDecision {
    /// Where to send the request.
    pub target: Target,
    /// Why.
    pub reasons: Reasons,
    /// Predicted TTFT at the target after its online correction, seconds (0 for rejects).
    pub predicted_ttft_s: f64,
    /// Predicted E2E at the target after its online correction, seconds (0 for rejects).
    pub predicted_e2e_s: f64,
    /// The service model's own prediction at the target, before the correction (0 for rejects).
    pub raw: Prediction,
}

impl RouteDecision {
    /// The corrected prediction at the target.
    pub fn predicted(&self) -> Prediction {
        Prediction {
            ttft_s: self.predicted_ttft_s,
            e2e_s: self.predicted_e2e_s,
        }
    }
}

/// Decides where `req` goes. Order: budget rejection by priority; the plan's GPU share (unless the budget
/// caps GPU) and then its shed share, both by the caller's draw; the less loaded of the caller's two
/// CPU picks (power of two choices on in-flight) when it is predicted to meet the (possibly relaxed) SLA
/// and the pool's EWMA is within it; else GPU overflow when allowed and not capped; else CPU anyway.
pub fn route(
    req: &RouteRequest,
    pools: &[PoolState<'_>],
    budget: &BudgetState,
    policy: &RoutePolicy<'_>,
) -> RouteDecision {
    let mut reasons = Reasons::default();
    let spent = budget.spent_fraction();
    let reject = |reasons: Reasons| RouteDecision {
        target: Target::Reject,
        reasons,
        predicted_ttft_s: 0.0,
        predicted_e2e_s: 0.0,
        raw: Prediction::default(),
    };
    for &(t, below) in &policy.budget.reject_below {
        if spent >= t && req.priority < below {
            reasons.push(Reason::BudgetReject { below });
            return reject(reasons);
        }
    }
    let (mut sla, mut tpot_target) = (req.sla, req.tpot_s);
    for &(t, class, factor) in &policy.budget.relax {
        if spent >= t && class == req.class {
            sla = sla.relaxed(factor);
            tpot_target = tpot_target.map(|s| s * factor);
            reasons.push(Reason::SlaRelaxed { factor });
        }
    }
    let mut gpu_allowed = true;
    for &(t, max_share) in &policy.budget.cap_gpu {
        if spent >= t && budget.gpu_share_today >= max_share {
            gpu_allowed = false;
            reasons.push(Reason::GpuShareCapped { max_share });
        }
    }
    let gpu = pools
        .iter()
        .position(|p| p.kind == PoolKind::Gpu && p.healthy);
    let cpu = pools.iter().enumerate().find_map(|(i, p)| {
        let predicted = predict_pool(p, req).filter(|_| p.kind == PoolKind::Cpu)?;
        Some((i, predicted.instance?, predicted))
    });
    let to_gpu = |pool: usize, reasons: Reasons| {
        let p = predict_pool(&pools[pool], req).unwrap_or(PoolPrediction {
            instance: None,
            raw: Prediction::default(),
            corrected: Prediction::default(),
        });
        RouteDecision {
            target: Target::Gpu { pool },
            reasons,
            predicted_ttft_s: p.corrected.ttft_s,
            predicted_e2e_s: p.corrected.e2e_s,
            raw: p.raw,
        }
    };
    let share = policy.gpu_share.get(req.class).copied().unwrap_or(0.0);
    if let (Some(g), true, true) = (gpu, gpu_allowed, req.draw < share) {
        reasons.push(Reason::PlanGpuShare { share });
        return to_gpu(g, reasons);
    }
    let shed = policy.shed_share.get(req.class).copied().unwrap_or(0.0);
    if req.draw >= share && req.draw < share + shed {
        reasons.push(Reason::PlanShed { share: shed });
        return reject(reasons);
    }
    let Some((c, instance, predicted)) = cpu else {
        reasons.push(Reason::NoCpu);
        return match (gpu, gpu_allowed) {
            (Some(g), true) => to_gpu(g, reasons),
            (None, _) => {
                reasons.push(Reason::NoGpu);
                reject(reasons)
            }
            (Some(_), false) => reject(reasons),
        };
    };
    let pool = &pools[c];
    let PoolPrediction { raw, corrected, .. } = predicted;
    let (ttft, e2e) = (corrected.ttft_s, corrected.e2e_s);
    let cpu = RouteDecision {
        target: Target::Cpu { pool: c, instance },
        reasons,
        predicted_ttft_s: ttft,
        predicted_e2e_s: e2e,
        raw,
    };
    let ewma_over = (pool.ewma_ttft_s > 0.0 || pool.ewma_e2e_s > 0.0)
        && !sla.met_by(pool.ewma_ttft_s, pool.ewma_e2e_s);
    let tpot = corrected.tpot_s(req.expected_output_tokens);
    let tpot_over = tpot_target.is_some_and(|t| tpot > t);
    if sla.met_by(ttft, e2e) && !ewma_over && !tpot_over {
        let mut d = cpu;
        d.reasons.push(Reason::CpuMeetsSla);
        return d;
    }
    reasons.push(if ewma_over {
        Reason::CpuEwmaOverSla
    } else if sla.met_by(ttft, e2e) {
        Reason::CpuPredictedSlowTokens { tpot_s: tpot }
    } else {
        Reason::CpuPredictedMiss {
            ttft_s: ttft,
            e2e_s: e2e,
        }
    });
    match (gpu, gpu_allowed && policy.overflow_to_gpu) {
        (Some(g), true) => to_gpu(g, reasons),
        _ => RouteDecision { reasons, ..cpu },
    }
}

/// Predicted TTFT and E2E on a CPU instance. With a step-by-step projection of the instance
/// ([`InstanceLoad::projected`]), that projection and the time a request spends outside the engine;
/// else a closed form: a
/// request beyond the free slots waits for earlier ones to finish (queue position x mean service /
/// slots); one with a free slot has its prompt prefilled after the prompt tokens still ahead of it;
/// decode runs at the TPOT of the resulting batch.
pub fn predict_cpu(s: &ServiceCurve, load: InstanceLoad, req: &RouteRequest) -> (f64, f64) {
    if let Some(p) = load.projected {
        return s.client_latencies(p.ttft_s, p.e2e_s);
    }
    let slots = f64::from(s.slots);
    let k = f64::from(load.in_flight);
    let out = f64::from(req.expected_output_tokens);
    let prompt = f64::from(req.prompt_tokens);
    let busy = (k + 1.0).min(slots);
    let ttft = if k < slots {
        s.prefill_s(prompt + f64::from(load.prompt_tokens_ahead))
    } else {
        (k - slots + 1.0) * s.service_s(prompt, out, slots) / slots + s.prefill_s(prompt)
    };
    (ttft, ttft + (out - 1.0).max(0.0) * s.tpot_s(busy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Scaling, ScalingRule, tests::smol};

    /// SmolLM2's measured service model on one host.
    fn smol_curve() -> ServiceCurve {
        ServiceCurve::from_profile(
            &smol(),
            Scaling {
                rule: ScalingRule::PerCore,
                factor: 1.0,
            },
        )
    }

    fn req(draw: f64) -> RouteRequest {
        RouteRequest {
            class: 0,
            priority: 1,
            prompt_tokens: 256,
            expected_output_tokens: 128,
            sla: Sla {
                ttft_p99_s: Some(1.0),
                e2e_p99_s: Some(5.0),
            },
            tpot_s: None,
            draw,
            pick: [0, 1],
        }
    }

    fn pools<'a>(curve: &'a ServiceCurve, loads: &'a [InstanceLoad]) -> [PoolState<'a>; 2] {
        let cpu = PoolState {
            kind: PoolKind::Cpu,
            healthy: true,
            instances: loads,
            ewma_ttft_s: 0.0,
            ewma_e2e_s: 0.0,
            service: Some(curve),
            gpu_ttft_s: 0.0,
            gpu_tpot_s: 0.0,
            corrections: &[],
        };
        [
            cpu,
            PoolState {
                kind: PoolKind::Gpu,
                instances: &[],
                gpu_ttft_s: 0.2,
                gpu_tpot_s: 0.01,
                ..cpu
            },
        ]
    }

    #[test]
    fn plan_share_then_p2c_then_overflow() {
        let curve = smol_curve();
        let rules = BudgetRules::default();
        let policy = RoutePolicy {
            gpu_share: &[0.3],
            shed_share: &[0.0],
            overflow_to_gpu: true,
            budget: &rules,
        };
        let idle = [
            InstanceLoad {
                in_flight: 3,
                queue_depth: 0,
                prompt_tokens_ahead: 0,
                projected: None,
                paced: None,
            },
            InstanceLoad {
                in_flight: 1,
                queue_depth: 0,
                prompt_tokens_ahead: 0,
                projected: None,
                paced: None,
            },
        ];
        let p = pools(&curve, &idle);
        let b = BudgetState::default();
        let d = route(&req(0.1), &p, &b, &policy);
        assert_eq!(d.target, Target::Gpu { pool: 1 });
        assert!(matches!(
            d.reasons.iter().next(),
            Some(Reason::PlanGpuShare { .. })
        ));
        let d = route(&req(0.9), &p, &b, &policy);
        assert_eq!(
            d.target,
            Target::Cpu {
                pool: 0,
                instance: 1
            },
            "the less loaded of the two picks"
        );
        assert!(d.reasons.iter().any(|r| *r == Reason::CpuMeetsSla));
        let busy = [InstanceLoad {
            in_flight: 40,
            queue_depth: 32,
            prompt_tokens_ahead: 0,
            projected: None,
            paced: None,
        }; 2];
        let p = pools(&curve, &busy);
        let d = route(&req(0.9), &p, &b, &policy);
        assert_eq!(d.target, Target::Gpu { pool: 1 });
        assert!(
            d.reasons
                .iter()
                .any(|r| matches!(r, Reason::CpuPredictedMiss { .. }))
        );
    }

    #[test]
    fn budget_actions_apply_past_their_threshold() {
        let curve = smol_curve();
        let rules = BudgetRules {
            relax: vec![],
            cap_gpu: vec![(0.8, 0.1)],
            reject_below: vec![(0.95, 2)],
        };
        let policy = RoutePolicy {
            gpu_share: &[1.0],
            shed_share: &[0.0],
            overflow_to_gpu: true,
            budget: &rules,
        };
        let loads = [InstanceLoad::default()];
        let p = pools(&curve, &loads);
        let mut b = BudgetState {
            spent_today: 85.0,
            budget_per_day: Some(100.0),
            gpu_share_today: 0.2,
        };
        let d = route(&req(0.5), &p, &b, &policy);
        assert!(
            matches!(d.target, Target::Cpu { .. }),
            "GPU capped: {:?}",
            d.reasons
        );
        b.spent_today = 96.0;
        let d = route(&req(0.5), &p, &b, &policy);
        assert_eq!(d.target, Target::Reject);
        assert_eq!(
            d.reasons.iter().next().map(ToString::to_string).as_deref(),
            Some("budget rejects priority below 2")
        );
    }

    fn policy(rules: &BudgetRules) -> RoutePolicy<'_> {
        RoutePolicy {
            gpu_share: &[0.0],
            shed_share: &[0.0],
            overflow_to_gpu: true,
            budget: rules,
        }
    }

    /// A request's own targets decide where it goes: a TTFT the CPU pool is predicted to miss sends
    /// it to GPU, a loose one keeps it on CPU, and a TPOT target below the predicted pace does too.
    #[test]
    fn the_request_s_own_targets_decide() {
        let curve = smol_curve();
        let rules = BudgetRules::default();
        let loads = [InstanceLoad::default()];
        let p = pools(&curve, &loads);
        let b = BudgetState::default();
        let base = req(0.5);
        let predicted = predict_pool(&p[0], &base).expect("a CPU prediction");
        let ttft = predicted.corrected.ttft_s;
        let tight = RouteRequest {
            sla: Sla {
                ttft_p99_s: Some(ttft * 0.5),
                e2e_p99_s: None,
            },
            ..base
        };
        let d = route(&tight, &p, &b, &policy(&rules));
        assert_eq!(d.target, Target::Gpu { pool: 1 }, "{:?}", d.reasons);
        let loose = RouteRequest {
            sla: Sla {
                ttft_p99_s: Some(ttft * 2.0),
                e2e_p99_s: None,
            },
            ..base
        };
        let d = route(&loose, &p, &b, &policy(&rules));
        assert!(matches!(d.target, Target::Cpu { .. }), "{:?}", d.reasons);
        let pace = predicted.corrected.tpot_s(base.expected_output_tokens);
        let slow = RouteRequest {
            tpot_s: Some(pace * 0.5),
            ..loose
        };
        let d = route(&slow, &p, &b, &policy(&rules));
        assert_eq!(d.target, Target::Gpu { pool: 1 });
        assert!(
            d.reasons
                .iter()
                .any(|r| matches!(r, Reason::CpuPredictedSlowTokens { .. })),
            "{:?}",
            d.reasons
        );
    }

    /// The online correction scales the first token and the decode pace apart, and a slow endpoint's
    /// correction can move a request that its raw prediction kept on CPU.
    #[test]
    fn corrections_scale_the_prediction_and_can_move_a_request() {
        let raw = Prediction {
            ttft_s: 0.2,
            e2e_s: 1.2,
        };
        let c = Correction {
            first_token: 1.5,
            decode: 2.0,
        };
        let corrected = c.apply(raw);
        assert!((corrected.ttft_s - 0.3).abs() < 1e-12);
        assert!((corrected.e2e_s - 2.3).abs() < 1e-12);
        assert_eq!(Correction::NONE.apply(raw), raw);
        let m = Correction::mean(&[
            c,
            Correction {
                first_token: 1.5 / 2.25,
                decode: 0.5,
            },
        ]);
        assert!((m.first_token - 1.0).abs() < 1e-12 && (m.decode - 1.0).abs() < 1e-12);
        let at_five = raw.for_output(11, 5);
        assert!((at_five.e2e_s - 0.6).abs() < 1e-12, "{at_five:?}");

        let curve = smol_curve();
        let rules = BudgetRules::default();
        let loads = [InstanceLoad::default()];
        let mut p = pools(&curve, &loads);
        let b = BudgetState::default();
        let predicted = predict_pool(&p[0], &req(0.5)).expect("a CPU prediction");
        let r = RouteRequest {
            sla: Sla {
                ttft_p99_s: Some(predicted.raw.ttft_s * 1.5),
                e2e_p99_s: None,
            },
            ..req(0.5)
        };
        let d = route(&r, &p, &b, &policy(&rules));
        assert!(matches!(d.target, Target::Cpu { .. }));
        assert_eq!(d.raw, predicted.raw);
        let slow = [Correction {
            first_token: 2.0,
            decode: 1.0,
        }];
        p[0].corrections = &slow;
        let d = route(&r, &p, &b, &policy(&rules));
        assert_eq!(d.target, Target::Gpu { pool: 1 }, "{:?}", d.reasons);
    }

    /// The prompt tokens still ahead of a request on an instance with a free slot delay its first token
    /// by their prefill time, and the time after it not at all.
    #[test]
    fn prompts_ahead_delay_the_first_token() {
        let curve = smol_curve();
        let load = |ahead| InstanceLoad {
            in_flight: 1,
            queue_depth: 0,
            prompt_tokens_ahead: ahead,
            projected: None,
            paced: None,
        };
        let (ttft, e2e) = predict_cpu(&curve, load(0), &req(0.5));
        let (later, later_e2e) = predict_cpu(&curve, load(512), &req(0.5));
        assert!((later - ttft - curve.prefill_s(512.0)).abs() < 1e-9);
        assert!(((later_e2e - later) - (e2e - ttft)).abs() < 1e-9);
    }
}
