//! Turning decisions into the reported plan: predicted p99s and overload shedding per hour, candidate
//! prices, totals and the list of degraded classes.

use super::search::{cpu_work, hour_cost, mask_capacity, warm_instances};
use super::*;
use crate::dist::r6;
use crate::workload::GpuPricing;

pub(super) fn candidate_cost(ctx: &Ctx<'_>, c: &Candidate<'_>, day_cost: f64) -> CandidateCost {
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

pub(super) fn round_scaling(s: Scaling) -> Scaling {
    Scaling {
        rule: s.rule,
        factor: r6(s.factor),
    }
}

/// Predicted per-class p99s and overload shedding for one hour's decision.
pub(super) fn predict_hour(
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

/// Day sums gathered hour by hour.
#[derive(Default)]
struct Tally {
    cost: f64,
    cpu_cost: f64,
    all_gpu: f64,
    served: f64,
    shed: f64,
    gpu_requests: f64,
    output_tokens: f64,
    total_tokens: f64,
}

impl Tally {
    fn totals(&self, budget: Option<f64>) -> Totals {
        let arrivals = self.served + self.shed;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        Totals {
            cost_per_day: r6(self.cost),
            cpu_cost_per_day: r6(self.cpu_cost),
            gpu_cost_per_day: r6(self.cost - self.cpu_cost),
            requests_per_day: r6(self.served),
            shed_requests_per_day: r6(self.shed),
            dollars_per_million_output: (self.output_tokens > 0.0)
                .then(|| r6(self.cost / self.output_tokens * 1e6)),
            dollars_per_million_total: (self.total_tokens > 0.0)
                .then(|| r6(self.cost / self.total_tokens * 1e6)),
            gpu_share: r6(ratio(self.gpu_requests, arrivals)),
            all_gpu_cost_per_day: r6(self.all_gpu),
            savings_per_day: r6(self.all_gpu - self.cost),
            savings_fraction: r6(ratio(self.all_gpu - self.cost, self.all_gpu)),
            budget_per_day: budget,
            within_budget: budget.is_none_or(|b| self.cost <= b + 1e-6),
        }
    }
}

/// Builds the plan from the chosen candidate's hourly decisions.
pub(super) fn assemble(
    ctx: &Ctx<'_>,
    w: &Workload,
    c: &Candidate<'_>,
    day: &[Decision],
    candidates: Vec<CandidateCost>,
) -> Plan {
    let warm = warm_instances(day);
    let mut tally = Tally::default();
    let mut worst: Vec<Option<Degradation>> = vec![None; ctx.classes.len()];
    let hours = (0..day.len())
        .map(|h| hour_row(ctx, c, h, &day[h], warm[h], &mut tally, &mut worst))
        .collect();
    Plan {
        workload: w.name.clone(),
        price_model: ctx.input.price_model,
        headroom: ctx.input.headroom,
        scale_up_lag_minutes: ctx.input.scale_up_lag_minutes,
        min_pool: ctx.input.min_pool,
        chosen: chosen(c),
        gpu_fallback: ctx.gpu.clone(),
        hours,
        totals: tally.totals(w.budget.per_day),
        candidates,
        degraded: worst.into_iter().flatten().collect(),
        sensitivity: Vec::new(),
        validation: None,
    }
}

fn chosen(c: &Candidate<'_>) -> ChosenConfig {
    ChosenConfig {
        config: c.profile.id.clone(),
        model: c.profile.model.clone(),
        weights: c.profile.weights.clone(),
        provenance: c.profile.provenance.clone(),
        instance_type: c.inst.name.clone(),
        region: c.inst.region.clone(),
        scaling: round_scaling(c.scaling),
        hourly_cost: r6(c.hourly),
    }
}

/// One hour's row; adds the hour to `tally` and keeps each class's worst miss in `worst`.
fn hour_row(
    ctx: &Ctx<'_>,
    c: &Candidate<'_>,
    h: usize,
    decision: &Decision,
    warm: u32,
    tally: &mut Tally,
    worst: &mut [Option<Degradation>],
) -> PlanHour {
    let rates = &ctx.rates[h];
    let mut d = decision.clone();
    let (lat, util) = predict_hour(ctx, c, rates, &mut d);
    let warm_cost = f64::from(warm) * ctx.input.scale_up_lag_minutes / 60.0 * c.hourly;
    let cost = hour_cost(ctx, c, rates, d.n, &d.gpu) + warm_cost;
    let (mut gpu_out, mut all_prompt, mut all_out) = (0.0, 0.0, 0.0);
    let mut classes = Vec::with_capacity(rates.len());
    let mut degraded = Vec::new();
    for (i, cl) in ctx.classes.iter().enumerate() {
        let req = rates[i] * 3600.0;
        let served = req * (1.0 - d.shed[i]);
        gpu_out += req * d.gpu[i] * cl.mean_output;
        all_prompt += req * cl.mean_prompt;
        all_out += req * cl.mean_output;
        tally.served += served;
        tally.shed += req * d.shed[i];
        tally.gpu_requests += req * d.gpu[i];
        tally.output_tokens += served * cl.mean_output;
        tally.total_tokens += served * (cl.mean_output + cl.mean_prompt);
        let active = rates[i] > 0.0;
        let misses = if active {
            class_misses(cl, lat[i], d.shed[i])
        } else {
            Vec::new()
        };
        for m in &misses {
            if worst[i].as_ref().is_none_or(|w| severity(m) > severity(w)) {
                worst[i] = Some(m.clone());
            }
        }
        let l = if active {
            lat[i]
        } else {
            Latency {
                ttft_p99_s: 0.0,
                e2e_p99_s: 0.0,
            }
        };
        classes.push(ClassHour {
            class: cl.name.clone(),
            rps: r6(rates[i]),
            gpu_share: r6(d.gpu[i]),
            shed_share: r6(d.shed[i]),
            ttft_p99_s: r6(l.ttft_p99_s),
            e2e_p99_s: r6(l.e2e_p99_s),
            sla: cl.sla,
            meets_sla: misses.is_empty(),
        });
        degraded.extend(misses);
    }
    tally.cost += cost;
    tally.cpu_cost += f64::from(d.n) * c.hourly + warm_cost;
    tally.all_gpu += ctx.gpu.hour_cost(all_prompt, all_out);
    PlanHour {
        hour: h as u32,
        rps: r6(rates.iter().sum()),
        cpu_instances: d.n,
        warm_instances: warm,
        instance_type: c.inst.name.clone(),
        config: c.profile.id.clone(),
        gpu_instances: gpu_instances(&ctx.gpu, gpu_out),
        cpu_utilization: r6(util),
        cost: r6(cost),
        classes,
        degraded,
    }
}

/// Whole GPU instances an hourly fallback needs for `output_tokens` in an hour (0 for per-token).
fn gpu_instances(gpu: &GpuFallback, output_tokens: f64) -> u32 {
    match gpu.pricing {
        GpuPricing::PerInstanceHour {
            output_tokens_per_s,
            ..
        } if output_tokens > 0.0 => (output_tokens / (output_tokens_per_s * 3600.0) - 1e-9)
            .ceil()
            .max(1.0) as u32,
        _ => 0,
    }
}

/// The ways a class's predicted p99s and shed share miss its SLA.
fn class_misses(cl: &ClassInfo, l: Latency, shed: f64) -> Vec<Degradation> {
    let mut out = Vec::new();
    let mut miss = |metric: &str, predicted: f64, target: f64| {
        out.push(Degradation {
            class: cl.name.clone(),
            metric: metric.into(),
            predicted: r6(predicted),
            target,
        });
    };
    if let Some(t) = cl.sla.ttft_p99_s.filter(|&t| l.ttft_p99_s > t) {
        miss("ttft_p99", l.ttft_p99_s, t);
    }
    if let Some(t) = cl.sla.e2e_p99_s.filter(|&t| l.e2e_p99_s > t) {
        miss("e2e_p99", l.e2e_p99_s, t);
    }
    if shed > 1e-9 {
        miss("shed", shed, 0.0);
    }
    out
}

/// How bad a miss is: over-target ratio for latencies, shed share (+1) for shedding.
pub(super) fn severity(d: &Degradation) -> f64 {
    if d.metric == "shed" {
        1.0 + d.predicted
    } else {
        d.predicted / d.target.max(1e-12)
    }
}
