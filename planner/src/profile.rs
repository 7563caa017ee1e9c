//! Measured configs: a config's latency-vs-load curve on the host it was measured on, how that curve
//! scales to another instance type (and which rule was used), and whether a figure is measured or estimated.

use serde::{Deserialize, Serialize};

use crate::catalog::InstanceType;
use crate::error::{PlannerError, Result, invalid, non_negative, positive};
use crate::step::StepModel;

/// Where a figure comes from. Estimates are always labelled and never silently mixed with measurements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Provenance {
    /// Measured by a profiling run.
    #[default]
    Measured,
    /// Derived by a model (e.g. the roofline in `estimate`); `basis` says from what.
    Estimated {
        /// How the estimate was made.
        basis: String,
    },
    /// Measured by a profiling run on a file with random weights at a real model's shapes
    /// (`strata model synth`): its speed is real, its outputs are not.
    SyntheticWeights,
}

impl Provenance {
    /// What every figure with this provenance is labelled with where it shows.
    pub const SYNTHETIC_LABEL: &'static str = "synthetic weights: speed measured, quality not";

    /// True for [`Provenance::Estimated`].
    pub fn is_estimate(&self) -> bool {
        matches!(self, Provenance::Estimated { .. })
    }

    /// True for [`Provenance::SyntheticWeights`].
    pub fn is_synthetic(&self) -> bool {
        matches!(self, Provenance::SyntheticWeights)
    }

    /// The label a figure of this provenance carries.
    pub fn label(&self) -> String {
        match self {
            Provenance::Measured => "measured".to_string(),
            Provenance::Estimated { basis } => format!("ESTIMATE ({basis})"),
            Provenance::SyntheticWeights => Self::SYNTHETIC_LABEL.to_string(),
        }
    }
}

/// The host a profile was measured on (its hardware fingerprint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredOn {
    /// Host name as recorded by the controller.
    pub host: String,
    /// Catalog instance type of that host, when it is one (enables the measured-on-type rule).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// vCPUs of the host.
    pub vcpus: u32,
    /// Sustained memory bandwidth, GB/s (STREAM-style).
    pub mem_bandwidth_gbs: f64,
    /// Int8 dot-product throughput, GOPS.
    pub int8_gops: f64,
}

/// One measured operating point: at `rate_rps` offered load, these p99s and throughputs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadPoint {
    /// Offered load, requests/s.
    pub rate_rps: f64,
    /// p99 time to first token, seconds.
    pub ttft_p99_s: f64,
    /// p99 time per output token, seconds.
    pub tpot_p99_s: f64,
    /// p99 end-to-end latency, seconds.
    pub e2e_p99_s: f64,
    /// Output tokens/s achieved.
    pub output_tokens_per_s: f64,
    /// Prompt + output tokens/s achieved.
    pub total_tokens_per_s: f64,
    /// Median time to first token, seconds, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p50_s: Option<f64>,
    /// Median time per output token, seconds, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p50_s: Option<f64>,
}

impl LoadPoint {
    /// The time per output token of a typical request: the median when measured, else the p99.
    pub fn typical_tpot_s(&self) -> f64 {
        self.tpot_p50_s.unwrap_or(self.tpot_p99_s)
    }

    /// The time to first token of a typical request: the median when measured, else the p99.
    pub fn typical_ttft_s(&self) -> f64 {
        self.ttft_p50_s.unwrap_or(self.ttft_p99_s)
    }
}

fn default_prompt_token_weight() -> f64 {
    0.2
}

/// A serving config (model, weights, threads, batch) and its measured latency-vs-load curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigProfile {
    /// Stable id of the config.
    pub id: String,
    /// Model name.
    pub model: String,
    /// Weight format, e.g. "q8_0".
    pub weights: String,
    /// Engine threads used by the run.
    pub threads: u32,
    /// Maximum continuous batch.
    pub max_batch: u32,
    /// The host the curve was measured on.
    pub measured_on: MeasuredOn,
    /// Load points in increasing `rate_rps`.
    pub load_curve: Vec<LoadPoint>,
    /// Mean prompt tokens of the profiling load.
    pub mean_prompt_tokens: f64,
    /// Mean output tokens of the profiling load.
    pub mean_output_tokens: f64,
    /// Cost of one prompt token relative to one output token, for comparing requests of other lengths
    /// (default 0.2: prefill ran about 5x faster per token than decode in the anchor measurements).
    #[serde(default = "default_prompt_token_weight")]
    pub prompt_token_weight: f64,
    /// Prefill (prompt) tokens/s of one request on one measured host, when measured separately; else
    /// derived from the lightest load point as `mean_prompt_tokens / ttft_p99_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens_per_s: Option<f64>,
    /// The engine's steps as fitted from its own timings on the measured host, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_model: Option<StepModel>,
    /// Measured or estimated.
    #[serde(default)]
    pub provenance: Provenance,
}

/// How a per-host measurement is carried over to an instance type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScalingRule {
    /// Capacity scales with vCPUs: the instance runs `vcpus / threads` copies of the measured setup.
    PerCore,
    /// Capacity scales with memory bandwidth (instance GB/s over measured GB/s); decode is bandwidth-bound.
    MemoryBandwidth,
    /// Measured on this very type: the curve is used as is.
    MeasuredOnType,
}

impl ScalingRule {
    /// Short name shown in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            ScalingRule::PerCore => "per-core",
            ScalingRule::MemoryBandwidth => "mem-bw",
            ScalingRule::MeasuredOnType => "on-type",
        }
    }
}

/// The rule that carries a profile to an instance type, and the capacity factor it gives.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// Rule used.
    pub rule: ScalingRule,
    /// Instance capacity over measured capacity (request rates and token rates multiply by it; latencies
    /// at a given per-copy load do not change).
    pub factor: f64,
}

/// Picks the scaling for `profile` on `inst`: measured-on-type when the profile names that type, else
/// memory bandwidth when the catalog gives the instance's bandwidth, else per-core. `forced` restricts to
/// one rule; `None` is returned when that rule cannot apply or the instance is a GPU type.
pub fn scaling_for(
    profile: &ConfigProfile,
    inst: &InstanceType,
    forced: Option<ScalingRule>,
) -> Option<Scaling> {
    profile
        .measured_on
        .scaling_to(profile.threads, inst, forced)
}

impl MeasuredOn {
    /// The scaling of a setup of `threads` engine threads measured on this host to `inst`, by the
    /// rules of [`scaling_for`].
    pub fn scaling_to(
        &self,
        threads: u32,
        inst: &InstanceType,
        forced: Option<ScalingRule>,
    ) -> Option<Scaling> {
        if inst.is_gpu() {
            return None;
        }
        let on_type = self.instance_type.as_deref() == Some(inst.name.as_str());
        let measured = Scaling {
            rule: ScalingRule::MeasuredOnType,
            factor: 1.0,
        };
        let bandwidth = inst
            .mem_bandwidth_gbs
            .filter(|_| self.mem_bandwidth_gbs > 0.0)
            .map(|bw| Scaling {
                rule: ScalingRule::MemoryBandwidth,
                factor: bw / self.mem_bandwidth_gbs,
            });
        let cores_used = threads.min(self.vcpus).max(1);
        let per_core = Scaling {
            rule: ScalingRule::PerCore,
            factor: f64::from(inst.vcpus) / f64::from(cores_used),
        };
        let pick = match forced {
            None if on_type => Some(measured),
            None => bandwidth.or(Some(per_core)),
            Some(ScalingRule::MeasuredOnType) => on_type.then_some(measured),
            Some(ScalingRule::MemoryBandwidth) => bandwidth,
            Some(ScalingRule::PerCore) => Some(per_core),
        };
        pick.filter(|s| s.factor.is_finite() && s.factor > 0.0)
    }
}

/// p99 latencies at one load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// p99 time to first token, seconds.
    pub ttft_p99_s: f64,
    /// p99 end-to-end, seconds.
    pub e2e_p99_s: f64,
}

/// A request shape to predict p99 latency for: p99 prompt and p99 output tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// p99 prompt tokens.
    pub prompt_tokens_p99: f64,
    /// p99 output tokens.
    pub output_tokens_p99: f64,
}

impl ConfigProfile {
    /// Parses a JSON array of profiles (what the controller exports from stored runs).
    ///
    /// # Errors
    /// [`PlannerError::Json`] with line/column; [`PlannerError::InvalidField`] naming config and key.
    pub fn list_from_json_str(s: &str) -> Result<Vec<ConfigProfile>> {
        let v: Vec<ConfigProfile> = serde_json::from_str(s).map_err(|e| PlannerError::Json {
            what: "profiles",
            message: e.to_string(),
        })?;
        v.iter().try_for_each(ConfigProfile::validate)?;
        Ok(v)
    }

    /// Parses a TOML file of `[[profile]]` tables.
    ///
    /// # Errors
    /// [`PlannerError::Toml`] with line and key; [`PlannerError::InvalidField`] naming config and key.
    pub fn list_from_toml_str(s: &str) -> Result<Vec<ConfigProfile>> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            profile: Vec<ConfigProfile>,
        }
        let f: File = toml::from_str(s).map_err(|e| PlannerError::Toml {
            what: "profiles",
            message: e.to_string(),
        })?;
        f.profile.iter().try_for_each(ConfigProfile::validate)?;
        Ok(f.profile)
    }

    /// Checks the fields the planner relies on: a non-empty curve with increasing rates, positive sizes.
    ///
    /// # Errors
    /// [`PlannerError::InvalidField`] naming the config and key.
    pub fn validate(&self) -> Result<()> {
        const W: &str = "profiles";
        let e = self.id.as_str();
        if self.threads == 0 {
            return Err(invalid(W, e, "threads", "must be > 0".into()));
        }
        if self.max_batch == 0 {
            return Err(invalid(W, e, "max_batch", "must be > 0".into()));
        }
        if self.measured_on.vcpus == 0 {
            return Err(invalid(W, e, "measured_on.vcpus", "must be > 0".into()));
        }
        non_negative(
            W,
            e,
            "measured_on.mem_bandwidth_gbs",
            self.measured_on.mem_bandwidth_gbs,
        )?;
        non_negative(W, e, "measured_on.int8_gops", self.measured_on.int8_gops)?;
        positive(W, e, "mean_prompt_tokens", self.mean_prompt_tokens)?;
        positive(W, e, "mean_output_tokens", self.mean_output_tokens)?;
        non_negative(W, e, "prompt_token_weight", self.prompt_token_weight)?;
        if let Some(r) = self.prefill_tokens_per_s {
            positive(W, e, "prefill_tokens_per_s", r)?;
        }
        if self.load_curve.is_empty() {
            return Err(invalid(
                W,
                e,
                "load_curve",
                "needs at least one point".into(),
            ));
        }
        let mut last = 0.0;
        for (i, p) in self.load_curve.iter().enumerate() {
            positive(W, e, "load_curve.rate_rps", p.rate_rps)?;
            if p.rate_rps <= last {
                let msg = format!(
                    "point {i}: rates must increase, {} after {last}",
                    p.rate_rps
                );
                return Err(invalid(W, e, "load_curve.rate_rps", msg));
            }
            last = p.rate_rps;
            positive(W, e, "load_curve.ttft_p99_s", p.ttft_p99_s)?;
            positive(W, e, "load_curve.tpot_p99_s", p.tpot_p99_s)?;
            positive(W, e, "load_curve.e2e_p99_s", p.e2e_p99_s)?;
            non_negative(
                W,
                e,
                "load_curve.output_tokens_per_s",
                p.output_tokens_per_s,
            )?;
            non_negative(W, e, "load_curve.total_tokens_per_s", p.total_tokens_per_s)?;
        }
        Ok(())
    }

    /// Work of one request of `prompt` / `output` tokens in units of the profiling load's mean request.
    pub fn request_weight(&self, prompt_tokens: f64, output_tokens: f64) -> f64 {
        let w = self.prompt_token_weight;
        (w * prompt_tokens + output_tokens)
            / (w * self.mean_prompt_tokens + self.mean_output_tokens)
    }

    /// Prefill tokens/s of one request (see [`ConfigProfile::prefill_tokens_per_s`]); derived from the
    /// lightest load's typical TTFT when not given.
    pub fn prefill_rate(&self) -> f64 {
        let derived = || {
            self.load_curve
                .first()
                .map_or(1.0, |p| self.mean_prompt_tokens / p.typical_ttft_s())
        };
        self.prefill_tokens_per_s.unwrap_or_else(derived)
    }

    /// Highest measured rate (mean-request units) for one measured host.
    pub fn max_rate(&self) -> f64 {
        self.load_curve.last().map_or(0.0, |p| p.rate_rps)
    }

    /// p99 TTFT and TPOT at `rate` (mean-request units per measured host), linear between points and
    /// flat below the first; `None` above the highest measured rate (no extrapolation).
    pub fn curve_at(&self, rate: f64) -> Option<(f64, f64)> {
        let c = &self.load_curve;
        let first = c.first()?;
        if rate <= first.rate_rps {
            return Some((first.ttft_p99_s, first.tpot_p99_s));
        }
        let j = c.iter().position(|p| p.rate_rps >= rate)?;
        let (a, b) = (c[j - 1], c[j]);
        let t = (rate - a.rate_rps) / (b.rate_rps - a.rate_rps);
        Some((
            lerp(a.ttft_p99_s, b.ttft_p99_s, t),
            lerp(a.tpot_p99_s, b.tpot_p99_s, t),
        ))
    }

    /// Output tokens/s at `rate` per measured host, interpolated like [`ConfigProfile::curve_at`].
    pub fn output_tps_at(&self, rate: f64) -> Option<(f64, f64)> {
        let c = &self.load_curve;
        let first = c.first()?;
        if rate <= first.rate_rps {
            let s = rate / first.rate_rps;
            return Some((first.output_tokens_per_s * s, first.total_tokens_per_s * s));
        }
        let j = c.iter().position(|p| p.rate_rps >= rate)?;
        let (a, b) = (c[j - 1], c[j]);
        let t = (rate - a.rate_rps) / (b.rate_rps - a.rate_rps);
        Some((
            lerp(a.output_tokens_per_s, b.output_tokens_per_s, t),
            lerp(a.total_tokens_per_s, b.total_tokens_per_s, t),
        ))
    }

    /// Predicted p99s for requests of `shape` at `rate`: the curve's TTFT plus the extra prefill of a
    /// p99 prompt longer than the profiling mean; E2E = TTFT + TPOT x (p99 output tokens - 1). `None`
    /// beyond the curve.
    pub fn latency_at(&self, rate: f64, shape: Shape) -> Option<Latency> {
        let (ttft, tpot) = self.curve_at(rate)?;
        Some(self.shape_latency(ttft, tpot, shape))
    }

    fn shape_latency(&self, ttft: f64, tpot: f64, shape: Shape) -> Latency {
        let extra_prefill =
            (shape.prompt_tokens_p99 - self.mean_prompt_tokens).max(0.0) / self.prefill_rate();
        let ttft = ttft + extra_prefill;
        Latency {
            ttft_p99_s: ttft,
            e2e_p99_s: ttft + tpot * (shape.output_tokens_p99 - 1.0).max(0.0),
        }
    }

    /// Highest rate (mean-request units per measured host) at which `shape` meets `ttft_sla`/`e2e_sla`
    /// (seconds, `None` = no bound); 0 when even the lightest measured load misses.
    pub fn max_rate_meeting(
        &self,
        shape: Shape,
        ttft_sla: Option<f64>,
        e2e_sla: Option<f64>,
    ) -> f64 {
        let ok = |l: Latency| {
            ttft_sla.is_none_or(|s| l.ttft_p99_s <= s) && e2e_sla.is_none_or(|s| l.e2e_p99_s <= s)
        };
        let pts: Vec<Latency> = self
            .load_curve
            .iter()
            .map(|p| self.shape_latency(p.ttft_p99_s, p.tpot_p99_s, shape))
            .collect();
        let Some(bad) = pts.iter().position(|&l| !ok(l)) else {
            return self.max_rate();
        };
        if bad == 0 {
            return 0.0;
        }
        let (a, b) = (pts[bad - 1], pts[bad]);
        let mut t: f64 = 1.0;
        if let Some(s) = ttft_sla {
            t = t.min(crossing(a.ttft_p99_s, b.ttft_p99_s, s));
        }
        if let Some(s) = e2e_sla {
            t = t.min(crossing(a.e2e_p99_s, b.e2e_p99_s, s));
        }
        let (ra, rb) = (
            self.load_curve[bad - 1].rate_rps,
            self.load_curve[bad].rate_rps,
        );
        lerp(ra, rb, t)
    }
}

fn lerp(a: f64, b: f64, t: f64) -> f64 {
    a + (b - a) * t
}

/// The fraction t in [0, 1] where a line from `a` to `b` reaches `limit` (1 when it never does).
fn crossing(a: f64, b: f64, limit: f64) -> f64 {
    if b <= limit {
        1.0
    } else if a >= limit {
        0.0
    } else {
        (limit - a) / (b - a)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::Catalog;

    /// A small profile shaped like SmolLM2-135M q8_0 on the 2-vCPU measuring host.
    pub(crate) fn smol() -> ConfigProfile {
        let pt = |rate_rps: f64, ttft: f64, tpot: f64| LoadPoint {
            rate_rps,
            ttft_p99_s: ttft,
            tpot_p99_s: tpot,
            e2e_p99_s: ttft + tpot * 127.0,
            output_tokens_per_s: rate_rps * 128.0,
            total_tokens_per_s: rate_rps * 384.0,
            ttft_p50_s: None,
            tpot_p50_s: None,
        };
        ConfigProfile {
            id: "smol-q8".into(),
            model: "SmolLM2-135M-Instruct".into(),
            weights: "q8_0".into(),
            threads: 2,
            max_batch: 8,
            measured_on: MeasuredOn {
                host: "bench-1".into(),
                instance_type: None,
                vcpus: 2,
                mem_bandwidth_gbs: 29.0,
                int8_gops: 400.0,
            },
            load_curve: vec![
                pt(0.25, 0.3, 0.009),
                pt(0.5, 0.4, 0.011),
                pt(1.0, 0.8, 0.015),
                pt(1.5, 2.0, 0.022),
            ],
            mean_prompt_tokens: 256.0,
            mean_output_tokens: 128.0,
            prompt_token_weight: 0.2,
            prefill_tokens_per_s: Some(650.0),
            step_model: None,
            provenance: Provenance::Measured,
        }
    }

    #[test]
    fn interpolates_and_refuses_to_extrapolate() {
        let p = smol();
        assert_eq!(p.curve_at(0.1), Some((0.3, 0.009)));
        let (ttft, _) = p.curve_at(0.75).expect("inside");
        assert!((ttft - 0.6).abs() < 1e-12);
        assert_eq!(p.curve_at(1.6), None);
    }

    #[test]
    fn max_rate_meeting_finds_the_crossing() {
        let p = smol();
        let s = Shape {
            prompt_tokens_p99: 256.0,
            output_tokens_p99: 1.0,
        };
        assert!((p.max_rate_meeting(s, Some(1.4), None) - 1.25).abs() < 1e-12);
        assert_eq!(p.max_rate_meeting(s, Some(0.1), None), 0.0);
        assert_eq!(p.max_rate_meeting(s, None, None), 1.5);
    }

    #[test]
    fn scaling_rules() {
        let cat = Catalog::builtin();
        let mut p = smol();
        let c4 = cat.find("c4-standard-8").expect("c4");
        assert_eq!(
            scaling_for(&p, c4, None),
            Some(Scaling {
                rule: ScalingRule::PerCore,
                factor: 4.0
            })
        );
        assert_eq!(
            scaling_for(&p, c4, Some(ScalingRule::MemoryBandwidth)),
            None
        );
        assert_eq!(
            scaling_for(&p, cat.find("g2-standard-8").expect("g2"), None),
            None
        );
        p.measured_on.instance_type = Some("c4-standard-8".into());
        assert_eq!(
            scaling_for(&p, c4, None).map(|s| s.rule),
            Some(ScalingRule::MeasuredOnType)
        );
        let mut with_bw = c4.clone();
        with_bw.name = "other".into();
        with_bw.mem_bandwidth_gbs = Some(58.0);
        assert_eq!(
            scaling_for(&p, &with_bw, None),
            Some(Scaling {
                rule: ScalingRule::MemoryBandwidth,
                factor: 2.0
            })
        );
    }

    #[test]
    fn bad_curves_name_the_key() {
        let mut p = smol();
        p.load_curve.swap(0, 1);
        let err = p.validate().expect_err("unsorted").to_string();
        assert!(
            err.contains("smol-q8") && err.contains("load_curve.rate_rps"),
            "{err}"
        );
        let err = ConfigProfile::list_from_json_str("[{\"id\": 1}]")
            .expect_err("bad json")
            .to_string();
        assert!(
            err.starts_with("profiles:") && err.contains("line"),
            "{err}"
        );
    }
}
