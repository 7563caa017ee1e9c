use rand::{Rng, SeedableRng, rngs::StdRng};

use super::*;

/// Neox (halves) or interleaved (adjacent pairs) RoPE of each head of `x` at `pos`.
fn rope(x: &mut [f32], head_dim: usize, pos: usize, interleaved: bool) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let theta = pos as f32 * 10_000f32.powf(-2.0 * i as f32 / head_dim as f32);
            let (a, b) = if interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half)
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * theta.cos() - x1 * theta.sin();
            head[b] = x0 * theta.sin() + x1 * theta.cos();
        }
    }
}

#[test]
fn permutation_and_its_inverse_round_trip() {
    let mut rng = StdRng::seed_from_u64(7);
    for (n_head, head_dim, row_len) in [(1, 2, 1), (4, 16, 8), (3, 64, 5), (9, 8, 1), (2, 6, 3)] {
        let values: Vec<f32> = (0..n_head * head_dim * row_len)
            .map(|_| rng.random())
            .collect();
        let there =
            permute_qk_rows(&values, row_len, n_head, QkLayout::ToInterleaved).expect("splits");
        let back = permute_qk_rows(&there, row_len, n_head, QkLayout::ToHalves).expect("splits");
        assert_eq!(
            back, values,
            "{n_head} heads of {head_dim}, rows of {row_len}"
        );
        let other_way =
            permute_qk_rows(&values, row_len, n_head, QkLayout::ToHalves).expect("splits");
        let back =
            permute_qk_rows(&other_way, row_len, n_head, QkLayout::ToInterleaved).expect("splits");
        assert_eq!(back, values);
        if head_dim > 2 {
            assert_ne!(there, values, "the permutation moves rows");
        }
    }
    assert!(
        permute_qk_rows(&[0u8; 12], 1, 4, QkLayout::ToInterleaved).is_none(),
        "odd head size"
    );
    assert!(
        permute_qk_rows(&[0u8; 12], 5, 1, QkLayout::ToInterleaved).is_none(),
        "ragged rows"
    );
}

#[test]
fn permutation_is_llama_cpp_reshape_swapaxes() {
    // reshape(n_head, 2, head_dim / 2, cols).swapaxes(1, 2).reshape(rows, cols), written out.
    let (n_head, head_dim, cols) = (3, 8, 2);
    let half = head_dim / 2;
    let values: Vec<u32> = (0..(n_head * head_dim * cols) as u32).collect();
    let mut want = Vec::new();
    for h in 0..n_head {
        for j in 0..half {
            for s in 0..2 {
                let row = h * head_dim + s * half + j;
                want.extend_from_slice(&values[row * cols..(row + 1) * cols]);
            }
        }
    }
    assert_eq!(
        permute_qk_rows(&values, cols, n_head, QkLayout::ToInterleaved),
        Some(want)
    );
}

#[test]
fn interleaved_rope_of_permuted_rows_is_neox_rope_of_the_original() {
    let mut rng = StdRng::seed_from_u64(8);
    let (n_head, head_dim) = (3, 16);
    let q: Vec<f32> = (0..n_head * head_dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let mut neox = q.clone();
    rope(&mut neox, head_dim, 5, false);
    let mut interleaved = permute_qk_rows(&q, 1, n_head, QkLayout::ToInterleaved).expect("splits");
    rope(&mut interleaved, head_dim, 5, true);
    let neox_permuted = permute_qk_rows(&neox, 1, n_head, QkLayout::ToInterleaved).expect("splits");
    for (a, b) in interleaved.iter().zip(&neox_permuted) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
}

#[test]
fn gguf_names_map_to_hugging_face_names() {
    let cases = [
        ("token_embd.weight", Some("model.embed_tokens.weight")),
        ("output.weight", Some("lm_head.weight")),
        ("output_norm.weight", Some("model.norm.weight")),
        (
            "blk.0.attn_q.weight",
            Some("model.layers.0.self_attn.q_proj.weight"),
        ),
        (
            "blk.12.attn_k.bias",
            Some("model.layers.12.self_attn.k_proj.bias"),
        ),
        (
            "blk.3.attn_output.weight",
            Some("model.layers.3.self_attn.o_proj.weight"),
        ),
        (
            "blk.3.attn_norm.weight",
            Some("model.layers.3.input_layernorm.weight"),
        ),
        (
            "blk.3.ffn_norm.weight",
            Some("model.layers.3.post_attention_layernorm.weight"),
        ),
        (
            "blk.3.ffn_down.weight",
            Some("model.layers.3.mlp.down_proj.weight"),
        ),
        ("blk.3.ffn_norm.bias", None),
        ("blk.x.attn_q.weight", None),
        ("rope_freqs.weight", None),
    ];
    for (gguf, hf) in cases {
        assert_eq!(hf_tensor_name(gguf).as_deref(), hf, "{gguf}");
    }
}
