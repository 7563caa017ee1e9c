//! The bridge between the store and the planner: measured runs become [`ConfigProfile`]s, and a plan, its
//! workload and the prices it used are recorded.
//!
//! Units: the store keeps latencies in milliseconds (`_ms`), the planner in seconds (`_s`); rates are
//! requests/s and tokens/s on both sides. Every conversion happens here, once.

mod profiles;
mod records;
#[cfg(test)]
mod tests;

use strata_planner::PlannerError;

pub use self::{profiles::*, records::*};
use crate::store::StoreError;

/// Why measured runs could not be turned into profiles, or a plan could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanningError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A capacity result's `load_curve` is not a list of [`StoredLoadPoint`]s.
    #[error("capacity result {id}: load_curve point {index}: {problem}")]
    LoadCurve {
        /// The capacity result's id.
        id: i64,
        /// The 0-based index of the point (0 when the curve is not a list at all).
        index: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// A capacity result's `step_model` is not a [`StepModel`].
    #[error("capacity result {id}: step_model: {problem}")]
    StepModel {
        /// The capacity result's id.
        id: i64,
        /// What is wrong with it.
        problem: String,
    },
    /// A stored count does not fit the planner's type (e.g. a negative thread count).
    #[error("config {config}: `{field}` is {value}, which the planner cannot use")]
    OutOfRange {
        /// The config's id.
        config: i64,
        /// The field.
        field: &'static str,
        /// Its stored value.
        value: i64,
    },
    /// The profile built from stored rows does not validate.
    #[error("profile built from the store: {0}")]
    Profile(#[source] PlannerError),
    /// No stored profile matches what a gateway pool asked for.
    #[error(
        "no stored profile of {wanted} (profile it with `strata profile` or `strata pilot` first)"
    )]
    NoProfile {
        /// The selector, as `MODEL WEIGHTS tTHREADS bBATCH [on hardware N]`.
        wanted: String,
    },
    /// Profiles of the selected config exist on several hosts and none was chosen.
    #[error(
        "{wanted} was profiled on several hosts (hardware {hosts}): choose one with `hardware = N`"
    )]
    SeveralHosts {
        /// The selector.
        wanted: String,
        /// The hardware ids, comma separated.
        hosts: String,
    },
    /// A plan or workload could not be turned into JSON.
    #[error("cannot encode the {what} as JSON: {source}")]
    Json {
        /// "plan" or "workload".
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
}

/// Result with [`PlanningError`] as the default error.
pub type Result<T, E = PlanningError> = std::result::Result<T, E>;
