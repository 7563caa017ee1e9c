//! A sweep file: the engine settings to combine, the workload shapes to run each with, and the
//! optional capacity search.

use serde::{Deserialize, Serialize};
use strata_engine::placement::Placement;

use super::{ProfileError, Result};
use crate::loadgen::{Arrival, Lengths, Sla};

/// One workload shape of a sweep, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedShape {
    /// Its name in tables.
    pub name: String,
    /// Prompt lengths in tokens.
    pub prompt_tokens: Lengths,
    /// Output lengths in tokens.
    pub output_tokens: Lengths,
    /// Arrival process.
    pub arrival: Arrival,
    /// Measured requests; with `duration_s`, the most sent (0 or absent: no limit but the duration).
    #[serde(default)]
    pub requests: usize,
    /// Send for this many seconds instead of a request count.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Unmeasured warm-up requests.
    #[serde(default)]
    pub warmup: usize,
}

/// Capacity search settings: the SLA and how much load each probe sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacitySearch {
    /// p99 TTFT target, milliseconds.
    pub ttft_p99_ms: f64,
    /// p99 TPOT target, milliseconds.
    pub tpot_p99_ms: f64,
    /// The shape (by name) whose lengths the probes use.
    pub shape: String,
    /// Requests per probe.
    #[serde(default = "default_probe_requests")]
    pub probe_requests: usize,
    /// Bisection steps after bracketing.
    #[serde(default = "default_bisections")]
    pub bisections: usize,
    /// Probes (different seeds) that must all meet the SLA for a rate to count as met.
    #[serde(default = "default_confirmations")]
    pub confirmations: usize,
    /// Shortest probe, seconds of arrivals: faster probes send `rate x min_probe_s` requests, so that a
    /// rate above capacity builds a queue long enough to show.
    #[serde(default = "default_min_probe_s")]
    pub min_probe_s: f64,
}

fn default_min_probe_s() -> f64 {
    10.0
}

fn default_confirmations() -> usize {
    2
}

fn default_probe_requests() -> usize {
    24
}

fn default_bisections() -> usize {
    3
}

/// A sweep file (TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// A model file, folder or cached model name.
    pub model: String,
    /// Runtime weight types.
    #[serde(default = "default_weights")]
    pub weights: Vec<String>,
    /// Engine thread counts.
    #[serde(default = "default_threads")]
    pub threads: Vec<usize>,
    /// Most sequences per batch.
    #[serde(default = "default_batch")]
    pub max_batch: Vec<usize>,
    /// NUMA placement policies.
    #[serde(default = "default_numa")]
    pub numa: Vec<String>,
    /// Key/value memory budgets, MiB.
    #[serde(default = "default_kv")]
    pub kv_mem_mib: Vec<usize>,
    /// Workload shapes run against every config.
    #[serde(rename = "shape")]
    pub shapes: Vec<NamedShape>,
    /// Targets for goodput and attainment.
    #[serde(default)]
    pub sla: Sla,
    /// Capacity search, if wanted.
    #[serde(default)]
    pub capacity: Option<CapacitySearch>,
    /// Seed of the load generator.
    #[serde(default)]
    pub seed: u64,
    /// Also score each weight type's output quality (perplexity and top-1 agreement with f32).
    #[serde(default)]
    pub quality: bool,
}

fn default_weights() -> Vec<String> {
    vec!["q8_0".into()]
}
fn default_threads() -> Vec<usize> {
    vec![std::thread::available_parallelism().map_or(1, |n| n.get())]
}
fn default_batch() -> Vec<usize> {
    vec![16]
}
fn default_numa() -> Vec<String> {
    vec!["none".into()]
}
fn default_kv() -> Vec<usize> {
    vec![256]
}

/// One engine configuration of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineSettings {
    /// Runtime weight type.
    pub weights: String,
    /// Engine threads.
    pub threads: usize,
    /// Most sequences per batch.
    pub max_batch: usize,
    /// NUMA placement policy.
    pub numa: String,
    /// Key/value memory, MiB.
    pub kv_mem_mib: usize,
    /// The scheduler's drain hold (`strata serve --drain-hold`; 0: prompts never wait for decodes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drain_hold: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl std::fmt::Display for EngineSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} t{} b{} kv{} numa={}",
            self.weights, self.threads, self.max_batch, self.kv_mem_mib, self.numa
        )?;
        if self.drain_hold > 0.0 {
            write!(f, " hold={}", self.drain_hold)?;
        }
        Ok(())
    }
}

const WEIGHT_TYPES: &[&str] = &["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"];

impl Sweep {
    /// Parses and checks a sweep file.
    ///
    /// # Errors
    /// [`ProfileError::Sweep`] naming the key at fault.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let sweep: Self = toml::from_str(text).map_err(|e| ProfileError::Sweep(e.to_string()))?;
        sweep.check()?;
        Ok(sweep)
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(ProfileError::Sweep(m));
        if let Some(w) = self
            .weights
            .iter()
            .find(|w| !WEIGHT_TYPES.contains(&w.as_str()))
        {
            return bad(format!(
                "weights: unknown type `{w}` (one of {})",
                WEIGHT_TYPES.join(", ")
            ));
        }
        if let Some(e) = self.numa.iter().find_map(|n| n.parse::<Placement>().err()) {
            return bad(format!("numa: {e}"));
        }
        for (key, values) in [
            ("threads", &self.threads),
            ("max_batch", &self.max_batch),
            ("kv_mem_mib", &self.kv_mem_mib),
        ] {
            if values.is_empty() || values.contains(&0) {
                return bad(format!("{key}: give at least one value, each at least 1"));
            }
        }
        if self.shapes.is_empty() {
            return bad("shape: give at least one [[shape]]".into());
        }
        for s in &self.shapes {
            match s.duration_s {
                None if s.requests == 0 => {
                    return bad(format!(
                        "shape `{}`: give requests (at least 1) or duration_s",
                        s.name
                    ));
                }
                Some(d) if !(d.is_finite() && d > 0.0) => {
                    return bad(format!(
                        "shape `{}`: duration_s must be a positive number of seconds",
                        s.name
                    ));
                }
                _ => {}
            }
        }
        if let Some(c) = &self.capacity
            && !self.shapes.iter().any(|s| s.name == c.shape)
        {
            return bad(format!("capacity.shape: no [[shape]] named `{}`", c.shape));
        }
        Ok(())
    }

    /// Every combination of the sweep's settings.
    pub fn configs(&self) -> Vec<EngineSettings> {
        let mut out = Vec::new();
        for weights in &self.weights {
            for &threads in &self.threads {
                for &max_batch in &self.max_batch {
                    for numa in &self.numa {
                        for &kv_mem_mib in &self.kv_mem_mib {
                            out.push(EngineSettings {
                                weights: weights.clone(),
                                threads,
                                max_batch,
                                numa: numa.clone(),
                                kv_mem_mib,
                                drain_hold: 0.0,
                            });
                        }
                    }
                }
            }
        }
        out
    }
}
