//! Key/value caches: a contiguous cache owned by one sequence ([`KvCache`]), and a pool of fixed-size
//! blocks that many sequences share through block tables ([`PagedKv`]). Both store values the same way,
//! so the forward pass computes the same bits whichever holds a sequence.

use half::f16;

use crate::model::config::LlamaConfig;

/// How a key/value cache stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvType {
    /// 32-bit floats, attention computed in f32 with an exact softmax.
    F32,
    /// Half floats (half the memory), attention with f16 queries and an f16 running sum over values,
    /// as llama.cpp's CPU flash attention computes it.
    #[default]
    F16,
}

impl KvType {
    /// Bytes of one stored value.
    pub fn value_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
        }
    }
}

/// The cache's values in their storage type.
pub(crate) enum KvStorage {
    F32 { k: Vec<f32>, v: Vec<f32> },
    F16 { k: Vec<f16>, v: Vec<f16> },
}

impl KvStorage {
    fn new(kind: KvType, values: usize) -> Self {
        match kind {
            KvType::F32 => Self::F32 {
                k: vec![0.0; values],
                v: vec![0.0; values],
            },
            KvType::F16 => Self::F16 {
                k: vec![f16::ZERO; values],
                v: vec![f16::ZERO; values],
            },
        }
    }

    pub(crate) fn kind(&self) -> KvType {
        match self {
            Self::F32 { .. } => KvType::F32,
            Self::F16 { .. } => KvType::F16,
        }
    }

    /// Writes one position's keys and values at element offset `at`.
    pub(crate) fn store(&mut self, at: usize, keys: &[f32], values: &[f32]) {
        let range = at..at + keys.len();
        match self {
            Self::F32 { k, v } => {
                k[range.clone()].copy_from_slice(keys);
                v[range].copy_from_slice(values);
            }
            Self::F16 { k, v } => {
                k[range.clone()]
                    .iter_mut()
                    .zip(keys)
                    .for_each(|(d, &s)| *d = f16::from_f32(s));
                v[range]
                    .iter_mut()
                    .zip(values)
                    .for_each(|(d, &s)| *d = f16::from_f32(s));
            }
        }
    }
}

/// Where one sequence's positions live in a storage: the element offset of (layer, position).
#[derive(Debug, Clone, Copy)]
pub(crate) enum SeqLayout<'a> {
    /// `[layer][position][kv_dim]` with room for `capacity` positions per layer.
    Contiguous { capacity: usize },
    /// `[block][layer][slot][kv_dim]`; position `p` lives in `blocks[p / block_size]`.
    Paged {
        blocks: &'a [u32],
        block_size: usize,
        n_layers: usize,
    },
}

impl SeqLayout<'_> {
    /// The element offset of `layer`'s row for `pos`.
    #[inline]
    pub(crate) fn offset(&self, layer: usize, pos: usize, kv_dim: usize) -> usize {
        match *self {
            Self::Contiguous { capacity } => (layer * capacity + pos) * kv_dim,
            Self::Paged {
                blocks,
                block_size,
                n_layers,
            } => {
                let block = blocks[pos / block_size] as usize;
                ((block * n_layers + layer) * block_size + pos % block_size) * kv_dim
            }
        }
    }
}

/// Keys and values of every processed position of one sequence, per layer: `[layer][position][kv_dim]`.
pub struct KvCache {
    pub(crate) storage: KvStorage,
    pub(crate) n_layers: usize,
    pub(crate) kv_dim: usize,
    capacity: usize,
    pub(crate) len: usize,
}

impl KvCache {
    /// A cache for `capacity` positions of `config`'s model.
    pub fn new(config: &LlamaConfig, capacity: usize, kind: KvType) -> Self {
        Self {
            storage: KvStorage::new(kind, config.n_layers * capacity * config.kv_dim()),
            n_layers: config.n_layers,
            kv_dim: config.kv_dim(),
            capacity,
            len: 0,
        }
    }

    /// How values are stored.
    pub fn kind(&self) -> KvType {
        self.storage.kind()
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes the cache holds allocated.
    pub fn byte_size(&self) -> usize {
        2 * self.n_layers * self.capacity * self.kv_dim * self.kind().value_bytes()
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Forgets positions from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub(crate) fn layout(&self) -> SeqLayout<'static> {
        SeqLayout::Contiguous {
            capacity: self.capacity,
        }
    }
}

/// A pool of fixed-size blocks of key/value rows shared by many sequences. Each block holds
/// `block_size` positions of every layer; a sequence names its blocks in a block table. Which block
/// belongs to whom is the caller's business (see the server's block manager).
pub struct PagedKv {
    pub(crate) storage: KvStorage,
    pub(crate) n_layers: usize,
    pub(crate) kv_dim: usize,
    block_size: usize,
    n_blocks: usize,
}

impl PagedKv {
    /// A pool of `n_blocks` blocks of `block_size` positions for `config`'s model.
    pub fn new(config: &LlamaConfig, n_blocks: usize, block_size: usize, kind: KvType) -> Self {
        let block_size = block_size.max(1);
        Self {
            storage: KvStorage::new(
                kind,
                n_blocks * block_size * config.n_layers * config.kv_dim(),
            ),
            n_layers: config.n_layers,
            kv_dim: config.kv_dim(),
            block_size,
            n_blocks,
        }
    }

    /// Bytes one block of `block_size` positions takes for `config`'s model.
    pub fn block_bytes(config: &LlamaConfig, block_size: usize, kind: KvType) -> usize {
        2 * block_size * config.n_layers * config.kv_dim() * kind.value_bytes()
    }

    /// How values are stored.
    pub fn kind(&self) -> KvType {
        self.storage.kind()
    }

    /// Positions per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Bytes the pool holds allocated.
    pub fn byte_size(&self) -> usize {
        2 * self.n_blocks
            * self.block_size
            * self.n_layers
            * self.kv_dim
            * self.kind().value_bytes()
    }

    pub(crate) fn layout<'a>(&self, blocks: &'a [u32]) -> SeqLayout<'a> {
        SeqLayout::Paged {
            blocks,
            block_size: self.block_size,
            n_layers: self.n_layers,
        }
    }
}
