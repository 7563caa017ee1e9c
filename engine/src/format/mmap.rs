//! Read-only memory maps of model files, the one place the engine maps files.
#![allow(unsafe_code)]

use std::{fs::File, path::Path};

use memmap2::{Mmap, UncheckedAdvice};

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
        if file.metadata().map_err(io)?.is_dir() {
            return Err(Error::model(path, "is a directory, not a model file"));
        }
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

    /// Drops the whole pages inside `range` from memory once their bytes have been copied out, so a
    /// loaded model does not hold both the file's pages and its own copy. The bytes stay readable:
    /// touched again, they are read back from the file. Owned bytes are kept as they are.
    pub fn release(&self, range: std::ops::Range<usize>) {
        let Self::Mapped(map) = self else {
            return;
        };
        let page = page_size();
        let start = range.start.div_ceil(page) * page;
        let end = (range.end.min(map.len()) / page) * page;
        if end <= start {
            return;
        }
        // SAFETY: the map is a read-only private map of a file; dropping its pages discards nothing
        // (they are clean and are read back from the file on the next access), so every reference
        // into the map keeps seeing the same bytes.
        let advised =
            unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
        if let Err(e) = advised {
            tracing::debug!(error = %e, "could not release mapped pages");
        }
    }
}

/// The OS page size (4 KiB where it cannot be read).
fn page_size() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: `sysconf` reads a constant of the system and has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if size > 0 {
            return size as usize;
        }
    }
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_named_as_one() {
        let dir = std::env::temp_dir();
        let Err(e) = FileBytes::map(&dir) else {
            panic!("a directory maps");
        };
        assert!(e.to_string().contains("is a directory"), "{e}");
    }
}
