//! Endpoint health: a circuit breaker per endpoint (closed -> open after N consecutive failures -> one
//! probe when the open time is over -> closed on success, open again with a doubled wait on failure), and
//! live load figures (in-flight count, EWMA of TTFT and of time per output token) for the router.
//!
//! Who probes an open breaker depends on the gateway: with active health checks (the background
//! `check_loop`) the first check after the open time is the probe, and live traffic never goes to an
//! endpoint until a probe has succeeded; without them, the first live request after the open time is
//! the probe.
//!
//! The breaker takes the current [`Instant`] as an argument, so its tests drive a fake clock and never
//! sleep.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use strata_planner::route::{Correction, Prediction};

/// Where a breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Traffic flows; `failures` consecutive failures so far.
    Closed {
        /// Consecutive failures.
        failures: u32,
    },
    /// No traffic until `until`.
    Open {
        /// When a probe may go.
        until: Instant,
        /// How long this opening lasts (doubles on each failed probe).
        wait: Duration,
    },
    /// One probe is out; others wait for its outcome.
    HalfOpen {
        /// The wait to use if the probe fails.
        wait: Duration,
    },
}

impl BreakerState {
    /// 0 closed, 1 half-open, 2 open (the `/metrics` gauge).
    pub fn gauge(&self) -> i64 {
        match self {
            BreakerState::Closed { .. } => 0,
            BreakerState::HalfOpen { .. } => 1,
            BreakerState::Open { .. } => 2,
        }
    }
}

/// What sends the probe that may close an open breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prober {
    /// The first live request after the open time.
    Traffic,
    /// The first active health check after the open time; live requests wait for its success.
    HealthChecks,
}

/// A consecutive-failures circuit breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    state: BreakerState,
    threshold: u32,
    base_wait: Duration,
    prober: Prober,
}

impl Breaker {
    /// Longest wait, as a multiple of the base wait.
    pub const MAX_BACKOFF: u32 = 16;

    /// A closed breaker that opens after `threshold` consecutive failures for `wait`.
    pub fn new(threshold: u32, wait: Duration) -> Self {
        Self {
            state: BreakerState::Closed { failures: 0 },
            threshold: threshold.max(1),
            base_wait: wait,
            prober: Prober::Traffic,
        }
    }

    /// The same breaker, probed by `prober`.
    pub fn probed_by(self, prober: Prober) -> Self {
        Self { prober, ..self }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a live request at `now` is the probe of a breaker open `until`.
    fn traffic_probes(&self, until: Instant, now: Instant) -> bool {
        self.prober == Prober::Traffic && now >= until
    }

    /// True when a request may be sent at `now`. An open breaker whose wait is over turns half-open and
    /// lets this one request through as the probe; a half-open breaker lets nothing else through.
    pub fn try_acquire(&mut self, now: Instant) -> bool {
        match self.state {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { until, wait } if self.traffic_probes(until, now) => {
                self.state = BreakerState::HalfOpen { wait };
                true
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => false,
        }
    }

    /// True when a request would be allowed at `now`, without taking the probe.
    pub fn is_available(&self, now: Instant) -> bool {
        match self.state {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { until, .. } => self.traffic_probes(until, now),
            BreakerState::HalfOpen { .. } => false,
        }
    }

    /// Records an active health check's outcome at `now`: on a closed breaker it counts like a
    /// request; on an open one whose wait is over it is the probe (success closes, failure re-opens
    /// with a doubled wait); before that, and while another probe is out, it changes nothing.
    pub fn on_check(&mut self, ok: bool, now: Instant) {
        match self.state {
            BreakerState::Open { until, wait } if now >= until => {
                self.state = BreakerState::HalfOpen { wait };
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen { .. } => return,
            BreakerState::Closed { .. } => {}
        }
        if ok {
            self.on_success();
        } else {
            self.on_failure(now);
        }
    }

    /// Records a success: the breaker closes.
    pub fn on_success(&mut self) {
        self.state = BreakerState::Closed { failures: 0 };
    }

    /// Records a failure at `now`.
    pub fn on_failure(&mut self, now: Instant) {
        self.state = match self.state {
            BreakerState::Closed { failures } if failures + 1 >= self.threshold => {
                BreakerState::Open {
                    until: now + self.base_wait,
                    wait: self.base_wait,
                }
            }
            BreakerState::Closed { failures } => BreakerState::Closed {
                failures: failures + 1,
            },
            BreakerState::HalfOpen { wait } => {
                let wait = (wait * 2).min(self.base_wait * Self::MAX_BACKOFF);
                BreakerState::Open {
                    until: now + wait,
                    wait,
                }
            }
            open @ BreakerState::Open { .. } => open,
        };
    }
}

/// An exponentially weighted moving average that decays toward zero while nothing is observed, so a
/// pool that was slow once gets traffic again (peak-EWMA style).
#[derive(Debug, Clone, Copy)]
pub struct Ewma {
    value: f64,
    at: Option<Instant>,
}

impl Ewma {
    /// Weight of a new observation.
    pub const ALPHA: f64 = 0.2;
    /// Time constant of the decay toward zero without observations.
    pub const DECAY: Duration = Duration::from_secs(10);

    /// Empty (reads 0).
    pub const fn new() -> Self {
        Self {
            value: 0.0,
            at: None,
        }
    }

    /// Adds an observation at `now`.
    pub fn observe(&mut self, x: f64, now: Instant) {
        let current = self.get(now);
        self.value = if self.at.is_none() {
            x
        } else {
            current + Self::ALPHA * (x - current)
        };
        self.at = Some(now);
    }

    /// The value at `now` (0 when nothing was observed).
    pub fn get(&self, now: Instant) -> f64 {
        match self.at {
            None => 0.0,
            Some(at) => {
                let dt = now.saturating_duration_since(at).as_secs_f64();
                self.value * (-dt / Self::DECAY.as_secs_f64()).exp()
            }
        }
    }
}

impl Default for Ewma {
    fn default() -> Self {
        Self::new()
    }
}

/// The online correction of an endpoint's service model: a factor on the predicted first token and
/// one on the predicted time after it, each moved after every answer by one step of subgradient
/// descent on that answer's absolute percentage error: the first token's factor on the TTFT's error
/// of a stream (on the E2E's of a whole answer, which shows nothing else), the other on the E2E's. They settle where the mean absolute percentage error of the corrected predictions is
/// least (a median, which one stray answer moves by one step only) and follow a host whose pace
/// changes. The factors live in log space; the nth answer's step is at most
/// max([`Learner::RATE`], [`Learner::FIRST_RATE`] / sqrt(n)), so the first answers move them quickly
/// and later ones finely; each factor stays within [1/LIMIT, LIMIT].
#[derive(Debug, Clone, Copy, Default)]
pub struct Learner {
    /// Log of the first token's factor.
    first_token: f64,
    /// Log of the factor on the time after it.
    decode: f64,
    /// Answers learned from.
    seen: u64,
}

impl Learner {
    /// Largest step of a log factor per answer, once many were seen.
    pub const RATE: f64 = 0.02;
    /// Largest step of a log factor on the first answer.
    pub const FIRST_RATE: f64 = 0.2;
    /// Largest factor either way.
    pub const LIMIT: f64 = 10.0;

    /// Learns from one answer that was `predicted` with the correction of its time (carried to the
    /// tokens it produced): its TTFT when streamed, and its E2E, seconds. Answers with non-positive or
    /// non-finite figures teach nothing.
    pub fn observe(&mut self, predicted: Prediction, ttft: Option<f64>, e2e: f64) {
        let (first, after) = (predicted.ttft_s, predicted.e2e_s - predicted.ttft_s);
        let valid = |x: f64| x.is_finite() && x > 0.0;
        if !(valid(first) && valid(e2e) && after.is_finite() && after >= 0.0)
            || ttft.is_some_and(|t| !valid(t))
        {
            return;
        }
        // d|x - o|/o / d(log factor) = sign(x - o) * (the part the factor scales) / o, clipped to 1.
        let slope = |predicted: f64, observed: f64, part: f64| {
            (predicted - observed).signum() * (part / observed).min(1.0)
        };
        let first_slope = match ttft {
            Some(t) => slope(first, t, first),
            None => slope(first + after, e2e, first),
        };
        let decode_slope = slope(first + after, e2e, after);
        self.seen += 1;
        let rate = (Self::FIRST_RATE / (self.seen as f64).sqrt()).max(Self::RATE);
        let bound = Self::LIMIT.ln();
        let step =
            |log: f64, slope: f64| (log - rate * slope.clamp(-1.0, 1.0)).clamp(-bound, bound);
        self.first_token = step(self.first_token, first_slope);
        self.decode = step(self.decode, decode_slope);
    }

    /// The correction learned so far.
    pub fn correction(&self) -> Correction {
        Correction {
            first_token: self.first_token.exp(),
            decode: self.decode.exp(),
        }
    }
}

/// Latency figures of an endpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    /// TTFT, seconds.
    pub ttft: Ewma,
    /// Time per output token after the first, seconds.
    pub tpot: Ewma,
}

/// Live state of one endpoint, shared by requests and the health checker.
#[derive(Debug)]
pub struct EndpointHealth {
    /// Requests sent and not finished.
    pub in_flight: AtomicU32,
    /// Prompt tokens of the requests sent that have not had their first byte back yet.
    pub prompt_tokens_ahead: AtomicU32,
    /// Set by an admin drain: the endpoint gets no new requests.
    pub drained: AtomicBool,
    breaker: Mutex<Breaker>,
    latency: Mutex<Latency>,
    learner: Mutex<Learner>,
    /// Requests completed, for tests and metrics.
    pub completed: AtomicU64,
}

impl EndpointHealth {
    /// A healthy, idle endpoint.
    pub fn new(breaker: Breaker) -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            prompt_tokens_ahead: AtomicU32::new(0),
            drained: AtomicBool::new(false),
            breaker: Mutex::new(breaker),
            latency: Mutex::new(Latency::default()),
            learner: Mutex::new(Learner::default()),
            completed: AtomicU64::new(0),
        }
    }

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when the router may choose this endpoint at `now`.
    pub fn available(&self, now: Instant) -> bool {
        !self.drained.load(Ordering::Relaxed) && self.breaker().is_available(now)
    }

    /// Takes permission to send (the probe, if half-open).
    pub fn try_acquire(&self, now: Instant) -> bool {
        !self.drained.load(Ordering::Relaxed) && self.breaker().try_acquire(now)
    }

    /// Records a success.
    pub fn on_success(&self) {
        self.breaker().on_success();
    }

    /// Records a failure at `now`.
    pub fn on_failure(&self, now: Instant) {
        self.breaker().on_failure(now);
    }

    /// Records an active health check's outcome (see [`Breaker::on_check`]).
    pub fn on_check(&self, ok: bool, now: Instant) {
        self.breaker().on_check(ok, now);
    }

    /// The breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker().state()
    }

    /// The online correction of this endpoint's service model.
    pub fn correction(&self) -> Correction {
        self.learner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .correction()
    }

    /// Teaches the correction from one answered request: `learn` gets the learner.
    pub fn learn(&self, learn: impl FnOnce(&mut Learner)) {
        learn(&mut self.learner.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Adds an observed TTFT and per-token time.
    pub fn observe(&self, ttft: Duration, tpot: Option<Duration>, now: Instant) {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        l.ttft.observe(ttft.as_secs_f64(), now);
        if let Some(t) = tpot {
            l.tpot.observe(t.as_secs_f64(), now);
        }
    }

    /// Adds an observed per-token time only (answers that were not streamed).
    pub fn observe_tpot(&self, tpot: Duration, now: Instant) {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        l.tpot.observe(tpot.as_secs_f64(), now);
    }

    /// (EWMA TTFT, EWMA TPOT) at `now`, seconds.
    pub fn latency(&self, now: Instant) -> (f64, f64) {
        let l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        (l.ttft.get(now), l.tpot.get(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_once() {
        let t0 = Instant::now();
        let mut b = Breaker::new(3, Duration::from_secs(1));
        b.on_failure(t0);
        b.on_success();
        b.on_failure(t0);
        b.on_failure(t0);
        assert!(
            b.try_acquire(t0),
            "two failures after a success keep it closed"
        );
        b.on_failure(t0);
        assert!(matches!(b.state(), BreakerState::Open { .. }));
        assert!(!b.try_acquire(t0 + Duration::from_millis(999)));
        let t1 = t0 + Duration::from_secs(1);
        assert!(b.try_acquire(t1), "the probe");
        assert!(!b.try_acquire(t1), "only one probe");
        b.on_failure(t1);
        assert_eq!(
            b.state(),
            BreakerState::Open {
                until: t1 + Duration::from_secs(2),
                wait: Duration::from_secs(2)
            },
            "a failed probe doubles the wait"
        );
        let t2 = t1 + Duration::from_secs(2);
        assert!(b.try_acquire(t2));
        b.on_success();
        assert_eq!(b.state(), BreakerState::Closed { failures: 0 });
    }

    #[test]
    fn a_dead_endpoint_probed_by_checks_stays_unavailable_and_gets_only_probes() {
        let base = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut b = Breaker::new(3, base).probed_by(Prober::HealthChecks);
        let check_every = Duration::from_millis(500);
        let mut now = t0;
        for _ in 0..3 {
            b.on_check(false, now);
            now += check_every;
        }
        assert!(matches!(b.state(), BreakerState::Open { .. }));
        let mut probes = Vec::new();
        // Two minutes of failing checks: many open windows pass, none lets traffic through.
        while now < t0 + Duration::from_secs(120) {
            assert!(!b.is_available(now), "unavailable at {:?}", now - t0);
            assert!(!b.try_acquire(now), "no live request at {:?}", now - t0);
            let before = b.state();
            b.on_check(false, now);
            if b.state() != before {
                probes.push(now - t0);
            }
            now += check_every;
        }
        assert!(probes.len() >= 8, "probes at {probes:?}");
        let gaps: Vec<Duration> = probes.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.windows(2).all(|g| g[1] >= g[0]),
            "waits grow: {gaps:?}"
        );
        assert!(
            gaps.iter()
                .all(|&g| g <= base * Breaker::MAX_BACKOFF + check_every)
        );
        // The first passing check after the wait closes it; traffic flows again.
        let due = match b.state() {
            BreakerState::Open { until, .. } => until,
            other => panic!("open, not {other:?}"),
        };
        b.on_check(true, due - Duration::from_millis(1));
        assert!(
            !b.is_available(due),
            "a check before the wait is not the probe"
        );
        b.on_check(true, due);
        assert!(b.is_available(due) && b.try_acquire(due));
    }

    #[test]
    fn checks_count_as_requests_on_a_closed_breaker_and_wait_out_a_live_probe() {
        let t0 = Instant::now();
        let mut b = Breaker::new(2, Duration::from_secs(1));
        b.on_check(false, t0);
        b.on_check(true, t0);
        b.on_check(false, t0);
        assert_eq!(b.state(), BreakerState::Closed { failures: 1 });
        b.on_check(false, t0);
        let t1 = t0 + Duration::from_secs(1);
        assert!(b.try_acquire(t1), "traffic probes when checks do not");
        b.on_check(true, t1);
        assert!(
            matches!(b.state(), BreakerState::HalfOpen { .. }),
            "a check does not settle a live probe"
        );
    }

    #[test]
    fn the_wait_is_capped() {
        let mut now = Instant::now();
        let mut b = Breaker::new(1, Duration::from_secs(1));
        b.on_failure(now);
        for _ in 0..10 {
            now += Duration::from_secs(100);
            assert!(b.try_acquire(now));
            b.on_failure(now);
        }
        assert!(
            matches!(b.state(), BreakerState::Open { wait, .. } if wait == Duration::from_secs(16))
        );
    }

    #[test]
    fn ewma_weighs_and_decays() {
        let t0 = Instant::now();
        let mut e = Ewma::new();
        assert_eq!(e.get(t0), 0.0);
        e.observe(1.0, t0);
        assert_eq!(e.get(t0), 1.0);
        e.observe(2.0, t0);
        assert!((e.get(t0) - 1.2).abs() < 1e-12);
        let later = t0 + Ewma::DECAY;
        assert!((e.get(later) - 1.2 / std::f64::consts::E).abs() < 1e-9);
    }

    fn raw(ttft_s: f64, e2e_s: f64) -> Prediction {
        Prediction { ttft_s, e2e_s }
    }

    /// One answer predicted as `raw` with the learner's correction of the time.
    fn answer(l: &mut Learner, raw: Prediction, ttft: Option<f64>, e2e: f64) {
        let predicted = l.correction().apply(raw);
        l.observe(predicted, ttft, e2e);
    }

    /// A steady bias is learned within a few dozen answers; answers spread around the prediction
    /// leave the factor at their median weighted by 1/x (1 and 3 equally often: 1); bad figures
    /// teach nothing, and no answer moves a factor by more than one step.
    #[test]
    fn the_learner_descends_to_the_least_relative_error() {
        let mut l = Learner::default();
        assert_eq!(l.correction(), Correction::NONE);
        for _ in 0..100 {
            answer(&mut l, raw(1.0, 2.0), Some(1.5), 3.0);
        }
        let c = l.correction();
        assert!((c.first_token - 1.5).abs() < 0.05, "{c:?}");
        assert!((c.decode - 1.5).abs() < 0.05, "{c:?}");
        let mut l = Learner::default();
        for i in 0..400 {
            let seen = if i % 2 == 0 { 1.0 } else { 3.0 };
            answer(&mut l, raw(1.0, 1.0), Some(seen), seen);
        }
        assert!((l.correction().first_token - 1.0).abs() < 0.05, "{l:?}");
        let before = l.correction();
        answer(&mut l, raw(1.0, 2.0), Some(0.0), 3.0);
        answer(&mut l, raw(f64::NAN, 2.0), None, 3.0);
        answer(&mut l, raw(1.0, f64::INFINITY), None, 3.0);
        assert_eq!(l.correction(), before);
        answer(&mut l, raw(1.0, 2.0), Some(1e6), 1e6);
        let after = l.correction();
        assert!(after.first_token / before.first_token <= Learner::RATE.exp() + 1e-12);
        assert!(after.decode / before.decode <= Learner::RATE.exp() + 1e-12);
        // Early answers move the factors by larger steps.
        let mut fresh = Learner::default();
        answer(&mut fresh, raw(1.0, 2.0), Some(0.5), 1.0);
        let first = fresh.correction();
        assert!(
            (first.decode.ln() + Learner::FIRST_RATE).abs() < 1e-12
                && (first.first_token.ln() + Learner::FIRST_RATE).abs() < 1e-12,
            "{first:?}"
        );
    }
}
