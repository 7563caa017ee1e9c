//! What a simulation reports, per run and per class: plain data that plans and pilot verdicts carry.

use serde::{Deserialize, Serialize};

use crate::workload::Sla;

/// Simulated results for one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSim {
    /// Class name.
    pub class: String,
    /// Arrivals.
    pub requests: u64,
    /// Share rejected.
    pub rejected_share: f64,
    /// Share sent to GPU.
    pub gpu_share: f64,
    /// p99 TTFT of served requests, seconds.
    pub ttft_p99_s: f64,
    /// p99 E2E of served requests, seconds.
    pub e2e_p99_s: f64,
    /// The SLA.
    pub sla: Sla,
    /// Share of arrivals served within every SLA bound (goodput share).
    pub attainment: f64,
    /// True when the p99s meet the SLA.
    pub meets_sla: bool,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// Seed used.
    pub seed: u64,
    /// Days simulated.
    pub days: f64,
    /// Arrivals.
    pub requests: u64,
    /// Share of arrivals sent to GPU.
    pub gpu_share: f64,
    /// Share rejected.
    pub rejected_share: f64,
    /// CPU cost over the run, $.
    pub cpu_cost: f64,
    /// GPU cost over the run, $.
    pub gpu_cost: f64,
    /// (CPU + GPU) / days, $.
    pub cost_per_day: f64,
    /// p99 TTFT of every served request, all classes together, seconds.
    #[serde(default)]
    pub ttft_p99_s: f64,
    /// p99 E2E of every served request, all classes together, seconds.
    #[serde(default)]
    pub e2e_p99_s: f64,
    /// Median TTFT of the requests served on CPU, seconds (0 for none): the typical request's, which
    /// a calibration sets beside what its clients saw.
    #[serde(default)]
    pub cpu_ttft_p50_s: f64,
    /// Per class.
    pub classes: Vec<ClassSim>,
}

impl SimReport {
    /// A report of no requests (nothing was simulated).
    pub fn empty(seed: u64) -> SimReport {
        SimReport {
            seed,
            days: 0.0,
            requests: 0,
            gpu_share: 0.0,
            rejected_share: 0.0,
            cpu_cost: 0.0,
            gpu_cost: 0.0,
            cost_per_day: 0.0,
            ttft_p99_s: 0.0,
            e2e_p99_s: 0.0,
            cpu_ttft_p50_s: 0.0,
            classes: Vec::new(),
        }
    }
}
