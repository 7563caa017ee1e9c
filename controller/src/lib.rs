//! Strata's controller: the store (Postgres or SQLite), the local model cache, the jobs that measure the
//! engine, and the bridge that turns stored measurements into the planner's inputs (`planning`).

pub mod hardware;
pub mod loadgen;
pub mod model_cache;
pub mod model_identity;
pub mod pilot;
pub mod planning;
pub mod prediction_error;
pub mod process;
pub mod profile;
pub mod protocol;
pub mod quality;
pub mod step_fit;
pub mod store;
pub mod worker;
