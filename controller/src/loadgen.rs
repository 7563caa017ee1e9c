//! The load generator: drives any OpenAI-compatible endpoint over real HTTP with streaming requests,
//! closed loop (N clients, each sending its next request when the previous one ends) or open loop
//! (Poisson arrivals at a rate), and measures each request as the design's metrics define it:
//! TTFT (arrival to first output token), ITL (each gap between output tokens), TPOT (mean gap per
//! request), E2E (arrival to last token), in HDR histograms.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::protocol::{ROUTE_HEADER, SLA_CLASS_HEADER};

/// Errors of a load run as a whole (single request failures are counted, not raised).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The spec cannot run.
    #[error("invalid load spec: {0}")]
    Spec(String),
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// A token-length distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Lengths {
    /// Always this many.
    Fixed(usize),
    /// Uniform over `[min, max]`.
    Uniform {
        /// Smallest length.
        min: usize,
        /// Largest length.
        max: usize,
    },
}

impl Lengths {
    fn draw(self, rng: &mut StdRng) -> usize {
        match self {
            Self::Fixed(n) => n,
            Self::Uniform { min, max } => rng.random_range(min..=max.max(min)),
        }
    }

    /// The mean length.
    pub fn mean(self) -> f64 {
        match self {
            Self::Fixed(n) => n as f64,
            Self::Uniform { min, max } => (min + max.max(min)) as f64 / 2.0,
        }
    }

    fn min(self) -> usize {
        match self {
            Self::Fixed(n) => n,
            Self::Uniform { min, .. } => min,
        }
    }
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arrival {
    /// `concurrency` clients, each sending its next request as soon as its previous one ends.
    Closed {
        /// Clients.
        concurrency: usize,
    },
    /// Poisson arrivals at `rate` requests per second, however many are in flight.
    Poisson {
        /// Mean arrivals per second.
        rate: f64,
    },
}

/// Latency targets a request must meet to count toward goodput (each optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sla {
    /// Time to first token, milliseconds.
    pub ttft_ms: Option<f64>,
    /// Time per output token, milliseconds.
    pub tpot_ms: Option<f64>,
    /// End to end, milliseconds.
    pub e2e_ms: Option<f64>,
}

impl Sla {
    fn met_by(&self, r: &RequestRecord) -> bool {
        let ok = |target: Option<f64>, value: f64| target.is_none_or(|t| value * 1e3 <= t);
        r.error.is_none()
            && ok(self.ttft_ms, r.ttft_s)
            && ok(self.tpot_ms, r.tpot_s())
            && ok(self.e2e_ms, r.e2e_s)
    }
}

/// Which API the requests use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `/v1/completions` with a prompt.
    #[default]
    Completions,
    /// `/v1/chat/completions` with one user message.
    Chat,
}

/// The shape of the offered load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Prompt lengths in tokens.
    pub prompt_tokens: Lengths,
    /// Output lengths in tokens (sent as `max_tokens`, with `ignore_eos` when the endpoint takes it).
    pub output_tokens: Lengths,
    /// Arrival process.
    pub arrival: Arrival,
    /// Measured requests; with `duration_s`, the most sent (0: no limit but the duration).
    #[serde(default)]
    pub requests: usize,
    /// Send for this many seconds instead of a request count (closed loop: clients start no request
    /// after it; Poisson: arrivals stop at it). Requests in flight at the end are completed and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Requests sent first and not measured.
    #[serde(default)]
    pub warmup: usize,
}

/// One load run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// The server's base URL (`http://host:port`, without `/v1`).
    pub base_url: String,
    /// The model name to send.
    pub model: String,
    /// Bearer key, if the endpoint needs one.
    #[serde(skip_serializing)]
    pub api_key: Option<String>,
    /// Which API to call.
    pub api: Api,
    /// What to send and how.
    pub shape: Shape,
    /// Send prompts as token ids (exact lengths; for endpoints of the same vocabulary) rather than
    /// text (about one token per word).
    pub token_prompts: bool,
    /// Ask for exactly `max_tokens` with `ignore_eos` (Strata, vLLM and llama.cpp accept it).
    pub ignore_eos: bool,
    /// Targets for goodput and attainment.
    pub sla: Sla,
    /// Seed for lengths, prompts and arrivals.
    pub seed: u64,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// What one request did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Seconds from the run's start to the request's arrival.
    pub arrival_s: f64,
    /// Arrival to first output token, seconds.
    pub ttft_s: f64,
    /// Gaps between output chunks, seconds.
    pub itl_s: Vec<f64>,
    /// Arrival to last token, seconds.
    pub e2e_s: f64,
    /// Prompt tokens (as the server counted them, else as sent).
    pub prompt_tokens: usize,
    /// Output tokens (as the server counted them, else chunks).
    pub output_tokens: usize,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Where a gateway sent it (its `x-strata-route` answer header), when one answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
}

impl RequestRecord {
    /// Mean time per output token after the first: (E2E - TTFT) / (tokens - 1); 0 for one token.
    pub fn tpot_s(&self) -> f64 {
        if self.output_tokens <= 1 {
            return 0.0;
        }
        (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) as f64
    }
}

/// p50/p90/p95/p99 of one latency, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Percentiles {
    /// The percentiles of `values_s` (seconds), in milliseconds; zeros when there are none.
    pub fn of(values_s: impl Iterator<Item = f64>) -> Self {
        // Microseconds from 1 us to 1 hour, three significant figures.
        let Ok(mut h) = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3) else {
            return Self::default();
        };
        for v in values_s {
            h.saturating_record((v * 1e6).round().max(1.0) as u64);
        }
        if h.is_empty() {
            return Self::default();
        }
        let at = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p95: at(0.95),
            p99: at(0.99),
        }
    }
}

/// The measured outcome of a load run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Wall time from the first measured arrival to the last completion, seconds.
    pub duration_s: f64,
    /// Measured requests sent.
    pub requests: usize,
    /// Measured requests that failed.
    pub errors: usize,
    /// Time to first token.
    pub ttft_ms: Percentiles,
    /// Time per output token, over requests.
    pub tpot_ms: Percentiles,
    /// Inter-token latency, over all gaps.
    pub itl_ms: Percentiles,
    /// End to end.
    pub e2e_ms: Percentiles,
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// Prompt plus output tokens per second.
    pub total_tokens_per_s: f64,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Requests per second that met the SLA.
    pub goodput_requests_per_s: f64,
    /// Share of measured requests that met the SLA.
    pub sla_attainment: f64,
    /// The first few distinct errors, for the operator.
    pub error_samples: Vec<String>,
    /// Every measured request.
    #[serde(skip)]
    pub records: Vec<RequestRecord>,
}

impl LoadReport {
    /// Summarizes `records` measured over `duration_s` against `sla`.
    pub fn from_records(records: Vec<RequestRecord>, duration_s: f64, sla: &Sla) -> Self {
        let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.error.is_none()).collect();
        let duration = duration_s.max(1e-9);
        let output: usize = ok.iter().map(|r| r.output_tokens).sum();
        let prompt: usize = ok.iter().map(|r| r.prompt_tokens).sum();
        let good = records.iter().filter(|r| sla.met_by(r)).count();
        let mut error_samples: Vec<String> = Vec::new();
        for e in records.iter().filter_map(|r| r.error.clone()) {
            if error_samples.len() < 5 && !error_samples.contains(&e) {
                error_samples.push(e);
            }
        }
        Self {
            duration_s,
            requests: records.len(),
            errors: records.len() - ok.len(),
            ttft_ms: Percentiles::of(ok.iter().map(|r| r.ttft_s)),
            tpot_ms: Percentiles::of(
                ok.iter()
                    .filter(|r| r.output_tokens > 1)
                    .map(|r| r.tpot_s()),
            ),
            itl_ms: Percentiles::of(ok.iter().flat_map(|r| r.itl_s.iter().copied())),
            e2e_ms: Percentiles::of(ok.iter().map(|r| r.e2e_s)),
            output_tokens_per_s: output as f64 / duration,
            total_tokens_per_s: (output + prompt) as f64 / duration,
            requests_per_s: ok.len() as f64 / duration,
            goodput_requests_per_s: good as f64 / duration,
            sla_attainment: if records.is_empty() {
                0.0
            } else {
                good as f64 / records.len() as f64
            },
            error_samples,
            records,
        }
    }
}

/// Words for text prompts: common enough to be about one token each in BPE vocabularies.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "city", "water",
    "light", "house", "river", "table", "music", "garden", "winter", "market", "story",
];

/// One request's body parts, drawn from the seed.
#[derive(Debug, Clone)]
struct Planned {
    prompt: Value,
    prompt_len: usize,
    max_tokens: usize,
    /// The SLA class sent in [`SLA_CLASS_HEADER`], if any.
    class: Option<String>,
}

/// One request of a replayed trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedRequest {
    /// Seconds from the replay's start.
    pub at_s: f64,
    /// SLA class, sent in [`SLA_CLASS_HEADER`].
    pub class: String,
    /// Prompt length, tokens.
    pub prompt_tokens: usize,
    /// Output length, tokens.
    pub output_tokens: usize,
}

/// A replayed request: its class and what it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayRecord {
    /// Its SLA class.
    pub class: String,
    /// What it did.
    pub record: RequestRecord,
}

/// Sends `requests` at their times to `spec`'s endpoint (its shape is not used: lengths, classes and
/// times come from the trace), each with its class header, and records them in trace order.
///
/// # Errors
/// When the endpoint is not an http(s) URL or the HTTP client cannot be built.
pub async fn replay(
    spec: &LoadSpec,
    requests: &[TimedRequest],
) -> Result<Vec<ReplayRecord>, LoadError> {
    if !spec.base_url.starts_with("http://") && !spec.base_url.starts_with("https://") {
        return Err(LoadError::Spec(
            "the endpoint must be an http:// or https:// URL".into(),
        ));
    }
    let client = reqwest::Client::builder()
        .timeout(spec.timeout)
        .pool_max_idle_per_host(1024)
        .build()?;
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let planned: Vec<Planned> = requests
        .iter()
        .map(|r| {
            let prompt_len = r.prompt_tokens.max(1);
            Planned {
                prompt: draw_prompt(spec.token_prompts, prompt_len, &mut rng),
                prompt_len,
                max_tokens: r.output_tokens.max(1),
                class: Some(r.class.clone()),
            }
        })
        .collect();
    let start = Instant::now();
    let client = &client;
    let tasks = planned.iter().zip(requests).map(|(p, r)| async move {
        let due = start + Duration::from_secs_f64(r.at_s.max(0.0));
        tokio::time::sleep_until(due.into()).await;
        ReplayRecord {
            class: r.class.clone(),
            record: send(client, spec, p, r.at_s).await,
        }
    });
    Ok(futures_util::future::join_all(tasks).await)
}

/// A prompt of `len` tokens: token ids, or words of about one token each.
fn draw_prompt(token_prompts: bool, len: usize, rng: &mut StdRng) -> Value {
    if token_prompts {
        // Ordinary vocabulary ids, away from special tokens at either end.
        json!(
            (0..len)
                .map(|_| rng.random_range(300..20_000u32))
                .collect::<Vec<_>>()
        )
    } else {
        let words: Vec<&str> = (0..len)
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect();
        json!(words.join(" "))
    }
}

/// The run's requests, drawn one after another from its seed: the same seed gives the same sequence
/// however many are taken.
fn draw_requests(spec: &LoadSpec) -> impl Iterator<Item = Planned> + Send + '_ {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    std::iter::repeat_with(move || {
        let prompt_len = spec.shape.prompt_tokens.draw(&mut rng).max(1);
        let max_tokens = spec.shape.output_tokens.draw(&mut rng).max(1);
        Planned {
            prompt: draw_prompt(spec.token_prompts, prompt_len, &mut rng),
            prompt_len,
            max_tokens,
            class: None,
        }
    })
}

#[cfg(test)]
fn plan_requests(spec: &LoadSpec, count: usize) -> Vec<Planned> {
    draw_requests(spec).take(count).collect()
}

/// Poisson arrival offsets in seconds from the start, for at most `limit` requests (0: no limit)
/// and before `duration_s` when given; all zeros (closed loop) otherwise.
fn arrival_offsets(spec: &LoadSpec, limit: usize, duration_s: Option<f64>) -> Vec<f64> {
    let cap = if limit == 0 { usize::MAX } else { limit };
    let Arrival::Poisson { rate } = spec.shape.arrival else {
        return vec![0.0; limit];
    };
    let mut rng = StdRng::seed_from_u64(spec.seed ^ 0xA5A5_5A5A);
    let mut t = 0.0;
    std::iter::repeat_with(|| {
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        t += -u.ln() / rate;
        t
    })
    .take(cap)
    .take_while(|&at| duration_s.is_none_or(|d| at < d))
    .collect()
}

fn validate(spec: &LoadSpec) -> Result<(), LoadError> {
    let bad = |m: &str| Err(LoadError::Spec(m.to_owned()));
    match spec.shape.duration_s {
        None if spec.shape.requests == 0 => return bad("requests must be at least 1"),
        Some(d) if !(d.is_finite() && d > 0.0) => {
            return bad("the duration must be a positive number of seconds");
        }
        _ => {}
    }
    match spec.shape.arrival {
        Arrival::Closed { concurrency: 0 } => return bad("concurrency must be at least 1"),
        Arrival::Poisson { rate } if !(rate.is_finite() && rate > 0.0) => {
            return bad("the Poisson rate must be a positive number");
        }
        _ => {}
    }
    if spec.shape.prompt_tokens.min() == 0 || spec.shape.output_tokens.min() == 0 {
        return bad("prompt and output lengths must be at least 1");
    }
    if !spec.base_url.starts_with("http://") && !spec.base_url.starts_with("https://") {
        return bad("the endpoint must be an http:// or https:// URL");
    }
    Ok(())
}

/// Runs the warm-up, then the measured requests (a count, or for a duration), and reports.
///
/// # Errors
/// When the spec is invalid or the HTTP client cannot be built; failed requests are counted instead.
pub async fn run(spec: &LoadSpec) -> Result<LoadReport, LoadError> {
    validate(spec)?;
    let client = reqwest::Client::builder()
        .timeout(spec.timeout)
        .pool_max_idle_per_host(1024)
        .build()?;
    if spec.shape.warmup > 0 {
        let warm = LoadSpec {
            seed: spec.seed.wrapping_add(1),
            shape: Shape {
                requests: spec.shape.warmup,
                duration_s: None,
                warmup: 0,
                ..spec.shape.clone()
            },
            ..spec.clone()
        };
        run_measured(&client, &warm).await;
    }
    let (records, duration) = run_measured(&client, spec).await;
    Ok(LoadReport::from_records(records, duration, &spec.sla))
}

/// Sends the spec's requests with its arrival process until its count or duration is reached; the
/// records in the order the requests were drawn, and the seconds from the first send to the last answer.
async fn run_measured(client: &reqwest::Client, spec: &LoadSpec) -> (Vec<RequestRecord>, f64) {
    let (limit, duration_s) = (spec.shape.requests, spec.shape.duration_s);
    let start = Instant::now();
    let records = match spec.shape.arrival {
        Arrival::Closed { concurrency } => {
            let cap = if limit == 0 { usize::MAX } else { limit };
            let queue = std::sync::Mutex::new(draw_requests(spec).take(cap).enumerate());
            let clients = (0..concurrency).map(|_| async {
                let mut out = Vec::new();
                loop {
                    let arrival = start.elapsed().as_secs_f64();
                    if duration_s.is_some_and(|d| arrival >= d) {
                        break;
                    }
                    let next = queue.lock().map(|mut q| q.next()).ok().flatten();
                    let Some((i, p)) = next else { break };
                    out.push((i, send(client, spec, &p, arrival).await));
                }
                out
            });
            let mut all: Vec<(usize, RequestRecord)> = futures_util::future::join_all(clients)
                .await
                .into_iter()
                .flatten()
                .collect();
            all.sort_by_key(|(i, _)| *i);
            all.into_iter().map(|(_, r)| r).collect()
        }
        Arrival::Poisson { .. } => {
            let offsets = arrival_offsets(spec, limit, duration_s);
            let tasks = draw_requests(spec).zip(offsets).map(|(p, at)| async move {
                let due = start + Duration::from_secs_f64(at);
                tokio::time::sleep_until(due.into()).await;
                send(client, spec, &p, at).await
            });
            futures_util::future::join_all(tasks).await
        }
    };
    (records, start.elapsed().as_secs_f64())
}

/// Sends one streaming request and times its chunks.
async fn send(
    client: &reqwest::Client,
    spec: &LoadSpec,
    p: &Planned,
    arrival_s: f64,
) -> RequestRecord {
    let started = Instant::now();
    let mut record = RequestRecord {
        arrival_s,
        ttft_s: 0.0,
        itl_s: Vec::new(),
        e2e_s: 0.0,
        prompt_tokens: p.prompt_len,
        output_tokens: 0,
        error: None,
        route: None,
    };
    if let Err(e) = stream_into(client, spec, p, started, &mut record).await {
        record.error = Some(e);
    }
    record.e2e_s = started.elapsed().as_secs_f64();
    if record.error.is_none() && record.output_tokens == 0 {
        record.error = Some("the answer held no output token".into());
    }
    record
}

async fn stream_into(
    client: &reqwest::Client,
    spec: &LoadSpec,
    p: &Planned,
    started: Instant,
    record: &mut RequestRecord,
) -> Result<(), String> {
    let (path, mut body) = match spec.api {
        Api::Completions => ("/v1/completions", json!({"prompt": p.prompt})),
        Api::Chat => (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": p.prompt}]}),
        ),
    };
    body["model"] = json!(spec.model);
    body["max_tokens"] = json!(p.max_tokens);
    body["temperature"] = json!(0);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    if spec.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    let mut request = client
        .post(format!("{}{path}", spec.base_url.trim_end_matches('/')))
        .json(&body);
    if let Some(key) = &spec.api_key {
        request = request.bearer_auth(key);
    }
    if let Some(class) = &p.class {
        request = request.header(SLA_CLASS_HEADER, class);
    }
    let response = request.send().await.map_err(|e| format!("send: {e}"))?;
    record.route = response
        .headers()
        .get(ROUTE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!(
            "HTTP {status}: {}",
            text.chars().take(200).collect::<String>()
        ));
    }
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut last: Option<Instant> = None;
    let mut chunks = 0usize;
    let mut usage_tokens = None;
    let mut done = false;
    while let Some(bytes) = stream.next().await {
        let bytes = bytes.map_err(|e| format!("stream: {e}"))?;
        let now = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buffer.find('\n') {
            let line: String = buffer.drain(..=end).collect();
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let event: Value = serde_json::from_str(data).map_err(|e| format!("bad chunk: {e}"))?;
            if let Some(error) = event.get("error") {
                return Err(format!("error chunk: {error}"));
            }
            if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                if let Some(n) = usage["prompt_tokens"].as_u64() {
                    record.prompt_tokens = n as usize;
                }
                usage_tokens = usage["completion_tokens"].as_u64().map(|n| n as usize);
            }
            let text = event["choices"][0]["text"]
                .as_str()
                .or_else(|| event["choices"][0]["delta"]["content"].as_str())
                .unwrap_or("");
            if text.is_empty() {
                continue;
            }
            chunks += 1;
            match last {
                None => record.ttft_s = (now - started).as_secs_f64(),
                Some(prev) => record.itl_s.push((now - prev).as_secs_f64()),
            }
            last = Some(now);
        }
    }
    if !done {
        return Err("the stream ended without [DONE]".into());
    }
    record.output_tokens = usage_tokens.unwrap_or(chunks);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ttft: f64, e2e: f64, tokens: usize) -> RequestRecord {
        RequestRecord {
            arrival_s: 0.0,
            ttft_s: ttft,
            itl_s: vec![(e2e - ttft) / (tokens - 1).max(1) as f64; tokens.saturating_sub(1)],
            e2e_s: e2e,
            prompt_tokens: 10,
            output_tokens: tokens,
            error: None,
            route: None,
        }
    }

    #[test]
    fn report_follows_the_metric_definitions() {
        let mut records: Vec<RequestRecord> = (1..=100)
            .map(|i| record(i as f64 / 1000.0, i as f64 / 100.0, 11))
            .collect();
        records.push(RequestRecord {
            error: Some("HTTP 500".into()),
            ..record(0.0, 0.0, 1)
        });
        let sla = Sla {
            ttft_ms: Some(50.0),
            ..Sla::default()
        };
        let r = LoadReport::from_records(records, 10.0, &sla);
        assert_eq!((r.requests, r.errors), (101, 1));
        assert!((r.ttft_ms.p50 - 50.0).abs() < 0.1, "{:?}", r.ttft_ms);
        assert!((r.ttft_ms.p99 - 99.0).abs() < 0.1, "{:?}", r.ttft_ms);
        // TPOT of request i = (i/100 - i/1000) / 10 s = 0.9 i ms.
        assert!((r.tpot_ms.p50 - 45.0).abs() < 0.1, "{:?}", r.tpot_ms);
        assert!((r.itl_ms.p99 - 89.1).abs() < 0.2, "{:?}", r.itl_ms);
        assert_eq!(r.output_tokens_per_s, 110.0);
        assert_eq!(r.total_tokens_per_s, 210.0);
        assert_eq!(r.requests_per_s, 10.0);
        assert_eq!(r.goodput_requests_per_s, 5.0);
        assert!((r.sla_attainment - 50.0 / 101.0).abs() < 1e-12);
        assert_eq!(r.error_samples, ["HTTP 500"]);
    }

    #[test]
    fn plans_are_seeded_and_poisson_rates_hold() {
        let spec = LoadSpec {
            base_url: "http://127.0.0.1:1".into(),
            model: "m".into(),
            api_key: None,
            api: Api::Completions,
            shape: Shape {
                prompt_tokens: Lengths::Uniform { min: 5, max: 9 },
                output_tokens: Lengths::Fixed(4),
                arrival: Arrival::Poisson { rate: 20.0 },
                requests: 4000,
                duration_s: None,
                warmup: 0,
            },
            token_prompts: true,
            ignore_eos: true,
            sla: Sla::default(),
            seed: 7,
            timeout: Duration::from_secs(1),
        };
        let a = plan_requests(&spec, 50);
        let b = plan_requests(&spec, 50);
        assert_eq!(format!("{:?}", a), format!("{:?}", b));
        assert!(
            a.iter()
                .all(|p| (5..=9).contains(&p.prompt_len) && p.max_tokens == 4)
        );
        let offsets = arrival_offsets(&spec, 4000, None);
        let rate = 4000.0 / offsets.last().expect("offsets");
        assert!((rate - 20.0).abs() < 1.0, "{rate}");
        let mut bad = spec.clone();
        bad.shape.arrival = Arrival::Closed { concurrency: 0 };
        assert!(validate(&bad).is_err());

        let until = arrival_offsets(&spec, 0, Some(50.0));
        assert!(until.iter().all(|&at| at < 50.0));
        assert_eq!(
            until[..],
            offsets[..until.len()],
            "the same seed, cut at the duration"
        );
        assert!(
            (until.len() as f64 - 1000.0).abs() < 120.0,
            "{}",
            until.len()
        );
        assert_eq!(
            arrival_offsets(&spec, 10, Some(50.0)).len(),
            10,
            "a count caps it"
        );
        let mut timed = spec.clone();
        timed.shape.requests = 0;
        assert!(validate(&timed).is_err(), "neither a count nor a duration");
        timed.shape.duration_s = Some(f64::NAN);
        assert!(validate(&timed).is_err());
    }

    /// A closed loop run for a duration starts no request after it, whatever the answers (here, refused
    /// connections), and counts every request it sent.
    #[tokio::test]
    async fn a_timed_closed_loop_stops_sending_at_its_duration() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        drop(listener);
        let spec = LoadSpec {
            base_url: format!("http://127.0.0.1:{port}"),
            model: "m".into(),
            api_key: None,
            api: Api::Completions,
            shape: Shape {
                prompt_tokens: Lengths::Fixed(4),
                output_tokens: Lengths::Fixed(4),
                arrival: Arrival::Closed { concurrency: 2 },
                requests: 0,
                duration_s: Some(0.4),
                warmup: 0,
            },
            token_prompts: true,
            ignore_eos: true,
            sla: Sla::default(),
            seed: 3,
            timeout: Duration::from_secs(1),
        };
        let report = run(&spec).await.expect("runs");
        assert!(report.requests >= 2, "{}", report.requests);
        assert_eq!(report.errors, report.requests);
        assert_eq!(report.records.len(), report.requests);
        assert!(report.records.iter().all(|r| r.arrival_s < 0.4));
        assert!(
            report.duration_s >= 0.4 && report.duration_s < 2.0,
            "{}",
            report.duration_s
        );
    }
}
