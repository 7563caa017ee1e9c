//! A mirror of one CPU endpoint: the planner's step-by-step [`BatchingHost`] fed with the requests
//! the gateway sends there and kept in step by what they show (their first byte, their end). A new
//! request's TTFT and E2E are projected on it from the endpoint's actual queue: the slots it waits
//! for, the prompts prefilled ahead of its own, the decode steps it shares with the requests running.
//! Prompts that arrive while it decodes share its steps too; they are unknown when it is routed, so
//! the projection takes them as a mean: at the endpoint's recent arrival rate `λ` of prompts of mean
//! length `P`, each adding `c(P)` seconds to the step it joins, a share `ρ = λ c(P)` of the time goes
//! to them, and the decode after the first token stretches by `1 / (1 - ρ)`.

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
}

/// Time constant of the arrival rates, seconds.
const ARRIVAL_WINDOW_S: f64 = 30.0;
/// Shortest span the arrival rates are averaged over, seconds: a first request alone is no rate.
const MIN_ARRIVAL_SPAN_S: f64 = 5.0;
/// Largest share of the time projected to go to prompts still to come.
const MAX_PROMPT_SHARE: f64 = 0.8;

/// Exponentially decayed counts of the requests and prompt tokens admitted.
#[derive(Debug, Clone, Copy, Default)]
struct Arrivals {
    /// When the first was admitted, mirror seconds.
    first: Option<f64>,
    /// When the counts were last brought up to date.
    at: f64,
    requests: f64,
    prompt_tokens: f64,
}

impl Arrivals {
    fn decay_to(&mut self, t: f64) {
        let keep = (-(t - self.at).max(0.0) / ARRIVAL_WINDOW_S).exp();
        self.requests *= keep;
        self.prompt_tokens *= keep;
        self.at = self.at.max(t);
    }

    fn admit(&mut self, t: f64, prompt_tokens: f64) {
        self.decay_to(t);
        self.first.get_or_insert(t);
        self.requests += 1.0;
        self.prompt_tokens += prompt_tokens;
    }

    /// Requests per second and their mean prompt length at `t`; none before the first.
    fn rate(mut self, t: f64) -> Option<(f64, f64)> {
        let first = self.first?;
        self.decay_to(t);
        let span = (t - first).max(MIN_ARRIVAL_SPAN_S);
        let window = ARRIVAL_WINDOW_S * (1.0 - (-span / ARRIVAL_WINDOW_S).exp());
        let mean_prompt = self.prompt_tokens / self.requests.max(f64::MIN_POSITIVE);
        Some((self.requests / window, mean_prompt))
    }
}

/// A request on a [`Twin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwinKey(usize);

impl Twin {
    /// An idle mirror of an endpoint serving with `curve`, its clock starting at `origin`.
    pub fn new(curve: &ServiceCurve, origin: Instant) -> Self {
        Self {
            origin,
            mirror: Mutex::new(Mirror {
                host: BatchingHost::new(curve),
                arrivals: Arrivals::default(),
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
        mirror.arrivals.admit(t, f64::from(prompt_tokens));
        TwinKey(key)
    }

    /// The request's first byte came back at `now`: its prompt is done.
    pub fn first_byte(&self, key: TwinKey, now: Instant) {
        let t = self.seconds(now);
        self.mirror().host.first_token_seen(t, key.0);
    }

    /// The request ended at `now` (answered or not).
    pub fn ended(&self, key: TwinKey, now: Instant) {
        let t = self.seconds(now);
        self.mirror().host.finished_seen(t, key.0);
    }

    /// What a request of `prompt_tokens` and `output_tokens` sent at `now` would get: TTFT and E2E in
    /// the engine, seconds, its decode stretched by the prompts expected to arrive meanwhile.
    pub fn project(&self, now: Instant, prompt_tokens: u32, output_tokens: u32) -> Prediction {
        let t = self.seconds(now);
        // The projection runs on a copy, outside the lock that requests on their way take.
        let Mirror { host, arrivals } = self.mirror().clone();
        let alone = host.project(t, f64::from(prompt_tokens), f64::from(output_tokens));
        let share = self.share_of(arrivals, t);
        Prediction {
            ttft_s: alone.ttft_s,
            e2e_s: alone.ttft_s + (alone.e2e_s - alone.ttft_s).max(0.0) / (1.0 - share),
        }
    }

    /// The share of the time at `t` expected to go to prompts still to come (`ρ` above).
    #[cfg(test)]
    fn prompt_share(&self, t: f64) -> f64 {
        let arrivals = self.mirror().arrivals;
        self.share_of(arrivals, t)
    }

    /// The share of the time at `t` that prompts arriving as `arrivals` did are expected to take.
    fn share_of(&self, arrivals: Arrivals, t: f64) -> f64 {
        let Some((rate, mean_prompt)) = arrivals.rate(t) else {
            return 0.0;
        };
        let cost = self.curve.step_s(1.0, mean_prompt) - self.curve.step_s(1.0, 0.0);
        (rate * cost).clamp(0.0, MAX_PROMPT_SHARE)
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
        // The one arrival seen is taken as a rate of prompts still to come.
        let stretch = 1.0 / (1.0 - twin.prompt_share(twin.seconds(later)));
        let decode = |p: Prediction| p.e2e_s - p.ttft_s;
        assert!(stretch > 1.0, "{stretch}");
        assert!(
            near(decode(after_end), decode(alone) * stretch),
            "{after_end:?}"
        );
    }

    /// Requests that keep arriving take a share of the steps: one 100-token prompt a second at 1 ms a
    /// token is a tenth of the time, so the decode after the first token stretches by about 1/0.9;
    /// once they stop, the share fades.
    #[test]
    fn steady_arrivals_stretch_the_decode_and_fade_when_they_stop() {
        let t0 = Instant::now();
        let twin = Twin::new(&curve(), t0);
        let alone = twin.project(t0, 100, 11);
        for s in 0..120 {
            let at = t0 + Duration::from_secs(s);
            let key = twin.admit(at, 100, 1);
            twin.first_byte(key, at);
            twin.ended(key, at);
        }
        let decode = |p: Prediction| p.e2e_s - p.ttft_s;
        let busy = twin.project(t0 + Duration::from_secs(120), 100, 11);
        let stretch = decode(busy) / decode(alone);
        assert!((1.08..1.15).contains(&stretch), "{stretch} ({busy:?})");
        assert!(near(busy.ttft_s, alone.ttft_s), "{busy:?}");
        let quiet = twin.project(t0 + Duration::from_secs(420), 100, 11);
        assert!(decode(quiet) / decode(alone) < 1.001, "{quiet:?}");
    }
}
