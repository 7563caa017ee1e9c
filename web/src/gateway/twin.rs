//! A mirror of one CPU endpoint: the planner's step-by-step [`BatchingHost`] fed with the requests
//! the gateway sends there and kept in step by what they show (their first byte, their end). A new
//! request's TTFT and E2E are projected on it from the endpoint's actual queue: the slots it waits
//! for, the prompts prefilled ahead of its own, the decode steps it shares with the requests running.

use std::{
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use strata_planner::{route::Prediction, service::ServiceCurve, sim::BatchingHost};

/// One endpoint's mirror.
#[derive(Debug)]
pub struct Twin {
    /// The mirror's time 0.
    origin: Instant,
    host: Mutex<BatchingHost>,
    /// The key of the next request admitted.
    next: AtomicUsize,
}

/// A request on a [`Twin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwinKey(usize);

impl Twin {
    /// An idle mirror of an endpoint serving with `curve`, its clock starting at `origin`.
    pub fn new(curve: &ServiceCurve, origin: Instant) -> Self {
        Self {
            origin,
            host: Mutex::new(BatchingHost::new(curve)),
            next: AtomicUsize::new(0),
        }
    }

    fn seconds(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.origin).as_secs_f64()
    }

    fn host(&self) -> std::sync::MutexGuard<'_, BatchingHost> {
        self.host.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request of `prompt_tokens` expecting `output_tokens` was sent at `now`.
    pub fn admit(&self, now: Instant, prompt_tokens: u32, output_tokens: u32) -> TwinKey {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let t = self.seconds(now);
        self.host()
            .admit(t, key, f64::from(prompt_tokens), f64::from(output_tokens));
        TwinKey(key)
    }

    /// The request's first byte came back at `now`: its prompt is done.
    pub fn first_byte(&self, key: TwinKey, now: Instant) {
        let t = self.seconds(now);
        self.host().first_token_seen(t, key.0);
    }

    /// The request ended at `now` (answered or not).
    pub fn ended(&self, key: TwinKey, now: Instant) {
        let t = self.seconds(now);
        self.host().finished_seen(t, key.0);
    }

    /// What a request of `prompt_tokens` and `output_tokens` sent at `now` would get, nothing arriving
    /// after it: TTFT and E2E in the engine, seconds.
    pub fn project(&self, now: Instant, prompt_tokens: u32, output_tokens: u32) -> Prediction {
        let t = self.seconds(now);
        // The projection runs on a copy, outside the lock that requests on their way take.
        let host = self.host().clone();
        host.project(t, f64::from(prompt_tokens), f64::from(output_tokens))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One slot-free engine: 10 ms a decode step, 1 ms a prompt token.
    fn curve() -> ServiceCurve {
        ServiceCurve {
            prefill_tokens_per_s: 1000.0,
            step_prefill_tokens_per_s: Some(1000.0),
            ..ServiceCurve::fixed(4, 0.010)
        }
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn an_idle_endpoint_projects_the_request_alone() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let p = twin.project(t0, 100, 11);
        assert!(near(p.ttft_s, 0.1 + 0.0), "{p:?}");
        assert!(near(p.e2e_s, 0.1 + 10.0 * 0.010), "{p:?}");
    }

    #[test]
    fn requests_ahead_delay_the_projection_until_they_are_seen_to_end() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let alone = twin.project(t0, 100, 11);
        let ahead = twin.admit(t0, 300, 50);
        let behind = twin.project(t0, 100, 11);
        assert!(
            behind.ttft_s > alone.ttft_s + 0.29,
            "its prompt waits for the 300 ahead: {behind:?} against {alone:?}"
        );
        assert!(behind.e2e_s > alone.e2e_s, "{behind:?}");
        let later = t0 + Duration::from_millis(50);
        twin.first_byte(ahead, later);
        let after_first = twin.project(later, 100, 11);
        assert!(
            after_first.ttft_s < behind.ttft_s - 0.2,
            "the prompt ahead is done: {after_first:?}"
        );
        twin.ended(ahead, later);
        let after_end = twin.project(later, 100, 11);
        assert!(near(after_end.ttft_s, alone.ttft_s), "{after_end:?}");
        assert!(near(after_end.e2e_s, alone.e2e_s), "{after_end:?}");
    }
}
