//! The pilots page: every pilot with its verdict, its report read as the pilot wrote it (older
//! layouts migrated, unknown ones named as a problem).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use strata_controller::{
    pilot::{PilotReport, StoredReport, read_stored},
    store::Store,
};

use super::DashboardError;

/// Every pilot, newest first.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PilotsView {
    pub(crate) pilots: Vec<PilotView>,
}

/// One pilot with its verdict and report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PilotView {
    pub(crate) id: i64,
    pub(crate) workload: String,
    pub(crate) status: String,
    pub(crate) verdict: Option<String>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    /// The report, read as `strata pilot` writes it.
    pub(crate) detail: Option<PilotReport>,
    /// What went wrong, for a pilot that failed.
    pub(crate) error: Option<String>,
    /// Why the stored report reads as neither a report nor a failure, when it does not.
    pub(crate) problem: Option<String>,
    pub(crate) report: Option<Value>,
}

/// Builds the pilots page.
pub(crate) async fn pilots(store: &dyn Store) -> Result<PilotsView, DashboardError> {
    let mut pilots = Vec::new();
    for workload in store.list_workloads().await? {
        for pilot in store.list_pilots_for_workload(workload.id).await? {
            let (mut detail, mut error, mut problem) = (None, None, None);
            if let Some(report) = &pilot.report {
                match read_stored(report) {
                    Ok(StoredReport::Done(r)) => detail = Some(*r),
                    Ok(StoredReport::Failed(f)) => error = Some(f.error),
                    Err(e) => problem = Some(format!("pilot {}: report: {e}", pilot.id)),
                }
            }
            pilots.push(PilotView {
                id: pilot.id.0,
                workload: workload.name.clone(),
                status: pilot.status.to_string(),
                verdict: pilot.verdict,
                created_at: pilot.created_at,
                updated_at: pilot.updated_at,
                detail,
                error,
                problem,
                report: pilot.report,
            });
        }
    }
    pilots.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    Ok(PilotsView { pilots })
}
