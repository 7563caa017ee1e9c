//! Llama-family models: hyperparameters, weights loaded from any [`crate::format::TensorSource`], the
//! forward pass and its key/value cache.

pub mod config;
pub mod kv;
pub mod llama;

pub use config::{Activation, LlamaConfig, RopeStyle, SUPPORTED_ARCHITECTURES, SlidingWindow};
pub use kv::{KvCache, KvType, PagedKv};
pub use llama::{BatchSeq, Llama, LoadOptions, Logits};
