//! Each verdict path, the quality gate, the baseline argument and the replay, on synthetic inputs.

use super::*;
use crate::dist::{binomial_half_upper_tail, binomial_tail};
use crate::plan::{Plan, PlanInput, plan};
use crate::profile::ConfigProfile;
use crate::sim::{ClassSim, SimOptions, SimReport, simulate};
use crate::workload::{GpuFallbackSpec, Sla, Workload};

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
        cpu_ttft_p50_s: 0.2,
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

fn decide(plan: &Plan, planned: &SimReport, double: &SimReport, gates: &[QualityGate]) -> Verdict {
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
        input.gpu_fallback = baseline(arg, &input.workload, &mut input.catalog).expect("baseline");
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
        g.reasons[0]
            .starts_with("tasks: loses 15 and gains 0 of 20 tasks against f32: a significant drop"),
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
    for share in [0.0, -0.5, 2.5, f64::NAN] {
        let bad = PilotSpec {
            replay_load: Some(share),
            ..spec.clone()
        };
        let err = bad.validate("w").expect_err("out of range").to_string();
        assert!(err.contains("pilot.replay_load"), "{share}: {err}");
    }
    assert_eq!(spec.drain_hold, 0.0, "prompts never wait unless asked");
    for hold in [-1.0, f64::INFINITY, f64::NAN] {
        let bad = PilotSpec {
            drain_hold: hold,
            ..spec.clone()
        };
        let err = bad.validate("w").expect_err("out of range").to_string();
        assert!(err.contains("pilot.drain_hold"), "{hold}: {err}");
    }
    let loaded = WORKLOAD.replace("replay_s = 30", "replay_s = 30\nreplay_load = 0.65");
    let loaded = crate::workload::WorkloadFile::from_toml_str(&loaded)
        .expect("parses")
        .pilot
        .expect("pilot");
    assert_eq!(loaded.replay_load, Some(0.65));
    loaded.validate("w").expect("valid");
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

/// A replay offered a share of the host's capacity keeps the busiest hour's class mix and samples
/// arrivals at that share of the capacity.
#[test]
fn a_replay_at_a_share_of_capacity_keeps_the_mix_at_that_rate() {
    let (p, w, _) = planned();
    let busiest = replay_load(&p, false);
    assert_eq!(busiest.capacity_share, None);
    let loaded = busiest.clone().at_capacity_share(4.0, 0.65);
    assert_eq!(loaded.capacity_share, Some(0.65));
    assert!((loaded.rate_rps - 2.6).abs() < 1e-9, "{loaded:?}");
    assert_eq!(loaded.class_shares, busiest.class_shares);
    assert_eq!(loaded.hour, busiest.hour);
    let trace = replay_trace(&w, &loaded, 600.0, 7);
    let rate = trace.len() as f64 / 600.0;
    assert!((rate / 2.6 - 1.0).abs() < 0.1, "{rate}");
}

/// Time measured outside the engine's steps moves the replay's prediction as it should: a request
/// overhead adds itself to every CPU-served request's TTFT and E2E (and so to their p99s and median)
/// and can cost a class its SLA; a gap between steps slows every step, so the E2E of a request of
/// several tokens grows by more than the gap, and its TTFT by at least one gap.
#[test]
fn time_outside_the_steps_moves_the_replay_prediction() {
    use crate::step::StepModel;
    let (p, w, mut profiles) = planned();
    let trace = replay_trace(&w, &replay_load(&p, false), 300.0, 3);
    let model = StepModel {
        decode_s_by_batch: vec![(1.0, 0.012), (4.0, 0.02), (8.0, 0.03)],
        prompt_token_s: 0.002,
        prompt_step_s: 0.01,
        prompt_step_decode_s: None,
        steps: 500,
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        drain_hold: 0.0,
    };
    let mut predict = |gap: f64, overhead: f64| {
        profiles[0].step_model = Some(model.with_time_outside_steps(gap, overhead));
        predict_replay(&p, &w, &profiles, &trace, false, 3).expect("predicts")
    };
    let inside = predict(0.0, 0.0);
    let overhead = predict(0.0, 0.5);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-5;
    assert!(inside.cpu_ttft_p50_s > 0.0, "{inside:?}");
    assert!(close(overhead.cpu_ttft_p50_s, inside.cpu_ttft_p50_s + 0.5));
    assert!(close(overhead.ttft_p99_s, inside.ttft_p99_s + 0.5));
    assert!(close(overhead.e2e_p99_s, inside.e2e_p99_s + 0.5));
    for (a, b) in overhead.classes.iter().zip(&inside.classes) {
        assert!(close(a.e2e_p99_s, b.e2e_p99_s + 0.5), "{a:?} {b:?}");
        assert!(a.attainment <= b.attainment, "{a:?} {b:?}");
    }
    // An overhead beyond every class's E2E bound fails every SLA.
    let hopeless = predict(0.0, 100.0);
    assert!(
        hopeless.classes.iter().all(|c| c.attainment == 0.0),
        "{hopeless:?}"
    );
    let gap = predict(0.01, 0.0);
    assert!(gap.ttft_p99_s >= inside.ttft_p99_s + 0.01, "{gap:?}");
    assert!(gap.e2e_p99_s > inside.e2e_p99_s + 0.01, "{gap:?}");
    assert!(
        gap.cpu_ttft_p50_s >= inside.cpu_ttft_p50_s + 0.01,
        "{gap:?}"
    );
}

/// Over a spread of paces the prediction is the runs' mean within their band; no spread, or no step
/// model to scale, is the one prediction.
#[test]
fn the_replay_predicted_over_paces_is_the_mean_of_its_runs() {
    use super::pace::{PaceSpread, ReplayCase, predict_replay_over_paces};
    use crate::step::StepModel;
    let (p, w, mut profiles) = planned();
    let load = replay_load(&p, false);
    let trace = replay_trace(&w, &load, 300.0, 3);
    let one = predict_replay(&p, &w, &profiles, &trace, false, 3).expect("predicts");
    // The profiles change below: each call takes them afresh.
    let base = ReplayCase {
        plan: &p,
        workload: &w,
        profiles: &[],
        trace: &trace,
        with_gpu: false,
        seed: 3,
    };
    let spread = PaceSpread {
        sigma: 0.1,
        runs: 9,
        block_s: 0.0,
    };
    let curve_only = predict_replay_over_paces(
        ReplayCase {
            profiles: &profiles,
            ..base
        },
        None,
        spread,
    )
    .expect("one");
    assert_eq!(curve_only.paces, [1.0]);
    assert_eq!(curve_only.point, one);
    assert_eq!(curve_only.all.e2e_s.low, one.e2e_p99_s);
    assert_eq!(curve_only.all.e2e_s.high, one.e2e_p99_s);
    profiles[0].step_model = Some(StepModel {
        decode_s_by_batch: vec![(1.0, 0.012), (4.0, 0.02), (8.0, 0.03)],
        prompt_token_s: 0.002,
        prompt_step_s: 0.01,
        prompt_step_decode_s: None,
        steps: 500,
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        drain_hold: 0.0,
    });
    let at_one = predict_replay(&p, &w, &profiles, &trace, false, 3).expect("predicts");
    let still = PaceSpread {
        sigma: 0.0,
        runs: 5,
        block_s: 10.0,
    };
    let flat = predict_replay_over_paces(
        ReplayCase {
            profiles: &profiles,
            ..base
        },
        None,
        still,
    )
    .expect("flat");
    assert_eq!(flat.paces, [1.0; 5]);
    assert!((flat.point.e2e_p99_s - at_one.e2e_p99_s).abs() < 1e-6);
    let spread_out = predict_replay_over_paces(
        ReplayCase {
            profiles: &profiles,
            ..base
        },
        None,
        spread,
    )
    .expect("spread");
    assert_eq!(spread_out.paces.len(), 9);
    let bands = std::iter::once(&spread_out.all).chain(&spread_out.classes);
    let points = std::iter::once((spread_out.point.ttft_p99_s, spread_out.point.e2e_p99_s)).chain(
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
