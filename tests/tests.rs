//! End-to-end tests: the `strata` binary, GGUF to Hugging Face conversion, the engine against
//! llama.cpp's reference outputs, and capacity planning with `strata plan`.

mod cli;
mod common;
mod convert;
mod plan;
mod reference;
