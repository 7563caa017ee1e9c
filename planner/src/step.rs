//! The engine step model a profile carries when profiling recorded the engine's own step timings, and
//! the lookup on (batch, seconds) curves that it and the service curve share.

use serde::{Deserialize, Serialize};

/// An engine's steps as fitted from its own timings while it served a profiling load: a step that runs
/// one token of each of `d` decoding requests and `p` prompt tokens lasts `decode(d)` when `p` is 0,
/// else `decode(d) + prompt_step_s + p x prompt_token_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepModel {
    /// (requests decoding, mean seconds of a step that ran only their next tokens), in increasing
    /// batch and never falling.
    pub decode_s_by_batch: Vec<(f64, f64)>,
    /// Seconds one prompt token adds to a step.
    pub prompt_token_s: f64,
    /// Seconds a step with prompt tokens takes beyond its decode step and its prompt tokens' time.
    pub prompt_step_s: f64,
    /// Steps the fit drew on.
    pub steps: u64,
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

    /// The same engine running its decode-only steps `decode` times and its prompt tokens' share of a
    /// step `prompt` times as long (above 1: slower).
    pub fn scaled(&self, decode: f64, prompt: f64) -> StepModel {
        StepModel {
            decode_s_by_batch: self
                .decode_s_by_batch
                .iter()
                .map(|&(batch, s)| (batch, s * decode))
                .collect(),
            prompt_token_s: self.prompt_token_s * prompt,
            prompt_step_s: self.prompt_step_s * prompt,
            steps: self.steps,
        }
    }

    /// Whether it can stand for the engine: some decode steps, and prompt tokens that take time.
    pub fn is_usable(&self) -> bool {
        !self.decode_s_by_batch.is_empty()
            && self.prompt_token_s.is_finite()
            && self.prompt_token_s > 0.0
            && self.prompt_step_s.is_finite()
            && self.prompt_step_s >= 0.0
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
