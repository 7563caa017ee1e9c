//! What gateways record: routing decisions and the budget ledger.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::FromRow;

use super::{GatewayDecisionId, LedgerEntryId};

/// The source of a gateway's own (live) traffic.
pub const LIVE_TRAFFIC: &str = "live";

/// The source of the traffic a pilot of `workload` replays through its gateway.
pub fn pilot_replay_source(workload: &str) -> String {
    format!("pilot:{workload}")
}

new_and_row! {
    /// One gateway routing decision, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct NewGatewayDecision {
        /// When it was decided.
        pub decided_at: DateTime<Utc>,
        /// The request's id.
        pub request_id: String,
        /// The request's SLA class.
        pub sla_class: String,
        /// The pool chosen: a CPU pool or a GPU fallback.
        pub pool: String,
        /// The upstream endpoint chosen.
        pub endpoint: String,
        /// Why (the policy's reason code).
        pub reason: String,
        /// The latency the policy predicted, in milliseconds.
        pub predicted_latency_ms: Option<f64>,
        /// The latency observed, in milliseconds, once known.
        pub observed_latency_ms: Option<f64>,
        /// Prompt tokens.
        pub prompt_tokens: i64,
        /// Output tokens.
        pub output_tokens: i64,
        /// What the request cost, in USD.
        pub cost_usd: f64,
        /// Where the traffic came from: [`LIVE_TRAFFIC`] for a gateway's own requests, `pilot:WORKLOAD`
        /// for a pilot's replay.
        pub source: String,
    }

    /// A recorded gateway decision. See [`NewGatewayDecision`] for the fields.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct GatewayDecisionRow {
        /// Its id.
        pub id: GatewayDecisionId,
        ..
    }
}

new_and_row! {
    /// Money spent by a pool, to record in the budget ledger.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct NewLedgerEntry {
        /// When it was spent.
        pub recorded_at: DateTime<Utc>,
        /// The pool that spent it.
        pub pool: String,
        /// How much, in USD.
        pub amount_usd: f64,
        /// The tokens it bought.
        pub tokens: i64,
        /// A free-form note.
        pub note: Option<String>,
    }

    /// A recorded ledger entry. See [`NewLedgerEntry`] for the fields.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct LedgerEntryRow {
        /// Its id.
        pub id: LedgerEntryId,
        ..
    }
}

/// The sum of ledger entries.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, FromRow)]
pub struct LedgerTotal {
    /// Money spent, in USD.
    pub amount_usd: f64,
    /// Tokens bought.
    pub tokens: i64,
}
