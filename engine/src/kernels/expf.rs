//! `e^x` in f32 with the bits of the C library's `expf` (glibc's, as its x86-64 build for FMA
//! processors computes it), written out so that it inlines into the softmax loop instead of
//! costing a call per value.
//!
//! The steps are glibc's (`sysdeps/ieee754/flt-32/e_expf.c`): `x` in f64 is split as
//! `x = (k + r) ln 2 / 32` with an integer `k`, `2^(k/32)` comes from a 32-entry table and the
//! exponent bits, and `2^(r/32)` from a cubic; the fused multiply-adds sit where that build's
//! compiler put them. Inputs that underflow or overflow take glibc's special cases.

/// `2^(i/32)` as f64 bits, less `i << 47` (the table entry's share of the exponent field).
const TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `32 / ln 2`.
const INV_LN2_N: u64 = 0x40471547652b82fe;
/// `1.5 * 2^52`: added and taken away, it rounds to an integer.
const SHIFT: u64 = 0x4338000000000000;
/// The cubic's coefficients of `r^3`, `r^2` and `r` (`2^(r/32) ~ 1 + C2 r + C1 r^2 + C0 r^3`).
const C0: u64 = 0x3ebc6af84b912394;
const C1: u64 = 0x3f2ebfce50fac4f3;
const C2: u64 = 0x3f962e42ff0c52d6;

/// Above it, `expf` overflows to infinity.
const OVERFLOW: f32 = f32::from_bits(0x42b17217);
/// Below it, `expf` underflows to zero.
const UNDERFLOW: f32 = f32::from_bits(0xc2cff1b4);
/// Below it (and from [`UNDERFLOW`] up), `expf` gives the smallest subnormal.
const MAY_UNDERFLOW: f32 = f32::from_bits(0xc2ce8ecf);

/// `e^x` with the bits of glibc's `expf`.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    // |x| < 88: the common case, with no special value.
    if (x.to_bits() >> 20) & 0x7ff <= 0x42a {
        return expf_core(x);
    }
    if x.is_nan() {
        return x + x;
    }
    if x > OVERFLOW {
        return f32::INFINITY;
    }
    if x < UNDERFLOW {
        return 0.0;
    }
    if x < MAY_UNDERFLOW {
        return f32::from_bits(1);
    }
    expf_core(x)
}

/// glibc's steps for an `x` whose result is a normal or subnormal float.
#[inline(always)]
fn expf_core(x: f32) -> f32 {
    let (inv_ln2_n, shift) = (f64::from_bits(INV_LN2_N), f64::from_bits(SHIFT));
    let xd = f64::from(x);
    let z = inv_ln2_n.mul_add(xd, shift);
    let ki = z.to_bits();
    let kd = z - shift;
    let r = inv_ln2_n.mul_add(xd, -kd);
    let s = f64::from_bits(TABLE[(ki & 31) as usize].wrapping_add(ki << 47));
    let p = r.mul_add(f64::from_bits(C0), f64::from_bits(C1));
    let r2 = r * r;
    let y = r.mul_add(f64::from_bits(C2), 1.0);
    (p.mul_add(r2, y) * s) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `stride`-th f32 bit pattern from `from` to `to` (both ends of one sign).
    fn sweep(from: u32, to: u32, stride: u32) -> impl Iterator<Item = f32> {
        (from..=to).step_by(stride as usize).map(f32::from_bits)
    }

    #[test]
    fn special_values_follow_the_c_library() {
        assert_eq!(expf(0.0), 1.0);
        assert_eq!(expf(-0.0), 1.0);
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(f32::INFINITY), f32::INFINITY);
        assert!(expf(f32::NAN).is_nan());
        assert_eq!(expf(-200.0), 0.0);
        assert_eq!(expf(-103.5), f32::from_bits(1));
        assert_eq!(expf(100.0), f32::INFINITY);
    }

    #[test]
    fn is_within_one_unit_in_the_last_place_of_e_to_the_x() {
        for x in sweep(0x8000_0000, 0xc2ce_8ecf, 9973).chain(sweep(0, 0x42b1_7217, 9973)) {
            let want = f64::from(x).exp();
            let got = f64::from(expf(x));
            let ulp =
                f64::from(f32::from_bits((want as f32).to_bits() + 1)) - f64::from(want as f32);
            assert!((got - want).abs() <= ulp, "{x}: {got} against {want}");
        }
    }

    /// The bits of the C library's `expf` where that is glibc's x86-64 build for FMA processors,
    /// which these steps follow.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    #[test]
    fn equals_the_c_library_bit_for_bit() {
        if !std::arch::is_x86_feature_detected!("fma") {
            return;
        }
        let negative = sweep(0x8000_0000, 0xc2d0_0000, 101);
        let positive = sweep(0, 0x42b2_0000, 1009);
        for x in negative.chain(positive) {
            assert_eq!(expf(x).to_bits(), x.exp().to_bits(), "{x}");
        }
    }
}
