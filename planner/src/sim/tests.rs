//! The batching host and its pace drift against hand-computed step timelines, and the FCFS station.

use super::*;
use crate::service::STEP_TOKENS;

/// 10-token prompts prefill in 0.1 s; one decoding request takes 0.1 s a token, two 0.2 s each.
fn curve(slots: u32) -> ServiceCurve {
    ServiceCurve {
        slots,
        prefill_tokens_per_s: 100.0,
        tpot_by_batch: vec![(1.0, 0.1), (2.0, 0.2)],
        copies: 1.0,
        decode_step_by_batch: Vec::new(),
        step_prefill_tokens_per_s: None,
        prompt_step_s: 0.0,
        prompt_step_decode_s: None,
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        drain_hold: 0.0,
    }
}

fn finished(host: &mut BatchingHost) -> Vec<(f64, f64)> {
    host.finish_all();
    let mut done = host.take_finished();
    done.sort_by(|a, b| a.arrival.total_cmp(&b.arrival).then(a.class.cmp(&b.class)));
    done.iter()
        .map(|f| {
            (
                (f.first_token * 1e6).round() / 1e6,
                (f.finish * 1e6).round() / 1e6,
            )
        })
        .collect()
}

#[test]
fn a_lone_request_prefills_then_decodes_at_the_single_stream_pace() {
    let mut host = BatchingHost::new(&curve(4));
    host.admit(1.0, 0, 10.0, 5.0);
    assert_eq!(finished(&mut host), vec![(1.1, 1.5)]);
    host.admit(2.0, 0, 10.0, 1.0);
    assert_eq!(
        finished(&mut host),
        vec![(2.1, 2.1)],
        "one token: done at the first"
    );
}

/// A gap between steps lengthens each of a request's steps: five steps (the prompt's and four
/// decode steps) each 0.05 s longer; and a step that waits for a free slot waits for the gaps too.
#[test]
fn a_gap_between_steps_lengthens_every_step_that_runs() {
    let gapped = ServiceCurve {
        step_gap_s: 0.05,
        ..curve(1)
    };
    let mut host = BatchingHost::new(&gapped);
    host.admit(1.0, 0, 10.0, 5.0);
    host.admit(1.0, 1, 10.0, 1.0);
    assert_eq!(finished(&mut host), vec![(1.15, 1.75), (1.9, 1.9)]);
}

#[test]
fn a_prompt_waits_for_the_step_in_flight_then_holds_up_the_decoding_requests() {
    let mut host = BatchingHost::new(&curve(2));
    host.admit(0.0, 0, 10.0, 5.0);
    host.admit(0.0, 1, 10.0, 5.0);
    // A's prompt is the first step (to 0.1). B's prompt shares the second with A's next token
    // (0.1 + 0.1 s, to 0.3); then both decode at 0.2 s a step until A's last token at 0.9, and B's
    // last runs alone (0.1 s).
    assert_eq!(finished(&mut host), vec![(0.1, 0.9), (0.3, 1.0)]);
}

#[test]
fn a_step_runs_at_most_its_token_budget_of_prompt() {
    let mut host = BatchingHost::new(&curve(2));
    let long = f64::from(STEP_TOKENS) + 100.0;
    host.admit(0.0, 0, long, 1.0);
    // Two steps: the budget (5.12 s at 100 prompt tokens a second), then the last 100 tokens.
    assert_eq!(finished(&mut host), vec![(6.12, 6.12)]);
}

#[test]
fn skipping_alike_decode_steps_changes_nothing() {
    let run = |probe_every: f64| {
        let mut host = BatchingHost::new(&curve(3));
        let mut t = 0.0;
        for (i, (prompt, output)) in [(10.0, 40.0), (30.0, 7.0), (5.0, 90.0), (20.0, 3.0)]
            .into_iter()
            .enumerate()
        {
            host.admit(t, i, prompt, output);
            t += 0.7;
        }
        // Looking at the load often splits the skipped stretches at other places.
        let mut probe = t;
        while probe < 30.0 {
            host.load(probe);
            probe += probe_every;
        }
        finished(&mut host)
    };
    assert_eq!(run(100.0), run(0.013));
}

/// A drifting pace with no spread is the steady host; with one, the same seed gives the same steps
/// (however the host is looked at, so skipping stays within a block), and another seed others.
#[test]
fn a_drifting_pace_moves_the_steps_block_by_block() {
    let run = |sigma: f64, seed: u64, probe_every: f64| {
        let drift = PaceDrift {
            block_s: 0.5,
            sigma,
            seed,
        };
        let mut host = BatchingHost::drifting(&curve(3), drift, 0);
        for (i, (prompt, output)) in [(10.0, 40.0), (30.0, 7.0), (5.0, 90.0)]
            .into_iter()
            .enumerate()
        {
            host.admit(0.7 * i as f64, i, prompt, output);
        }
        let mut probe = 1.4;
        while probe < 40.0 {
            host.load(probe);
            probe += probe_every;
        }
        finished(&mut host)
    };
    let steady = {
        let mut host = BatchingHost::new(&curve(3));
        for (i, (prompt, output)) in [(10.0, 40.0), (30.0, 7.0), (5.0, 90.0)]
            .into_iter()
            .enumerate()
        {
            host.admit(0.7 * i as f64, i, prompt, output);
        }
        finished(&mut host)
    };
    assert_eq!(run(0.0, 1, 100.0), steady);
    let drifting = run(0.3, 1, 100.0);
    assert_ne!(drifting, steady);
    assert_eq!(drifting, run(0.3, 1, 0.013));
    assert_ne!(drifting, run(0.3, 2, 100.0));
}

#[test]
fn without_a_free_slot_a_request_waits_for_one() {
    let mut host = BatchingHost::new(&curve(1));
    host.admit(0.0, 0, 10.0, 5.0);
    host.admit(0.0, 1, 10.0, 5.0);
    let load = host.load(0.05);
    assert_eq!((load.in_flight, load.queue_depth), (2, 1));
    assert_eq!(finished(&mut host), vec![(0.1, 0.5), (0.6, 1.0)]);
    let load = host.load(2.0);
    assert_eq!((load.in_flight, load.queue_depth), (0, 0));
}

/// A drain hold's wave: B, arriving while A decodes, is held for A's drain; C, arriving during that
/// hold, waits for B's prefill step instead of sharing it, and (the hold being large) then for B's
/// drain in turn.
#[test]
fn after_a_drain_the_held_prompt_prefills_before_those_that_came_during_it() {
    let mut host = BatchingHost::new(&curve(3).holding(1e6));
    host.admit(0.0, 0, 10.0, 5.0);
    host.admit(0.15, 1, 10.0, 2.0);
    host.admit(0.25, 2, 10.0, 2.0);
    // A: prompt to 0.1, four decode steps alone to 0.5. B: its prompt alone (0.5 to 0.6), its last
    // token alone (to 0.7). C: the same after B (to 0.8 and 0.9), where sharing B's prefill step
    // would have given both their first token at 0.7.
    assert_eq!(
        finished(&mut host),
        vec![(0.1, 0.5), (0.6, 0.7), (0.8, 0.9)]
    );
}

/// A mirror's projection is what admitting the request would give; made on a copy, it leaves the
/// mirror as it was.
#[test]
fn a_projection_serves_the_request_beside_those_on_the_host_and_changes_nothing() {
    let mut host = BatchingHost::new(&curve(2));
    let alone = host.clone().project(0.0, 10.0, 5.0);
    assert!((alone.ttft_s - 0.1).abs() < 1e-9 && (alone.e2e_s - 0.5).abs() < 1e-9);
    host.admit(0.0, 0, 10.0, 5.0);
    // As the timeline above: its prompt waits for A's (to 0.1), shares a step with A's next token
    // (to 0.3), and its last token comes at 1.0.
    let behind = host.clone().project(0.0, 10.0, 5.0);
    assert!((behind.ttft_s - 0.3).abs() < 1e-9, "{behind:?}");
    assert!((behind.e2e_s - 1.0).abs() < 1e-9, "{behind:?}");
    assert_eq!(finished(&mut host), vec![(0.1, 0.5)], "A alone, as before");
}

/// What the mirrored instance shows resyncs the mirror: a first token seen early ends the step
/// running the prompt, and an end seen frees the host.
#[test]
fn first_tokens_and_ends_seen_resync_a_mirror() {
    let mut host = BatchingHost::new(&curve(2));
    host.admit(0.0, 7, 10.0, 5.0);
    host.first_token_seen(0.04, 7);
    let p = host.clone().project(0.04, 10.0, 1.0);
    // A decodes from 0.04: the next step (to 0.14) runs its token; the new prompt shares the one
    // after with A's next token (0.1 + 0.1 s).
    assert!((p.ttft_s - (0.34 - 0.04)).abs() < 1e-9, "{p:?}");
    host.finished_seen(0.05, 7);
    let idle = host.clone().project(0.05, 10.0, 1.0);
    assert!((idle.ttft_s - 0.1).abs() < 1e-9, "{idle:?}");
    assert!(finished(&mut host).is_empty(), "A left");
}

/// The tokens a mirrored instance shows keep the mirror's decodes in step: a request behind the
/// mirror's pace decodes longer, and one the mirror had finished comes back.
#[test]
fn decode_progress_seen_resyncs_a_mirror() {
    let mut behind = BatchingHost::new(&curve(2));
    behind.admit(0.0, 7, 10.0, 5.0);
    // The mirror ran two of A's four decode steps by 0.35 (to 0.3) and is one into the third; the
    // instance shows three tokens still to come, so the mirror's last ends one step later.
    behind.decode_left_seen(0.35, 7, 3.0);
    assert_eq!(finished(&mut behind), vec![(0.1, 0.6)]);

    let mut ahead = BatchingHost::new(&curve(2));
    ahead.admit(0.0, 7, 10.0, 5.0);
    let idle = ahead.clone().project(0.55, 10.0, 1.0);
    assert!(
        (idle.ttft_s - 0.1).abs() < 1e-9,
        "the mirror finished A at 0.5: {idle:?}"
    );
    ahead.decode_left_seen(0.55, 7, 2.0);
    // A decodes again from 0.55 (to 0.65); the new prompt then shares A's next step (0.1 + 0.1 s).
    let p = ahead.clone().project(0.55, 10.0, 1.0);
    assert!((p.ttft_s - 0.3).abs() < 1e-9, "{p:?}");
    // A prompt the mirror has not run yet is left to its first token.
    let mut prefilling = BatchingHost::new(&curve(2));
    prefilling.admit(0.0, 7, 10.0, 5.0);
    prefilling.decode_left_seen(0.05, 7, 2.0);
    assert_eq!(finished(&mut prefilling), vec![(0.1, 0.5)]);
}
