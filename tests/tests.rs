//! End-to-end tests: the `strata` binary, GGUF to Hugging Face conversion, and the engine against
//! llama.cpp's reference outputs.

mod cli;
mod common;
mod convert;
mod reference;
