//! The capacity plan: pick the cheapest (config, CPU instance type) for the day, then for each hour the
//! CPU instance count and each class's GPU share that meet every p99 SLA at least cost; when the budget
//! cannot pay for that, degrade the lowest-priority classes and say by how much. Search is analytic
//! (the measured latency-vs-load curves); `sim` validates the chosen plan.

use crate::catalog::{Catalog, InstanceType, PriceModel};
use crate::error::{PlannerError, Result, invalid};
use crate::profile::{ConfigProfile, Latency, Scaling, ScalingRule, Shape, scaling_for};
use crate::sim::{SimOptions, simulate};
use crate::tco::{CostInputs, SiteCosts, dollars_per_million_tokens};
use crate::workload::{Arrivals, GpuFallback, GpuFallbackSpec, HOURS, Sla, Workload};

mod budget;
pub(crate) mod data;
mod report;
mod search;

pub use data::{
    CandidateCost, ChosenConfig, ClassHour, Degradation, Plan, PlanHour, Scenario, Totals,
};

use budget::apply_budget;
use report::{assemble, candidate_cost};
use search::{best_hour, best_hour_into, candidates, class_infos, day_cost};

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
        refuse_mixed_weights(&profiles)?;
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

/// Refuses profiles of models with random weights beside real models' profiles: a plan compares
/// configs by cost at equal quality, which a synthetic file cannot show.
fn refuse_mixed_weights(profiles: &[ConfigProfile]) -> Result<()> {
    let synthetic = profiles.iter().find(|p| p.provenance.is_synthetic());
    let real = profiles.iter().find(|p| !p.provenance.is_synthetic());
    if let (Some(synthetic), Some(real)) = (synthetic, real) {
        return Err(invalid(
            "profiles",
            &synthetic.id,
            "provenance",
            format!(
                "is synthetic weights (model {}), which are never planned beside real models' \
                 profiles such as {} (model {}): plan one model at a time",
                synthetic.model, real.id, real.model
            ),
        ));
    }
    Ok(())
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
    // One day of decisions and one scratch row, reused across candidates (the search allocates per
    // candidate only when it finds a new best).
    let k = ctx.classes.len();
    let mut day = vec![
        Decision {
            n: 0,
            gpu: vec![0.0; k],
            shed: vec![0.0; k]
        };
        ctx.rates.len()
    ];
    let mut scratch = vec![0.0; k];
    for (i, c) in candidates.iter().enumerate() {
        for (d, r) in day.iter_mut().zip(&ctx.rates) {
            best_hour_into(&ctx, c, r, &mut scratch, d);
        }
        let cost = day_cost(&ctx, c, &day);
        costed.push((cost, i));
        if best.as_ref().is_none_or(|(b, _, _)| cost < *b) {
            best = Some((cost, i, day.clone()));
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
