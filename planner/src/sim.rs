//! Seeded discrete-event simulation of a plan: Poisson arrivals per hour (or a trace), lengths drawn from
//! the classes, [`route`](crate::route::route()) deciding each request, CPU instances as FCFS multi-slot
//! stations whose service times come from the measured curve, GPU fallback at its stated p99s.
//! Deterministic per seed; separate random streams for arrivals, lengths and routing draws keep common
//! random numbers across plans. O(requests x log slots).

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{PlannerError, Result};
use crate::plan::{Plan, PlanHour, r6};
use crate::profile::ConfigProfile;
use crate::route::{
    BudgetRules, BudgetState, InstanceLoad, PoolKind, PoolState, RoutePolicy, RouteRequest, Target,
    route,
};
use crate::service::ServiceCurve;
use crate::workload::{Arrivals, GpuPricing, HOURS, Sla, TraceRecord, Workload};

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
}

impl Default for SimOptions {
    /// One day, traffic as planned, overflow and budget policy on.
    fn default() -> Self {
        SimOptions {
            days: 1,
            traffic_scale: 1.0,
            overflow_to_gpu: true,
            budget_policy: true,
        }
    }
}

/// Simulated results for one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSim {
    /// Class name.
    pub class: String,
    /// Arrivals.
    pub requests: u64,
    /// Share rejected.
    pub rejected_share: f64,
    /// Share sent to GPU.
    pub gpu_share: f64,
    /// p99 TTFT of served requests, seconds.
    pub ttft_p99_s: f64,
    /// p99 E2E of served requests, seconds.
    pub e2e_p99_s: f64,
    /// The SLA.
    pub sla: Sla,
    /// Share of arrivals served within every SLA bound (goodput share).
    pub attainment: f64,
    /// True when the p99s meet the SLA.
    pub meets_sla: bool,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// Seed used.
    pub seed: u64,
    /// Days simulated.
    pub days: f64,
    /// Arrivals.
    pub requests: u64,
    /// Share of arrivals sent to GPU.
    pub gpu_share: f64,
    /// Share rejected.
    pub rejected_share: f64,
    /// CPU cost over the run, $.
    pub cpu_cost: f64,
    /// GPU cost over the run, $.
    pub gpu_cost: f64,
    /// (CPU + GPU) / days, $.
    pub cost_per_day: f64,
    /// p99 TTFT of every served request, all classes together, seconds.
    #[serde(default)]
    pub ttft_p99_s: f64,
    /// p99 E2E of every served request, all classes together, seconds.
    #[serde(default)]
    pub e2e_p99_s: f64,
    /// Per class.
    pub classes: Vec<ClassSim>,
}

/// An FCFS station with `slots` servers (one CPU instance's continuous-batching slots). Each request takes
/// the slot that frees first (the Kiefer-Wolfowitz recursion), so waiting times are exact for FCFS G/G/c.
/// Prompts are prefilled one after another on the instance's compute ([`Station::admit_prefill_first`]):
/// prefill is compute-bound, so two prompts arriving together do not both prefill at full speed.
#[derive(Debug, Clone)]
pub struct Station {
    /// Slot free times, sorted ascending.
    free: VecDeque<f64>,
    /// When each prefill lane (one per copy of the measured host in the instance) is next free.
    prefill_free: Vec<f64>,
    /// Finish times of admitted requests, as a min-heap.
    finishing: std::collections::BinaryHeap<std::cmp::Reverse<OrdF64>>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl Station {
    /// A station with `slots` (at least 1) idle servers.
    pub fn new(slots: u32) -> Station {
        Station {
            free: std::iter::repeat_n(0.0, slots.max(1) as usize).collect(),
            prefill_free: vec![0.0],
            finishing: Default::default(),
        }
    }

    /// A station with `slots` servers and `lanes` (at least 1) prompts prefilled at a time.
    pub fn with_prefill_lanes(slots: u32, lanes: u32) -> Station {
        Station {
            prefill_free: vec![0.0; lanes.max(1) as usize],
            ..Station::new(slots)
        }
    }

    /// Admits a request arriving at `t` that needs `prefill_s` of the instance's prefill compute (shared,
    /// first come first served) once it holds a slot, then decodes for `decode(busy)` seconds, `busy`
    /// being the slots in use (itself included) when its prefill ends. Returns (first token, finish).
    pub fn admit_prefill_first(
        &mut self,
        t: f64,
        prefill_s: f64,
        decode: impl FnOnce(f64) -> f64,
    ) -> (f64, f64) {
        let first = self.free.pop_front().unwrap_or(0.0);
        let slot = first.max(t);
        let (lane, lane_free) = self
            .prefill_free
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0));
        let prefilled = slot.max(lane_free) + prefill_s;
        if let Some(free) = self.prefill_free.get_mut(lane) {
            *free = prefilled;
        }
        let others_busy = self.free.len() - self.free.partition_point(|&f| f <= prefilled);
        let finish = prefilled + decode(others_busy as f64 + 1.0);
        let at = self.free.partition_point(|&f| f <= finish);
        self.free.insert(at, finish);
        self.finishing.push(std::cmp::Reverse(OrdF64(finish)));
        (prefilled, finish)
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
        self.finishing.push(std::cmp::Reverse(OrdF64(finish)));
        (start, finish)
    }

    /// Load at `now` (finished requests are forgotten).
    pub fn load(&mut self, now: f64) -> InstanceLoad {
        while self.finishing.peek().is_some_and(|r| r.0.0 <= now) {
            self.finishing.pop();
        }
        let in_flight = self.finishing.len() as u32;
        InstanceLoad {
            in_flight,
            queue_depth: in_flight.saturating_sub(self.free.len() as u32),
        }
    }
}

/// Exponential draw with the given rate.
pub fn exponential<R: Rng>(rng: &mut R, rate: f64) -> f64 {
    -(1.0 - rng.random::<f64>()).ln() / rate
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
    stations: Vec<Station>,
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
                .map(|_| Station::with_prefill_lanes(curve.slots, curve.prefill_lanes()))
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
            }
        }
        let cl = &self.workload.classes[class];
        let req = RouteRequest {
            class,
            priority: cl.priority,
            prompt_tokens: prompt,
            expected_output_tokens: self.out_p99[class],
            sla: cl.sla,
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
                let curve = self.curve;
                let (first_token, finish) =
                    self.stations[instance]
                        .admit_prefill_first(t, curve.prefill_s(p), |busy| curve.decode_s(o, busy));
                (first_token - t, finish - t)
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
        if cl.sla.met_by(ttft, e2e) {
            s.good += 1;
        }
        s.ttft.push(ttft as f32);
        s.e2e.push(e2e as f32);
    }

    fn report(mut self, seed: u64, days: f64) -> SimReport {
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
            classes,
        }
    }
}

/// Nearest-rank 99th percentile (0 for no samples).
fn p99(v: &mut [f32]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(k, f32::total_cmp);
    f64::from(*x)
}
