//! Profiling sweeps: every combination of a sweep's engine settings is started as a real
//! `strata serve` process on loopback, driven over HTTP by the load generator for each workload
//! shape (after a warm-up), watched for peak memory and CPU time, optionally searched for its
//! capacity at an SLA (with the engine's step model fitted from its own timings of the search's
//! steps), and recorded in the store with the host's fingerprint.

mod endpoint;
mod engine_process;
mod measure;
mod quality;
mod run;
mod sweep;
#[cfg(test)]
mod tests;

pub use self::{
    endpoint::record_endpoint_run,
    engine_process::{EngineProcess, FirstTokens, SERVED_NAME},
    measure::{
        Capacity, CurvePoint, RunContext, RunOutcome, capacity_search, ensure_config,
        find_existing, load_spec, measure_shape, search_capacity, shape_json,
    },
    quality::record_sweep_quality,
    run::{ConfigOutcome, Progress, run_config},
    sweep::{CapacitySearch, EngineSettings, NamedShape, Sweep},
};
use crate::{loadgen, quality::QualityError, store::StoreError};

/// Errors of a profiling sweep.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The sweep file is wrong; the message names the key.
    #[error("sweep file: {0}")]
    Sweep(String),
    /// The engine server did not start or answer.
    #[error("engine server: {0}")]
    Server(String),
    /// The load generator could not run.
    #[error(transparent)]
    Load(#[from] loadgen::LoadError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Scoring the output quality failed.
    #[error(transparent)]
    Quality(#[from] QualityError),
    /// The quality scorer's thread stopped before it answered.
    #[error("the quality scorer stopped")]
    ScorerStopped,
    /// A load report could not be turned into the JSON the store keeps.
    #[error("load report: {0}")]
    Report(#[from] serde_json::Error),
    /// A count does not fit the store's integers.
    #[error("a count too large for the store: {0}")]
    CountTooLarge(#[from] std::num::TryFromIntError),
}

/// Result type of this module.
pub type Result<T> = std::result::Result<T, ProfileError>;
