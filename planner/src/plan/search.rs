//! The unconstrained search: per-class SLA capacity of each (config, instance type) candidate and, per
//! hour, the cheapest CPU pool size and GPU split meeting every SLA.

use super::*;

pub(super) fn class_infos(w: &Workload, gpu: &GpuFallback) -> Vec<ClassInfo> {
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

pub(super) fn candidates<'a>(ctx: &Ctx<'a>) -> Vec<Candidate<'a>> {
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
pub(super) fn mask_capacity(c: &Candidate<'_>, rates: &[f64], mask: u32) -> f64 {
    let mut cap = f64::INFINITY;
    for (i, &r) in rates.iter().enumerate() {
        if mask & (1 << i) != 0 && r > 0.0 {
            cap = cap.min(c.cap[i]);
        }
    }
    cap
}

/// Cost of an hour: CPU instances plus the GPU fallback for what is sent there.
pub(super) fn hour_cost(
    ctx: &Ctx<'_>,
    c: &Candidate<'_>,
    rates: &[f64],
    n: u32,
    gpu: &[f64],
) -> f64 {
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
pub(super) fn split(c: &Candidate<'_>, rates: &[f64], mask: u32, n: u32, gpu: &mut [f64]) {
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
pub(super) fn best_hour(ctx: &Ctx<'_>, c: &Candidate<'_>, rates: &[f64]) -> Decision {
    let k = rates.len();
    let mut out = Decision {
        n: 0,
        gpu: vec![0.0; k],
        shed: vec![0.0; k],
    };
    best_hour_into(ctx, c, rates, &mut vec![0.0; k], &mut out);
    out
}

/// [`best_hour`] into `out` with a caller-owned scratch row (no allocation for up to
/// `MAX_ENUMERATED_CLASSES` classes); returns the hour's cost.
pub(super) fn best_hour_into(
    ctx: &Ctx<'_>,
    c: &Candidate<'_>,
    rates: &[f64],
    gpu: &mut [f64],
    out: &mut Decision,
) -> f64 {
    let k = rates.len();
    // A config that meets no class's SLA at any load is not worth keeping warm.
    let min_pool = if c.cap.iter().all(|&cap| cap <= 0.0) {
        0
    } else {
        ctx.input.min_pool
    };
    out.n = min_pool;
    out.shed.iter_mut().for_each(|x| *x = 0.0);
    split(c, rates, 0, min_pool, &mut out.gpu);
    let mut best_cost = hour_cost(ctx, c, rates, min_pool, &out.gpu);
    let mut try_mask = |mask: u32| {
        let cap = mask_capacity(c, rates, mask);
        if cap <= 0.0 {
            return;
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
            split(c, rates, mask, n, gpu);
            let cost = hour_cost(ctx, c, rates, n, gpu);
            if cost < best_cost - 1e-12 {
                best_cost = cost;
                out.n = n;
                out.gpu.copy_from_slice(gpu);
            }
        }
    };
    if k <= MAX_ENUMERATED_CLASSES {
        (0..(1u32 << k)).for_each(&mut try_mask);
    } else {
        // Prefixes of the reverse spill order: the classes most expensive to offload stay on CPU first.
        for m in 0..=k.min(31) {
            try_mask(
                c.spill_order
                    .iter()
                    .rev()
                    .take(m)
                    .fold(0u32, |acc, &i| acc | (1 << i)),
            );
        }
    }
    best_cost
}

/// Instance-hours billed per hour, warm instances for the next hour's ramp included (the day wraps).
pub(super) fn warm_instances(day: &[Decision]) -> Vec<u32> {
    (0..day.len())
        .map(|h| day[(h + 1) % day.len()].n.saturating_sub(day[h].n))
        .collect()
}

pub(super) fn day_cost(ctx: &Ctx<'_>, c: &Candidate<'_>, day: &[Decision]) -> f64 {
    let lag = ctx.input.scale_up_lag_minutes / 60.0;
    let warm = warm_instances(day);
    day.iter()
        .zip(&ctx.rates)
        .zip(&warm)
        .map(|((d, r), &w)| hour_cost(ctx, c, r, d.n, &d.gpu) + f64::from(w) * lag * c.hourly)
        .sum()
}

pub(super) fn cpu_work(c: &Candidate<'_>, rates: &[f64], d: &Decision) -> f64 {
    (0..rates.len())
        .map(|i| rates[i] * (1.0 - d.gpu[i] - d.shed[i]).max(0.0) * c.weight[i])
        .sum()
}
