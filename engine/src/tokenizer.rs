//! Tokenizers built with the `tokenizers` crate that tokenize as llama.cpp does: from a GGUF file's
//! metadata (SentencePiece or byte-level BPE, special tokens split out of the text first) or from a
//! Hugging Face `tokenizer.json`, plus byte-exact streaming detokenization.
//!
//! Where llama.cpp's defaults are accidents of history they are not followed: a byte-level BPE file
//! that names no BOS or EOS token has none (llama.cpp falls back to id 11), and a special token id
//! outside the vocabulary is an error (llama.cpp warns and uses its default).

mod bpe;
mod merges;
mod special;
mod spm;
mod vocab;

use std::{collections::HashMap, path::Path};

use tokenizers::{AddedToken, models::ModelWrapper};

use crate::{
    error::{Error, Result},
    format::gguf::{GgufFile, MetaValue},
};
use bpe::PreTokenizer;
use special::{Fragment, SpecialTokens};
use vocab::{Algorithm, GgufVocab, TokenKind};

/// A model's tokenizer with its special tokens and chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Special tokens split out of text as llama.cpp does (GGUF files); without them `inner`'s own
    /// added tokens do it (Hugging Face files).
    specials: Option<SpecialTokens>,
    token_bytes: Pieces,
    hidden: Vec<bool>,
    bos: Option<u32>,
    eos: Option<u32>,
    /// Ascending.
    end_of_generation: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes: `tokenizer.ggml.model` = `llama` (SentencePiece)
    /// or `gpt2` (byte-level BPE with the pre-tokenizer `tokenizer.ggml.pre` names).
    ///
    /// # Errors
    /// When the tokenizer metadata is missing, inconsistent, or of a kind not supported.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let bad = |problem: String| Error::model(file.path(), problem);
        let algorithm =
            Algorithm::from_gguf(file.meta_str("tokenizer.ggml.model")?).map_err(bad)?;
        let pre = match algorithm {
            Algorithm::SentencePiece => None,
            Algorithm::BytePairs => {
                let name = file
                    .meta("tokenizer.ggml.pre")
                    .and_then(MetaValue::as_str)
                    .unwrap_or("default");
                Some(PreTokenizer::named(name).map_err(bad)?)
            }
        };
        // SentencePiece files add BOS unless they say otherwise; BPE ones as their pre-tokenizer does.
        let default_add_bos = pre.is_none_or(|p| p.add_bos);
        let meta = GgufVocab::from_gguf(file, algorithm, default_add_bos).map_err(bad)?;
        let inner = match pre {
            None => spm::model(&meta.vocab, meta.add_space_prefix, meta.unknown),
            Some(pre) => {
                let merges = vocab::string_array(file, "tokenizer.ggml.merges").map_err(bad)?;
                bpe::model(&meta.vocab.tokens, &merges, pre)
            }
        }
        .map_err(|e| bad(format!("tokenizer: {e}")))?;
        let chat_template = file
            .meta("tokenizer.chat_template")
            .and_then(MetaValue::as_str)
            .map(str::to_string);
        Ok(Self::from_gguf_vocab(inner, meta, algorithm, chat_template))
    }

    fn from_gguf_vocab(
        inner: tokenizers::Tokenizer,
        meta: GgufVocab,
        algorithm: Algorithm,
        chat_template: Option<String>,
    ) -> Self {
        let vocab = &meta.vocab;
        let specials = vocab
            .tokens
            .iter()
            .zip(&vocab.kinds)
            .enumerate()
            .filter(|(_, (_, kind))| kind.is_special())
            .map(|(id, (text, _))| (id as u32, text.as_str()));
        Self {
            inner,
            specials: Some(SpecialTokens::new(specials)),
            token_bytes: vocab
                .tokens
                .iter()
                .zip(&vocab.kinds)
                .map(|(text, &kind)| piece_bytes(algorithm, text, kind))
                .collect(),
            hidden: vocab.kinds.iter().map(|k| k.is_hidden()).collect(),
            bos: meta.bos,
            eos: meta.eos,
            end_of_generation: meta.end_of_generation,
            add_bos: meta.add_bos,
            add_eos: meta.add_eos,
            chat_template,
        }
    }

    /// Loads a Hugging Face `tokenizer.json`, with special tokens and the chat template from the
    /// `tokenizer_config.json` beside it when there is one.
    ///
    /// # Errors
    /// When a file cannot be read or parsed.
    pub fn from_hf_files(tokenizer_json: &Path, tokenizer_config: Option<&Path>) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(tokenizer_json)
            .map_err(|e| Error::model(tokenizer_json, format!("cannot load tokenizer: {e}")))?;
        let config = match tokenizer_config {
            Some(path) if path.exists() => Some(read_json(path)?),
            _ => None,
        };
        Ok(Self::from_hf_tokenizer(inner, config.as_ref()))
    }

    fn from_hf_tokenizer(inner: tokenizers::Tokenizer, config: Option<&serde_json::Value>) -> Self {
        let size = inner.get_vocab_size(true);
        let mut tokens = vec![String::new(); size];
        for (text, id) in inner.get_vocab(true) {
            if let Some(slot) = tokens.get_mut(id as usize) {
                *slot = text;
            }
        }
        let mut hidden = vec![false; size];
        for (id, added) in inner.get_added_tokens_decoder() {
            if added.special && (id as usize) < size {
                hidden[id as usize] = true;
            }
        }
        let token_id = |key: &str| {
            config
                .and_then(|c| c.get(key))
                .and_then(special_token_text)
                .and_then(|t| inner.token_to_id(&t))
        };
        let flag = |key: &str| {
            config
                .and_then(|c| c.get(key))
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
        };
        let bos = token_id("bos_token");
        let eos = token_id("eos_token");
        let chat_template = config
            .and_then(|c| c.get("chat_template"))
            .and_then(|v| v.as_str())
            .map(str::to_string);
        // SentencePiece-style files (`▁` for spaces, `<0xXX>` byte tokens) fall back to bytes.
        let sentencepiece =
            matches!(inner.get_model(), ModelWrapper::BPE(bpe) if bpe.byte_fallback);
        let algorithm = if sentencepiece {
            Algorithm::SentencePiece
        } else {
            Algorithm::BytePairs
        };
        let token_bytes = tokens
            .iter()
            .map(|t| piece_bytes(algorithm, t, hf_kind(t, sentencepiece)))
            .collect();
        let mut end_of_generation: Vec<u32> = tokens
            .iter()
            .enumerate()
            .filter(|&(id, text)| hidden[id] && vocab::is_end_of_generation_text(text))
            .map(|(id, _)| id as u32)
            .chain(eos)
            .collect();
        end_of_generation.sort_unstable();
        end_of_generation.dedup();
        Self {
            inner,
            specials: None,
            token_bytes,
            hidden,
            bos,
            eos,
            end_of_generation,
            add_bos: flag("add_bos_token"),
            add_eos: flag("add_eos_token"),
            chat_template,
        }
    }

    /// Tokenizes `text` as llama.cpp's server does a prompt: special tokens written in the text
    /// become those tokens, and BOS (and EOS) are added when the model asks for them.
    ///
    /// # Errors
    /// When the tokenizer fails on the input.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if self.add_bos {
            ids.extend(self.bos);
        }
        match &self.specials {
            Some(specials) => {
                for fragment in specials.split(text) {
                    match fragment {
                        Fragment::Token(id) => ids.push(id),
                        Fragment::Text(text) => self.encode_text(text, &mut ids)?,
                    }
                }
            }
            None => self.encode_text(text, &mut ids)?,
        }
        if self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// Appends the ids of `text` as the model alone tokenizes it.
    fn encode_text(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        ids.extend_from_slice(encoding.get_ids());
        Ok(())
    }

    /// The text of `ids`, control tokens left out.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.piece(id)).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The bytes token `id` stands for (empty for control tokens and unknown ids).
    pub fn piece(&self, id: u32) -> &[u8] {
        match self.token_bytes.get(id as usize) {
            Some(bytes) if !self.hidden[id as usize] => bytes,
            _ => &[],
        }
    }

    /// Number of token ids.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// Whether generating `id` ends the turn: EOS, end-of-turn and end-of-message tokens, as
    /// llama.cpp's `is_eog` decides.
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.binary_search(&id).is_ok()
    }

    /// The ids that end a generation, ascending.
    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    /// The beginning-of-sequence token, if the model has one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, if the model has one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether [`Tokenizer::encode`] prepends BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether [`Tokenizer::encode`] appends EOS.
    pub fn adds_eos(&self) -> bool {
        self.add_eos
    }

    /// The text of a token id as the vocabulary spells it.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The model's Jinja chat template, if it ships one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The underlying tokenizer, as `tokenizer.json` would hold it.
    pub fn to_json(&self) -> Result<String> {
        let json = match &self.specials {
            Some(specials) => self
                .with_added_tokens(specials)
                .and_then(|inner| inner.to_string(true)),
            None => self.inner.to_string(true),
        };
        json.map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// `inner` with the special tokens that this tokenizer splits out itself registered as whole
    /// tokens, as a `tokenizer.json` holds them: control and unknown ones as special, user-defined
    /// ones as plain added tokens. (At run time they stay out of `inner`: 6,414 of them for Gemma 3
    /// would cost megabytes of tries that never match.)
    fn with_added_tokens(
        &self,
        specials: &SpecialTokens,
    ) -> tokenizers::Result<tokenizers::Tokenizer> {
        let mut inner = self.inner.clone();
        let mut ids = specials.ids();
        ids.sort_unstable();
        let added: Vec<AddedToken> = ids
            .into_iter()
            .filter_map(|id| {
                let text = self.inner.id_to_token(id)?;
                Some(AddedToken::from(text, self.hidden[id as usize]).normalized(false))
            })
            .collect();
        inner.add_special_tokens(added)?;
        Ok(inner)
    }
}

/// Every token's bytes in one buffer (a 262,144-token vocabulary in a few MiB, not one allocation
/// per token).
#[derive(Debug, Default)]
struct Pieces {
    bytes: Vec<u8>,
    /// Where each token's bytes end in `bytes`.
    ends: Vec<u32>,
}

impl Pieces {
    fn get(&self, id: usize) -> Option<&[u8]> {
        let end = *self.ends.get(id)? as usize;
        let start = id.checked_sub(1).map_or(0, |prev| self.ends[prev] as usize);
        self.bytes.get(start..end)
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

impl FromIterator<Vec<u8>> for Pieces {
    fn from_iter<I: IntoIterator<Item = Vec<u8>>>(pieces: I) -> Self {
        let mut out = Self::default();
        for piece in pieces {
            out.bytes.extend_from_slice(&piece);
            // A vocabulary's texts stay far below 4 GiB; past it, later tokens read as empty.
            out.ends
                .push(u32::try_from(out.bytes.len()).unwrap_or(u32::MAX));
        }
        out.bytes.shrink_to_fit();
        out.ends.shrink_to_fit();
        out
    }
}

/// Turns generated token ids into text as they arrive, holding back bytes of an unfinished UTF-8
/// character until the token that completes it.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// Adds `id` and returns the text that is now complete.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        self.pending.extend_from_slice(tokenizer.piece(id));
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_some() => self.pending.len(), // invalid, not unfinished: flush lossily
            Err(e) => e.valid_up_to(),
        };
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        text
    }

    /// Whatever is still held back, lossily.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

/// The bytes a token stands for, as llama.cpp's `token_to_piece` gives them: SentencePiece text
/// with `▁` as a space or byte-level BPE text in GPT-2's byte alphabet, `<0xXX>` byte tokens as
/// their byte, special tokens as written, unused ones as nothing.
fn piece_bytes(algorithm: Algorithm, text: &str, kind: TokenKind) -> Vec<u8> {
    match kind {
        TokenKind::Normal => match algorithm {
            Algorithm::SentencePiece => text.replace(spm::SPACE_MARK, " ").into_bytes(),
            Algorithm::BytePairs => byte_level_bytes(text),
        },
        TokenKind::Byte => spm::byte_of(text).map_or_else(|| text.as_bytes().to_vec(), |b| vec![b]),
        TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined => {
            text.as_bytes().to_vec()
        }
        TokenKind::Unused | TokenKind::Undefined => Vec::new(),
    }
}

/// The kind of a token of a Hugging Face vocabulary, as far as decoding needs it.
fn hf_kind(text: &str, sentencepiece: bool) -> TokenKind {
    if sentencepiece && spm::byte_of(text).is_some() {
        TokenKind::Byte
    } else {
        TokenKind::Normal
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::model(path, format!("invalid JSON: {e}")))
}

/// `"<s>"` or `{"content": "<s>", ...}` as tokenizer_config.json writes special tokens.
fn special_token_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(map) => map
            .get("content")
            .and_then(|c| c.as_str())
            .map(str::to_string),
        _ => None,
    }
}

/// GPT-2's printable stand-in for each byte (`Ġ` for space and so on), inverted.
fn unicode_to_byte() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for byte in 0u32..256 {
        let printable = (33..=126).contains(&byte)
            || (161..=172).contains(&byte)
            || (174..=255).contains(&byte);
        let ch = if printable {
            byte
        } else {
            extra += 1;
            255 + extra
        };
        if let Some(c) = char::from_u32(ch) {
            map.insert(c, byte as u8);
        }
    }
    map
}

/// The bytes a byte-level BPE token stands for; a token with characters outside the byte alphabet
/// (added tokens, SentencePiece vocabularies) stands for its own UTF-8 text.
fn byte_level_bytes(token: &str) -> Vec<u8> {
    static TABLE: std::sync::OnceLock<HashMap<char, u8>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(unicode_to_byte);
    token
        .chars()
        .map(|c| table.get(&c).copied())
        .collect::<Option<Vec<u8>>>()
        .unwrap_or_else(|| token.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;
    use crate::format::gguf_writer::{GgufWriter, string_array};

    const NORMAL: i32 = 1;
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const USER_DEFINED: i32 = 4;
    const BYTE: i32 = 6;
    /// Ids of the byte tokens: `<0x00>` is 3.
    const FIRST_BYTE: u32 = 3;

    /// A SentencePiece file: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then `pieces`
    /// (text, score, GGUF token type) from id 259.
    fn spm_writer(pieces: &[(&str, f32, i32)]) -> GgufWriter {
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
        let mut scores = vec![0.0f32; 3];
        let mut types = vec![UNKNOWN, CONTROL, CONTROL];
        for byte in 0..=255u8 {
            tokens.push(format!("<0x{byte:02X}>"));
            scores.push(0.0);
            types.push(BYTE);
        }
        for &(text, score, kind) in pieces {
            tokens.push(text.to_string());
            scores.push(score);
            types.push(kind);
        }
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", MetaValue::String("llama".into()))
            .metadata("tokenizer.ggml.tokens", string_array(tokens))
            .metadata(
                "tokenizer.ggml.scores",
                MetaValue::Array(scores.into_iter().map(MetaValue::F32).collect()),
            )
            .metadata(
                "tokenizer.ggml.token_type",
                MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
            );
        w
    }

    fn open(w: &GgufWriter) -> Result<Tokenizer> {
        let file = GgufFile::from_bytes(Path::new("spm.gguf"), w.to_bytes())?;
        Tokenizer::from_gguf(&file)
    }

    fn flag(w: &mut GgufWriter, key: &str, value: bool) {
        w.metadata(key, MetaValue::Bool(value));
    }

    /// `pieces` with BOS off and the space prefix as given.
    fn spm(pieces: &[(&str, f32, i32)], space_prefix: bool) -> Tokenizer {
        let mut w = spm_writer(pieces);
        flag(&mut w, "tokenizer.ggml.add_bos_token", false);
        flag(&mut w, "tokenizer.ggml.add_space_prefix", space_prefix);
        open(&w).expect("tokenizer builds")
    }

    fn texts(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&id| tok.token_text(id).unwrap_or_default())
            .collect()
    }

    /// "hi" pieces: ▁ (259), h (260), i (261), hi (262), ▁hi (263).
    const HI: [(&str, f32, i32); 5] = [
        ("▁", -1.0, NORMAL),
        ("h", -2.0, NORMAL),
        ("i", -3.0, NORMAL),
        ("hi", -4.0, NORMAL),
        ("▁hi", -5.0, NORMAL),
    ];

    #[test]
    fn merges_follow_scores() {
        let pieces = |ab: f32, bc: f32| {
            [
                ("a", -1.0, NORMAL),
                ("b", -1.0, NORMAL),
                ("c", -1.0, NORMAL),
                ("ab", ab, NORMAL),
                ("bc", bc, NORMAL),
            ]
        };
        let tok = spm(&pieces(-5.0, -4.0), false);
        assert_eq!(texts(&tok, &tok.encode("abc").unwrap()), ["a", "bc"]);
        let tok = spm(&pieces(-4.0, -5.0), false);
        assert_eq!(texts(&tok, &tok.encode("abc").unwrap()), ["ab", "c"]);
    }

    #[test]
    fn space_prefix_on_and_off() {
        let with = spm(&HI, true);
        assert_eq!(texts(&with, &with.encode("hi hi").unwrap()), ["▁hi", "▁hi"]);
        assert_eq!(with.decode(&with.encode("hi").unwrap()), " hi");
        let without = spm(&HI, false);
        assert_eq!(
            texts(&without, &without.encode("hi hi").unwrap()),
            ["hi", "▁hi"]
        );
        assert_eq!(without.decode(&without.encode("hi hi").unwrap()), "hi hi");
    }

    #[test]
    fn space_prefix_defaults_on_and_bos_is_added() {
        let tok = open(&spm_writer(&HI)).expect("builds");
        assert!(tok.adds_bos() && !tok.adds_eos());
        assert_eq!(tok.encode("hi").unwrap(), [1, 263]);
        assert_eq!(tok.encode("").unwrap(), [1]);
    }

    #[test]
    fn eos_is_appended_when_asked() {
        let mut w = spm_writer(&HI);
        flag(&mut w, "tokenizer.ggml.add_eos_token", true);
        w.metadata("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
        let tok = open(&w).expect("builds");
        assert_eq!(tok.encode("hi").unwrap(), [1, 263, 2]);
    }

    #[test]
    fn characters_outside_the_vocabulary_fall_back_to_bytes() {
        let tok = spm(&HI, false);
        let ids = tok.encode("hé€").unwrap();
        let bytes: Vec<u32> = "é€".bytes().map(|b| FIRST_BYTE + u32::from(b)).collect();
        assert_eq!(ids[0], 260);
        assert_eq!(ids[1..], bytes[..]);
        assert_eq!(tok.decode(&ids), "hé€");
        assert_eq!(tok.piece(FIRST_BYTE + 0xC3), [0xC3]);
    }

    #[test]
    fn special_tokens_are_matched_whole_and_control_ones_hidden() {
        let mut pieces = HI.to_vec();
        pieces.extend([
            ("<start_of_turn>", 0.0, CONTROL),
            ("<end_of_turn>", 0.0, CONTROL),
            ("<b>", 0.0, USER_DEFINED),
        ]);
        let (sot, eot, bold) = (264, 265, 266);
        let text = "<start_of_turn>hi<b>hi<end_of_turn>";
        let without = spm(&pieces, false);
        let ids = without.encode(text).unwrap();
        assert_eq!(ids, [sot, 262, bold, 262, eot]);
        assert_eq!(without.decode(&ids), "hi<b>hi");
        // Llama 2 style: each stretch of text after a special token gets its own space.
        let with = spm(&pieces, true);
        let ids = with.encode(text).unwrap();
        assert_eq!(ids, [sot, 263, bold, 263, eot]);
        assert_eq!(with.decode(&ids), " hi<b> hi");
        assert!(with.piece(sot).is_empty() && with.piece(1).is_empty());
    }

    #[test]
    fn end_of_generation_follows_llama_cpp() {
        let mut pieces = HI.to_vec();
        pieces.extend([
            ("<end_of_turn>", 0.0, CONTROL),
            ("<|im_end|>", 0.0, NORMAL),
            ("<start_of_turn>", 0.0, CONTROL),
            ("<custom_stop>", 0.0, CONTROL),
        ]);
        let mut w = spm_writer(&pieces);
        w.metadata("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
        w.metadata("tokenizer.ggml.eom_token_id", MetaValue::U32(267));
        let tok = open(&w).expect("builds");
        assert_eq!(tok.end_of_generation(), [2, 264, 265, 267]);
        assert!(!tok.is_end_of_generation(266));
        // A normal token spelled like an end marker becomes a control token, as in llama.cpp.
        assert!(tok.piece(265).is_empty());
        assert_eq!(tok.encode("hi<|im_end|>").unwrap(), [1, 263, 265]);
    }

    #[test]
    fn unknown_algorithms_and_bad_vocabularies_are_named() {
        let mut w = spm_writer(&HI);
        w.metadata("tokenizer.ggml.model", MetaValue::String("bert".into()));
        let err = open(&w).err().expect("refused").to_string();
        assert!(
            err.contains("\"bert\"") && err.contains("llama") && err.contains("gpt2"),
            "{err}"
        );

        let mut w = spm_writer(&[("hi", 0.0, NORMAL), ("hi", 0.0, NORMAL)]);
        let err = open(&w).err().expect("refused").to_string();
        assert!(
            err.contains("\"hi\" appears twice") && err.contains("259 and 260"),
            "{err}"
        );

        w = spm_writer(&HI);
        w.metadata(
            "tokenizer.ggml.scores",
            MetaValue::Array(vec![MetaValue::F32(0.0)]),
        );
        let err = open(&w).err().expect("refused").to_string();
        assert!(
            err.contains("tokenizer.ggml.scores has 1 entries for 264 tokens"),
            "{err}"
        );

        w = spm_writer(&HI);
        w.metadata("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
        w.metadata("tokenizer.ggml.pre", MetaValue::String("mystery".into()));
        w.metadata("tokenizer.ggml.merges", string_array(["h i"]));
        let err = open(&w).err().expect("refused").to_string();
        assert!(
            err.contains("\"mystery\"") && err.contains("llama-bpe"),
            "{err}"
        );
    }

    #[test]
    fn hugging_face_export_tokenizes_and_decodes_the_same() {
        let tok = spm(&HI, true);
        let json = tok.to_json().expect("serializes");
        let inner: tokenizers::Tokenizer = json.parse().expect("reloads");
        let hf = Tokenizer::from_hf_tokenizer(inner, None);
        for text in ["hi hi", "hié", " hi  ih "] {
            let ids = tok.encode(text).unwrap();
            assert_eq!(hf.encode(text).unwrap(), ids, "{text:?}");
            assert_eq!(hf.decode(&ids), tok.decode(&ids), "{text:?}");
        }
    }

    /// Pieces trained on `corpus` the way SentencePiece's BPE trainer does: characters first, then
    /// `rounds` merges of the most frequent adjacent pair (ties to the smaller pair), each piece
    /// scored below the ones before it.
    fn trained_pieces(corpus: &str, rounds: usize) -> Vec<(String, f32)> {
        let mut words: Vec<Vec<String>> = corpus
            .split(' ')
            .map(|w| format!("▁{w}").chars().map(String::from).collect())
            .collect();
        let mut pieces: Vec<(String, f32)> = Vec::new();
        for word in &words {
            for c in word {
                if !pieces.iter().any(|(p, _)| p == c) {
                    pieces.push((c.clone(), -(pieces.len() as f32)));
                }
            }
        }
        for _ in 0..rounds {
            let mut counts: HashMap<(String, String), usize> = HashMap::new();
            for word in &words {
                for pair in word.windows(2) {
                    *counts
                        .entry((pair[0].clone(), pair[1].clone()))
                        .or_default() += 1;
                }
            }
            let Some(best) = counts
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|(pair, _)| pair)
            else {
                break;
            };
            let joined = format!("{}{}", best.0, best.1);
            for word in &mut words {
                let mut i = 0;
                while i + 1 < word.len() {
                    if word[i] == best.0 && word[i + 1] == best.1 {
                        word[i] = joined.clone();
                        word.remove(i + 1);
                    }
                    i += 1;
                }
            }
            if !pieces.iter().any(|(p, _)| *p == joined) {
                pieces.push((joined, -(pieces.len() as f32)));
            }
        }
        pieces
    }

    #[test]
    fn bpe_model_equals_llama_cpp_spm_on_random_text() {
        let corpus = "aaaa aaa aa a bbb abab abba baab ==== ---- .... the cat sat on the mat \
                      that hat is the best hat the end and then the cat ate the rat aaab";
        let trained = trained_pieces(corpus, 60);
        let pieces: Vec<(&str, f32, i32)> = trained
            .iter()
            .map(|(p, s)| (p.as_str(), *s, NORMAL))
            .collect();
        let alphabet: Vec<char> = "ab =-.thecasmonrié".chars().collect();
        let vocab = {
            let w = spm_writer(&pieces);
            let file = GgufFile::from_bytes(Path::new("spm.gguf"), w.to_bytes()).unwrap();
            vocab::Vocabulary::from_gguf(&file).unwrap()
        };
        let reference = spm::reference::Reference::new(&vocab);
        for space_prefix in [false, true] {
            let tok = spm(&pieces, space_prefix);
            let mut rng = StdRng::seed_from_u64(7);
            let mut merged = 0;
            for _ in 0..3000 {
                let len = rng.random_range(1..40);
                let text: String = (0..len)
                    .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                    .collect();
                let want = reference.encode(&text, space_prefix);
                let got = tok.encode(&text).unwrap();
                assert_eq!(got, want, "{text:?} (space prefix {space_prefix})");
                merged += texts(&tok, &got)
                    .iter()
                    .filter(|t| t.chars().count() > 1 && !t.starts_with("<0x"))
                    .count();
            }
            assert!(
                merged > 3000,
                "the texts exercise merges ({merged} multi-character pieces)"
            );
        }
    }

    /// The Gemma 3 GGUF file `STRATA_GEMMA_GGUF` names, or `None` (with a note) outside CI.
    fn gemma_file() -> Option<GgufFile> {
        let Some(path) = std::env::var_os("STRATA_GEMMA_GGUF") else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "STRATA_GEMMA_GGUF must name the Gemma 3 270M GGUF file on CI"
            );
            eprintln!("skipped: set STRATA_GEMMA_GGUF to the Gemma 3 270M GGUF file to run");
            return None;
        };
        Some(GgufFile::open(Path::new(&path)).expect("the Gemma file opens"))
    }

    /// Texts for Gemma: runs of one character, and random strings of vocabulary pieces with
    /// characters of many scripts, whitespace and markup between them.
    fn gemma_texts(vocab: &vocab::Vocabulary, rng: &mut StdRng) -> Vec<String> {
        let mut texts: Vec<String> = Vec::new();
        for c in "=-.*#_0~+/!?`'\"xa1 \n\t▁é".chars() {
            texts.extend((1..48).map(|n| c.to_string().repeat(n)));
        }
        let normal: Vec<&str> = vocab
            .tokens
            .iter()
            .zip(&vocab.kinds)
            .filter(|(_, kind)| **kind == TokenKind::Normal)
            .map(|(text, _)| text.as_str())
            .collect();
        let extra: Vec<char> = " \n\t.,;:!?'\"()[]<>{}-_=+*/#0123456789aeé東京ЖΩ🦀☃"
            .chars()
            .collect();
        for _ in 0..4000 {
            let mut text = String::new();
            for _ in 0..rng.random_range(1..12) {
                if rng.random_bool(0.3) {
                    text.push(extra[rng.random_range(0..extra.len())]);
                }
                text.push_str(&normal[rng.random_range(0..normal.len())].replace('▁', " "));
            }
            texts.push(text);
        }
        texts
    }

    #[test]
    fn gemma_bpe_model_equals_llama_cpp_spm() {
        let Some(file) = gemma_file() else { return };
        let tok = Tokenizer::from_gguf(&file).expect("builds");
        let meta = GgufVocab::from_gguf(&file, Algorithm::SentencePiece, true).expect("reads");
        let reference = spm::reference::Reference::new(&meta.vocab);
        let specials = tok
            .specials
            .as_ref()
            .expect("GGUF tokenizers split specials");
        let mut rng = StdRng::seed_from_u64(11);
        for text in gemma_texts(&meta.vocab, &mut rng) {
            let mut want: Vec<u32> = meta.bos.into_iter().collect();
            for fragment in specials.split(&text) {
                match fragment {
                    Fragment::Token(id) => want.push(id),
                    Fragment::Text(t) => want.extend(reference.encode(t, meta.add_space_prefix)),
                }
            }
            let got = tok.encode(&text).expect("encodes");
            assert_eq!(got, want, "{text:?}");
            // A `▁` written in the text reads back as the space it stands for.
            assert_eq!(tok.decode(&got), text.replace('▁', " "));
        }
    }

    #[test]
    fn byte_level_alphabet_covers_every_byte() {
        let table = unicode_to_byte();
        assert_eq!(table.len(), 256);
        assert_eq!(byte_level_bytes("Ġthe"), b" the");
        assert_eq!(byte_level_bytes("Ċ"), b"\n");
    }

    #[test]
    fn pieces_give_back_each_token_bytes() {
        let list: Vec<Vec<u8>> = vec![b"ab".to_vec(), vec![], b"c".to_vec(), vec![0xff, 0]];
        let pieces: Pieces = list.iter().cloned().collect();
        assert_eq!(pieces.len(), 4);
        for (id, want) in list.iter().enumerate() {
            assert_eq!(pieces.get(id), Some(want.as_slice()), "token {id}");
        }
        assert_eq!(pieces.get(4), None);
    }

    #[test]
    fn stream_decoder_holds_back_split_characters() {
        let tokens: Vec<String> = ["a", "Ã", "©"].iter().map(|s| s.to_string()).collect();
        let pre = PreTokenizer::named("gpt2").expect("known");
        let tok = bpe::model(&tokens, &[], pre).map(|inner| Tokenizer {
            inner,
            specials: None,
            token_bytes: tokens.iter().map(|t| byte_level_bytes(t)).collect(),
            hidden: vec![false; 3],
            bos: None,
            eos: None,
            end_of_generation: vec![],
            add_bos: false,
            add_eos: false,
            chat_template: None,
        });
        let tok = tok.expect("tokenizer builds");
        let mut stream = StreamDecoder::default();
        assert_eq!(stream.push(&tok, 0), "a");
        // "é" is 0xC3 0xA9: byte-level tokens Ã (0xC3) and © (0xA9).
        assert_eq!(stream.push(&tok, 1), "");
        assert_eq!(stream.push(&tok, 2), "é");
        assert_eq!(stream.finish(), "");
    }
}
