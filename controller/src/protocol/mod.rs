//! The gateway's wire format, shared by the gateway, the pilot and the load generator: the headers a
//! request and its answer carry, and the serde types of the gateway's TOML file.

mod gateway_file;

pub use gateway_file::{
    ApiKeyFile, BreakerFile, BudgetFile, ClassFile, DEFAULT_MAX_HEADER_BYTES, EndpointFile,
    GatewayConfigFile, HealthFile, ListenerFile, PoolFile, RetryFile, StoreFile,
};

/// The request header naming a request's SLA class at a Strata gateway.
pub const SLA_CLASS_HEADER: &str = "x-strata-sla";
/// The request header setting a request's own time-to-first-token target, in milliseconds (the
/// name llm-d's predicted-latency scheduling reads).
pub const SLO_TTFT_HEADER: &str = "x-slo-ttft-ms";
/// The request header setting a request's own time-per-output-token target, in milliseconds.
pub const SLO_TPOT_HEADER: &str = "x-slo-tpot-ms";
/// The answer header in which a Strata gateway says where a request went.
pub const ROUTE_HEADER: &str = "x-strata-route";
