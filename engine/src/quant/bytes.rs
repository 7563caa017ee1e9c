//! Blocks as GGUF stores them: parsing file bytes into block structs, laying blocks out as bytes,
//! and checking the scales of raw blocks.

use half::f16;

use super::*;

pub(super) fn f16_at(bytes: &[u8], at: usize) -> f16 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// Parses Q4_0 blocks from file bytes (length a multiple of 18).
pub fn parse_q4_0(bytes: &[u8]) -> Vec<BlockQ4_0> {
    bytes
        .chunks_exact(18)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[2..18]);
            BlockQ4_0 {
                d: f16_at(b, 0),
                qs,
            }
        })
        .collect()
}

/// Parses Q4_1 blocks from file bytes (length a multiple of 20).
pub fn parse_q4_1(bytes: &[u8]) -> Vec<BlockQ4_1> {
    bytes
        .chunks_exact(20)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[4..20]);
            BlockQ4_1 {
                d: f16_at(b, 0),
                m: f16_at(b, 2),
                qs,
            }
        })
        .collect()
}

/// Parses Q8_0 blocks from file bytes (length a multiple of 34).
pub fn parse_q8_0(bytes: &[u8]) -> Vec<BlockQ8_0> {
    bytes
        .chunks_exact(34)
        .map(|b| {
            let mut qs = [0i8; QK];
            for (q, &byte) in qs.iter_mut().zip(&b[2..34]) {
                *q = byte as i8;
            }
            BlockQ8_0 {
                d: f16_at(b, 0),
                qs,
            }
        })
        .collect()
}

/// `N` bytes of `b` from `at`.
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    std::array::from_fn(|i| b[at + i])
}

/// Parses Q5_0 blocks from file bytes (length a multiple of 22).
pub fn parse_q5_0(bytes: &[u8]) -> Vec<BlockQ5_0> {
    bytes
        .chunks_exact(Q5_0_BYTES)
        .map(|b| BlockQ5_0 {
            d: f16_at(b, 0),
            qh: bytes_at(b, 2),
            qs: bytes_at(b, 6),
        })
        .collect()
}

/// Parses Q5_1 blocks from file bytes (length a multiple of 24).
pub fn parse_q5_1(bytes: &[u8]) -> Vec<BlockQ5_1> {
    bytes
        .chunks_exact(Q5_1_BYTES)
        .map(|b| BlockQ5_1 {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qh: bytes_at(b, 4),
            qs: bytes_at(b, 8),
        })
        .collect()
}

/// Parses Q4_K super-blocks from file bytes (length a multiple of 144).
pub fn parse_q4_k(bytes: &[u8]) -> Vec<BlockQ4K> {
    bytes
        .chunks_exact(Q4_K_BYTES)
        .map(|b| BlockQ4K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: bytes_at(b, 4),
            qs: bytes_at(b, 16),
        })
        .collect()
}

/// Parses Q5_K super-blocks from file bytes (length a multiple of 176).
pub fn parse_q5_k(bytes: &[u8]) -> Vec<BlockQ5K> {
    bytes
        .chunks_exact(Q5_K_BYTES)
        .map(|b| BlockQ5K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: bytes_at(b, 4),
            qh: bytes_at(b, 16),
            qs: bytes_at(b, 48),
        })
        .collect()
}

/// Parses Q6_K super-blocks from file bytes (length a multiple of 210).
pub fn parse_q6_k(bytes: &[u8]) -> Vec<BlockQ6K> {
    bytes
        .chunks_exact(Q6_K_BYTES)
        .map(|b| BlockQ6K {
            ql: bytes_at(b, 0),
            qh: bytes_at(b, 128),
            scales: bytes_at::<16>(b, 192).map(|s| s as i8),
            d: f16_at(b, 208),
        })
        .collect()
}

/// Serializes blocks back to GGUF bytes.
pub fn q4_0_bytes(blocks: &[BlockQ4_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 18);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q4_1_bytes(blocks: &[BlockQ4_1]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 20);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.m.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q8_0_bytes(blocks: &[BlockQ8_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 34);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend(b.qs.iter().map(|&q| q as u8));
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q5_0_bytes(blocks: &[BlockQ5_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q5_0_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q5_1_bytes(blocks: &[BlockQ5_1]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q5_1_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.m.to_le_bytes());
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes super-blocks back to GGUF bytes.
pub fn q4_k_bytes(blocks: &[BlockQ4K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q4_K_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.dmin.to_le_bytes());
        out.extend_from_slice(&b.scales);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes super-blocks back to GGUF bytes.
pub fn q5_k_bytes(blocks: &[BlockQ5K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q5_K_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.dmin.to_le_bytes());
        out.extend_from_slice(&b.scales);
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes super-blocks back to GGUF bytes.
pub fn q6_k_bytes(blocks: &[BlockQ6K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q6_K_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.ql);
        out.extend_from_slice(&b.qh);
        out.extend(b.scales.iter().map(|&s| s as u8));
        out.extend_from_slice(&b.d.to_le_bytes());
    }
    out
}

/// The scales (f16 fields) of one block of `kind`, by name and byte offset in the block.
pub(crate) fn scale_fields(kind: GgmlType) -> &'static [(&'static str, usize)] {
    match kind {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[],
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[("d", 0)],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[("d", 0), ("m", 2)],
        GgmlType::Q4K | GgmlType::Q5K => &[("d", 0), ("dmin", 2)],
        GgmlType::Q6K => &[("d", Q6_K_BYTES - 2)],
    }
}

/// A block whose scale is infinite or NaN, which would poison every product it enters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("block {block} has a non-finite {field} ({value})")]
pub struct NonFiniteScale {
    /// The block's index in the tensor.
    pub block: usize,
    /// The scale's name in ggml's block struct (`d`, `m`, `dmin`).
    pub field: &'static str,
    /// The value as f32 (`inf`, `-inf`, `NaN`).
    pub value: f32,
}

/// Checks every block scale of raw tensor bytes of `kind`, as ggml's `ggml_validate_row_data` does
/// for the block types: the first block whose scale is infinite or NaN is an error. Block values
/// themselves (nibbles, packed 6-bit scales, high bits) cannot be out of range: every bit pattern is
/// a valid block.
pub fn check_block_scales(kind: GgmlType, bytes: &[u8]) -> Result<(), NonFiniteScale> {
    let fields = scale_fields(kind);
    if fields.is_empty() {
        return Ok(());
    }
    for (block, b) in bytes.chunks_exact(kind.block_bytes()).enumerate() {
        for &(field, at) in fields {
            let value = f16_at(b, at);
            if !value.is_finite() {
                return Err(NonFiniteScale {
                    block,
                    field,
                    value: value.to_f32(),
                });
            }
        }
    }
    Ok(())
}
