//! Calibration of the replay's prediction: samples of the replay's load sent through its gateway right
//! before and right after it, the engine's steps under them read block by block and set against the
//! profile's step model, and the time spent outside the steps measured: the gaps between the engine's
//! steps, and what the samples' clients waited for their first tokens beyond what the engine itself
//! timed of the same requests.

use std::time::Duration;

use strata_engine::serve::StepTimes;
use strata_planner::{
    pace::PaceSpread, pilot as decide, pilot::ReplayLoad, service::StepModel, workload::TraceRecord,
};

use super::{
    Pilot, Result,
    replay::timed_requests,
    report::{Calibration, CalibrationSample, SampleTime, went_to_gpu},
};
use crate::{
    loadgen::{self, LoadSpec, Percentiles, ReplayRecord},
    profile::{EngineProcess, FirstTokens},
    step_fit,
};

/// Seconds of each calibration sample (one right before the replay, one right after it), at most.
const CALIBRATION_S: f64 = 40.0;
/// Seconds of each block of the calibration sample whose pace is read apart.
const CALIBRATION_BLOCK_S: f64 = 10.0;
/// Spread of the engine's pace the replay is predicted over when the calibration measured none, and
/// the least and most taken from a measured one (a sample's few blocks can happen to agree closely,
/// and one disturbed block should not spread the prediction over half the range).
const DEFAULT_PACE_SPREAD: f64 = 0.03;
const MIN_PACE_SPREAD: f64 = 0.02;
const MAX_PACE_SPREAD: f64 = 0.15;
/// Simulations the replay's prediction averages over the spread of paces.
const PACE_RUNS: u32 = 15;
/// Added to the pilot's seed for the calibration sample before the replay (and one more for the one
/// after it), so that neither is the replayed one and the engine's prefix cache serves neither from
/// the other.
const CALIBRATION_SEED: u64 = 0x5eed;

/// The spread of paces the replay's prediction runs over: the calibration's, within bounds.
pub(super) fn pace_spread(calibration: &Calibration) -> PaceSpread {
    PaceSpread {
        sigma: calibration
            .pace_spread
            .unwrap_or(DEFAULT_PACE_SPREAD)
            .clamp(MIN_PACE_SPREAD, MAX_PACE_SPREAD),
        runs: PACE_RUNS,
        block_s: CALIBRATION_BLOCK_S,
    }
}

/// One calibration sample: the requests sent, what their clients saw, and the engine's steps under
/// them, block by block.
pub(super) struct SampleSteps {
    when: SampleTime,
    duration_s: f64,
    trace: Vec<TraceRecord>,
    records: Vec<ReplayRecord>,
    blocks: Vec<StepTimes>,
    /// The engine's own count of the sample's first tokens (`None`: its metrics could not be read).
    first_tokens: Option<FirstTokens>,
}

impl SampleSteps {
    /// Every step of the sample: its blocks added up.
    fn total(&self) -> StepTimes {
        let mut total = StepTimes::default();
        self.blocks.iter().for_each(|b| total.add(b));
        total
    }

    /// The TTFTs the sample's clients saw of the requests the engine served (failed ones and those
    /// sent to GPU left out), seconds.
    fn served_ttfts(&self) -> Vec<f64> {
        self.records
            .iter()
            .filter(|r| r.record.error.is_none() && !went_to_gpu(r))
            .map(|r| r.record.ttft_s)
            .collect()
    }

    /// The median TTFT the sample's clients saw of the requests the engine served, seconds; `None`
    /// without any.
    fn observed_ttft_p50_s(&self) -> Option<f64> {
        let served = self.served_ttfts();
        (!served.is_empty()).then(|| Percentiles::of(served.into_iter()).p50 / 1000.0)
    }

    /// The mean TTFT the sample's clients saw of the requests the engine served, and the mean the
    /// engine timed of them (`None` when it counted another number of first tokens, or none).
    fn ttft_means_s(&self) -> (Option<f64>, Option<f64>) {
        let served = self.served_ttfts();
        if served.is_empty() {
            return (None, None);
        }
        let client = served.iter().sum::<f64>() / served.len() as f64;
        let engine = self
            .first_tokens
            .filter(|f| f.requests == served.len() as u64)
            .and_then(|f| f.mean_s());
        (Some(client), engine)
    }
}

/// Sends a sample of the replay's load (a seed of its own, [`CALIBRATION_S`] at most) through the
/// replay's gateway and reads the engine's steps under it, as a whole and every
/// [`CALIBRATION_BLOCK_S`]; `None` when the sample is empty or the engine's step timings cannot be
/// read.
pub(super) async fn sample_steps(
    pilot: &Pilot<'_>,
    engine: &EngineProcess,
    load: &ReplayLoad,
    load_spec: &LoadSpec,
    when: SampleTime,
) -> Result<Option<SampleSteps>> {
    let spec = pilot.spec;
    let duration_s = CALIBRATION_S.min(spec.replay_s);
    let seed = spec.seed.wrapping_add(match when {
        SampleTime::BeforeReplay => CALIBRATION_SEED,
        SampleTime::AfterReplay => CALIBRATION_SEED + 1,
    });
    let trace = decide::replay_trace(pilot.workload, load, duration_s, seed);
    let sample = timed_requests(pilot.workload, &trace);
    if sample.is_empty() {
        return Ok(None);
    }
    let sample_spec = LoadSpec {
        seed,
        ..load_spec.clone()
    };
    let read = async |moment: &str| logged(engine.step_times().await, "step timings", when, moment);
    let read_first_tokens = async |moment: &str| {
        logged(
            engine.first_tokens().await,
            "first-token timings",
            when,
            moment,
        )
    };
    let Some(before) = read("before").await else {
        return Ok(None);
    };
    let first_tokens_before = read_first_tokens("before").await;
    let (sent, mut readings) = tokio::join!(
        loadgen::replay(&sample_spec, &sample),
        block_readings(engine, duration_s)
    );
    let records = sent?;
    let Some(after) = read("after").await else {
        return Ok(None);
    };
    let first_tokens = match (first_tokens_before, read_first_tokens("after").await) {
        (Some(before), Some(after)) => Some(after.since(&before)),
        _ => None,
    };
    readings.push(after);
    let blocks = std::iter::once(&before)
        .chain(&readings)
        .zip(&readings)
        .map(|(earlier, later)| later.since(earlier))
        .collect();
    Ok(Some(SampleSteps {
        when,
        duration_s,
        trace,
        records,
        blocks,
        first_tokens,
    }))
}

/// The engine's reading, or `None` with a warning naming `what` could not be read, and at which
/// `moment` of which sample.
fn logged<T>(
    reading: crate::profile::Result<T>,
    what: &str,
    when: SampleTime,
    moment: &str,
) -> Option<T> {
    reading
        .inspect_err(|e| {
            tracing::warn!(error = %e, ?when, moment, "no {what} from the engine around a calibration sample");
        })
        .ok()
}

/// The calibration of the profile's step `model` by `samples`: their steps pooled against it, each
/// sample's own ratios beside, the spread of their blocks' paces, and the time outside the steps:
/// the mean gap between steps, and the time each request spent outside the engine (see
/// [`request_overhead`]). `predict_ttft_p50` gives the simulator's median TTFT of a sample's trace on
/// a step model, which each sample reports beside its clients' median. `None` when the samples ran
/// too few steps to say.
///
/// # Errors
/// What `predict_ttft_p50` returns.
pub(super) fn calibration<E>(
    samples: &[SampleSteps],
    model: &StepModel,
    predict_ttft_p50: impl Fn(&[TraceRecord], &StepModel) -> Result<f64, E>,
) -> Result<Option<Calibration>, E> {
    let totals: Vec<StepTimes> = samples.iter().map(SampleSteps::total).collect();
    let mut pooled = StepTimes::default();
    totals.iter().for_each(|t| pooled.add(t));
    let drift = step_fit::drift(&pooled, model);
    if drift.decode.is_none() && drift.prompt.is_none() {
        return Ok(None);
    }
    let blocks: Vec<&[StepTimes]> = samples.iter().map(|s| s.blocks.as_slice()).collect();
    let (block_decode_over_profiled, pace_spread) = step_fit::pace_spread(&blocks, model);
    let step_gap_s = pooled.between_steps.mean_s().unwrap_or(0.0);
    let steps = step_fit::scaled(model, drift).with_time_outside_steps(step_gap_s, 0.0);
    let mut own = Vec::with_capacity(samples.len());
    for (s, total) in samples.iter().zip(&totals) {
        let drift = step_fit::drift(total, model);
        let observed = s.observed_ttft_p50_s();
        let predicted = match observed {
            Some(_) => Some(predict_ttft_p50(&s.trace, &steps)?),
            None => None,
        };
        let (client_ttft_mean_s, engine_ttft_mean_s) = s.ttft_means_s();
        own.push(CalibrationSample {
            when: s.when,
            duration_s: s.duration_s,
            requests: s.records.len(),
            decode_over_profiled: drift.decode,
            prompt_over_profiled: drift.prompt,
            step_gap_s: total.between_steps.mean_s(),
            observed_ttft_p50_s: observed,
            predicted_ttft_p50_s: predicted,
            client_ttft_mean_s,
            engine_ttft_mean_s,
        });
    }
    let request_overhead_s = request_overhead(&own);
    Ok(Some(Calibration {
        duration_s: samples.iter().map(|s| s.duration_s).sum(),
        requests: samples.iter().map(|s| s.records.len()).sum(),
        samples: own,
        decode_over_profiled: drift.decode,
        prompt_over_profiled: drift.prompt,
        block_s: CALIBRATION_BLOCK_S,
        block_decode_over_profiled,
        pace_spread,
        step_gaps: pooled.between_steps.gaps,
        step_gap_s,
        request_overhead_s,
        step_model: steps.with_time_outside_steps(step_gap_s, request_overhead_s),
    }))
}

/// Seconds each request spends outside the engine, from the samples: each sample's mean TTFT as its
/// clients saw it less the mean the engine timed of the same requests (the gateway, the network and
/// the client, which no step holds), averaged over the samples by their requests, and at least 0.
/// Both means hold the same queueing in the engine, so a sample whose queue the simulator misjudges
/// (its pace moved within it, a burst of long prompts) does not count as time outside.
fn request_overhead(samples: &[CalibrationSample]) -> f64 {
    let (mut weighted, mut requests) = (0.0, 0.0);
    for s in samples {
        if let (Some(client), Some(engine)) = (s.client_ttft_mean_s, s.engine_ttft_mean_s) {
            weighted += s.requests as f64 * (client - engine);
            requests += s.requests as f64;
        }
    }
    if requests > 0.0 {
        (weighted / requests).max(0.0)
    } else {
        0.0
    }
}

/// The engine's step timings every [`CALIBRATION_BLOCK_S`] for `duration_s` (readings that fail are
/// left out, and so merge two blocks).
async fn block_readings(engine: &EngineProcess, duration_s: f64) -> Vec<StepTimes> {
    let start = tokio::time::Instant::now();
    let blocks = (duration_s / CALIBRATION_BLOCK_S).floor() as u32;
    let mut readings = Vec::with_capacity(blocks as usize + 1);
    for k in 1..=blocks {
        let due = Duration::from_secs_f64(f64::from(k) * CALIBRATION_BLOCK_S);
        tokio::time::sleep_until(start + due).await;
        if let Ok(reading) = engine.step_times().await {
            readings.push(reading);
        }
    }
    readings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of one decode batch and one prompt length, each `pace` times what `model` says.
    fn steps_at(model: &StepModel, pace: f64, decode_steps: u32) -> StepTimes {
        let mut t = StepTimes::with_max_batch(2);
        for _ in 0..decode_steps {
            t.record(2, 0, pace * model.decode_s(2.0));
        }
        for tokens in [60, 120, 180] {
            let prompt = model.prompt_step_s + model.prompt_token_s * f64::from(tokens);
            t.record(1, tokens as usize, pace * (model.decode_s(1.0) + prompt));
        }
        t
    }

    /// `n` requests whose clients saw their first token after `ttft_s`, and one that failed and
    /// one sent to GPU, both much slower.
    fn records(n: usize, ttft_s: f64) -> Vec<ReplayRecord> {
        let record = |ttft_s: f64, error: Option<String>, route: Option<String>| ReplayRecord {
            class: "chat".into(),
            record: crate::loadgen::RequestRecord {
                arrival_s: 0.0,
                ttft_s,
                itl_s: Vec::new(),
                e2e_s: ttft_s + 0.5,
                prompt_tokens: 60,
                output_tokens: 8,
                error,
                route,
            },
        };
        let mut out: Vec<ReplayRecord> = (0..n).map(|_| record(ttft_s, None, None)).collect();
        out.push(record(9.0, Some("timed out".into()), None));
        out.push(record(9.0, None, Some("pool=gpu-baseline".into())));
        out
    }

    /// Steps as [`steps_at`], with `gaps` gaps of `gap_s` between them.
    fn steps_with_gaps(
        model: &StepModel,
        pace: f64,
        decode_steps: u32,
        gaps: u32,
        gap_s: f64,
    ) -> StepTimes {
        let mut t = steps_at(model, pace, decode_steps);
        (0..gaps).for_each(|_| t.record_gap(gap_s));
        t
    }

    /// Samples before and after the replay are pooled by their steps (a sample of more steps weighs
    /// more), each keeps its own ratios, and the blocks of both spread the pace. The gaps between
    /// steps are pooled into one mean gap, and the time outside the engine is what the clients
    /// waited beyond what the engine timed of the same requests.
    #[test]
    fn calibration_samples_are_pooled_around_the_replay() {
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.004), (2.0, 0.007)],
            prompt_token_s: 0.001,
            prompt_step_s: 0.010,
            prompt_step_decode_s: None,
            steps: 100,
            step_gap_s: 0.0,
            request_overhead_s: 0.0,
            drain_hold: 0.0,
        };
        let sample = |when, pace: f64, decode_steps: u32, gap_s: f64, ttft_s: f64| {
            let blocks = vec![
                steps_with_gaps(
                    &model,
                    pace * 0.98,
                    decode_steps / 2,
                    decode_steps / 2,
                    gap_s,
                ),
                steps_with_gaps(
                    &model,
                    pace * 1.02,
                    decode_steps / 2,
                    decode_steps / 2,
                    gap_s,
                ),
            ];
            SampleSteps {
                when,
                duration_s: 40.0,
                trace: Vec::new(),
                records: records(28, ttft_s),
                blocks,
                // The engine timed the 28 it served at 0.2 s each.
                first_tokens: Some(FirstTokens {
                    requests: 28,
                    seconds: 28.0 * 0.2,
                }),
            }
        };
        let samples = [
            sample(SampleTime::BeforeReplay, 1.10, 100, 0.002, 0.30),
            sample(SampleTime::AfterReplay, 1.00, 300, 0.004, 0.25),
        ];
        let gap = (100.0 * 0.002 + 300.0 * 0.004) / 400.0;
        let predict = |_: &[TraceRecord], steps: &StepModel| {
            assert!((steps.step_gap_s - gap).abs() < 1e-12, "{steps:?}");
            assert_eq!(steps.request_overhead_s, 0.0, "{steps:?}");
            Ok::<f64, ()>(0.2)
        };
        let c = calibration(&samples, &model, predict)
            .expect("predicted")
            .expect("a calibration");
        assert_eq!((c.duration_s, c.requests), (80.0, 60));
        let own: Vec<f64> = c
            .samples
            .iter()
            .filter_map(|s| s.decode_over_profiled)
            .collect();
        assert!(
            (own[0] - 1.10).abs() < 1e-9 && (own[1] - 1.0).abs() < 1e-9,
            "{own:?}"
        );
        let pooled = c.decode_over_profiled.expect("decode");
        assert!((pooled - 1.025).abs() < 1e-9, "{pooled}");
        let prompt = c.prompt_over_profiled.expect("prompt");
        assert!(prompt > 1.0 && prompt < 1.10, "{prompt}");
        assert_eq!(c.block_decode_over_profiled.len(), 4);
        assert!(c.pace_spread.expect("spread") > 0.02, "{c:?}");
        assert!((c.step_model.decode_s(2.0) - 1.025 * 0.007).abs() < 1e-12);

        assert_eq!(c.step_gaps, 400);
        assert!((c.step_gap_s - gap).abs() < 1e-12, "{c:?}");
        assert!((c.samples[0].step_gap_s.expect("gaps") - 0.002).abs() < 1e-12);
        // The failed request and the one sent to GPU are left out of the observed medians.
        let observed = c.samples[1].observed_ttft_p50_s.expect("observed");
        assert!((observed - 0.25).abs() < 1e-3, "{observed}");
        assert_eq!(c.samples[1].predicted_ttft_p50_s, Some(0.2));
        // Clients 0.10 s behind the engine before the replay and 0.05 s after it, over as many
        // requests each.
        assert!((c.request_overhead_s - 0.075).abs() < 1e-3, "{c:?}");
        assert_eq!(c.step_model.step_gap_s, c.step_gap_s);
        assert_eq!(c.step_model.request_overhead_s, c.request_overhead_s);

        let none = calibration(&[], &model, predict).expect("nothing to predict");
        assert!(none.is_none());
        let failed = calibration(&samples, &model, |_, _| Err("no such config"));
        assert_eq!(failed.err(), Some("no such config"));
    }

    /// Clients that saw their first token sooner than the engine timed it spent no negative time
    /// outside the engine; a sample without the engine's timing does not count.
    #[test]
    fn the_time_outside_the_engine_is_never_negative() {
        let sample = |requests, client: f64, engine: Option<f64>| CalibrationSample {
            when: SampleTime::AfterReplay,
            duration_s: 40.0,
            requests,
            decode_over_profiled: None,
            prompt_over_profiled: None,
            step_gap_s: None,
            observed_ttft_p50_s: Some(client),
            predicted_ttft_p50_s: None,
            client_ttft_mean_s: Some(client),
            engine_ttft_mean_s: engine,
        };
        assert_eq!(request_overhead(&[sample(10, 0.2, Some(0.3))]), 0.0);
        let mixed = [
            sample(10, 0.4, Some(0.3)),
            sample(30, 0.28, Some(0.3)),
            sample(50, 9.0, None),
        ];
        assert!((request_overhead(&mixed) - 0.01).abs() < 1e-12);
        assert_eq!(request_overhead(&[]), 0.0);
    }

    /// The engine's mean stands beside the clients' only when it timed as many first tokens as the
    /// clients saw served: one more or one fewer, and the sample says nothing of the time outside.
    #[test]
    fn the_engines_timing_counts_only_for_the_same_requests() {
        let sample = |requests: u64| SampleSteps {
            when: SampleTime::BeforeReplay,
            duration_s: 40.0,
            trace: Vec::new(),
            records: records(4, 0.3),
            blocks: Vec::new(),
            first_tokens: Some(FirstTokens {
                requests,
                seconds: requests as f64 * 0.25,
            }),
        };
        let (client, engine) = sample(4).ttft_means_s();
        assert!((client.expect("served") - 0.3).abs() < 1e-12);
        assert!((engine.expect("the same four") - 0.25).abs() < 1e-12);
        assert_eq!(sample(5).ttft_means_s().1, None);
        assert_eq!(sample(3).ttft_means_s().1, None);
    }
}
