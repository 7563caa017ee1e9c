//! Opens a model from a path: a GGUF file or a Hugging Face checkpoint folder, with its tokenizer.

use std::path::{Path, PathBuf};

use crate::{
    error::{Error, Result},
    format::{
        gguf::GgufFile,
        safetensors::{SafetensorsFolder, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE},
    },
    model::{Llama, LlamaConfig, LoadOptions},
    tokenizer::Tokenizer,
};

/// Where a loaded model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFormat {
    /// A GGUF file.
    Gguf,
    /// A Hugging Face folder with config.json, safetensors and tokenizer.json.
    HuggingFace,
}

/// A model ready to run, with its tokenizer.
pub struct LoadedModel {
    /// The network.
    pub model: Llama,
    /// Its tokenizer and chat template.
    pub tokenizer: Tokenizer,
    /// The file format it was read from.
    pub format: ModelFormat,
    /// The file or folder.
    pub path: PathBuf,
}

impl LoadedModel {
    /// Opens `path`: a GGUF file, or a folder holding a Hugging Face checkpoint.
    ///
    /// # Errors
    /// When the files cannot be read or do not describe a supported model.
    pub fn open(path: &Path, options: LoadOptions) -> Result<Self> {
        if path.is_dir() {
            return load_folder(path, options);
        }
        Self::from_gguf(GgufFile::open(path)?, options)
    }

    /// Loads a GGUF file held in memory (`name` stands for its path in messages).
    ///
    /// # Errors
    /// When the bytes do not describe a supported model.
    pub fn from_gguf_bytes(name: &Path, bytes: Vec<u8>, options: LoadOptions) -> Result<Self> {
        Self::from_gguf(GgufFile::from_bytes(name, bytes)?, options)
    }

    fn from_gguf(mut file: GgufFile, options: LoadOptions) -> Result<Self> {
        let path = file.path().to_path_buf();
        let config = LlamaConfig::from_gguf(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        file.release_tokenizer_metadata();
        crate::heap::release_free_pages();
        let model = Llama::load(config, &file, options)?;
        drop(file);
        crate::heap::release_free_pages();
        Ok(Self {
            model,
            tokenizer,
            format: ModelFormat::Gguf,
            path,
        })
    }
}

/// Loads a Hugging Face checkpoint folder: weights through [`SafetensorsFolder`], tokenizer from
/// `tokenizer.json` and `tokenizer_config.json`.
///
/// # Errors
/// When a file is missing or malformed, or the tensors do not match `config.json`.
pub fn load_folder(path: &Path, options: LoadOptions) -> Result<LoadedModel> {
    let folder = SafetensorsFolder::open(path)?;
    let tokenizer_json = path.join(TOKENIZER_FILE);
    if !tokenizer_json.is_file() {
        return Err(Error::model(path, format!("{TOKENIZER_FILE} is missing")));
    }
    let tokenizer =
        Tokenizer::from_hf_files(&tokenizer_json, Some(&path.join(TOKENIZER_CONFIG_FILE)))?;
    let model = Llama::load(folder.config().clone(), &folder, options)?;
    Ok(LoadedModel {
        model,
        tokenizer,
        format: ModelFormat::HuggingFace,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests;
