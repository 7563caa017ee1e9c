use half::f16;

use super::{
    ops::{GLOBAL_ROPE, SLIDING_ROPE, gelu_gate, rms_norm_heads, rope_tables},
    *,
};
use crate::{
    model::config::{Activation, RopeStyle, SlidingWindow},
    team::Split,
};

/// GELU by its definition with the exact tanh, in f64.
fn gelu_exact(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x)).tanh())
}

#[test]
fn geglu_follows_ggml_f16_table_and_its_cutoffs() {
    for i in -1200..=1200 {
        let x = i as f32 / 100.0;
        let got = gelu_gate(x, 1.0);
        if x <= -10.0 {
            assert_eq!(got, 0.0, "gelu({x})");
            continue;
        }
        if x >= 10.0 {
            assert_eq!(got, x, "gelu({x})");
            continue;
        }
        // An f16 input and output: within a few f16 steps of the exact value.
        let want = gelu_exact(f64::from(f16::from_f32(x).to_f32()));
        assert!(
            (f64::from(got) - want).abs() <= 2e-3 * (1.0 + want.abs()),
            "gelu({x}) = {got}, want {want}"
        );
        assert_eq!(
            f16::from_f32(got).to_f32(),
            got,
            "gelu({x}) is an f16 value"
        );
    }
    assert_eq!(gelu_gate(1.5, -2.0), gelu_gate(1.5, 1.0) * -2.0);
    assert_eq!(gelu_gate(12.0, 0.5), 6.0);
}

fn config(head_dim: usize) -> LlamaConfig {
    LlamaConfig {
        architecture: "llama".into(),
        n_layers: 2,
        dim: 64,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim,
        ffn_dim: 128,
        vocab_size: 300,
        rope_theta: 500_000.0,
        rope_scaling: None,
        rope_style: RopeStyle::Interleaved,
        rms_eps: 1e-5,
        context_length: 128,
        qk_norm: false,
        post_norms: false,
        activation: Activation::Silu,
        embedding_scale: None,
        query_scale: None,
        sliding_window: None,
        final_logit_softcap: None,
    }
}

#[test]
fn rope_tables_apply_factors_scaling_and_the_sliding_base() {
    let plain = rope_tables(&config(8), None);
    assert_eq!(plain.len(), 1);
    let want: Vec<f64> = (0..4).map(|i| 500_000f64.powf(-(i as f64) / 4.0)).collect();
    assert_eq!(plain[0], want);

    let factors = [1.0, 2.0, 4.0, 8.0];
    let divided = rope_tables(&config(8), Some(&factors));
    for ((&got, &base), &factor) in divided[0].iter().zip(&want).zip(&factors) {
        assert_eq!(got, base / f64::from(factor));
    }

    let mut gemma = config(8);
    gemma.rope_scaling = Some(8.0);
    gemma.sliding_window = Some(SlidingWindow {
        size: 4,
        layers: vec![true, false],
        rope_theta: 10_000.0,
    });
    let tables = rope_tables(&gemma, None);
    assert_eq!(tables.len(), 2);
    for (&got, &base) in tables[GLOBAL_ROPE].iter().zip(&want) {
        assert_eq!(got, base / 8.0, "global layers scaled");
    }
    let sliding: Vec<f64> = (0..4).map(|i| 10_000f64.powf(-(i as f64) / 4.0)).collect();
    assert_eq!(
        tables[SLIDING_ROPE], sliding,
        "sliding layers: own base, unscaled"
    );
}

#[test]
fn head_norms_norm_each_head_on_its_own() {
    let weight = [1.0, 2.0];
    let mut x = vec![3.0, 4.0, 0.0, 0.5, -1.0, 1.0];
    rms_norm_heads(Split::Here, &mut x, &weight, 0.0);
    let expected = [
        3.0 / 12.5f32.sqrt(),
        8.0 / 12.5f32.sqrt(),
        0.0,
        1.0 / 0.125f32.sqrt(),
        -1.0,
        2.0,
    ];
    for (got, want) in x.iter().zip(expected) {
        assert!((got - want).abs() < 1e-6, "{x:?}");
    }
}
