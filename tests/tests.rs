//! End-to-end tests: the `strata` binary, GGUF to Hugging Face conversion, the engine against
//! llama.cpp's reference outputs, the engine server over HTTP, and the gateway in front of engines.

mod cli;
mod common;
mod convert;
mod gateway;
mod reference;
mod server;
