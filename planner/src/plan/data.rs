//! A capacity plan as data: the chosen config, its 24 hours with their per-class rows, the day totals,
//! the candidates and what-ifs. Imports nothing that plans or simulates.

use serde::{Deserialize, Serialize};

use crate::catalog::PriceModel;
use crate::profile::{Provenance, Scaling};
use crate::sim::report::SimReport;
use crate::workload::{GpuFallback, Sla};

/// The chosen config and instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenConfig {
    /// Config id.
    pub config: String,
    /// Model.
    pub model: String,
    /// Weight format.
    pub weights: String,
    /// Measured or estimated.
    pub provenance: Provenance,
    /// Instance type.
    pub instance_type: String,
    /// Its region.
    pub region: String,
    /// How the measured curve was carried to the instance type.
    pub scaling: Scaling,
    /// TCO of one instance-hour, $.
    pub hourly_cost: f64,
}

/// One (config, instance type) priced at the highest load that meets every CPU-feasible class's SLA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateCost {
    /// Config id.
    pub config: String,
    /// Instance type.
    pub instance_type: String,
    /// Region.
    pub region: String,
    /// Measured or estimated.
    pub provenance: Provenance,
    /// Scaling rule and factor.
    pub scaling: Scaling,
    /// TCO $/hour.
    pub hourly_cost: f64,
    /// Requests/s (of the config's mean request) one instance carries within SLA, after headroom.
    pub sla_rps: f64,
    /// Output tokens/s at that load.
    pub output_tokens_per_s: f64,
    /// $ per 1M output tokens at that load.
    pub dollars_per_million_output: Option<f64>,
    /// $ per 1M prompt + output tokens at that load.
    pub dollars_per_million_total: Option<f64>,
    /// Classes this config cannot serve within SLA at any measured load.
    pub infeasible_classes: Vec<String>,
    /// Cheapest day on this candidate before the budget, $.
    pub day_cost: f64,
}

/// One class in one hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassHour {
    /// Class name.
    pub class: String,
    /// Arrivals, requests/s.
    pub rps: f64,
    /// Share of the class's requests sent to the GPU fallback.
    pub gpu_share: f64,
    /// Share of the class's requests rejected (only when the budget forces it).
    pub shed_share: f64,
    /// Predicted p99 TTFT, seconds (the worse of the routes used).
    pub ttft_p99_s: f64,
    /// Predicted p99 E2E, seconds.
    pub e2e_p99_s: f64,
    /// The class's SLA.
    pub sla: Sla,
    /// True when the predictions meet the SLA and nothing is shed.
    pub meets_sla: bool,
}

/// How a class misses its SLA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Degradation {
    /// Class name.
    pub class: String,
    /// "ttft_p99", "e2e_p99" or "shed".
    pub metric: String,
    /// Predicted value (seconds, or share of requests for "shed").
    pub predicted: f64,
    /// The SLA bound (0 for "shed").
    pub target: f64,
}

/// One hour of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanHour {
    /// Hour of day, 0..24.
    pub hour: u32,
    /// Total arrivals, requests/s.
    pub rps: f64,
    /// CPU instances serving this hour.
    pub cpu_instances: u32,
    /// Extra instances started during this hour ahead of the next hour's ramp (billed for the lag).
    pub warm_instances: u32,
    /// Instance type of the pool.
    pub instance_type: String,
    /// Config of the pool.
    pub config: String,
    /// GPU instances (hourly fallback) needed; 0 for per-token fallback.
    pub gpu_instances: u32,
    /// CPU pool load over its SLA capacity (headroom included).
    pub cpu_utilization: f64,
    /// $ for the hour.
    pub cost: f64,
    /// Per class.
    pub classes: Vec<ClassHour>,
    /// Classes missing their SLA this hour.
    pub degraded: Vec<Degradation>,
}

impl PlanHour {
    /// Planned GPU share per class, in class order (what [`crate::route::RoutePolicy::gpu_share`] takes).
    pub fn gpu_shares(&self) -> Vec<f64> {
        self.classes.iter().map(|c| c.gpu_share).collect()
    }

    /// Planned shed share per class, in class order (for [`crate::route::RoutePolicy::shed_share`]).
    pub fn shed_shares(&self) -> Vec<f64> {
        self.classes.iter().map(|c| c.shed_share).collect()
    }
}

/// Day totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// $ per day.
    pub cost_per_day: f64,
    /// CPU part, $ per day.
    pub cpu_cost_per_day: f64,
    /// GPU part, $ per day.
    pub gpu_cost_per_day: f64,
    /// Requests served per day.
    pub requests_per_day: f64,
    /// Requests rejected per day.
    pub shed_requests_per_day: f64,
    /// $ per 1M output tokens served.
    pub dollars_per_million_output: Option<f64>,
    /// $ per 1M prompt + output tokens served.
    pub dollars_per_million_total: Option<f64>,
    /// Share of requests sent to the GPU fallback.
    pub gpu_share: f64,
    /// $ per day if everything went to the GPU fallback.
    pub all_gpu_cost_per_day: f64,
    /// All-GPU minus plan, $ per day.
    pub savings_per_day: f64,
    /// Savings over the all-GPU cost.
    pub savings_fraction: f64,
    /// The budget, $ per day.
    pub budget_per_day: Option<f64>,
    /// True when the day's cost fits the budget.
    pub within_budget: bool,
}

/// A what-if: the plan re-made with prices or traffic changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// "prices -20%", "prices +20%", "traffic x2".
    pub label: String,
    /// Chosen config.
    pub config: String,
    /// Chosen instance type.
    pub instance_type: String,
    /// $ per day.
    pub cost_per_day: f64,
    /// $ per 1M output tokens.
    pub dollars_per_million_output: Option<f64>,
    /// GPU share of requests.
    pub gpu_share: f64,
    /// Largest hourly CPU pool.
    pub peak_cpu_instances: u32,
    /// Classes that miss their SLA in some hour.
    pub degraded_classes: Vec<String>,
}

/// A capacity plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Workload name.
    pub workload: String,
    /// Price model of the CPU pool.
    pub price_model: PriceModel,
    /// Headroom used.
    pub headroom: f64,
    /// Scale-up lag, minutes.
    pub scale_up_lag_minutes: f64,
    /// Minimum pool.
    pub min_pool: u32,
    /// The chosen config and instance type.
    pub chosen: ChosenConfig,
    /// The GPU fallback and its price.
    pub gpu_fallback: GpuFallback,
    /// 24 hours.
    pub hours: Vec<PlanHour>,
    /// Day totals.
    pub totals: Totals,
    /// The cheapest candidates, cheapest day first.
    pub candidates: Vec<CandidateCost>,
    /// Classes that miss their SLA in some hour, with the worst miss.
    pub degraded: Vec<Degradation>,
    /// What-ifs (empty when not asked for).
    pub sensitivity: Vec<Scenario>,
    /// The simulator's replay of this plan (absent when not asked for).
    pub validation: Option<SimReport>,
}
