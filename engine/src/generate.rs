//! One sequence from prompt to stop: prefill, sample, decode, stream text, and time each phase.

use std::time::{Duration, Instant};

use crate::{
    error::{Error, Result},
    loader::LoadedModel,
    model::Logits,
    sampling::{Sampler, SamplingParams, StopMatcher},
    tokenizer::StreamDecoder,
};

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-turn token.
    EndOfGeneration,
    /// `max_tokens` were generated.
    MaxTokens,
    /// A stop string appeared in the text.
    StopString,
    /// The context window is full.
    ContextFull,
}

/// What a generation produced and how fast.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Generation {
    /// The generated text (stop string and end-of-turn token excluded).
    pub text: String,
    /// Generated token ids, end-of-turn token included when there was one.
    pub tokens: Vec<u32>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Time from start to the first generated token.
    pub ttft: Duration,
    /// Time spent in decode steps after the first token.
    pub decode_time: Duration,
    /// Why it stopped.
    pub stop_reason: StopReason,
}

impl Generation {
    /// Prompt tokens per second of the prefill.
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.ttft.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second after the first token.
    pub fn generated_tokens_per_sec(&self) -> f64 {
        let decoded = self.tokens.len().saturating_sub(1);
        if decoded == 0 {
            0.0
        } else {
            decoded as f64 / self.decode_time.as_secs_f64().max(1e-9)
        }
    }
}

/// Generates from `prompt` token ids, calling `on_text` with each piece of text as it becomes final.
///
/// # Errors
/// When the prompt is empty or too long, or the sampling parameters are invalid.
pub fn generate(
    loaded: &LoadedModel,
    prompt: &[u32],
    params: &SamplingParams,
    mut on_text: impl FnMut(&str),
) -> Result<Generation> {
    params.validate()?;
    let context = loaded.model.config().context_length;
    if prompt.is_empty() {
        return Err(Error::InvalidRequest("the prompt is empty".into()));
    }
    if prompt.len() >= context {
        return Err(Error::InvalidRequest(format!(
            "the prompt has {} tokens; the context holds {context}",
            prompt.len()
        )));
    }
    let capacity = (prompt.len() + params.max_tokens).min(context);
    let mut cache = loaded.model.new_cache(capacity);
    let mut sampler = Sampler::new(params)?;
    let mut stops = StopMatcher::new(params.stop.iter());
    let mut stream = StreamDecoder::default();
    let mut history = prompt.to_vec();
    let mut tokens = Vec::new();
    let mut text = String::new();

    let start = Instant::now();
    let mut logits = loaded.model.forward(prompt, &mut cache, Logits::Last)?;
    let mut ttft = Duration::ZERO;
    let stop_reason = loop {
        let token = sampler.sample(&logits, &history);
        if tokens.is_empty() {
            ttft = start.elapsed();
        }
        tokens.push(token);
        history.push(token);
        if loaded.tokenizer.is_end_of_generation(token) {
            break StopReason::EndOfGeneration;
        }
        let outcome = stops.push(&stream.push(&loaded.tokenizer, token));
        emit(&mut text, &outcome.text, &mut on_text);
        if outcome.stopped {
            break StopReason::StopString;
        }
        if tokens.len() >= params.max_tokens {
            break StopReason::MaxTokens;
        }
        if cache.len() >= cache.capacity() {
            break StopReason::ContextFull;
        }
        loaded
            .model
            .forward_into(&[token], &mut cache, Logits::Last, &mut logits)?;
    };
    if stop_reason != StopReason::StopString {
        let tail = stops.push(&stream.finish());
        emit(&mut text, &tail.text, &mut on_text);
        let rest = stops.finish();
        emit(&mut text, &rest, &mut on_text);
    }
    let decode_time = start.elapsed().saturating_sub(ttft);
    Ok(Generation {
        text,
        tokens,
        prompt_tokens: prompt.len(),
        ttft,
        decode_time,
        stop_reason,
    })
}

fn emit(text: &mut String, piece: &str, on_text: &mut impl FnMut(&str)) {
    if !piece.is_empty() {
        text.push_str(piece);
        on_text(piece);
    }
}
