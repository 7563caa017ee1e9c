//! The engine server's Prometheus metrics: scheduler gauges and counters read from the engine at
//! scrape time, request latencies (TTFT, ITL, E2E) observed as answers stream out.

use std::sync::{Arc, atomic::Ordering};

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use strata_engine::serve::EngineStats;

/// Latency buckets in seconds: 1 ms to 2 minutes.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0,
    3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Every metric the server exports, registered in its own registry.
pub(crate) struct Metrics {
    registry: Registry,
    stats: Arc<EngineStats>,
    queue_depth: IntGauge,
    running: IntGauge,
    kv_blocks: IntGaugeVec,
    prefix_hit_rate: prometheus::Gauge,
    prompt_tokens: IntCounter,
    generated_tokens: IntCounter,
    preemptions: IntCounter,
    pub(crate) requests: IntCounterVec,
    pub(crate) ttft: HistogramVec,
    pub(crate) itl: Histogram,
    pub(crate) e2e: HistogramVec,
}

impl Metrics {
    pub(crate) fn new(stats: Arc<EngineStats>) -> prometheus::Result<Self> {
        let registry = Registry::new_custom(Some("strata".into()), None)?;
        let queue_depth = IntGauge::new("queue_depth", "Requests waiting for a batch slot")?;
        let running = IntGauge::new("running_sequences", "Sequences in the running batch")?;
        let kv_blocks = IntGaugeVec::new(
            Opts::new(
                "kv_blocks",
                "Key/value blocks by state: used by sequences, cached (prefix cache only), free",
            ),
            &["state"],
        )?;
        let prefix_hit_rate = prometheus::Gauge::new(
            "prefix_cache_hit_rate",
            "Share of prompt tokens found in the prefix cache since start",
        )?;
        let prompt_tokens = IntCounter::new(
            "prompt_tokens_total",
            "Prompt tokens computed (prefix-cache hits excluded)",
        )?;
        let generated_tokens = IntCounter::new("generated_tokens_total", "Tokens generated")?;
        let preemptions = IntCounter::new(
            "preemptions_total",
            "Sequences preempted for lack of key/value memory",
        )?;
        let requests = IntCounterVec::new(
            Opts::new("requests_total", "Requests by endpoint and HTTP status"),
            &["endpoint", "status"],
        )?;
        let histogram = |name: &str, help: &str| {
            HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec())
        };
        let ttft = HistogramVec::new(
            histogram("ttft_seconds", "Request arrival to first output token"),
            &["endpoint"],
        )?;
        let itl = Histogram::with_opts(histogram(
            "itl_seconds",
            "Each gap between consecutive output tokens",
        ))?;
        let e2e = HistogramVec::new(
            histogram("e2e_seconds", "Request arrival to last output token"),
            &["endpoint"],
        )?;
        registry.register(Box::new(queue_depth.clone()))?;
        registry.register(Box::new(running.clone()))?;
        registry.register(Box::new(kv_blocks.clone()))?;
        registry.register(Box::new(prefix_hit_rate.clone()))?;
        registry.register(Box::new(prompt_tokens.clone()))?;
        registry.register(Box::new(generated_tokens.clone()))?;
        registry.register(Box::new(preemptions.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(ttft.clone()))?;
        registry.register(Box::new(itl.clone()))?;
        registry.register(Box::new(e2e.clone()))?;
        Ok(Self {
            registry,
            stats,
            queue_depth,
            running,
            kv_blocks,
            prefix_hit_rate,
            prompt_tokens,
            generated_tokens,
            preemptions,
            requests,
            ttft,
            itl,
            e2e,
        })
    }

    /// Reads the engine's counters into the metrics and renders the text exposition format.
    pub(crate) fn render(&self) -> String {
        let s = &self.stats;
        let load = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed) as i64;
        self.queue_depth.set(load(&s.waiting));
        self.running.set(load(&s.running));
        let (total, used, cached) = (
            load(&s.kv_blocks_total),
            load(&s.kv_blocks_used),
            load(&s.kv_blocks_cached),
        );
        self.kv_blocks.with_label_values(&["used"]).set(used);
        self.kv_blocks.with_label_values(&["cached"]).set(cached);
        self.kv_blocks
            .with_label_values(&["free"])
            .set(total - used - cached);
        self.prefix_hit_rate.set(s.prefix_hit_rate());
        catch_up(&self.prompt_tokens, s.prompt_tokens.load(Ordering::Relaxed));
        catch_up(
            &self.generated_tokens,
            s.generated_tokens.load(Ordering::Relaxed),
        );
        catch_up(&self.preemptions, s.preemptions.load(Ordering::Relaxed));
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Moves a Prometheus counter up to the engine's running total.
fn catch_up(counter: &IntCounter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}
