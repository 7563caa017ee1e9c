//! Strata's HTTP surface: the engine's OpenAI-compatible server, the gateway, the dashboard and metrics.

pub mod dashboard;
pub mod gateway;
pub mod listener;
pub mod openai_error;
pub mod server;
