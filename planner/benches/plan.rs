//! Planner benches: the plan search over 24 hours x 200 configs x 50 instance types, and a simulated
//! day of about 1M requests, one routing decision, and one request's projection on a busy mirrored
//! host (what the gateway computes per CPU endpoint and request). Run: `cargo bench -p strata-planner --bench plan`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use strata_planner::catalog::{Catalog, InstanceType};
use strata_planner::plan::{PlanInput, plan};
use strata_planner::profile::{ConfigProfile, Provenance};
use strata_planner::route::{
    BudgetRules, BudgetState, InstanceLoad, PoolKind, PoolState, RoutePolicy, RouteRequest, route,
};
use strata_planner::service::ServiceCurve;
use strata_planner::sim::{
    BatchingHost, SimOptions,
    projection::{self, Later},
    simulate,
};
use strata_planner::workload::{Arrivals, Workload};

const WORKLOAD: &str = include_str!("../examples/workload.toml");
const PROFILES: &str = include_str!("../examples/profiles.json");

/// 200 configs: the two example curves, each at 100 speed factors.
fn profiles() -> Vec<ConfigProfile> {
    let base = ConfigProfile::list_from_json_str(PROFILES).unwrap_or_default();
    let mut out = Vec::with_capacity(200);
    for i in 0..100 {
        for b in &base {
            let mut p = b.clone();
            let speed = 0.5 + f64::from(i) * 0.02;
            p.id = format!("{}-v{i}", b.id);
            p.provenance = Provenance::Measured;
            for l in &mut p.load_curve {
                l.rate_rps *= speed;
                l.output_tokens_per_s *= speed;
                l.total_tokens_per_s *= speed;
            }
            out.push(p);
        }
    }
    out
}

/// 50 CPU instance types (sizes and prices spread around the C4 list prices) plus the builtin GPUs.
fn catalog() -> Catalog {
    let builtin = Catalog::builtin();
    let Some(c4) = builtin.find("c4-standard-8").cloned() else {
        return builtin;
    };
    let mut instances: Vec<InstanceType> = (0..50)
        .map(|i| {
            let vcpus = 2 + 2 * (i % 24);
            InstanceType {
                name: format!("cpu-{i}"),
                vcpus,
                memory_gib: f64::from(vcpus) * 4.0,
                on_demand_per_hour: f64::from(vcpus) * (0.045 + 0.0004 * f64::from(i)),
                ..c4.clone()
            }
        })
        .collect();
    instances.extend(builtin.instances.iter().filter(|i| i.is_gpu()).cloned());
    Catalog {
        instances,
        token_priced: builtin.token_priced,
    }
}

fn input(traffic: f64) -> Option<PlanInput> {
    let w = Workload::from_toml_str(WORKLOAD).ok()?.scaled(traffic);
    let mut input = PlanInput::new(w, catalog(), profiles()).ok()?;
    input.sensitivity = false;
    input.validate_days = 0;
    Some(input)
}

fn bench_plan(c: &mut Criterion) {
    let Some(mut input) = input(1.0) else { return };
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    g.throughput(Throughput::Elements(24 * 200 * 50));
    g.bench_function("search_24h_x_200_configs_x_50_types", |b| {
        b.iter(|| plan(black_box(&input)))
    });
    input.sensitivity = true;
    g.bench_function("search_with_sensitivity", |b| {
        b.iter(|| plan(black_box(&input)))
    });
    g.finish();
}

fn bench_sim(c: &mut Criterion) {
    // The example workload at 8x traffic is about 1M requests a day.
    let Some(input) = input(8.0) else { return };
    let Ok(p) = plan(&input) else { return };
    let opts = SimOptions::default();
    let requests = match &input.workload.arrivals {
        Arrivals::Hourly(r) => (r.iter().sum::<f64>() * 3600.0) as u64,
        Arrivals::Trace(t) => t.len() as u64,
    };
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10);
    g.throughput(Throughput::Elements(requests));
    g.bench_function("one_day_about_1m_requests", |b| {
        b.iter(|| simulate(black_box(&p), &input.workload, &input.profiles, 1, &opts))
    });
    g.finish();
}

fn bench_route(c: &mut Criterion) {
    let Some(input) = input(1.0) else { return };
    let Ok(p) = plan(&input) else { return };
    let Some(profile) = input.profiles.iter().find(|x| x.id == p.chosen.config) else {
        return;
    };
    let curve = ServiceCurve::from_profile(profile, p.chosen.scaling);
    let loads: Vec<InstanceLoad> = (0..16)
        .map(|i| InstanceLoad {
            in_flight: i % 40,
            queue_depth: (i % 40).saturating_sub(32),
            prompt_tokens_ahead: 0,
            projected: None,
            paced: None,
        })
        .collect();
    let cpu = PoolState {
        kind: PoolKind::Cpu,
        healthy: true,
        instances: &loads,
        ewma_ttft_s: 0.0,
        ewma_e2e_s: 0.0,
        service: Some(&curve),
        gpu_ttft_s: 0.0,
        gpu_tpot_s: 0.0,
        corrections: &[],
    };
    let pools = [
        cpu,
        PoolState {
            kind: PoolKind::Gpu,
            instances: &[],
            service: None,
            gpu_ttft_s: 0.25,
            gpu_tpot_s: 0.012,
            ..cpu
        },
    ];
    let rules = BudgetRules::compile(&input.workload.budget.policy, &input.workload.classes);
    let (gpu, shed) = (p.hours[12].gpu_shares(), p.hours[12].shed_shares());
    let policy = RoutePolicy {
        gpu_share: &gpu,
        shed_share: &shed,
        overflow_to_gpu: true,
        budget: &rules,
    };
    let budget = BudgetState {
        spent_today: 9.0,
        budget_per_day: Some(18.0),
        gpu_share_today: 0.1,
    };
    let class = &input.workload.classes[0];
    let mut i = 0usize;
    let mut g = c.benchmark_group("route");
    g.throughput(Throughput::Elements(1));
    g.bench_function("one_decision", |b| {
        b.iter(|| {
            i = i.wrapping_add(7);
            let req = RouteRequest {
                class: 0,
                priority: class.priority,
                prompt_tokens: 200 + (i % 300) as u32,
                expected_output_tokens: 250,
                sla: class.sla,
                tpot_s: None,
                draw: (i % 1000) as f64 / 1000.0,
                pick: [i, i / 3],
            };
            route(black_box(&req), &pools, &budget, &policy)
        })
    });
    g.finish();
}

/// A host of 4 slots with 4 requests running and 4 waiting, projected at 1 request/s of the
/// lengths of README's pilot workload (prompts of 60-200 tokens at 350 tokens/s, 25 ms a step).
fn bench_projection(c: &mut Criterion) {
    let curve = ServiceCurve::fixed(4, 0.025).prefilling(350.0);
    let mut host = BatchingHost::new(&curve);
    let lengths: Vec<(f64, f64)> = (0..64)
        .map(|i| (f64::from(60 + (i * 37) % 141), f64::from(8 + (i * 13) % 33)))
        .collect();
    for (i, &(prompt, output)) in lengths.iter().take(8).enumerate() {
        host.admit(0.1 * i as f64, i, prompt, output);
    }
    let later = Later {
        rate: 1.0,
        lengths: &lengths,
    };
    c.bench_function("project_busy_host_16_draws", |b| {
        b.iter(|| projection::project(black_box(&host), 0.8, 130.0, 24.0, later))
    });
}

criterion_group!(
    benches,
    bench_plan,
    bench_sim,
    bench_route,
    bench_projection
);
criterion_main!(benches);
