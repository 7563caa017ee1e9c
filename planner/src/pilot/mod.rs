//! The decisions of a pilot evaluation, free of I/O: the `[pilot]` settings of a workload file, the
//! `--baseline` argument, the quality gate of each weight type, the time-compressed replay sample and the
//! simulator's prediction for it (over a measured spread of paces in [`pace`]), and the verdict (migrate
//! all classes, some, or none) with its savings, risk and reasons.
//!
//! The controller measures (profiles, quality scores, the replay through a real gateway); everything it
//! decides from those measurements is here, so that each verdict path is testable with synthetic inputs.

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
