//! Selection: the pool and endpoint a prepared request goes to. A pure function of a table snapshot,
//! the clock, the spend so far, the plan's shares and pre-drawn random numbers; the planner's
//! [`route`] picks the pool, the less loaded of two random endpoints takes the request.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use strata_planner::{
    route::{
        BudgetState, Correction, InstanceLoad, PoolState, Prediction, Reason, RouteDecision,
        RoutePolicy, RouteRequest, Target, predict_pool, route,
    },
    workload::Sla,
};

use super::{
    config::{ClassConfig, GatewayConfig},
    prepare::Prepared,
    table::{Endpoint, Table},
};
use crate::openai_error::ApiError;

/// The stored plan's shares for the current hour, per class.
#[derive(Debug, Default)]
pub(crate) struct PlanShares {
    /// Share of each class's requests the plan sends to GPU.
    pub(crate) gpu: Vec<f64>,
    /// Share of each class's requests the plan sheds.
    pub(crate) shed: Vec<f64>,
}

/// What the ledger says was spent so far.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spent {
    /// USD spent today.
    pub(crate) day: f64,
    /// USD spent this month.
    pub(crate) month: f64,
    /// Share of today's requests that went to GPU.
    pub(crate) gpu_share_today: f64,
}

/// Random numbers drawn before selecting, so that selection itself is deterministic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draws {
    /// The planner's draw (its top 53 bits) and its two-endpoint pick in a CPU pool (its low 32 bits).
    pub(crate) route: u64,
    /// The two-endpoint pick in a GPU pool.
    pub(crate) gpu_pick: u64,
}

/// Everything selection reads: the table (with its endpoints' live health), the plan, the spend, the
/// time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot<'a> {
    /// Pools, endpoints and config.
    pub(crate) table: &'a Table,
    /// The plan's shares.
    pub(crate) plan: &'a PlanShares,
    /// Spend so far.
    pub(crate) spent: Spent,
    /// The clock.
    pub(crate) now: Instant,
}

/// A routing outcome: where to send and why.
#[derive(Debug)]
pub(crate) struct Choice {
    /// Index of the pool.
    pub(crate) pool: usize,
    /// The endpoint (none when the pool has none left).
    pub(crate) endpoint: Option<Arc<Endpoint>>,
    /// The planner's decision.
    pub(crate) decision: RouteDecision,
    /// What each other pool that could have taken the request was predicted to give (corrected), by
    /// pool index.
    pub(crate) others: Vec<(usize, Prediction)>,
    /// The latency targets that applied and where each came from, as `x-strata-route` shows them.
    pub(crate) targets: String,
}

/// One pool's endpoints that may take the request, with their loads and the pool's latency figures.
struct Candidates<'a> {
    endpoints: Vec<&'a Arc<Endpoint>>,
    loads: Vec<InstanceLoad>,
    corrections: Vec<Correction>,
    ewma_ttft_s: f64,
    ewma_e2e_s: f64,
}

/// Routes `req` over the pools serving its model, leaving out endpoints in `tried`.
///
/// # Errors
/// A 429 [`ApiError`] when the budget policy or the plan sheds the request, a 503 when no upstream can
/// take it.
pub(crate) fn select(
    snapshot: &Snapshot<'_>,
    req: &Prepared,
    tried: &[usize],
    draws: Draws,
) -> Result<Choice, ApiError> {
    let table = snapshot.table;
    let config = &table.config;
    let class = &config.classes[req.class];
    let candidates: Vec<Candidates<'_>> = (0..table.pools.len())
        .map(|i| candidates(table, i, req, tried, snapshot.now))
        .collect();
    let pools: Vec<PoolState<'_>> = table
        .pools
        .iter()
        .zip(&candidates)
        .map(|(p, c)| PoolState {
            kind: p.config.kind,
            healthy: !c.endpoints.is_empty(),
            instances: &c.loads,
            ewma_ttft_s: c.ewma_ttft_s,
            ewma_e2e_s: c.ewma_e2e_s,
            service: p.config.service.as_ref(),
            gpu_ttft_s: p.config.gpu_ttft.as_secs_f64(),
            gpu_tpot_s: p.config.gpu_tpot.as_secs_f64(),
            corrections: &c.corrections,
        })
        .collect();
    let policy = RoutePolicy {
        gpu_share: &snapshot.plan.gpu,
        shed_share: &snapshot.plan.shed,
        overflow_to_gpu: true,
        budget: &config.budget_rules,
    };
    let request = route_request(class, req, draws.route);
    let decision = route(
        &request,
        &pools,
        &budget_state(config, snapshot.spent),
        &policy,
    );
    let (pool, endpoint) = match decision.target {
        Target::Reject => return Err(rejection(&decision)),
        Target::Cpu { pool, instance } => (
            pool,
            candidates[pool]
                .endpoints
                .get(instance)
                .map(|e| (*e).clone()),
        ),
        Target::Gpu { pool } => (
            pool,
            less_loaded_of_two(&candidates[pool].endpoints, draws.gpu_pick),
        ),
    };
    let others = pools
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != pool)
        .filter_map(|(i, p)| Some((i, predict_pool(p, &request)?.corrected)))
        .collect();
    Ok(Choice {
        pool,
        endpoint,
        decision,
        others,
        targets: targets_text(class, req),
    })
}

/// The endpoints of pool `i` that may take `req` at `now`, and the pool's mean EWMA latencies.
fn candidates<'a>(
    table: &'a Table,
    i: usize,
    req: &Prepared,
    tried: &[usize],
    now: Instant,
) -> Candidates<'a> {
    let p = &table.pools[i];
    let usable = !p.drained.load(Ordering::Relaxed) && p.config.models.contains(&req.model);
    let endpoints: Vec<&Arc<Endpoint>> = p
        .endpoints
        .iter()
        .filter(|e| usable && !tried.contains(&e.id) && e.health.available(now))
        .collect();
    let max = p.config.max_concurrency;
    let corrections: Vec<Correction> = endpoints.iter().map(|e| e.health.correction()).collect();
    let loads = endpoints
        .iter()
        .zip(&corrections)
        .map(|(e, &correction)| {
            let k = e.health.in_flight.load(Ordering::Relaxed);
            let projected = e
                .twin
                .as_ref()
                .map(|t| t.project(now, req.prompt_tokens, req.output_tokens, correction));
            InstanceLoad {
                in_flight: k,
                queue_depth: k.saturating_sub(max),
                prompt_tokens_ahead: e.health.prompt_tokens_ahead.load(Ordering::Relaxed),
                projected: projected.map(|(raw, _)| raw),
                paced: projected.map(|(_, paced)| paced),
            }
        })
        .collect();
    let (mut ttft, mut tpot) = (0.0, 0.0);
    for e in &endpoints {
        let (a, b) = e.health.latency(now);
        ttft += a;
        tpot += b;
    }
    let k = endpoints.len().max(1) as f64;
    let (ttft, tpot) = (ttft / k, tpot / k);
    let e2e = if ttft > 0.0 || tpot > 0.0 {
        ttft + tpot * f64::from(req.output_tokens.saturating_sub(1))
    } else {
        0.0
    };
    Candidates {
        endpoints,
        loads,
        corrections,
        ewma_ttft_s: ttft,
        ewma_e2e_s: e2e,
    }
}

/// The planner's budget state is per day; the larger of the day's and the month's spent fractions
/// stands in for it, against a budget of 1.
fn budget_state(config: &GatewayConfig, spent: Spent) -> BudgetState {
    let fraction = [
        config.budget_per_day.map(|b| spent.day / b),
        config.budget_per_month.map(|b| spent.month / b),
    ]
    .into_iter()
    .flatten()
    .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f))));
    match fraction {
        Some(f) => BudgetState {
            spent_today: f,
            budget_per_day: Some(1.0),
            gpu_share_today: spent.gpu_share_today,
        },
        None => BudgetState {
            gpu_share_today: spent.gpu_share_today,
            ..BudgetState::default()
        },
    }
}

/// The SLA that applies to `req`: its class's, with the request's own TTFT target in its place.
fn applied_sla(class: &ClassConfig, req: &Prepared) -> Sla {
    Sla {
        ttft_p99_s: req.targets.ttft_s.or(class.sla.ttft_p99_s),
        ..class.sla
    }
}

/// The targets that applied to `req`, each with where it came from (`request` for a header, `class`
/// for its SLA class), e.g. `ttft:200ms:request,e2e:10000ms:class`; `none` when nothing bounds it.
pub(crate) fn targets_text(class: &ClassConfig, req: &Prepared) -> String {
    let from = |own: bool| if own { "request" } else { "class" };
    let sla = applied_sla(class, req);
    let parts: Vec<String> = [
        ("ttft", sla.ttft_p99_s, req.targets.ttft_s.is_some()),
        ("e2e", sla.e2e_p99_s, false),
        ("tpot", req.targets.tpot_s, true),
    ]
    .into_iter()
    .filter_map(|(name, s, own)| Some(format!("{name}:{}ms:{}", ms(s?), from(own))))
    .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(",")
    }
}

/// Seconds as milliseconds, to the microsecond, without trailing zeros.
fn ms(s: f64) -> String {
    let text = format!("{:.3}", s * 1e3);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The planner's view of `req`: the SLA that applies, its class's priority, its token counts and the
/// draw.
fn route_request(class: &ClassConfig, req: &Prepared, r: u64) -> RouteRequest {
    RouteRequest {
        class: req.class,
        priority: class.priority,
        prompt_tokens: req.prompt_tokens,
        expected_output_tokens: req.output_tokens,
        sla: applied_sla(class, req),
        tpot_s: req.targets.tpot_s,
        draw: (r >> 11) as f64 / (1u64 << 53) as f64,
        pick: [(r & 0xffff) as usize, ((r >> 16) & 0xffff) as usize],
    }
}

/// The less loaded of two endpoints drawn by `r` (the first on a tie); none from an empty pool.
fn less_loaded_of_two(endpoints: &[&Arc<Endpoint>], r: u64) -> Option<Arc<Endpoint>> {
    if endpoints.is_empty() {
        return None;
    }
    let r = r as usize;
    let n = endpoints.len();
    let (a, b) = (endpoints[r % n], endpoints[(r >> 20) % n]);
    let load = |e: &Endpoint| e.health.in_flight.load(Ordering::Relaxed);
    Some(if load(b) < load(a) {
        b.clone()
    } else {
        a.clone()
    })
}

/// The error a rejected request gets: 429 when the budget or the plan shed it, else 503.
fn rejection(decision: &RouteDecision) -> ApiError {
    let text: Vec<String> = decision.reasons.iter().map(ToString::to_string).collect();
    let shed = decision
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::BudgetReject { .. } | Reason::PlanShed { .. }));
    if shed {
        let mut e = ApiError::overloaded(format!(
            "Rejected by the budget policy: {}",
            text.join("; ")
        ));
        e.code = Some("budget_exceeded");
        e
    } else {
        ApiError::unavailable(format!("No healthy upstream: {}", text.join("; ")))
    }
}

/// The short code of a routing reason, as `x-strata-route` and the ledger show it.
pub(crate) fn reason_code(r: &Reason) -> &'static str {
    match r {
        Reason::PlanGpuShare { .. } => "plan_gpu_share",
        Reason::CpuMeetsSla => "cpu_meets_sla",
        Reason::CpuPredictedMiss { .. } => "cpu_predicted_miss",
        Reason::CpuPredictedSlowTokens { .. } => "cpu_predicted_slow_tokens",
        Reason::CpuEwmaOverSla => "cpu_ewma_over_sla",
        Reason::NoCpu => "no_cpu",
        Reason::NoGpu => "no_gpu",
        Reason::GpuShareCapped { .. } => "gpu_share_capped",
        Reason::SlaRelaxed { .. } => "sla_relaxed",
        Reason::PlanShed { .. } => "plan_shed",
        Reason::BudgetReject { .. } => "budget_reject",
    }
}

/// The codes of all of a decision's reasons, comma-separated.
pub(crate) fn reason_codes(d: &RouteDecision) -> String {
    let mut s = String::new();
    for r in d.reasons.iter() {
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str(reason_code(r));
    }
    s
}

#[cfg(test)]
mod tests {
    use strata_planner::route::Reason;

    use super::*;
    use crate::gateway::testing::{LAX, TIGHT, config, cpu_pool, gpu_pool, request, table};

    const CPU: [&str; 2] = ["http://127.0.0.1:1", "http://127.0.0.1:2"];
    const GPU: [&str; 2] = ["http://127.0.0.1:3", "http://127.0.0.1:4"];

    fn pick(table: &Table, class: usize, now: Instant, draws: Draws) -> Choice {
        let plan = PlanShares::default();
        let snapshot = Snapshot {
            table,
            plan: &plan,
            spent: Spent::default(),
            now,
        };
        select(&snapshot, &request(class, false), &[], draws).expect("a choice")
    }

    fn endpoint_name(c: &Choice) -> &str {
        &c.endpoint.as_ref().expect("an endpoint").config.name
    }

    const FIRST: Draws = Draws {
        route: 0,
        gpu_pick: 0,
    };

    #[test]
    fn the_cheap_cpu_pool_that_meets_the_sla_is_chosen_over_the_gpu() {
        let pools = format!("{}{}", gpu_pool(&GPU), cpu_pool("cpu", 1e5, &CPU));
        let t = table(config(&pools, 4, 1));
        let c = pick(&t, LAX, Instant::now(), FIRST);
        assert_eq!(t.pools[c.pool].config.name, "cpu");
        assert!(matches!(c.decision.target, Target::Cpu { pool: 1, .. }));
        assert!(
            c.decision
                .reasons
                .iter()
                .any(|r| matches!(r, Reason::CpuMeetsSla))
        );
        assert_eq!(reason_codes(&c.decision), "cpu_meets_sla");
    }

    #[test]
    fn a_cpu_pool_predicted_to_miss_the_sla_is_skipped_for_the_gpu_fallback() {
        // 100 prompt tokens at 10 tokens/s: 10 s to the first token against a 150 ms SLA.
        let pools = format!("{}{}", cpu_pool("cpu", 10.0, &CPU), gpu_pool(&GPU));
        let t = table(config(&pools, 4, 1));
        let c = pick(&t, TIGHT, Instant::now(), FIRST);
        assert_eq!(t.pools[c.pool].config.name, "gpu");
        assert!(matches!(c.decision.target, Target::Gpu { pool: 1 }));
        assert!(
            c.decision
                .reasons
                .iter()
                .any(|r| matches!(r, Reason::CpuPredictedMiss { .. })),
            "{:?}",
            c.decision.reasons
        );
        let lax = pick(&t, LAX, Instant::now(), FIRST);
        assert_eq!(t.pools[lax.pool].config.name, "cpu", "a lax SLA is met");
    }

    #[test]
    fn an_endpoint_whose_breaker_is_open_is_not_chosen() {
        let t = table(config(&cpu_pool("cpu", 1e5, &CPU), 4, 1));
        let now = Instant::now();
        let broken = &t.pools[0].endpoints[0];
        for _ in 0..t.config.breaker_failures {
            broken.health.on_failure(now);
        }
        assert!(!broken.health.available(now));
        for r in 0..64u64 {
            let draws = Draws {
                route: r | (r << 16),
                gpu_pick: r,
            };
            let c = pick(&t, LAX, now, draws);
            assert_eq!(endpoint_name(&c), "127.0.0.1:2", "draw {r}");
        }
    }

    #[test]
    fn between_two_equal_endpoints_the_draws_decide() {
        let pools = format!("{}{}", cpu_pool("cpu", 1e5, &CPU), gpu_pool(&GPU));
        let t = table(config(&pools, 4, 1));
        let now = Instant::now();
        let second = Draws {
            route: 1 | (1 << 16),
            gpu_pick: 1 | (1 << 20),
        };
        assert_eq!(endpoint_name(&pick(&t, LAX, now, FIRST)), "127.0.0.1:1");
        assert_eq!(endpoint_name(&pick(&t, LAX, now, second)), "127.0.0.1:2");
        // The GPU pool (the CPU one misses a tight SLA when it prefills slowly).
        let slow = format!("{}{}", cpu_pool("cpu", 10.0, &CPU), gpu_pool(&GPU));
        let t = table(config(&slow, 4, 1));
        assert_eq!(endpoint_name(&pick(&t, TIGHT, now, FIRST)), "127.0.0.1:3");
        assert_eq!(endpoint_name(&pick(&t, TIGHT, now, second)), "127.0.0.1:4");
    }
}
