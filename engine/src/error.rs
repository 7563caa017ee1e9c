//! The engine's one error type.

use std::path::PathBuf;

/// Everything that can go wrong loading, tokenizing or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file's bytes do not form a valid model file.
    #[error("{path}: {problem}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor, key or offset.
        problem: String,
    },
    /// A tensor type the engine does not know or cannot run.
    #[error("{path}: tensor {tensor} has unsupported type {kind}")]
    UnsupportedType {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// The type as the file names it.
        kind: String,
    },
    /// The model's metadata or tensors do not describe a model the engine can run.
    #[error("{path}: {problem}")]
    Model {
        /// The file or folder.
        path: PathBuf,
        /// What is missing or inconsistent.
        problem: String,
    },
    /// Tokenizer construction or encoding failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A chat template failed to parse or render.
    #[error("chat template: {0}")]
    ChatTemplate(String),
    /// A request to the engine is invalid (empty prompt, beyond the context, bad sampling values).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Values cannot be quantized as asked.
    #[error("cannot quantize {len} values as {kind}: {problem}")]
    Quantize {
        /// The target type's name.
        kind: &'static str,
        /// How many values were given.
        len: usize,
        /// What is wrong with them.
        problem: String,
    },
    /// Writing a converted model failed.
    #[error("{path}: {problem}")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// What failed.
        problem: String,
    },
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A format error for `path`.
    pub fn format(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        Self::Format {
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// A model error for `path`.
    pub fn model(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        Self::Model {
            path: path.into(),
            problem: problem.into(),
        }
    }
}
