//! Which model a file or folder is: a SHA-256 of its contents, and its row in the store, recorded on
//! first use. A GGUF file's digest is the file's; a checkpoint folder's is the digest of a
//! `sha256sum`-style manifest of its files, so that the same files anywhere give the same identity.

use std::{
    fs::{self, File},
    io::{self, Read},
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};
use strata_engine::format::gguf::GgufFile;

use crate::{
    model_cache,
    store::{ModelRow, NewModel, Store, StoreError},
};

/// Errors of identifying a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelIdentityError {
    /// A file or folder could not be read.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `read`, `list`, ...).
        op: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The model file is not a GGUF file the engine reads.
    #[error(transparent)]
    Engine(#[from] strata_engine::Error),
    /// The model's size does not fit the store's integers.
    #[error("{path}: {size} bytes is too large for the store")]
    TooLarge {
        /// The model.
        path: PathBuf,
        /// Its size, in bytes.
        size: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Result type of this module.
pub type Result<T, E = ModelIdentityError> = std::result::Result<T, E>;

/// A model's content digest and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentDigest {
    /// The SHA-256, lowercase hex.
    pub sha256: String,
    /// The bytes hashed: the file's size, or the sum of the folder's files' sizes.
    pub size_bytes: u64,
}

/// The digest of a model file, or of a checkpoint folder: the SHA-256 of the lines
/// `<sha256 of the file>  <path relative to the folder, '/'-separated>\n` for each of its files, sorted
/// by that path. Hidden entries (`.git`, `.cache`) are not part of the model. Files are streamed,
/// never read whole into memory.
///
/// # Errors
/// When a file or folder cannot be read.
pub fn content_digest(path: &Path) -> Result<ContentDigest> {
    if !path.is_dir() {
        return file_digest(path);
    }
    let mut manifest = Sha256::new();
    let mut size_bytes = 0u64;
    for (relative, file) in folder_files(path)? {
        let digest = file_digest(&file)?;
        manifest.update(format!("{}  {relative}\n", digest.sha256));
        size_bytes += digest.size_bytes;
    }
    Ok(ContentDigest {
        sha256: format!("{:x}", manifest.finalize()),
        size_bytes,
    })
}

/// The model's row, recorded on first use: by the cache's checksum for a model the cache knows by
/// `name`, else by the [`content_digest`] of `path`.
///
/// # Errors
/// When the model cannot be read or the store fails.
pub async fn ensure_model(store: &dyn Store, name: &str, path: &Path) -> Result<ModelRow> {
    let (display, digest) = match model_cache::spec(name) {
        Ok(spec) => (
            spec.name.to_owned(),
            ContentDigest {
                sha256: spec.sha256.to_owned(),
                size_bytes: fs::metadata(path).map_or(0, |m| m.len()),
            },
        ),
        Err(_) => (
            path.file_name()
                .map_or_else(|| name.to_owned(), |n| n.to_string_lossy().into_owned()),
            content_digest(path)?,
        ),
    };
    if let Some(row) = store.find_model_by_sha256(&digest.sha256).await? {
        return Ok(row);
    }
    let size_bytes =
        i64::try_from(digest.size_bytes).map_err(|_| ModelIdentityError::TooLarge {
            path: path.to_owned(),
            size: digest.size_bytes,
        })?;
    Ok(store
        .insert_model(&NewModel {
            name: display,
            path: path.display().to_string(),
            format: if path.is_dir() { "safetensors" } else { "gguf" }.to_owned(),
            sha256: digest.sha256,
            size_bytes,
            parameters: None,
            synthetic: !path.is_dir() && GgufFile::open(path)?.is_synthetic(),
        })
        .await?)
}

/// The SHA-256 and size of one file, read in 1 MiB pieces.
fn file_digest(path: &Path) -> Result<ContentDigest> {
    let io = |op| {
        move |source| ModelIdentityError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    };
    let mut file = File::open(path).map_err(io("open"))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size_bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io("read"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size_bytes += n as u64;
    }
    Ok(ContentDigest {
        sha256: format!("{:x}", hasher.finalize()),
        size_bytes,
    })
}

/// Every file below `root` that is not hidden (links followed), with its `/`-separated path
/// relative to `root`, sorted by that path.
fn folder_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    let mut folders = vec![(String::new(), root.to_owned())];
    while let Some((prefix, folder)) = folders.pop() {
        let list_error = |source| ModelIdentityError::Io {
            op: "list",
            path: folder.clone(),
            source,
        };
        for entry in fs::read_dir(&folder).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            let relative = format!("{prefix}{name}");
            if path.is_dir() {
                folders.push((format!("{relative}/"), path));
            } else {
                files.push((relative, path));
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_folder(root: &Path, files: &[(&str, &[u8])]) {
        for (relative, bytes) in files {
            let path = root.join(relative);
            fs::create_dir_all(path.parent().expect("a parent folder")).expect("create folder");
            fs::write(path, bytes).expect("write file");
        }
    }

    const CHECKPOINT: &[(&str, &[u8])] = &[
        ("config.json", b"{\"hidden_size\": 64}"),
        ("model.safetensors", b"weights, not real ones"),
        ("tokenizer/tokenizer.json", b"{\"model\": {}}"),
    ];

    #[test]
    fn the_same_files_at_different_paths_have_the_same_identity() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir().expect("tempdir");
        write_folder(&a.path().join("smollm2"), CHECKPOINT);
        write_folder(&b.path().join("elsewhere/copy"), CHECKPOINT);
        let first = content_digest(&a.path().join("smollm2")).expect("digest");
        let second = content_digest(&b.path().join("elsewhere/copy")).expect("digest");
        assert_eq!(first, second);
        let bytes: usize = CHECKPOINT.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(first.size_bytes, bytes as u64);
    }

    #[test]
    fn one_changed_byte_changes_the_identity() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_folder(dir.path(), CHECKPOINT);
        let before = content_digest(dir.path()).expect("digest");
        write_folder(
            dir.path(),
            &[("model.safetensors", b"weights, not real onez")],
        );
        let after = content_digest(dir.path()).expect("digest");
        assert_ne!(before.sha256, after.sha256);
        assert_eq!(before.size_bytes, after.size_bytes);
    }

    #[test]
    fn a_renamed_file_changes_the_identity_and_hidden_files_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_folder(dir.path(), CHECKPOINT);
        let before = content_digest(dir.path()).expect("digest");
        write_folder(dir.path(), &[(".cache/download.lock", b"2026")]);
        assert_eq!(content_digest(dir.path()).expect("digest"), before);
        fs::rename(
            dir.path().join("config.json"),
            dir.path().join("config2.json"),
        )
        .expect("rename");
        assert_ne!(content_digest(dir.path()).expect("digest"), before);
    }

    #[test]
    fn a_file_is_identified_by_its_own_sha256() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("model.gguf");
        fs::write(&path, b"abc").expect("write");
        let digest = content_digest(&path).expect("digest");
        assert_eq!(
            digest.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(digest.size_bytes, 3);
    }

    #[test]
    fn an_unreadable_model_names_its_path() {
        let err = content_digest(Path::new("/no/such/model.gguf")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "open /no/such/model.gguf: No such file or directory (os error 2)"
        );
    }
}
