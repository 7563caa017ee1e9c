//! Throughput measurement in the manner of llama-bench: prompt processing (`pp N`: one batch of N
//! tokens from an empty cache) and generation (`tg N`: N single-token steps from an empty cache), each
//! repeated after a warm-up, reported as mean and standard deviation of tokens per second.

use std::time::Instant;

use crate::{
    error::Result,
    loader::LoadedModel,
    model::{KvType, Logits},
};

/// Which tests to run.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// Prompt lengths for `pp` tests.
    pub prompt_lengths: Vec<usize>,
    /// Generation lengths for `tg` tests.
    pub generation_lengths: Vec<usize>,
    /// Timed repetitions of each test (after one warm-up run).
    pub repetitions: usize,
    /// The cache type.
    pub kv: KvType,
}

/// The kind of test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchKind {
    /// Prompt processing: one batch.
    Prompt,
    /// Generation: one token per step.
    Generation,
}

/// One test's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchResult {
    /// `pp512`, `tg128`, ...
    pub test: String,
    /// Prompt or generation.
    pub kind: BenchKind,
    /// Tokens per run.
    pub tokens: usize,
    /// Mean tokens per second over the repetitions.
    pub tokens_per_sec: f64,
    /// Sample standard deviation of tokens per second.
    pub stddev: f64,
    /// Tokens per second of each repetition.
    pub samples: Vec<f64>,
}

/// Runs every test of `spec` on `loaded`, using token ids spread over the vocabulary (the content
/// does not change the work done).
///
/// # Errors
/// When a test does not fit in the model's context.
pub fn run(loaded: &LoadedModel, spec: &BenchSpec) -> Result<Vec<BenchResult>> {
    let mut results = Vec::new();
    for &n in &spec.prompt_lengths {
        results.push(measure(spec, BenchKind::Prompt, n, || {
            prompt_run(loaded, n, spec.kv)
        })?);
    }
    for &n in &spec.generation_lengths {
        results.push(measure(spec, BenchKind::Generation, n, || {
            generation_run(loaded, n, spec.kv)
        })?);
    }
    Ok(results)
}

fn measure(
    spec: &BenchSpec,
    kind: BenchKind,
    tokens: usize,
    mut once: impl FnMut() -> Result<f64>,
) -> Result<BenchResult> {
    once()?;
    let samples = (0..spec.repetitions.max(1))
        .map(|_| once().map(|secs| tokens as f64 / secs))
        .collect::<Result<Vec<_>>>()?;
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let variance = if samples.len() > 1 {
        samples.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / (samples.len() - 1) as f64
    } else {
        0.0
    };
    let prefix = match kind {
        BenchKind::Prompt => "pp",
        BenchKind::Generation => "tg",
    };
    Ok(BenchResult {
        test: format!("{prefix}{tokens}"),
        kind,
        tokens,
        tokens_per_sec: mean,
        stddev: variance.sqrt(),
        samples,
    })
}

fn tokens(loaded: &LoadedModel, n: usize) -> Vec<u32> {
    let vocab = loaded.model.config().vocab_size as u64;
    (0..n as u64)
        .map(|i| ((i * 7919 + 13) % vocab) as u32)
        .collect()
}

/// Seconds for one batch of `n` tokens.
fn prompt_run(loaded: &LoadedModel, n: usize, kv: KvType) -> Result<f64> {
    let input = tokens(loaded, n);
    let mut cache = loaded.model.new_cache_with(n, kv);
    let start = Instant::now();
    loaded.model.forward(&input, &mut cache, Logits::Last)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Seconds for `n` single-token steps.
fn generation_run(loaded: &LoadedModel, n: usize, kv: KvType) -> Result<f64> {
    let input = tokens(loaded, n);
    let mut cache = loaded.model.new_cache_with(n, kv);
    let model = &loaded.model;
    model.install(|| {
        let mut logits = Vec::new();
        let start = Instant::now();
        for token in input {
            model.forward_into(&[token], &mut cache, Logits::Last, &mut logits)?;
        }
        Ok(start.elapsed().as_secs_f64())
    })
}
