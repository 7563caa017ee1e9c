//! End-to-end tests: the `strata` binary, GGUF to Hugging Face conversion, the dashboard in a browser,
//! and the engine against llama.cpp's reference outputs.

mod cli;
mod common;
mod convert;
mod dashboard_browser;
mod reference;
