//! Calibration of the replay's prediction: samples of the replay's load sent through its gateway right
//! before and right after it, the engine's steps under them read block by block and set against the
//! profile's step model.

use std::time::Duration;

use strata_engine::serve::StepTimes;
use strata_planner::{pace::PaceSpread, pilot as decide, pilot::ReplayLoad, service::StepModel};

use super::{
    Pilot, Result,
    replay::timed_requests,
    report::{Calibration, CalibrationSample, SampleTime},
};
use crate::{
    loadgen::{self, LoadSpec},
    profile::EngineProcess,
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

/// The engine's steps under one calibration sample, block by block.
pub(super) struct SampleSteps {
    when: SampleTime,
    duration_s: f64,
    requests: usize,
    blocks: Vec<StepTimes>,
}

impl SampleSteps {
    /// Every step of the sample: its blocks added up.
    fn total(&self) -> StepTimes {
        let mut total = StepTimes::default();
        self.blocks.iter().for_each(|b| total.add(b));
        total
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
    let sample = timed_requests(
        pilot.workload,
        &decide::replay_trace(pilot.workload, load, duration_s, seed),
    );
    if sample.is_empty() {
        return Ok(None);
    }
    let sample_spec = LoadSpec {
        seed,
        ..load_spec.clone()
    };
    let read = async |moment: &str| {
        engine
            .step_times()
            .await
            .inspect_err(|e| {
                tracing::warn!(error = %e, ?when, moment, "no step timings from the engine around a calibration sample");
            })
            .ok()
    };
    let Some(before) = read("before").await else {
        return Ok(None);
    };
    let (sent, mut readings) = tokio::join!(
        loadgen::replay(&sample_spec, &sample),
        block_readings(engine, duration_s)
    );
    sent?;
    let Some(after) = read("after").await else {
        return Ok(None);
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
        requests: sample.len(),
        blocks,
    }))
}

/// The calibration of the profile's step `model` by `samples`: their steps pooled against it, each
/// sample's own ratios beside, and the spread of their blocks' paces; `None` when the samples ran
/// too few steps to say.
pub(super) fn calibration(samples: &[SampleSteps], model: &StepModel) -> Option<Calibration> {
    let totals: Vec<StepTimes> = samples.iter().map(SampleSteps::total).collect();
    let mut pooled = StepTimes::default();
    totals.iter().for_each(|t| pooled.add(t));
    let drift = step_fit::drift(&pooled, model);
    if drift.decode.is_none() && drift.prompt.is_none() {
        return None;
    }
    let blocks: Vec<&[StepTimes]> = samples.iter().map(|s| s.blocks.as_slice()).collect();
    let (block_decode_over_profiled, pace_spread) = step_fit::pace_spread(&blocks, model);
    Some(Calibration {
        duration_s: samples.iter().map(|s| s.duration_s).sum(),
        requests: samples.iter().map(|s| s.requests).sum(),
        samples: samples
            .iter()
            .zip(&totals)
            .map(|(s, total)| {
                let own = step_fit::drift(total, model);
                CalibrationSample {
                    when: s.when,
                    duration_s: s.duration_s,
                    requests: s.requests,
                    decode_over_profiled: own.decode,
                    prompt_over_profiled: own.prompt,
                }
            })
            .collect(),
        decode_over_profiled: drift.decode,
        prompt_over_profiled: drift.prompt,
        block_s: CALIBRATION_BLOCK_S,
        block_decode_over_profiled,
        pace_spread,
        step_model: step_fit::scaled(model, drift),
    })
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

    /// Samples before and after the replay are pooled by their steps (a sample of more steps weighs
    /// more), each keeps its own ratios, and the blocks of both spread the pace.
    #[test]
    fn calibration_samples_are_pooled_around_the_replay() {
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.004), (2.0, 0.007)],
            prompt_token_s: 0.001,
            prompt_step_s: 0.010,
            steps: 100,
        };
        let sample = |when, pace: f64, decode_steps: u32| {
            let blocks = vec![
                steps_at(&model, pace * 0.98, decode_steps / 2),
                steps_at(&model, pace * 1.02, decode_steps / 2),
            ];
            SampleSteps {
                when,
                duration_s: 40.0,
                requests: 30,
                blocks,
            }
        };
        let samples = [
            sample(SampleTime::BeforeReplay, 1.10, 100),
            sample(SampleTime::AfterReplay, 1.00, 300),
        ];
        let c = calibration(&samples, &model).expect("a calibration");
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
        assert!(calibration(&[], &model).is_none());
    }
}
