//! End-to-end tests: the `strata` binary, GGUF to Hugging Face conversion, the engine against
//! llama.cpp's reference outputs, capacity planning with `strata plan`, and the engine server over
//! HTTP.

mod cli;
mod common;
mod convert;
mod plan;
mod profile;
mod reference;
mod server;
