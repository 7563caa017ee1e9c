//! The quality gate of each weight type: perplexity, top-1 agreement and an exact paired test on the
//! workload's tasks, each against the highest-precision run of the same model.

use serde::{Deserialize, Serialize};

use super::settings::QualityThresholds;
use crate::dist::{binomial_half_upper_tail, r6};

/// What was measured of one weight type's quality, against the highest-precision run of the same model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightQuality {
    /// The weight type.
    pub weights: String,
    /// The reference weight type.
    pub reference_weights: String,
    /// Its perplexity on the fixed text.
    pub perplexity: f64,
    /// The reference's perplexity on the same text.
    pub reference_perplexity: f64,
    /// Share of positions whose greedy next token equals the reference's.
    pub top1_agreement: f64,
    /// Share of the workload's tasks answered as expected, when it has tasks.
    pub task_pass_rate: Option<f64>,
    /// The reference's task pass rate.
    pub reference_task_pass_rate: Option<f64>,
    /// Each task's outcome for this weight type and for the reference, in the workload's order, when
    /// it has tasks: what the gate's paired test compares.
    #[serde(default)]
    pub tasks: Option<PairedTasks>,
}

/// The same tasks answered by a candidate and by the reference: `true` where the answer passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairedTasks {
    /// The candidate's outcomes.
    pub candidate: Vec<bool>,
    /// The reference's outcomes on the same tasks.
    pub reference: Vec<bool>,
}

impl PairedTasks {
    /// Pairs outcomes task by task (a task only one side answered is left out).
    pub fn new(candidate: Vec<bool>, reference: Vec<bool>) -> Self {
        PairedTasks {
            candidate,
            reference,
        }
    }

    /// The exact paired test of the candidate against the reference at significance level `alpha`.
    pub fn test(&self, alpha: f64) -> PairedTaskTest {
        let mut t = PairedTaskTest {
            tasks: 0,
            both_passed: 0,
            lost: 0,
            gained: 0,
            both_failed: 0,
            p_value: 1.0,
            significance: alpha,
            significant_drop: false,
        };
        for (&c, &r) in self.candidate.iter().zip(&self.reference) {
            t.tasks += 1;
            match (c, r) {
                (true, true) => t.both_passed += 1,
                (false, true) => t.lost += 1,
                (true, false) => t.gained += 1,
                (false, false) => t.both_failed += 1,
            }
        }
        t.p_value = binomial_half_upper_tail(t.lost + t.gained, t.lost);
        t.significant_drop = t.lost > t.gained && t.p_value <= alpha;
        t
    }
}

/// McNemar's exact test, one-sided, of a candidate against the reference on the same tasks: under no
/// difference each task where the two differ is as likely lost as gained, so the tasks lost among the
/// `lost + gained` that differ follow Binomial(lost + gained, 1/2); `p_value` is the chance of losing
/// `lost` or more of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedTaskTest {
    /// Tasks compared.
    pub tasks: usize,
    /// Tasks both answered.
    pub both_passed: usize,
    /// Tasks the reference answered and the candidate did not.
    pub lost: usize,
    /// Tasks the candidate answered and the reference did not.
    pub gained: usize,
    /// Tasks neither answered.
    pub both_failed: usize,
    /// P(losing `lost` or more of the `lost + gained` differing tasks | no difference).
    pub p_value: f64,
    /// The significance level the drop is judged at.
    pub significance: f64,
    /// True when the candidate is worse at that level: the task check fails.
    pub significant_drop: bool,
}

impl PairedTaskTest {
    /// The finding in words, with the counts, against `reference` (a weight type's name).
    pub fn describe(&self, reference: &str) -> String {
        let differ = self.lost + self.gained;
        let test = format!(
            "exact paired test on the {differ} task{} where they differ: p = {}, significance {}",
            if differ == 1 { "" } else { "s" },
            p_text(self.p_value),
            self.significance
        );
        let counts = format!(
            "loses {} and gains {} of {} tasks against {reference}",
            self.lost, self.gained, self.tasks
        );
        if self.significant_drop {
            format!("{counts}: a significant drop ({test})")
        } else if self.lost == 0 {
            format!("{counts} ({test})")
        } else {
            format!("not enough tasks to tell: {counts} ({test})")
        }
    }
}

fn p_text(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// The gate's finding for one weight type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityGate {
    /// The weight type.
    pub weights: String,
    /// True when every threshold holds.
    pub passed: bool,
    /// Relative perplexity increase over the reference.
    pub perplexity_increase: f64,
    /// The measurements.
    pub measured: WeightQuality,
    /// Each threshold missed, in words.
    pub reasons: Vec<String>,
    /// The task check's paired test, when the workload has tasks.
    #[serde(default)]
    pub tasks: Option<PairedTaskTest>,
    /// Findings that did not fail the gate (a task check without enough tasks to tell), in words.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Holds `q` against `t`.
pub fn gate_quality(q: &WeightQuality, t: &QualityThresholds) -> QualityGate {
    let increase = if q.reference_perplexity > 0.0 {
        q.perplexity / q.reference_perplexity - 1.0
    } else {
        f64::INFINITY
    };
    let mut reasons = Vec::new();
    // NaN measurements fail the gate.
    if increase.is_nan() || increase > t.max_perplexity_increase {
        reasons.push(format!(
            "perplexity {:.3} is {:.1}% above {}'s {:.3} (at most {:.1}% allowed)",
            q.perplexity,
            increase * 100.0,
            q.reference_weights,
            q.reference_perplexity,
            t.max_perplexity_increase * 100.0
        ));
    }
    if q.top1_agreement.is_nan() || q.top1_agreement < t.min_top1_agreement {
        reasons.push(format!(
            "top-1 agreement with {} is {:.1}% (at least {:.1}% required)",
            q.reference_weights,
            q.top1_agreement * 100.0,
            t.min_top1_agreement * 100.0
        ));
    }
    let tasks = q
        .tasks
        .as_ref()
        .map(|paired| paired.test(t.task_significance));
    let mut notes = Vec::new();
    if let Some(test) = &tasks {
        let text = format!("tasks: {}", test.describe(&q.reference_weights));
        if test.significant_drop {
            reasons.push(text);
        } else {
            notes.push(text);
        }
    }
    QualityGate {
        weights: q.weights.clone(),
        passed: reasons.is_empty(),
        perplexity_increase: r6(increase.min(1e9)),
        measured: q.clone(),
        reasons,
        tasks,
        notes,
    }
}
