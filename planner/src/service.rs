//! Service-time model of one CPU instance, derived from a measured curve: its continuous-batching slots,
//! prefill speed, and time per output token as a function of how many requests decode together. Shared by
//! the simulator and the router so both predict alike.

use serde::{Deserialize, Serialize};

use crate::profile::{ConfigProfile, Scaling};

/// How one instance serves requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceCurve {
    /// Requests served at once (max batch x copies of the measured setup), at least 1.
    pub slots: u32,
    /// Prefill tokens/s of one request.
    pub prefill_tokens_per_s: f64,
    /// (requests decoding together on one measured host, p99 TPOT seconds), increasing in the first.
    pub tpot_by_batch: Vec<(f64, f64)>,
    /// Copies of the measured host this instance amounts to (the scaling factor).
    pub copies: f64,
}

impl ServiceCurve {
    /// Derives the model: concurrency at each load point by Little's law on decoding streams
    /// (output tokens/s x TPOT), slots = max batch x scaling factor. TPOT is the typical request's (the
    /// median where the curve has it, else the p99): the simulator draws the tail from arrivals, lengths
    /// and queueing rather than giving every request the p99 pace.
    pub fn from_profile(p: &ConfigProfile, scaling: Scaling) -> ServiceCurve {
        let mut pts: Vec<(f64, f64)> = p
            .load_curve
            .iter()
            .map(|l| {
                let tpot = l.typical_tpot_s();
                ((l.output_tokens_per_s * tpot).max(1.0), tpot)
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 <= b.0);
        let slots = (f64::from(p.max_batch) * scaling.factor)
            .round()
            .clamp(1.0, 1e6) as u32;
        ServiceCurve {
            slots,
            prefill_tokens_per_s: p.prefill_rate(),
            tpot_by_batch: pts,
            copies: scaling.factor,
        }
    }

    /// A model with `slots` servers, no prefill and a constant time per token (for queueing checks).
    pub fn fixed(slots: u32, tpot_s: f64) -> ServiceCurve {
        ServiceCurve {
            slots: slots.max(1),
            prefill_tokens_per_s: f64::INFINITY,
            tpot_by_batch: vec![(1.0, tpot_s)],
            copies: 1.0,
        }
    }

    /// Prompts an instance prefills at a time: one per whole copy of the measured host (at least 1).
    pub fn prefill_lanes(&self) -> u32 {
        self.copies.round().clamp(1.0, 1e6) as u32
    }

    /// Seconds to prefill `prompt_tokens` on one lane: the measured host's speed, adjusted so that the
    /// lanes together prefill as fast as `copies` hosts.
    pub fn prefill_s(&self, prompt_tokens: f64) -> f64 {
        let lanes = f64::from(self.prefill_lanes());
        prompt_tokens / self.prefill_tokens_per_s * lanes / self.copies.max(1e-9)
    }

    /// TPOT when `busy` requests decode on the instance: interpolated on the per-host curve at
    /// `busy / copies`; beyond the last point the host's aggregate token rate stays at its measured peak.
    pub fn tpot_s(&self, busy: f64) -> f64 {
        let b = busy / self.copies;
        let pts = &self.tpot_by_batch;
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

    /// Seconds to decode the output tokens after the first while `busy` requests decode together.
    pub fn decode_s(&self, output_tokens: f64, busy: f64) -> f64 {
        (output_tokens - 1.0).max(0.0) * self.tpot_s(busy)
    }

    /// Service time of a request starting when `busy` slots (itself included) are in use.
    pub fn service_s(&self, prompt_tokens: f64, output_tokens: f64, busy: f64) -> f64 {
        self.prefill_s(prompt_tokens) + (output_tokens - 1.0).max(0.0) * self.tpot_s(busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ScalingRule, tests::smol};

    #[test]
    fn tpot_grows_with_batch_and_caps_throughput() {
        let p = smol();
        let c = ServiceCurve::from_profile(
            &p,
            Scaling {
                rule: ScalingRule::PerCore,
                factor: 2.0,
            },
        );
        assert_eq!(c.slots, 16);
        assert!(c.tpot_s(1.0) <= c.tpot_s(8.0));
        let far = c.tpot_s(100.0);
        let (xl, yl) = *c.tpot_by_batch.last().expect("points");
        assert!((far - yl * 50.0 / xl).abs() < 1e-12);
    }
}
