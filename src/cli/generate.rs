//! `strata generate`: run one prompt through the engine, streaming text, then one stats line.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use clap::Args;
use strata_controller::model_cache;
use strata_engine::{
    chat::{ChatMessage, ChatTemplate},
    generate::{Generation, generate},
    loader::LoadedModel,
    model::LoadOptions,
    sampling::SamplingParams,
    weights::WeightType,
};

use super::GlobalArgs;

/// Arguments of `strata generate`.
#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// A GGUF file, a Hugging Face folder, or the name of a cached model (pulled if missing).
    #[arg(long, value_name = "PATH|NAME")]
    model: String,
    /// The prompt text.
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System message for `--chat` (the template's default when absent).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Runtime weight type [default: the file's own types].
    #[arg(long, value_name = "f32|f16|bf16|q8_0|q4_0|q4_1")]
    weights: Option<WeightType>,
    /// Engine threads [default: one per core].
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Keep only the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling mass (1 = off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens below this fraction of the most likely one's probability (0 = off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Penalty for tokens among the last 64 (1 = off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Random seed: the same seed gives the same output.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop when this text appears (repeatable).
    #[arg(long)]
    stop: Vec<String>,
}

impl GenerateArgs {
    /// Runs the command.
    pub(crate) fn run(self, _global: &GlobalArgs) -> anyhow::Result<()> {
        let path = resolve_model(&self.model)?;
        let options = LoadOptions {
            weights: self.weights,
            threads: self.threads,
            placement: Default::default(),
        };
        let loaded = LoadedModel::open(&path, options)
            .with_context(|| format!("loading {}", path.display()))?;
        let text = self.prompt_text(&loaded)?;
        let prompt = loaded.tokenizer.encode(&text)?;
        let params = self.sampling();
        let mut stdout = std::io::stdout().lock();
        let generation = generate(&loaded, &prompt, &params, |piece| {
            // A closed stdout (e.g. `| head`) ends output, not the run.
            let _ = stdout
                .write_all(piece.as_bytes())
                .and_then(|()| stdout.flush());
        })?;
        let _ = writeln!(stdout);
        eprintln!("{}", stats_line(&loaded, &generation));
        Ok(())
    }

    fn prompt_text(&self, loaded: &LoadedModel) -> anyhow::Result<String> {
        if !self.chat {
            return Ok(self.prompt.clone());
        }
        let template = match loaded.tokenizer.chat_template() {
            Some(source) => ChatTemplate::new(source)?,
            None => ChatTemplate::fallback_chatml(),
        };
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(ChatMessage::new("system", system.clone()));
        }
        messages.push(ChatMessage::new("user", self.prompt.clone()));
        Ok(template.render_prompt(&messages, true, &loaded.tokenizer)?)
    }

    fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            seed: self.seed,
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            ..SamplingParams::default()
        }
    }
}

/// A path that exists is used as is; otherwise the argument names a model of the cache.
pub(crate) fn resolve_model(model: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(model);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    if model_cache::spec(model).is_err() {
        anyhow::bail!(
            "{model}: no such file or folder, and not a known model name (try `strata model list`)"
        );
    }
    let dir = model_cache::default_cache_dir()?;
    Ok(model_cache::ensure(model, &dir)?)
}

fn stats_line(loaded: &LoadedModel, g: &Generation) -> String {
    format!(
        "prompt tokens: {} | TTFT: {:.1} ms | prompt: {:.1} tokens/s | generated: {} tokens at {:.1} tokens/s | \
         weights {} | threads {} | stop: {:?}",
        g.prompt_tokens,
        g.ttft.as_secs_f64() * 1e3,
        g.prompt_tokens_per_sec(),
        g.tokens.len(),
        g.generated_tokens_per_sec(),
        loaded.model.weight_mix(),
        loaded.model.threads(),
        g.stop_reason,
    )
}
