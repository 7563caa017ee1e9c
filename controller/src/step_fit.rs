//! Fits the planner's [`StepModel`] to a serving engine's own step timings (its `/steps` sums): the
//! mean decode-only step at each batch, and a least-squares line of what steps with prompt tokens took
//! beyond their decode step against their prompt tokens; and measures how far later steps drifted
//! from a fitted model, and how much that drift moved from one block of a sample to the next.

use strata_engine::serve::StepTimes;
use strata_planner::service::StepModel;

/// Decode-only steps a batch needs before its mean stands in the model.
pub const MIN_DECODE_STEPS: u64 = 3;

/// Steps with prompt tokens the fit needs.
pub const MIN_PROMPT_STEPS: u64 = 3;

/// The step model of `times`, or `None` when they hold too few steps of either kind (or prompt
/// tokens that seem to take no time).
pub fn fit(times: &StepTimes) -> Option<StepModel> {
    let decode = decode_means(times);
    if decode.is_empty() {
        return None;
    }
    let mut model = StepModel {
        decode_s_by_batch: decode,
        prompt_token_s: 0.0,
        prompt_step_s: 0.0,
        steps: times.steps(),
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        // The steps' times say nothing of the order the scheduler chose.
        drain_hold: 0.0,
    };
    let (prompt_token_s, prompt_step_s) = prompt_line(times, &model)?;
    model.prompt_token_s = prompt_token_s;
    model.prompt_step_s = prompt_step_s;
    model.is_usable().then_some(model)
}

/// (batch, mean seconds) of the decode-only steps of each batch with enough of them, lifted where a
/// larger batch came out faster than a smaller one.
fn decode_means(times: &StepTimes) -> Vec<(f64, f64)> {
    let mut means: Vec<(f64, f64)> = times
        .decode
        .iter()
        .enumerate()
        .filter(|(_, d)| d.steps >= MIN_DECODE_STEPS)
        .map(|(batch, d)| (batch as f64, d.seconds / d.steps as f64))
        .collect();
    for i in 1..means.len() {
        means[i].1 = means[i].1.max(means[i - 1].1);
    }
    means
}

/// Seconds per prompt token and per prompt step: the least-squares line of each prompt step's time
/// beyond the decode step of its batch against its prompt tokens, through the origin when the
/// intercept would come out negative.
fn prompt_line(times: &StepTimes, decode: &StepModel) -> Option<(f64, f64)> {
    let (mut tokens, mut tokens_sq, mut extra, mut token_extra) = (0.0, 0.0, 0.0, 0.0);
    let mut steps = 0;
    for (batch, s) in times.prompt.iter().enumerate() {
        if s.steps == 0 {
            continue;
        }
        let base = decode.decode_s(batch as f64);
        steps += s.steps;
        tokens += s.tokens;
        tokens_sq += s.tokens_squared;
        extra += s.seconds - s.steps as f64 * base;
        token_extra += s.token_seconds - base * s.tokens;
    }
    if steps < MIN_PROMPT_STEPS || tokens_sq <= 0.0 {
        return None;
    }
    let n = steps as f64;
    let through_origin = (token_extra / tokens_sq, 0.0);
    let det = n * tokens_sq - tokens * tokens;
    if det <= 1e-9 * n * tokens_sq {
        return Some(through_origin);
    }
    let slope = (n * token_extra - tokens * extra) / det;
    let intercept = (extra - slope * tokens) / n;
    Some(if intercept >= 0.0 {
        (slope, intercept)
    } else {
        through_origin
    })
}

/// How the steps of `times` ran against what `model` says such steps take: above 1 slower. Decode-only
/// steps and steps with prompt tokens apart (the latter beyond their decode part, taken at the decode
/// ratio); `None` for a kind with fewer steps than the fit needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    /// Seconds of the decode-only steps over the model's seconds for them.
    pub decode: Option<f64>,
    /// Seconds of the prompt steps beyond their decode part over the model's for it.
    pub prompt: Option<f64>,
}

/// The [`Drift`] of `times` against `model`.
pub fn drift(times: &StepTimes, model: &StepModel) -> Drift {
    let (mut steps, mut seconds, mut modelled) = (0, 0.0, 0.0);
    for (batch, d) in times.decode.iter().enumerate() {
        steps += d.steps;
        seconds += d.seconds;
        modelled += d.steps as f64 * model.decode_s(batch as f64);
    }
    let decode = (steps >= MIN_DECODE_STEPS && modelled > 0.0).then(|| seconds / modelled);
    let (mut steps, mut extra, mut modelled) = (0, 0.0, 0.0);
    for (batch, p) in times.prompt.iter().enumerate() {
        let base = model.decode_s(batch as f64) * decode.unwrap_or(1.0);
        steps += p.steps;
        extra += p.seconds - p.steps as f64 * base;
        modelled += p.steps as f64 * model.prompt_step_s + p.tokens * model.prompt_token_s;
    }
    let prompt =
        (steps >= MIN_PROMPT_STEPS && modelled > 0.0 && extra > 0.0).then(|| extra / modelled);
    Drift { decode, prompt }
}

/// `model` with its decode steps and its prompt costs scaled by `drift` (unscaled where it is `None`):
/// the step model to predict a load with, from a sample of that load. The sample's pooled ratios move
/// the profile, whose many steps at every batch keep its shape: a sample of a minute holds a few
/// steps of its larger batches, and their means alone are too noisy to stand for them.
pub fn scaled(model: &StepModel, drift: Drift) -> StepModel {
    model.scaled(drift.decode.unwrap_or(1.0), drift.prompt.unwrap_or(1.0))
}

/// Decode-only steps a block of a sample needs before its pace counts in [`pace_spread`].
pub const MIN_BLOCK_DECODE_STEPS: u64 = 30;

/// How the engine's pace moved between consecutive blocks of each sample: the [`drift`] of each
/// block's decode-only steps against `model` (blocks with fewer than [`MIN_BLOCK_DECODE_STEPS`] left
/// out; the samples' ratios in order), and their standard deviation about their own sample's mean,
/// pooled over the samples, relative to the mean of all blocks. Samples taken minutes apart can sit at
/// different paces; that shift is not how the pace moves within a run, and is left out. The spread is
/// `None` with fewer blocks than two more than the samples that hold any.
pub fn pace_spread(samples: &[&[StepTimes]], model: &StepModel) -> (Vec<f64>, Option<f64>) {
    let groups: Vec<Vec<f64>> = samples
        .iter()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.decode.iter().map(|d| d.steps).sum::<u64>() >= MIN_BLOCK_DECODE_STEPS)
                .filter_map(|b| drift(b, model).decode)
                .collect()
        })
        .collect();
    let ratios: Vec<f64> = groups.iter().flatten().copied().collect();
    let held = groups.iter().filter(|g| !g.is_empty()).count();
    if ratios.len() < held + 1 {
        return (ratios, None);
    }
    let squares: f64 = groups
        .iter()
        .filter(|g| !g.is_empty())
        .map(|g| {
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            g.iter().map(|r| (r - mean).powi(2)).sum::<f64>()
        })
        .sum();
    let var = squares / (ratios.len() - held) as f64;
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let spread = (mean > 0.0).then(|| var.sqrt() / mean);
    (ratios, spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps drawn from a known model come back as that model.
    #[test]
    fn a_known_step_model_is_recovered() {
        let decode = |b: usize| 0.006 + 0.001 * b as f64;
        let (per_token, per_step) = (0.002, 0.004);
        let mut times = StepTimes::with_max_batch(4);
        for b in 1..=4 {
            for _ in 0..5 {
                times.record(b, 0, decode(b));
            }
        }
        for (b, p) in [(0, 100), (1, 150), (2, 60), (3, 200), (4, 90), (0, 30)] {
            let base = if b == 0 { 0.0 } else { decode(b) };
            times.record(b, p, base + per_step + per_token * p as f64);
        }
        let model = fit(&times).expect("a model");
        assert_eq!(model.decode_s_by_batch.len(), 4);
        for &(b, s) in &model.decode_s_by_batch {
            assert!((s - decode(b as usize)).abs() < 1e-12, "{model:?}");
        }
        assert!((model.prompt_token_s - per_token).abs() < 1e-9, "{model:?}");
        assert!((model.prompt_step_s - per_step).abs() < 1e-9, "{model:?}");
        assert_eq!(model.steps, 26);
    }

    /// Steps that ran 1.25x (decode) and 1.5x (prompt) slower than a model come out as that drift,
    /// and the model scaled by it says what they took.
    #[test]
    fn drift_against_a_model_is_measured_and_applied() {
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.006), (2.0, 0.010)],
            prompt_token_s: 0.002,
            prompt_step_s: 0.004,
            steps: 40,
            step_gap_s: 0.0,
            request_overhead_s: 0.0,
            drain_hold: 0.0,
        };
        let mut times = StepTimes::with_max_batch(2);
        for b in 1..=2 {
            for _ in 0..4 {
                times.record(b, 0, 1.25 * model.decode_s(b as f64));
            }
        }
        for (b, p) in [(0, 100), (1, 50), (2, 80)] {
            let prompt = 1.5 * (model.prompt_step_s + model.prompt_token_s * p as f64);
            times.record(b, p, 1.25 * model.decode_s(b as f64) + prompt);
        }
        let d = drift(&times, &model);
        assert!(
            (d.decode.expect("decode drift") - 1.25).abs() < 1e-12,
            "{d:?}"
        );
        assert!(
            (d.prompt.expect("prompt drift") - 1.5).abs() < 1e-12,
            "{d:?}"
        );
        let slower = scaled(&model, d);
        assert!((slower.decode_s(2.0) - 0.0125).abs() < 1e-12);
        assert!((slower.prompt_token_s - 0.003).abs() < 1e-12);
        assert!((slower.prompt_step_s - 0.006).abs() < 1e-12);
        let none = drift(&StepTimes::with_max_batch(2), &model);
        assert_eq!(
            none,
            Drift {
                decode: None,
                prompt: None
            }
        );
        assert_eq!(scaled(&model, none), model);
    }

    /// Blocks whose decode steps ran 1.0x, 1.1x and 0.9x the model spread by 10%; a block of too few
    /// steps is left out, and one block alone has no spread.
    #[test]
    fn the_pace_spread_is_the_blocks_relative_deviation() {
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.008), (2.0, 0.012)],
            prompt_token_s: 0.002,
            prompt_step_s: 0.01,
            steps: 100,
            step_gap_s: 0.0,
            request_overhead_s: 0.0,
            drain_hold: 0.0,
        };
        let block = |pace: f64, steps: usize| {
            let mut t = StepTimes::with_max_batch(2);
            for i in 0..steps {
                let b = 1 + i % 2;
                t.record(b, 0, pace * model.decode_s(b as f64));
            }
            t.record(1, 100, 0.3);
            t
        };
        let blocks = [
            block(1.0, 40),
            block(1.1, 40),
            block(0.9, 40),
            block(3.0, 10),
        ];
        let (ratios, spread) = pace_spread(&[&blocks], &model);
        assert_eq!(ratios.len(), 3, "{ratios:?}");
        for (r, want) in ratios.iter().zip([1.0, 1.1, 0.9]) {
            assert!((r - want).abs() < 1e-9, "{ratios:?}");
        }
        assert!((spread.expect("a spread") - 0.1).abs() < 1e-9, "{spread:?}");
        assert_eq!(pace_spread(&[&blocks[..1]], &model).1, None);
        assert_eq!(pace_spread(&[], &model), (Vec::new(), None));

        // A second sample at a pace a fifth slower, moving as much about its own mean: the shift
        // between the samples is not spread, and one block alone in a sample adds none.
        let slower = [block(1.2, 40), block(1.32, 40), block(1.08, 40)];
        let (ratios, spread) = pace_spread(&[&blocks, &slower], &model);
        assert_eq!(ratios.len(), 6, "{ratios:?}");
        let pooled = ((0.02_f64 + 0.0288) / 4.0).sqrt() / 1.1;
        assert!(
            (spread.expect("a spread") - pooled).abs() < 1e-9,
            "{spread:?}"
        );
        let (_, spread) = pace_spread(&[&blocks[..1], &slower[..1]], &model);
        assert_eq!(spread, None);
    }

    /// A negative intercept is not a time: the line then goes through the origin; a larger batch
    /// that came out faster is lifted; too few steps give no model.
    #[test]
    fn the_fit_keeps_to_what_a_step_can_be() {
        let mut times = StepTimes::with_max_batch(2);
        for _ in 0..3 {
            times.record(1, 0, 0.010);
            times.record(2, 0, 0.008);
        }
        assert_eq!(fit(&times), None, "no prompt steps");
        for p in [100, 200, 300] {
            times.record(1, p, 0.010 + 0.003 * p as f64 - 0.05);
        }
        let model = fit(&times).expect("a model");
        assert_eq!(model.decode_s_by_batch, [(1.0, 0.010), (2.0, 0.010)]);
        assert_eq!(model.prompt_step_s, 0.0);
        let through_origin = (0.003 * 14e4 - 0.05 * 600.0) / 14e4;
        assert!((model.prompt_token_s - through_origin).abs() < 1e-12);
        assert_eq!(fit(&StepTimes::with_max_batch(2)), None);
    }
}
