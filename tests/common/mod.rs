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
