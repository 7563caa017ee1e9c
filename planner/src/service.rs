//! Service-time model of one CPU instance, derived from a measured curve and the profile's
//! [`StepModel`] when it has one: its continuous-batching slots, prefill speed, and time per output token
//! as a function of how many requests decode together. Shared by the simulator and the router so both
//! predict alike.

use serde::{Deserialize, Serialize};

use crate::profile::{ConfigProfile, LoadPoint, Scaling};
pub use crate::step::StepModel;
use crate::step::{interpolate, is_zero, with_prompt};

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
    /// (requests decoding together on one measured host, seconds of one engine step that runs only
    /// their tokens), increasing in the first: the TPOT curve with the prompts that shared the measured
    /// steps taken out. Empty: the TPOT curve itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode_step_by_batch: Vec<(f64, f64)>,
    /// Prompt tokens/s inside a step of one measured host: the prefill speed without the decode step
    /// that a light load's first-token time also holds. Absent: `prefill_tokens_per_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_prefill_tokens_per_s: Option<f64>,
    /// Seconds a step that runs prompt tokens takes on one measured host beyond its decode tokens and
    /// its prompt tokens' own time (0 unless the engine's step timings say otherwise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prompt_step_s: f64,
    /// Seconds each decoding request adds to a step that also runs prompt tokens on one measured
    /// host, when the step model took such steps whole ([`StepModel::prompt_step_decode_s`]): such a
    /// step is then its prompt's time, its own and this per decoding request, or the decode-only
    /// step when that is longer. None: the decode-only step plus the prompt's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_step_decode_s: Option<f64>,
    /// Seconds between consecutive engine steps while requests run, added to every step that runs
    /// something (0 unless a calibration measured it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step_gap_s: f64,
    /// Seconds each request served here spends outside the engine, added to its TTFT and E2E (0
    /// unless a calibration measured it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub request_overhead_s: f64,
    /// The engine's drain hold ([`StepModel::drain_hold`]): 0 when prompts never wait for decodes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drain_hold: f64,
}

/// Tokens one engine step runs at most (decode tokens plus prompt chunks): the engine's default.
pub const STEP_TOKENS: u32 = 512;

/// Largest share of a load point's time the prompts are taken to fill when the decode step is derived
/// from its TPOT: beyond it the point says little about decoding.
const MAX_PREFILL_SHARE: f64 = 0.8;

impl ServiceCurve {
    /// Derives the model: concurrency at each load point by Little's law on decoding streams
    /// (output tokens/s x TPOT), slots = max batch x scaling factor. TPOT is the typical request's (the
    /// median where the curve has it, else the p99): the simulator draws the tail from arrivals, lengths
    /// and queueing rather than giving every request the p99 pace. The engine's steps come from the
    /// profile's fitted [`StepModel`] when it has a usable one, else they are derived from the curve.
    pub fn from_profile(p: &ConfigProfile, scaling: Scaling) -> ServiceCurve {
        let pts = by_batch(p, |_, tpot| tpot);
        let slots = (f64::from(p.max_batch) * scaling.factor)
            .round()
            .clamp(1.0, 1e6) as u32;
        let curve = |step_prefill, decode_step_by_batch, prompt_step_s| ServiceCurve {
            slots,
            prefill_tokens_per_s: p.prefill_rate(),
            decode_step_by_batch,
            step_prefill_tokens_per_s: Some(step_prefill),
            prompt_step_s,
            prompt_step_decode_s: None,
            tpot_by_batch: pts.clone(),
            copies: scaling.factor,
            step_gap_s: 0.0,
            request_overhead_s: 0.0,
            drain_hold: 0.0,
        };
        match &p.step_model {
            Some(m) if m.is_usable() => ServiceCurve {
                step_gap_s: m.step_gap_s,
                request_overhead_s: m.request_overhead_s,
                drain_hold: m.drain_hold,
                prompt_step_decode_s: m.prompt_step_decode_s,
                ..curve(
                    1.0 / m.prompt_token_s,
                    m.decode_s_by_batch.clone(),
                    m.prompt_step_s,
                )
            },
            _ => {
                let (prefill, steps) = step_model(p);
                curve(prefill, steps, 0.0)
            }
        }
    }

    /// A model with `slots` servers, no prefill and a constant time per token (for queueing checks).
    pub fn fixed(slots: u32, tpot_s: f64) -> ServiceCurve {
        ServiceCurve {
            slots: slots.max(1),
            prefill_tokens_per_s: f64::INFINITY,
            tpot_by_batch: vec![(1.0, tpot_s)],
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

    /// The same model prefilling `tokens_per_s` prompt tokens a second, inside steps and alone.
    pub fn prefilling(self, tokens_per_s: f64) -> ServiceCurve {
        ServiceCurve {
            prefill_tokens_per_s: tokens_per_s,
            step_prefill_tokens_per_s: Some(tokens_per_s),
            ..self
        }
    }

    /// The same model on an engine whose prompts wait for a short drain of the decodes, as
    /// `strata serve --drain-hold hold` runs them.
    pub fn holding(self, hold: f64) -> ServiceCurve {
        ServiceCurve {
            drain_hold: hold,
            ..self
        }
    }

    /// The same instance running its decode steps (and the gaps between steps) `decode` times and its
    /// prompt tokens `prompt` times as long (above 1: slower); the time requests spend outside the
    /// engine stays as it is.
    pub fn paced(&self, decode: f64, prompt: f64) -> ServiceCurve {
        let scale = |pts: &[(f64, f64)]| pts.iter().map(|&(b, s)| (b, s * decode)).collect();
        ServiceCurve {
            prefill_tokens_per_s: self.prefill_tokens_per_s / prompt,
            tpot_by_batch: scale(&self.tpot_by_batch),
            decode_step_by_batch: scale(&self.decode_step_by_batch),
            step_prefill_tokens_per_s: self.step_prefill_tokens_per_s.map(|r| r / prompt),
            prompt_step_s: self.prompt_step_s * prompt,
            prompt_step_decode_s: self.prompt_step_decode_s.map(|s| s * prompt),
            step_gap_s: self.step_gap_s * decode,
            ..self.clone()
        }
    }

    /// Tokens one step runs at most.
    pub fn step_tokens(&self) -> u32 {
        STEP_TOKENS
    }

    /// Seconds of one engine step of the instance that runs one token of each of `decoding` requests
    /// and `prompt_tokens` prompt tokens: the decode-only step at that batch plus the prompt tokens at
    /// the prefill speed and, when there are some, the prompt step's own time (all scaled by the copies
    /// of the measured host), and the gap that follows a step before the next starts when it runs
    /// anything at all.
    pub fn step_s(&self, decoding: f64, prompt_tokens: f64) -> f64 {
        let gap = if decoding > 0.0 || prompt_tokens > 0.0 {
            self.step_gap_s
        } else {
            0.0
        };
        self.step_work_s(decoding, prompt_tokens) + gap
    }

    /// A request's TTFT and E2E as its client sees them, from the engine's `ttft_s` and `e2e_s`: each
    /// with the time the request spends outside the engine.
    pub fn client_latencies(&self, ttft_s: f64, e2e_s: f64) -> (f64, f64) {
        (
            ttft_s + self.request_overhead_s,
            e2e_s + self.request_overhead_s,
        )
    }

    /// The time inside a step of [`Self::step_s`], without the gap after it.
    pub(crate) fn step_work_s(&self, decoding: f64, prompt_tokens: f64) -> f64 {
        let decode = if decoding > 0.0 {
            let pts = if self.decode_step_by_batch.is_empty() {
                &self.tpot_by_batch
            } else {
                &self.decode_step_by_batch
            };
            interpolate(pts, decoding / self.copies)
        } else {
            0.0
        };
        let prefill = self
            .step_prefill_tokens_per_s
            .unwrap_or(self.prefill_tokens_per_s);
        let copies = self.copies.max(1e-9);
        if prompt_tokens <= 0.0 {
            return decode;
        }
        let prompt = (self.prompt_step_s + prompt_tokens / prefill) / copies;
        let per_decode = self.prompt_step_decode_s.map(|s| s / copies);
        with_prompt(decode, prompt, decoding, per_decode)
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
        interpolate(&self.tpot_by_batch, busy / self.copies)
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

/// `(batch, seconds(point, typical TPOT))` for each load point of `p`, the batch by Little's law on
/// decoding streams (output tokens/s x TPOT, at least 1), in increasing batch with the first point of
/// equal batches kept.
fn by_batch(p: &ConfigProfile, seconds: impl Fn(&LoadPoint, f64) -> f64) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = p
        .load_curve
        .iter()
        .map(|l| {
            let tpot = l.typical_tpot_s();
            ((l.output_tokens_per_s * tpot).max(1.0), seconds(l, tpot))
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 <= b.0);
    pts
}

/// The engine's step on the host `p` was measured on: the prompt tokens/s inside a step and the
/// decode-only step by batch. A prefill speed measured apart is taken as it is. Otherwise the lightest
/// load point's median first-token time holds the prompt's own step, which also runs the other
/// requests' next tokens: the prompt's share is that time less one decode step (at least half of it),
/// and the decode steps in turn leave out the prompts' share at that speed (three rounds settle both).
fn step_model(p: &ConfigProfile) -> (f64, Vec<(f64, f64)>) {
    let mut prefill = p.prefill_rate();
    let light = match (p.prefill_tokens_per_s, p.load_curve.first()) {
        (None, Some(light)) if p.mean_prompt_tokens > 0.0 => light,
        _ => return (prefill, decode_steps(p, prefill)),
    };
    let ttft = light.typical_ttft_s();
    for _ in 0..3 {
        let steps = decode_steps(p, prefill);
        let decode = steps.first().map_or(0.0, |&(_, step)| step);
        let prompt_s = (ttft - decode).max(0.5 * ttft);
        if prompt_s > 0.0 {
            prefill = p.mean_prompt_tokens / prompt_s;
        }
    }
    (prefill, decode_steps(p, prefill))
}

/// The decode-only step at each load point of `p`: its typical TPOT without the share of the time the
/// prompts filled (arrivals x mean prompt / prefill speed, at most [`MAX_PREFILL_SHARE`]), since in
/// the engine a prompt runs in the same steps as the decoding requests and holds them up. Kept rising
/// in the batch (a point cannot decode a larger batch faster than a smaller one).
fn decode_steps(p: &ConfigProfile, prefill_tokens_per_s: f64) -> Vec<(f64, f64)> {
    let mut pts = by_batch(p, |l, tpot| {
        let prefill_share = (l.rate_rps * p.mean_prompt_tokens / prefill_tokens_per_s)
            .clamp(0.0, MAX_PREFILL_SHARE);
        tpot * (1.0 - prefill_share)
    });
    for i in 1..pts.len() {
        pts[i].1 = pts[i].1.max(pts[i - 1].1);
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ScalingRule, tests::smol};

    /// Steps of 6 ms decoding one request and 9 ms four, prompt steps 4 ms and 2 ms a token beyond
    /// their decode-only step.
    fn measured_steps() -> StepModel {
        StepModel {
            decode_s_by_batch: vec![(1.0, 0.006), (4.0, 0.009)],
            prompt_token_s: 0.002,
            prompt_step_s: 0.004,
            prompt_step_decode_s: None,
            steps: 1000,
            step_gap_s: 0.0,
            request_overhead_s: 0.0,
            drain_hold: 0.0,
        }
    }

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

    /// Without a prefill speed measured apart, the prompt's time in a step is the lightest point's
    /// first-token time less one decode step; with one, that speed stands.
    #[test]
    fn the_step_prefill_speed_leaves_out_the_decode_step() {
        let mut p = smol();
        p.prefill_tokens_per_s = None;
        let (prefill, steps) = step_model(&p);
        let ttft = p.load_curve[0].typical_ttft_s();
        assert!(prefill > p.prefill_rate());
        assert!((p.mean_prompt_tokens / prefill - (ttft - steps[0].1)).abs() < 1e-4);
        p.prefill_tokens_per_s = Some(650.0);
        assert_eq!(step_model(&p).0, 650.0);
    }

    /// A usable fitted step model stands for the engine's steps; an unusable one leaves them to the
    /// curve.
    #[test]
    fn a_fitted_step_model_gives_the_steps() {
        let mut p = smol();
        let model = measured_steps();
        p.step_model = Some(model.clone());
        let one_copy = Scaling {
            rule: ScalingRule::PerCore,
            factor: 1.0,
        };
        let c = ServiceCurve::from_profile(&p, one_copy);
        assert!((c.step_s(2.0, 0.0) - 0.007).abs() < 1e-12);
        assert!((c.step_s(2.0, 100.0) - (0.007 + 0.004 + 0.2)).abs() < 1e-12);
        assert!((c.step_s(0.0, 50.0) - (0.004 + 0.1)).abs() < 1e-12);
        assert_eq!(c.step_s(0.0, 0.0), 0.0);
        p.step_model = Some(StepModel {
            prompt_token_s: 0.0,
            ..model
        });
        let derived = ServiceCurve::from_profile(&p, one_copy);
        p.step_model = None;
        assert_eq!(derived, ServiceCurve::from_profile(&p, one_copy));
    }

    /// A model fitted on whole steps runs a step's decode tokens in its prompt's time, at their own
    /// small cost each, and never below the decode-only step; the pace scales them with the prompt.
    #[test]
    fn decode_tokens_ride_in_the_prompt_step_of_a_whole_step_fit() {
        let mut p = smol();
        let model = StepModel {
            prompt_step_decode_s: Some(0.0005),
            ..measured_steps()
        };
        p.step_model = Some(model.clone());
        let one_copy = Scaling {
            rule: ScalingRule::PerCore,
            factor: 1.0,
        };
        let c = ServiceCurve::from_profile(&p, one_copy);
        for (decoding, prompt, want) in [
            (2.0, 100.0, 0.004 + 0.2 + 2.0 * 0.0005),
            (0.0, 50.0, 0.004 + 0.1),
            (4.0, 1.0, 0.009),
            (2.0, 0.0, 0.007),
        ] {
            let step = c.step_s(decoding, prompt);
            assert!((step - want).abs() < 1e-12, "{decoding} {prompt}: {step}");
            assert!((model.step_s(decoding, prompt) - want).abs() < 1e-12);
        }
        let slower = c.paced(1.0, 2.0).step_s(2.0, 100.0);
        assert!(
            (slower - 2.0 * (0.004 + 0.2 + 0.001)).abs() < 1e-12,
            "{slower}"
        );
        let scaled = model.scaled(1.0, 2.0).step_s(2.0, 100.0);
        assert!((scaled - slower).abs() < 1e-12, "{scaled}");
    }

    /// A measured gap between steps lengthens every step that runs something, and nothing else; the
    /// time outside the engine is added to a request's latencies, not to its steps.
    #[test]
    fn time_outside_the_steps_comes_from_the_step_model() {
        let mut p = smol();
        let model = measured_steps();
        let one_copy = Scaling {
            rule: ScalingRule::PerCore,
            factor: 1.0,
        };
        p.step_model = Some(model.clone());
        let inside = ServiceCurve::from_profile(&p, one_copy);
        p.step_model = Some(model.with_time_outside_steps(0.003, 0.25));
        let c = ServiceCurve::from_profile(&p, one_copy);
        for (decoding, prompt) in [(2.0, 0.0), (2.0, 100.0), (0.0, 50.0)] {
            let with_gap = c.step_s(decoding, prompt);
            let without = inside.step_s(decoding, prompt);
            assert!(
                (with_gap - without - 0.003).abs() < 1e-12,
                "{decoding} {prompt}"
            );
        }
        assert_eq!(c.step_s(0.0, 0.0), 0.0, "an empty step has no gap after it");
        assert_eq!(c.client_latencies(1.0, 2.5), (1.25, 2.75));
        assert_eq!(inside.client_latencies(1.0, 2.5), (1.0, 2.5));
        let slower = model.with_time_outside_steps(0.003, 0.25).scaled(2.0, 1.0);
        assert_eq!(
            (slower.step_gap_s, slower.request_overhead_s),
            (0.006, 0.25)
        );
        p.step_model = Some(model.with_time_outside_steps(-0.001, 0.0));
        assert_eq!(
            ServiceCurve::from_profile(&p, one_copy).step_gap_s,
            0.0,
            "a negative gap is no model"
        );
    }

    /// A decode step is the TPOT without the prompts' share of the time; the derived curve rises with
    /// the batch even where a loaded point's share would make it fall, and prompts add their time.
    #[test]
    fn decode_steps_leave_out_the_prompts_time() {
        let mut p = smol();
        p.prefill_tokens_per_s = Some(1000.0);
        p.mean_prompt_tokens = 100.0;
        // The busiest point decodes 4.224 requests at 0.0150 s a token, 15% of it prompts: 0.01275,
        // faster than the point before; it is lifted to that point's step.
        p.load_curve[3].tpot_p99_s = 0.0150;
        p.load_curve[3].output_tokens_per_s = 4.224 / 0.0150;
        let steps = decode_steps(&p, p.prefill_rate());
        // Points one and two both decode under one request: the first stands for batch 1.
        let want = [
            (1.0, 0.009 * 0.975),
            (1.92, 0.015 * 0.9),
            (4.224, 0.015 * 0.9),
        ];
        assert_eq!(steps.len(), want.len());
        for (&(b, s), (wb, ws)) in steps.iter().zip(want) {
            assert!((b - wb).abs() < 1e-9 && (s - ws).abs() < 1e-12, "{steps:?}");
        }
        let c = ServiceCurve::from_profile(
            &p,
            Scaling {
                rule: ScalingRule::PerCore,
                factor: 1.0,
            },
        );
        assert!((c.step_s(0.0, 250.0) - 0.25).abs() < 1e-12);
        assert!(c.step_s(1.0, 0.0) < c.tpot_s(1.0));
        assert!((c.step_s(1.0, 250.0) - c.step_s(1.0, 0.0) - 0.25).abs() < 1e-12);
    }
}
