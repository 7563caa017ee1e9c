//! What planning and pilots record: prices, workloads, plans and pilot evaluations.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::FromRow;

use super::{CatalogPriceId, PilotId, PilotStatus, PlanId, WorkloadId};

new_and_row! {
    /// A price list entry, to record. Unique per provider, region, instance type and date.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct NewCatalogPrice {
        /// The cloud or hosting provider.
        pub provider: String,
        /// The region.
        pub region: String,
        /// The instance type.
        pub instance_type: String,
        /// Virtual CPUs.
        pub vcpus: i64,
        /// Memory, in GiB.
        pub memory_gib: f64,
        /// The accelerator model, if any.
        pub accelerator: Option<String>,
        /// How many accelerators.
        pub accelerator_count: i64,
        /// On-demand price, in USD per hour.
        pub on_demand_usd_per_hour: f64,
        /// Spot price, in USD per hour.
        pub spot_usd_per_hour: Option<f64>,
        /// Committed-use price, in USD per hour.
        pub committed_usd_per_hour: Option<f64>,
        /// Power draw under load, in watts, for on-premises costing.
        pub watts: Option<f64>,
        /// Where the price came from.
        pub source: String,
        /// The day the price was read.
        pub price_date: NaiveDate,
    }

    /// A recorded price. See [`NewCatalogPrice`] for the fields.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct CatalogPriceRow {
        /// Its id.
        pub id: CatalogPriceId,
        ..
    }
}

new_and_row! {
    /// A workload, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct NewWorkload {
        /// Its name; unique.
        pub name: String,
        /// Its description (traffic by hour, request shapes, SLA classes), as JSON.
        #[sqlx(json)]
        pub spec: Value,
    }

    /// A recorded workload.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct WorkloadRow {
        /// Its id.
        pub id: WorkloadId,
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// A capacity plan, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct NewPlan {
        /// The workload it plans for.
        pub workload_id: WorkloadId,
        /// The plan, as JSON.
        #[sqlx(json)]
        pub plan: Value,
        /// Its cost over its horizon, in USD.
        pub total_cost_usd: f64,
        /// The output tokens it serves over its horizon.
        pub total_output_tokens: i64,
    }

    /// A recorded plan.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct PlanRow {
        /// Its id.
        pub id: PlanId,
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

/// A pilot's new state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PilotUpdate {
    /// Its status.
    pub status: PilotStatus,
    /// Its verdict, once there is one.
    pub verdict: Option<String>,
    /// Its report (savings, risk, per-config results), as JSON.
    pub report: Option<Value>,
}

/// A recorded pilot evaluation. New pilots start [`PilotStatus::Pending`] with no verdict or report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct PilotRow {
    /// Its id.
    pub id: PilotId,
    /// The workload evaluated.
    pub workload_id: WorkloadId,
    /// See [`PilotUpdate::status`].
    #[sqlx(try_from = "String")]
    pub status: PilotStatus,
    /// See [`PilotUpdate::verdict`].
    pub verdict: Option<String>,
    /// See [`PilotUpdate::report`].
    #[sqlx(json(nullable))]
    pub report: Option<Value>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}
