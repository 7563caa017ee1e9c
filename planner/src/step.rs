//! The engine step model a profile carries when profiling recorded the engine's own step timings (with
//! the time a calibration measured outside the steps, when one did), and the lookup on
//! (batch, seconds) curves that it and the service curve share.

use serde::{Deserialize, Serialize};

/// An engine's steps as fitted from its own timings while it served a profiling load: a step that runs
/// one token of each of `d` decoding requests and `p` prompt tokens lasts `decode(d)` when `p` is 0,
/// else, measured whole ([`StepModel::prompt_step_decode_s`] set), the larger of `decode(d)` and
/// `prompt_step_s + p x prompt_token_s + d x prompt_step_decode_s` (the decode tokens ride in the
/// prompt's matrix products), or as older fits read it, `decode(d) + prompt_step_s + p x
/// prompt_token_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepModel {
    /// (requests decoding, mean seconds of a step that ran only their next tokens), in increasing
    /// batch and never falling.
    pub decode_s_by_batch: Vec<(f64, f64)>,
    /// Seconds one prompt token adds to a step.
    pub prompt_token_s: f64,
    /// Seconds a step with prompt tokens takes beyond its prompt tokens' time and its decode tokens'
    /// (their decode-only step, or `prompt_step_decode_s` each when that is set).
    pub prompt_step_s: f64,
    /// Seconds each decoding request adds to a step that also runs prompt tokens, when the fit took
    /// such steps whole; none in models fitted as a decode-only step plus the prompt's part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_step_decode_s: Option<f64>,
    /// Steps the fit drew on.
    pub steps: u64,
    /// Seconds between consecutive steps while requests run (the engine's loop, admission, event
    /// delivery, its thread waiting for a core), added to every step that runs something; 0 unless
    /// measured.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step_gap_s: f64,
    /// Seconds each request spends outside the engine (gateway, HTTP, tokenization, waiting before a
    /// step takes it), added to its TTFT and E2E; 0 unless measured.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub request_overhead_s: f64,
    /// The engine's drain hold (`strata serve --drain-hold`): prompts wait for the decoding requests
    /// to finish while their summed wait is at most this many times the summed stall their prefill
    /// would cost those requests; 0 (never) unless the engine ran with one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drain_hold: f64,
}

/// Whether a time is exactly 0 (left out of JSON, where it is the default).
pub(crate) fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl StepModel {
    /// Seconds of a step that runs only one token of each of `decoding` requests.
    pub fn decode_s(&self, decoding: f64) -> f64 {
        if decoding > 0.0 {
            interpolate(&self.decode_s_by_batch, decoding)
        } else {
            0.0
        }
    }

    /// Seconds of a step that runs one token of each of `decoding` requests and `prompt_tokens`
    /// prompt tokens.
    pub fn step_s(&self, decoding: f64, prompt_tokens: f64) -> f64 {
        let decode = self.decode_s(decoding);
        if prompt_tokens <= 0.0 {
            return decode;
        }
        let prompt = self.prompt_step_s + prompt_tokens * self.prompt_token_s;
        with_prompt(decode, prompt, decoding, self.prompt_step_decode_s)
    }

    /// The same engine running its decode-only steps (and the gaps between steps) `decode` times and
    /// its steps with prompt tokens, beyond any decode-only step they hold, `prompt` times as long
    /// (above 1: slower); the time requests spend outside the engine stays as it is.
    pub fn scaled(&self, decode: f64, prompt: f64) -> StepModel {
        StepModel {
            decode_s_by_batch: self
                .decode_s_by_batch
                .iter()
                .map(|&(batch, s)| (batch, s * decode))
                .collect(),
            prompt_token_s: self.prompt_token_s * prompt,
            prompt_step_s: self.prompt_step_s * prompt,
            prompt_step_decode_s: self.prompt_step_decode_s.map(|s| s * prompt),
            steps: self.steps,
            step_gap_s: self.step_gap_s * decode,
            request_overhead_s: self.request_overhead_s,
            drain_hold: self.drain_hold,
        }
    }

    /// The same model with `step_gap_s` between steps and `request_overhead_s` outside the engine
    /// per request in place of its own.
    pub fn with_time_outside_steps(&self, step_gap_s: f64, request_overhead_s: f64) -> StepModel {
        StepModel {
            step_gap_s,
            request_overhead_s,
            ..self.clone()
        }
    }

    /// Whether it can stand for the engine: some decode steps, prompt tokens that take time, and no
    /// negative or endless time outside the steps.
    pub fn is_usable(&self) -> bool {
        let time = |s: f64| s.is_finite() && s >= 0.0;
        !self.decode_s_by_batch.is_empty()
            && self.prompt_token_s.is_finite()
            && self.prompt_token_s > 0.0
            && time(self.prompt_step_s)
            && self.prompt_step_decode_s.is_none_or(time)
            && time(self.step_gap_s)
            && time(self.request_overhead_s)
            && time(self.drain_hold)
    }
}

/// Seconds of a step that runs prompt tokens taking `prompt` seconds of their own beside `decoding`
/// requests whose decode-only step takes `decode_step`: with `per_decode` (a whole-step fit), the
/// prompt's time and `per_decode` for each decoding request, never less than the decode-only step;
/// without, the two added.
pub(crate) fn with_prompt(
    decode_step: f64,
    prompt: f64,
    decoding: f64,
    per_decode: Option<f64>,
) -> f64 {
    match per_decode {
        Some(per_decode) => decode_step.max(prompt + decoding * per_decode),
        None => decode_step + prompt,
    }
}

/// The value at batch `b` of a curve of (batch, seconds) points: flat below the first, linear between
/// points, and beyond the last the aggregate rate stays at its peak (seconds grow with the batch).
pub(crate) fn interpolate(pts: &[(f64, f64)], b: f64) -> f64 {
    let Some(&(b0, t0)) = pts.first() else {
        return 0.0;
    };
    if b <= b0 {
        return t0;
    }
    match pts.iter().position(|&(x, _)| x >= b) {
        Some(j) => {
            let ((xa, ya), (xb, yb)) = (pts[j - 1], pts[j]);
            ya + (yb - ya) * (b - xa) / (xb - xa)
        }
        None => {
            let &(xl, yl) = pts.last().unwrap_or(&(b0, t0));
            yl * b / xl
        }
    }
}
