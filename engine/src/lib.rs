//! Strata's CPU inference engine.
//!
//! Reads model files (GGUF, Hugging Face safetensors folders) through memory maps, tokenizes, runs the
//! Llama-family forward pass on quantized or float weights, and samples. No I/O beyond reading model files.

pub mod bench;
pub mod chat;
pub mod convert;
pub mod error;
pub mod format;
pub mod generate;
pub mod heap;
pub mod kernels;
pub mod loader;
pub mod model;
pub mod placement;
pub mod quant;
pub mod sampling;
pub mod serve;
pub mod team;
pub mod tokenizer;
pub mod weights;

pub use error::{Error, Result};
