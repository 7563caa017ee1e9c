//! The engine under test: a `strata serve` child process on loopback, with its memory and CPU time.

use std::{path::Path, process::Command};

use serde_json::Value;
use strata_engine::serve::StepTimes;
use strata_planner::service::StepModel;

use super::{EngineSettings, ProfileError, Result};
use crate::{process::ChildServer, step_fit};

/// A running `strata serve` process, stopped when dropped.
pub struct EngineProcess {
    server: ChildServer,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// What `/health` reported at start.
    pub health: Value,
}

/// The name the profiler serves models under.
pub const SERVED_NAME: &str = "profiled";

impl EngineProcess {
    /// Starts `exe serve` for `model` with `settings` on a free loopback port and waits until it
    /// answers `/health`.
    ///
    /// # Errors
    /// When the process does not start, exits, or does not answer.
    pub async fn start(exe: &Path, model: &Path, settings: &EngineSettings) -> Result<Self> {
        Self::start_named(exe, model, settings, SERVED_NAME).await
    }

    /// As [`EngineProcess::start`], serving the model under `served_name`.
    ///
    /// # Errors
    /// When the process does not start, exits, or does not answer.
    pub async fn start_named(
        exe: &Path,
        model: &Path,
        settings: &EngineSettings,
        served_name: &str,
    ) -> Result<Self> {
        let mut command = Command::new(exe);
        command
            .arg("serve")
            .arg("--model")
            .arg(model)
            .args(["--weights", &settings.weights])
            .args(["--threads", &settings.threads.to_string()])
            .args(["--max-batch", &settings.max_batch.to_string()])
            .args(["--kv-mem", &settings.kv_mem_mib.to_string()])
            .args(["--numa", &settings.numa])
            .args(["--drain-hold", &settings.drain_hold.to_string()])
            .args(["--port", "0", "--served-model-name", served_name]);
        let server = ChildServer::spawn(command, &format!("`strata serve` for {settings}"))
            .await
            .map_err(ProfileError::Server)?;
        let base_url = server.base_url.clone();
        let health = reqwest::get(format!("{base_url}/health"))
            .await
            .map_err(|e| ProfileError::Server(e.to_string()))?
            .json::<Value>()
            .await
            .map_err(|e| ProfileError::Server(e.to_string()))?;
        Ok(Self {
            server,
            base_url,
            health,
        })
    }

    /// The engine's process id.
    pub fn pid(&self) -> u32 {
        self.server.id()
    }

    /// The engine's step timings so far (its `/steps`).
    ///
    /// # Errors
    /// When the server does not answer with them.
    pub async fn step_times(&self) -> Result<StepTimes> {
        self.get("/steps", "step timings")
            .await?
            .json::<StepTimes>()
            .await
            .map_err(|e| ProfileError::Server(format!("step timings: {e}")))
    }

    /// The engine's first tokens so far, as its `/metrics` counts them.
    ///
    /// # Errors
    /// When the server does not answer with its metrics.
    pub async fn first_tokens(&self) -> Result<FirstTokens> {
        let text = self
            .get("/metrics", "metrics")
            .await?
            .text()
            .await
            .map_err(|e| ProfileError::Server(format!("metrics: {e}")))?;
        Ok(FirstTokens::from_metrics(&text))
    }

    /// The server's successful answer to a GET of `path`; an error naming `what` was asked otherwise.
    async fn get(&self, path: &str, what: &str) -> Result<reqwest::Response> {
        reqwest::get(format!("{}{path}", self.base_url))
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| ProfileError::Server(format!("{what}: {e}")))
    }

    /// The step model fitted to the steps run since `before` (an earlier [`Self::step_times`]);
    /// `None` when the steps were too few or a reading failed (logged: the planner then derives the
    /// steps from the load curve).
    pub async fn step_model_since(&self, before: Result<StepTimes>) -> Option<StepModel> {
        step_fit::fit(&self.steps_since(before).await?)
    }

    /// The steps run since `before` (an earlier [`Self::step_times`]); `None` when a reading failed
    /// (logged).
    pub async fn steps_since(&self, before: Result<StepTimes>) -> Option<StepTimes> {
        match (before, self.step_times().await) {
            (Ok(before), Ok(after)) => Some(after.since(&before)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "no step timings from the engine");
                None
            }
        }
    }

    /// Peak resident memory so far (VmHWM), bytes.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.server.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib << 10)
    }

    /// CPU time used so far (user + system), seconds; clock ticks taken as 100 per second, the
    /// Linux default.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.server.id())).ok()?;
        // Fields after the command name (which may hold spaces) start after the last ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        Some((utime + stime) / 100.0)
    }
}

/// The histogram of the engine's time from a request's arrival to its first token, as `strata serve`
/// names it in `/metrics`.
const TTFT_METRIC: &str = "strata_ttft_seconds";

/// Requests the engine has given a first token, and their summed seconds from arrival (at the
/// engine's HTTP handler) to that token, over every endpoint: what the engine itself saw of their
/// TTFT, without the gateway, the network and the client.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FirstTokens {
    /// Requests.
    pub requests: u64,
    /// Their TTFTs added up, seconds.
    pub seconds: f64,
}

impl FirstTokens {
    /// Read from the Prometheus text exposition of `strata serve` (no such histogram: none yet).
    pub fn from_metrics(text: &str) -> FirstTokens {
        let mut out = FirstTokens::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            let Some(kind) = name.strip_prefix(TTFT_METRIC) else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            match kind {
                "_sum" => out.seconds += value,
                "_count" => out.requests += value as u64,
                _ => {}
            }
        }
        out
    }

    /// Those since `earlier` (an earlier reading of the same engine).
    pub fn since(&self, earlier: &FirstTokens) -> FirstTokens {
        FirstTokens {
            requests: self.requests.saturating_sub(earlier.requests),
            seconds: (self.seconds - earlier.seconds).max(0.0),
        }
    }

    /// Their mean TTFT, seconds; `None` without any.
    pub fn mean_s(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.seconds / self.requests as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The histogram's sums and counts are added over its endpoints; its buckets, other metrics
    /// and comments are not read.
    #[test]
    fn first_tokens_are_read_from_the_metrics_text() {
        let text = "\
# HELP strata_ttft_seconds Request arrival to first output token
# TYPE strata_ttft_seconds histogram
strata_ttft_seconds_bucket{endpoint=\"completions\",le=\"0.5\"} 3
strata_ttft_seconds_sum{endpoint=\"completions\"} 1.25
strata_ttft_seconds_count{endpoint=\"completions\"} 4
strata_ttft_seconds_sum{endpoint=\"chat\"} 0.75
strata_ttft_seconds_count{endpoint=\"chat\"} 1
strata_e2e_seconds_sum{endpoint=\"chat\"} 9
strata_e2e_seconds_count{endpoint=\"chat\"} 1
";
        let read = FirstTokens::from_metrics(text);
        assert_eq!(
            read,
            FirstTokens {
                requests: 5,
                seconds: 2.0
            }
        );
        assert_eq!(read.mean_s(), Some(0.4));
        let later = FirstTokens {
            requests: 8,
            seconds: 3.5,
        };
        assert_eq!(
            later.since(&read),
            FirstTokens {
                requests: 3,
                seconds: 1.5
            }
        );
        assert_eq!(FirstTokens::from_metrics("").mean_s(), None);
    }
}
