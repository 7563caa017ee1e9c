//! The element-wise steps of the forward pass (RMSNorm, RoPE tables, activations, residual adds),
//! split over the pool or a team.

use std::sync::OnceLock;

use half::f16;

use crate::{
    kernels::{self, MatmulScratch},
    model::config::{Activation, LlamaConfig},
    team::Split,
    weights::Weight,
};

/// Which RoPE table a global layer and a sliding-window layer use.
pub(super) const GLOBAL_ROPE: usize = 0;
pub(super) const SLIDING_ROPE: usize = 1;

/// Tokens per parallel task of the element-wise steps (norms, RoPE, SwiGLU, residual adds): a few
/// tokens stay on one thread, a prompt spreads over the pool.
pub(super) const ELEMENTWISE_TOKENS: usize = 16;
/// Most tokens of a pass that runs on a team: decode steps, whose element-wise steps are one task.
pub(super) const TEAM_TOKENS: usize = ELEMENTWISE_TOKENS;

/// Tokens of a pass per feed-forward step ([`Llama::ffn_block`]): enough to give every thread whole
/// tiled tasks, few enough that the gate and up activations of a long prompt stay small.
pub(super) const FFN_TOKENS: usize = 128;

/// `gate = activation(gate) * up`, element by element, for tokens of `width` values.
pub(super) fn gated_activation(
    split: Split<'_>,
    activation: Activation,
    width: usize,
    gate: &mut [f32],
    up: &[f32],
) {
    let width = width * ELEMENTWISE_TOKENS;
    split.chunks_mut(gate, width, |task, gate| {
        gate_in_place(activation, gate, &up[task * width..]);
    });
}

/// [`gated_activation`] of rows of `[gate | up]` (`2 * width` each, as a fused gate/up product
/// leaves them), the results packed to the front of `rows`: `m * width` values for `m` rows.
pub(super) fn gated_activation_rows(
    split: Split<'_>,
    activation: Activation,
    width: usize,
    rows: &mut [f32],
) {
    split.chunks_mut(rows, 2 * width * ELEMENTWISE_TOKENS, |_, rows| {
        for row in rows.chunks_exact_mut(2 * width) {
            let (gate, up) = row.split_at_mut(width);
            gate_in_place(activation, gate, up);
        }
    });
    for t in 1..rows.len() / (2 * width) {
        rows.copy_within(2 * t * width..(2 * t + 1) * width, t * width);
    }
}

/// `gate = act(gate) * up`, element by element.
fn gate_in_place(activation: Activation, gate: &mut [f32], up: &[f32]) {
    match activation {
        Activation::Silu => {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = silu(*g) * u;
            }
        }
        Activation::GeluTanh => {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = gelu_gate(*g, u);
            }
        }
    }
}

/// A product of the pass's loops on `split` with the process's kernel tier.
pub(super) fn matmul(
    split: Split<'_>,
    w: &Weight,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    kernels::matmul_split(kernels::dispatch::table(), split, w, x, n, out, scratch);
}

/// RMS norm of every row of `x` (rows of `weight.len()`), scaled by `weight`, into `out`.
pub(super) fn rms_norm(split: Split<'_>, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let width = weight.len() * ELEMENTWISE_TOKENS;
    split.chunks_mut(out, width, |task, out| {
        rms_norm_rows(&x[task * width..], weight, eps, out);
    });
}

/// Per row of `dim` values: `out = x / sqrt(mean(x^2) + eps) * weight`.
pub(super) fn rms_norm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let scale = rms_scale(xr, eps);
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = v * scale * w;
        }
    }
}

/// `1 / sqrt(mean(x^2) + eps)` as ggml's RMS norm takes it: each square rounded to f32 and summed in
/// f64, the mean rounded to f32, the rest in f32.
pub(super) fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// RMS norm in place of every head of `x` (rows of `weight.len()`, the head size), as Qwen3 and
/// Gemma 3 norm their queries and keys.
pub(super) fn rms_norm_heads(split: Split<'_>, x: &mut [f32], weight: &[f32], eps: f32) {
    let width = weight.len() * ELEMENTWISE_TOKENS;
    split.chunks_mut(x, width, |_, heads| {
        for head in heads.chunks_exact_mut(weight.len()) {
            let scale = rms_scale(head, eps);
            for (v, &w) in head.iter_mut().zip(weight) {
                *v = *v * scale * w;
            }
        }
    });
}

/// One RoPE table, as ggml's rope takes it: the angles of a position's pairs are carried from pair
/// to pair in f32, so a table's bits follow ggml's rather than the exact `pos * base^(-2i/d)`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RopeTable {
    /// `base^(-2/head_dim)` (f32 `powf`): one pair's angle over the one before.
    theta_scale: f32,
    /// Multiplies every angle: `1 / factor` of linear scaling, else 1.
    freq_scale: f32,
    /// Divides each pair's angle (Llama 3's per-pair factors); empty when there are none.
    factors: Vec<f32>,
    pairs: usize,
}

impl RopeTable {
    fn new(base: f32, head_dim: usize, freq_scale: f32, factors: Vec<f32>) -> Self {
        Self {
            theta_scale: base.powf(-2.0 / head_dim as f32),
            freq_scale,
            factors,
            pairs: head_dim / 2,
        }
    }

    /// Appends each pair's cosine and sine at `pos`, as ggml's rope cache computes them: the angle
    /// starts at `pos` and is multiplied by `theta_scale` after each pair; a pair's own angle is that
    /// divided by its factor, times `freq_scale`.
    pub(super) fn push_rotations(&self, pos: usize, out: &mut Vec<[f32; 2]>) {
        let mut theta = pos as f32;
        for pair in 0..self.pairs {
            let factor = self.factors.get(pair).copied().unwrap_or(1.0);
            let angle = self.freq_scale * (theta / factor);
            out.push([angle.cos(), angle.sin()]);
            theta *= self.theta_scale;
        }
    }
}

/// The RoPE tables, indexed by [`GLOBAL_ROPE`] and [`SLIDING_ROPE`]: the global layers' (`rope_theta`,
/// linear scaling, Llama 3's per-pair factors), then, when some layers slide, theirs (their own
/// base, neither scaled nor divided).
pub(super) fn rope_tables(config: &LlamaConfig, factors: Option<&[f32]>) -> Vec<RopeTable> {
    let hd = config.head_dim;
    let freq_scale = config.rope_scaling.map_or(1.0, |f| 1.0 / f);
    let global = RopeTable::new(
        config.rope_theta,
        hd,
        freq_scale,
        factors.map(<[f32]>::to_vec).unwrap_or_default(),
    );
    let mut tables = vec![global];
    if let Some(window) = &config.sliding_window {
        debug_assert_eq!(tables.len(), SLIDING_ROPE);
        tables.push(RopeTable::new(window.rope_theta, hd, 1.0, Vec::new()));
    }
    tables
}

pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU in its tanh form, in f32, as ggml's `ggml_gelu_f32`.
pub(super) fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// GELU of every f16 value, rounded to f16: ggml's table, indexed by the bits of the input.
pub(super) fn gelu_table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(gelu_tanh(f16::from_bits(bits).to_f32())))
            .collect()
    })
}

/// `gelu(gate) * up` as ggml's CPU GeGLU computes it: the gate rounded to f16 and looked up in the
/// f16 GELU table, except beyond ±10 where GELU is 0 or the identity.
pub(super) fn gelu_gate(gate: f32, up: f32) -> f32 {
    if gate <= -10.0 {
        0.0
    } else if gate >= 10.0 {
        gate * up
    } else {
        let bits = f16::from_f32(gate).to_bits();
        gelu_table()[usize::from(bits)].to_f32() * up
    }
}

pub(super) fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The residual add `x += y` of whole activations (rows of `dim`), split over the threads.
pub(super) fn add_residual(split: Split<'_>, x: &mut [f32], y: &[f32], dim: usize) {
    let width = dim * ELEMENTWISE_TOKENS;
    split.chunks_mut(x, width, |task, x| add_in_place(x, &y[task * width..]));
}

pub(super) fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(bias) = bias {
        for row in x.chunks_exact_mut(bias.len()) {
            add_in_place(row, bias);
        }
    }
}
