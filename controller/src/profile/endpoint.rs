//! Recording a load run against an OpenAI-compatible endpoint measured from outside.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Result;
use crate::{
    loadgen::{Api, LoadReport, LoadSpec},
    store::{EndpointRunRow, NewEndpoint, NewEndpointRun, Store},
};

/// Records an endpoint run: the endpoint (by base URL and served model) on first use, then the run's
/// headline figures and whole report in one row. `client_version` is the load generator's version.
///
/// # Errors
/// When the store fails, or a count does not fit the store.
pub async fn record_endpoint_run(
    store: &dyn Store,
    spec: &LoadSpec,
    report: &LoadReport,
    started_at: DateTime<Utc>,
    client_version: &str,
) -> Result<EndpointRunRow> {
    let endpoint = NewEndpoint {
        base_url: spec.base_url.clone(),
        model_name: spec.model.clone(),
    };
    let endpoint = match store.find_endpoint(&endpoint).await? {
        Some(row) => row,
        None => store.insert_endpoint(&endpoint).await?,
    };
    let finished_at = started_at
        + chrono::Duration::from_std(Duration::from_secs_f64(report.duration_s.max(0.0)))
            .unwrap_or_default();
    let mut whole = serde_json::to_value(report)?;
    if let Some(fields) = whole.as_object_mut() {
        // Per-request records make the row large; the percentiles already summarize them.
        fields.remove("records");
    }
    Ok(store
        .insert_endpoint_run(&NewEndpointRun {
            endpoint_id: endpoint.id,
            started_at,
            finished_at,
            api: match spec.api {
                Api::Chat => "chat",
                Api::Completions => "completions",
            }
            .into(),
            workload_shape: serde_json::to_value(&spec.shape)?,
            request_count: i64::try_from(report.requests)?,
            error_count: i64::try_from(report.errors)?,
            ttft_p50_ms: report.ttft_ms.p50,
            ttft_p99_ms: report.ttft_ms.p99,
            tpot_p50_ms: report.tpot_ms.p50,
            tpot_p99_ms: report.tpot_ms.p99,
            e2e_p50_ms: report.e2e_ms.p50,
            e2e_p99_ms: report.e2e_ms.p99,
            output_tokens_per_s: report.output_tokens_per_s,
            requests_per_s: report.requests_per_s,
            goodput_requests_per_s: report.goodput_requests_per_s,
            sla_attainment: report.sla_attainment,
            report: whole,
            client_version: client_version.into(),
        })
        .await?)
}
