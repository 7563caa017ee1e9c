//! Reports as the store holds them: read at this version's layout, older layouts migrated first,
//! unknown ones refused by version.

use serde_json::{Value, json};

use super::report::{FailedReport, PilotReport, REPORT_SCHEMA_VERSION};

/// A stored pilot's report: a finished pilot's, or a failed one's error.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredReport {
    /// A finished pilot.
    Done(Box<PilotReport>),
    /// A failed pilot.
    Failed(FailedReport),
}

/// Why a stored report does not read.
#[derive(Debug, thiserror::Error)]
pub enum StoredReportError {
    /// It has no `schema_version`.
    #[error("the report has no schema_version")]
    NoVersion,
    /// Its layout is of a version this build does not read.
    #[error(
        "the report's schema_version is {found}; this build reads versions 1 to {REPORT_SCHEMA_VERSION}"
    )]
    UnknownVersion {
        /// The version it says it has.
        found: u64,
    },
    /// It says a version this build reads but does not read as one.
    #[error("the report of schema_version {version} does not read: {source}")]
    Layout {
        /// The version it says it has.
        version: u64,
        /// What serde found wrong.
        source: serde_json::Error,
    },
}

/// `report` as stored (a finished pilot's report or a failed one's), migrated to this version's
/// layout when it is older.
///
/// # Errors
/// [`StoredReportError`] when it has no version, an unknown one, or does not read as its version.
pub fn read_stored(report: &Value) -> Result<StoredReport, StoredReportError> {
    let version = report["schema_version"]
        .as_u64()
        .ok_or(StoredReportError::NoVersion)?;
    let current = match version {
        1 => migrate_v1(report.clone()),
        v if v == u64::from(REPORT_SCHEMA_VERSION) => report.clone(),
        found => return Err(StoredReportError::UnknownVersion { found }),
    };
    let layout = |source| StoredReportError::Layout { version, source };
    if current.get("error").is_some() {
        return serde_json::from_value(current)
            .map(StoredReport::Failed)
            .map_err(layout);
    }
    serde_json::from_value(current)
        .map(|r| StoredReport::Done(Box::new(r)))
        .map_err(layout)
}

/// A version 1 report at version 2's layout. Version 1 replays calibrated on one sample before the
/// replay listed no `samples`: the calibration's own figures become that one sample.
pub fn migrate_v1(mut report: Value) -> Value {
    report["schema_version"] = json!(2);
    let Some(calibration) = report
        .get_mut("replay")
        .and_then(|r| r.get_mut("calibration"))
        .filter(|c| c.is_object())
    else {
        return report;
    };
    let listed = calibration["samples"]
        .as_array()
        .is_some_and(|s| !s.is_empty());
    if !listed {
        let sample = json!({
            "when": "before_replay",
            "duration_s": calibration["duration_s"],
            "requests": calibration["requests"],
            "decode_over_profiled": calibration["decode_over_profiled"],
            "prompt_over_profiled": calibration["prompt_over_profiled"],
        });
        calibration["samples"] = json!([sample]);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_calibration_without_samples_becomes_one_sample_before_the_replay() {
        let v1 = json!({
            "schema_version": 1,
            "replay": {"calibration": {
                "duration_s": 40.0, "requests": 30, "samples": [],
                "decode_over_profiled": 1.05, "prompt_over_profiled": null
            }}
        });
        let migrated = migrate_v1(v1);
        assert_eq!(migrated["schema_version"], 2);
        assert_eq!(
            migrated["replay"]["calibration"]["samples"],
            json!([{
                "when": "before_replay", "duration_s": 40.0, "requests": 30,
                "decode_over_profiled": 1.05, "prompt_over_profiled": null
            }])
        );
        let listed = json!({"schema_version": 1, "replay": {"calibration": {"samples": [{"when": "after_replay"}]}}});
        assert_eq!(
            migrate_v1(listed)["replay"]["calibration"]["samples"],
            json!([{"when": "after_replay"}])
        );
    }

    #[test]
    fn failed_reports_read_at_both_versions_and_other_versions_are_refused_by_number() {
        for version in [1, 2] {
            let failed = json!({"schema_version": version, "error": "the engine exited"});
            let read = read_stored(&failed).expect("a failed report");
            assert_eq!(
                read,
                StoredReport::Failed(FailedReport {
                    schema_version: REPORT_SCHEMA_VERSION,
                    error: "the engine exited".into(),
                })
            );
        }
        let future = read_stored(&json!({"schema_version": 9, "error": "x"})).unwrap_err();
        assert_eq!(
            future.to_string(),
            "the report's schema_version is 9; this build reads versions 1 to 2"
        );
        let unversioned = read_stored(&json!({"error": "x"})).unwrap_err();
        assert!(matches!(unversioned, StoredReportError::NoVersion));
        let broken = read_stored(&json!({"schema_version": 2, "workload": 3})).unwrap_err();
        assert!(
            broken
                .to_string()
                .starts_with("the report of schema_version 2 does not read"),
            "{broken}"
        );
    }
}
