//! Token sampling and stop strings: validated [`SamplingParams`], a seeded [`Sampler`] that runs
//! llama.cpp's default chain (repetition penalty, top-k, top-p, min-p, temperature, draw) over one
//! reused candidate buffer, and a [`StopMatcher`] that cuts decoded text at the first stop string.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How to pick each next token and when to stop generating.
///
/// Fields missing from serialized input take their [`Default`] values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 turns the filter off.
    pub top_k: usize,
    /// Keep the smallest set of likeliest tokens whose probability reaches `top_p`; 1.0 is off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the likeliest one; 0 is off.
    pub min_p: f32,
    /// Penalty for tokens seen in the last `repeat_last_n` tokens of history; 1.0 is off.
    pub repetition_penalty: f32,
    /// How many of the most recent history tokens the repetition penalty looks at; 0 is off.
    pub repeat_last_n: usize,
    /// Seed of the random draw: the same seed and logits give the same tokens.
    pub seed: u64,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Strings that end generation; the stop string itself is not part of the output.
    pub stop: Vec<String>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
            max_tokens: 256,
            stop: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Deterministic argmax decoding: temperature 0 and every filter off.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Self::default()
        }
    }

    /// Whether these parameters always pick the most likely (penalized) token.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }

    /// Checks every value is in range.
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(invalid(
                "temperature",
                "a finite number >= 0",
                self.temperature,
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(invalid("top_p", "in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(invalid("min_p", "in [0, 1]", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(invalid(
                "repetition_penalty",
                "a finite number > 0",
                self.repetition_penalty,
            ));
        }
        if self.max_tokens == 0 {
            return Err(invalid("max_tokens", "at least 1", self.max_tokens));
        }
        if let Some(i) = self.stop.iter().position(String::is_empty) {
            return Err(Error::InvalidRequest(format!(
                "stop[{i}] must not be an empty string"
            )));
        }
        Ok(())
    }
}

/// The error for a sampling field out of range.
fn invalid(field: &str, expected: &str, got: impl std::fmt::Display) -> Error {
    Error::InvalidRequest(format!("{field} must be {expected}, got {got}"))
}

/// One token still in the running, with its (penalized) logit and scratch probability.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: u32,
    logit: f32,
    p: f32,
}

/// Picks tokens from logits under one request's [`SamplingParams`].
///
/// Holds the seeded generator and reusable buffers: after the first call, sampling does not
/// allocate, and greedy sampling never copies the vocabulary.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    candidates: Vec<Candidate>,
    penalized: Vec<u32>,
}

impl Sampler {
    /// A sampler for `params`, its generator seeded from `params.seed`.
    ///
    /// # Errors
    /// [`Error::InvalidRequest`] when `params` do not [`validate`](SamplingParams::validate).
    pub fn new(params: &SamplingParams) -> Result<Self> {
        params.validate()?;
        Ok(Self {
            params: params.clone(),
            rng: StdRng::seed_from_u64(params.seed),
            candidates: Vec::new(),
            penalized: Vec::with_capacity(params.repeat_last_n.min(4096)),
        })
    }

    /// The parameters this sampler runs.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` (one per vocabulary id), penalizing tokens in the tail
    /// of `history`. NaN logits are never picked unless all are NaN; empty `logits` yield 0.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        self.collect_penalized(history);
        if self.params.is_greedy() {
            return argmax(logits, &self.penalized, self.params.repetition_penalty);
        }
        fill_candidates(
            &mut self.candidates,
            logits,
            &self.penalized,
            self.params.repetition_penalty,
        );
        if self.candidates.is_empty() {
            return 0;
        }
        top_k(&mut self.candidates, self.params.top_k);
        top_p(&mut self.candidates, self.params.top_p);
        min_p(&mut self.candidates, self.params.min_p);
        draw(&mut self.candidates, self.params.temperature, &mut self.rng)
    }

    /// Fills `self.penalized` with the sorted, distinct ids of the penalty window.
    fn collect_penalized(&mut self, history: &[u32]) {
        self.penalized.clear();
        let n = self.params.repeat_last_n;
        if self.params.repetition_penalty == 1.0 || n == 0 {
            return;
        }
        self.penalized
            .extend_from_slice(&history[history.len().saturating_sub(n)..]);
        self.penalized.sort_unstable();
        self.penalized.dedup();
    }
}

/// Walks sorted penalized ids alongside ascending vocabulary ids, applying llama.cpp's rule.
struct Penalty<'a> {
    ids: &'a [u32],
    penalty: f32,
}

impl Penalty<'_> {
    /// `logit` of token `id` after the penalty; calls must come in ascending `id` order.
    fn apply(&mut self, id: u32, logit: f32) -> f32 {
        while let Some((&first, rest)) = self.ids.split_first() {
            if first > id {
                break;
            }
            self.ids = rest;
            if first == id {
                return penalize(logit, self.penalty);
            }
        }
        logit
    }
}

/// llama.cpp's repetition penalty: positive logits are divided by it, negative ones multiplied.
fn penalize(logit: f32, penalty: f32) -> f32 {
    if logit > 0.0 {
        logit / penalty
    } else {
        logit * penalty
    }
}

/// Maps logits the draw cannot use to ones it can: NaN never wins, +inf is the largest finite.
fn sanitize(logit: f32) -> f32 {
    if logit.is_nan() {
        f32::NEG_INFINITY
    } else {
        logit.min(f32::MAX)
    }
}

/// Id of the largest penalized logit, lowest id on ties, without copying the vocabulary.
fn argmax(logits: &[f32], penalized: &[u32], penalty: f32) -> u32 {
    let mut penalty = Penalty {
        ids: penalized,
        penalty,
    };
    let mut best = (0, f32::NEG_INFINITY);
    for (id, &logit) in (0u32..).zip(logits) {
        let logit = sanitize(penalty.apply(id, logit));
        if logit > best.1 {
            best = (id, logit);
        }
    }
    best.0
}

/// Refills `candidates` with every token and its penalized, sanitized logit.
fn fill_candidates(
    candidates: &mut Vec<Candidate>,
    logits: &[f32],
    penalized: &[u32],
    penalty: f32,
) {
    let mut penalty = Penalty {
        ids: penalized,
        penalty,
    };
    candidates.clear();
    candidates.extend((0u32..).zip(logits).map(|(id, &logit)| Candidate {
        id,
        logit: sanitize(penalty.apply(id, logit)),
        p: 0.0,
    }));
}

/// Descending logit, then ascending id: a total order, so results do not depend on input order.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Keeps the `k` likeliest candidates (all when `k` is 0 or not smaller than the count).
fn top_k(candidates: &mut Vec<Candidate>, k: usize) {
    if k == 0 || k >= candidates.len() {
        return;
    }
    candidates.select_nth_unstable_by(k - 1, by_logit_desc);
    candidates.truncate(k);
}

/// Writes `exp(logit - max)` into each candidate's `p` and returns their sum.
fn softmax_weights(candidates: &mut [Candidate], temperature: f32) -> f64 {
    let max = candidates
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for c in candidates.iter_mut() {
        c.p = ((c.logit - max) / temperature).exp();
        sum += f64::from(c.p);
    }
    sum
}

/// Keeps the likeliest candidates whose probability (at temperature 1) first reaches `p`.
fn top_p(candidates: &mut Vec<Candidate>, p: f32) {
    if p >= 1.0 || candidates.len() <= 1 {
        return;
    }
    candidates.sort_unstable_by(by_logit_desc);
    let sum = softmax_weights(candidates, 1.0);
    let target = f64::from(p) * sum;
    let mut cumulative = 0.0f64;
    let mut keep = candidates.len();
    for (i, c) in candidates.iter().enumerate() {
        cumulative += f64::from(c.p);
        if cumulative >= target {
            keep = i + 1;
            break;
        }
    }
    candidates.truncate(keep);
}

/// Drops candidates less likely than `p` times the likeliest (at temperature 1).
fn min_p(candidates: &mut Vec<Candidate>, p: f32) {
    if p <= 0.0 || candidates.len() <= 1 {
        return;
    }
    let max = candidates
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    let threshold = max + p.ln();
    candidates.retain(|c| c.logit >= threshold);
}

/// Draws one candidate with probability `softmax(logit / temperature)`; candidates are non-empty.
fn draw(candidates: &mut [Candidate], temperature: f32, rng: &mut StdRng) -> u32 {
    let sum = softmax_weights(candidates, temperature);
    if !(sum.is_finite() && sum > 0.0) {
        // Every logit was -inf (or NaN): nothing to weigh, fall back to the likeliest.
        return candidates
            .iter()
            .copied()
            .min_by(by_logit_desc)
            .map_or(0, |c| c.id);
    }
    let mut target = rng.random::<f64>() * sum;
    for c in candidates.iter() {
        target -= f64::from(c.p);
        if target < 0.0 {
            return c.id;
        }
    }
    // Rounding left a sliver past the last weight: take the last token that had any weight.
    candidates
        .iter()
        .rev()
        .find(|c| c.p > 0.0)
        .map_or(candidates[0].id, |c| c.id)
}

/// What [`StopMatcher::push`] released.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text that is safe to emit now (everything before a completed stop string).
    pub text: String,
    /// Whether a stop string completed; generation should end and later text is dropped.
    pub stopped: bool,
}

/// Finds stop strings in streamed decoded text, holding back any suffix that could still
/// become one, so emitted text never contains a stop string or its start.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored.
    pub fn new<I, S>(stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let stops = stops
            .into_iter()
            .map(Into::into)
            .filter(|s: &String| !s.is_empty())
            .collect();
        Self {
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string has completed.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds the next decoded `piece` and returns what can be emitted now.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome {
                text: String::new(),
                stopped: true,
            };
        }
        if self.stops.is_empty() {
            return StopOutcome {
                text: piece.to_owned(),
                stopped: false,
            };
        }
        self.held.push_str(piece);
        if let Some(at) = self.first_stop() {
            self.held.truncate(at);
            self.stopped = true;
            return StopOutcome {
                text: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep_from = self.partial_stop_start();
        let rest = self.held.split_off(keep_from);
        StopOutcome {
            text: std::mem::replace(&mut self.held, rest),
            stopped: false,
        }
    }

    /// Releases text held back as a possible stop prefix; call when generation ends for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Byte offset of the earliest complete stop string in the held text.
    fn first_stop(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
    }

    /// Byte offset of the longest held suffix that is a proper prefix of some stop string
    /// (the held length when there is none); always on a char boundary.
    fn partial_stop_start(&self) -> usize {
        let held = self.held.as_bytes();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let earliest = held.len().saturating_sub(longest.saturating_sub(1));
        (earliest..held.len())
            .filter(|&i| self.held.is_char_boundary(i))
            .find(|&i| {
                self.stops
                    .iter()
                    .any(|s| s.as_bytes().starts_with(&held[i..]))
            })
            .unwrap_or(held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            ..SamplingParams::default()
        }
    }

    fn sampler(p: &SamplingParams) -> Sampler {
        Sampler::new(p).unwrap()
    }

    /// Counts how often each token is drawn over `n` calls.
    fn histogram(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<usize> {
        let mut counts = vec![0; logits.len()];
        for _ in 0..n {
            counts[s.sample(logits, &[]) as usize] += 1;
        }
        counts
    }

    fn random_logits(rng: &mut StdRng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-10.0..10.0)).collect()
    }

    #[test]
    fn greedy_picks_argmax_lowest_id_on_ties() {
        let mut s = sampler(&SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, -2.0, 2.9], &[]), 1);
        assert_eq!(s.sample(&[1.0, 5.0, 5.0, 4.0], &[]), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0, f32::NAN], &[]), 1);
        assert_eq!(s.sample(&[], &[]), 0);
    }

    #[test]
    fn greedy_does_not_fill_candidates() {
        let mut s = sampler(&SamplingParams::greedy());
        s.sample(&[0.0; 1000], &[]);
        assert_eq!(s.candidates.capacity(), 0);
    }

    #[test]
    fn top_k_one_equals_greedy_at_any_temperature() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut greedy = sampler(&SamplingParams::greedy());
        for temperature in [0.1, 0.7, 1.0, 5.0, 100.0] {
            let mut s = sampler(&SamplingParams {
                seed: 3,
                ..params(temperature, 1, 1.0, 0.0)
            });
            for _ in 0..50 {
                let logits = random_logits(&mut rng, 97);
                assert_eq!(s.sample(&logits, &[]), greedy.sample(&logits, &[]));
            }
        }
        let mut s = sampler(&params(2.0, 1, 1.0, 0.0));
        assert_eq!(s.sample(&[1.0, 5.0, 5.0, 4.0], &[]), 1);
    }

    #[test]
    fn top_k_filter_keeps_the_argmax_first() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut candidates = Vec::new();
        for _ in 0..50 {
            let mut logits = random_logits(&mut rng, 64);
            logits[40] = logits[3].max(logits[40]);
            logits[3] = logits[40];
            fill_candidates(&mut candidates, &logits, &[], 1.0);
            top_k(&mut candidates, 1);
            assert_eq!(candidates.len(), 1);
            assert_eq!(candidates[0].id, argmax(&logits, &[], 1.0));
        }
    }

    #[test]
    fn same_seed_same_sequence_different_seed_differs() {
        let flat = [0.0f32; 100];
        let run = |seed| {
            let mut s = sampler(&SamplingParams {
                seed,
                ..params(1.0, 0, 1.0, 0.0)
            });
            (0..200).map(|_| s.sample(&flat, &[])).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
        let distinct = run(42)
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>();
        assert!(
            distinct.len() > 50,
            "a flat distribution should spread draws, got {}",
            distinct.len()
        );
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        let logits = [0.5f32, 0.3, 0.15, 0.05].map(f32::ln);
        let mut s = sampler(&params(1.0, 0, 0.7, 0.0));
        let counts = histogram(&mut s, &logits, 1000);
        assert_eq!(&counts[2..], [0, 0], "{counts:?}");
        assert!(counts[0] > 0 && counts[1] > 0, "{counts:?}");
    }

    #[test]
    fn min_p_never_draws_below_the_fraction_of_the_max() {
        let logits = [0.4f32, 0.25, 0.19, 0.16].map(f32::ln);
        let mut s = sampler(&params(1.0, 0, 1.0, 0.5));
        let counts = histogram(&mut s, &logits, 1000);
        assert_eq!(&counts[2..], [0, 0], "{counts:?}");
        assert!(counts[0] > 0 && counts[1] > 0, "{counts:?}");
    }

    #[test]
    fn top_k_keeps_only_k_tokens() {
        let logits = [1.0f32, 4.0, 3.0, 2.0, 0.0];
        let mut s = sampler(&params(5.0, 2, 1.0, 0.0));
        let counts = histogram(&mut s, &logits, 1000);
        assert_eq!([counts[0], counts[3], counts[4]], [0, 0, 0], "{counts:?}");
        assert!(counts[1] > 0 && counts[2] > 0, "{counts:?}");
    }

    #[test]
    fn temperature_sharpens_and_flattens() {
        let logits = [1.0f32, 0.0];
        let mut cold = sampler(&params(0.1, 0, 1.0, 0.0));
        let mut hot = sampler(&params(10.0, 0, 1.0, 0.0));
        assert!(histogram(&mut cold, &logits, 1000)[1] < 5);
        assert!(histogram(&mut hot, &logits, 1000)[1] > 400);
    }

    #[test]
    fn repetition_penalty_changes_greedy_pick() {
        let penalized = SamplingParams {
            repetition_penalty: 1.5,
            ..SamplingParams::greedy()
        };
        let mut s = sampler(&penalized);
        // Positive logit divided: 2.0 / 1.5 < 1.8.
        assert_eq!(s.sample(&[2.0, 1.8, -1.0], &[]), 0);
        assert_eq!(s.sample(&[2.0, 1.8, -1.0], &[0]), 1);
        // Negative logit multiplied: -0.5 * 1.5 < -0.6.
        assert_eq!(s.sample(&[-0.5, -0.6], &[0, 0]), 1);
        // Out-of-vocabulary history ids are ignored.
        assert_eq!(s.sample(&[2.0, 1.8], &[7, 0]), 1);
    }

    #[test]
    fn repetition_penalty_looks_at_last_n_only() {
        let p = SamplingParams {
            repetition_penalty: 1.5,
            repeat_last_n: 2,
            ..SamplingParams::greedy()
        };
        let mut s = sampler(&p);
        assert_eq!(s.sample(&[2.0, 1.8, 0.0], &[0, 2, 2]), 0);
        assert_eq!(s.sample(&[2.0, 1.8, 0.0], &[2, 0, 2]), 1);
        let mut off = sampler(&SamplingParams {
            repeat_last_n: 0,
            ..p
        });
        assert_eq!(off.sample(&[2.0, 1.8, 0.0], &[0]), 0);
    }

    #[test]
    fn repetition_penalty_applies_before_sampling_filters() {
        // min_p = 1 keeps only the likeliest token after the penalty: 2.0 / 4 < 1.8.
        let p = SamplingParams {
            repetition_penalty: 4.0,
            ..params(1.0, 0, 1.0, 1.0)
        };
        let mut s = sampler(&p);
        for _ in 0..100 {
            assert_eq!(s.sample(&[2.0, 1.8, -1.0], &[0]), 1);
        }
    }

    #[test]
    fn sampling_reuses_its_buffer() {
        let mut s = sampler(&params(1.0, 0, 0.9, 0.05));
        let logits = random_logits(&mut StdRng::seed_from_u64(1), 500);
        s.sample(&logits, &[1, 2, 3]);
        let (ptr, cap) = (s.candidates.as_ptr(), s.candidates.capacity());
        for _ in 0..20 {
            s.sample(&logits, &[1, 2, 3]);
        }
        assert_eq!((s.candidates.as_ptr(), s.candidates.capacity()), (ptr, cap));
    }

    #[test]
    fn non_finite_logits_are_handled() {
        let mut s = sampler(&params(1.0, 0, 1.0, 0.0));
        for _ in 0..100 {
            assert_eq!(s.sample(&[f32::NAN, f32::INFINITY, 0.0], &[]), 1);
            assert_eq!(
                s.sample(&[f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY], &[]),
                1
            );
        }
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 3], &[]), 0);
    }

    #[test]
    fn validation_errors_name_the_field() {
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: -0.1,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::NAN,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: 0.0,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: 1.01,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: f32::NAN,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    min_p: -0.01,
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    min_p: 1.5,
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    repetition_penalty: 0.0,
                    ..Default::default()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    max_tokens: 0,
                    ..Default::default()
                },
                "max_tokens",
            ),
            (
                SamplingParams {
                    stop: vec!["ok".into(), String::new()],
                    ..Default::default()
                },
                "stop[1]",
            ),
        ];
        for (p, field) in cases {
            let err = Sampler::new(&p).unwrap_err();
            assert!(matches!(err, Error::InvalidRequest(_)), "{err:?}");
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
        SamplingParams::default().validate().unwrap();
        SamplingParams::greedy().validate().unwrap();
        SamplingParams {
            top_p: 1.0,
            min_p: 1.0,
            ..Default::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn params_deserialize_with_defaults() {
        let p: SamplingParams =
            serde_json::from_str(r#"{"temperature": 0, "stop": ["\n"]}"#).unwrap();
        assert_eq!(
            p,
            SamplingParams {
                temperature: 0.0,
                stop: vec!["\n".into()],
                ..Default::default()
            }
        );
        let back: SamplingParams =
            serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }

    /// Pushes every piece, then finishes; returns the emitted text and whether it stopped.
    fn run_stops(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().copied());
        let mut out = String::new();
        for piece in pieces {
            let outcome = m.push(piece);
            out.push_str(&outcome.text);
            if outcome.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn stop_in_one_piece_cuts_before_it() {
        assert_eq!(
            run_stops(&["<|im_end|>"], &["Hello<|im_end|>junk"]),
            ("Hello".into(), true)
        );
        assert_eq!(run_stops(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn stop_spanning_pieces_is_held_then_dropped() {
        let mut m = StopMatcher::new(["<|im_end|>"]);
        assert_eq!(
            m.push("Hi <|im"),
            StopOutcome {
                text: "Hi ".into(),
                stopped: false
            }
        );
        assert_eq!(
            m.push("_en"),
            StopOutcome {
                text: String::new(),
                stopped: false
            }
        );
        assert_eq!(
            m.push("d|> more"),
            StopOutcome {
                text: String::new(),
                stopped: true
            }
        );
        assert!(m.stopped());
        assert_eq!(
            m.push("x"),
            StopOutcome {
                text: String::new(),
                stopped: true
            }
        );
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn prefix_then_mismatch_releases_held_text() {
        let mut m = StopMatcher::new(["STOP"]);
        assert_eq!(m.push("a ST").text, "a ");
        assert_eq!(m.push("OP").text, "");
        let mut m = StopMatcher::new(["STOP"]);
        assert_eq!(m.push("a ST").text, "a ");
        assert_eq!(m.push("ORM").text, "STORM");
        assert_eq!(m.push("S").text, "");
        assert_eq!(m.finish(), "S");
        // A held prefix that fails may still contain the start of a real stop later on.
        assert_eq!(
            run_stops(&["abc"], &["a", "b", "ab", "c!"]),
            ("ab".into(), true)
        );
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(
            run_stops(&["END", "\n\n"], &["one\n", "\ntwo END"]),
            ("one".into(), true)
        );
        assert_eq!(
            run_stops(&["abcd", "bc"], &["xab", "cd"]),
            ("x".into(), true)
        );
        assert_eq!(
            run_stops(&["abcd", "bc"], &["xab", "ce"]),
            ("xa".into(), true)
        );
        assert_eq!(
            run_stops(&["User:", "Q:"], &["A: 4", "\nQ", ": next"]),
            ("A: 4\n".into(), true)
        );
    }

    #[test]
    fn multibyte_utf8_stops_and_text() {
        assert_eq!(
            run_stops(&["日本"], &["こんにちは日", "本語"]),
            ("こんにちは".into(), true)
        );
        assert_eq!(run_stops(&["日本"], &["é日", "é"]), ("é日é".into(), false));
        assert_eq!(run_stops(&["🛑"], &["go 🚀", "🛑"]), ("go 🚀".into(), true));
        let mut m = StopMatcher::new(["ab"]);
        assert_eq!(m.push("ça").text, "ç");
        assert_eq!(m.finish(), "a");
    }
}
