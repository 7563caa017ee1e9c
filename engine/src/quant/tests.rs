use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn rmse(a: &[f32], b: &[f32]) -> f32 {
    (a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>() / a.len() as f32).sqrt()
}

#[test]
fn round_trips_stay_within_the_format_error() {
    let x = random(32 * 64, 7);
    let mut y = vec![0f32; x.len()];

    let mut q8 = vec![BlockQ8_0::default(); 64];
    quantize_q8_0(&x, &mut q8);
    dequantize_q8_0(&q8, &mut y);
    assert!(rmse(&x, &y) < 0.005, "q8_0 rmse {}", rmse(&x, &y));

    let mut q40 = vec![BlockQ4_0::default(); 64];
    quantize_q4_0(&x, &mut q40);
    dequantize_q4_0(&q40, &mut y);
    assert!(rmse(&x, &y) < 0.08, "q4_0 rmse {}", rmse(&x, &y));

    let mut q41 = vec![BlockQ4_1::default(); 64];
    quantize_q4_1(&x, &mut q41);
    dequantize_q4_1(&q41, &mut y);
    assert!(rmse(&x, &y) < 0.05, "q4_1 rmse {}", rmse(&x, &y));
}

#[test]
fn byte_serialization_round_trips() {
    let x = random(32 * 8, 3);
    let mut q41 = vec![BlockQ4_1::default(); 8];
    quantize_q4_1(&x, &mut q41);
    assert_eq!(parse_q4_1(&q4_1_bytes(&q41)), q41);
    let mut q40 = vec![BlockQ4_0::default(); 8];
    quantize_q4_0(&x, &mut q40);
    assert_eq!(parse_q4_0(&q4_0_bytes(&q40)), q40);
    let mut q8 = vec![BlockQ8_0::default(); 8];
    quantize_q8_0(&x, &mut q8);
    assert_eq!(parse_q8_0(&q8_0_bytes(&q8)), q8);
}

#[test]
fn rounding_to_i8_matches_round_ties_even() {
    let mut values = vec![
        0.0,
        -0.0,
        0.5,
        1.5,
        2.5,
        -0.5,
        -1.5,
        126.5,
        -126.5,
        127.0,
        -127.0,
        127.49,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        4_194_303.5,
        4_194_304.0,
        1e30,
        -1e30,
        f32::MIN_POSITIVE,
    ];
    values.extend(random(10_000, 9).iter().map(|v| v * 300.0));
    values.extend((-600..=600).map(|k| k as f32 * 0.25));
    for v in values {
        assert_eq!(round_to_i8(v), v.round_ties_even() as i8, "{v}");
    }
}

#[test]
fn q8_1_sum_matches_its_values() {
    let x = random(64, 11);
    let mut q = vec![BlockQ8_1::default(); 2];
    quantize_activations_q8_1(&x, &mut q);
    for b in &q {
        let sum: i32 = b.qs.iter().map(|&v| v as i32).sum();
        assert!((b.s.to_f32() - sum as f32 * b.d.to_f32()).abs() < 1e-2);
    }
}

#[test]
fn q8_k_keeps_the_sign_of_the_largest_value_and_rounds_half_to_even() {
    // max = 127 (positive), so iscale = -1 and every value is negated: ties go to even.
    let mut x = vec![0f32; QK_K];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = 3.5;
    x[3] = -0.5;
    x[4] = -127.0;
    x[17] = 1.5;
    x[255] = -6.25;
    let mut out = vec![
        BlockQ8K {
            d: 9.0,
            qs: [5; QK_K],
            bsums: [7; QK_K / 16],
        };
        1
    ];
    quantize_activations_q8_k(&x, &mut out);
    let b = &out[0];
    assert_eq!(b.d, -1.0);
    assert_eq!(&b.qs[..5], &[-127, -2, -4, 0, 127]);
    assert_eq!((b.qs[17], b.qs[255]), (-2, 6));
    assert!(b.qs[5..17].iter().all(|&q| q == 0));
    assert_eq!(b.bsums[0], -127 - 2 - 4 + 127);
    assert_eq!(b.bsums[1], -2);
    assert_eq!(b.bsums[15], 6);
    assert!(b.bsums[2..15].iter().all(|&s| s == 0));
}

#[test]
fn q8_k_with_a_negative_maximum_scales_up_and_zero_blocks_are_cleared() {
    // max = -2: iscale = 63.5, d = 1 / 63.5; 1.0 -> 63.5 -> 64 (even), 0.5 -> 31.75 -> 32.
    let mut x = vec![0f32; 2 * QK_K];
    x[0] = -2.0;
    x[1] = 1.0;
    x[2] = 0.5;
    x[3] = 0.007_812_5;
    let mut out = vec![
        BlockQ8K {
            d: 3.0,
            qs: [1; QK_K],
            bsums: [16; QK_K / 16],
        };
        2
    ];
    quantize_activations_q8_k(&x, &mut out);
    assert_eq!(out[0].d, 1.0 / 63.5);
    assert_eq!(&out[0].qs[..4], &[-127, 64, 32, 0]);
    assert_eq!(out[0].bsums[0], -127 + 64 + 32);
    assert_eq!(out[1], BlockQ8K::default(), "an all-zero block");
}

/// ggml's `quantize_row_q8_K_ref` as written there: one pass for the signed maximum, rounding
/// half to even, a clamp to 127.
fn q8_k_reference(xs: &[f32]) -> BlockQ8K {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in xs {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return BlockQ8K::default();
    }
    let iscale = -127.0 / max;
    let mut b = BlockQ8K::default();
    for (q, &v) in b.qs.iter_mut().zip(xs) {
        *q = (iscale * v).round_ties_even().clamp(-128.0, 127.0) as i8;
    }
    for (sum, qs) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *sum = qs.iter().map(|&q| i16::from(q)).sum();
    }
    b.d = 1.0 / iscale;
    b
}

#[test]
fn q8_k_equals_the_reference_on_random_blocks_ties_and_specials() {
    let mut x = random(QK_K * 8, 23);
    // Equal magnitudes of both signs (the first sets the sign), halves that round to even,
    // a NaN, an infinity.
    x[10] = 3.0;
    x[200] = -3.0;
    x[QK_K + 5] = -1.0;
    x[QK_K + 6] = 1.0;
    for (i, v) in x[2 * QK_K..3 * QK_K].iter_mut().enumerate() {
        *v = (i as f32 - 128.0) / 2.0;
    }
    x[3 * QK_K + 9] = f32::NAN;
    x[4 * QK_K + 1] = f32::INFINITY;
    let mut got = vec![BlockQ8K::default(); 8];
    quantize_activations_q8_k(&x, &mut got);
    for (i, (b, xs)) in got.iter().zip(x.chunks_exact(QK_K)).enumerate() {
        let want = q8_k_reference(xs);
        assert_eq!(
            (b.d.to_bits(), b.qs, b.bsums),
            (want.d.to_bits(), want.qs, want.bsums),
            "block {i}"
        );
    }
}

#[test]
fn q8_k_dequantizes_within_half_a_step() {
    let x = random(QK_K * 3, 21);
    let mut q = vec![BlockQ8K::default(); 3];
    quantize_activations_q8_k(&x, &mut q);
    for (b, xs) in q.iter().zip(x.chunks_exact(QK_K)) {
        for (&v, &q) in xs.iter().zip(&b.qs) {
            assert!(
                (b.d * q as f32 - v).abs() <= b.d.abs() * 0.5001,
                "{v} vs {q}"
            );
        }
        for (sum, qs) in b.bsums.iter().zip(b.qs.chunks_exact(16)) {
            assert_eq!(*sum as i32, qs.iter().map(|&q| q as i32).sum::<i32>());
        }
    }
}

#[test]
fn new_block_types_parse_and_serialize_back_to_their_bytes() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut bytes = |len: usize| (0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>();
    let b = bytes(3 * Q5_0_BYTES);
    assert_eq!(q5_0_bytes(&parse_q5_0(&b)), b);
    let b = bytes(3 * Q5_1_BYTES);
    assert_eq!(q5_1_bytes(&parse_q5_1(&b)), b);
    let b = bytes(3 * Q4_K_BYTES);
    assert_eq!(q4_k_bytes(&parse_q4_k(&b)), b);
    let b = bytes(3 * Q5_K_BYTES);
    assert_eq!(q5_k_bytes(&parse_q5_k(&b)), b);
    let b = bytes(3 * Q6_K_BYTES);
    assert_eq!(q6_k_bytes(&parse_q6_k(&b)), b);
    let block = &parse_q6_k(&b)[1];
    assert_eq!(block.d, f16_at(&b, Q6_K_BYTES + 208));
    assert_eq!(block.scales[3], b[Q6_K_BYTES + 192 + 3] as i8);
}

#[test]
fn q6_k_places_every_quarter_of_both_halves() {
    let mut block = vec![0u8; Q6_K_BYTES];
    block[208..210].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
    // Element 67 (first half, third quarter): high nibble of ql[3], bits 4-5 of qh[3], scale 4.
    block[3] = 0x90;
    block[128 + 3] = 0b10 << 4;
    block[192 + 4] = 2;
    // Element 229 (second half, fourth quarter): high nibble of ql[64 + 32 + 5], bits 6-7 of
    // qh[32 + 5], scale 14 (negative).
    block[64 + 32 + 5] = 0x70;
    block[128 + 32 + 5] = 0b11 << 6;
    block[192 + 14] = (-3i8) as u8;
    // Element 165 (second half, second quarter): low nibble of ql[64 + 32 + 5], bits 2-3 of
    // qh[32 + 5], scale 10.
    block[64 + 32 + 5] |= 0x0A;
    block[128 + 32 + 5] |= 0b01 << 2;
    block[192 + 10] = 1;
    let mut out = vec![0f32; QK_K];
    dequantize_q6_k(&parse_q6_k(&block), &mut out);
    assert_eq!(out[67], 0.5 * 2.0 * ((9 | (2 << 4)) - 32) as f32);
    assert_eq!(out[229], 0.5 * -3.0 * ((7 | (3 << 4)) - 32) as f32);
    assert_eq!(out[165], 0.5 * ((10 | (1 << 4)) - 32) as f32);
    assert_eq!(out[66], 0.5 * 2.0 * -32.0);
}

#[test]
fn q6_k_dequantizes_a_known_block() {
    // All quants 32 (i.e. zero after the -32 offset) except the first, scale 1, d = 0.5.
    let mut block = vec![0u8; 210];
    block[0] = 0x1; // ql[0] low nibble 1 -> q = 1 - 32 = -31 with qh 0
    for s in &mut block[192..208] {
        *s = 1;
    }
    block[208..210].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
    let mut out = vec![0f32; 256];
    dequantize_q6_k(&parse_q6_k(&block), &mut out);
    assert_eq!(out[0], 0.5 * -31.0);
    assert_eq!(out[1], 0.5 * -32.0);
}

#[test]
fn non_finite_block_scales_are_found() {
    let mut q4k = vec![0u8; 3 * Q4_K_BYTES];
    assert_eq!(check_block_scales(GgmlType::Q4K, &q4k), Ok(()));
    q4k[2 * Q4_K_BYTES + 2..2 * Q4_K_BYTES + 4].copy_from_slice(&f16::NAN.to_le_bytes());
    let err = check_block_scales(GgmlType::Q4K, &q4k).unwrap_err();
    assert_eq!((err.block, err.field), (2, "dmin"));

    let mut q6k = vec![0u8; 2 * Q6_K_BYTES];
    q6k[2 * Q6_K_BYTES - 2..].copy_from_slice(&f16::NEG_INFINITY.to_le_bytes());
    let err = check_block_scales(GgmlType::Q6K, &q6k).unwrap_err();
    assert_eq!((err.block, err.field), (1, "d"));
    assert_eq!(err.to_string(), "block 1 has a non-finite d (-inf)");

    let mut q51 = vec![0u8; Q5_1_BYTES];
    q51[2..4].copy_from_slice(&f16::INFINITY.to_le_bytes());
    assert_eq!(
        check_block_scales(GgmlType::Q5_1, &q51).unwrap_err().field,
        "m"
    );
    // Plain floats are values, not scales.
    assert_eq!(
        check_block_scales(GgmlType::F16, &f16::NAN.to_le_bytes()),
        Ok(())
    );
}

#[test]
fn q5_0_dequantizes_a_known_block() {
    let mut block = vec![0u8; Q5_0_BYTES];
    block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
    // High bit of element 1 (bit 1) and of element 16 (bit 16).
    block[2..6].copy_from_slice(&((1u32 << 1) | (1u32 << 16)).to_le_bytes());
    block[6] = 0x3F; // element 0: 15, element 16: 3 (+16 from the high bit)
    block[7] = 0x02; // element 1: 2 + 16, element 17: 0
    let mut out = vec![0f32; QK];
    dequantize_q5_0(&parse_q5_0(&block), &mut out);
    assert_eq!(out[0], (15 - 16) as f32 * 0.5);
    assert_eq!(out[16], (3 + 16 - 16) as f32 * 0.5);
    assert_eq!(out[1], (2 + 16 - 16) as f32 * 0.5);
    assert_eq!(out[17], -16.0 * 0.5);
}

#[test]
fn q5_1_dequantizes_a_known_block() {
    let mut block = vec![0u8; Q5_1_BYTES];
    block[0..2].copy_from_slice(&f16::from_f32(2.0).to_le_bytes());
    block[2..4].copy_from_slice(&f16::from_f32(-1.0).to_le_bytes());
    block[4..8].copy_from_slice(&(1u32 << 31).to_le_bytes()); // element 31's high bit
    block[8 + 15] = 0xF1; // element 15: 1, element 31: 15 + 16
    let mut out = vec![0f32; QK];
    dequantize_q5_1(&parse_q5_1(&block), &mut out);
    assert_eq!(out[15], 2.0 - 1.0);
    assert_eq!(out[31], 31.0 * 2.0 - 1.0);
    assert_eq!(out[0], -1.0);
}

#[test]
fn q5_k_dequantizes_a_known_block() {
    let mut block = vec![0u8; Q5_K_BYTES];
    block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
    block[2..4].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
    block[4] = 3; // scale of sub-block 0
    block[8] = 8; // min of sub-block 0
    block[5] = 1; // scale of sub-block 1
    // Sub-blocks 4..8 take their scales from the packed high bits: sub-block 4's scale is the low
    // nibble of byte 8 plus (byte 0 >> 6) << 4.
    block[4] |= 0b0100_0000; // sub-block 4's scale gains 16
    block[12] = 0x05; // low nibble of sub-block 4's scale
    block[16] = 0b0000_0011; // qh[0]: fifth bit of element 0 (sub-block 0) and 32 (sub-block 1)
    block[16 + 1] = 0b0001_0000; // qh[1]: fifth bit of element 129 (sub-block 4)
    block[48] = 0x21; // element 0: 1, element 32: 2
    block[48 + 64 + 1] = 0x07; // element 129 (sub-block 4): 7
    let mut out = vec![0f32; QK_K];
    dequantize_q5_k(&parse_q5_k(&block), &mut out);
    assert_eq!(out[0], 3.0 * (1 + 16) as f32 - 0.25 * 8.0);
    assert_eq!(out[32], (2 + 16) as f32);
    assert_eq!(out[1], -2.0);
    let sc4 = (5 | (1 << 4)) as f32;
    assert_eq!(out[129], sc4 * (7 + 16) as f32);
}

#[test]
fn q4_k_dequantizes_a_known_block() {
    let mut block = vec![0u8; 144];
    block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
    block[2..4].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
    block[4] = 2; // scale of sub-block 0
    block[8] = 4; // min of sub-block 0
    block[16] = 0x73; // first byte: low nibble 3 (sub-block 0), high nibble 7 (sub-block 1)
    let mut out = vec![0f32; 256];
    dequantize_q4_k(&parse_q4_k(&block), &mut out);
    assert_eq!(out[0], 2.0 * 3.0 - 0.5 * 4.0);
    assert_eq!(out[1], -2.0);
    assert_eq!(out[32], 0.0);
}
