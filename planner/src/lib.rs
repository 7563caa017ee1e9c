//! Strata's pure decision logic: total cost of ownership, SLA feasibility, capacity plans and the routing
//! policy. Nothing here performs I/O, reads a clock or draws unseeded randomness.

pub mod catalog;
mod error;
pub mod profile;
pub mod tco;
pub mod workload;

pub use error::{PlannerError, Result};
