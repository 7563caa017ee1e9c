//! The gateway file the pilot's replay runs under, typed as the gateway reads it: the workload's
//! classes, one CPU pool (the engine, its service model from the measured profile) and the GPU baseline
//! when there is an endpoint.

use strata_planner::{
    profile::{ConfigProfile, Scaling, ScalingRule},
    route::PoolKind,
    service::ServiceCurve,
    workload::{GpuFallback, GpuPricing, Workload},
};

use super::GpuEndpoint;
use crate::protocol::{
    ClassFile, EndpointFile, GatewayConfigFile, HealthFile, PoolFile, RetryFile,
};

/// Time to the response head and longest silence the replay's pools allow, ms: the replay measures
/// latency, so the gateway must not cut a slow request short.
const REPLAY_TIMEOUT_MS: u64 = 600_000;

/// What the replay's gateway fronts: the engine serving the chosen config, and the GPU baseline's
/// endpoint when one takes part.
#[derive(Debug, Clone)]
pub struct ReplayGateway<'a> {
    /// The workload replayed: its classes become the gateway's.
    pub workload: &'a Workload,
    /// The chosen config's profile: the CPU pool's service model and throughput.
    pub profile: &'a ConfigProfile,
    /// The engine's base URL.
    pub engine_url: &'a str,
    /// The model name both pools serve.
    pub served: &'a str,
    /// The measured host's price per hour, $.
    pub host_hourly_usd: f64,
    /// The GPU endpoint with the baseline that prices it, when it takes part.
    pub gpu: Option<(&'a GpuEndpoint, &'a GpuFallback)>,
}

impl ReplayGateway<'_> {
    /// The gateway file: listening on any free port, no health checks, no retries.
    pub fn file(&self) -> GatewayConfigFile {
        let classes = self.workload.classes.iter().map(class_file).collect();
        let mut pools = vec![self.cpu_pool()];
        pools.extend(
            self.gpu
                .map(|(endpoint, fallback)| gpu_pool(endpoint, fallback, self.served)),
        );
        let default_class = self
            .workload
            .classes
            .first()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        GatewayConfigFile {
            health: HealthFile {
                interval_ms: 0,
                ..HealthFile::default()
            },
            retry: RetryFile {
                attempts: 1,
                backoff_ms: 10,
            },
            ..GatewayConfigFile::new("127.0.0.1:0".into(), default_class, classes, pools)
        }
    }

    /// [`Self::file`] as TOML.
    ///
    /// # Errors
    /// When the file does not serialize as TOML.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(&self.file())
    }

    /// The CPU pool: the engine, priced per hour at its measured peak throughput.
    fn cpu_pool(&self) -> PoolFile {
        let service = ServiceCurve::from_profile(
            self.profile,
            Scaling {
                rule: ScalingRule::MeasuredOnType,
                factor: 1.0,
            },
        );
        let peak_tokens_per_s = self
            .profile
            .load_curve
            .iter()
            .map(|p| p.total_tokens_per_s)
            .fold(0.0, f64::max)
            .max(1.0);
        let engine = EndpointFile {
            url: self.engine_url.to_owned(),
            name: Some("cpu-0".into()),
            api_key_env: None,
        };
        PoolFile {
            max_concurrency: 4096,
            price_per_hour_usd: Some(self.host_hourly_usd.max(1e-9)),
            tokens_per_s: Some(peak_tokens_per_s),
            service: Some(service),
            first_byte_timeout_ms: REPLAY_TIMEOUT_MS,
            idle_timeout_ms: REPLAY_TIMEOUT_MS,
            ..PoolFile::new(
                "cpu-pilot".into(),
                PoolKind::Cpu,
                vec![self.served.to_owned()],
                vec![engine],
            )
        }
    }
}

/// A workload class as the gateway's `[[class]]`.
fn class_file(c: &strata_planner::workload::RequestClass) -> ClassFile {
    ClassFile {
        name: c.name.clone(),
        ttft_p99_ms: c.sla.ttft_p99_s.map(|s| s * 1000.0),
        e2e_p99_ms: c.sla.e2e_p99_s.map(|s| s * 1000.0),
        priority: c.priority,
        default_output_tokens: c.output_tokens.mean().round().max(1.0) as u32,
    }
}

/// The GPU baseline's pool: its endpoint, priced per million tokens as the baseline is.
fn gpu_pool(endpoint: &GpuEndpoint, fallback: &GpuFallback, served: &str) -> PoolFile {
    let per_million = match fallback.pricing {
        GpuPricing::PerToken {
            input_per_million,
            output_per_million,
        } => (input_per_million + output_per_million) / 2.0,
        GpuPricing::PerInstanceHour {
            hourly_cost,
            output_tokens_per_s,
        } => hourly_cost / (output_tokens_per_s.max(1e-9) * 3600.0) * 1e6,
    };
    let gpu = EndpointFile {
        url: endpoint.url.clone(),
        name: Some("gpu-0".into()),
        api_key_env: endpoint.api_key_env.clone(),
    };
    PoolFile {
        price_per_million_tokens_usd: Some(per_million.max(1e-9)),
        ttft_p99_ms: Some(fallback.ttft_p99_s * 1000.0),
        tpot_p99_ms: Some(fallback.tpot_p99_s * 1000.0),
        first_byte_timeout_ms: REPLAY_TIMEOUT_MS,
        ..PoolFile::new(
            "gpu-baseline".into(),
            PoolKind::Gpu,
            vec![served.to_owned()],
            vec![gpu],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_planner::workload::WorkloadFile;

    const WORKLOAD: &str = r#"
name = "t"
[[class]]
name = "chat"
share = 0.7
priority = 1
prompt_tokens = { dist = "fixed", tokens = 100 }
output_tokens = { dist = "fixed", tokens = 20 }
sla = { ttft_p99_s = 1.0, e2e_p99_s = 4.0 }
[[class]]
name = "extract"
share = 0.3
prompt_tokens = { dist = "fixed", tokens = 300 }
output_tokens = { dist = "fixed", tokens = 10 }
sla = { e2e_p99_s = 5.0 }
[arrivals]
hourly_rps = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
[gpu_fallback]
kind = "instance"
instance = "g2-standard-8"
output_tokens_per_s = 2000.0
ttft_p99_s = 0.25
tpot_p99_s = 0.012
basis = "assumed"
"#;

    fn profile() -> ConfigProfile {
        let json = r#"[{
  "id": "p", "model": "m", "weights": "q8_0", "threads": 2, "max_batch": 8,
  "measured_on": { "host": "h", "vcpus": 2, "mem_bandwidth_gbs": 29.0, "int8_gops": 400.0 },
  "load_curve": [
    { "rate_rps": 0.5, "ttft_p99_s": 0.4, "tpot_p99_s": 0.010, "e2e_p99_s": 1.4,
      "output_tokens_per_s": 10.0, "total_tokens_per_s": 80.0 }],
  "mean_prompt_tokens": 160.0, "mean_output_tokens": 17.0 }]"#;
        ConfigProfile::list_from_json_str(json)
            .expect("profile")
            .remove(0)
    }

    #[test]
    fn the_replay_gateway_config_is_toml_with_every_class_and_pool() {
        let workload = WorkloadFile::from_toml_str(WORKLOAD)
            .and_then(|f| f.into_workload(None))
            .expect("workload");
        let gpu = GpuEndpoint {
            url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key_env: Some("GPU_KEY".into()),
        };
        let fallback = GpuFallback {
            name: "g2-standard-8".into(),
            pricing: GpuPricing::PerInstanceHour {
                hourly_cost: 0.72,
                output_tokens_per_s: 2000.0,
            },
            ttft_p99_s: 0.25,
            tpot_p99_s: 0.012,
        };
        let profile = profile();
        let mut gateway = ReplayGateway {
            workload: &workload,
            profile: &profile,
            engine_url: "http://127.0.0.1:8",
            served: "m",
            host_hourly_usd: 0.5,
            gpu: Some((&gpu, &fallback)),
        };
        let text = gateway.to_toml().expect("TOML");
        let table: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(table["default_class"].as_str(), Some("chat"));
        let classes = table["class"].as_array().expect("classes");
        assert_eq!(classes.len(), 2);
        assert_eq!(classes[0]["ttft_p99_ms"].as_float(), Some(1000.0));
        assert!(classes[1].get("ttft_p99_ms").is_none(), "{text}");
        let pools = table["pool"].as_array().expect("pools");
        assert_eq!(pools[0]["kind"].as_str(), Some("cpu"));
        assert_eq!(pools[0]["service"]["slots"].as_integer(), Some(8));
        assert_eq!(
            pools[0]["endpoint"][0]["url"].as_str(),
            Some("http://127.0.0.1:8")
        );
        assert_eq!(pools[1]["kind"].as_str(), Some("gpu"));
        assert_eq!(pools[1]["ttft_p99_ms"].as_float(), Some(250.0));
        let per_million = pools[1]["price_per_million_tokens_usd"]
            .as_float()
            .expect("price");
        assert!((per_million - 0.1).abs() < 1e-12, "{per_million}");
        assert_eq!(pools[0]["tokens_per_s"].as_float(), Some(80.0));
        assert_eq!(
            pools[1]["endpoint"][0]["api_key_env"].as_str(),
            Some("GPU_KEY")
        );
        gateway.gpu = None;
        let cpu_only = gateway.to_toml().expect("TOML");
        let table: toml::Table = toml::from_str(&cpu_only).expect("valid TOML");
        let file: GatewayConfigFile = toml::from_str(&cpu_only).expect("a gateway file");
        assert_eq!(file, gateway.file(), "the file reads back as written");
        assert_eq!(table["pool"].as_array().map(Vec::len), Some(1));
    }
}
