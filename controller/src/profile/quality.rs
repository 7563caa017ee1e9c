//! Scoring a sweep's output quality: each weight type once, recorded for every config of that type.

use std::path::Path;

use super::{ProfileError, Result, RunContext, Sweep, ensure_config};
use crate::quality::{self, QualityScore};

/// Scores every weight type of the sweep and records the scores for each config of that type,
/// unless all of them already hold a score for the text (or `force`). Returns the scores, none when
/// nothing was scored.
///
/// # Errors
/// When the store fails, or the model cannot be scored.
pub async fn record_sweep_quality(
    ctx: &RunContext<'_>,
    model_file: &Path,
    sweep: &Sweep,
    force: bool,
) -> Result<Vec<QualityScore>> {
    let configs = sweep.configs();
    let mut rows = Vec::new();
    for settings in &configs {
        rows.push((
            settings.weights.clone(),
            ensure_config(ctx.store, ctx.model, settings).await?,
        ));
    }
    let mut scored_already = true;
    for (_, row) in &rows {
        let results = ctx.store.list_quality_results_for_config(row.id).await?;
        scored_already &= results.iter().any(|q| q.text_id == quality::TEXT_ID);
    }
    if scored_already && !force {
        return Ok(Vec::new());
    }
    let mut weights: Vec<String> = configs.iter().map(|c| c.weights.clone()).collect();
    weights.sort();
    weights.dedup();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let path = model_file.to_path_buf();
    let scores = tokio::task::spawn_blocking(move || quality::score(&path, &weights, threads))
        .await
        .map_err(|_| ProfileError::ScorerStopped)??;
    for (weights, row) in &rows {
        if let Some(score) = scores.iter().find(|s| &s.weights == weights) {
            quality::record(ctx.store, row, score).await?;
        }
    }
    Ok(scores)
}
