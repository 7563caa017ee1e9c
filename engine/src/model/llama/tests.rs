use half::f16;

use super::{
    ops::{
        GLOBAL_ROPE, RopeTable, SLIDING_ROPE, gelu_gate, rms_norm_heads, rms_scale, rope_tables,
    },
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

/// The angles a table gives for `pos`, from its cosines and sines.
fn angles(table: &RopeTable, pos: usize) -> Vec<f64> {
    let mut rotations = Vec::new();
    table.push_rotations(pos, &mut rotations);
    rotations
        .iter()
        .map(|&[cos, sin]| f64::from(sin).atan2(f64::from(cos)))
        .collect()
}

#[test]
fn rope_tables_apply_factors_scaling_and_the_sliding_base() {
    let definition = |base: f64, pos: f64| -> Vec<f64> {
        (0..4).map(|i| pos * base.powf(-(i as f64) / 4.0)).collect()
    };
    let close = |got: &[f64], want: &[f64], what: &str| {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{what}: {got:?} against {want:?}"
            );
        }
    };
    let plain = rope_tables(&config(8), None);
    assert_eq!(plain.len(), 1);
    close(
        &angles(&plain[GLOBAL_ROPE], 2),
        &definition(500_000.0, 2.0),
        "plain",
    );

    let factors = [1.0, 2.0, 4.0, 8.0];
    let divided = rope_tables(&config(8), Some(&factors));
    let want: Vec<f64> = definition(500_000.0, 2.0)
        .iter()
        .zip(factors)
        .map(|(a, f)| a / f64::from(f))
        .collect();
    close(
        &angles(&divided[GLOBAL_ROPE], 2),
        &want,
        "divided by the factors",
    );

    let mut gemma = config(8);
    gemma.rope_scaling = Some(8.0);
    gemma.sliding_window = Some(SlidingWindow {
        size: 4,
        layers: vec![true, false],
        rope_theta: 10_000.0,
    });
    let tables = rope_tables(&gemma, None);
    assert_eq!(tables.len(), 2);
    let scaled: Vec<f64> = definition(500_000.0, 3.0).iter().map(|a| a / 8.0).collect();
    close(
        &angles(&tables[GLOBAL_ROPE], 3),
        &scaled,
        "global layers scaled",
    );
    close(
        &angles(&tables[SLIDING_ROPE], 3),
        &definition(10_000.0, 3.0),
        "sliding layers: own base, unscaled",
    );
}

#[test]
fn rope_angles_are_carried_from_pair_to_pair_in_f32_as_ggml_does() {
    let table = &rope_tables(&config(8), None)[GLOBAL_ROPE];
    let ratio = 500_000f32.powf(-2.0 / 8.0);
    let mut rotations = Vec::new();
    table.push_rotations(7, &mut rotations);
    let mut theta = 7f32;
    for &[cos, sin] in &rotations {
        assert_eq!([cos, sin], [theta.cos(), theta.sin()]);
        theta *= ratio;
    }
}

#[test]
fn rms_scale_rounds_the_squares_and_the_mean_to_f32_as_ggml_does() {
    let x = [1.1f32, -2.3, 0.7, 3.9];
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / 4.0) as f32;
    assert_eq!(rms_scale(&x, 1e-6), 1.0 / (mean + 1e-6).sqrt());
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

#[test]
fn pass_ranges_keep_each_token_on_its_kernel_path() {
    let ranges = |n| pass_ranges(n, 128).collect::<Vec<_>>();
    assert!(ranges(0).is_empty());
    assert_eq!(ranges(5).as_slice(), std::slice::from_ref(&(0..5)));
    assert_eq!(ranges(128).as_slice(), std::slice::from_ref(&(0..128)));
    assert_eq!(
        ranges(130),
        [0..120, 120..130],
        "no pass of fewer than 8 tokens"
    );
    assert_eq!(ranges(136), [0..128, 128..136]);
    assert_eq!(ranges(300), [0..128, 128..256, 256..300]);
    for n in 1..600 {
        let passes = ranges(n);
        assert_eq!(passes.first().map(|r| r.start), Some(0), "{n}");
        assert_eq!(passes.last().map(|r| r.end), Some(n), "{n}");
        for (pass, next) in passes.iter().zip(passes.iter().skip(1)) {
            assert_eq!(pass.end, next.start, "{n}");
            assert!(
                pass.len().is_multiple_of(8) && pass.len() <= 128,
                "{n}: {pass:?}"
            );
        }
        let last = passes.last().map_or(0, |r| r.len());
        assert!(last >= n.min(8), "{n}: a last pass of {last}");
    }
}

#[test]
fn a_prompt_run_in_several_passes_gives_the_same_bits() {
    use crate::convert::test_model::{TinySpec, tiny_gguf};
    let bytes = tiny_gguf(TinySpec {
        arch: "llama",
        tied: false,
        bias: false,
        seed: 5,
    });
    let loaded = crate::loader::LoadedModel::from_gguf_bytes(
        std::path::Path::new("tiny.gguf"),
        bytes,
        LoadOptions {
            threads: 2,
            ..LoadOptions::default()
        },
    )
    .expect("the tiny model loads");
    let model = &loaded.model;
    let vocab = model.config().vocab_size as u32;
    let tokens: Vec<u32> = (0..45u32).map(|i| (i * 37 + 3) % vocab).collect();
    let run = |logits, max_pass| {
        let mut cache = model.new_cache(64);
        let mut out = Vec::new();
        model.forward_in_passes(&tokens[..7], &mut cache, logits, &mut out, max_pass);
        model.forward_in_passes(&tokens[7..], &mut cache, logits, &mut out, max_pass);
        (cache.len, out)
    };
    for logits in [Logits::All, Logits::Last] {
        let (len, whole) = run(logits, 512);
        let (split_len, split) = run(logits, 16);
        assert_eq!((len, split_len), (45, 45));
        let rows = if logits == Logits::All { 38 } else { 1 };
        assert_eq!(whole.len(), rows * vocab as usize);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(&whole) == bits(&split), "{logits:?}");
    }
}

#[test]
fn gated_rows_pack_what_the_gate_and_up_halves_give_apart() {
    use super::ops::{gated_activation, gated_activation_rows};
    let (width, m) = (40, 37);
    let rows: Vec<f32> = (0..m * 2 * width)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 97.0)
        .collect();
    for activation in [Activation::Silu, Activation::GeluTanh] {
        let mut gate: Vec<f32> = rows.chunks(width).step_by(2).flatten().copied().collect();
        let up: Vec<f32> = rows
            .chunks(width)
            .skip(1)
            .step_by(2)
            .flatten()
            .copied()
            .collect();
        gated_activation(Split::Here, activation, width, &mut gate, &up);
        let mut packed = rows.clone();
        gated_activation_rows(Split::Pool, activation, width, &mut packed);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(&packed[..m * width]) == bits(&gate), "{activation:?}");
    }
}
