//! The gateway's Prometheus metrics, in their own registry with the `strata_gateway_` prefix.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets in seconds: 0.5 ms to 2 minutes.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
    5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Buckets of a relative error |predicted - observed| / observed: 1% to 10x.
const RELATIVE_ERROR_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0,
];

/// Every metric the gateway exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Requests by pool, class and outcome (`ok`, `upstream_error`, `stream_error`, `rejected`, ...).
    pub requests: IntCounterVec,
    /// Arrival to first byte from upstream, by pool.
    pub ttft: HistogramVec,
    /// Arrival to last byte, by pool.
    pub e2e: HistogramVec,
    /// Answered requests by class and whether they met its SLA (`met` = true/false).
    pub sla: IntCounterVec,
    /// USD spent: `window` = day or month, and the budget.
    pub spend: GaugeVec,
    /// Breaker state per endpoint: 0 closed, 1 half-open, 2 open.
    pub breaker: IntGaugeVec,
    /// In-flight requests per endpoint.
    pub in_flight: IntGaugeVec,
    /// Attempts retried on another endpoint.
    pub retries: IntCounter,
    /// Requests that failed over from a CPU pool to a GPU pool.
    pub failovers: IntCounter,
    /// Relative error of each answered request's latency prediction, by pool, endpoint, `latency`
    /// (`ttft` or `e2e`) and `prediction` (`raw`: the service model's; `corrected`: after the
    /// endpoint's online correction, the one routing used).
    pub prediction_error: HistogramVec,
    /// The online correction factor of each endpoint, by `part` (`first_token` or `decode`).
    pub correction: GaugeVec,
    /// Accounting rows waiting for the store.
    pub accounting_queue: IntGauge,
    /// Accounting rows dropped (queue full).
    pub accounting_dropped: IntGauge,
}

impl Metrics {
    /// Registers every metric.
    ///
    /// # Errors
    /// When a metric cannot be registered.
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new_custom(Some("strata_gateway".into()), None)?;
        let requests = IntCounterVec::new(
            Opts::new("requests_total", "Requests by pool, SLA class and outcome"),
            &["pool", "class", "outcome"],
        )?;
        let hist = |n: &str, h: &str| HistogramOpts::new(n, h).buckets(LATENCY_BUCKETS.to_vec());
        let ttft = HistogramVec::new(
            hist("ttft_seconds", "Arrival to the first byte of the answer"),
            &["pool"],
        )?;
        let e2e = HistogramVec::new(
            hist("e2e_seconds", "Arrival to the last byte of the answer"),
            &["pool"],
        )?;
        let sla = IntCounterVec::new(
            Opts::new(
                "sla_total",
                "Answered requests by class and whether they met its SLA",
            ),
            &["class", "met"],
        )?;
        let spend = GaugeVec::new(
            Opts::new(
                "spend_usd",
                "USD spent (kind=spent) and the budget (kind=budget) per window",
            ),
            &["window", "kind"],
        )?;
        let breaker = IntGaugeVec::new(
            Opts::new(
                "breaker_state",
                "Circuit breaker: 0 closed, 1 half-open, 2 open",
            ),
            &["endpoint"],
        )?;
        let in_flight = IntGaugeVec::new(
            Opts::new("in_flight", "Requests in flight per endpoint"),
            &["endpoint"],
        )?;
        let prediction_error = HistogramVec::new(
            HistogramOpts::new(
                "prediction_relative_error",
                "|predicted - observed| / observed latency of answered requests",
            )
            .buckets(RELATIVE_ERROR_BUCKETS.to_vec()),
            &["pool", "endpoint", "latency", "prediction"],
        )?;
        let correction = GaugeVec::new(
            Opts::new(
                "correction_factor",
                "Online correction of an endpoint's service model (observed over predicted)",
            ),
            &["endpoint", "part"],
        )?;
        let retries = IntCounter::new("retries_total", "Attempts retried on another endpoint")?;
        let failovers = IntCounter::new("failovers_total", "Requests failed over from CPU to GPU")?;
        let accounting_queue =
            IntGauge::new("accounting_queue", "Accounting rows waiting for the store")?;
        let accounting_dropped = IntGauge::new(
            "accounting_dropped",
            "Accounting rows dropped because the queue was full",
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(ttft.clone()))?;
        registry.register(Box::new(e2e.clone()))?;
        registry.register(Box::new(sla.clone()))?;
        registry.register(Box::new(spend.clone()))?;
        registry.register(Box::new(breaker.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(prediction_error.clone()))?;
        registry.register(Box::new(correction.clone()))?;
        registry.register(Box::new(retries.clone()))?;
        registry.register(Box::new(failovers.clone()))?;
        registry.register(Box::new(accounting_queue.clone()))?;
        registry.register(Box::new(accounting_dropped.clone()))?;
        Ok(Self {
            registry,
            requests,
            ttft,
            e2e,
            sla,
            spend,
            breaker,
            in_flight,
            prediction_error,
            correction,
            retries,
            failovers,
            accounting_queue,
            accounting_dropped,
        })
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
