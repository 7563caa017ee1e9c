//! Scratch files and folders inside the cache: removed when dropped, and when left over by a run that
//! died, once they are stale.

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use super::{ModelCacheError, Result, STALE_SCRATCH};

/// Removes scratch files and folders older than [`STALE_SCRATCH`]; failures are only logged.
pub(super) fn remove_stale_scratch(cache_dir: &Path) {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_scratch = name.to_str().is_some_and(TempPath::is_scratch_name);
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_SCRATCH));
        if is_scratch && stale {
            tracing::debug!(path = %entry.path().display(), "removing stale scratch file");
            drop(TempPath(entry.path()));
        }
    }
}

/// A scratch file or folder inside the cache folder, removed when dropped unless persisted.
pub(super) struct TempPath(pub(super) PathBuf);

impl TempPath {
    fn unique_name(kind: &str) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        format!(".{kind}-{}-{n}.tmp", std::process::id())
    }

    fn is_scratch_name(name: &str) -> bool {
        name.starts_with('.') && name.ends_with(".tmp")
    }

    /// A fresh path for a scratch file (not created).
    pub(super) fn new_file_path(dir: &Path, kind: &str) -> Self {
        Self(dir.join(Self::unique_name(kind)))
    }

    /// A fresh, created scratch folder.
    pub(super) fn new_dir(dir: &Path, kind: &str) -> Result<Self> {
        let path = dir.join(Self::unique_name(kind));
        fs::create_dir(&path).map_err(ModelCacheError::io("create folder", &path))?;
        Ok(Self(path))
    }

    /// Renames the scratch file to `dest`, replacing what is there.
    pub(super) fn persist(self, dest: &Path) -> Result<()> {
        fs::rename(&self.0, dest).map_err(ModelCacheError::io("rename into place", dest))?;
        std::mem::forget(self);
        Ok(())
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let result = if self.0.is_dir() {
            fs::remove_dir_all(&self.0)
        } else {
            fs::remove_file(&self.0)
        };
        if let Err(e) = result
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), error = %e, "could not remove scratch file");
        }
    }
}
