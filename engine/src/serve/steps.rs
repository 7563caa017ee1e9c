//! Step timings of a serving engine: how long its steps took by what they ran, summed so that a
//! service-time model can be fitted from them (decode-only steps by batch; steps holding prompt tokens
//! by batch, with the sums a least-squares fit of time on prompt tokens needs), and the time between
//! steps while requests were running. Recording a step takes no allocation once the engine's batch
//! sizes are known.

use serde::{Deserialize, Serialize};

/// Decode-only steps that ran one token of `batch` requests each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DecodeSteps {
    /// Steps.
    pub steps: u64,
    /// Their seconds, summed.
    pub seconds: f64,
}

/// Steps that ran prompt tokens beside one token of each of `batch` decoding requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptSteps {
    /// Steps.
    pub steps: u64,
    /// Their prompt tokens, summed.
    pub tokens: f64,
    /// Their prompt tokens squared, summed.
    pub tokens_squared: f64,
    /// Their seconds, summed.
    pub seconds: f64,
    /// Prompt tokens times seconds, summed.
    pub token_seconds: f64,
}

/// The time between consecutive steps while requests were running: from the end of a step that left
/// some running to the start of the next one (the scheduler's loop, admission, event delivery, and
/// any time the scheduler's thread was not on a core).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepGaps {
    /// Gaps.
    pub gaps: u64,
    /// Their seconds, summed.
    pub seconds: f64,
}

impl StepGaps {
    /// Mean seconds of a gap (`None` without gaps).
    pub fn mean_s(&self) -> Option<f64> {
        (self.gaps > 0).then(|| self.seconds / self.gaps as f64)
    }
}

/// Sums of an engine's step timings; index `b` of either list holds the steps that decoded `b`
/// requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimes {
    /// Steps that ran only decode tokens, by batch.
    pub decode: Vec<DecodeSteps>,
    /// Steps that ran prompt tokens (prefill, or recomputation after preemption), by decode batch.
    pub prompt: Vec<PromptSteps>,
    /// The gaps between steps while requests were running (absent from older readings: none).
    #[serde(default)]
    pub between_steps: StepGaps,
}

impl StepTimes {
    /// Sums with room for batches up to `max_batch` (larger ones grow the lists when first seen).
    pub fn with_max_batch(max_batch: usize) -> Self {
        Self {
            decode: vec![DecodeSteps::default(); max_batch + 1],
            prompt: vec![PromptSteps::default(); max_batch + 1],
            between_steps: StepGaps::default(),
        }
    }

    /// Adds a gap of `seconds` between the end of a step that left requests running and the start
    /// of the next step.
    pub fn record_gap(&mut self, seconds: f64) {
        self.between_steps.gaps += 1;
        self.between_steps.seconds += seconds;
    }

    /// Adds a step that decoded `decoding` requests and ran `prompt_tokens` prompt tokens in
    /// `seconds`.
    pub fn record(&mut self, decoding: usize, prompt_tokens: usize, seconds: f64) {
        if prompt_tokens == 0 {
            if decoding == 0 {
                return;
            }
            grow(&mut self.decode, decoding);
            let d = &mut self.decode[decoding];
            d.steps += 1;
            d.seconds += seconds;
        } else {
            grow(&mut self.prompt, decoding);
            let p = &mut self.prompt[decoding];
            let tokens = prompt_tokens as f64;
            p.steps += 1;
            p.tokens += tokens;
            p.tokens_squared += tokens * tokens;
            p.seconds += seconds;
            p.token_seconds += tokens * seconds;
        }
    }

    /// The steps recorded since `earlier` (a copy of these sums taken before).
    pub fn since(&self, earlier: &StepTimes) -> StepTimes {
        let decode = self
            .decode
            .iter()
            .enumerate()
            .map(|(b, now)| {
                let then = earlier.decode.get(b).copied().unwrap_or_default();
                DecodeSteps {
                    steps: now.steps.saturating_sub(then.steps),
                    seconds: now.seconds - then.seconds,
                }
            })
            .collect();
        let prompt = self
            .prompt
            .iter()
            .enumerate()
            .map(|(b, now)| {
                let then = earlier.prompt.get(b).copied().unwrap_or_default();
                PromptSteps {
                    steps: now.steps.saturating_sub(then.steps),
                    tokens: now.tokens - then.tokens,
                    tokens_squared: now.tokens_squared - then.tokens_squared,
                    seconds: now.seconds - then.seconds,
                    token_seconds: now.token_seconds - then.token_seconds,
                }
            })
            .collect();
        let (now, then) = (self.between_steps, earlier.between_steps);
        StepTimes {
            decode,
            prompt,
            between_steps: StepGaps {
                gaps: now.gaps.saturating_sub(then.gaps),
                seconds: now.seconds - then.seconds,
            },
        }
    }

    /// Adds the steps of `other` (sums of another stretch of time) to these.
    pub fn add(&mut self, other: &StepTimes) {
        for (b, d) in other.decode.iter().enumerate() {
            grow(&mut self.decode, b);
            self.decode[b].steps += d.steps;
            self.decode[b].seconds += d.seconds;
        }
        for (b, p) in other.prompt.iter().enumerate() {
            grow(&mut self.prompt, b);
            let sum = &mut self.prompt[b];
            sum.steps += p.steps;
            sum.tokens += p.tokens;
            sum.tokens_squared += p.tokens_squared;
            sum.seconds += p.seconds;
            sum.token_seconds += p.token_seconds;
        }
        self.between_steps.gaps += other.between_steps.gaps;
        self.between_steps.seconds += other.between_steps.seconds;
    }

    /// Mean seconds of a decode-only step of `batch` requests; of every decode-only step when none
    /// of that batch ran (`None` before the first).
    pub fn decode_step_s(&self, batch: usize) -> Option<f64> {
        let mean = |d: DecodeSteps| (d.steps > 0).then(|| d.seconds / d.steps as f64);
        self.decode.get(batch).copied().and_then(mean).or_else(|| {
            mean(
                self.decode
                    .iter()
                    .fold(DecodeSteps::default(), |sum, d| DecodeSteps {
                        steps: sum.steps + d.steps,
                        seconds: sum.seconds + d.seconds,
                    }),
            )
        })
    }

    /// Seconds per prompt token of the steps that ran prompts, decodes beside them included (`None`
    /// before the first).
    pub fn prompt_token_s(&self) -> Option<f64> {
        let tokens: f64 = self.prompt.iter().map(|p| p.tokens).sum();
        let seconds: f64 = self.prompt.iter().map(|p| p.seconds).sum();
        (tokens > 0.0).then(|| seconds / tokens)
    }

    /// Steps recorded.
    pub fn steps(&self) -> u64 {
        self.decode.iter().map(|d| d.steps).sum::<u64>()
            + self.prompt.iter().map(|p| p.steps).sum::<u64>()
    }
}

fn grow<T: Default + Clone>(list: &mut Vec<T>, index: usize) {
    if list.len() <= index {
        list.resize(index + 1, T::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_summed_by_kind_and_batch() {
        let mut t = StepTimes::with_max_batch(2);
        t.record(2, 0, 0.010);
        t.record(2, 0, 0.012);
        t.record(1, 100, 0.2);
        t.record(1, 50, 0.1);
        t.record(0, 0, 1.0);
        let before = t.clone();
        t.record(5, 0, 0.03);
        assert_eq!(t.decode[2].steps, 2);
        assert!((t.decode[2].seconds - 0.022).abs() < 1e-12);
        let p = t.prompt[1];
        assert_eq!(p.steps, 2);
        assert_eq!((p.tokens, p.tokens_squared), (150.0, 12_500.0));
        assert!((p.token_seconds - 25.0).abs() < 1e-12);
        assert_eq!(t.steps(), 5, "an empty step is not a step");
        let later = t.since(&before);
        assert_eq!(later.steps(), 1);
        assert_eq!(later.decode[5].steps, 1);
        assert_eq!(later.decode[2], DecodeSteps::default());
    }

    /// A decode step's estimate is its batch's mean, or every batch's before that batch ran; a
    /// prompt token's is the prompt steps' seconds over their tokens.
    #[test]
    fn step_estimates_come_from_the_sums() {
        let mut t = StepTimes::with_max_batch(4);
        assert_eq!((t.decode_step_s(1), t.prompt_token_s()), (None, None));
        t.record(1, 0, 0.010);
        t.record(1, 0, 0.014);
        t.record(3, 0, 0.030);
        t.record(0, 100, 0.2);
        t.record(2, 50, 0.1);
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-12);
        assert!(near(t.decode_step_s(1), 0.012));
        assert!(near(t.decode_step_s(3), 0.030));
        assert!(
            near(t.decode_step_s(2), 0.054 / 3.0),
            "batch 2 never decoded alone"
        );
        assert!(near(t.decode_step_s(9), 0.054 / 3.0), "beyond the lists");
        assert!(near(t.prompt_token_s(), 0.3 / 150.0));
    }

    /// Gaps are summed apart from the steps, and a later reading less an earlier one, or two
    /// stretches added up, hold the gaps of their own stretch.
    #[test]
    fn gaps_between_steps_are_summed_and_taken_apart() {
        let mut t = StepTimes::with_max_batch(2);
        t.record(1, 0, 0.010);
        t.record_gap(0.002);
        t.record(1, 0, 0.010);
        assert_eq!(t.steps(), 2, "a gap is not a step");
        let before = t.clone();
        t.record_gap(0.004);
        t.record_gap(0.006);
        let later = t.since(&before);
        assert_eq!(later.between_steps.gaps, 2);
        assert!((later.between_steps.seconds - 0.010).abs() < 1e-12);
        assert!((later.between_steps.mean_s().expect("gaps") - 0.005).abs() < 1e-12);
        let mut both = before.clone();
        both.add(&later);
        assert_eq!(both.between_steps.gaps, 3);
        assert!((both.between_steps.seconds - 0.012).abs() < 1e-12);
        assert_eq!(StepTimes::default().between_steps.mean_s(), None);
    }

    /// A reading from an engine that did not sum its gaps parses, with none.
    #[test]
    fn a_reading_without_gaps_parses_with_none() {
        let json = r#"{"decode":[{"steps":2,"seconds":0.02}],"prompt":[]}"#;
        let t: StepTimes = serde_json::from_str(json).expect("an older reading parses");
        assert_eq!(t.between_steps, StepGaps::default());
        assert_eq!(t.steps(), 2);
    }

    /// Two stretches added up are the sums of one that recorded both, whatever their batch sizes.
    #[test]
    fn stretches_add_up_to_one_that_held_both() {
        let steps = [(1, 0, 0.004), (3, 0, 0.011), (0, 120, 0.09), (2, 40, 0.05)];
        let (mut first, mut second, mut both) = (
            StepTimes::with_max_batch(1),
            StepTimes::default(),
            StepTimes::default(),
        );
        for (i, &(decoding, prompt, seconds)) in steps.iter().enumerate() {
            let part = if i % 2 == 0 { &mut first } else { &mut second };
            part.record(decoding, prompt, seconds);
            both.record(decoding, prompt, seconds);
        }
        first.add(&second);
        assert_eq!(first.steps(), 4);
        for b in 0..4 {
            let sum = |t: &StepTimes| {
                let d = t.decode.get(b).copied().unwrap_or_default();
                let p = t.prompt.get(b).copied().unwrap_or_default();
                (
                    d.steps,
                    d.seconds,
                    p.steps,
                    p.tokens,
                    p.tokens_squared,
                    p.token_seconds,
                )
            };
            assert_eq!(sum(&first), sum(&both), "batch {b}");
        }
    }
}
