//! Strata's pure decision logic: total cost of ownership, SLA feasibility, capacity plans and the routing
//! policy. Nothing here performs I/O, reads a clock or draws unseeded randomness.
//!
//! Flow: [`catalog`] prices + [`profile`] measured curves + [`workload`] -> [`plan::plan`] (analytic
//! search, validated by [`sim::simulate`]) -> [`plan::Plan`], whose hours drive [`route::route`] in the
//! gateway. Estimates for unmeasured pairs come from [`estimate`] and stay labelled as such.
//!
//! ```
//! use strata_planner::plan::{PlanInput, plan};
//!
//! let workload = r#"
//! name = "demo"
//! [[class]]
//! name = "chat"
//! share = 1.0
//! prompt_tokens = { dist = "fixed", tokens = 200 }
//! output_tokens = { dist = "fixed", tokens = 100 }
//! sla = { ttft_p99_s = 1.0 }
//! [arrivals]
//! hourly_rps = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 1, 0.5, 0.5, 0.5, 0.5]
//! [gpu_fallback]
//! kind = "instance"
//! instance = "g2-standard-8"
//! output_tokens_per_s = 2000.0
//! ttft_p99_s = 0.3
//! tpot_p99_s = 0.01
//! basis = "assumed"
//! "#;
//! let profiles = r#"[{
//!   "id": "demo-q8", "model": "m", "weights": "q8_0", "threads": 2, "max_batch": 8,
//!   "measured_on": { "host": "h", "vcpus": 2, "mem_bandwidth_gbs": 29.0, "int8_gops": 400.0 },
//!   "load_curve": [
//!     { "rate_rps": 0.2, "ttft_p99_s": 0.4, "tpot_p99_s": 0.010, "e2e_p99_s": 1.4,
//!       "output_tokens_per_s": 20.0, "total_tokens_per_s": 60.0 },
//!     { "rate_rps": 1.0, "ttft_p99_s": 1.2, "tpot_p99_s": 0.020, "e2e_p99_s": 3.2,
//!       "output_tokens_per_s": 100.0, "total_tokens_per_s": 300.0 }],
//!   "mean_prompt_tokens": 200.0, "mean_output_tokens": 100.0 }]"#;
//! let input = PlanInput::from_texts(workload, None, None, profiles)?;
//! let p = plan(&input)?;
//! assert_eq!(p.hours.len(), 24);
//! assert!(p.totals.cost_per_day > 0.0);
//! println!("{}", p.render_table());
//! # Ok::<(), strata_planner::PlannerError>(())
//! ```

pub mod catalog;
pub mod dist;
mod error;
pub mod estimate;
pub mod pilot;
pub mod plan;
pub mod profile;
pub mod queueing;
mod render;
pub mod route;
pub mod service;
pub mod sim;
pub mod step;
pub mod tco;
pub mod workload;

pub use error::{PlannerError, Result};
pub use pilot::pace;
