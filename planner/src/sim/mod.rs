//! Seeded discrete-event simulation of a plan: Poisson arrivals per hour (or a trace), lengths drawn from
//! the classes, [`route`](crate::route::route()) deciding each request, CPU instances as continuously
//! batching hosts ([`BatchingHost`]: slots, and steps that run every decoding request's next token beside
//! the prompts being prefilled, each step as long as the measured curve says),
//! GPU fallback at its stated p99s. Deterministic per seed; separate random streams for arrivals, lengths
//! and routing draws keep common random numbers across plans. O(requests x slots).

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dist::{exponential, r6, standard_normal};
use crate::error::{PlannerError, Result};
use crate::plan::data::{Plan, PlanHour};
use crate::profile::ConfigProfile;
use crate::route::{
    BudgetRules, BudgetState, InstanceLoad, PoolKind, PoolState, Prediction, RoutePolicy,
    RouteRequest, Target, route,
};
use crate::service::ServiceCurve;
use crate::workload::{Arrivals, GpuPricing, HOURS, Sla, TraceRecord, Workload};

pub mod projection;
pub(crate) mod report;

pub use report::{ClassSim, SimReport};

/// Largest CPU pool the simulator replays (each instance is a station with its own slots).
pub const MAX_SIM_INSTANCES: u32 = 100_000;

/// Simulation knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimOptions {
    /// Days replayed (hourly profiles; a trace is replayed once).
    pub days: u32,
    /// Arrival-rate multiplier (hourly profiles).
    pub traffic_scale: f64,
    /// Let the router send predicted SLA misses to GPU.
    pub overflow_to_gpu: bool,
    /// Apply the workload's budget actions while replaying.
    pub budget_policy: bool,
    /// Let each CPU host's pace move over time as a measured engine's did (none: steady).
    #[serde(default)]
    pub pace_drift: Option<PaceDrift>,
}

/// A host's pace moving over time: each step lasts its modelled time times a factor drawn afresh for
/// every block of `block_s` seconds, log-normal with `sigma` (`exp(sigma z)`), so that the slower and
/// faster stretches a calibration measured on a shared host carry into the simulation. Each host draws
/// its own factors from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaceDrift {
    /// Seconds of each block.
    pub block_s: f64,
    /// Standard deviation of the log of a block's factor.
    pub sigma: f64,
    /// Seed of the factors.
    pub seed: u64,
}

/// The factors of one host's [`PaceDrift`], drawn block by block as the host's clock reaches them.
#[derive(Debug, Clone)]
struct PaceTrack {
    drift: PaceDrift,
    rng: ChaCha8Rng,
    factors: Vec<f64>,
}

impl PaceTrack {
    fn new(drift: PaceDrift, host: usize) -> PaceTrack {
        PaceTrack {
            drift,
            rng: ChaCha8Rng::seed_from_u64(
                drift.seed ^ (host as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            factors: Vec::new(),
        }
    }

    /// The block of time `t` and the end of that block.
    fn block(&self, t: f64) -> (usize, f64) {
        if !(self.drift.block_s > 0.0 && t.is_finite()) {
            return (0, f64::INFINITY);
        }
        let block = (t.max(0.0) / self.drift.block_s).floor();
        (block as usize, (block + 1.0) * self.drift.block_s)
    }

    /// The factor of the block holding time `t`.
    fn factor(&mut self, t: f64) -> f64 {
        let (block, _) = self.block(t);
        while self.factors.len() <= block {
            let z = standard_normal(&mut self.rng);
            self.factors.push((self.drift.sigma * z).exp());
        }
        self.factors[block]
    }
}

impl Default for SimOptions {
    /// One day, traffic as planned, overflow and budget policy on.
    fn default() -> Self {
        SimOptions {
            days: 1,
            traffic_scale: 1.0,
            overflow_to_gpu: true,
            budget_policy: true,
            pace_drift: None,
        }
    }
}

/// An FCFS station with `slots` servers. Each request takes the slot that frees first (the Kiefer-Wolfowitz
/// recursion), so waiting times are exact for FCFS G/G/c; the queueing checks against Erlang C use it.
#[derive(Debug, Clone)]
pub struct Station {
    /// Slot free times, sorted ascending.
    free: VecDeque<f64>,
}

impl Station {
    /// A station with `slots` (at least 1) idle servers.
    pub fn new(slots: u32) -> Station {
        Station {
            free: std::iter::repeat_n(0.0, slots.max(1) as usize).collect(),
        }
    }

    /// Admits a request arriving at `t`; `service(busy)` gives its service time when `busy` slots (itself
    /// included) are in use at its start. Returns (start, finish).
    pub fn admit(&mut self, t: f64, service: impl FnOnce(f64) -> f64) -> (f64, f64) {
        let first = self.free.pop_front().unwrap_or(0.0);
        let start = first.max(t);
        let others_busy = self.free.len() - self.free.partition_point(|&f| f <= start);
        let finish = start + service(others_busy as f64 + 1.0);
        let at = self.free.partition_point(|&f| f <= finish);
        self.free.insert(at, finish);
        (start, finish)
    }
}

/// A request on a [`BatchingHost`].
#[derive(Debug, Clone, Copy)]
struct Job {
    class: usize,
    arrival: f64,
    /// Prompt tokens not yet run.
    prompt_left: f64,
    /// Output tokens not yet produced (the first comes with the step that ends the prompt).
    output_left: f64,
    /// When its first token came out (NaN until then).
    first_token: f64,
    /// Prompt tokens it runs in the step in flight (0 while it decodes).
    chunk: f64,
    /// Whether it was waiting when a drain hold began (its wave prefills before later prompts).
    wave: bool,
}

/// A token count as the host runs it: whole, and at least one.
fn whole_tokens(tokens: f64) -> f64 {
    tokens.round().max(1.0)
}

impl Job {
    /// A request of `class` arriving at `arrival` with its prompt and output still to run.
    fn new(class: usize, arrival: f64, prompt_left: f64, output_left: f64) -> Job {
        Job {
            class,
            arrival,
            prompt_left,
            output_left,
            first_token: f64::NAN,
            chunk: 0.0,
            wave: false,
        }
    }

    fn prefilling(&self) -> bool {
        self.prompt_left > 0.0
    }

    /// A prompt of the wave a drain hold began with, still to prefill.
    fn in_wave(&self) -> bool {
        self.wave && self.prefilling()
    }
}

/// A request a [`BatchingHost`] has finished.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// Its class index.
    pub class: usize,
    /// When it arrived.
    pub arrival: f64,
    /// When its first token came out (end of prefill).
    pub first_token: f64,
    /// When its last token came out.
    pub finish: f64,
}

/// The class index [`BatchingHost::project`] gives the request it projects.
const PROJECTED: usize = usize::MAX;
/// The class index [`BatchingHost::project_among`] gives the requests arriving after it.
const LATER: usize = usize::MAX - 1;

/// A request arriving on a [`BatchingHost`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// When, on the host's clock, seconds.
    pub at: f64,
    /// Prompt tokens.
    pub prompt_tokens: f64,
    /// Output tokens.
    pub output_tokens: f64,
}

/// Shortest step the host runs, seconds (keeps a curve of zeros from stalling the clock).
const MIN_STEP_S: f64 = 1e-6;

/// One CPU instance's continuous batching, run step by step as the engine's scheduler runs it: at each
/// step's start, waiting requests take free slots (first come, first served; `slots` at most); the step
/// runs one token of every decoding request and, within the step's token budget, the prompts of those
/// still prefilling (unless they wait for a short drain of the decodes, [`ServiceCurve::drain_hold`];
/// after a drain, the prompts held when it began prefill before those that came during it), and
/// lasts [`ServiceCurve::step_s`] of both. A request that arrives during a step
/// waits for its end; a prompt's first token comes out with the step that ends it; every decoding
/// request pays for the prompts that share its steps.
#[derive(Debug, Clone)]
pub struct BatchingHost {
    curve: ServiceCurve,
    /// The time the host has been run to.
    now: f64,
    /// The end of the step in flight, if one is.
    step_end: Option<f64>,
    waiting: VecDeque<Job>,
    /// Admitted requests, in admission order.
    running: Vec<Job>,
    finished: Vec<Finished>,
    /// How its pace moves over time (none: steady).
    pace: Option<PaceTrack>,
}

impl BatchingHost {
    /// An idle host serving with `curve`.
    pub fn new(curve: &ServiceCurve) -> BatchingHost {
        BatchingHost {
            curve: curve.clone(),
            now: 0.0,
            step_end: None,
            waiting: VecDeque::new(),
            running: Vec::new(),
            finished: Vec::new(),
            pace: None,
        }
    }

    /// An idle host serving with `curve` at a pace that moves as `drift` says; `host` tells hosts of
    /// one simulation apart, so that each draws its own factors.
    pub fn drifting(curve: &ServiceCurve, drift: PaceDrift, host: usize) -> BatchingHost {
        BatchingHost {
            pace: Some(PaceTrack::new(drift, host)),
            ..BatchingHost::new(curve)
        }
    }

    /// The same host, its requests where they are, running its steps from now on as `curve` says (a
    /// step in flight ends when it was due).
    pub fn with_curve(&self, curve: &ServiceCurve) -> BatchingHost {
        BatchingHost {
            curve: curve.clone(),
            ..self.clone()
        }
    }

    /// Seconds of a step started now that runs `decoding` tokens and `prompt_tokens`, at the host's
    /// pace.
    fn step_s(&mut self, decoding: f64, prompt_tokens: f64) -> f64 {
        let factor = match &mut self.pace {
            Some(pace) => pace.factor(self.now),
            None => 1.0,
        };
        (self.curve.step_s(decoding, prompt_tokens) * factor).max(MIN_STEP_S)
    }

    /// Admits a request of `class` arriving at `t` (not before the last time the host was run to).
    pub fn admit(&mut self, t: f64, class: usize, prompt_tokens: f64, output_tokens: f64) {
        self.advance(t);
        self.waiting.push_back(Job::new(
            class,
            t,
            whole_tokens(prompt_tokens),
            whole_tokens(output_tokens),
        ));
        self.start_step();
    }

    /// Load at `t`, after running the host until then.
    pub fn load(&mut self, t: f64) -> InstanceLoad {
        self.advance(t);
        let waiting = self.waiting.len() as u32;
        let ahead: f64 = self
            .waiting
            .iter()
            .chain(&self.running)
            .map(|j| j.prompt_left)
            .sum();
        InstanceLoad {
            in_flight: waiting + self.running.len() as u32,
            queue_depth: waiting,
            prompt_tokens_ahead: ahead.min(f64::from(u32::MAX)) as u32,
            projected: None,
            paced: None,
        }
    }

    /// What a request of `prompt_tokens` and `output_tokens` arriving at `t` would get here as the
    /// host stands, with nothing arriving after it: its time to first token and end-to-end latency
    /// (seconds from `t`), as the steps serve it beside the requests already on the host. Runs the
    /// host itself to the end: project on a copy to keep the original.
    pub fn project(self, t: f64, prompt_tokens: f64, output_tokens: f64) -> Prediction {
        self.project_among(t, prompt_tokens, output_tokens, std::iter::empty())
    }

    /// As [`BatchingHost::project`], with the requests of `later` (in order of arrival, none before
    /// `t`) arriving after it until its last token.
    pub fn project_among(
        mut self,
        t: f64,
        prompt_tokens: f64,
        output_tokens: f64,
        later: impl IntoIterator<Item = Arrival>,
    ) -> Prediction {
        self.finished.clear();
        let t = t.max(self.now);
        self.admit(t, PROJECTED, prompt_tokens, output_tokens);
        for arrival in later {
            if self.finished.iter().any(|f| f.class == PROJECTED) {
                break;
            }
            let at = arrival.at.max(t);
            self.admit(at, LATER, arrival.prompt_tokens, arrival.output_tokens);
        }
        self.finish_all();
        self.finished
            .iter()
            .find(|f| f.class == PROJECTED)
            .map_or_else(Prediction::default, |f| Prediction {
                ttft_s: f.first_token - t,
                e2e_s: f.finish - t,
            })
    }

    /// The request admitted as `class` showed its first token at `t` on the instance this host
    /// mirrors: its prompt is done here too, and a step running the last of it ends at `t` (a mirror
    /// tells its requests apart by the class index).
    pub fn first_token_seen(&mut self, t: f64, class: usize) {
        self.advance(t);
        let Some(job) = self
            .waiting
            .iter_mut()
            .chain(&mut self.running)
            .find(|j| j.class == class && j.prefilling())
        else {
            return;
        };
        if job.chunk > 0.0 {
            // The step in flight runs its last chunk: end that step now.
            job.prompt_left = job.chunk;
            self.step_end = Some(t.max(self.now));
            self.advance(t);
        } else {
            job.prompt_left = 0.0;
            job.first_token = t;
            job.output_left = (job.output_left - 1.0).max(1.0);
        }
    }

    /// The request admitted as `class`, past its prompt, had `left` output tokens still to come at `t`
    /// on the instance this host mirrors: it decodes on from there (the step in flight runs the next
    /// of them). One the mirror had already finished, running ahead of the instance, decodes again.
    pub fn decode_left_seen(&mut self, t: f64, class: usize, left: f64) {
        self.advance(t);
        let left = whole_tokens(left);
        if let Some(job) = self
            .waiting
            .iter_mut()
            .chain(&mut self.running)
            .find(|j| j.class == class)
        {
            if !job.prefilling() {
                job.output_left = left;
            }
            return;
        }
        self.running.push(Job {
            first_token: t,
            ..Job::new(class, t, 0.0, left)
        });
        self.start_step();
    }

    /// The request admitted as `class` ended at `t` on the instance this host mirrors: it leaves here
    /// too (and a step in flight with nothing left to run ends). What the host finished on its own is
    /// dropped.
    pub fn finished_seen(&mut self, t: f64, class: usize) {
        self.advance(t);
        self.waiting.retain(|j| j.class != class);
        self.running.retain(|j| j.class != class);
        if self.running.is_empty() {
            self.step_end = None;
        }
        self.finished.clear();
        self.start_step();
    }

    /// The requests finished so far, handed over once.
    pub fn take_finished(&mut self) -> Vec<Finished> {
        std::mem::take(&mut self.finished)
    }

    /// Runs the host until every admitted request has finished.
    pub fn finish_all(&mut self) {
        self.advance(f64::INFINITY);
    }

    /// Runs the host's steps that end by `t`.
    fn advance(&mut self, t: f64) {
        while let Some(end) = self.step_end {
            if end > t {
                break;
            }
            self.now = end;
            self.end_step();
            self.skip_decode_steps(t);
            self.start_step();
        }
        if t.is_finite() && t > self.now {
            self.now = t;
        }
    }

    /// Starts a step at `now` unless one is in flight: waiting requests take free slots, then every
    /// decoding request takes one token and the prompts share what is left of the token budget.
    fn start_step(&mut self) {
        if self.step_end.is_some() {
            return;
        }
        while self.running.len() < self.curve.slots as usize {
            let Some(job) = self.waiting.pop_front() else {
                break;
            };
            self.running.push(job);
        }
        if self.running.is_empty() {
            return;
        }
        let decoding = self.decoding();
        let prompts_wait = self.prompts_wait();
        let wave = self.running.iter().any(Job::in_wave);
        if prompts_wait && !wave {
            for job in self.running.iter_mut().filter(|j| j.prefilling()) {
                job.wave = true;
            }
        }
        let mut budget = if prompts_wait {
            0.0
        } else {
            (f64::from(self.curve.step_tokens()) - decoding).max(0.0)
        };
        let mut prompt_tokens = 0.0;
        for job in self
            .running
            .iter_mut()
            .filter(|j| if wave { j.in_wave() } else { j.prefilling() })
        {
            job.chunk = job.prompt_left.min(budget);
            budget -= job.chunk;
            prompt_tokens += job.chunk;
        }
        let step = self.step_s(decoding, prompt_tokens);
        self.step_end = Some(self.now + step);
    }

    /// Running requests decoding.
    fn decoding(&self) -> f64 {
        self.running.iter().filter(|j| !j.prefilling()).count() as f64
    }

    /// Whether the prompts wait for the running decodes to drain, as the engine's scheduler rules:
    /// when the prompts' wait for the longest decode left, summed over the prompts, is at most the
    /// curve's [`ServiceCurve::drain_hold`] times the stall their prefill would cost the decoding
    /// requests, summed over those.
    fn prompts_wait(&self) -> bool {
        let hold = self.curve.drain_hold;
        if hold <= 0.0 {
            return false;
        }
        // One pass: (decoding, longest decode left, prompts, their tokens left).
        let (decoding, longest_left, prompts, tokens) =
            self.running
                .iter()
                .fold((0.0, 0.0, 0.0, 0.0), |(d, longest, p, t), j| {
                    if j.prefilling() {
                        (d, longest, p + 1.0, t + j.prompt_left)
                    } else {
                        (d + 1.0, f64::max(longest, j.output_left), p, t)
                    }
                });
        if decoding == 0.0 || prompts == 0.0 {
            return false;
        }
        // Inside the steps, as the engine times them.
        let drain_s = longest_left * self.curve.step_work_s(decoding, 0.0);
        let tokens = tokens.min(f64::from(self.curve.step_tokens()) - decoding);
        drain_s * prompts <= hold * decoding * self.curve.step_work_s(0.0, tokens)
    }

    /// Ends the step in flight at `now`: prompts advance by their chunks (a finished prompt brings its
    /// first token), decoding requests by one token; finished requests leave.
    fn end_step(&mut self) {
        self.step_end = None;
        let now = self.now;
        for job in &mut self.running {
            if job.prefilling() {
                job.prompt_left -= job.chunk;
                job.chunk = 0.0;
                if job.prefilling() {
                    continue;
                }
                job.first_token = now;
            }
            job.output_left -= 1.0;
        }
        let finished = &mut self.finished;
        self.running.retain(|job| {
            let done = job.output_left < 0.5;
            if done {
                finished.push(Finished {
                    class: job.class,
                    arrival: job.arrival,
                    first_token: job.first_token,
                    finish: now,
                });
            }
            !done
        });
    }

    /// Jumps over decode-only steps that change nothing but the token counts: while every running
    /// request decodes (or the prompts among them wait for the others to drain) and none can join,
    /// the steps are alike until one finishes or `t` comes.
    fn skip_decode_steps(&mut self, t: f64) {
        let free_slot = self.running.len() < self.curve.slots as usize;
        let decoding = self.decoding();
        if decoding == 0.0
            || (free_slot && !self.waiting.is_empty())
            || (self.running.iter().any(Job::prefilling) && !self.prompts_wait())
        {
            return;
        }
        let step = self.step_s(decoding, 0.0);
        // Alike only while the pace holds: the skipped steps start within the current block.
        let block_end = self
            .pace
            .as_ref()
            .map_or(f64::INFINITY, |p| p.block(self.now).1);
        let within_block = ((block_end - self.now) / step).ceil().max(1.0);
        let fewest = self
            .running
            .iter()
            .filter(|j| !j.prefilling())
            .map(|j| j.output_left)
            .fold(f64::INFINITY, f64::min);
        let before_t = if t.is_finite() {
            ((t - self.now) / step).floor().max(0.0)
        } else {
            f64::INFINITY
        };
        let skip = (fewest - 1.0).min(before_t).min(within_block).max(0.0);
        if skip >= 1.0 {
            for job in self.running.iter_mut().filter(|j| !j.prefilling()) {
                job.output_left -= skip;
            }
            self.now += skip * step;
        }
    }
}

/// Per-class sample store.
struct Samples {
    ttft: Vec<f32>,
    e2e: Vec<f32>,
    arrivals: u64,
    rejected: u64,
    gpu: u64,
    good: u64,
}

impl Samples {
    /// One answered request's latencies, seconds.
    fn record(&mut self, sla: &Sla, ttft: f64, e2e: f64) {
        if sla.met_by(ttft, e2e) {
            self.good += 1;
        }
        self.ttft.push(ttft as f32);
        self.e2e.push(e2e as f32);
    }
}

/// Replays `plan` on `workload` with the plan's chosen config taken from `profiles`.
///
/// # Errors
/// [`PlannerError::NotFound`] when the plan's config is not among `profiles`; [`PlannerError::Infeasible`]
/// when the plan has no hours or the workload has other classes than the plan.
pub fn simulate(
    plan: &Plan,
    workload: &Workload,
    profiles: &[ConfigProfile],
    seed: u64,
    opts: &SimOptions,
) -> Result<SimReport> {
    let profile = profiles
        .iter()
        .find(|p| p.id == plan.chosen.config)
        .ok_or_else(|| PlannerError::NotFound {
            what: "config",
            name: plan.chosen.config.clone(),
        })?;
    if plan.hours.len() != HOURS
        || plan
            .hours
            .iter()
            .any(|h| h.classes.len() != workload.classes.len())
    {
        return Err(PlannerError::Infeasible(
            "the plan does not match the workload's classes or has no 24 hours".into(),
        ));
    }
    let max_n = plan
        .hours
        .iter()
        .map(|h| h.cpu_instances)
        .max()
        .unwrap_or(0);
    if max_n > MAX_SIM_INSTANCES {
        let msg = format!(
            "the plan runs {max_n} instances in an hour; the simulator stops at {MAX_SIM_INSTANCES}"
        );
        return Err(PlannerError::Infeasible(msg));
    }
    let curve = ServiceCurve::from_profile(profile, plan.chosen.scaling);
    let rules = if opts.budget_policy {
        BudgetRules::compile(&workload.budget.policy, &workload.classes)
    } else {
        BudgetRules::default()
    };
    let mut run = Run::new(plan, workload, &curve, &rules, seed, opts);
    let days = match &workload.arrivals {
        Arrivals::Hourly(rps) => {
            for day in 0..opts.days {
                for (h, &r) in rps.iter().enumerate() {
                    run.poisson_hour(day, h, r * opts.traffic_scale);
                }
            }
            f64::from(opts.days)
        }
        Arrivals::Trace(recs) => {
            for r in recs {
                run.request_at(r.t_s, Some(*r));
            }
            recs.last()
                .map_or(1.0, |r| (r.t_s / 86_400.0).floor() + 1.0)
        }
    };
    Ok(run.report(seed, days))
}

struct Run<'a> {
    plan: &'a Plan,
    workload: &'a Workload,
    curve: &'a ServiceCurve,
    rules: &'a BudgetRules,
    opts: &'a SimOptions,
    stations: Vec<BatchingHost>,
    loads: Vec<InstanceLoad>,
    samples: Vec<Samples>,
    arrivals_rng: ChaCha8Rng,
    lengths_rng: ChaCha8Rng,
    route_rng: ChaCha8Rng,
    gpu_shares: Vec<Vec<f64>>,
    shed_shares: Vec<Vec<f64>>,
    /// (prompt, output) tokens sent to GPU per (day, hour).
    gpu_tokens: Vec<(f64, f64)>,
    day_of_spend: i64,
    gpu_spend_today: f64,
    requests_today: u64,
    gpu_today: u64,
    cpu_hour_cost: Vec<f64>,
    out_p99: Vec<u32>,
    /// TTFT of every request served on CPU, seconds.
    cpu_ttft: Vec<f32>,
}

impl<'a> Run<'a> {
    fn new(
        plan: &'a Plan,
        workload: &'a Workload,
        curve: &'a ServiceCurve,
        rules: &'a BudgetRules,
        seed: u64,
        opts: &'a SimOptions,
    ) -> Self {
        let max_n = plan
            .hours
            .iter()
            .map(|h| h.cpu_instances)
            .max()
            .unwrap_or(0)
            .max(1) as usize;
        let lag = plan.scale_up_lag_minutes / 60.0;
        let cpu_hour_cost = plan
            .hours
            .iter()
            .map(|h| {
                (f64::from(h.cpu_instances) + f64::from(h.warm_instances) * lag)
                    * plan.chosen.hourly_cost
            })
            .collect();
        Run {
            plan,
            workload,
            curve,
            rules,
            opts,
            stations: (0..max_n)
                .map(|host| match opts.pace_drift {
                    Some(drift) => BatchingHost::drifting(curve, drift, host),
                    None => BatchingHost::new(curve),
                })
                .collect(),
            loads: vec![InstanceLoad::default(); max_n],
            samples: workload
                .classes
                .iter()
                .map(|_| Samples {
                    ttft: Vec::new(),
                    e2e: Vec::new(),
                    arrivals: 0,
                    rejected: 0,
                    gpu: 0,
                    good: 0,
                })
                .collect(),
            arrivals_rng: ChaCha8Rng::seed_from_u64(seed),
            lengths_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15),
            route_rng: ChaCha8Rng::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03),
            gpu_shares: plan.hours.iter().map(PlanHour::gpu_shares).collect(),
            shed_shares: plan.hours.iter().map(PlanHour::shed_shares).collect(),
            gpu_tokens: Vec::new(),
            day_of_spend: -1,
            gpu_spend_today: 0.0,
            requests_today: 0,
            gpu_today: 0,
            cpu_hour_cost,
            out_p99: workload
                .classes
                .iter()
                .map(|c| c.output_tokens.p99().ceil() as u32)
                .collect(),
            cpu_ttft: Vec::new(),
        }
    }

    /// Poisson arrivals at `rate` over hour `h` of day `day` (memoryless, so restarting at the boundary is exact).
    fn poisson_hour(&mut self, day: u32, h: usize, rate: f64) {
        if rate <= 0.0 {
            return;
        }
        let start = f64::from(day) * 86_400.0 + h as f64 * 3600.0;
        let mut t = start + exponential(&mut self.arrivals_rng, rate);
        while t < start + 3600.0 {
            self.request_at(t, None);
            t += exponential(&mut self.arrivals_rng, rate);
        }
    }

    fn pick_class(&mut self, h: usize) -> usize {
        let hour = &self.plan.hours[h];
        let total: f64 = hour.classes.iter().map(|c| c.rps).sum();
        let u = self.arrivals_rng.random::<f64>() * total;
        let mut acc = 0.0;
        for (i, c) in hour.classes.iter().enumerate() {
            acc += c.rps;
            if u < acc {
                return i;
            }
        }
        hour.classes.len() - 1
    }

    fn request_at(&mut self, t: f64, rec: Option<TraceRecord>) {
        let h = ((t % 86_400.0) / 3600.0) as usize % HOURS;
        let day = (t / 86_400.0).floor() as i64;
        if day != self.day_of_spend {
            self.day_of_spend = day;
            self.gpu_spend_today = 0.0;
            self.requests_today = 0;
            self.gpu_today = 0;
        }
        let (class, prompt, output) = match rec {
            Some(r) => (r.class, r.prompt_tokens, r.output_tokens),
            None => {
                let c = self.pick_class(h);
                let cl = &self.workload.classes[c];
                (
                    c,
                    cl.prompt_tokens.sample(&mut self.lengths_rng),
                    cl.output_tokens.sample(&mut self.lengths_rng),
                )
            }
        };
        let draw = self.route_rng.random::<f64>();
        let pick = [
            self.route_rng.random::<u32>() as usize,
            self.route_rng.random::<u32>() as usize,
        ];
        let n = (self.plan.hours[h].cpu_instances as usize).min(self.stations.len());
        for &i in &pick {
            if n > 0 {
                self.loads[i % n] = self.stations[i % n].load(t);
                self.record_finished(i % n);
            }
        }
        let cl = &self.workload.classes[class];
        let req = RouteRequest {
            class,
            priority: cl.priority,
            prompt_tokens: prompt,
            expected_output_tokens: self.out_p99[class],
            sla: cl.sla,
            tpot_s: None,
            draw,
            pick,
        };
        let g = &self.plan.gpu_fallback;
        // An hourly GPU pool exists only in hours the plan rents it; a per-token API is always there.
        let gpu_up = matches!(g.pricing, GpuPricing::PerToken { .. })
            || self.plan.hours[h].gpu_instances > 0;
        let pools = [
            PoolState {
                kind: PoolKind::Cpu,
                healthy: true,
                instances: &self.loads[..n],
                ewma_ttft_s: 0.0,
                ewma_e2e_s: 0.0,
                service: Some(self.curve),
                gpu_ttft_s: 0.0,
                gpu_tpot_s: 0.0,
                corrections: &[],
            },
            PoolState {
                kind: PoolKind::Gpu,
                healthy: gpu_up,
                instances: &[],
                ewma_ttft_s: 0.0,
                ewma_e2e_s: 0.0,
                service: None,
                gpu_ttft_s: g.ttft_p99_s,
                gpu_tpot_s: g.tpot_p99_s,
                corrections: &[],
            },
        ];
        let frac = (t % 3600.0) / 3600.0;
        let cpu_spent: f64 =
            self.cpu_hour_cost[..h].iter().sum::<f64>() + self.cpu_hour_cost[h] * frac;
        let budget = BudgetState {
            spent_today: cpu_spent + self.gpu_spend_today,
            budget_per_day: self.workload.budget.per_day,
            gpu_share_today: if self.requests_today > 0 {
                self.gpu_today as f64 / self.requests_today as f64
            } else {
                0.0
            },
        };
        let policy = RoutePolicy {
            gpu_share: &self.gpu_shares[h],
            shed_share: &self.shed_shares[h],
            overflow_to_gpu: self.opts.overflow_to_gpu,
            budget: self.rules,
        };
        let decision = route(&req, &pools, &budget, &policy);
        self.requests_today += 1;
        let (p, o) = (f64::from(prompt), f64::from(output));
        let s = &mut self.samples[class];
        s.arrivals += 1;
        let (ttft, e2e) = match decision.target {
            Target::Reject => {
                s.rejected += 1;
                return;
            }
            Target::Cpu { instance, .. } => {
                // Its latencies are known when it finishes (later arrivals slow its batch down).
                self.stations[instance].admit(t, class, p, o);
                return;
            }
            Target::Gpu { .. } => {
                s.gpu += 1;
                self.gpu_today += 1;
                self.gpu_spend_today += g.request_cost(p, o);
                let slot = (day.max(0) as usize) * HOURS + h;
                if self.gpu_tokens.len() <= slot {
                    self.gpu_tokens.resize(slot + 1, (0.0, 0.0));
                }
                self.gpu_tokens[slot].0 += p;
                self.gpu_tokens[slot].1 += o;
                (
                    g.ttft_p99_s,
                    g.ttft_p99_s + g.tpot_p99_s * (o - 1.0).max(0.0),
                )
            }
        };
        s.record(&cl.sla, ttft, e2e);
    }

    /// Records the requests instance `i` has finished, with the time they spent outside the engine.
    fn record_finished(&mut self, i: usize) {
        for f in self.stations[i].take_finished() {
            let sla = &self.workload.classes[f.class].sla;
            let (ttft, e2e) = self
                .curve
                .client_latencies(f.first_token - f.arrival, f.finish - f.arrival);
            self.samples[f.class].record(sla, ttft, e2e);
            self.cpu_ttft.push(ttft as f32);
        }
    }

    fn report(mut self, seed: u64, days: f64) -> SimReport {
        for i in 0..self.stations.len() {
            self.stations[i].finish_all();
            self.record_finished(i);
        }
        let whole_days = days.ceil().max(1.0);
        let cpu_cost: f64 = self.cpu_hour_cost.iter().sum::<f64>() * whole_days;
        let g = &self.plan.gpu_fallback;
        let gpu_cost: f64 = self
            .gpu_tokens
            .iter()
            .map(|&(p, o)| g.hour_cost(p, o))
            .sum();
        let requests: u64 = self.samples.iter().map(|s| s.arrivals).sum();
        let gpu: u64 = self.samples.iter().map(|s| s.gpu).sum();
        let rejected: u64 = self.samples.iter().map(|s| s.rejected).sum();
        let share = |x: u64, n: u64| if n > 0 { r6(x as f64 / n as f64) } else { 0.0 };
        let mut all_ttft: Vec<f32> = self
            .samples
            .iter()
            .flat_map(|s| s.ttft.iter().copied())
            .collect();
        let mut all_e2e: Vec<f32> = self
            .samples
            .iter()
            .flat_map(|s| s.e2e.iter().copied())
            .collect();
        let classes = self
            .samples
            .iter_mut()
            .zip(&self.workload.classes)
            .map(|(s, c)| {
                let ttft = p99(&mut s.ttft);
                let e2e = p99(&mut s.e2e);
                ClassSim {
                    class: c.name.clone(),
                    requests: s.arrivals,
                    rejected_share: share(s.rejected, s.arrivals),
                    gpu_share: share(s.gpu, s.arrivals),
                    ttft_p99_s: r6(ttft),
                    e2e_p99_s: r6(e2e),
                    sla: c.sla,
                    attainment: share(s.good, s.arrivals),
                    meets_sla: s.rejected == 0 && c.sla.met_by(ttft, e2e),
                }
            })
            .collect();
        SimReport {
            seed,
            days: r6(days),
            requests,
            gpu_share: share(gpu, requests),
            rejected_share: share(rejected, requests),
            cpu_cost: r6(cpu_cost),
            gpu_cost: r6(gpu_cost),
            cost_per_day: r6((cpu_cost + gpu_cost) / whole_days),
            ttft_p99_s: r6(p99(&mut all_ttft)),
            e2e_p99_s: r6(p99(&mut all_e2e)),
            cpu_ttft_p50_s: r6(percentile(&mut self.cpu_ttft, 0.5)),
            classes,
        }
    }
}

/// Nearest-rank 99th percentile (0 for no samples).
fn p99(v: &mut [f32]) -> f64 {
    percentile(v, 0.99)
}

/// Nearest-rank `q` quantile (0 for no samples).
fn percentile(v: &mut [f32], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(k, f32::total_cmp);
    f64::from(*x)
}

#[cfg(test)]
mod tests;
