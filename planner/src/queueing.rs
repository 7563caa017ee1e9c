//! Closed-form queueing results used to check the simulator and to reason about pools: Erlang C for
//! M/M/c (probability of waiting, mean wait, wait quantiles). O(c) per call.

/// Erlang C: probability that an arrival waits in an M/M/c queue with arrival rate `lambda`, service rate
/// `mu` per server and `c` servers. `None` when the queue is unstable (lambda >= c mu) or inputs are bad.
pub fn erlang_c(lambda: f64, mu: f64, c: u32) -> Option<f64> {
    if !(lambda >= 0.0 && mu > 0.0 && c > 0) {
        return None;
    }
    let a = lambda / mu;
    let rho = a / f64::from(c);
    if rho >= 1.0 {
        return None;
    }
    // Erlang B by its stable recursion, then C from B.
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (f64::from(k) + a * b);
    }
    Some(b / (1.0 - rho * (1.0 - b)))
}

/// Mean waiting time in queue (before service) of M/M/c, seconds.
pub fn mmc_mean_wait(lambda: f64, mu: f64, c: u32) -> Option<f64> {
    let p = erlang_c(lambda, mu, c)?;
    Some(p / (f64::from(c) * mu - lambda))
}

/// The `q` quantile of the M/M/c waiting time: 0 when q <= 1 - P(wait), else from the exponential tail
/// P(W > t) = C e^{-(c mu - lambda) t}.
pub fn mmc_wait_quantile(lambda: f64, mu: f64, c: u32, q: f64) -> Option<f64> {
    let p = erlang_c(lambda, mu, c)?;
    if !(0.0..1.0).contains(&q) {
        return None;
    }
    let tail = 1.0 - q;
    if tail >= p {
        return Some(0.0);
    }
    Some((p / tail).ln() / (f64::from(c) * mu - lambda))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mm1_matches_textbook() {
        // M/M/1: P(wait) = rho, Wq = rho / (mu - lambda).
        let p = erlang_c(0.5, 1.0, 1).expect("stable");
        assert!((p - 0.5).abs() < 1e-12);
        let w = mmc_mean_wait(0.5, 1.0, 1).expect("stable");
        assert!((w - 1.0).abs() < 1e-12);
        assert_eq!(erlang_c(1.0, 1.0, 1), None);
    }

    #[test]
    fn mm2_known_value() {
        // M/M/2 with a = 1: C = a^2/(2(1+a) - a^2 ... ) = 1/3.
        let p = erlang_c(1.0, 1.0, 2).expect("stable");
        assert!((p - 1.0 / 3.0).abs() < 1e-12);
        let q = mmc_wait_quantile(1.0, 1.0, 2, 0.99).expect("stable");
        assert!((q - (100.0f64 / 3.0).ln()).abs() < 1e-12);
    }
}
