//! The decisions of a pilot evaluation, free of I/O: the `[pilot]` settings of a workload file, the quality
//! gate of each weight type, the time-compressed replay sample and the simulator's prediction for it, and
//! the verdict (migrate all classes, some, or none) with its savings, risk and reasons.
//!
//! The controller measures (profiles, quality scores, the replay through a real gateway); everything it
//! decides from those measurements is here, so that each verdict path is testable with synthetic inputs.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dist::{binomial_half_upper_tail, binomial_tail, exponential, r6};
use crate::error::{Result, invalid};
use crate::plan::Plan;
use crate::profile::{ConfigProfile, Scaling, ScalingRule};
use crate::sim::{PaceDrift, SimOptions, SimReport, simulate};
use crate::workload::{Arrivals, DAYS_PER_MONTH, GpuFallbackSpec, TraceRecord, Workload};

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

/// The GPU baseline from `--baseline`: a catalog GPU instance type or token-priced endpoint by name, or a
/// price per million tokens written `X/1M` (prompt and output alike) or `IN:OUT/1M`, which is added to
/// `catalog` as the endpoint `baseline`. Latency (and an instance's throughput) come from the workload's
/// `[gpu_fallback]`, which must then exist for a price or an endpoint with no figures of its own.
///
/// # Errors
/// [`crate::PlannerError::InvalidField`] naming what is wrong with the value.
pub fn baseline(
    arg: &str,
    workload: &Workload,
    catalog: &mut crate::catalog::Catalog,
) -> Result<GpuFallbackSpec> {
    let bad = |problem: String| Err(invalid("baseline", arg, "--baseline", problem));
    let latency = match &workload.gpu_fallback {
        Some(GpuFallbackSpec::Instance {
            ttft_p99_s,
            tpot_p99_s,
            basis,
            output_tokens_per_s,
            ..
        }) => Some((
            *ttft_p99_s,
            *tpot_p99_s,
            basis.clone(),
            Some(*output_tokens_per_s),
        )),
        Some(GpuFallbackSpec::PerToken {
            ttft_p99_s,
            tpot_p99_s,
            basis,
            ..
        }) => Some((*ttft_p99_s, *tpot_p99_s, basis.clone(), None)),
        None => None,
    };
    let Some((ttft_p99_s, tpot_p99_s, basis, throughput)) = latency else {
        return bad(format!(
            "workload `{}` has no [gpu_fallback] giving the GPU's latency; add one",
            workload.name
        ));
    };
    if let Some(price) = arg.trim().strip_suffix("/1M") {
        let parse = |x: &str| x.trim().trim_start_matches('$').parse::<f64>().ok();
        let (input, output) = match price.split_once(':') {
            Some((i, o)) => (parse(i), parse(o)),
            None => (parse(price), parse(price)),
        };
        let (Some(input_per_million), Some(output_per_million)) = (input, output) else {
            return bad("write a price as X/1M or IN:OUT/1M, in $ per million tokens".into());
        };
        if !(input_per_million >= 0.0 && output_per_million >= 0.0) {
            return bad("prices must be 0 or more".into());
        }
        catalog.merge(crate::catalog::Catalog {
            instances: Vec::new(),
            token_priced: vec![crate::catalog::TokenPricedEndpoint {
                provider: "command line".into(),
                name: "baseline".into(),
                input_per_million,
                output_per_million,
                source: "--baseline".into(),
                price_date: "given".into(),
            }],
        });
        return Ok(GpuFallbackSpec::PerToken {
            endpoint: "baseline".into(),
            ttft_p99_s,
            tpot_p99_s,
            basis,
        });
    }
    if catalog.find_endpoint(arg).is_some() {
        return Ok(GpuFallbackSpec::PerToken {
            endpoint: arg.to_owned(),
            ttft_p99_s,
            tpot_p99_s,
            basis,
        });
    }
    match catalog.find(arg) {
        Some(inst) if inst.is_gpu() => {
            let Some(output_tokens_per_s) = throughput else {
                return bad(format!(
                    "the workload's [gpu_fallback] is per token, so it gives no throughput for instance `{arg}`"
                ));
            };
            Ok(GpuFallbackSpec::Instance {
                instance: arg.to_owned(),
                region: None,
                output_tokens_per_s,
                ttft_p99_s,
                tpot_p99_s,
                basis,
            })
        }
        Some(_) => bad(format!(
            "`{arg}` is a CPU instance type, not a GPU baseline"
        )),
        None => bad(format!(
            "`{arg}` is neither a catalog GPU instance type or endpoint nor a price like 0.20/1M"
        )),
    }
}

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
}

/// The replay's load: the plan's busiest hour per CPU instance, carried back to one measured host
/// (divided by the scaling factor). Without a GPU endpoint only the CPU-served part of each class is
/// sampled; with one, the whole hour's mix is, and the gateway routes it.
pub fn replay_load(plan: &Plan, with_gpu: bool) -> ReplayLoad {
    let factor = plan.chosen.scaling.factor.max(1e-9);
    let per_host = |h: &crate::plan::PlanHour| -> Vec<f64> {
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
    c: &crate::sim::ClassSim,
    double: Option<&crate::sim::ClassSim>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanInput, plan};
    use crate::sim::ClassSim;
    use crate::workload::Sla;

    const WORKLOAD: &str = r#"
name = "pilot-test"
[[class]]
name = "chat"
share = 0.6
priority = 1
prompt_tokens = { dist = "fixed", tokens = 200 }
output_tokens = { dist = "fixed", tokens = 100 }
sla = { ttft_p99_s = 1.0, e2e_p99_s = 6.0 }
[[class]]
name = "batch"
share = 0.4
prompt_tokens = { dist = "uniform", min = 100, max = 300 }
output_tokens = { dist = "uniform", min = 50, max = 150 }
sla = { e2e_p99_s = 30.0 }
[arrivals]
hourly_rps = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 1, 0.5, 0.5, 0.5, 0.5]
[gpu_fallback]
kind = "instance"
instance = "g2-standard-8"
output_tokens_per_s = 2000.0
ttft_p99_s = 0.3
tpot_p99_s = 0.01
basis = "assumed"
[pilot]
weights = ["q8_0"]
replay_s = 30
"#;

    const PROFILES: &str = r#"[{
  "id": "demo-q8", "model": "m", "weights": "q8_0", "threads": 2, "max_batch": 8,
  "measured_on": { "host": "h", "vcpus": 2, "mem_bandwidth_gbs": 29.0, "int8_gops": 400.0 },
  "load_curve": [
    { "rate_rps": 0.2, "ttft_p99_s": 0.4, "tpot_p99_s": 0.010, "e2e_p99_s": 1.4,
      "output_tokens_per_s": 20.0, "total_tokens_per_s": 60.0 },
    { "rate_rps": 1.0, "ttft_p99_s": 0.8, "tpot_p99_s": 0.020, "e2e_p99_s": 3.2,
      "output_tokens_per_s": 100.0, "total_tokens_per_s": 300.0 }],
  "mean_prompt_tokens": 200.0, "mean_output_tokens": 100.0 }]"#;

    fn planned() -> (Plan, Workload, Vec<ConfigProfile>) {
        let input = PlanInput::from_texts(WORKLOAD, None, None, PROFILES).expect("input");
        let p = plan(&input).expect("plan");
        (p, input.workload, input.profiles)
    }

    fn class(name: &str, gpu_share: f64, attainment: f64) -> ClassSim {
        ClassSim {
            class: name.into(),
            requests: 1000,
            rejected_share: 0.0,
            gpu_share,
            ttft_p99_s: 0.5,
            e2e_p99_s: 3.0,
            sla: Sla {
                ttft_p99_s: Some(1.0),
                e2e_p99_s: Some(6.0),
            },
            attainment,
            meets_sla: attainment >= 0.99,
        }
    }

    fn sim(classes: Vec<ClassSim>) -> SimReport {
        SimReport {
            seed: 1,
            days: 1.0,
            requests: 2000,
            gpu_share: 0.0,
            rejected_share: 0.0,
            cpu_cost: 1.0,
            gpu_cost: 0.0,
            cost_per_day: 1.0,
            ttft_p99_s: 0.5,
            e2e_p99_s: 3.0,
            classes,
        }
    }

    fn quality(weights: &str, perplexity: f64, top1: f64) -> WeightQuality {
        WeightQuality {
            weights: weights.into(),
            reference_weights: "f32".into(),
            perplexity,
            reference_perplexity: 10.0,
            top1_agreement: top1,
            task_pass_rate: None,
            reference_task_pass_rate: None,
            tasks: None,
        }
    }

    fn gates(q8_ppl: f64) -> Vec<QualityGate> {
        vec![gate_quality(
            &quality("q8_0", q8_ppl, 0.97),
            &QualityThresholds::default(),
        )]
    }

    fn decide(
        plan: &Plan,
        planned: &SimReport,
        double: &SimReport,
        gates: &[QualityGate],
    ) -> Verdict {
        verdict(&VerdictInput {
            plan,
            at_planned: planned,
            at_double: double,
            gates,
            spec: &PilotSpec::default(),
            replay: &[],
        })
    }

    #[test]
    fn every_class_on_cpu_within_sla_migrates_with_exit_0() {
        let (p, _, _) = planned();
        assert!(p.totals.savings_per_day > 0.0, "{:?}", p.totals);
        let ok = sim(vec![class("chat", 0.0, 1.0), class("batch", 0.0, 0.995)]);
        let v = decide(&p, &ok, &ok, &gates(10.1));
        assert_eq!(v.kind, VerdictKind::Migrate);
        assert_eq!(v.kind.exit_code(), 0);
        assert_eq!(v.summary, "migrate all classes");
        assert!(v.monthly_savings_usd > 0.0);
        assert!(
            (v.monthly_baseline_usd - v.monthly_cost_usd - v.monthly_savings_usd).abs() < 1e-3,
            "{v:?}"
        );
        assert!(v.classes.iter().all(|c| c.migrate && c.reasons.is_empty()));
    }

    #[test]
    fn a_class_mostly_on_gpu_stays_and_the_verdict_is_partial_with_exit_3() {
        let (p, _, _) = planned();
        let s = sim(vec![class("chat", 0.0, 1.0), class("batch", 0.8, 1.0)]);
        let v = decide(&p, &s, &s, &gates(10.1));
        assert_eq!(v.kind, VerdictKind::Partial);
        assert_eq!(v.kind.exit_code(), 3);
        assert_eq!(v.summary, "migrate chat; keep batch on GPU");
        let batch = &v.classes[1];
        assert!(!batch.migrate);
        assert!(
            batch.reasons[0].contains("only 20% of it on CPU"),
            "{:?}",
            batch.reasons
        );
    }

    #[test]
    fn a_class_missing_its_attainment_target_stays() {
        let (p, _, _) = planned();
        let s = sim(vec![class("chat", 0.0, 0.95), class("batch", 0.0, 1.0)]);
        let v = decide(&p, &s, &s, &gates(10.1));
        assert_eq!(v.kind, VerdictKind::Partial);
        assert!(!v.classes[0].migrate);
        assert!(v.classes[0].reasons.iter().any(|r| r.contains("95.0%")));
    }

    #[test]
    fn no_weight_type_passing_the_quality_gate_means_stay_with_exit_4() {
        let (p, _, _) = planned();
        let ok = sim(vec![class("chat", 0.0, 1.0), class("batch", 0.0, 1.0)]);
        let v = decide(&p, &ok, &ok, &gates(12.0));
        assert_eq!(v.kind, VerdictKind::Stay);
        assert_eq!(v.kind.exit_code(), 4);
        assert_eq!(v.summary, "stay on GPU");
        assert_eq!(v.monthly_savings_usd, 0.0);
        assert!(v.reasons[0].contains("quality gate"), "{:?}", v.reasons);
        assert!(v.reasons[0].contains("20.0% above"), "{:?}", v.reasons);
    }

    #[test]
    fn a_plan_that_saves_nothing_means_stay() {
        let (mut p, _, _) = planned();
        p.totals.savings_per_day = -2.0;
        let ok = sim(vec![class("chat", 0.0, 1.0), class("batch", 0.0, 1.0)]);
        let v = decide(&p, &ok, &ok, &gates(10.1));
        assert_eq!(v.kind, VerdictKind::Stay);
        assert!(
            v.reasons.iter().any(|r| r.contains("no less than")),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn a_class_missing_its_sla_in_the_replay_stays_when_the_replay_has_enough_requests() {
        let (p, _, _) = planned();
        let ok = sim(vec![class("chat", 0.0, 1.0), class("batch", 0.0, 1.0)]);
        let evidence = |requests| ReplayEvidence {
            class: "chat".into(),
            requests,
            observed_attainment: 0.88,
            observed_e2e_p99_s: 12.5,
            rate_rps: 1.05,
        };
        let gates = gates(10.1);
        let spec = PilotSpec::default();
        let decide_with = |replay: &[ReplayEvidence]| {
            verdict(&VerdictInput {
                plan: &p,
                at_planned: &ok,
                at_double: &ok,
                gates: &gates,
                spec: &spec,
                replay,
            })
        };
        let v = decide_with(&[evidence(59)]);
        assert_eq!(v.kind, VerdictKind::Partial);
        assert_eq!(v.summary, "migrate batch; keep chat on GPU");
        assert!(
            v.classes[0].reasons[0].contains("88.0% of its 59 requests"),
            "{v:?}"
        );
        // Too few requests to outweigh the simulation.
        assert_eq!(decide_with(&[evidence(5)]).kind, VerdictKind::Migrate);
    }

    #[test]
    fn a_replay_refutes_the_target_only_with_more_misses_than_chance_explains() {
        // One miss in 52 at a 99% target happens in 41% of replays; three in 52 in 1.6%.
        assert!(!replay_refutes(52, 51.0 / 52.0, 0.99));
        assert!(replay_refutes(52, 49.0 / 52.0, 0.99));
        assert!(!replay_refutes(19, 0.5, 0.99), "too few requests");
        assert!(!replay_refutes(500, 0.995, 0.99), "above the target");
        assert!(
            replay_refutes(100_000, 0.985, 0.99),
            "long replays do not underflow"
        );
        assert!(
            replay_refutes(30, 29.0 / 30.0, 1.0),
            "any miss refutes 100%"
        );
        let tail = binomial_tail(52, 1, 0.01);
        assert!((tail - (1.0 - 0.99f64.powi(52))).abs() < 1e-12, "{tail}");
        let tail = binomial_tail(52, 3, 0.01);
        assert!((0.015..0.018).contains(&tail), "{tail}");
    }

    #[test]
    fn risk_at_double_traffic_is_reported_without_blocking() {
        let (p, _, _) = planned();
        let ok = sim(vec![class("chat", 0.0, 1.0), class("batch", 0.0, 1.0)]);
        let strained = sim(vec![class("chat", 0.3, 0.9), class("batch", 0.0, 1.0)]);
        let v = decide(&p, &ok, &strained, &gates(10.1));
        assert_eq!(v.kind, VerdictKind::Migrate);
        assert_eq!(v.classes[0].attainment_2x, 0.9);
        assert_eq!(v.classes[0].gpu_share_2x, 0.3);
        assert!(v.classes[0].reasons[0].starts_with("risk: at twice the traffic"));
    }

    /// The whole chain on synthetic profiles: plan, simulate at 1x and 2x, decide.
    fn decide_by_simulation(workload_toml: &str, baseline_arg: Option<&str>) -> Verdict {
        let mut input = PlanInput::from_texts(workload_toml, None, None, PROFILES).expect("input");
        if let Some(arg) = baseline_arg {
            input.gpu_fallback =
                baseline(arg, &input.workload, &mut input.catalog).expect("baseline");
            input.workload.gpu_fallback = Some(input.gpu_fallback.clone());
        }
        let p = plan(&input).expect("plan");
        let planned = simulate(
            &p,
            &input.workload,
            &input.profiles,
            3,
            &SimOptions::default(),
        )
        .expect("simulates");
        let double = simulate(
            &p,
            &input.workload,
            &input.profiles,
            3,
            &SimOptions {
                traffic_scale: 2.0,
                ..SimOptions::default()
            },
        )
        .expect("simulates");
        verdict(&VerdictInput {
            plan: &p,
            at_planned: &planned,
            at_double: &double,
            gates: &gates(10.1),
            spec: &PilotSpec::default(),
            replay: &[],
        })
    }

    #[test]
    fn simulated_verdicts_follow_what_the_cpu_pool_can_do_and_what_it_costs() {
        // A hosted GPU API billed per token: each class's GPU cost is its own.
        let migrate = decide_by_simulation(WORKLOAD, Some("0.50/1M"));
        assert_eq!(migrate.kind, VerdictKind::Migrate, "{migrate:#?}");
        assert!(migrate.monthly_savings_usd > 0.0);

        // A batch SLA no CPU prefill of 100-300 tokens meets: the plan sends that class to GPU.
        let tight = WORKLOAD.replace("sla = { e2e_p99_s = 30.0 }", "sla = { e2e_p99_s = 0.3 }");
        let partial = decide_by_simulation(&tight, Some("0.50/1M"));
        assert_eq!(partial.kind, VerdictKind::Partial, "{partial:#?}");
        assert_eq!(partial.summary, "migrate chat; keep batch on GPU");

        // A GPU baseline sold for almost nothing: the CPU pool saves no money.
        let stay = decide_by_simulation(WORKLOAD, Some("0.0001/1M"));
        assert_eq!(stay.kind, VerdictKind::Stay, "{stay:#?}");
        assert!(
            stay.reasons.iter().any(|r| r.contains("no less than")),
            "{stay:#?}"
        );
    }

    #[test]
    fn the_gate_names_each_threshold_missed() {
        let t = QualityThresholds::default();
        assert!(gate_quality(&quality("q8_0", 10.2, 0.95), &t).passed);
        let g = gate_quality(&quality("q4_0", 11.0, 0.8), &t);
        assert!(!g.passed);
        assert_eq!(g.reasons.len(), 2, "{:?}", g.reasons);
        assert!((g.perplexity_increase - 0.1).abs() < 1e-9);
        let task = TaskCheck {
            prompt: "Capital of France?".into(),
            expect: "paris".into(),
            max_tokens: 8,
        };
        assert!(task.passed_by("It is Paris."));
        assert!(!task.passed_by("Lyon"));
    }

    /// `q4_1` answering `candidate` of `n` tasks where f32 answers `reference` of them, the candidate's
    /// passes a subset of the reference's.
    fn with_tasks(n: usize, reference: usize, candidate: usize) -> WeightQuality {
        let mut q = quality("q4_1", 10.0, 0.95);
        q.tasks = Some(PairedTasks::new(
            (0..n).map(|i| i < candidate).collect(),
            (0..n).map(|i| i < reference).collect(),
        ));
        q
    }

    #[test]
    fn losing_one_task_of_three_is_not_enough_to_tell() {
        let g = gate_quality(&with_tasks(3, 3, 2), &QualityThresholds::default());
        assert!(g.passed, "{:?}", g.reasons);
        let test = g.tasks.expect("a paired test");
        assert_eq!(
            (test.tasks, test.lost, test.gained, test.both_passed),
            (3, 1, 0, 2)
        );
        assert_eq!(test.p_value, 0.5);
        assert!(!test.significant_drop);
        assert_eq!(
            g.notes,
            vec![
                "tasks: not enough tasks to tell: loses 1 and gains 0 of 3 tasks against f32 \
                 (exact paired test on the 1 task where they differ: p = 0.500, significance 0.05)"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn losing_fifteen_tasks_of_twenty_fails_the_gate() {
        let g = gate_quality(&with_tasks(20, 20, 5), &QualityThresholds::default());
        assert!(!g.passed);
        let test = g.tasks.expect("a paired test");
        assert_eq!((test.lost, test.gained), (15, 0));
        // 2^-15: every one of the 15 differing tasks lost.
        assert!(
            (test.p_value - 0.5f64.powi(15)).abs() < 1e-15,
            "{}",
            test.p_value
        );
        assert!(
            g.reasons[0].starts_with(
                "tasks: loses 15 and gains 0 of 20 tasks against f32: a significant drop"
            ),
            "{:?}",
            g.reasons
        );
        assert!(g.notes.is_empty());
    }

    #[test]
    fn the_paired_test_counts_only_the_tasks_that_differ() {
        // Lost 6, gained 1 of 7 differing tasks: P(X >= 6 | Bin(7, 1/2)) = 8/128 = 0.0625.
        let mut q = quality("q8_0", 10.0, 0.95);
        let mut reference = vec![true; 6];
        reference.extend([false, true, false]);
        let mut candidate = vec![false; 6];
        candidate.extend([true, true, false]);
        q.tasks = Some(PairedTasks::new(candidate, reference));
        let strict = QualityThresholds::default();
        let g = gate_quality(&q, &strict);
        let test = g.tasks.expect("a paired test");
        assert_eq!(
            (test.lost, test.gained, test.both_passed, test.both_failed),
            (6, 1, 1, 1)
        );
        assert!((test.p_value - 0.0625).abs() < 1e-12, "{}", test.p_value);
        assert!(g.passed, "not significant at 0.05: {:?}", g.reasons);
        let lenient = QualityThresholds {
            task_significance: 0.1,
            ..strict
        };
        assert!(!gate_quality(&q, &lenient).passed);
        // Gaining as many as it loses is never a drop, however many tasks differ.
        assert!(
            PairedTasks::new(vec![true, false], vec![false, true])
                .test(0.5)
                .p_value
                > 0.5
        );
        assert_eq!(binomial_half_upper_tail(2000, 0), 1.0);
        assert!(binomial_half_upper_tail(2000, 2000) < 1e-300);
        assert!((binomial_half_upper_tail(2000, 1000) - 0.5089).abs() < 1e-3);
    }

    #[test]
    fn the_task_significance_is_a_level_between_0_and_1() {
        let mut spec = PilotSpec::default();
        spec.quality.task_significance = 0.0;
        let err = spec.validate("w").unwrap_err().to_string();
        assert!(err.contains("pilot.quality.task_significance"), "{err}");
        spec.quality.task_significance = 0.05;
        assert!(spec.validate("w").is_ok());
    }

    #[test]
    fn a_baseline_is_an_instance_an_endpoint_or_a_price() {
        let (_, w, _) = planned();
        let mut catalog = crate::catalog::Catalog::builtin();
        let spec = baseline("a2-highgpu-1g", &w, &mut catalog).expect("instance");
        assert!(
            matches!(spec, GpuFallbackSpec::Instance { ref instance, output_tokens_per_s, .. }
            if instance == "a2-highgpu-1g" && output_tokens_per_s == 2000.0)
        );
        let spec = baseline("0.10:0.40/1M", &w, &mut catalog).expect("price");
        assert!(
            matches!(spec, GpuFallbackSpec::PerToken { ref endpoint, .. } if endpoint == "baseline")
        );
        let e = catalog.find_endpoint("baseline").expect("added");
        assert_eq!((e.input_per_million, e.output_per_million), (0.10, 0.40));
        for (arg, words) in [
            ("c4-standard-8", "CPU instance"),
            ("nope", "neither"),
            ("cheap/1M", "X/1M"),
            ("-1/1M", "0 or more"),
        ] {
            let err = baseline(arg, &w, &mut catalog).expect_err(arg).to_string();
            assert!(err.contains(words), "{arg}: {err}");
        }
        let mut bare = w.clone();
        bare.gpu_fallback = None;
        let err = baseline("1/1M", &bare, &mut catalog)
            .expect_err("no latency")
            .to_string();
        assert!(err.contains("[gpu_fallback]"), "{err}");
    }

    #[test]
    fn the_pilot_table_parses_with_defaults_and_checks_values() {
        let file = crate::workload::WorkloadFile::from_toml_str(WORKLOAD).expect("parses");
        let spec = file.pilot.clone().expect("pilot");
        assert_eq!(spec.weights, ["q8_0"]);
        assert_eq!(spec.max_batch, [4, 8]);
        assert_eq!(spec.replay_s, 30.0);
        spec.validate("w").expect("valid");
        let bad = PilotSpec {
            attainment_target: 1.5,
            ..spec.clone()
        };
        let err = bad.validate("w").expect_err("out of range").to_string();
        assert!(err.contains("pilot.attainment_target"), "{err}");
        let typo = WORKLOAD.replace("replay_s", "replay_seconds");
        let err = crate::workload::WorkloadFile::from_toml_str(&typo)
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("replay_seconds"), "{err}");
    }

    #[test]
    fn the_replay_samples_the_busiest_hour_and_the_simulator_predicts_it() {
        let (p, w, profiles) = planned();
        let load = replay_load(&p, false);
        assert!(load.rate_rps > 0.0);
        assert!((load.class_shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let busiest = &p.hours[load.hour as usize];
        assert!(busiest.rps >= 2.0, "{busiest:?}");
        let trace = replay_trace(&w, &load, 600.0, 7);
        assert_eq!(trace, replay_trace(&w, &load, 600.0, 7));
        let rate = trace.len() as f64 / 600.0;
        assert!(
            (rate / load.rate_rps - 1.0).abs() < 0.25,
            "{rate} vs {}",
            load.rate_rps
        );
        assert!(trace.windows(2).all(|w| w[0].t_s <= w[1].t_s));
        let predicted = predict_replay(&p, &w, &profiles, &trace, false, 7).expect("predicts");
        assert_eq!(predicted.requests as usize, trace.len());
        assert_eq!(predicted.gpu_share, 0.0);
        for c in &predicted.classes {
            assert!(c.e2e_p99_s > 0.0 || c.requests == 0, "{c:?}");
        }
        assert_eq!(relative_error(1.1, 1.0), Some(0.1));
        assert_eq!(relative_error(1.0, 0.0), None);
    }

    /// Over a spread of paces the prediction is the runs' mean within their band; no spread, or no step
    /// model to scale, is the one prediction.
    #[test]
    fn the_replay_predicted_over_paces_is_the_mean_of_its_runs() {
        use crate::pace::{PaceSpread, predict_replay_over_paces};
        use crate::step::StepModel;
        let (p, w, mut profiles) = planned();
        let load = replay_load(&p, false);
        let trace = replay_trace(&w, &load, 300.0, 3);
        let one = predict_replay(&p, &w, &profiles, &trace, false, 3).expect("predicts");
        let spread = PaceSpread {
            sigma: 0.1,
            runs: 9,
            block_s: 0.0,
        };
        let curve_only =
            predict_replay_over_paces(&p, &w, &profiles, &trace, false, 3, None, spread)
                .expect("one");
        assert_eq!(curve_only.paces, [1.0]);
        assert_eq!(curve_only.point, one);
        assert_eq!(curve_only.all.e2e_s.low, one.e2e_p99_s);
        assert_eq!(curve_only.all.e2e_s.high, one.e2e_p99_s);
        profiles[0].step_model = Some(StepModel {
            decode_s_by_batch: vec![(1.0, 0.012), (4.0, 0.02), (8.0, 0.03)],
            prompt_token_s: 0.002,
            prompt_step_s: 0.01,
            steps: 500,
        });
        let at_one = predict_replay(&p, &w, &profiles, &trace, false, 3).expect("predicts");
        let still = PaceSpread {
            sigma: 0.0,
            runs: 5,
            block_s: 10.0,
        };
        let flat = predict_replay_over_paces(&p, &w, &profiles, &trace, false, 3, None, still)
            .expect("flat");
        assert_eq!(flat.paces, [1.0; 5]);
        assert!((flat.point.e2e_p99_s - at_one.e2e_p99_s).abs() < 1e-6);
        let spread_out =
            predict_replay_over_paces(&p, &w, &profiles, &trace, false, 3, None, spread)
                .expect("spread");
        assert_eq!(spread_out.paces.len(), 9);
        let bands = std::iter::once(&spread_out.all).chain(&spread_out.classes);
        let points = std::iter::once((spread_out.point.ttft_p99_s, spread_out.point.e2e_p99_s))
            .chain(
                spread_out
                    .point
                    .classes
                    .iter()
                    .map(|c| (c.ttft_p99_s, c.e2e_p99_s)),
            );
        for (b, (ttft, e2e)) in bands.zip(points) {
            assert!(b.e2e_s.low <= e2e && e2e <= b.e2e_s.high, "{b:?} {e2e}");
            assert!(
                b.ttft_s.low <= ttft && ttft <= b.ttft_s.high,
                "{b:?} {ttft}"
            );
            assert!(b.e2e_s.low < b.e2e_s.high, "{b:?}");
        }
        let slowest = profiles[0]
            .step_model
            .as_ref()
            .map(|m| m.scaled(spread_out.paces[8], spread_out.paces[8]));
        let mut slow = profiles.clone();
        slow[0].step_model = slowest;
        let slow = predict_replay(&p, &w, &slow, &trace, false, 3).expect("slow");
        assert!(slow.e2e_p99_s > at_one.e2e_p99_s, "{slow:?}");
        // Nine runs: the band is their lowest and highest, and the slowest pace is one of them.
        assert!(
            slow.e2e_p99_s <= spread_out.all.e2e_s.high + 1e-6,
            "{slow:?}"
        );
    }
}
