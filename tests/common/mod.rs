//! Shared helpers of the end-to-end tests: where the reference data and the real model are.

use std::path::PathBuf;

use strata_controller::model_cache;

/// The model every end-to-end test runs.
pub(crate) const SMOLLM2: &str = "smollm2-135m-instruct";

/// `shared/reference` beside the checkout (override with `STRATA_REFERENCE_DIR`).
pub(crate) fn reference_dir() -> PathBuf {
    match std::env::var_os("STRATA_REFERENCE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/reference"),
    }
}

/// The SmolLM2-135M-Instruct GGUF file, fetched into the model cache on first use (checksum verified).
pub(crate) fn smollm2_path() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let dir = model_cache::default_cache_dir().expect("a model cache folder");
        model_cache::ensure(SMOLLM2, &dir).expect("the SmolLM2 model can be fetched")
    })
    .clone()
}

/// A `strata serve` process on a free loopback port, killed when dropped.
pub(crate) struct ServerProcess {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
}

impl ServerProcess {
    /// Starts `strata serve` on the real model with `args` added, and waits until it listens.
    pub(crate) fn start(args: &[&str]) -> Self {
        let model = smollm2_path();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_strata"));
        command
            .arg("serve")
            .arg("--model")
            .arg(&model)
            .args(["--port", "0", "--served-model-name", SMOLLM2])
            .args(args);
        Self::listening(command)
    }

    /// Spawns `command` (a `strata` server) and waits for its `listening on URL` line.
    pub(crate) fn listening(command: std::process::Command) -> Self {
        Self::announcing(command, "listening on ")
    }

    /// Spawns `command` and waits for its first line, `PREFIX URL`.
    pub(crate) fn announcing(mut command: std::process::Command, prefix: &str) -> Self {
        use std::io::BufRead;
        let mut child = command
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("the server starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reads the listening line");
        let base = line
            .trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        Self { child, base }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this run is CI, where optional tools must be present rather than skipped.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}
