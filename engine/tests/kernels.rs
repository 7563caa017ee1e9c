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
        k_numerics::KPath,
        scalar,
    },
    quant::{
        self, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0,
        BlockQ8_1, BlockQ8K, QK, QK_K,
    },
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
            // The scalar reference takes ggml's x86 order too: the same bits.
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

// ---------------------------------------------------------------------------------------------
// The 5-bit and K-quant types: Q5_0 and Q5_1 against Q8_0 / Q8_1, Q4_K, Q5_K and Q6_K against Q8_K.

/// Super-block counts: single, odd, and the model shapes (640 = 20 blocks of 32 is no K-quant row;
/// 1024 = 4 super-blocks, 2048 = 8).
const SUPER_BLOCK_COUNTS: [usize; 6] = [1, 3, 4, 8, 17, 49];

fn q5_0_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ5_0> {
    (0..n)
        .map(|_| BlockQ5_0 {
            d: scale(rng),
            qh: rng.random(),
            qs: rng.random(),
        })
        .collect()
}

fn q5_1_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ5_1> {
    (0..n)
        .map(|_| BlockQ5_1 {
            d: scale(rng),
            m: scale(rng),
            qh: rng.random(),
            qs: rng.random(),
        })
        .collect()
}

/// A K-quant super-scale: positive, as llama-quantize writes them, but small or large.
fn super_scale(rng: &mut StdRng) -> f16 {
    f16::from_f32(rng.random_range(1e-5f32..2e-3))
}

/// Q4_K super-blocks with every byte of the packed 6-bit scales and mins random.
fn q4_k_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ4K> {
    (0..n)
        .map(|_| BlockQ4K {
            d: super_scale(rng),
            dmin: super_scale(rng),
            scales: rng.random(),
            qs: std::array::from_fn(|_| rng.random()),
        })
        .collect()
}

fn q5_k_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ5K> {
    (0..n)
        .map(|_| BlockQ5K {
            d: super_scale(rng),
            dmin: super_scale(rng),
            scales: rng.random(),
            qh: rng.random(),
            qs: std::array::from_fn(|_| rng.random()),
        })
        .collect()
}

/// Q6_K super-blocks with signed 8-bit sub-block scales over their whole range.
fn q6_k_weights(rng: &mut StdRng, n: usize) -> Vec<BlockQ6K> {
    (0..n)
        .map(|_| BlockQ6K {
            ql: std::array::from_fn(|_| rng.random()),
            qh: rng.random(),
            scales: rng.random(),
            d: super_scale(rng),
        })
        .collect()
}

/// Q8_K activations as the quantizer writes them: values in -127..=127, their 16-value sums, and a
/// scale of either sign.
fn q8_k_activations(rng: &mut StdRng, n: usize) -> Vec<BlockQ8K> {
    (0..n)
        .map(|_| {
            let qs: [i8; QK_K] = std::array::from_fn(|_| rng.random_range(-127..=127));
            let bsums = std::array::from_fn(|j| {
                qs[16 * j..16 * j + 16].iter().map(|&q| i16::from(q)).sum()
            });
            let d = rng.random_range(1e-4f32..0.05);
            BlockQ8K {
                d: if rng.random() { d } else { -d },
                qs,
                bsums,
            }
        })
        .collect()
}

fn q8_k_values(blocks: &[BlockQ8K]) -> Vec<f64> {
    blocks
        .iter()
        .flat_map(|b| b.qs.map(|q| f64::from(q) * f64::from(b.d)))
        .collect()
}

/// ggml `get_scale_min_k4`, written out again here so that the checks do not share the engine's.
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (f64, f64) {
    let (sc, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (f64::from(sc), f64::from(m))
}

/// Each element of a weight row as `(scaled part, subtracted part)`: its value is their difference,
/// and their magnitudes bound the rounding of any float order.
type Parts = Vec<(f64, f64)>;

fn q5_0_parts(blocks: &[BlockQ5_0]) -> Parts {
    blocks
        .iter()
        .flat_map(|b| {
            let d = f64::from(b.d.to_f32());
            let qh = u32::from_le_bytes(b.qh);
            let q = nibbles(&b.qs);
            (0..QK).map(move |j| {
                (
                    f64::from(q[j] | (((qh >> j) & 1) << 4) as i32) * d,
                    16.0 * d,
                )
            })
        })
        .collect()
}

fn q5_1_parts(blocks: &[BlockQ5_1]) -> Parts {
    blocks
        .iter()
        .flat_map(|b| {
            let (d, m) = (f64::from(b.d.to_f32()), f64::from(b.m.to_f32()));
            let qh = u32::from_le_bytes(b.qh);
            let q = nibbles(&b.qs);
            (0..QK).map(move |j| (f64::from(q[j] | (((qh >> j) & 1) << 4) as i32) * d, -m))
        })
        .collect()
}

/// Q4_K (no `qh`) or Q5_K (with): ggml's `dequantize_row_q4_K` / `_q5_K` loops over 64 values.
fn k4_parts(
    d: f16,
    dmin: f16,
    scales: &[u8; 12],
    qs: &[u8; QK_K / 2],
    qh: Option<&[u8; 32]>,
) -> Parts {
    let (d, dmin) = (f64::from(d.to_f32()), f64::from(dmin.to_f32()));
    let mut out = Vec::with_capacity(QK_K);
    for chunk in 0..4 {
        for (half, shift) in [(0, 0), (1, 4)] {
            let (sc, m) = scale_min_k4(2 * chunk + half, scales);
            for l in 0..32 {
                let mut q = (qs[32 * chunk + l] >> shift) & 0xF;
                if let Some(qh) = qh
                    && qh[l] & (1 << (2 * chunk + half)) != 0
                {
                    q += 16;
                }
                out.push((d * sc * f64::from(q), dmin * m));
            }
        }
    }
    out
}

fn q4_k_parts(blocks: &[BlockQ4K]) -> Parts {
    blocks
        .iter()
        .flat_map(|b| k4_parts(b.d, b.dmin, &b.scales, &b.qs, None))
        .collect()
}

fn q5_k_parts(blocks: &[BlockQ5K]) -> Parts {
    blocks
        .iter()
        .flat_map(|b| k4_parts(b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh)))
        .collect()
}

/// ggml's `dequantize_row_q6_K` loop: two halves of 128, four values per `l`.
fn q6_k_parts(blocks: &[BlockQ6K]) -> Parts {
    let mut out = Vec::with_capacity(blocks.len() * QK_K);
    for b in blocks {
        let d = f64::from(b.d.to_f32());
        for half in 0..2 {
            let mut values = [(0f64, 0f64); 128];
            for l in 0..32 {
                let (ql, qh) = (&b.ql[64 * half..], b.qh[32 * half + l]);
                let sc = |k: usize| f64::from(b.scales[8 * half + k / 16]) * d;
                let q = [
                    (ql[l] & 0xF) | ((qh & 3) << 4),
                    (ql[l + 32] & 0xF) | (((qh >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((qh >> 6) & 3) << 4),
                ];
                for (quarter, &q) in q.iter().enumerate() {
                    let k = l + 32 * quarter;
                    values[k] = (sc(k) * f64::from(q), sc(k) * 32.0);
                }
            }
            out.extend(values);
        }
    }
    out
}

/// The exact dot of the parts' values with `y`, and `1e-6 * sum(|parts| |y|)`, a bound on float
/// rounding in any order that scales with the parts, not the possibly cancelling result.
fn exact_and_tolerance(parts: &Parts, y: &[f64]) -> (f64, f64) {
    let exact = parts.iter().zip(y).map(|((a, b), y)| (a - b) * y).sum();
    let mass: f64 = parts
        .iter()
        .zip(y)
        .map(|((a, b), y)| (a.abs() + b.abs()) * y.abs())
        .sum();
    (exact, RTOL * mass)
}

/// [`exact_and_tolerance`] for Q5_1 against Q8_1, whose minimum multiplies the activations' stored
/// block sum `s` (an f16, so not exactly `d * sum(q)`), as the format defines the product.
fn q5_1_exact_and_tolerance(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> (f64, f64) {
    let (mut exact, mut mass) = (0f64, 0f64);
    for (x, y) in w.iter().zip(a) {
        let values = q5_1_parts(std::slice::from_ref(x));
        let acts = q8_1_values(std::slice::from_ref(y));
        let min = f64::from(x.m.to_f32()) * f64::from(y.s.to_f32());
        let products = values.iter().zip(&acts).map(|((v, _), y)| v * y);
        exact += products.clone().sum::<f64>() + min;
        mass += products.map(f64::abs).sum::<f64>() + min.abs();
    }
    (exact, RTOL * mass)
}

/// One new kernel's weights and activations, with its single-row dots.
struct NewDots {
    q5_0: (Vec<BlockQ5_0>, Vec<BlockQ8_0>),
    q5_1: (Vec<BlockQ5_1>, Vec<BlockQ8_1>),
    q4_k: (Vec<BlockQ4K>, Vec<BlockQ8K>),
    q5_k: (Vec<BlockQ5K>, Vec<BlockQ8K>),
    q6_k: (Vec<BlockQ6K>, Vec<BlockQ8K>),
}

impl NewDots {
    /// `nb` super-blocks' worth of each: `8 * nb` blocks of 32 for the 32-wide types.
    fn random(rng: &mut StdRng, nb: usize) -> Self {
        let a8k = q8_k_activations(rng, nb);
        Self {
            q5_0: (q5_0_weights(rng, 8 * nb), q8_0_activations(rng, 8 * nb)),
            q5_1: (q5_1_weights(rng, 8 * nb), q8_1_activations(rng, 8 * nb)),
            q4_k: (q4_k_weights(rng, nb), a8k.clone()),
            q5_k: (q5_k_weights(rng, nb), a8k.clone()),
            q6_k: (q6_k_weights(rng, nb), a8k),
        }
    }

    /// `(name, the tier's dot, the scalar dot, exact value, tolerance)` of each type.
    fn results(&self, k: &KernelTable) -> [(&'static str, f32, f32, f64, f64); 5] {
        let (w, a) = &self.q5_0;
        let (e50, t50) = exact_and_tolerance(&q5_0_parts(w), &q8_0_values(a));
        let q5_0 = (
            "q5_0",
            k.vec_dot_q5_0_q8_0(w, a),
            scalar::vec_dot_q5_0_q8_0(w, a),
            e50,
            t50,
        );
        let (w, a) = &self.q5_1;
        let (e51, t51) = q5_1_exact_and_tolerance(w, a);
        let q5_1 = (
            "q5_1",
            k.vec_dot_q5_1_q8_1(w, a),
            scalar::vec_dot_q5_1_q8_1(w, a),
            e51,
            t51,
        );
        let (w, a) = &self.q4_k;
        let (e4k, t4k) = exact_and_tolerance(&q4_k_parts(w), &q8_k_values(a));
        let q4_k = (
            "q4_k",
            k.vec_dot_q4_k_q8_k(w, a, KPath::VecDot),
            scalar::vec_dot_q4_k_q8_k(w, a, KPath::VecDot),
            e4k,
            t4k,
        );
        let (w, a) = &self.q5_k;
        let (e5k, t5k) = exact_and_tolerance(&q5_k_parts(w), &q8_k_values(a));
        let q5_k = (
            "q5_k",
            k.vec_dot_q5_k_q8_k(w, a, KPath::VecDot),
            scalar::vec_dot_q5_k_q8_k(w, a, KPath::VecDot),
            e5k,
            t5k,
        );
        let (w, a) = &self.q6_k;
        let (e6k, t6k) = exact_and_tolerance(&q6_k_parts(w), &q8_k_values(a));
        let q6_k = (
            "q6_k",
            k.vec_dot_q6_k_q8_k(w, a, KPath::VecDot),
            scalar::vec_dot_q6_k_q8_k(w, a, KPath::VecDot),
            e6k,
            t6k,
        );
        [q5_0, q5_1, q4_k, q5_k, q6_k]
    }
}

#[test]
fn new_quantized_dots_match_scalar_on_every_tier() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0101);
    for &nb in &SUPER_BLOCK_COUNTS {
        let dots = NewDots::random(&mut rng, nb);
        for k in tables() {
            for (name, got, want, _, tol) in dots.results(k) {
                assert_close(&format!("{} {name} x{nb}", k.tier()), got, want, tol);
            }
        }
    }
}

/// Each new kernel equals the f64 dot of its weights and activations dequantized (ggml's dequantizer
/// loops, written out in the test), within float rounding, on every tier.
#[test]
fn new_quantized_dots_equal_dequantized_dots() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0102);
    for &nb in &SUPER_BLOCK_COUNTS {
        let dots = NewDots::random(&mut rng, nb);
        for k in tables() {
            for (name, got, _, exact, tol) in dots.results(k) {
                let diff = (f64::from(got) - exact).abs();
                assert!(
                    diff <= tol,
                    "{} {name} x{nb}: {got} vs dequantized {exact}: |diff| {diff:e} > {tol:e}",
                    k.tier()
                );
            }
        }
    }
}

/// The engine's own dequantizers give the test's values (to f32 rounding), so that the dequantized
/// dots above check the kernels against the formats, not against themselves.
#[test]
fn engine_dequantizers_match_the_formats() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0103);
    let check = |name: &str, parts: Parts, got: Vec<f32>| {
        for (i, ((a, b), v)) in parts.iter().zip(&got).enumerate() {
            let tol = 4.0 * f64::from(f32::EPSILON) * (a.abs() + b.abs());
            assert!(
                (a - b - f64::from(*v)).abs() <= tol,
                "{name} element {i}: {} vs {v}",
                a - b
            );
        }
    };
    let w = q5_0_weights(&mut rng, 24);
    let mut out = vec![0f32; 24 * QK];
    quant::dequantize_q5_0(&w, &mut out);
    check("q5_0", q5_0_parts(&w), out);
    let w = q5_1_weights(&mut rng, 24);
    let mut out = vec![0f32; 24 * QK];
    quant::dequantize_q5_1(&w, &mut out);
    check("q5_1", q5_1_parts(&w), out);
    let w = q4_k_weights(&mut rng, 3);
    let mut out = vec![0f32; 3 * QK_K];
    quant::dequantize_q4_k(&w, &mut out);
    check("q4_k", q4_k_parts(&w), out);
    let w = q5_k_weights(&mut rng, 3);
    let mut out = vec![0f32; 3 * QK_K];
    quant::dequantize_q5_k(&w, &mut out);
    check("q5_k", q5_k_parts(&w), out);
    let w = q6_k_weights(&mut rng, 3);
    let mut out = vec![0f32; 3 * QK_K];
    quant::dequantize_q6_k(&w, &mut out);
    check("q6_k", q6_k_parts(&w), out);
}

/// Hand-built super-blocks whose dots are exact small integers, on every tier.
#[test]
fn k_quant_dots_of_hand_built_blocks_are_exact() {
    // Every 6-bit scale 1 and min 2 (bytes 0..8 hold scales and mins of sub-blocks 0..4 in their low
    // six bits; bytes 8..12 those of sub-blocks 4..8 in nibbles, high bits zero), d = 0.5, dmin = 1.
    let mut scales = [0u8; 12];
    scales[..4].fill(1);
    scales[4..8].fill(2);
    scales[8..].fill(0x21);
    let q4 = [BlockQ4K {
        d: f16::from_f32(0.5),
        dmin: f16::ONE,
        scales,
        qs: [0x31; QK_K / 2], // low nibbles 1, high nibbles 3
    }];
    let ones = [BlockQ8K {
        d: 1.0,
        qs: [1; QK_K],
        bsums: [16; QK_K / 16],
    }];
    // Values: 0.5 * 1 * q - 2 with q = 1 (first 32 of each 64) or 3: -1.5 or -0.5, 128 of each.
    let q5 = [BlockQ5K {
        d: q4[0].d,
        dmin: q4[0].dmin,
        scales,
        qh: [0xFF; QK_K / 8], // every fifth bit: q = 17 or 19
        qs: q4[0].qs,
    }];
    // Q6_K: every value q = 33 (low nibble 1, high bits 2), scale s = sub-block index - 8, d = 0.25:
    // x = 0.25 * s * 1, 16 values per scale, sum over s of 16 * 0.25 * s = 4 * (-8 - 7 ... + 7) = -32.
    let q6 = [BlockQ6K {
        ql: [0x11; QK_K / 2],
        qh: [0xAA; QK_K / 4],
        scales: std::array::from_fn(|s| s as i8 - 8),
        d: f16::from_f32(0.25),
    }];
    for k in tables() {
        let tier = k.tier();
        assert_eq!(
            k.vec_dot_q4_k_q8_k(&q4, &ones, KPath::VecDot),
            128.0 * -1.5 + 128.0 * -0.5,
            "{tier} q4_k"
        );
        assert_eq!(
            k.vec_dot_q5_k_q8_k(&q5, &ones, KPath::VecDot),
            128.0 * 6.5 + 128.0 * 7.5,
            "{tier} q5_k"
        );
        assert_eq!(
            k.vec_dot_q6_k_q8_k(&q6, &ones, KPath::VecDot),
            -32.0,
            "{tier} q6_k"
        );
    }
}

#[test]
fn new_x4_forms_equal_four_single_row_calls() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0104);
    for &nb in &SUPER_BLOCK_COUNTS {
        let w50: [Vec<BlockQ5_0>; 4] = std::array::from_fn(|_| q5_0_weights(&mut rng, 8 * nb));
        let w51: [Vec<BlockQ5_1>; 4] = std::array::from_fn(|_| q5_1_weights(&mut rng, 8 * nb));
        let w4k: [Vec<BlockQ4K>; 4] = std::array::from_fn(|_| q4_k_weights(&mut rng, nb));
        let w5k: [Vec<BlockQ5K>; 4] = std::array::from_fn(|_| q5_k_weights(&mut rng, nb));
        let w6k: [Vec<BlockQ6K>; 4] = std::array::from_fn(|_| q6_k_weights(&mut rng, nb));
        let a8 = q8_0_activations(&mut rng, 8 * nb);
        let a81 = q8_1_activations(&mut rng, 8 * nb);
        let a8k = q8_k_activations(&mut rng, nb);
        for k in tables() {
            let got50 = k.vec_dot_q5_0_q8_0_x4(w50.each_ref().map(|r| r.as_slice()), &a8);
            let got51 = k.vec_dot_q5_1_q8_1_x4(w51.each_ref().map(|r| r.as_slice()), &a81);
            let got4k =
                k.vec_dot_q4_k_q8_k_x4(w4k.each_ref().map(|r| r.as_slice()), &a8k, KPath::VecDot);
            let got5k =
                k.vec_dot_q5_k_q8_k_x4(w5k.each_ref().map(|r| r.as_slice()), &a8k, KPath::VecDot);
            let got6k =
                k.vec_dot_q6_k_q8_k_x4(w6k.each_ref().map(|r| r.as_slice()), &a8k, KPath::VecDot);
            for r in 0..4 {
                let what = format!("{} x{nb} row {r}", k.tier());
                assert_bits(
                    &format!("q5_0 {what}"),
                    got50[r],
                    k.vec_dot_q5_0_q8_0(&w50[r], &a8),
                );
                assert_bits(
                    &format!("q5_1 {what}"),
                    got51[r],
                    k.vec_dot_q5_1_q8_1(&w51[r], &a81),
                );
                assert_bits(
                    &format!("q4_k {what}"),
                    got4k[r],
                    k.vec_dot_q4_k_q8_k(&w4k[r], &a8k, KPath::VecDot),
                );
                assert_bits(
                    &format!("q5_k {what}"),
                    got5k[r],
                    k.vec_dot_q5_k_q8_k(&w5k[r], &a8k, KPath::VecDot),
                );
                assert_bits(
                    &format!("q6_k {what}"),
                    got6k[r],
                    k.vec_dot_q6_k_q8_k(&w6k[r], &a8k, KPath::VecDot),
                );
            }
        }
    }
}

#[test]
fn new_tiled_products_equal_single_row_dots_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0105);
    for nb in [1, 3] {
        for rows in TILED_ROWS {
            let w50 = q5_0_weights(&mut rng, rows * 8 * nb);
            let w51 = q5_1_weights(&mut rng, rows * 8 * nb);
            let w4k = q4_k_weights(&mut rng, rows * nb);
            let w5k = q5_k_weights(&mut rng, rows * nb);
            let w6k = q6_k_weights(&mut rng, rows * nb);
            for tokens in TILED_TOKENS {
                let a8 = q8_0_activations(&mut rng, tokens * 8 * nb);
                let a81 = q8_1_activations(&mut rng, tokens * 8 * nb);
                let a8k = q8_k_activations(&mut rng, tokens * nb);
                for k in tables() {
                    let what = format!("{} {rows} x {tokens} x{nb}", k.tier());
                    let nb32 = 8 * nb;
                    check_tiled(
                        &format!("q5_0 {what}"),
                        (&w50, &a8, nb32),
                        |w, x, out, layout| k.gemm_q5_0_q8_0(w, x, nb32, out, layout),
                        |w, x| k.vec_dot_q5_0_q8_0(w, x),
                    );
                    check_tiled(
                        &format!("q5_1 {what}"),
                        (&w51, &a81, nb32),
                        |w, x, out, layout| k.gemm_q5_1_q8_1(w, x, nb32, out, layout),
                        |w, x| k.vec_dot_q5_1_q8_1(w, x),
                    );
                    check_tiled(
                        &format!("q4_k {what}"),
                        (&w4k, &a8k, nb),
                        |w, x, out, layout| k.gemm_q4_k_q8_k(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q4_k_q8_k(w, x, KPath::Tiled),
                    );
                    check_tiled(
                        &format!("q5_k {what}"),
                        (&w5k, &a8k, nb),
                        |w, x, out, layout| k.gemm_q5_k_q8_k(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q5_k_q8_k(w, x, KPath::Tiled),
                    );
                    check_tiled(
                        &format!("q6_k {what}"),
                        (&w6k, &a8k, nb),
                        |w, x, out, layout| k.gemm_q6_k_q8_k(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q6_k_q8_k(w, x, KPath::Tiled),
                    );
                }
            }
        }
    }
}

/// llama.cpp's repacked Q4_0 steps (one `fma(S, d_x d_y)` per block, in block order) on every tier:
/// the single-row dot equals that definition, the four-row dot four single-row calls, and the tiled
/// product (a row per vector lane on the AVX-512 tier) the single-row dots, all bit for bit.
#[test]
fn repacked_q4_0_dots_and_products_follow_llama_cpp_steps_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0108);
    let definition = |x: &[BlockQ4_0], y: &[BlockQ8_0]| {
        x.iter().zip(y).fold(0f32, |acc, (a, b)| {
            let q = nibbles(&a.qs);
            let s: i32 = (0..QK).map(|i| (q[i] - 8) * i32::from(b.qs[i])).sum();
            (s as f32).mul_add(a.d.to_f32() * b.d.to_f32(), acc)
        })
    };
    for nb in [1, 3, 18] {
        let rows4: [Vec<BlockQ4_0>; 4] = std::array::from_fn(|_| q4_0_weights(&mut rng, nb));
        let y = q8_0_activations(&mut rng, nb);
        for k in tables() {
            let four = k.vec_dot_q4_0_q8_0_repacked_x4(rows4.each_ref().map(|r| r.as_slice()), &y);
            for (r, row) in rows4.iter().enumerate() {
                let what = format!("q4_0 repacked {} x{nb} row {r}", k.tier());
                let one = k.vec_dot_q4_0_q8_0_repacked(row, &y);
                assert_bits(&what, one, definition(row, &y));
                assert_bits(&format!("{what} (four rows)"), four[r], one);
            }
        }
        for rows in [1, 8, 16, 24, 70] {
            let w = q4_0_weights(&mut rng, rows * nb);
            for tokens in TILED_TOKENS {
                let a = q8_0_activations(&mut rng, tokens * nb);
                for k in tables() {
                    check_tiled(
                        &format!("q4_0 repacked {} {rows} x {tokens} x{nb}", k.tier()),
                        (&w, &a, nb),
                        |w, x, out, layout| k.gemm_q4_0_q8_0_repacked(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q4_0_q8_0_repacked(w, x),
                    );
                }
            }
        }
    }
}

/// The four-row Q4_K dot gives the bits of four single-row calls along every path llama.cpp takes
/// (the repacked GEMV reduces the four rows' totals together on the AVX-512 tier).
#[test]
fn q4_k_x4_forms_equal_four_single_row_calls_on_every_path() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0107);
    for &nb in &SUPER_BLOCK_COUNTS {
        let w: [Vec<BlockQ4K>; 4] = std::array::from_fn(|_| q4_k_weights(&mut rng, nb));
        let a = q8_k_activations(&mut rng, nb);
        for k in tables() {
            for path in [
                KPath::VecDot,
                KPath::Tiled,
                KPath::RepackedGemv,
                KPath::RepackedGemm,
            ] {
                let got = k.vec_dot_q4_k_q8_k_x4(w.each_ref().map(|r| r.as_slice()), &a, path);
                for (r, row) in w.iter().enumerate() {
                    assert_bits(
                        &format!("q4_k {} {path:?} x{nb} row {r}", k.tier()),
                        got[r],
                        k.vec_dot_q4_k_q8_k(row, &a, path),
                    );
                }
            }
        }
    }
}

/// The repacked Q4_K GEMM (a row per vector lane on the AVX-512 tier) gives, for every row and
/// token, the bits of the single-row dot along llama.cpp's repacked GEMM, across tiles of 16 rows,
/// rows that end a tile short, and tiles of tokens padded at the end.
#[test]
fn repacked_q4_k_products_equal_single_row_dots_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0106);
    for nb in [1, 3] {
        for rows in [1, 8, 16, 24, 70] {
            let w = q4_k_weights(&mut rng, rows * nb);
            for tokens in TILED_TOKENS {
                let a = q8_k_activations(&mut rng, tokens * nb);
                for k in tables() {
                    check_tiled(
                        &format!("q4_k repacked {} {rows} x {tokens} x{nb}", k.tier()),
                        (&w, &a, nb),
                        |w, x, out, layout| k.gemm_q4_k_q8_k_repacked(w, x, nb, out, layout),
                        |w, x| k.vec_dot_q4_k_q8_k(w, x, KPath::RepackedGemm),
                    );
                }
            }
        }
    }
}

#[test]
fn new_free_functions_use_the_process_table() {
    let k = dispatch::table();
    let mut rng = StdRng::seed_from_u64(0x5eed_0106);
    let dots = NewDots::random(&mut rng, 3);
    let (w, a) = &dots.q4_k;
    assert_bits(
        "q4_k",
        dispatch::vec_dot_q4_k_q8_k(w, a, KPath::VecDot),
        k.vec_dot_q4_k_q8_k(w, a, KPath::VecDot),
    );
    let (w, a) = &dots.q5_k;
    assert_bits(
        "q5_k",
        dispatch::vec_dot_q5_k_q8_k(w, a, KPath::VecDot),
        k.vec_dot_q5_k_q8_k(w, a, KPath::VecDot),
    );
    let (w, a) = &dots.q6_k;
    assert_bits(
        "q6_k",
        dispatch::vec_dot_q6_k_q8_k(w, a, KPath::VecDot),
        k.vec_dot_q6_k_q8_k(w, a, KPath::VecDot),
    );
    let (w, a) = &dots.q5_0;
    assert_bits(
        "q5_0",
        dispatch::vec_dot_q5_0_q8_0(w, a),
        k.vec_dot_q5_0_q8_0(w, a),
    );
    let (w, a) = &dots.q5_1;
    assert_bits(
        "q5_1",
        dispatch::vec_dot_q5_1_q8_1(w, a),
        k.vec_dot_q5_1_q8_1(w, a),
    );
}
