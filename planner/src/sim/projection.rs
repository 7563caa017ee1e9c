//! What a request would get on a [`BatchingHost`] while more requests keep arriving after it. The
//! requests already on the host are known; the later ones are not, and on a CPU host a later prompt
//! stalls every decoding request for its prefill, so a request's end-to-end latency turns on how many
//! arrive while it runs. The projection replays the host [`DRAWS`] times, each with its own draw of
//! the later arrivals (a Poisson stream at the host's recent rate, lengths taken from its recent
//! requests), and answers for each latency the point that minimizes the mean absolute percentage
//! error over the draws: their median weighted by 1/x. The draws are the same for every call (common
//! random numbers), so two projections differ only by what the host and the request are.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Arrival, BatchingHost};
use crate::dist::exponential;
use crate::route::Prediction;

/// Draws of the later arrivals per projection.
pub const DRAWS: u64 = 16;

/// Later arrivals taken at most in one draw (a bound on the work of a projection at any rate).
const MAX_LATER: usize = 64;

/// Later arrivals expected over the request's time alone below which most draws would meet none, so
/// the host alone is the answer (and the draws are not run).
const FEW_LATER: f64 = 0.25;

/// Seed of the draws.
const SEED: u64 = 0x5EED_F1A7;

/// The requests expected after the one projected.
#[derive(Debug, Clone, Copy)]
pub struct Later<'a> {
    /// Arrivals per second.
    pub rate: f64,
    /// (prompt tokens, output tokens) of recent requests, drawn from uniformly.
    pub lengths: &'a [(f64, f64)],
}

/// What a request of `prompt_tokens` and `output_tokens` arriving at `t` would get on `host` with
/// requests arriving after it as `later` says: TTFT and E2E from `t`, seconds, each the point of
/// least expected absolute percentage error over [`DRAWS`] draws of the later arrivals (the host
/// alone when most draws would meet none).
pub fn project(
    host: &BatchingHost,
    t: f64,
    prompt_tokens: f64,
    output_tokens: f64,
    later: Later<'_>,
) -> Prediction {
    let alone = host.clone().project(t, prompt_tokens, output_tokens);
    let expected = later.rate * alone.e2e_s;
    if !(expected >= FEW_LATER && expected.is_finite()) || later.lengths.is_empty() {
        return alone;
    }
    let (mut ttft, mut e2e): (Vec<f64>, Vec<f64>) = (0..DRAWS)
        .map(|draw| {
            let arrivals = arrivals(t, later, ChaCha8Rng::seed_from_u64(SEED ^ draw));
            let p = host
                .clone()
                .project_among(t, prompt_tokens, output_tokens, arrivals);
            (p.ttft_s, p.e2e_s)
        })
        .unzip();
    let ttft_s = least_relative_error(&mut ttft);
    Prediction {
        ttft_s,
        e2e_s: least_relative_error(&mut e2e).max(ttft_s),
    }
}

/// A Poisson stream from `t` at `later.rate`, each request's lengths drawn from `later.lengths`.
fn arrivals(t: f64, later: Later<'_>, mut rng: ChaCha8Rng) -> impl Iterator<Item = Arrival> {
    let mut at = t;
    std::iter::repeat_with(move || {
        at += exponential(&mut rng, later.rate);
        let (prompt_tokens, output_tokens) =
            later.lengths[rng.random_range(0..later.lengths.len())];
        Arrival {
            at,
            prompt_tokens,
            output_tokens,
        }
    })
    .take(MAX_LATER)
}

/// The value `p` of `values` that minimizes the sum of |p - x| / x: their median weighted by 1/x
/// (non-positive values weigh as the smallest positive one would). 0 for no values.
pub fn least_relative_error(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let weight = |x: f64| 1.0 / x.max(f64::MIN_POSITIVE);
    let total: f64 = values.iter().map(|&x| weight(x)).sum();
    let mut below = 0.0;
    for &x in values.iter() {
        below += weight(x);
        if below >= total / 2.0 {
            return x;
        }
    }
    values.last().copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::ServiceCurve;

    /// One slot-rich engine: 10 ms a decode step, 1 ms a prompt token.
    fn curve() -> ServiceCurve {
        ServiceCurve::fixed(8, 0.010).prefilling(1000.0)
    }

    /// The weighted median leans to the small values: with 1 and 3 equally often, 1 errs by 2/3 of 3
    /// when 3 comes, 3 by 2 of 1 when 1 comes.
    #[test]
    fn the_point_of_least_relative_error_is_the_median_weighted_by_the_inverse() {
        assert_eq!(least_relative_error(&mut []), 0.0);
        assert_eq!(least_relative_error(&mut [3.0, 1.0]), 1.0);
        assert_eq!(least_relative_error(&mut [2.0, 1.0, 2.0, 2.0]), 2.0);
        let mut values: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = least_relative_error(&mut values);
        let cost = |p: f64| values.iter().map(|x| (p - x).abs() / x).sum::<f64>();
        for q in [p - 1.0, p + 1.0] {
            assert!(cost(p) <= cost(q), "{p} against {q}");
        }
    }

    #[test]
    fn no_later_arrivals_project_the_host_alone() {
        let host = BatchingHost::new(&curve());
        let alone = host.clone().project(0.0, 100.0, 51.0);
        let lengths = [(100.0, 50.0)];
        for later in [
            Later {
                rate: 0.0,
                lengths: &lengths,
            },
            Later {
                rate: 5.0,
                lengths: &[],
            },
        ] {
            assert_eq!(project(&host, 0.0, 100.0, 51.0, later), alone);
        }
    }

    /// Prompts arriving while a request decodes stretch its end, not its first token; the more
    /// often they come, the more. Draws are fixed, so a projection repeats exactly.
    #[test]
    fn later_prompts_stretch_the_end_by_their_rate() {
        let host = BatchingHost::new(&curve());
        let alone = host.clone().project(0.0, 100.0, 101.0);
        assert!((alone.ttft_s - 0.1).abs() < 1e-9 && (alone.e2e_s - 1.1).abs() < 1e-9);
        let lengths = [(200.0, 1.0)];
        let at = |rate| {
            project(
                &host,
                0.0,
                100.0,
                101.0,
                Later {
                    rate,
                    lengths: &lengths,
                },
            )
        };
        let (slow, fast) = (at(1.0), at(4.0));
        assert_eq!(slow, at(1.0));
        assert!((slow.ttft_s - alone.ttft_s).abs() < 0.05, "{slow:?}");
        // Prompts of 0.2 s at 1 and 4 a second take a fifth and four fifths of the time. The point
        // of least relative error is about the number of prompts a second of decoding meets in most
        // draws: one at 1 a second, many more at 4, whose own prompts stretch it further.
        let stretch = |p: Prediction| p.e2e_s - alone.e2e_s;
        assert!((0.1..0.45).contains(&stretch(slow)), "{slow:?}");
        assert!(stretch(fast) > 1.0, "{fast:?}");
    }

    /// On an engine that holds prompts for a drain of up to twice the stall they would cost, a
    /// request whose decode takes less than twice a later prompt's prefill is never stretched:
    /// every later prompt waits for it to end, where an engine that runs prompts at once stalls it.
    #[test]
    fn later_prompts_wait_for_a_short_decode_on_a_holding_engine() {
        let holding = BatchingHost::new(&curve().holding(2.0));
        let alone = holding.clone().project(0.0, 100.0, 31.0);
        let later = Later {
            rate: 4.0,
            lengths: &[(200.0, 10.0)],
        };
        let among = project(&holding, 0.0, 100.0, 31.0, later);
        assert!(
            (among.e2e_s - alone.e2e_s).abs() < 1e-9,
            "{among:?} {alone:?}"
        );
        assert!(
            (among.ttft_s - alone.ttft_s).abs() < 1e-9,
            "{among:?} {alone:?}"
        );
        let prompt_at = |t| Arrival {
            at: t,
            prompt_tokens: 200.0,
            output_tokens: 10.0,
        };
        let with_one = |host: &BatchingHost| {
            host.clone()
                .project_among(0.0, 100.0, 31.0, [prompt_at(0.15)])
                .e2e_s
        };
        assert!((with_one(&holding) - alone.e2e_s).abs() < 1e-9);
        let running = BatchingHost::new(&curve());
        // The prompt's 0.2 s, then the two decoding side by side.
        assert!(with_one(&running) > alone.e2e_s + 0.2, "{alone:?}");
    }

    /// Mean absolute percentage errors (TTFT, E2E) of `predicted` against `observed`.
    fn mape(predicted: &[Prediction], observed: &[Prediction]) -> (f64, f64) {
        let n = observed.len() as f64;
        let error = |f: fn(&Prediction) -> f64| {
            predicted
                .iter()
                .zip(observed)
                .map(|(p, o)| (f(p) - f(o)).abs() / f(o))
                .sum::<f64>()
                / n
        };
        (error(|p| p.ttft_s), error(|p| p.e2e_s))
    }

    /// Per-request predictions on a host that runs exactly as its model (so that only the requests
    /// still to come are unknown), with the lengths of README's pilot workload on a small model
    /// (prompts of 60-200 tokens at 350 tokens/s, 8-40 output tokens at 25 ms a step) at 0.7
    /// requests/s (1.1 overloads it): each request's prediction by the host alone and with draws of
    /// the later arrivals, and what it got.
    fn pilot_like_traffic(curve: &ServiceCurve) -> [Vec<Prediction>; 3] {
        let rate = 0.7;
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut host = BatchingHost::new(curve);
        let (mut alone, mut drawn) = (Vec::new(), Vec::new());
        let mut recent: Vec<(f64, f64)> = Vec::new();
        let mut t = 0.0;
        let n = 600;
        for i in 0..n {
            t += exponential(&mut rng, rate);
            let prompt = f64::from(rng.random_range(60..=200u32));
            let output = f64::from(rng.random_range(8..=40u32));
            let later = Later {
                rate,
                lengths: &recent,
            };
            alone.push(host.clone().project(t, prompt, output));
            drawn.push(project(&host, t, prompt, output, later));
            host.admit(t, i, prompt, output);
            recent.push((prompt, output));
            if recent.len() > 64 {
                recent.remove(0);
            }
        }
        host.finish_all();
        let mut finished = host.take_finished();
        finished.sort_by_key(|f| f.class);
        assert_eq!(finished.len(), n);
        let observed = finished
            .iter()
            .map(|f| Prediction {
                ttft_s: f.first_token - f.arrival,
                e2e_s: f.finish - f.arrival,
            })
            .collect();
        [alone, drawn, observed]
    }

    /// The MAPEs (TTFT, E2E) of the host alone and of the draws against what was observed, printed.
    fn errors(
        alone: &[Prediction],
        drawn: &[Prediction],
        observed: &[Prediction],
    ) -> ((f64, f64), (f64, f64)) {
        let (alone_ttft, alone_e2e) = mape(alone, observed);
        let (drawn_ttft, drawn_e2e) = mape(drawn, observed);
        eprintln!(
            "MAPE TTFT alone {alone_ttft:.3} drawn {drawn_ttft:.3}; E2E alone {alone_e2e:.3} drawn {drawn_e2e:.3}"
        );
        ((alone_ttft, alone_e2e), (drawn_ttft, drawn_e2e))
    }

    /// The draws predict each request's end better than the host alone (E2E MAPE 0.22 against
    /// 0.26), and its first token almost exactly (0.01). What is left is the error no prediction
    /// made at arrival avoids here: whether prompts come while the request decodes, each stalling it
    /// for a third of a second.
    #[test]
    fn draws_of_later_arrivals_beat_the_host_alone_on_a_host_that_runs_as_modelled() {
        let curve = ServiceCurve::fixed(4, 0.025).prefilling(350.0);
        let [alone, drawn, observed] = pilot_like_traffic(&curve);
        let ((_, alone_e2e), (drawn_ttft, drawn_e2e)) = errors(&alone, &drawn, &observed);
        assert!(drawn_ttft < 0.05, "{drawn_ttft}");
        assert!(
            drawn_e2e < alone_e2e * 0.9,
            "{drawn_e2e} against {alone_e2e}"
        );
    }

    /// The same traffic on an engine that holds prompts for a drain (`--drain-hold 2`): a prompt
    /// arriving while a request has little left to decode waits for it, so far fewer ends turn on
    /// the requests still to come. E2E MAPE falls from 0.22 to 0.08 (the host alone 0.08), TTFT
    /// stays within 0.03 (a held prompt prefills before the prompts that come during its hold), and
    /// the median request ends sooner.
    #[test]
    fn a_drain_hold_leaves_each_end_to_the_requests_already_there() {
        let running = ServiceCurve::fixed(4, 0.025).prefilling(350.0);
        let [_, drawn_running, observed_running] = pilot_like_traffic(&running);
        let [alone, drawn, observed] = pilot_like_traffic(&running.clone().holding(2.0));
        let ((_, alone_e2e), (drawn_ttft, drawn_e2e)) = errors(&alone, &drawn, &observed);
        let (_, running_e2e) = mape(&drawn_running, &observed_running);
        eprintln!("E2E MAPE without the hold {running_e2e:.3}");
        assert!(drawn_ttft < 0.03, "{drawn_ttft}");
        assert!(
            drawn_e2e < 0.12 && drawn_e2e < alone_e2e,
            "{drawn_e2e} against {alone_e2e}"
        );
        assert!(
            drawn_e2e < running_e2e * 0.6,
            "{drawn_e2e} against {running_e2e}"
        );
        let median = |p: &[Prediction]| {
            let mut e2e: Vec<f64> = p.iter().map(|p| p.e2e_s).collect();
            e2e.sort_by(f64::total_cmp);
            e2e[e2e.len() / 2]
        };
        assert!(median(&observed) < median(&observed_running) * 0.9);
    }
}
