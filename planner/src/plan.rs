//! The capacity plan: pick the cheapest (config, CPU instance type) for the day, then for each hour the
//! CPU instance count and each class's GPU share that meet every p99 SLA at least cost; when the budget
//! cannot pay for that, degrade the lowest-priority classes and say by how much. Search is analytic
//! (the measured latency-vs-load curves); `sim` validates the chosen plan.

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, InstanceType, PriceModel};
use crate::error::{PlannerError, Result, invalid};
use crate::profile::{
    ConfigProfile, Latency, Provenance, Scaling, ScalingRule, Shape, scaling_for,
};
use crate::sim::{SimOptions, SimReport, simulate};
use crate::tco::{CostInputs, SiteCosts, dollars_per_million_tokens};
use crate::workload::{Arrivals, GpuFallback, GpuFallbackSpec, HOURS, Sla, Workload};

/// Subsets of classes are enumerated up to this many classes; beyond it only slope-ordered prefixes are.
const MAX_ENUMERATED_CLASSES: usize = 10;
/// Most classes a workload may have (class sets are bit masks).
pub const MAX_CLASSES: usize = 31;
/// Candidates kept in [`Plan::candidates`].
const CANDIDATES_SHOWN: usize = 10;

/// Everything a plan is made from.
#[derive(Debug, Clone)]
pub struct PlanInput {
    /// The workload.
    pub workload: Workload,
    /// Prices.
    pub catalog: Catalog,
    /// Candidate configs with their curves.
    pub profiles: Vec<ConfigProfile>,
    /// GPU fallback (defaults to the workload's).
    pub gpu_fallback: GpuFallbackSpec,
    /// How CPU instances are paid for.
    pub price_model: PriceModel,
    /// Site costs on top of rent.
    pub site: SiteCosts,
    /// Fraction of SLA-feasible capacity kept free (0.2 = plan to 80%).
    pub headroom: f64,
    /// Seed of the validating simulation.
    pub seed: u64,
    /// Minutes a new instance takes to start; instances for a ramp are started this long ahead and billed.
    pub scale_up_lag_minutes: f64,
    /// Smallest CPU pool kept in every hour.
    pub min_pool: u32,
    /// Force one scaling rule (`None`: measured type, else memory bandwidth when known, else per core).
    pub scaling: Option<ScalingRule>,
    /// Let estimated profiles compete with measured ones (they stay labelled as estimates).
    pub allow_estimates: bool,
    /// Only consider instance types in these regions (empty: all).
    pub regions: Vec<String>,
    /// Days the chosen plan is replayed in the simulator (0: no validation).
    pub validate_days: u32,
    /// Compute the sensitivity scenarios.
    pub sensitivity: bool,
}

impl PlanInput {
    /// Builds the input from file texts, as the CLI reads them: the workload TOML, the trace CSV it names
    /// (if any), an optional user catalog merged over the builtin one, and the profiles as JSON.
    ///
    /// # Errors
    /// The parse and validation errors of each input, naming file kind, key and line.
    pub fn from_texts(
        workload_toml: &str,
        trace_csv: Option<&str>,
        user_catalog_toml: Option<&str>,
        profiles_json: &str,
    ) -> Result<PlanInput> {
        let workload = crate::workload::WorkloadFile::from_toml_str(workload_toml)?
            .into_workload(trace_csv)?;
        let mut catalog = Catalog::builtin();
        if let Some(user) = user_catalog_toml {
            catalog.merge(Catalog::from_toml_str(user)?);
        }
        PlanInput::new(
            workload,
            catalog,
            ConfigProfile::list_from_json_str(profiles_json)?,
        )
    }

    /// Defaults: the workload's GPU fallback, on-demand prices, cloud site costs, 20% headroom, seed 1,
    /// 5-minute scale-up lag, a minimum pool of 1, automatic scaling rule, measured profiles only, one
    /// validation day, sensitivity on.
    ///
    /// # Errors
    /// [`PlannerError::InvalidField`] when the workload names no GPU fallback.
    pub fn new(
        workload: Workload,
        catalog: Catalog,
        profiles: Vec<ConfigProfile>,
    ) -> Result<PlanInput> {
        let gpu_fallback = workload.gpu_fallback.clone().ok_or_else(|| {
            invalid(
                "workload",
                &workload.name,
                "gpu_fallback",
                "is required to plan (or set it in PlanInput)".into(),
            )
        })?;
        Ok(PlanInput {
            workload,
            catalog,
            profiles,
            gpu_fallback,
            price_model: PriceModel::OnDemand,
            site: SiteCosts::default(),
            headroom: 0.2,
            seed: 1,
            scale_up_lag_minutes: 5.0,
            min_pool: 1,
            scaling: None,
            allow_estimates: false,
            regions: Vec::new(),
            validate_days: 1,
            sensitivity: true,
        })
    }
}

/// The chosen config and instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenConfig {
    /// Config id.
    pub config: String,
    /// Model.
    pub model: String,
    /// Weight format.
    pub weights: String,
    /// Measured or estimated.
    pub provenance: Provenance,
    /// Instance type.
    pub instance_type: String,
    /// Its region.
    pub region: String,
    /// How the measured curve was carried to the instance type.
    pub scaling: Scaling,
    /// TCO of one instance-hour, $.
    pub hourly_cost: f64,
}

/// One (config, instance type) priced at the highest load that meets every CPU-feasible class's SLA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateCost {
    /// Config id.
    pub config: String,
    /// Instance type.
    pub instance_type: String,
    /// Region.
    pub region: String,
    /// Measured or estimated.
    pub provenance: Provenance,
    /// Scaling rule and factor.
    pub scaling: Scaling,
    /// TCO $/hour.
    pub hourly_cost: f64,
    /// Requests/s (of the config's mean request) one instance carries within SLA, after headroom.
    pub sla_rps: f64,
    /// Output tokens/s at that load.
    pub output_tokens_per_s: f64,
    /// $ per 1M output tokens at that load.
    pub dollars_per_million_output: Option<f64>,
    /// $ per 1M prompt + output tokens at that load.
    pub dollars_per_million_total: Option<f64>,
    /// Classes this config cannot serve within SLA at any measured load.
    pub infeasible_classes: Vec<String>,
    /// Cheapest day on this candidate before the budget, $.
    pub day_cost: f64,
}

/// One class in one hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassHour {
    /// Class name.
    pub class: String,
    /// Arrivals, requests/s.
    pub rps: f64,
    /// Share of the class's requests sent to the GPU fallback.
    pub gpu_share: f64,
    /// Share of the class's requests rejected (only when the budget forces it).
    pub shed_share: f64,
    /// Predicted p99 TTFT, seconds (the worse of the routes used).
    pub ttft_p99_s: f64,
    /// Predicted p99 E2E, seconds.
    pub e2e_p99_s: f64,
    /// The class's SLA.
    pub sla: Sla,
    /// True when the predictions meet the SLA and nothing is shed.
    pub meets_sla: bool,
}

/// How a class misses its SLA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Degradation {
    /// Class name.
    pub class: String,
    /// "ttft_p99", "e2e_p99" or "shed".
    pub metric: String,
    /// Predicted value (seconds, or share of requests for "shed").
    pub predicted: f64,
    /// The SLA bound (0 for "shed").
    pub target: f64,
}

/// One hour of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanHour {
    /// Hour of day, 0..24.
    pub hour: u32,
    /// Total arrivals, requests/s.
    pub rps: f64,
    /// CPU instances serving this hour.
    pub cpu_instances: u32,
    /// Extra instances started during this hour ahead of the next hour's ramp (billed for the lag).
    pub warm_instances: u32,
    /// Instance type of the pool.
    pub instance_type: String,
    /// Config of the pool.
    pub config: String,
    /// GPU instances (hourly fallback) needed; 0 for per-token fallback.
    pub gpu_instances: u32,
    /// CPU pool load over its SLA capacity (headroom included).
    pub cpu_utilization: f64,
    /// $ for the hour.
    pub cost: f64,
    /// Per class.
    pub classes: Vec<ClassHour>,
    /// Classes missing their SLA this hour.
    pub degraded: Vec<Degradation>,
}

/// Day totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// $ per day.
    pub cost_per_day: f64,
    /// CPU part, $ per day.
    pub cpu_cost_per_day: f64,
    /// GPU part, $ per day.
    pub gpu_cost_per_day: f64,
    /// Requests served per day.
    pub requests_per_day: f64,
    /// Requests rejected per day.
    pub shed_requests_per_day: f64,
    /// $ per 1M output tokens served.
    pub dollars_per_million_output: Option<f64>,
    /// $ per 1M prompt + output tokens served.
    pub dollars_per_million_total: Option<f64>,
    /// Share of requests sent to the GPU fallback.
    pub gpu_share: f64,
    /// $ per day if everything went to the GPU fallback.
    pub all_gpu_cost_per_day: f64,
    /// All-GPU minus plan, $ per day.
    pub savings_per_day: f64,
    /// Savings over the all-GPU cost.
    pub savings_fraction: f64,
    /// The budget, $ per day.
    pub budget_per_day: Option<f64>,
    /// True when the day's cost fits the budget.
    pub within_budget: bool,
}

/// A what-if: the plan re-made with prices or traffic changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// "prices -20%", "prices +20%", "traffic x2".
    pub label: String,
    /// Chosen config.
    pub config: String,
    /// Chosen instance type.
    pub instance_type: String,
    /// $ per day.
    pub cost_per_day: f64,
    /// $ per 1M output tokens.
    pub dollars_per_million_output: Option<f64>,
    /// GPU share of requests.
    pub gpu_share: f64,
    /// Largest hourly CPU pool.
    pub peak_cpu_instances: u32,
    /// Classes that miss their SLA in some hour.
    pub degraded_classes: Vec<String>,
}

/// A capacity plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Workload name.
    pub workload: String,
    /// Price model of the CPU pool.
    pub price_model: PriceModel,
    /// Headroom used.
    pub headroom: f64,
    /// Scale-up lag, minutes.
    pub scale_up_lag_minutes: f64,
    /// Minimum pool.
    pub min_pool: u32,
    /// The chosen config and instance type.
    pub chosen: ChosenConfig,
    /// The GPU fallback and its price.
    pub gpu_fallback: GpuFallback,
    /// 24 hours.
    pub hours: Vec<PlanHour>,
    /// Day totals.
    pub totals: Totals,
    /// The cheapest candidates, cheapest day first.
    pub candidates: Vec<CandidateCost>,
    /// Classes that miss their SLA in some hour, with the worst miss.
    pub degraded: Vec<Degradation>,
    /// What-ifs (empty when not asked for).
    pub sensitivity: Vec<Scenario>,
    /// The simulator's replay of this plan (absent when not asked for).
    pub validation: Option<SimReport>,
}

/// Per-class figures that do not depend on the candidate.
#[derive(Debug, Clone)]
pub(crate) struct ClassInfo {
    pub(crate) name: String,
    pub(crate) priority: u32,
    pub(crate) sla: Sla,
    pub(crate) shape: Shape,
    pub(crate) mean_prompt: f64,
    pub(crate) mean_output: f64,
    pub(crate) gpu: Latency,
    pub(crate) gpu_request_cost: f64,
}

/// A (config, instance type) pair with its per-class SLA rates.
struct Candidate<'a> {
    profile: &'a ConfigProfile,
    inst: &'a InstanceType,
    scaling: Scaling,
    hourly: f64,
    /// Per class: highest SLA-meeting rate per instance after headroom, in mean-request units/s.
    cap: Vec<f64>,
    /// Per class: work per request in mean-request units.
    weight: Vec<f64>,
    /// Classes in increasing order of GPU $ per unit of CPU work (cheapest to offload first).
    spill_order: Vec<usize>,
}

/// An hour's decision on one candidate.
#[derive(Debug, Clone, PartialEq)]
struct Decision {
    n: u32,
    gpu: Vec<f64>,
    shed: Vec<f64>,
}

struct Ctx<'a> {
    classes: Vec<ClassInfo>,
    gpu: GpuFallback,
    rates: Vec<Vec<f64>>,
    input: &'a PlanInput,
    price_factor: f64,
}

/// Makes the plan.
///
/// # Errors
/// [`PlannerError::Infeasible`] when no CPU candidate has a price and a profile; lookup errors for the
/// GPU fallback; validation errors for bad knobs.
pub fn plan(input: &PlanInput) -> Result<Plan> {
    check_knobs(input)?;
    let mut p = plan_once(input, 1.0, 1.0)?;
    if input.sensitivity {
        for (label, price, traffic) in [
            ("prices -20%", 0.8, 1.0),
            ("prices +20%", 1.2, 1.0),
            ("traffic x2", 1.0, 2.0),
        ] {
            let s = plan_once(input, price, traffic)?;
            p.sensitivity.push(Scenario {
                label: label.to_string(),
                config: s.chosen.config,
                instance_type: s.chosen.instance_type,
                cost_per_day: s.totals.cost_per_day,
                dollars_per_million_output: s.totals.dollars_per_million_output,
                gpu_share: s.totals.gpu_share,
                peak_cpu_instances: s.hours.iter().map(|h| h.cpu_instances).max().unwrap_or(0),
                degraded_classes: s.degraded.iter().map(|d| d.class.clone()).collect(),
            });
        }
    }
    if input.validate_days > 0 {
        let opts = SimOptions {
            days: input.validate_days,
            ..SimOptions::default()
        };
        p.validation = Some(simulate(
            &p,
            &input.workload,
            &input.profiles,
            input.seed,
            &opts,
        )?);
    }
    Ok(p)
}

fn check_knobs(input: &PlanInput) -> Result<()> {
    let name = input.workload.name.as_str();
    if !(0.0..0.95).contains(&input.headroom) {
        return Err(invalid(
            "plan",
            name,
            "headroom",
            format!("must be in 0..0.95, got {}", input.headroom),
        ));
    }
    if !(input.scale_up_lag_minutes.is_finite()
        && (0.0..=60.0).contains(&input.scale_up_lag_minutes))
    {
        let msg = format!(
            "must be in 0..=60 minutes, got {}",
            input.scale_up_lag_minutes
        );
        return Err(invalid("plan", name, "scale_up_lag_minutes", msg));
    }
    let k = input.workload.classes.len();
    if k == 0 || k > MAX_CLASSES {
        let msg = format!("needs 1..={MAX_CLASSES} classes, got {k}");
        return Err(invalid("plan", name, "class", msg));
    }
    let bad_rate = |x: &f64| !(x.is_finite() && *x >= 0.0);
    if let Arrivals::Hourly(r) = &input.workload.arrivals
        && (r.len() != HOURS || r.iter().any(bad_rate))
    {
        let msg = format!("needs {HOURS} finite rates >= 0");
        return Err(invalid("plan", name, "arrivals.hourly_rps", msg));
    }
    input.profiles.iter().try_for_each(ConfigProfile::validate)
}

/// One plan at the given price and traffic multipliers, without sensitivity or validation.
fn plan_once(input: &PlanInput, price_factor: f64, traffic: f64) -> Result<Plan> {
    let gpu = GpuFallback::resolve(
        &input.gpu_fallback,
        &input.catalog,
        input.price_model,
        &input.site,
    )?
    .with_price_factor(price_factor);
    let workload = if traffic == 1.0 {
        input.workload.clone()
    } else {
        input.workload.scaled(traffic)
    };
    let classes = class_infos(&workload, &gpu);
    let rates = workload.hourly_class_rates();
    let ctx = Ctx {
        classes,
        gpu,
        rates,
        input,
        price_factor,
    };
    let candidates = candidates(&ctx);
    if candidates.is_empty() {
        return Err(PlannerError::Infeasible(
            "no (config, CPU instance type) pair with a price for the chosen price model, region and scaling rule"
                .into(),
        ));
    }
    let mut costed: Vec<(f64, usize)> = Vec::with_capacity(candidates.len());
    let mut best: Option<(f64, usize, Vec<Decision>)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let day: Vec<Decision> = ctx.rates.iter().map(|r| best_hour(&ctx, c, r)).collect();
        let cost = day_cost(&ctx, c, &day);
        costed.push((cost, i));
        if best.as_ref().is_none_or(|(b, _, _)| cost < *b) {
            best = Some((cost, i, day));
        }
    }
    let Some((_, bi, mut day)) = best else {
        return Err(PlannerError::Infeasible("no candidate".into()));
    };
    let chosen = &candidates[bi];
    if let Some(budget) = workload.budget.per_day {
        apply_budget(&ctx, chosen, &mut day, budget);
    }
    costed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let shown = costed
        .iter()
        .take(CANDIDATES_SHOWN)
        .map(|&(cost, i)| candidate_cost(&ctx, &candidates[i], cost));
    Ok(assemble(&ctx, &workload, chosen, &day, shown.collect()))
}

/// Every (config, CPU instance type) candidate priced at the highest load meeting every CPU-feasible
/// class's SLA, with its cheapest SLA-meeting day, cheapest $/1M output tokens first (for frontiers).
///
/// # Errors
/// As [`plan`], without the infeasible case: no candidate gives an empty list.
pub fn candidate_costs(input: &PlanInput) -> Result<Vec<CandidateCost>> {
    check_knobs(input)?;
    let gpu = GpuFallback::resolve(
        &input.gpu_fallback,
        &input.catalog,
        input.price_model,
        &input.site,
    )?;
    let classes = class_infos(&input.workload, &gpu);
    let rates = input.workload.hourly_class_rates();
    let ctx = Ctx {
        classes,
        gpu,
        rates,
        input,
        price_factor: 1.0,
    };
    let mut out: Vec<CandidateCost> = candidates(&ctx)
        .iter()
        .map(|c| {
            let day: Vec<Decision> = ctx.rates.iter().map(|r| best_hour(&ctx, c, r)).collect();
            candidate_cost(&ctx, c, day_cost(&ctx, c, &day))
        })
        .collect();
    let key = |c: &CandidateCost| c.dollars_per_million_output.unwrap_or(f64::INFINITY);
    out.sort_by(|a, b| key(a).total_cmp(&key(b)));
    Ok(out)
}

pub(crate) fn class_infos(w: &Workload, gpu: &GpuFallback) -> Vec<ClassInfo> {
    w.classes
        .iter()
        .map(|c| {
            let shape = Shape {
                prompt_tokens_p99: c.prompt_tokens.p99(),
                output_tokens_p99: c.output_tokens.p99(),
            };
            let gpu_lat = Latency {
                ttft_p99_s: gpu.ttft_p99_s,
                e2e_p99_s: gpu.ttft_p99_s
                    + gpu.tpot_p99_s * (shape.output_tokens_p99 - 1.0).max(0.0),
            };
            ClassInfo {
                name: c.name.clone(),
                priority: c.priority,
                sla: c.sla,
                shape,
                mean_prompt: c.prompt_tokens.mean(),
                mean_output: c.output_tokens.mean(),
                gpu: gpu_lat,
                gpu_request_cost: gpu.request_cost(c.prompt_tokens.mean(), c.output_tokens.mean()),
            }
        })
        .collect()
}

fn candidates<'a>(ctx: &Ctx<'a>) -> Vec<Candidate<'a>> {
    let input = ctx.input;
    let headroom = 1.0 - input.headroom;
    let mut out = Vec::new();
    for profile in &input.profiles {
        if profile.provenance.is_estimate() && !input.allow_estimates {
            continue;
        }
        let host_rate: Vec<f64> = ctx
            .classes
            .iter()
            .map(|c| profile.max_rate_meeting(c.shape, c.sla.ttft_p99_s, c.sla.e2e_p99_s))
            .collect();
        let weight: Vec<f64> = ctx
            .classes
            .iter()
            .map(|c| profile.request_weight(c.mean_prompt, c.mean_output))
            .collect();
        let mut spill_order: Vec<usize> = (0..ctx.classes.len()).collect();
        let slope = |i: usize| ctx.classes[i].gpu_request_cost / weight[i];
        spill_order.sort_by(|&a, &b| slope(a).total_cmp(&slope(b)).then(a.cmp(&b)));
        for inst in &input.catalog.instances {
            if !input.regions.is_empty() && !input.regions.contains(&inst.region) {
                continue;
            }
            let Some(scaling) = scaling_for(profile, inst, input.scaling) else {
                continue;
            };
            let Some(cost) = CostInputs::for_instance(inst, input.price_model, &input.site) else {
                continue;
            };
            out.push(Candidate {
                profile,
                inst,
                scaling,
                hourly: cost.hourly_cost() * ctx.price_factor,
                cap: host_rate
                    .iter()
                    .map(|r| r * scaling.factor * headroom)
                    .collect(),
                weight: weight.clone(),
                spill_order: spill_order.clone(),
            });
        }
    }
    out
}

/// Per-instance capacity for the classes in `mask` that have traffic; infinite when none do, 0 when one
/// of them cannot meet its SLA on this candidate.
fn mask_capacity(c: &Candidate<'_>, rates: &[f64], mask: u32) -> f64 {
    let mut cap = f64::INFINITY;
    for (i, &r) in rates.iter().enumerate() {
        if mask & (1 << i) != 0 && r > 0.0 {
            cap = cap.min(c.cap[i]);
        }
    }
    cap
}

/// Cost of an hour: CPU instances plus the GPU fallback for what is sent there.
fn hour_cost(ctx: &Ctx<'_>, c: &Candidate<'_>, rates: &[f64], n: u32, gpu: &[f64]) -> f64 {
    let (mut prompt, mut output) = (0.0, 0.0);
    for (i, cl) in ctx.classes.iter().enumerate() {
        let req = rates[i] * gpu[i] * 3600.0;
        prompt += req * cl.mean_prompt;
        output += req * cl.mean_output;
    }
    f64::from(n) * c.hourly + ctx.gpu.hour_cost(prompt, output)
}

/// Fills `gpu` for `mask` with `n` instances: classes outside the mask go to GPU; inside, work beyond the
/// pool's capacity spills cheapest-to-offload first.
fn split(c: &Candidate<'_>, rates: &[f64], mask: u32, n: u32, gpu: &mut [f64]) {
    let cap = mask_capacity(c, rates, mask);
    let room = if cap.is_finite() {
        f64::from(n) * cap
    } else {
        f64::INFINITY
    };
    let total: f64 = (0..rates.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| rates[i] * c.weight[i])
        .sum();
    let mut excess = (total - room).max(0.0);
    for (i, g) in gpu.iter_mut().enumerate() {
        *g = if mask & (1 << i) != 0 || rates[i] <= 0.0 {
            0.0
        } else {
            1.0
        };
    }
    for &i in &c.spill_order {
        if excess <= 0.0 {
            break;
        }
        if mask & (1 << i) == 0 || rates[i] <= 0.0 {
            continue;
        }
        let work = rates[i] * c.weight[i];
        let moved = work.min(excess);
        gpu[i] = moved / work;
        excess -= moved;
    }
}

/// The cheapest SLA-meeting decision for one hour.
fn best_hour(ctx: &Ctx<'_>, c: &Candidate<'_>, rates: &[f64]) -> Decision {
    let k = rates.len();
    let min_pool = ctx.input.min_pool;
    let masks: Vec<u32> = if k <= MAX_ENUMERATED_CLASSES {
        (0..(1u32 << k)).collect()
    } else {
        // Prefixes of the reverse spill order: the classes most expensive to offload stay on CPU first.
        (0..=k.min(31))
            .map(|m| {
                c.spill_order
                    .iter()
                    .rev()
                    .take(m)
                    .fold(0u32, |acc, &i| acc | (1 << i))
            })
            .collect()
    };
    let mut gpu = vec![0.0; k];
    let mut best = Decision {
        n: min_pool,
        gpu: vec![1.0; k],
        shed: vec![0.0; k],
    };
    split(c, rates, 0, min_pool, &mut best.gpu);
    let mut best_cost = hour_cost(ctx, c, rates, min_pool, &best.gpu);
    for &mask in &masks {
        let cap = mask_capacity(c, rates, mask);
        if cap <= 0.0 {
            continue;
        }
        let work: f64 = (0..k)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| rates[i] * c.weight[i])
            .sum();
        let full = if cap.is_finite() {
            (work / cap - 1e-9).ceil().max(0.0) as u32
        } else {
            0
        };
        for n in [min_pool, full.saturating_sub(1), full] {
            let n = n.max(min_pool);
            split(c, rates, mask, n, &mut gpu);
            let cost = hour_cost(ctx, c, rates, n, &gpu);
            if cost < best_cost - 1e-12 {
                best_cost = cost;
                best.n = n;
                best.gpu.copy_from_slice(&gpu);
            }
        }
    }
    best
}

/// Instance-hours billed per hour, warm instances for the next hour's ramp included (the day wraps).
fn warm_instances(day: &[Decision]) -> Vec<u32> {
    (0..day.len())
        .map(|h| day[(h + 1) % day.len()].n.saturating_sub(day[h].n))
        .collect()
}

fn day_cost(ctx: &Ctx<'_>, c: &Candidate<'_>, day: &[Decision]) -> f64 {
    let lag = ctx.input.scale_up_lag_minutes / 60.0;
    let warm = warm_instances(day);
    day.iter()
        .zip(&ctx.rates)
        .zip(&warm)
        .map(|((d, r), &w)| hour_cost(ctx, c, r, d.n, &d.gpu) + f64::from(w) * lag * c.hourly)
        .sum()
}

/// Fits the day into the budget by a multiple-choice knapsack: each hour offers options (the unconstrained
/// decision; n = min pool.. CPU instances with everything on CPU, either overloaded or shedding the
/// lowest-priority classes first to protect the rest), each with a cost and a badness (priority-weighted
/// requests rejected or missing their SLA). Starting from every hour's cheapest option, upgrades along each
/// hour's lower convex hull are bought in order of badness removed per dollar while the day fits.
fn apply_budget(ctx: &Ctx<'_>, c: &Candidate<'_>, day: &mut [Decision], budget: f64) {
    if day_cost(ctx, c, day) <= budget {
        return;
    }
    let hulls: Vec<Vec<HourOption>> = day
        .iter()
        .zip(&ctx.rates)
        .map(|(d, r)| lower_hull(hour_options(ctx, c, r, d)))
        .collect();
    let mut at: Vec<usize> = vec![0; hulls.len()];
    let mut exhausted = vec![false; hulls.len()];
    let current = |at: &[usize]| -> Vec<Decision> {
        at.iter()
            .zip(&hulls)
            .map(|(&k, h)| h[k].d.clone())
            .collect()
    };
    loop {
        let mut best: Option<(f64, usize)> = None;
        for (h, hull) in hulls.iter().enumerate() {
            if exhausted[h] {
                continue;
            }
            if let Some(next) = hull.get(at[h] + 1) {
                let cur = &hull[at[h]];
                let gain = (cur.badness - next.badness) / (next.cost - cur.cost).max(1e-12);
                if best.is_none_or(|(g, _)| gain > g) {
                    best = Some((gain, h));
                }
            }
        }
        let Some((_, h)) = best else { break };
        at[h] += 1;
        if day_cost(ctx, c, &current(&at)) > budget {
            // This hour's next step does not fit; cheaper steps elsewhere still may.
            at[h] -= 1;
            exhausted[h] = true;
        }
    }
    day.clone_from_slice(&current(&at));
}

/// One way to run an hour.
#[derive(Debug, Clone)]
struct HourOption {
    cost: f64,
    badness: f64,
    d: Decision,
}

fn hour_options(
    ctx: &Ctx<'_>,
    c: &Candidate<'_>,
    rates: &[f64],
    orig: &Decision,
) -> Vec<HourOption> {
    let k = rates.len();
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by_key(|&i| (ctx.classes[i].priority, i));
    let all = (0..k).fold(0u32, |m, i| m | (1 << i));
    let cap = mask_capacity(c, rates, all);
    let work: f64 = (0..k).map(|i| rates[i] * c.weight[i]).sum();
    let n_all = if cap.is_finite() && cap > 0.0 {
        (work / cap - 1e-9).ceil().max(0.0) as u32
    } else {
        0
    };
    let top = orig.n.max(n_all).min(ctx.input.min_pool.saturating_add(64));
    let mut out = vec![option(ctx, c, rates, orig.clone())];
    // The unconstrained decision with the GPU traffic of the lowest-priority classes shed instead.
    let mut partial = orig.clone();
    for &i in &order {
        if partial.gpu[i] > 0.0 {
            partial.shed[i] += partial.gpu[i];
            partial.gpu[i] = 0.0;
            out.push(option(ctx, c, rates, partial.clone()));
        }
    }
    for n in ctx.input.min_pool..=top {
        let overload = Decision {
            n,
            gpu: vec![0.0; k],
            shed: vec![0.0; k],
        };
        out.push(option(
            ctx,
            c,
            rates,
            protect(c, rates, overload.clone(), &order),
        ));
        out.push(option(ctx, c, rates, overload));
    }
    out
}

fn option(ctx: &Ctx<'_>, c: &Candidate<'_>, rates: &[f64], mut d: Decision) -> HourOption {
    let cost = hour_cost(ctx, c, rates, d.n, &d.gpu);
    let (lat, _) = predict_hour(ctx, c, rates, &mut d);
    let badness = (0..rates.len())
        .map(|i| {
            let cl = &ctx.classes[i];
            let over = |p: f64, t: Option<f64>| t.map_or(0.0, |t| (p / t - 1.0).clamp(0.0, 1.0));
            let severity = over(lat[i].ttft_p99_s, cl.sla.ttft_p99_s)
                .max(over(lat[i].e2e_p99_s, cl.sla.e2e_p99_s));
            f64::from(cl.priority + 1) * rates[i] * (d.shed[i] + (1.0 - d.shed[i]) * severity)
        })
        .sum();
    HourOption { cost, badness, d }
}

/// Sheds the lowest-priority classes first until the rest fits the pool's SLA capacity.
fn protect(c: &Candidate<'_>, rates: &[f64], mut d: Decision, order: &[usize]) -> Decision {
    for &i in order {
        let kept = |d: &Decision| {
            (0..rates.len())
                .filter(|&j| d.shed[j] < 1.0)
                .fold(0u32, |m, j| m | (1 << j))
        };
        let cap = f64::from(d.n) * mask_capacity(c, rates, kept(&d));
        let load = cpu_work(c, rates, &d);
        if load <= cap {
            break;
        }
        let work = rates[i] * c.weight[i];
        if work <= 0.0 {
            continue;
        }
        let need = if cap.is_finite() { load - cap } else { 0.0 };
        d.shed[i] = if c.cap[i] <= 0.0 || need >= work {
            1.0
        } else {
            need / work
        };
    }
    d
}

/// The options on the lower convex hull of (cost, badness), cheapest first.
fn lower_hull(mut opts: Vec<HourOption>) -> Vec<HourOption> {
    opts.sort_by(|a, b| {
        a.cost
            .total_cmp(&b.cost)
            .then(a.badness.total_cmp(&b.badness))
    });
    let mut hull: Vec<HourOption> = Vec::new();
    for o in opts {
        if hull.last().is_some_and(|l| o.badness >= l.badness) {
            continue;
        }
        while hull.len() >= 2 {
            let (a, b) = (&hull[hull.len() - 2], &hull[hull.len() - 1]);
            let cross = (b.cost - a.cost) * (o.badness - a.badness)
                - (b.badness - a.badness) * (o.cost - a.cost);
            if cross <= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(o);
    }
    hull
}

fn cpu_work(c: &Candidate<'_>, rates: &[f64], d: &Decision) -> f64 {
    (0..rates.len())
        .map(|i| rates[i] * (1.0 - d.gpu[i] - d.shed[i]).max(0.0) * c.weight[i])
        .sum()
}

/// Rounds for stable, readable output (money to 1e-6 $, everything else to 6 significant decimals).
pub(crate) fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn candidate_cost(ctx: &Ctx<'_>, c: &Candidate<'_>, day_cost: f64) -> CandidateCost {
    let feasible: Vec<f64> = c.cap.iter().copied().filter(|&r| r > 0.0).collect();
    let sla_rps = feasible.iter().copied().fold(f64::INFINITY, f64::min);
    let sla_rps = if sla_rps.is_finite() { sla_rps } else { 0.0 };
    let host_rate = sla_rps / c.scaling.factor;
    let (out, total) = c.profile.output_tps_at(host_rate).unwrap_or((0.0, 0.0));
    let (out, total) = (out * c.scaling.factor, total * c.scaling.factor);
    CandidateCost {
        config: c.profile.id.clone(),
        instance_type: c.inst.name.clone(),
        region: c.inst.region.clone(),
        provenance: c.profile.provenance.clone(),
        scaling: round_scaling(c.scaling),
        hourly_cost: r6(c.hourly),
        sla_rps: r6(sla_rps),
        output_tokens_per_s: r6(out),
        dollars_per_million_output: dollars_per_million_tokens(c.hourly, out).map(r6),
        dollars_per_million_total: dollars_per_million_tokens(c.hourly, total).map(r6),
        infeasible_classes: ctx
            .classes
            .iter()
            .zip(&c.cap)
            .filter(|(_, r)| **r <= 0.0)
            .map(|(cl, _)| cl.name.clone())
            .collect(),
        day_cost: r6(day_cost),
    }
}

fn round_scaling(s: Scaling) -> Scaling {
    Scaling {
        rule: s.rule,
        factor: r6(s.factor),
    }
}

/// Predicted per-class p99s and overload shedding for one hour's decision.
fn predict_hour(
    ctx: &Ctx<'_>,
    c: &Candidate<'_>,
    rates: &[f64],
    d: &mut Decision,
) -> (Vec<Latency>, f64) {
    let k = rates.len();
    let mut load = cpu_work(c, rates, d);
    let host_max = c.profile.max_rate() * c.scaling.factor * f64::from(d.n);
    if load > host_max {
        // Beyond the highest measured load the pool cannot keep up: the lowest priority CPU work is shed.
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by_key(|&i| (ctx.classes[i].priority, i));
        let mut excess = load - host_max;
        for i in order {
            let cpu_share = (1.0 - d.gpu[i] - d.shed[i]).max(0.0);
            let work = rates[i] * cpu_share * c.weight[i];
            if excess <= 0.0 || work <= 0.0 {
                continue;
            }
            let cut = work.min(excess);
            d.shed[i] += cpu_share * cut / work;
            excess -= cut;
        }
        load = host_max;
    }
    let per_host = if d.n > 0 {
        load / (f64::from(d.n) * c.scaling.factor)
    } else {
        0.0
    };
    let cap_all = mask_capacity(c, rates, (1u32 << k.min(31)) - 1);
    let util = if cap_all.is_finite() && cap_all > 0.0 && d.n > 0 {
        load / (cap_all * f64::from(d.n))
    } else {
        0.0
    };
    let lat = (0..k)
        .map(|i| {
            let cl = &ctx.classes[i];
            let cpu_share = 1.0 - d.gpu[i] - d.shed[i];
            let cpu = c
                .profile
                .latency_at(per_host.min(c.profile.max_rate()), cl.shape)
                .unwrap_or(Latency {
                    ttft_p99_s: f64::INFINITY,
                    e2e_p99_s: f64::INFINITY,
                });
            match (cpu_share > 1e-9, d.gpu[i] > 1e-9) {
                (true, true) => Latency {
                    ttft_p99_s: cpu.ttft_p99_s.max(cl.gpu.ttft_p99_s),
                    e2e_p99_s: cpu.e2e_p99_s.max(cl.gpu.e2e_p99_s),
                },
                (false, true) => cl.gpu,
                _ => cpu,
            }
        })
        .collect();
    (lat, util)
}

fn assemble(
    ctx: &Ctx<'_>,
    w: &Workload,
    c: &Candidate<'_>,
    day: &[Decision],
    candidates: Vec<CandidateCost>,
) -> Plan {
    let lag = ctx.input.scale_up_lag_minutes / 60.0;
    let warm = warm_instances(day);
    let mut hours = Vec::with_capacity(HOURS);
    let (mut cost, mut cpu_cost, mut all_gpu) = (0.0, 0.0, 0.0);
    let (mut served, mut shed, mut gpu_req, mut out_tok, mut tot_tok) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut worst: Vec<Option<Degradation>> = vec![None; ctx.classes.len()];
    for (h, (d0, rates)) in day.iter().zip(&ctx.rates).enumerate() {
        let mut d = d0.clone();
        let (lat, util) = predict_hour(ctx, c, rates, &mut d);
        let cpu_h = (f64::from(d.n) + f64::from(warm[h]) * lag) * c.hourly;
        let total_h = hour_cost(ctx, c, rates, d.n, &d.gpu) + f64::from(warm[h]) * lag * c.hourly;
        let (mut go, mut ap, mut ao) = (0.0, 0.0, 0.0);
        let mut classes = Vec::with_capacity(rates.len());
        let mut degraded = Vec::new();
        for (i, cl) in ctx.classes.iter().enumerate() {
            let req = rates[i] * 3600.0;
            go += req * d.gpu[i] * cl.mean_output;
            ap += req * cl.mean_prompt;
            ao += req * cl.mean_output;
            let s = req * (1.0 - d.shed[i]);
            served += s;
            shed += req * d.shed[i];
            gpu_req += req * d.gpu[i];
            out_tok += s * cl.mean_output;
            tot_tok += s * (cl.mean_output + cl.mean_prompt);
            let active = rates[i] > 0.0;
            let l = lat[i];
            let mut miss = Vec::new();
            if active {
                if let Some(t) = cl.sla.ttft_p99_s.filter(|&t| l.ttft_p99_s > t) {
                    miss.push(("ttft_p99", l.ttft_p99_s, t));
                }
                if let Some(t) = cl.sla.e2e_p99_s.filter(|&t| l.e2e_p99_s > t) {
                    miss.push(("e2e_p99", l.e2e_p99_s, t));
                }
                if d.shed[i] > 1e-9 {
                    miss.push(("shed", d.shed[i], 0.0));
                }
            }
            for (metric, predicted, target) in miss.iter().copied() {
                let deg = Degradation {
                    class: cl.name.clone(),
                    metric: metric.into(),
                    predicted: r6(predicted),
                    target,
                };
                let worse = worst[i]
                    .as_ref()
                    .is_none_or(|w| severity(&deg) > severity(w));
                if worse {
                    worst[i] = Some(deg.clone());
                }
                degraded.push(deg);
            }
            classes.push(ClassHour {
                class: cl.name.clone(),
                rps: r6(rates[i]),
                gpu_share: r6(d.gpu[i]),
                shed_share: r6(d.shed[i]),
                ttft_p99_s: r6(if active { l.ttft_p99_s } else { 0.0 }),
                e2e_p99_s: r6(if active { l.e2e_p99_s } else { 0.0 }),
                sla: cl.sla,
                meets_sla: miss.is_empty(),
            });
        }
        let gpu_instances = match ctx.gpu.pricing {
            crate::workload::GpuPricing::PerInstanceHour {
                output_tokens_per_s,
                ..
            } if go > 0.0 => (go / (output_tokens_per_s * 3600.0) - 1e-9).ceil().max(1.0) as u32,
            _ => 0,
        };
        cost += total_h;
        cpu_cost += cpu_h;
        all_gpu += ctx.gpu.hour_cost(ap, ao);
        hours.push(PlanHour {
            hour: h as u32,
            rps: r6(rates.iter().sum()),
            cpu_instances: d.n,
            warm_instances: warm[h],
            instance_type: c.inst.name.clone(),
            config: c.profile.id.clone(),
            gpu_instances,
            cpu_utilization: r6(util),
            cost: r6(total_h),
            classes,
            degraded,
        });
    }
    let budget = w.budget.per_day;
    let arrivals = served + shed;
    Plan {
        workload: w.name.clone(),
        price_model: ctx.input.price_model,
        headroom: ctx.input.headroom,
        scale_up_lag_minutes: ctx.input.scale_up_lag_minutes,
        min_pool: ctx.input.min_pool,
        chosen: ChosenConfig {
            config: c.profile.id.clone(),
            model: c.profile.model.clone(),
            weights: c.profile.weights.clone(),
            provenance: c.profile.provenance.clone(),
            instance_type: c.inst.name.clone(),
            region: c.inst.region.clone(),
            scaling: round_scaling(c.scaling),
            hourly_cost: r6(c.hourly),
        },
        gpu_fallback: ctx.gpu.clone(),
        hours,
        totals: Totals {
            cost_per_day: r6(cost),
            cpu_cost_per_day: r6(cpu_cost),
            gpu_cost_per_day: r6(cost - cpu_cost),
            requests_per_day: r6(served),
            shed_requests_per_day: r6(shed),
            dollars_per_million_output: (out_tok > 0.0).then(|| r6(cost / out_tok * 1e6)),
            dollars_per_million_total: (tot_tok > 0.0).then(|| r6(cost / tot_tok * 1e6)),
            gpu_share: r6(if arrivals > 0.0 {
                gpu_req / arrivals
            } else {
                0.0
            }),
            all_gpu_cost_per_day: r6(all_gpu),
            savings_per_day: r6(all_gpu - cost),
            savings_fraction: r6(if all_gpu > 0.0 {
                (all_gpu - cost) / all_gpu
            } else {
                0.0
            }),
            budget_per_day: budget,
            within_budget: budget.is_none_or(|b| cost <= b + 1e-6),
        },
        candidates,
        degraded: worst.into_iter().flatten().collect(),
        sensitivity: Vec::new(),
        validation: None,
    }
}

/// How bad a miss is: over-target ratio for latencies, shed share (+1) for shedding.
fn severity(d: &Degradation) -> f64 {
    if d.metric == "shed" {
        1.0 + d.predicted
    } else {
        d.predicted / d.target.max(1e-12)
    }
}
