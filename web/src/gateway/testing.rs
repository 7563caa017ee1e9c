//! Fixtures for the gateway's unit tests: configs, tables and requests built in memory, no sockets.

use std::{collections::HashMap, sync::atomic::AtomicUsize};

use axum::body::Bytes;

use super::{
    config::GatewayConfig,
    prepare::{Api, Prepared, Targets},
    table::Table,
};

/// The index of the class with a 600 s end-to-end SLA.
pub(crate) const LAX: usize = 0;
/// The index of the class with a 150 ms TTFT SLA.
pub(crate) const TIGHT: usize = 1;

/// A CPU pool named `name` prefilling `prefill` tokens/s, with an endpoint per URL.
pub(crate) fn cpu_pool(name: &str, prefill: f64, urls: &[&str]) -> String {
    let mut s = format!(
        "[[pool]]\nname = \"{name}\"\nkind = \"cpu\"\nmodels = [\"m\"]\nmax_concurrency = 4\n\
         price_per_hour_usd = 0.36\ntokens_per_s = 100\n\
         service = {{ slots = 4, prefill_tokens_per_s = {prefill:?}, tpot_by_batch = [[1.0, 0.001]], copies = 1.0 }}\n"
    );
    s.push_str(&endpoints(urls));
    s
}

/// A GPU pool named `gpu` with an endpoint per URL.
pub(crate) fn gpu_pool(urls: &[&str]) -> String {
    let mut s = "[[pool]]\nname = \"gpu\"\nkind = \"gpu\"\nmodels = [\"m\"]\n\
                 price_per_million_tokens_usd = 1000.0\nttft_p99_ms = 50\ntpot_p99_ms = 1\n"
        .to_owned();
    s.push_str(&endpoints(urls));
    s
}

fn endpoints(urls: &[&str]) -> String {
    urls.iter()
        .map(|u| format!("[[pool.endpoint]]\nurl = \"{u}\"\n"))
        .collect()
}

/// A config of `pools` (TOML) with classes [`LAX`] and [`TIGHT`], `attempts` tries per request
/// `backoff_ms` apart, and no active health checks.
pub(crate) fn config(pools: &str, attempts: u32, backoff_ms: u64) -> GatewayConfig {
    let toml = format!(
        "listen = \"127.0.0.1:0\"\ndefault_class = \"lax\"\n\
         [retry]\nattempts = {attempts}\nbackoff_ms = {backoff_ms}\n\
         [breaker]\nfailures = 3\nopen_ms = 60000\n[health]\ninterval_ms = 0\n\
         [[class]]\nname = \"lax\"\ne2e_p99_ms = 600000\npriority = 1\n\
         [[class]]\nname = \"tight\"\nttft_p99_ms = 150\npriority = 2\n{pools}"
    );
    GatewayConfig::from_toml(&toml, &HashMap::<String, String>::new()).expect("a valid test config")
}

/// The table of `config`.
pub(crate) fn table(config: GatewayConfig) -> Table {
    Table::build(config, None, &AtomicUsize::new(0)).expect("a table")
}

/// A chat request for model `m` in `class`: 100 prompt tokens, 10 output tokens.
pub(crate) fn request(class: usize, stream: bool) -> Prepared {
    Prepared {
        id: "req-1".into(),
        class,
        targets: Targets::default(),
        model: "m".into(),
        stream,
        client_usage: false,
        prompt_tokens: 100,
        output_tokens: 10,
        body: Bytes::from_static(br#"{"model":"m"}"#),
        api: Api::Chat,
    }
}
