//! End-to-end tests: the `strata` binary, GGUF to Hugging Face conversion, the engine against
//! llama.cpp's reference outputs, capacity planning with `strata plan`, profiling sweeps and workers,
//! the engine server over HTTP, the gateway in front of engines, and the dashboard in a browser.

mod cli;
mod common;
mod convert;
mod dashboard_browser;
mod gateway;
mod pilot;
mod plan;
mod profile;
mod reference;
mod server;
