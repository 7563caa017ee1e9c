//! The decisions of a pilot evaluation, free of I/O: the `[pilot]` settings, the `--baseline` argument,
//! the quality gate, the replay and its prediction (over a spread of paces in [`pace`]) and the verdict.
//! The controller measures; everything it decides from the measurements is here, testable on its own.

mod baseline;
pub mod pace;
mod quality;
pub(crate) mod replay;
pub(crate) mod settings;
#[cfg(test)]
mod tests;
mod verdict;

pub use baseline::baseline;
pub use quality::{PairedTaskTest, PairedTasks, QualityGate, WeightQuality, gate_quality};
pub use replay::{ReplayLoad, predict_replay, predict_replay_drifting, replay_load, replay_trace};
pub use settings::{PilotSpec, QualityThresholds, TaskCheck};
pub use verdict::{
    ClassVerdict, MIN_REPLAY_EVIDENCE, REPLAY_SIGNIFICANCE, ReplayEvidence, Verdict, VerdictInput,
    VerdictKind, relative_error, replay_refutes, stay_without_plan, verdict,
};
