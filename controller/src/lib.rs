//! Strata's controller: the store (Postgres or SQLite), the local model cache, and the jobs that measure the
//! engine and feed the planner.

pub mod hardware;
pub mod loadgen;
pub mod model_cache;
pub mod profile;
pub mod store;
