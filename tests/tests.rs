//! End-to-end tests: the `strata` binary, and the engine against llama.cpp's reference outputs.

mod cli;
mod common;
mod reference;
