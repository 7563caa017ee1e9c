//! Fits the planner's [`StepModel`] to a serving engine's own step timings (its `/steps` sums): the
//! mean decode-only step at each batch, and a least-squares plane of what steps with prompt tokens
//! took, whole, against their prompt tokens and their decoding requests; and measures how far later steps drifted
//! from a fitted model, and how much that drift moved from one block of a sample to the next.

use strata_engine::serve::{PromptSteps, StepTimes};
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
        prompt_step_decode_s: None,
        steps: times.steps(),
        step_gap_s: 0.0,
        request_overhead_s: 0.0,
        // The steps' times say nothing of the order the scheduler chose.
        drain_hold: 0.0,
    };
    let (prompt_token_s, prompt_step_s, prompt_step_decode_s) = prompt_plane(times)?;
    model.prompt_token_s = prompt_token_s;
    model.prompt_step_s = prompt_step_s;
    model.prompt_step_decode_s = Some(prompt_step_decode_s);
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

/// Seconds per prompt token, per step and per decoding request of the steps with prompt tokens,
/// taken whole: the least-squares plane of their time on their prompt tokens and their decoding
/// requests (whose tokens ride in the prompt's matrix products at a fraction of a decode-only step's
/// cost). A term that would come out negative is not a time: the fit drops the per-request term
/// first (decode tokens then ride free), then the per-step one (the line through the origin).
fn prompt_plane(times: &StepTimes) -> Option<(f64, f64, f64)> {
    let mut sums = PlaneSums::default();
    for (batch, s) in times.prompt.iter().enumerate() {
        sums.add(batch as f64, s);
    }
    if sums.steps < MIN_PROMPT_STEPS as f64 || sums.tt <= 0.0 {
        return None;
    }
    let is_time = |x: f64| x.is_finite() && x >= 0.0;
    if let Some([step, token, decode]) = sums.solve3()
        && token > 0.0
        && is_time(step)
        && is_time(decode)
    {
        return Some((token, step, decode));
    }
    if let Some([step, token]) = sums.solve2()
        && token > 0.0
        && is_time(step)
    {
        return Some((token, step, 0.0));
    }
    Some((sums.ts / sums.tt, 0.0, 0.0))
}

/// The sums the normal equations of `seconds = step + token x T + decode x B` need, over the steps
/// with prompt tokens (T their prompt tokens, B their decoding requests).
#[derive(Debug, Default)]
struct PlaneSums {
    steps: f64,
    t: f64,
    b: f64,
    tt: f64,
    tb: f64,
    bb: f64,
    s: f64,
    ts: f64,
    bs: f64,
}

impl PlaneSums {
    fn add(&mut self, batch: f64, p: &PromptSteps) {
        let n = p.steps as f64;
        self.steps += n;
        self.t += p.tokens;
        self.b += batch * n;
        self.tt += p.tokens_squared;
        self.tb += batch * p.tokens;
        self.bb += batch * batch * n;
        self.s += p.seconds;
        self.ts += p.token_seconds;
        self.bs += batch * p.seconds;
    }

    /// (step, token, decode), or `None` when the steps do not tell the three apart.
    fn solve3(&self) -> Option<[f64; 3]> {
        solve(
            [
                [self.steps, self.t, self.b],
                [self.t, self.tt, self.tb],
                [self.b, self.tb, self.bb],
            ],
            [self.s, self.ts, self.bs],
        )
    }

    /// (step, token) with no per-request term, or `None` when all steps held as many tokens.
    fn solve2(&self) -> Option<[f64; 2]> {
        let det = self.steps * self.tt - self.t * self.t;
        if det <= 1e-9 * self.steps * self.tt {
            return None;
        }
        let token = (self.steps * self.ts - self.t * self.s) / det;
        Some([(self.s - token * self.t) / self.steps, token])
    }
}

/// The solution of the 3x3 system `a x = y` by Gaussian elimination with partial pivoting, or `None`
/// when `a` is (nearly) singular.
fn solve(mut a: [[f64; 3]; 3], mut y: [f64; 3]) -> Option<[f64; 3]> {
    let scale = a.iter().flatten().fold(0.0_f64, |m, v| m.max(v.abs()));
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() <= 1e-12 * scale {
            return None;
        }
        a.swap(col, pivot);
        y.swap(col, pivot);
        let (top, below) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (offset, row) in below.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (cell, &above) in row.iter_mut().zip(pivot_row).skip(col) {
                *cell -= f * above;
            }
            y[col + 1 + offset] -= f * y[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let known: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (y[row] - known) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// How the steps of `times` ran against what `model` says such steps take: above 1 slower. Decode-only
/// steps and steps with prompt tokens apart (the latter whole, or beyond their decode part taken at
/// the decode ratio for a model fitted that way); `None` for a kind with fewer steps than the fit
/// needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    /// Seconds of the decode-only steps over the model's seconds for them.
    pub decode: Option<f64>,
    /// Seconds of the steps with prompt tokens (whole, or beyond their decode part) over the model's
    /// seconds for them.
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
        let own = p.steps as f64 * model.prompt_step_s + p.tokens * model.prompt_token_s;
        steps += p.steps;
        match model.prompt_step_decode_s {
            // Whole steps: their time against the model's, decode tokens included.
            Some(per_decode) => {
                extra += p.seconds;
                modelled += own + (p.steps * batch as u64) as f64 * per_decode;
            }
            // Beyond the decode-only step of their batch, taken at the decode drift.
            None => {
                let base = model.decode_s(batch as f64) * decode.unwrap_or(1.0);
                extra += p.seconds - p.steps as f64 * base;
                modelled += own;
            }
        }
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

    /// `d` holds both a decode and a prompt drift, each within `tolerance` of the one wanted.
    fn assert_drift(d: Drift, decode: f64, prompt: f64, tolerance: f64) {
        let near = |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() < tolerance);
        assert!(near(d.decode, decode), "decode drift: {d:?}");
        assert!(near(d.prompt, prompt), "prompt drift: {d:?}");
    }

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
        // A decode token rides in a prompt step for a tenth of its decode-only step's time.
        let per_decode = 0.0006;
        for (b, p) in [(0, 100), (1, 150), (2, 60), (3, 200), (4, 90), (0, 30)] {
            times.record(
                b,
                p,
                per_step + per_token * p as f64 + per_decode * b as f64,
            );
        }
        let model = fit(&times).expect("a model");
        assert_eq!(model.decode_s_by_batch.len(), 4);
        for &(b, s) in &model.decode_s_by_batch {
            assert!((s - decode(b as usize)).abs() < 1e-12, "{model:?}");
        }
        assert!((model.prompt_token_s - per_token).abs() < 1e-9, "{model:?}");
        assert!((model.prompt_step_s - per_step).abs() < 1e-9, "{model:?}");
        let fitted = model.prompt_step_decode_s.expect("a per-request term");
        assert!((fitted - per_decode).abs() < 1e-9, "{model:?}");
        assert!((model.step_s(3.0, 200.0) - (0.004 + 0.4 + 0.0018)).abs() < 1e-9);
        assert_eq!(model.steps, 26);
        assert_drift(drift(&times, &model), 1.0, 1.0, 1e-9);
    }

    /// The plane matches a least-squares fit done by hand on steps that do not lie on it: three
    /// prompt steps with one request decoding and three with two.
    #[test]
    fn the_prompt_plane_is_the_least_squares_fit() {
        let mut times = StepTimes::with_max_batch(2);
        let steps = [(1, 100, 0.21), (1, 200, 0.40), (1, 50, 0.12)];
        let more = [(2, 120, 0.26), (2, 80, 0.17), (2, 160, 0.34)];
        for (b, p, s) in steps.iter().chain(&more) {
            times.record(*b, *p, *s);
        }
        let (token, step, decode) = prompt_plane(&times).expect("a plane");
        // Residuals of a least-squares fit are orthogonal to every regressor.
        let residuals: Vec<(f64, f64, f64)> = steps
            .iter()
            .chain(&more)
            .map(|&(b, p, s)| {
                let r = s - (step + token * p as f64 + decode * b as f64);
                (r, r * p as f64, r * b as f64)
            })
            .collect();
        let sum = |f: fn(&(f64, f64, f64)) -> f64| residuals.iter().map(f).sum::<f64>();
        for total in [sum(|r| r.0), sum(|r| r.1), sum(|r| r.2)] {
            assert!(total.abs() < 1e-9, "{total} ({token} {step} {decode})");
        }
        assert!(token > 0.0 && step >= 0.0 && decode >= 0.0);
    }

    /// Steps that ran 1.25x (decode) and 1.5x (prompt) slower than a model come out as that drift,
    /// and the model scaled by it says what they took.
    #[test]
    fn drift_against_a_model_is_measured_and_applied() {
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.006), (2.0, 0.010)],
            prompt_token_s: 0.002,
            prompt_step_s: 0.004,
            prompt_step_decode_s: None,
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
        assert_drift(d, 1.25, 1.5, 1e-12);
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
            prompt_step_decode_s: None,
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

    /// A negative intercept is not a time: the line then goes through the origin, and a negative
    /// cost per decoding request is dropped; a larger batch that came out faster is lifted; too few
    /// steps give no model.
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
        assert_eq!(model.prompt_step_decode_s, Some(0.0));
        let through_origin = (0.003 * 14e4 - 0.04 * 600.0) / 14e4;
        assert!((model.prompt_token_s - through_origin).abs() < 1e-12);
        // Decode tokens that seem to make a prompt step faster ride free instead.
        let mut times = StepTimes::with_max_batch(2);
        for (b, p) in [(0, 100), (0, 200), (2, 100), (2, 200)] {
            times.record(b, p, 0.01 + 0.002 * p as f64 - 0.003 * b as f64);
        }
        let model = fit(&{
            let mut t = times.clone();
            for _ in 0..3 {
                t.record(1, 0, 0.008);
            }
            t
        })
        .expect("a model");
        assert_eq!(model.prompt_step_decode_s, Some(0.0), "{model:?}");
        assert!((model.prompt_token_s - 0.002).abs() < 1e-9, "{model:?}");
        assert!((model.prompt_step_s - 0.007).abs() < 1e-9, "{model:?}");
        assert_eq!(fit(&StepTimes::with_max_batch(2)), None);
    }
}
