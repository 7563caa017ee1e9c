//! GGUF v2/v3 reader: header, metadata, tensor table, and zero-copy views of tensor data.
//!
//! Every count, length, offset and size read from the file is checked against the bytes that are
//! really there before it is used, and counts are capped before anything is allocated for them.

use std::{collections::BTreeMap, path::Path, path::PathBuf, sync::Arc};

use crate::{
    error::{Error, Result},
    format::mmap::FileBytes,
    quant::GgmlType,
};

const GGUF_MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// No real model has more tensors than this; larger counts are lies.
const MAX_TENSORS: u64 = 1 << 20;
/// Cap on metadata entries.
const MAX_METADATA: u64 = 1 << 20;
/// Cap on nested array depth.
const MAX_ARRAY_DEPTH: usize = 4;
/// Items reserved up front for a metadata array; longer arrays grow as their items parse.
const MAX_ARRAY_PREALLOC: u64 = 1 << 16;
/// Cap on tensor rank.
const MAX_DIMS: u32 = 4;

/// The metadata key (a bool, true) that marks a file's weights as random: its speed is real, its
/// outputs are not.
pub const SYNTHETIC_KEY: &str = "strata.synthetic";

/// One metadata value, as typed in the file.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// `uint8`
    U8(u8),
    /// `int8`
    I8(i8),
    /// `uint16`
    U16(u16),
    /// `int16`
    I16(i16),
    /// `uint32`
    U32(u32),
    /// `int32`
    I32(i32),
    /// `float32`
    F32(f32),
    /// `bool`
    Bool(bool),
    /// `string` (UTF-8)
    String(String),
    /// `array` of one element type
    Array(Vec<MetaValue>),
    /// `uint64`
    U64(u64),
    /// `int64`
    I64(i64),
    /// `float64`
    F64(f64),
}

impl MetaValue {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, when it is numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a string slice.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            Self::Array(items) => Some(items),
            _ => None,
        }
    }

    /// A short rendering for `model inspect`: arrays show their length and first items.
    pub fn summary(&self) -> String {
        match self {
            Self::String(s) if s.len() > 80 => {
                format!("{:?}… ({} bytes)", truncate(s, 77), s.len())
            }
            Self::String(s) => format!("{s:?}"),
            Self::Array(items) => {
                let head: Vec<String> = items.iter().take(4).map(MetaValue::summary).collect();
                let more = if items.len() > 4 { ", …" } else { "" };
                format!("[{}{more}] ({} items)", head.join(", "), items.len())
            }
            Self::U8(v) => v.to_string(),
            Self::I8(v) => v.to_string(),
            Self::U16(v) => v.to_string(),
            Self::I16(v) => v.to_string(),
            Self::U32(v) => v.to_string(),
            Self::I32(v) => v.to_string(),
            Self::U64(v) => v.to_string(),
            Self::I64(v) => v.to_string(),
            Self::F32(v) => v.to_string(),
            Self::F64(v) => v.to_string(),
            Self::Bool(v) => v.to_string(),
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One entry of the tensor table.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, fastest-varying first (GGML order): a matrix is `[columns, rows]`.
    pub dims: Vec<u64>,
    /// Element type.
    pub kind: GgmlType,
    /// Byte offset from the start of the file.
    pub offset: usize,
    /// Byte size of the data.
    pub size: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file over its (mapped) bytes.
pub struct GgufFile {
    path: PathBuf,
    bytes: Arc<FileBytes>,
    /// The format version (2 or 3).
    pub version: u32,
    /// Metadata, by key.
    pub metadata: BTreeMap<String, MetaValue>,
    /// The metadata keys in the order the file lists them.
    metadata_order: Vec<String>,
    /// Tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of tensor data.
    pub alignment: u64,
}

impl GgufFile {
    /// Maps and parses `path`.
    ///
    /// # Errors
    /// When the file cannot be read or is not a valid GGUF file.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = FileBytes::map(path)?;
        Self::parse(path, bytes)
    }

    /// Parses GGUF bytes held in memory; `path` only names them in errors.
    ///
    /// # Errors
    /// When the bytes are not a valid GGUF file.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        Self::parse(path, FileBytes::Owned(bytes))
    }

    fn parse(path: &Path, bytes: FileBytes) -> Result<Self> {
        let (version, (metadata, metadata_order), tensors, alignment) = {
            let mut reader = Reader {
                data: bytes.as_slice(),
                pos: 0,
                path,
            };
            let header = reader.header()?;
            let metadata = reader.metadata(header.metadata_count)?;
            let alignment = alignment_of(path, &metadata.0)?;
            let infos = reader.tensor_infos(header.tensor_count)?;
            let data_start = align_up(reader.pos as u64, alignment);
            let tensors = place_tensors(path, infos, data_start, alignment, reader.data.len())?;
            (header.version, metadata, tensors, alignment)
        };
        Ok(Self {
            path: path.to_path_buf(),
            bytes: Arc::new(bytes),
            version,
            metadata,
            metadata_order,
            tensors,
            alignment,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Looks a tensor up by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of a tensor, without copying.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        // Offsets and sizes were checked against the file length when parsing.
        &self.bytes.as_slice()[info.offset..info.offset + info.size]
    }

    /// Drops the whole pages of bytes `range` of a tensor from memory after they have been copied out (see
    /// [`FileBytes::release`]).
    pub fn release_data(&self, info: &TensorInfo, range: std::ops::Range<usize>) {
        let end = info.offset + range.end.min(info.size);
        self.bytes
            .release(info.offset + range.start.min(info.size)..end);
    }

    /// Drops the tokenizer's metadata arrays (the vocabulary, scores, token types, merges) once a
    /// tokenizer has been built from them, so that a model's weights do not load beside a second
    /// copy of its vocabulary (262,144 strings for Gemma 3).
    pub fn release_tokenizer_metadata(&mut self) {
        self.metadata.retain(|key, value| {
            !(key.starts_with("tokenizer.ggml.") && value.as_array().is_some())
        });
        let metadata = &self.metadata;
        self.metadata_order.retain(|key| metadata.contains_key(key));
    }

    /// The metadata in the order the file lists it (which tools that copy it keep).
    pub fn metadata_in_file_order(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.metadata_order
            .iter()
            .filter_map(|key| Some((key.as_str(), self.metadata.get(key)?)))
    }

    /// A metadata value.
    pub fn meta(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// Whether the file says its weights are random ([`SYNTHETIC_KEY`]): its speed is real, its
    /// outputs are not.
    pub fn is_synthetic(&self) -> bool {
        self.meta(SYNTHETIC_KEY).and_then(MetaValue::as_bool) == Some(true)
    }

    /// A required unsigned metadata value.
    ///
    /// # Errors
    /// When the key is missing or not a non-negative integer.
    pub fn meta_u64(&self, key: &str) -> Result<u64> {
        self.meta(key).and_then(MetaValue::as_u64).ok_or_else(|| {
            Error::model(
                &self.path,
                format!("metadata key {key} is missing or not an unsigned integer"),
            )
        })
    }

    /// A required float metadata value.
    ///
    /// # Errors
    /// When the key is missing or not numeric.
    pub fn meta_f64(&self, key: &str) -> Result<f64> {
        self.meta(key).and_then(MetaValue::as_f64).ok_or_else(|| {
            Error::model(
                &self.path,
                format!("metadata key {key} is missing or not a number"),
            )
        })
    }

    /// A required string metadata value.
    ///
    /// # Errors
    /// When the key is missing or not a string.
    pub fn meta_str(&self, key: &str) -> Result<&str> {
        self.meta(key).and_then(MetaValue::as_str).ok_or_else(|| {
            Error::model(
                &self.path,
                format!("metadata key {key} is missing or not a string"),
            )
        })
    }
}

struct Header {
    version: u32,
    tensor_count: u64,
    metadata_count: u64,
}

struct RawTensorInfo {
    name: String,
    dims: Vec<u64>,
    kind: GgmlType,
    relative_offset: u64,
}

/// A bounds-checked little-endian cursor over the file's bytes.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn err(&self, problem: impl std::fmt::Display) -> Error {
        Error::format(self.path, format!("{problem} (at byte {})", self.pos))
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format_args!(
                "truncated: {what} needs {n} bytes, only {} remain in the file",
                self.remaining()
            )));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.remaining())
            .ok_or_else(|| {
                self.err(format_args!(
                    "{what} claims {len} bytes, only {} remain",
                    self.remaining()
                ))
            })?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| self.err(format_args!("{what} is not valid UTF-8")))
    }

    fn header(&mut self) -> Result<Header> {
        let magic = self.array::<4>("magic")?;
        if &magic != GGUF_MAGIC {
            return Err(self.err(format_args!(
                "not a GGUF file (magic {magic:02x?}, expected \"GGUF\")"
            )));
        }
        let version = self.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(self.err(format_args!(
                "unsupported GGUF version {version} (supported: 2, 3)"
            )));
        }
        let tensor_count = self.u64("tensor count")?;
        let metadata_count = self.u64("metadata count")?;
        if tensor_count > MAX_TENSORS {
            return Err(self.err(format_args!(
                "absurd tensor count {tensor_count} (limit {MAX_TENSORS})"
            )));
        }
        if metadata_count > MAX_METADATA {
            return Err(self.err(format_args!(
                "absurd metadata count {metadata_count} (limit {MAX_METADATA})"
            )));
        }
        Ok(Header {
            version,
            tensor_count,
            metadata_count,
        })
    }

    /// The metadata by key, and its keys in file order.
    fn metadata(&mut self, count: u64) -> Result<(BTreeMap<String, MetaValue>, Vec<String>)> {
        let mut map = BTreeMap::new();
        let mut order = Vec::new();
        for index in 0..count {
            let key = self.string(&format!("metadata key #{index}"))?;
            let kind = self.u32(&format!("type of metadata {key}"))?;
            let value = self.value(kind, &key, 0)?;
            if map.insert(key.clone(), value).is_some() {
                return Err(self.err(format_args!("duplicate metadata key {key}")));
            }
            order.push(key);
        }
        Ok((map, order))
    }

    fn value(&mut self, kind: u32, key: &str, depth: usize) -> Result<MetaValue> {
        Ok(match kind {
            0 => MetaValue::U8(self.array::<1>(key)?[0]),
            1 => MetaValue::I8(i8::from_le_bytes(self.array(key)?)),
            2 => MetaValue::U16(u16::from_le_bytes(self.array(key)?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array(key)?)),
            4 => MetaValue::U32(self.u32(key)?),
            5 => MetaValue::I32(i32::from_le_bytes(self.array(key)?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array(key)?)),
            7 => match self.array::<1>(key)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(self.err(format_args!(
                        "metadata {key}: bool byte {b} is neither 0 nor 1"
                    )));
                }
            },
            8 => MetaValue::String(self.string(key)?),
            9 => self.meta_array(key, depth)?,
            10 => MetaValue::U64(self.u64(key)?),
            11 => MetaValue::I64(i64::from_le_bytes(self.array(key)?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array(key)?)),
            other => {
                return Err(self.err(format_args!("metadata {key}: unknown value type {other}")));
            }
        })
    }

    fn meta_array(&mut self, key: &str, depth: usize) -> Result<MetaValue> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.err(format_args!(
                "metadata {key}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
            )));
        }
        let item_kind = self.u32(key)?;
        let item_bytes = min_value_bytes(item_kind).ok_or_else(|| {
            self.err(format_args!(
                "metadata {key}: unknown value type {item_kind}"
            ))
        })?;
        let len = self.u64(key)?;
        // Every item takes at least `item_bytes`, so a longer array cannot fit in the file.
        if len
            .checked_mul(item_bytes)
            .is_none_or(|bytes| bytes > self.remaining() as u64)
        {
            return Err(self.err(format_args!(
                "metadata {key}: array claims {len} items, only {} bytes remain",
                self.remaining()
            )));
        }
        // Grown as items really parse, so a claim cannot reserve much more than the file holds.
        let mut items = Vec::with_capacity(len.min(MAX_ARRAY_PREALLOC) as usize);
        for _ in 0..len {
            items.push(self.value(item_kind, key, depth + 1)?);
        }
        Ok(MetaValue::Array(items))
    }

    fn tensor_infos(&mut self, count: u64) -> Result<Vec<RawTensorInfo>> {
        // Each entry takes at least 8 (name length) + 4 (dims) + 4 (type) + 8 (offset) bytes.
        if count.saturating_mul(24) > self.remaining() as u64 {
            return Err(self.err(format_args!(
                "tensor table claims {count} entries, only {} bytes remain",
                self.remaining()
            )));
        }
        let mut infos = Vec::with_capacity(count as usize);
        for index in 0..count {
            let name = self.string(&format!("name of tensor #{index}"))?;
            let n_dims = self.u32(&format!("rank of tensor {name}"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(self.err(format_args!(
                    "tensor {name}: rank {n_dims} (supported 1..={MAX_DIMS})"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(self.u64(&format!("dims of tensor {name}"))?);
            }
            let raw_kind = self.u32(&format!("type of tensor {name}"))?;
            let kind = GgmlType::from_id(raw_kind).ok_or_else(|| Error::UnsupportedType {
                path: self.path.to_path_buf(),
                tensor: name.clone(),
                kind: match GgmlType::name_of_id(raw_kind) {
                    Some(name) => name.to_string(),
                    None => format!("unknown ggml type id {raw_kind}"),
                },
            })?;
            let relative_offset = self.u64(&format!("offset of tensor {name}"))?;
            infos.push(RawTensorInfo {
                name,
                dims,
                kind,
                relative_offset,
            });
        }
        Ok(infos)
    }
}

/// The fewest bytes a metadata value of type `kind` takes; `None` for unknown types.
fn min_value_bytes(kind: u32) -> Option<u64> {
    Some(match kind {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        8 => 8,  // the string's length
        9 => 12, // item type and count
        _ => return None,
    })
}

fn alignment_of(path: &Path, metadata: &BTreeMap<String, MetaValue>) -> Result<u64> {
    match metadata.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(value) => match value.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 16 => Ok(a),
            _ => Err(Error::format(
                path,
                format!(
                    "general.alignment {} is not a power of two",
                    value.summary()
                ),
            )),
        },
    }
}

fn align_up(offset: u64, alignment: u64) -> u64 {
    offset.div_ceil(alignment) * alignment
}

fn place_tensors(
    path: &Path,
    infos: Vec<RawTensorInfo>,
    data_start: u64,
    alignment: u64,
    file_len: usize,
) -> Result<Vec<TensorInfo>> {
    let mut seen = std::collections::HashSet::with_capacity(infos.len());
    let mut placed = Vec::with_capacity(infos.len());
    for raw in infos {
        if !seen.insert(raw.name.clone()) {
            return Err(Error::format(
                path,
                format!("duplicate tensor name {}", raw.name),
            ));
        }
        let size = tensor_byte_size(path, &raw)?;
        if raw.relative_offset % alignment != 0 {
            return Err(Error::format(
                path,
                format!(
                    "tensor {}: offset {} is not aligned to {alignment}",
                    raw.name, raw.relative_offset
                ),
            ));
        }
        let offset = data_start
            .checked_add(raw.relative_offset)
            .filter(|o| {
                o.checked_add(size)
                    .is_some_and(|end| end <= file_len as u64)
            })
            .ok_or_else(|| {
                Error::format(
                    path,
                    format!(
                        "tensor {} needs {size} bytes at offset {}, file has {file_len} bytes",
                        raw.name,
                        data_start.saturating_add(raw.relative_offset)
                    ),
                )
            })?;
        placed.push(TensorInfo {
            name: raw.name,
            dims: raw.dims,
            kind: raw.kind,
            offset: offset as usize,
            size: size as usize,
        });
    }
    check_no_overlap(path, &placed)?;
    Ok(placed)
}

/// Tensors may not share bytes: a tensor whose shape claims more bytes than were written for it (a
/// truncated block, a wrong type) runs into the next one, which the bounds check alone cannot see.
fn check_no_overlap(path: &Path, placed: &[TensorInfo]) -> Result<()> {
    let mut by_offset: Vec<&TensorInfo> = placed.iter().filter(|t| t.size > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        let (first, next) = (pair[0], pair[1]);
        if first.offset + first.size > next.offset {
            return Err(Error::format(
                path,
                format!(
                    "tensor {} ({} {:?}: {} bytes at offset {}) overlaps tensor {} at offset {}",
                    first.name,
                    first.kind,
                    first.dims,
                    first.size,
                    first.offset,
                    next.name,
                    next.offset
                ),
            ));
        }
    }
    Ok(())
}

fn tensor_byte_size(path: &Path, raw: &RawTensorInfo) -> Result<u64> {
    let overflow = || {
        Error::format(
            path,
            format!("tensor {}: dimensions {:?} overflow", raw.name, raw.dims),
        )
    };
    let elements = raw
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let block = raw.kind.block_size() as u64;
    if !raw.dims[0].is_multiple_of(block) {
        return Err(Error::format(
            path,
            format!(
                "tensor {}: row length {} is not a multiple of the {} block size {block}",
                raw.name, raw.dims[0], raw.kind
            ),
        ));
    }
    (elements / block)
        .checked_mul(raw.kind.block_bytes() as u64)
        .ok_or_else(overflow)
}
