//! Client keys: each key's token bucket (its rate limit) and the key a request authenticated with.

use std::{sync::Mutex, time::Instant};

use super::config::ApiKeyConfig;

/// The key a request authenticated with (index into the table's keys; none when the gateway has no keys).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyIndex(pub(crate) Option<usize>);

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A client key and its rate-limit bucket.
#[derive(Debug)]
pub struct KeyState {
    /// Its configuration.
    pub config: ApiKeyConfig,
    bucket: Mutex<Bucket>,
}

impl KeyState {
    /// A key whose bucket starts full at `now`.
    pub(crate) fn new(config: ApiKeyConfig, now: Instant) -> Self {
        Self {
            bucket: Mutex::new(Bucket {
                tokens: config.rate.map_or(0.0, |(_, burst)| burst),
                at: now,
            }),
            config,
        }
    }

    /// Takes one token at `now`; false when the key is over its rate.
    pub(crate) fn allow(&self, now: Instant) -> bool {
        let Some((rate, burst)) = self.config.rate else {
            return true;
        };
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + dt * rate).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(rate: Option<(f64, f64)>) -> ApiKeyConfig {
        ApiKeyConfig {
            name: "k".into(),
            key: "secret".into(),
            class: None,
            rate,
        }
    }

    #[test]
    fn the_bucket_spends_its_burst_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let k = KeyState::new(key(Some((2.0, 2.0))), t0);
        assert!(k.allow(t0) && k.allow(t0));
        assert!(!k.allow(t0), "the burst is spent");
        assert!(
            k.allow(t0 + Duration::from_millis(500)),
            "one token after 0.5 s at 2/s"
        );
        assert!(!k.allow(t0 + Duration::from_millis(500)));
    }

    #[test]
    fn a_key_without_a_rate_is_never_limited() {
        let t0 = Instant::now();
        let k = KeyState::new(key(None), t0);
        assert!((0..100).all(|_| k.allow(t0)));
    }
}
