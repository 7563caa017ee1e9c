//! Hugging Face checkpoint folders: config.json, model.safetensors (or shards with their index),
//! tokenizer.json, read through memory maps.

use std::path::Path;

use crate::{
    error::{Error, Result},
    loader::LoadedModel,
    model::LoadOptions,
};

/// Loads a Hugging Face checkpoint folder.
///
/// # Errors
/// Always, until safetensors loading lands: names the folder.
pub fn load_folder(path: &Path, _options: LoadOptions) -> Result<LoadedModel> {
    Err(Error::model(
        path,
        "Hugging Face folders are not readable yet",
    ))
}
