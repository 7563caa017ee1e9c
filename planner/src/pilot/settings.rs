//! The `[pilot]` table of a workload file: what a pilot tries and how strict it is. A leaf that
//! imports only the crate's errors, so the workload file may embed it.

use serde::{Deserialize, Serialize};

use crate::error::{Result, invalid};

/// `[pilot]` of a workload file: what to try and how strict to be. Every key has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PilotSpec {
    /// The model: a file, folder or cached model name (`strata pilot --model` overrides it).
    #[serde(default)]
    pub model: Option<String>,
    /// Runtime weight types to try.
    #[serde(default = "default_weights")]
    pub weights: Vec<String>,
    /// Batch sizes (most sequences per step) to try [default: 4 and 8].
    #[serde(default = "default_max_batch")]
    pub max_batch: Vec<u32>,
    /// Engine threads [default: every core of the host].
    #[serde(default)]
    pub threads: Option<u32>,
    /// Key/value memory per engine, MiB.
    #[serde(default = "default_kv_mem")]
    pub kv_mem_mib: u32,
    /// The quality gate.
    #[serde(default)]
    pub quality: QualityThresholds,
    /// Prompts with expected answers (`[[pilot.task]]`), for a task-level quality check.
    #[serde(default, rename = "task")]
    pub tasks: Vec<TaskCheck>,
    /// Requests per capacity probe.
    #[serde(default = "default_probe_requests")]
    pub probe_requests: u32,
    /// Seconds of traffic replayed through the gateway.
    #[serde(default = "default_replay_s")]
    pub replay_s: f64,
    /// Offer the replay this share of the chosen config's measured capacity, in place of the plan's
    /// busiest hour per host (the same class mix): to check the predictions on a loaded host when the
    /// workload's own traffic would leave it mostly idle [default: the busiest hour].
    #[serde(default)]
    pub replay_load: Option<f64>,
    /// The drain hold the CPU engines would serve with (`strata serve --drain-hold`): the replay's
    /// engine runs with it and every prediction models it; the capacity probes measure the engine
    /// without it [default: 0, prompts never wait for decodes].
    #[serde(default)]
    pub drain_hold: f64,
    /// Share of a class's requests that must meet its SLA for the class to migrate.
    #[serde(default = "default_attainment")]
    pub attainment_target: f64,
    /// Least share of a class's requests served on CPU in the plan for the class to count as migrated.
    #[serde(default = "default_min_cpu_share")]
    pub min_cpu_share: f64,
    /// Seed of the load generator, the replay sample and the simulations.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

/// Highest `replay_load`: beyond twice its capacity a host only queues.
const MAX_REPLAY_LOAD: f64 = 2.0;

fn default_weights() -> Vec<String> {
    vec!["q8_0".into(), "q4_1".into()]
}
/// Two batch sizes: a comparison of configs needs more than one per weight type.
fn default_max_batch() -> Vec<u32> {
    vec![4, 8]
}
fn default_kv_mem() -> u32 {
    128
}
fn default_probe_requests() -> u32 {
    16
}
fn default_replay_s() -> f64 {
    90.0
}
fn default_attainment() -> f64 {
    0.99
}
fn default_min_cpu_share() -> f64 {
    0.5
}
fn default_seed() -> u64 {
    1
}

impl Default for PilotSpec {
    fn default() -> Self {
        PilotSpec {
            model: None,
            weights: default_weights(),
            max_batch: default_max_batch(),
            threads: None,
            kv_mem_mib: default_kv_mem(),
            quality: QualityThresholds::default(),
            tasks: Vec::new(),
            probe_requests: default_probe_requests(),
            replay_s: default_replay_s(),
            replay_load: None,
            drain_hold: 0.0,
            attainment_target: default_attainment(),
            min_cpu_share: default_min_cpu_share(),
            seed: default_seed(),
        }
    }
}

impl PilotSpec {
    /// Checks the values, naming the key at fault.
    ///
    /// # Errors
    /// [`crate::PlannerError::InvalidField`] for an empty list, a zero, or a share outside 0..=1.
    pub fn validate(&self, workload: &str) -> Result<()> {
        let bad = |field: &'static str, problem: &str| {
            Err(invalid("workload", workload, field, problem.to_owned()))
        };
        if self.weights.is_empty() {
            return bad("pilot.weights", "give at least one weight type");
        }
        if self.max_batch.is_empty() || self.max_batch.contains(&0) {
            return bad(
                "pilot.max_batch",
                "give at least one batch size, each at least 1",
            );
        }
        if self.threads == Some(0) {
            return bad("pilot.threads", "must be at least 1");
        }
        if self.kv_mem_mib == 0 {
            return bad("pilot.kv_mem_mib", "must be at least 1");
        }
        if self.probe_requests == 0 {
            return bad("pilot.probe_requests", "must be at least 1");
        }
        if !(self.replay_s.is_finite() && self.replay_s >= 1.0) {
            return bad("pilot.replay_s", "must be at least 1 second");
        }
        if !(self.drain_hold.is_finite() && self.drain_hold >= 0.0) {
            return bad("pilot.drain_hold", "must be a number of at least 0");
        }
        if let Some(share) = self.replay_load
            && !(share.is_finite() && share > 0.0 && share <= MAX_REPLAY_LOAD)
        {
            return bad(
                "pilot.replay_load",
                &format!(
                    "must be above 0 and at most {MAX_REPLAY_LOAD} (a share of the capacity: 0.65 is 65%)"
                ),
            );
        }
        for (field, share) in [
            ("pilot.attainment_target", self.attainment_target),
            ("pilot.min_cpu_share", self.min_cpu_share),
            (
                "pilot.quality.min_top1_agreement",
                self.quality.min_top1_agreement,
            ),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return bad(field, "must be between 0 and 1");
            }
        }
        let alpha = self.quality.task_significance;
        if !(alpha > 0.0 && alpha < 1.0) {
            return bad(
                "pilot.quality.task_significance",
                "must be above 0 and below 1 (0.05 is usual)",
            );
        }
        if !(self.quality.max_perplexity_increase.is_finite()
            && self.quality.max_perplexity_increase >= 0.0)
        {
            return bad("pilot.quality.max_perplexity_increase", "must be 0 or more");
        }
        if let Some(i) = self
            .tasks
            .iter()
            .position(|t| t.prompt.trim().is_empty() || t.expect.trim().is_empty())
        {
            return bad(
                "pilot.task",
                &format!("task {i}: `prompt` and `expect` must not be empty"),
            );
        }
        Ok(())
    }
}

/// `[pilot.quality]`: how much a quantized weight type may lose against the highest-precision run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityThresholds {
    /// Largest relative perplexity increase (0.05 = 5% above the reference).
    #[serde(default = "default_ppl_increase")]
    pub max_perplexity_increase: f64,
    /// Least share of positions whose greedy next token equals the reference's.
    #[serde(default = "default_top1")]
    pub min_top1_agreement: f64,
    /// Significance level of the task check: a weight type fails it when it loses so many more of the
    /// tasks the reference answers than it gains that an exact paired test (McNemar's, a binomial test
    /// on the tasks where the two differ) puts the chance of such a drop at or below this level.
    #[serde(default = "default_task_significance")]
    pub task_significance: f64,
}

fn default_task_significance() -> f64 {
    0.05
}

fn default_ppl_increase() -> f64 {
    0.05
}
fn default_top1() -> f64 {
    0.9
}

impl Default for QualityThresholds {
    fn default() -> Self {
        QualityThresholds {
            max_perplexity_increase: default_ppl_increase(),
            min_top1_agreement: default_top1(),
            task_significance: default_task_significance(),
        }
    }
}

/// `[[pilot.task]]`: a prompt (sent as one user chat message, greedy) and a text its answer must contain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskCheck {
    /// The user message.
    pub prompt: String,
    /// Text the answer must contain (case-insensitive).
    pub expect: String,
    /// Most tokens generated.
    #[serde(default = "default_task_tokens")]
    pub max_tokens: u32,
}

fn default_task_tokens() -> u32 {
    48
}

impl TaskCheck {
    /// True when `answer` contains the expected text, ignoring case.
    pub fn passed_by(&self, answer: &str) -> bool {
        answer.to_lowercase().contains(&self.expect.to_lowercase())
    }
}
