//! Read-only memory maps of model files, the one place the engine maps files.
#![allow(unsafe_code)]

use std::{fs::File, path::Path};

use memmap2::Mmap;

use crate::error::{Error, Result};

/// A model file's bytes, memory-mapped read-only, or held in memory (tests, fuzzing).
pub enum FileBytes {
    /// A read-only map of a file on disk.
    Mapped(Mmap),
    /// Bytes owned in memory.
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Maps `path` read-only.
    ///
    /// # Errors
    /// When the file cannot be opened or mapped.
    pub fn map(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. Model files are not expected to
        // change while loaded; if another process truncates the file, reads fault rather than corrupt
        // memory safety of Rust values, since every byte is read as plain integers/floats.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(Self::Mapped(map))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
        }
    }
}
