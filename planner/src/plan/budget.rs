//! Fitting a day into its budget: per-hour options scored by priority-weighted SLA misses, bought along
//! each hour's convex hull of (cost, badness).

use super::report::predict_hour;
use super::search::{cpu_work, day_cost, hour_cost, mask_capacity};
use super::*;

/// Fits the day into the budget by a multiple-choice knapsack: each hour offers options (the unconstrained
/// decision; n = min pool.. CPU instances with everything on CPU, either overloaded or shedding the
/// lowest-priority classes first to protect the rest), each with a cost and a badness (priority-weighted
/// requests rejected or missing their SLA). Starting from every hour's cheapest option, upgrades along each
/// hour's lower convex hull are bought in order of badness removed per dollar while the day fits.
pub(super) fn apply_budget(ctx: &Ctx<'_>, c: &Candidate<'_>, day: &mut [Decision], budget: f64) {
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
pub(super) struct HourOption {
    cost: f64,
    badness: f64,
    d: Decision,
}

pub(super) fn hour_options(
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

pub(super) fn option(
    ctx: &Ctx<'_>,
    c: &Candidate<'_>,
    rates: &[f64],
    mut d: Decision,
) -> HourOption {
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
pub(super) fn protect(
    c: &Candidate<'_>,
    rates: &[f64],
    mut d: Decision,
    order: &[usize],
) -> Decision {
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
pub(super) fn lower_hull(mut opts: Vec<HourOption>) -> Vec<HourOption> {
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
