//! Every kernel tier this host supports, held against the scalar reference on seeded random inputs.
//!
//! Tolerance: integer block sums are exact in every tier, so SIMD and scalar differ only in the order
//! of f32 additions. Each comparison allows `|simd - scalar| <= 1e-6 * n * mean|x_i y_i|` (n elements,
//! the mean taken over the absolute element products, so the bound scales with the data rather than
//! with the possibly cancelling result).
//!
//! Stronger, exact checks: the `_x4` forms, the Q8_0 product of many rows with one activation row
//! (`gemv_q8_0_q8_0`) and the tiled products (`gemm_*`) equal single-row calls bit for bit, and the SIMD tiers reproduce ggml's x86 float order bit for bit (emulated here lane by
//! lane), except Q8_0 x Q8_0, which gives the scalar reference's bits.

use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};
use strata_engine::{
    kernels::{
        OutLayout,
        cpu::{self, KernelTier},
        dispatch::{self, KernelTable},
        scalar,
    },
    quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK},
};

/// Block counts: single blocks, odd counts, and the model's shapes (576 = 18 blocks, 1536 = 48).
const BLOCK_COUNTS: [usize; 6] = [1, 3, 17, 18, 48, 49];
/// Element counts for the float dots: tails of every length below a vector step, and model shapes.
const LENGTHS: [usize; 12] = [0, 1, 7, 15, 31, 33, 63, 64, 65, 100, 576, 1541];
const RTOL: f64 = 1e-6;

fn tables() -> Vec<&'static KernelTable> {
    cpu::available_tiers()
        .into_iter()
        .map(|t| KernelTable::for_tier(t).expect("available tiers have tables"))
        .collect()
}

fn simd_tables() -> Vec<&'static KernelTable> {
    tables()
        .into_iter()
        .filter(|t| t.tier() != KernelTier::Scalar)
        .collect()
}

fn scale(rng: &mut StdRng) -> f16 {
    let magnitude = rng.random_range(1e-4f32..0.05);
    f16::from_f32(if rng.random() { magnitude } else { -magnitude })
}

fn q8_0_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
    (0..n)
        .map(|_| BlockQ8_0 {
            d: scale(rng),
            qs: std::array::from_fn(|_| rng.random::<i8>()),
        })
        .collect()
}

/// Activations as the quantizers write them: values in -127..=127.
fn q8_0_activations(rng: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
    (0..n)
        .map(|_| BlockQ8_0 {
            d: scale(rng),
            qs: std::array::from_fn(|_| rng.random_range(-127..=127)),
        })
        .collect()
}

fn q8_1_activations(rng: &mut StdRng, n: usize) -> Vec<BlockQ8_1> {
    q8_0_activations(rng, n)
        .into_iter()
        .map(|b| {
            let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
            BlockQ8_1 {
                d: b.d,
                s: f16::from_f32(sum as f32 * b.d.to_f32()),
                qs: b.qs,
            }
        })
        .collect()
}

fn q4_0_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ4_0> {
    (0..n)
        .map(|_| BlockQ4_0 {
            d: scale(rng),
            qs: rng.random(),
        })
        .collect()
}

fn q4_1_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ4_1> {
    (0..n)
        .map(|_| BlockQ4_1 {
            d: scale(rng),
            m: scale(rng),
            qs: rng.random(),
        })
        .collect()
}

fn nibbles(qs: &[u8; QK / 2]) -> [i32; QK] {
    std::array::from_fn(|j| {
        if j < QK / 2 {
            i32::from(qs[j] & 0x0f)
        } else {
            i32::from(qs[j - QK / 2] >> 4)
        }
    })
}

/// Element values of the blocks, dequantized in f64.
fn q8_0_values(blocks: &[BlockQ8_0]) -> Vec<f64> {
    blocks
        .iter()
        .flat_map(|b| {
            let d = f64::from(b.d.to_f32());
            b.qs.map(|q| f64::from(q) * d)
        })
        .collect()
}

fn q8_1_values(blocks: &[BlockQ8_1]) -> Vec<f64> {
    blocks
        .iter()
        .flat_map(|b| {
            let d = f64::from(b.d.to_f32());
            b.qs.map(|q| f64::from(q) * d)
        })
        .collect()
}

fn q4_0_values(blocks: &[BlockQ4_0]) -> Vec<f64> {
    blocks
        .iter()
        .flat_map(|b| {
            let d = f64::from(b.d.to_f32());
            nibbles(&b.qs).map(|q| f64::from(q - 8) * d)
        })
        .collect()
}

fn q4_1_values(blocks: &[BlockQ4_1]) -> Vec<f64> {
    blocks
        .iter()
        .flat_map(|b| {
            let (d, m) = (f64::from(b.d.to_f32()), f64::from(b.m.to_f32()));
            nibbles(&b.qs).map(|q| f64::from(q) * d + m)
        })
        .collect()
}

/// `1e-6 * n * mean|x_i y_i|`.
fn tolerance(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    if n == 0 {
        return 0.0;
    }
    let mean = x.iter().zip(y).map(|(a, b)| (a * b).abs()).sum::<f64>() / n as f64;
    RTOL * n as f64 * mean
}

#[track_caller]
fn assert_close(what: &str, got: f32, want: f32, tol: f64) {
    let diff = (f64::from(got) - f64::from(want)).abs();
    assert!(
        diff <= tol,
        "{what}: simd {got} vs scalar {want}: |diff| {diff:e} > tolerance {tol:e}"
    );
}

#[track_caller]
fn assert_bits(what: &str, got: f32, want: f32) {
    assert_eq!(got.to_bits(), want.to_bits(), "{what}: {got} vs {want}");
}

// ---------------------------------------------------------------------------------------------
// Against the scalar reference.

#[test]
fn quantized_dots_match_scalar_on_every_tier() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0001);
    for &nb in &BLOCK_COUNTS {
        let w8 = q8_0_weights(&mut rng, nb);
        let w40 = q4_0_weights(&mut rng, nb);
        let w41 = q4_1_weights(&mut rng, nb);
        let a8 = q8_0_activations(&mut rng, nb);
        let a81 = q8_1_activations(&mut rng, nb);
        let want8 = scalar::vec_dot_q8_0_q8_0(&w8, &a8);
        let want40 = scalar::vec_dot_q4_0_q8_0(&w40, &a8);
        let want41 = scalar::vec_dot_q4_1_q8_1(&w41, &a81);
        let tol8 = tolerance(&q8_0_values(&w8), &q8_0_values(&a8));
        let tol40 = tolerance(&q4_0_values(&w40), &q8_0_values(&a8));
        let tol41 = tolerance(&q4_1_values(&w41), &q8_1_values(&a81));
        for k in tables() {
            let tier = k.tier();
            let got = k.vec_dot_q8_0_q8_0(&w8, &a8);
            assert_close(&format!("{tier} q8_0 x{nb}"), got, want8, tol8);
            let got = k.vec_dot_q4_0_q8_0(&w40, &a8);
            assert_close(&format!("{tier} q4_0 x{nb}"), got, want40, tol40);
            let got = k.vec_dot_q4_1_q8_1(&w41, &a81);
            assert_close(&format!("{tier} q4_1 x{nb}"), got, want41, tol41);
        }
    }
}

#[test]
fn float_dots_match_scalar_on_every_tier() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0002);
    for &n in &LENGTHS {
        let a: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        let ah: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
        let bh: Vec<f16> = b.iter().map(|&v| f16::from_f32(v)).collect();
        let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        let wide_h = |v: &[f16]| v.iter().map(|x| f64::from(x.to_f32())).collect::<Vec<_>>();
        let tol32 = tolerance(&wide(&a), &wide(&b));
        let tol16 = tolerance(&wide_h(&ah), &wide_h(&bh));
        let want32 = scalar::vec_dot_f32(&a, &b);
        let want16 = scalar::vec_dot_f16(&ah, &bh);
        for k in tables() {
            let tier = k.tier();
            assert_close(
                &format!("{tier} f32 n={n}"),
                k.vec_dot_f32(&a, &b),
                want32,
                tol32,
            );
            assert_close(
                &format!("{tier} f16 n={n}"),
                k.vec_dot_f16(&ah, &bh),
                want16,
                tol16,
            );
        }
    }
}

#[test]
fn x4_forms_equal_four_single_row_calls() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0003);
    for &nb in &BLOCK_COUNTS {
        let w8: [Vec<BlockQ8_0>; 4] = std::array::from_fn(|_| q8_0_weights(&mut rng, nb));
        let w40: [Vec<BlockQ4_0>; 4] = std::array::from_fn(|_| q4_0_weights(&mut rng, nb));
        let w41: [Vec<BlockQ4_1>; 4] = std::array::from_fn(|_| q4_1_weights(&mut rng, nb));
        let wh: [Vec<f16>; 4] = std::array::from_fn(|_| {
            (0..nb * QK + nb % 7)
                .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
                .collect()
        });
        let yh: Vec<f16> = (0..nb * QK + nb % 7)
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let a8 = q8_0_activations(&mut rng, nb);
        let a81 = q8_1_activations(&mut rng, nb);
        for k in tables() {
            let tier = k.tier();
            let got = k.vec_dot_q8_0_q8_0_x4(w8.each_ref().map(|r| r.as_slice()), &a8);
            let got40 = k.vec_dot_q4_0_q8_0_x4(w40.each_ref().map(|r| r.as_slice()), &a8);
            let got41 = k.vec_dot_q4_1_q8_1_x4(w41.each_ref().map(|r| r.as_slice()), &a81);
            let goth = k.vec_dot_f16_x4(wh.each_ref().map(|r| r.as_slice()), &yh);
            for r in 0..4 {
                let what = format!("{tier} x{nb} row {r}");
                assert_bits(
                    &format!("q8_0 {what}"),
                    got[r],
                    k.vec_dot_q8_0_q8_0(&w8[r], &a8),
                );
                assert_bits(
                    &format!("q4_0 {what}"),
                    got40[r],
                    k.vec_dot_q4_0_q8_0(&w40[r], &a8),
                );
                assert_bits(
                    &format!("q4_1 {what}"),
                    got41[r],
                    k.vec_dot_q4_1_q8_1(&w41[r], &a81),
                );
                assert_bits(&format!("f16 {what}"), goth[r], k.vec_dot_f16(&wh[r], &yh));
            }
        }
    }
}

/// Weight row counts for the tiled products: below, at and past a tile, with leftover rows.
const TILED_ROWS: [usize; 5] = [1, 3, 5, 8, 70];
/// Token counts for the tiled products: below, at and past a tile, with leftover tokens.
const TILED_TOKENS: [usize; 6] = [1, 2, 3, 4, 5, 17];

/// Runs a tiled product in both layouts and checks every result against the single-row dot of its
/// row and token, bit for bit.
#[track_caller]
fn check_tiled<W, A>(
    what: &str,
    (w, x, nb): (&[W], &[A], usize),
    gemm: impl Fn(&[W], &[A], &mut [f32], OutLayout),
    dot: impl Fn(&[W], &[A]) -> f32,
) {
    let (rows, tokens) = (w.len() / nb, x.len() / nb);
    let mut token_major = vec![f32::NAN; rows * tokens];
    gemm(w, x, &mut token_major, OutLayout::token_major(rows));
    let mut row_major = vec![f32::NAN; rows * tokens];
    gemm(w, x, &mut row_major, OutLayout::row_major(tokens));
    for r in 0..rows {
        for t in 0..tokens {
            let want = dot(&w[r * nb..(r + 1) * nb], &x[t * nb..(t + 1) * nb]);
            let at = format!("{what} row {r} token {t}");
            assert_bits(&at, token_major[t * rows + r], want);
            assert_bits(&at, row_major[r * tokens + t], want);
        }
    }
}

#[test]
fn tiled_products_equal_single_row_dots_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0006);
    for nb in [1, 3, 18] {
        for rows in TILED_ROWS {
            let w8 = q8_0_weights(&mut rng, rows * nb);
            let w40 = q4_0_weights(&mut rng, rows * nb);
            let w41 = q4_1_weights(&mut rng, rows * nb);
            for tokens in TILED_TOKENS {
                let a8 = q8_0_activations(&mut rng, tokens * nb);
                let a81 = q8_1_activations(&mut rng, tokens * nb);
                for k in tables() {
                    let what = format!("{} {rows} x {tokens} x{nb}", k.tier());
                    check_tiled(
                        &format!("q8_0 {what}"),
                        (&w8, &a8, nb),
                        |w, x, out, layout| k.gemm_q8_0_q8_0(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q8_0_q8_0(w, x),
                    );
                    check_tiled(
                        &format!("q4_0 {what}"),
                        (&w40, &a8, nb),
                        |w, x, out, layout| k.gemm_q4_0_q8_0(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q4_0_q8_0(w, x),
                    );
                    check_tiled(
                        &format!("q4_1 {what}"),
                        (&w41, &a81, nb),
                        |w, x, out, layout| k.gemm_q4_1_q8_1(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q4_1_q8_1(w, x),
                    );
                }
            }
        }
    }
}

#[test]
fn q8_0_products_of_many_rows_equal_single_row_dots_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0007);
    // Past 512 blocks the AVX-512 form falls back to single-row dots.
    for nb in BLOCK_COUNTS.into_iter().chain([0, 8, 16, 600]) {
        for rows in [1, 5, 64] {
            let w = q8_0_weights(&mut rng, rows * nb);
            let y = q8_0_activations(&mut rng, nb);
            for k in tables() {
                let mut out = vec![f32::NAN; rows];
                k.gemv_q8_0_q8_0(&w, &y, &mut out);
                for (r, &got) in out.iter().enumerate() {
                    let row = &w[r * nb..(r + 1) * nb];
                    let at = format!("{} {rows} rows x{nb} row {r}", k.tier());
                    assert_bits(&at, got, k.vec_dot_q8_0_q8_0(row, &y));
                    assert_bits(&at, got, scalar::vec_dot_q8_0_q8_0(row, &y));
                }
            }
        }
    }
}

#[test]
fn free_functions_use_the_process_table() {
    let k = dispatch::table();
    assert!(cpu::available_tiers().contains(&k.tier()));
    let mut rng = StdRng::seed_from_u64(0x5eed_0004);
    let w = q4_1_weights(&mut rng, 18);
    let a = q8_1_activations(&mut rng, 18);
    assert_bits(
        "q4_1",
        dispatch::vec_dot_q4_1_q8_1(&w, &a),
        k.vec_dot_q4_1_q8_1(&w, &a),
    );
}

// ---------------------------------------------------------------------------------------------
// ggml's x86 float order, emulated lane by lane.

/// `hsum_float_8`: `(l0+l4 + l2+l6) + (l1+l5 + l3+l7)`.
fn hsum_float_8(l: [f32; 8]) -> f32 {
    let r: [f32; 4] = std::array::from_fn(|k| l[k + 4] + l[k]);
    (r[0] + r[2]) + (r[1] + r[3])
}

/// Per block: eight int32 lanes of 4-byte product sums, to f32, FMA'd with the scale product.
fn ggml_quant_dot(blocks: usize, block: impl Fn(usize) -> (f32, [i32; QK])) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..blocks {
        let (d, prods) = block(i);
        for (l, a) in acc.iter_mut().enumerate() {
            let lane: i32 = prods[4 * l..4 * l + 4].iter().sum();
            *a = d.mul_add(lane as f32, *a);
        }
    }
    hsum_float_8(acc)
}

fn ggml_q4_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    ggml_quant_dot(x.len(), |i| {
        let d = x[i].d.to_f32() * y[i].d.to_f32();
        let q = nibbles(&x[i].qs);
        (
            d,
            std::array::from_fn(|j| (q[j] - 8) * i32::from(y[i].qs[j])),
        )
    })
}

fn ggml_q4_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut summs = 0f32;
    for (a, b) in x.iter().zip(y) {
        summs = a.m.to_f32().mul_add(b.s.to_f32(), summs);
    }
    let dots = ggml_quant_dot(x.len(), |i| {
        let d = x[i].d.to_f32() * y[i].d.to_f32();
        let q = nibbles(&x[i].qs);
        (d, std::array::from_fn(|j| q[j] * i32::from(y[i].qs[j])))
    });
    dots + summs
}

/// ggml's float dot: four accumulators of `lanes` lanes over steps of `4 * lanes` elements, the
/// tier's reduction, then leftovers one at a time (`f16`: products in f32, sums in f64).
fn ggml_float_dot(tier: KernelTier, x: &[f32], y: &[f32], f16_leftovers: bool) -> f32 {
    let lanes = if tier == KernelTier::Avx512 { 16 } else { 8 };
    let n = x.len().min(y.len());
    let np = n - n % (4 * lanes);
    let mut sum = vec![vec![0f32; lanes]; 4];
    for base in (0..np).step_by(4 * lanes) {
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, acc) in s.iter_mut().enumerate() {
                let k = base + j * lanes + l;
                *acc = x[k].mul_add(y[k], *acc);
            }
        }
    }
    let x0: Vec<f32> = (0..lanes)
        .map(|l| (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]))
        .collect();
    let reduced = if lanes == 8 {
        // GGML_F32x8_REDUCE: low + high 128, then two `hadd`s.
        let t0: [f32; 4] = std::array::from_fn(|k| x0[k] + x0[k + 4]);
        (t0[0] + t0[1]) + (t0[2] + t0[3])
    } else {
        // `_mm512_reduce_add_ps`: halves, quarters, then lanes 0+2 and 1+3.
        let t3: [f32; 8] = std::array::from_fn(|k| x0[k] + x0[k + 8]);
        let t6: [f32; 4] = std::array::from_fn(|k| t3[k] + t3[k + 4]);
        (t6[0] + t6[2]) + (t6[1] + t6[3])
    };
    if f16_leftovers {
        let mut sumf = f64::from(reduced);
        for k in np..n {
            sumf += f64::from(x[k] * y[k]);
        }
        sumf as f32
    } else {
        let mut sumf = reduced;
        for k in np..n {
            sumf = x[k].mul_add(y[k], sumf);
        }
        sumf
    }
}

#[test]
fn simd_tiers_reproduce_ggml_x86_float_order_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0005);
    for &nb in &BLOCK_COUNTS {
        let w8 = q8_0_weights(&mut rng, nb);
        let w40 = q4_0_weights(&mut rng, nb);
        let w41 = q4_1_weights(&mut rng, nb);
        let a8 = q8_0_activations(&mut rng, nb);
        let a81 = q8_1_activations(&mut rng, nb);
        for k in simd_tables() {
            let tier = k.tier();
            // Q8_0 keeps the scalar reference's order instead (so that its products of many
            // tokens can hold tokens in lanes): the same bits as the reference.
            assert_bits(
                &format!("{tier} q8_0 x{nb}"),
                k.vec_dot_q8_0_q8_0(&w8, &a8),
                scalar::vec_dot_q8_0_q8_0(&w8, &a8),
            );
            assert_bits(
                &format!("{tier} q4_0 x{nb}"),
                k.vec_dot_q4_0_q8_0(&w40, &a8),
                ggml_q4_0(&w40, &a8),
            );
            assert_bits(
                &format!("{tier} q4_1 x{nb}"),
                k.vec_dot_q4_1_q8_1(&w41, &a81),
                ggml_q4_1(&w41, &a81),
            );
        }
    }
    for &n in &LENGTHS {
        let a: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
        let ah: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
        let bh: Vec<f16> = b.iter().map(|&v| f16::from_f32(v)).collect();
        let ah32: Vec<f32> = ah.iter().map(|v| v.to_f32()).collect();
        let bh32: Vec<f32> = bh.iter().map(|v| v.to_f32()).collect();
        for k in simd_tables() {
            let tier = k.tier();
            assert_bits(
                &format!("{tier} f32 n={n}"),
                k.vec_dot_f32(&a, &b),
                ggml_float_dot(tier, &a, &b, false),
            );
            assert_bits(
                &format!("{tier} f16 n={n}"),
                k.vec_dot_f16(&ah, &bh),
                ggml_float_dot(tier, &ah32, &bh32, true),
            );
        }
    }
}

#[test]
fn q8_0_weights_at_minus_128_are_exact() {
    // Weight bytes may be -128 (files are not bound to the quantizer's range); the activation side
    // is -127..=127. Every tier must give the scalar value.
    let w = [BlockQ8_0 {
        d: f16::ONE,
        qs: [i8::MIN; QK],
    }];
    let y = [BlockQ8_0 {
        d: f16::ONE,
        qs: std::array::from_fn(|j| if j % 2 == 0 { 127 } else { -127 }),
    }];
    let extreme = [BlockQ8_0 {
        d: f16::ONE,
        qs: [-127; QK],
    }];
    for k in tables() {
        assert_eq!(k.vec_dot_q8_0_q8_0(&w, &y), 0.0, "{}", k.tier());
        assert_eq!(
            k.vec_dot_q8_0_q8_0(&w, &extreme),
            (128 * 127 * QK) as f32,
            "{}",
            k.tier()
        );
    }
}
