//! Dot-product kernels on the model's matvec shapes, one group per kernel and weight type, one entry
//! per tier this host supports.
//!
//! Each iteration is a whole matrix-vector product on one thread: `rows` weight rows of `cols`
//! elements against one activation row, in single-row calls (`x1`), or, where the kernel has a
//! four-row form, in fours of adjacent rows (`x4`) or of rows a quarter of the matrix apart (`x4q`).
//! The two four-row orders read the same bytes; they differ in how memory sees them. When the matrix
//! streams from DRAM (the output head here, and every matrix of a decode step), four adjacent rows
//! make four short interleaved streams, which memory serves far more slowly than one sequential
//! stream (`x1`) or four long ones (`x4q`); software prefetching in the kernel did not close the gap.
//! `Throughput::Bytes` counts the weight bytes, so the reported rate is GB/s of weights.
//!
//! Shapes (SmolLM2-135M): a 576 x 1536 matrix (the MLP down projection; its 1.5 MB of f16 stays
//! close to the caches) and the 49152 x 576 output head (streams from memory).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};
use strata_engine::{
    kernels::{cpu, dispatch::KernelTable, k_numerics::KPath},
    quant::{
        self, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ6K, BlockQ8_0, BlockQ8_1, BlockQ8K, QK, QK_K,
    },
};

/// `(name, rows, cols)`.
const SHAPES: [(&str, usize, usize); 2] = [("576x1536", 576, 1536), ("49152x576", 49152, 576)];

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn tables() -> Vec<&'static KernelTable> {
    cpu::available_tiers()
        .into_iter()
        .map(|t| KernelTable::for_tier(t).expect("available tiers have tables"))
        .collect()
}

/// A single-row kernel through a table.
type One<W, A> = fn(&KernelTable, &[W], &[A]) -> f32;
/// A four-row kernel through a table.
type Four<W, A> = fn(&KernelTable, [&[W]; 4], &[A]) -> [f32; 4];

/// Runs `x1` and `x4` matvecs of `weights` (`rows` rows of `per_row` items) for every tier.
fn bench_type<W, A>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    shape: &str,
    weights: &[W],
    per_row: usize,
    act: &[A],
    one: One<W, A>,
    four: Option<Four<W, A>>,
) {
    let rows = weights.len() / per_row;
    let mut out = vec![0f32; rows];
    for k in tables() {
        let tier = k.tier().name();
        group.bench_function(format!("{shape}/{tier}/x1"), |b| {
            b.iter(|| {
                for (o, row) in out.iter_mut().zip(weights.chunks_exact(per_row)) {
                    *o = one(k, row, black_box(act));
                }
                black_box(&out);
            })
        });
        let Some(four) = four else { continue };
        group.bench_function(format!("{shape}/{tier}/x4"), |b| {
            b.iter(|| {
                for (o, r) in out
                    .chunks_exact_mut(4)
                    .zip(weights.chunks_exact(4 * per_row))
                {
                    let (r0, rest) = r.split_at(per_row);
                    let (r1, rest) = rest.split_at(per_row);
                    let (r2, r3) = rest.split_at(per_row);
                    o.copy_from_slice(&four(k, [r0, r1, r2, r3], black_box(act)));
                }
                black_box(&out);
            })
        });
        // Four rows a quarter of the matrix apart: four long sequential streams.
        let q = rows / 4;
        group.bench_function(format!("{shape}/{tier}/x4q"), |b| {
            b.iter(|| {
                for i in 0..q {
                    let row = |r: usize| &weights[(r * q + i) * per_row..(r * q + i + 1) * per_row];
                    let v = four(k, [row(0), row(1), row(2), row(3)], black_box(act));
                    for (r, v) in v.into_iter().enumerate() {
                        out[r * q + i] = v;
                    }
                }
                black_box(&out);
            })
        });
    }
}

fn group<'a>(c: &'a mut Criterion, name: &str, bytes: usize) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(bytes as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    g
}

fn kernels(c: &mut Criterion) {
    for (shape, rows, cols) in SHAPES {
        let w = random(rows * cols, 1);
        let x = random(cols, 2);
        let nb = cols / QK;

        let mut w8 = vec![BlockQ8_0::default(); rows * nb];
        quant::quantize_q8_0(&w, &mut w8);
        let mut w40 = vec![BlockQ4_0::default(); rows * nb];
        quant::quantize_q4_0(&w, &mut w40);
        let mut w41 = vec![BlockQ4_1::default(); rows * nb];
        quant::quantize_q4_1(&w, &mut w41);
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let mut a8 = vec![BlockQ8_0::default(); nb];
        quant::quantize_activations_q8_0(&x, &mut a8);
        let mut a81 = vec![BlockQ8_1::default(); nb];
        quant::quantize_activations_q8_1(&x, &mut a81);
        let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();

        let mut g = group(c, "vec_dot_q8_0_q8_0", size_of_val(w8.as_slice()));
        bench_type(
            &mut g,
            shape,
            &w8,
            nb,
            &a8,
            |k, w, a| k.vec_dot_q8_0_q8_0(w, a),
            Some(|k, w, a| k.vec_dot_q8_0_q8_0_x4(w, a)),
        );
        let mut out = vec![0f32; rows];
        for k in tables() {
            g.bench_function(format!("{shape}/{}/gemv", k.tier().name()), |b| {
                b.iter(|| {
                    k.gemv_q8_0_q8_0(&w8, black_box(&a8), &mut out);
                    black_box(&out);
                })
            });
        }
        g.finish();

        let mut g = group(c, "vec_dot_q4_0_q8_0", size_of_val(w40.as_slice()));
        bench_type(
            &mut g,
            shape,
            &w40,
            nb,
            &a8,
            |k, w, a| k.vec_dot_q4_0_q8_0(w, a),
            Some(|k, w, a| k.vec_dot_q4_0_q8_0_x4(w, a)),
        );
        g.finish();

        let mut g = group(c, "vec_dot_q4_1_q8_1", size_of_val(w41.as_slice()));
        bench_type(
            &mut g,
            shape,
            &w41,
            nb,
            &a81,
            |k, w, a| k.vec_dot_q4_1_q8_1(w, a),
            Some(|k, w, a| k.vec_dot_q4_1_q8_1_x4(w, a)),
        );
        g.finish();

        let mut g = group(c, "vec_dot_f16", size_of_val(wh.as_slice()));
        bench_type(
            &mut g,
            shape,
            &wh,
            cols,
            &xh,
            |k, w, a| k.vec_dot_f16(w, a),
            Some(|k, w, a| k.vec_dot_f16_x4(w, a)),
        );
        g.finish();

        let mut g = group(c, "vec_dot_f32", size_of_val(w.as_slice()));
        bench_type(
            &mut g,
            shape,
            &w,
            cols,
            &x,
            |k, w, a| k.vec_dot_f32(w, a),
            None,
        );
        g.finish();
    }
}

/// Q4_K decode of Llama 3.1 8B's feed-forward down projection (14336 x 4096, 33 MB: it streams from
/// memory), one token on one thread along llama.cpp's repacked GEMV: the rows as the file holds
/// them, four per call (`file/x4`), and interleaved sixteen at a time (`interleaved/x16`).
fn q4_k_decode(c: &mut Criterion) {
    let (rows, cols) = (14336, 4096);
    let nb = cols / QK_K;
    let mut w = vec![BlockQ4K::default(); rows * nb];
    quant::quantize_q4_k(&random(rows * cols, 3), &mut w);
    let mut groups = Vec::new();
    quant::interleave(&w, nb, &mut groups);
    let mut y = vec![BlockQ8K::default(); nb];
    quant::quantize_activations_q8_k(&random(cols, 4), &mut y);
    let mut g = group(c, "q4_k_decode", size_of_val(w.as_slice()));
    let path = KPath::RepackedGemv;
    for k in tables() {
        let tier = k.tier().name();
        g.bench_function(format!("14336x4096/{tier}/file/x4"), |b| {
            b.iter(|| {
                for four in w.chunks_exact(4 * nb) {
                    let row = |r: usize| &four[r * nb..(r + 1) * nb];
                    let rows = [row(0), row(1), row(2), row(3)];
                    black_box(k.vec_dot_q4_k_q8_k_x4(rows, black_box(&y), path));
                }
            })
        });
        g.bench_function(format!("14336x4096/{tier}/interleaved/x16"), |b| {
            b.iter(|| {
                for group in groups.chunks_exact(nb) {
                    black_box(k.vec_dot_q4_k_x16_q8_k(group, black_box(&y), path));
                }
            })
        });
    }
    g.finish();
}

/// Q6_K decode of Llama 3.1 8B's feed-forward down projection (the Q4_K_M file's Q6_K half), one
/// token on one thread along ggml's `vec_dot`: a row of the file's layout per call (`file/x1`, what
/// decode runs there) and interleaved sixteen at a time (`interleaved/x16`).
fn q6_k_decode(c: &mut Criterion) {
    let (rows, cols) = (4096, 14336);
    let nb = cols / QK_K;
    let mut w = vec![BlockQ6K::default(); rows * nb];
    quant::quantize_q6_k(&random(rows * cols, 5), &mut w);
    let mut groups = Vec::new();
    quant::interleave(&w, nb, &mut groups);
    let mut y = vec![BlockQ8K::default(); nb];
    quant::quantize_activations_q8_k(&random(cols, 6), &mut y);
    let mut g = group(c, "q6_k_decode", size_of_val(w.as_slice()));
    for k in tables() {
        let tier = k.tier().name();
        g.bench_function(format!("4096x14336/{tier}/file/x1"), |b| {
            b.iter(|| {
                for row in w.chunks_exact(nb) {
                    black_box(k.vec_dot_q6_k_q8_k(row, black_box(&y), KPath::VecDot));
                }
            })
        });
        g.bench_function(format!("4096x14336/{tier}/interleaved/x16"), |b| {
            b.iter(|| {
                for group in groups.chunks_exact(nb) {
                    black_box(k.vec_dot_q6_k_x16_q8_k(group, black_box(&y)));
                }
            })
        });
    }
    g.finish();
}

/// Q8_0 decode of Llama 3.1 8B's feed-forward down projection (4096 x 14336, 62 MB), one token on
/// one thread: the file's layout through the decode product (`file/gemv`, four rows a call, the rows
/// ahead prefetched) and interleaved sixteen at a time (`interleaved/x16`).
fn q8_0_decode(c: &mut Criterion) {
    let (rows, cols) = (4096, 14336);
    let nb = cols / QK;
    let mut w = vec![BlockQ8_0::default(); rows * nb];
    quant::quantize_q8_0(&random(rows * cols, 7), &mut w);
    let mut groups = Vec::new();
    quant::interleave(&w, nb, &mut groups);
    let mut y = vec![BlockQ8_0::default(); nb];
    quant::quantize_activations_q8_0(&random(cols, 8), &mut y);
    let mut out = vec![0f32; rows];
    let mut g = group(c, "q8_0_decode", size_of_val(w.as_slice()));
    for k in tables() {
        let tier = k.tier().name();
        g.bench_function(format!("4096x14336/{tier}/file/gemv"), |b| {
            b.iter(|| k.gemv_q8_0_q8_0(&w, black_box(&y), &mut out))
        });
        g.bench_function(format!("4096x14336/{tier}/interleaved/x16"), |b| {
            b.iter(|| {
                for group in groups.chunks_exact(nb) {
                    black_box(k.vec_dot_q8_0_x16_q8_0(group, black_box(&y)));
                }
            })
        });
    }
    g.finish();
}

/// Q4_0 decode of Llama 3.1 8B's feed-forward down projection (4096 x 14336, 33 MB), one token on
/// one thread along llama.cpp's repacked GEMV: the file's layout four rows a call (`file/x4`) and
/// interleaved sixteen at a time (`interleaved/gemv`).
fn q4_0_decode(c: &mut Criterion) {
    let (rows, cols) = (4096, 14336);
    let nb = cols / QK;
    let mut w = vec![BlockQ4_0::default(); rows * nb];
    quant::quantize_q4_0(&random(rows * cols, 9), &mut w);
    let mut groups = Vec::new();
    quant::interleave(&w, nb, &mut groups);
    let mut y = vec![BlockQ8_0::default(); nb];
    quant::quantize_activations_q8_0(&random(cols, 10), &mut y);
    let mut out = vec![0f32; rows];
    let mut g = group(c, "q4_0_decode", size_of_val(w.as_slice()));
    for k in tables() {
        let tier = k.tier().name();
        g.bench_function(format!("4096x14336/{tier}/file/x4"), |b| {
            b.iter(|| {
                for four in w.chunks_exact(4 * nb) {
                    let row = |r: usize| &four[r * nb..(r + 1) * nb];
                    let rows = [row(0), row(1), row(2), row(3)];
                    black_box(k.vec_dot_q4_0_q8_0_repacked_x4(rows, black_box(&y)));
                }
            })
        });
        g.bench_function(format!("4096x14336/{tier}/interleaved/gemv"), |b| {
            b.iter(|| k.gemv_q4_0_x16_q8_0(&groups, black_box(&y), &mut out))
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    kernels,
    q4_k_decode,
    q6_k_decode,
    q8_0_decode,
    q4_0_decode
);
criterion_main!(benches);
