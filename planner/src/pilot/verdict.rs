//! The verdict: which classes migrate to CPU, with the savings, the risk at double traffic and the
//! reasons, decided from the plan, its simulations, the replay and the quality gate.

use serde::{Deserialize, Serialize};

use super::quality::QualityGate;
use super::settings::PilotSpec;
use crate::dist::{binomial_tail, r6};
use crate::plan::Plan;
use crate::sim::{ClassSim, SimReport};
use crate::workload::{DAYS_PER_MONTH, Workload};

/// What the pilot recommends; [`VerdictKind::exit_code`] is the command's exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Move every class to the CPU pool.
    Migrate,
    /// Move some classes; keep the others on GPU.
    Partial,
    /// Keep the workload on GPU.
    Stay,
}

impl VerdictKind {
    /// 0 for migrate, 3 for partial, 4 for stay.
    pub fn exit_code(self) -> u8 {
        match self {
            VerdictKind::Migrate => 0,
            VerdictKind::Partial => 3,
            VerdictKind::Stay => 4,
        }
    }
}

/// One class's finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassVerdict {
    /// Class name.
    pub class: String,
    /// True when it moves to the CPU pool.
    pub migrate: bool,
    /// Share of its requests served on CPU in the plan's simulation.
    pub cpu_share: f64,
    /// Share meeting its SLA at planned traffic (simulated).
    pub attainment: f64,
    /// Share meeting its SLA at twice the traffic on the same pool (simulated; overflow goes to GPU).
    pub attainment_2x: f64,
    /// Share sent to GPU at twice the traffic.
    pub gpu_share_2x: f64,
    /// Why it stays, or the risk it carries.
    pub reasons: Vec<String>,
}

/// The pilot's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Migrate, partial or stay.
    pub kind: VerdictKind,
    /// One line: "migrate all classes", "migrate chat, extract; keep summarize on GPU", "stay on GPU".
    pub summary: String,
    /// Per class.
    pub classes: Vec<ClassVerdict>,
    /// The plan's cost (CPU pool + GPU fallback) per month, $.
    pub monthly_cost_usd: f64,
    /// All traffic on the GPU baseline per month, $.
    pub monthly_baseline_usd: f64,
    /// Baseline minus plan, per month, $ (0 when staying).
    pub monthly_savings_usd: f64,
    /// Reasons that hold for the whole workload.
    pub reasons: Vec<String>,
}

/// Everything the verdict is decided from.
#[derive(Debug, Clone, Copy)]
pub struct VerdictInput<'a> {
    /// The plan, made from configs whose weight type passed the quality gate.
    pub plan: &'a Plan,
    /// Its simulation at planned traffic.
    pub at_planned: &'a SimReport,
    /// Its simulation at twice the traffic.
    pub at_double: &'a SimReport,
    /// Every weight type's gate.
    pub gates: &'a [QualityGate],
    /// The settings.
    pub spec: &'a PilotSpec,
    /// What the replay of the busiest hour observed, per class (empty without a replay).
    pub replay: &'a [ReplayEvidence],
}

/// One class in the replay of the plan's busiest hour on one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayEvidence {
    /// Class name.
    pub class: String,
    /// Requests replayed.
    pub requests: usize,
    /// Share that met the class SLA.
    pub observed_attainment: f64,
    /// Observed p99 E2E, seconds.
    pub observed_e2e_p99_s: f64,
    /// Requests/s offered to the host.
    pub rate_rps: f64,
}

/// Replayed requests a class needs before its replay can keep it from migrating.
pub const MIN_REPLAY_EVIDENCE: usize = 20;

/// How unlikely a replay's SLA misses must be under the target attainment before they count against the
/// simulation (a one-sided binomial test at this level).
pub const REPLAY_SIGNIFICANCE: f64 = 0.05;

/// Whether a replay refutes `target` attainment: it has at least [`MIN_REPLAY_EVIDENCE`] requests and
/// more misses than chance explains, i.e. P(at least that many misses | each request misses with
/// probability `1 - target`) is below [`REPLAY_SIGNIFICANCE`]. One miss in 52 requests does not refute a
/// 99% target (41% of such replays show one or more); seven in 59 does.
pub fn replay_refutes(requests: usize, observed_attainment: f64, target: f64) -> bool {
    if requests < MIN_REPLAY_EVIDENCE || observed_attainment >= target {
        return false;
    }
    let misses = ((1.0 - observed_attainment) * requests as f64).round() as usize;
    binomial_tail(requests, misses, (1.0 - target).clamp(0.0, 1.0)) < REPLAY_SIGNIFICANCE
}

/// Decides. A class migrates when at least `min_cpu_share` of it runs on CPU in the simulated plan and
/// it meets its SLA there with at least `attainment_target` of its requests; nothing migrates when no
/// weight type passes the quality gate or the plan saves nothing against the baseline.
pub fn verdict(input: &VerdictInput<'_>) -> Verdict {
    let VerdictInput {
        plan,
        at_planned,
        at_double,
        gates,
        spec,
        replay,
    } = *input;
    let monthly_cost = plan.totals.cost_per_day * DAYS_PER_MONTH;
    let monthly_baseline = plan.totals.all_gpu_cost_per_day * DAYS_PER_MONTH;
    let mut reasons = Vec::new();
    let passing: Vec<&str> = gates
        .iter()
        .filter(|g| g.passed)
        .map(|g| g.weights.as_str())
        .collect();
    if passing.is_empty() {
        reasons.push(gate_failures(gates));
    } else if !passing.contains(&plan.chosen.weights.as_str()) {
        reasons.push(format!(
            "the plan's weight type {} did not pass the quality gate",
            plan.chosen.weights
        ));
    }
    if plan.totals.savings_per_day <= 0.0 {
        reasons.push(format!(
            "the CPU plan costs ${:.2}/month, no less than ${:.2}/month on the GPU baseline",
            monthly_cost, monthly_baseline
        ));
    }
    let blocked = !reasons.is_empty();
    let classes: Vec<ClassVerdict> = at_planned
        .classes
        .iter()
        .map(|c| {
            let double = at_double.classes.iter().find(|d| d.class == c.class);
            let observed = replay.iter().find(|r| r.class == c.class);
            class_verdict(c, double, observed, spec, blocked)
        })
        .collect();
    let moving: Vec<&str> = classes
        .iter()
        .filter(|c| c.migrate)
        .map(|c| c.class.as_str())
        .collect();
    let staying: Vec<&str> = classes
        .iter()
        .filter(|c| !c.migrate)
        .map(|c| c.class.as_str())
        .collect();
    let (kind, summary) = if moving.is_empty() {
        (VerdictKind::Stay, "stay on GPU".to_owned())
    } else if staying.is_empty() {
        (VerdictKind::Migrate, "migrate all classes".to_owned())
    } else {
        (
            VerdictKind::Partial,
            format!(
                "migrate {}; keep {} on GPU",
                moving.join(", "),
                staying.join(", ")
            ),
        )
    };
    Verdict {
        kind,
        summary,
        classes,
        monthly_cost_usd: r6(monthly_cost),
        monthly_baseline_usd: r6(monthly_baseline),
        monthly_savings_usd: if kind == VerdictKind::Stay {
            0.0
        } else {
            r6(monthly_baseline - monthly_cost)
        },
        reasons,
    }
}

/// "no weight type passes the quality gate (q8_0: ...)".
fn gate_failures(gates: &[QualityGate]) -> String {
    let failed: Vec<String> = gates
        .iter()
        .map(|g| format!("{}: {}", g.weights, g.reasons.join("; ")))
        .collect();
    format!(
        "no weight type passes the quality gate ({})",
        failed.join(" | ")
    )
}

/// The verdict when nothing could be planned because no weight type passed the quality gate: every class
/// stays on GPU, with the gate's reasons.
pub fn stay_without_plan(workload: &Workload, gates: &[QualityGate]) -> Verdict {
    let reason = gate_failures(gates);
    Verdict {
        kind: VerdictKind::Stay,
        summary: "stay on GPU".into(),
        classes: workload
            .classes
            .iter()
            .map(|c| ClassVerdict {
                class: c.name.clone(),
                migrate: false,
                cpu_share: 0.0,
                attainment: 0.0,
                attainment_2x: 0.0,
                gpu_share_2x: 0.0,
                reasons: vec![reason.clone()],
            })
            .collect(),
        monthly_cost_usd: 0.0,
        monthly_baseline_usd: 0.0,
        monthly_savings_usd: 0.0,
        reasons: vec![reason],
    }
}

fn class_verdict(
    c: &ClassSim,
    double: Option<&ClassSim>,
    observed: Option<&ReplayEvidence>,
    spec: &PilotSpec,
    blocked: bool,
) -> ClassVerdict {
    let cpu_share = (1.0 - c.gpu_share - c.rejected_share).max(0.0);
    let mut reasons = Vec::new();
    if cpu_share < spec.min_cpu_share {
        reasons.push(format!(
            "the plan serves only {:.0}% of it on CPU ({:.0}% needed): the CPU pool cannot meet its SLA \
             more cheaply than the GPU",
            cpu_share * 100.0,
            spec.min_cpu_share * 100.0
        ));
    }
    if c.attainment < spec.attainment_target {
        reasons.push(format!(
            "{:.1}% of its requests meet the SLA in the simulated plan ({:.1}% needed)",
            c.attainment * 100.0,
            spec.attainment_target * 100.0
        ));
    }
    if !c.meets_sla {
        reasons.push(format!(
            "simulated p99 TTFT {:.2} s / E2E {:.2} s miss its SLA",
            c.ttft_p99_s, c.e2e_p99_s
        ));
    }
    if let Some(r) = observed
        .filter(|r| replay_refutes(r.requests, r.observed_attainment, spec.attainment_target))
    {
        reasons.push(format!(
            "in the replay of the busiest hour ({:.2} req/s per host) {:.1}% of its {} requests met the \
             SLA (p99 E2E {:.2} s)",
            r.rate_rps,
            r.observed_attainment * 100.0,
            r.requests,
            r.observed_e2e_p99_s
        ));
    }
    let migrate = !blocked && reasons.is_empty();
    let (attainment_2x, gpu_share_2x) = double.map_or((0.0, 0.0), |d| (d.attainment, d.gpu_share));
    if migrate && attainment_2x < spec.attainment_target {
        reasons.push(format!(
            "risk: at twice the traffic only {:.1}% meet the SLA",
            attainment_2x * 100.0
        ));
    }
    ClassVerdict {
        class: c.class.clone(),
        migrate,
        cpu_share: r6(cpu_share),
        attainment: c.attainment,
        attainment_2x,
        gpu_share_2x,
        reasons,
    }
}

/// Observed against predicted, as the signed relative error `(predicted - observed) / observed`.
pub fn relative_error(predicted: f64, observed: f64) -> Option<f64> {
    (observed > 0.0 && predicted.is_finite()).then(|| r6((predicted - observed) / observed))
}
