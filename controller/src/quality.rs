//! Output quality per weight type: perplexity on a fixed public-domain text (the opening of Lewis
//! Carroll's *Alice's Adventures in Wonderland*, 1865) and top-1 agreement of each position's most
//! likely next token with the highest-precision run (f32) of the same model file.

use std::path::Path;

use strata_engine::{
    loader::LoadedModel,
    model::{LoadOptions, Logits},
    weights::WeightType,
};

use crate::store::{ConfigRow, NewQualityResult, QualityResultRow, Store, StoreError};

/// The scored text's identity in stored results.
pub const TEXT_ID: &str = "alice-ch1-v1";

/// The scored text.
pub const TEXT: &str = include_str!("../data/alice-ch1.txt");

/// Errors of quality scoring.
#[derive(Debug, thiserror::Error)]
pub enum QualityError {
    /// The model could not be loaded or run.
    #[error("scoring {weights}: {source}")]
    Engine {
        /// The weight type being scored.
        weights: String,
        /// The engine's error.
        #[source]
        source: strata_engine::Error,
    },
    /// A weight type name is unknown.
    #[error("unknown weight type `{0}`")]
    UnknownWeights(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One weight type's quality.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QualityScore {
    /// The runtime weight type.
    pub weights: String,
    /// Perplexity on [`TEXT`].
    pub perplexity: f64,
    /// Share of positions whose most likely next token equals the f32 run's; `None` for f32 itself.
    pub top1_agreement: Option<f64>,
    /// Positions scored.
    pub tokens: usize,
}

/// Perplexity and per-position argmax of one run over `tokens`.
fn run(
    model_path: &Path,
    weights: WeightType,
    threads: usize,
    tokens: &[u32],
) -> Result<(f64, Vec<u32>), QualityError> {
    let engine_error = |source| QualityError::Engine {
        weights: weights.to_string(),
        source,
    };
    let loaded = LoadedModel::open(
        model_path,
        LoadOptions {
            weights: Some(weights),
            threads,
            placement: Default::default(),
        },
    )
    .map_err(engine_error)?;
    let mut cache = loaded.model.new_cache(tokens.len());
    let logits = loaded
        .model
        .forward(tokens, &mut cache, Logits::All)
        .map_err(engine_error)?;
    let vocab = loaded.model.config().vocab_size;
    let mut nll = 0.0f64;
    let mut argmax = Vec::with_capacity(tokens.len() - 1);
    for (i, row) in logits
        .chunks_exact(vocab)
        .take(tokens.len() - 1)
        .enumerate()
    {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&l| ((l - max) as f64).exp()).sum();
        let next = tokens[i + 1] as usize;
        nll -= (row[next] - max) as f64 - sum.ln();
        let best =
            row.iter().enumerate().fold(
                (0, f32::NEG_INFINITY),
                |b, (j, &l)| if l > b.1 { (j, l) } else { b },
            );
        argmax.push(best.0 as u32);
    }
    Ok(((nll / (tokens.len() - 1) as f64).exp(), argmax))
}

/// Scores each of `weights` (engine names) on [`TEXT`], against an f32 run of the same file.
///
/// # Errors
/// When a weight type is unknown or the model cannot be loaded or run.
pub fn score(
    model_path: &Path,
    weights: &[String],
    threads: usize,
) -> Result<Vec<QualityScore>, QualityError> {
    let tokenizer_model = LoadedModel::open(
        model_path,
        LoadOptions {
            weights: Some(WeightType::Q8_0),
            threads: 1,
            placement: Default::default(),
        },
    )
    .map_err(|source| QualityError::Engine {
        weights: "tokenizer".into(),
        source,
    })?;
    let mut tokens = Vec::new();
    if let Some(bos) = tokenizer_model
        .tokenizer
        .bos()
        .filter(|_| tokenizer_model.tokenizer.adds_bos())
    {
        tokens.push(bos);
    }
    tokens.extend(tokenizer_model.tokenizer.encode(TEXT).map_err(|source| {
        QualityError::Engine {
            weights: "tokenizer".into(),
            source,
        }
    })?);
    drop(tokenizer_model);
    let (reference_ppl, reference) = run(model_path, WeightType::F32, threads, &tokens)?;
    weights
        .iter()
        .map(|name| {
            let kind: WeightType = name
                .parse()
                .map_err(|_| QualityError::UnknownWeights(name.clone()))?;
            if kind == WeightType::F32 {
                return Ok(QualityScore {
                    weights: name.clone(),
                    perplexity: reference_ppl,
                    top1_agreement: None,
                    tokens: reference.len(),
                });
            }
            let (perplexity, argmax) = run(model_path, kind, threads, &tokens)?;
            let same = argmax
                .iter()
                .zip(&reference)
                .filter(|(a, b)| a == b)
                .count();
            Ok(QualityScore {
                weights: name.clone(),
                perplexity,
                top1_agreement: Some(same as f64 / reference.len().max(1) as f64),
                tokens: reference.len(),
            })
        })
        .collect()
}

/// Records `score` for `config` unless this text was already scored for it.
///
/// # Errors
/// When the store fails.
pub async fn record(
    store: &dyn Store,
    config: &ConfigRow,
    score: &QualityScore,
) -> Result<Option<QualityResultRow>, QualityError> {
    let existing = store.list_quality_results_for_config(config.id).await?;
    if existing.iter().any(|q| q.text_id == TEXT_ID) {
        return Ok(None);
    }
    Ok(Some(
        store
            .insert_quality_result(&NewQualityResult {
                config_id: config.id,
                text_id: TEXT_ID.into(),
                perplexity: score.perplexity,
                top1_agreement: score.top1_agreement,
            })
            .await?,
    ))
}
