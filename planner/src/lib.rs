//! Strata's pure decision logic: total cost of ownership, SLA feasibility, capacity plans and the routing
//! policy. Nothing here performs I/O, reads a clock or draws unseeded randomness.
//!
//! Flow: [`catalog`] prices + [`profile`] measured curves + [`workload`] -> [`plan::plan`] (analytic search,
//! validated by [`sim::simulate`]) -> [`plan::Plan`], whose hours drive [`route::route`] in the gateway.

pub mod catalog;
mod error;
pub mod estimate;
pub mod plan;
pub mod profile;
pub mod queueing;
mod render;
pub mod route;
pub mod service;
pub mod sim;
pub mod tco;
pub mod workload;

pub use error::{PlannerError, Result};
