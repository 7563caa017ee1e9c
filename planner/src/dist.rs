//! Numeric helpers shared by the planner's modules: output rounding, seeded random draws, the normal
//! quantile and binomial tail probabilities.

use rand::Rng;

/// Rounds for stable, readable output (money to 1e-6 $, everything else to 6 significant decimals).
pub(crate) fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Exponential draw with the given rate.
pub fn exponential<R: Rng>(rng: &mut R, rate: f64) -> f64 {
    -(1.0 - rng.random::<f64>()).ln() / rate
}

/// Box-Muller standard normal draw.
pub(crate) fn standard_normal<R: Rng>(rng: &mut R) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// P(X >= k) for X ~ Binomial(n, 1/2), summed in log space so that large `n` does not underflow.
pub(crate) fn binomial_half_upper_tail(n: usize, k: usize) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    let ln_half_n = n as f64 * std::f64::consts::LN_2;
    // ln C(n, j), built up from ln C(n, 0) = 0.
    let mut ln_choose = 0.0f64;
    let mut tail = 0.0f64;
    for j in 0..=n {
        if j >= k {
            tail += (ln_choose - ln_half_n).exp();
        }
        if j < n {
            ln_choose += ((n - j) as f64).ln() - ((j + 1) as f64).ln();
        }
    }
    tail.min(1.0)
}

/// P(X >= k) for X ~ Binomial(n, p), summed in log space so that long replays do not underflow.
pub(crate) fn binomial_tail(n: usize, k: usize, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 || k > n {
        return if k > n { 0.0 } else { 1.0 };
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    let mut ln_pmf = n as f64 * ln_q;
    let mut below = 0.0;
    for i in 0..k {
        below += ln_pmf.exp();
        ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + ln_p - ln_q;
    }
    (1.0 - below).max(0.0)
}

/// The standard normal's quantile at `p` in (0, 1), by Acklam's rational approximation (relative
/// error below 1.2e-9); infinite at 0 and 1.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known quantiles of the standard normal, and its symmetry.
    #[test]
    fn normal_quantiles_are_the_known_ones() {
        for (p, z) in [
            (0.5, 0.0),
            (0.841_344_746, 1.0),
            (0.975, 1.959_963_985),
            (0.999, 3.090_232_306),
            (0.01, -2.326_347_874),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-6,
                "{p}: {}",
                normal_quantile(p)
            );
        }
        for p in [0.003, 0.2, 0.37] {
            assert!((normal_quantile(p) + normal_quantile(1.0 - p)).abs() < 1e-9);
        }
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(normal_quantile(1.0), f64::INFINITY);
    }
}
