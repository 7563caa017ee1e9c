//! A mirror of one CPU endpoint: the planner's step-by-step [`BatchingHost`] fed with the requests
//! the gateway sends there and kept in step by what they show (their first byte, the tokens they
//! stream, their end). A new request's TTFT and E2E are projected on it from the endpoint's actual
//! queue: the slots it waits for, the prompts prefilled ahead of its own, the decode steps it shares
//! with the requests running.
//! Requests that arrive while it runs share its steps too; they are unknown when it is routed, so the
//! projection draws them ([`projection::project`]): a Poisson stream at the endpoint's recent arrival
//! rate, with the lengths of its recent requests.

use std::{
    collections::VecDeque,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use strata_planner::{
    route::{Correction, Prediction},
    service::ServiceCurve,
    sim::{
        BatchingHost,
        projection::{self, Later},
    },
};

/// One endpoint's mirror.
#[derive(Debug)]
pub struct Twin {
    /// The mirror's time 0.
    origin: Instant,
    mirror: Mutex<Mirror>,
    curve: ServiceCurve,
    /// The key of the next request admitted.
    next: AtomicUsize,
}

/// The mirrored engine and the arrivals it has seen, under one lock.
#[derive(Debug, Clone)]
struct Mirror {
    host: BatchingHost,
    arrivals: Arrivals,
    /// (prompt tokens, output tokens) of the latest requests admitted, oldest first.
    recent: VecDeque<(f64, f64)>,
}

/// Time constant of the arrival rates, seconds.
const ARRIVAL_WINDOW_S: f64 = 30.0;
/// Shortest span the arrival rates are averaged over, seconds: a first request alone is no rate.
const MIN_ARRIVAL_SPAN_S: f64 = 5.0;
/// Requests whose lengths the projection draws later arrivals from.
const RECENT: usize = 64;

/// Exponentially decayed count of the requests admitted.
#[derive(Debug, Clone, Copy, Default)]
struct Arrivals {
    /// When the first was admitted, mirror seconds.
    first: Option<f64>,
    /// When the counts were last brought up to date.
    at: f64,
    requests: f64,
}

impl Arrivals {
    fn decay_to(&mut self, t: f64) {
        let keep = (-(t - self.at).max(0.0) / ARRIVAL_WINDOW_S).exp();
        self.requests *= keep;
        self.at = self.at.max(t);
    }

    fn admit(&mut self, t: f64) {
        self.decay_to(t);
        self.first.get_or_insert(t);
        self.requests += 1.0;
    }

    /// Requests per second at `t` (0 before the first).
    fn rate(mut self, t: f64) -> f64 {
        let Some(first) = self.first else {
            return 0.0;
        };
        self.decay_to(t);
        let span = (t - first).max(MIN_ARRIVAL_SPAN_S);
        let window = ARRIVAL_WINDOW_S * (1.0 - (-span / ARRIVAL_WINDOW_S).exp());
        self.requests / window
    }
}

/// A request on a [`Twin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwinKey {
    key: usize,
    /// The output tokens it was admitted with.
    output_tokens: u32,
}

impl Twin {
    /// An idle mirror of an endpoint serving with `curve`, its clock starting at `origin`.
    pub fn new(curve: &ServiceCurve, origin: Instant) -> Self {
        Self {
            origin,
            mirror: Mutex::new(Mirror {
                host: BatchingHost::new(curve),
                arrivals: Arrivals::default(),
                recent: VecDeque::with_capacity(RECENT),
            }),
            curve: curve.clone(),
            next: AtomicUsize::new(0),
        }
    }

    fn seconds(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.origin).as_secs_f64()
    }

    fn mirror(&self) -> std::sync::MutexGuard<'_, Mirror> {
        self.mirror.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request of `prompt_tokens` expecting `output_tokens` was sent at `now`.
    pub fn admit(&self, now: Instant, prompt_tokens: u32, output_tokens: u32) -> TwinKey {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let t = self.seconds(now);
        let mut mirror = self.mirror();
        mirror
            .host
            .admit(t, key, f64::from(prompt_tokens), f64::from(output_tokens));
        mirror.arrivals.admit(t);
        if mirror.recent.len() == RECENT {
            mirror.recent.pop_front();
        }
        mirror
            .recent
            .push_back((f64::from(prompt_tokens), f64::from(output_tokens)));
        TwinKey { key, output_tokens }
    }

    /// The request's first byte came back at `now`: its prompt is done.
    pub fn first_byte(&self, key: TwinKey, now: Instant) {
        let t = self.seconds(now);
        self.mirror().host.first_token_seen(t, key.key);
    }

    /// The request had shown `produced` output tokens by `now`: the mirror's decode of it goes on from
    /// there, so that a prompt held for the decodes to drain waits as long as the endpoint's do.
    pub fn tokens_seen(&self, key: TwinKey, now: Instant, produced: u64) {
        let t = self.seconds(now);
        let left = u64::from(key.output_tokens).saturating_sub(produced);
        self.mirror().host.decode_left_seen(t, key.key, left as f64);
    }

    /// The request ended at `now` (answered or not).
    pub fn ended(&self, key: TwinKey, now: Instant) {
        let t = self.seconds(now);
        self.mirror().host.finished_seen(t, key.key);
    }

    /// What a request of `prompt_tokens` and `output_tokens` sent at `now` would get: TTFT and E2E in
    /// the engine, seconds, beside the requests on the endpoint and those expected to arrive after it;
    /// first as the service model says, then with the endpoint's steps at the pace `correction`
    /// says (the same when it is none).
    pub fn project(
        &self,
        now: Instant,
        prompt_tokens: u32,
        output_tokens: u32,
        correction: Correction,
    ) -> (Prediction, Prediction) {
        let t = self.seconds(now);
        // The projection runs on a copy, outside the lock that requests on their way take.
        let Mirror {
            host,
            arrivals,
            mut recent,
        } = self.mirror().clone();
        let later = Later {
            rate: arrivals.rate(t),
            lengths: recent.make_contiguous(),
        };
        let (prompt, output) = (f64::from(prompt_tokens), f64::from(output_tokens));
        let raw = projection::project(&host, t, prompt, output, later);
        if correction == Correction::NONE {
            return (raw, raw);
        }
        let paced = host.with_curve(&self.curve.paced(correction.decode, correction.first_token));
        (raw, projection::project(&paced, t, prompt, output, later))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One slot-free engine: 10 ms a decode step, 1 ms a prompt token.
    fn curve() -> ServiceCurve {
        ServiceCurve::fixed(4, 0.010).prefilling(1000.0)
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn an_idle_endpoint_projects_the_request_alone() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let p = twin.project(t0, 100, 11, Correction::NONE).0;
        assert!(near(p.ttft_s, 0.1 + 0.0), "{p:?}");
        assert!(near(p.e2e_s, 0.1 + 10.0 * 0.010), "{p:?}");
    }

    #[test]
    fn requests_ahead_delay_the_projection_until_they_are_seen_to_end() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let alone = twin.project(t0, 100, 11, Correction::NONE).0;
        let ahead = twin.admit(t0, 300, 50);
        let behind = twin.project(t0, 100, 11, Correction::NONE).0;
        assert!(
            behind.ttft_s > alone.ttft_s + 0.29,
            "its prompt waits for the 300 ahead: {behind:?} against {alone:?}"
        );
        assert!(behind.e2e_s > alone.e2e_s, "{behind:?}");
        let later = t0 + Duration::from_millis(50);
        twin.first_byte(ahead, later);
        let after_first = twin.project(later, 100, 11, Correction::NONE).0;
        assert!(
            after_first.ttft_s < behind.ttft_s - 0.2,
            "the prompt ahead is done: {after_first:?}"
        );
        twin.ended(ahead, later);
        let after_end = twin.project(later, 100, 11, Correction::NONE).0;
        assert!(near(after_end.ttft_s, alone.ttft_s), "{after_end:?}");
        // The one arrival seen is a rate too low to meet this short request in most draws.
        assert!(near(after_end.e2e_s, alone.e2e_s), "{after_end:?}");
    }

    /// Requests that keep arriving share the steps of a long one: one 100-token prompt a second at
    /// 1 ms a token is a tenth of the time, so three seconds of decoding meet about three of them
    /// and stretch by a few tenths of a second; once they stop, the rate fades and so does the stretch.
    #[test]
    fn steady_arrivals_stretch_the_decode_and_fade_when_they_stop() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let alone = twin.project(t0, 100, 301, Correction::NONE).0;
        for s in 0..120 {
            let at = t0 + Duration::from_secs(s);
            let key = twin.admit(at, 100, 1);
            twin.first_byte(key, at);
            twin.ended(key, at);
        }
        let decode = |p: Prediction| p.e2e_s - p.ttft_s;
        let busy = twin
            .project(t0 + Duration::from_secs(120), 100, 301, Correction::NONE)
            .0;
        let stretch = decode(busy) / decode(alone);
        assert!((1.03..1.2).contains(&stretch), "{stretch} ({busy:?})");
        assert!(near(busy.ttft_s, alone.ttft_s), "{busy:?}");
        let quiet = twin
            .project(t0 + Duration::from_secs(420), 100, 301, Correction::NONE)
            .0;
        assert!(near(quiet.e2e_s, alone.e2e_s), "{quiet:?}");
    }

    /// A prompt held for the decodes to drain waits for the endpoint's longest decode as its stream
    /// shows it: the mirror's own pace would have this one nearly done (about 11 of 100 tokens left
    /// at 0.9 s, few enough to hold a 100-token prompt), while the endpoint shows 30 tokens out, so
    /// 71 to come, and the prompt runs with the next step (0.01 s away, then 0.11 s beside a decode).
    #[test]
    fn streamed_tokens_keep_the_mirror_decodes_in_step() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve().holding(2.0), t0);
        let ahead = twin.admit(t0, 10, 101);
        twin.first_byte(ahead, t0 + Duration::from_millis(10));
        let at = t0 + Duration::from_millis(900);
        let held = twin.project(at, 100, 1, Correction::NONE).0;
        assert!(
            held.ttft_s > 0.2,
            "the prompt waits for the drain: {held:?}"
        );
        twin.tokens_seen(ahead, at, 30);
        let synced = twin.project(at, 100, 1, Correction::NONE).0;
        assert!(synced.ttft_s < 0.13, "no drain is near: {synced:?}");
    }

    /// A correction runs the mirror's steps at its pace: on an idle endpoint twice as slow is twice
    /// as long; with requests arriving, a slower host also meets more of them, so the end stretches
    /// by more than the pace.
    #[test]
    fn a_correction_paces_the_mirror() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let slow = Correction {
            first_token: 2.0,
            decode: 2.0,
        };
        let (raw, paced) = twin.project(t0, 100, 301, slow);
        assert!(near(paced.ttft_s, 2.0 * raw.ttft_s) && near(paced.e2e_s, 2.0 * raw.e2e_s));
        for s in 0..120 {
            let at = t0 + Duration::from_secs(s);
            let key = twin.admit(at, 100, 1);
            twin.first_byte(key, at);
            twin.ended(key, at);
        }
        let (raw, paced) = twin.project(t0 + Duration::from_secs(120), 100, 301, slow);
        assert!(near(paced.ttft_s, 2.0 * raw.ttft_s), "{raw:?} {paced:?}");
        assert!(paced.e2e_s > 2.05 * raw.e2e_s, "{raw:?} {paced:?}");
    }
}
