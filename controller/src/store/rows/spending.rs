//! What gateways record: routing decisions and the budget ledger.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::FromRow;

use super::{GatewayDecisionId, LedgerEntryId};

/// The source of a gateway's own (live) traffic.
pub const LIVE_TRAFFIC: &str = "live";

/// The source of the traffic a pilot of `workload` replays through its gateway.
pub fn pilot_replay_source(workload: &str) -> String {
    format!("pilot:{workload}")
}

/// What a pool was predicted to give a request, stored beside a decision for the pools not chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolPrediction {
    /// The pool's name.
    pub pool: String,
    /// Predicted time to first token, milliseconds.
    pub ttft_ms: f64,
    /// Predicted end-to-end latency, milliseconds.
    pub e2e_ms: f64,
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
        /// The end-to-end latency the route predicted (after the endpoint's online correction), in
        /// milliseconds, for the output tokens the answer had.
        pub predicted_latency_ms: Option<f64>,
        /// The end-to-end latency observed, in milliseconds, once known.
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
        /// The time to first token the route predicted (after the online correction), milliseconds.
        pub predicted_ttft_ms: Option<f64>,
        /// The time to first token observed (streamed answers only), milliseconds.
        pub observed_ttft_ms: Option<f64>,
        /// The service model's own TTFT prediction, before the online correction, milliseconds.
        pub raw_predicted_ttft_ms: Option<f64>,
        /// The service model's own end-to-end prediction, before the online correction, milliseconds.
        pub raw_predicted_latency_ms: Option<f64>,
        /// What each pool not chosen was predicted to give: a list of [`PoolPrediction`].
        pub other_pools: Option<Value>,
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
