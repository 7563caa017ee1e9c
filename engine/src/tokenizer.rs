//! Tokenizers built with the `tokenizers` crate: from a GGUF file's metadata (byte-level BPE from
//! `tokenizer.ggml.tokens` / `merges` / `token_type`) or from a Hugging Face `tokenizer.json`, plus
//! byte-exact streaming detokenization.

use std::{collections::HashMap, path::Path};

use tokenizers::{
    AddedToken, DecoderWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
    decoders::byte_level::ByteLevel as ByteLevelDecoder,
    models::bpe::{BPE, Vocab},
    pre_tokenizers::{
        byte_level::ByteLevel, sequence::Sequence, split::Split, split::SplitPattern,
    },
};

use crate::{
    error::{Error, Result},
    format::gguf::{GgufFile, MetaValue},
};

/// GGUF `token_type` of control tokens (`<|im_start|>` and the like).
const TOKEN_TYPE_CONTROL: u64 = 3;
/// GGUF `token_type` of user-defined tokens, matched verbatim in text.
const TOKEN_TYPE_USER_DEFINED: u64 = 4;
/// Texts of tokens that end a generated turn in common chat formats.
const END_OF_TURN_TEXTS: [&str; 5] = [
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
];

/// Word regexes of llama.cpp's pre-tokenizers (the GPT-2 one is built into `ByteLevel`).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A model's tokenizer with its special tokens and chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    token_bytes: Vec<Vec<u8>>,
    control: Vec<bool>,
    bos: Option<u32>,
    eos: Option<u32>,
    end_of_generation: Vec<u32>,
    add_bos: bool,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes.
    ///
    /// # Errors
    /// When the tokenizer metadata is missing, inconsistent, or of a kind not supported.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let bad = |problem: String| Error::model(file.path(), problem);
        let model = file.meta_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(bad(format!(
                "tokenizer model {model:?} is not supported (supported: gpt2 byte-level BPE)"
            )));
        }
        let tokens = string_array(file, "tokenizer.ggml.tokens")?;
        let merges = string_array(file, "tokenizer.ggml.merges")?;
        let types: Vec<u64> = match file
            .meta("tokenizer.ggml.token_type")
            .and_then(MetaValue::as_array)
        {
            Some(items) => items.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(bad(format!(
                "{} token types for {} tokens",
                types.len(),
                tokens.len()
            )));
        }
        let pre = file
            .meta("tokenizer.ggml.pre")
            .and_then(MetaValue::as_str)
            .unwrap_or("default");
        let inner =
            build_bpe(&tokens, &merges, &types, pre).map_err(|e| bad(format!("tokenizer: {e}")))?;
        let id_of = |key: &str| -> Result<Option<u32>> {
            match file.meta(key).and_then(MetaValue::as_u64) {
                Some(id) if (id as usize) < tokens.len() => Ok(Some(id as u32)),
                Some(id) => Err(bad(format!(
                    "{key} = {id} is outside the vocabulary of {}",
                    tokens.len()
                ))),
                None => Ok(None),
            }
        };
        let control = types.iter().map(|&t| t == TOKEN_TYPE_CONTROL).collect();
        let token_bytes = tokens.iter().map(|t| byte_level_bytes(t)).collect();
        let mut tokenizer = Self {
            inner,
            token_bytes,
            control,
            bos: id_of("tokenizer.ggml.bos_token_id")?,
            eos: id_of("tokenizer.ggml.eos_token_id")?,
            end_of_generation: Vec::new(),
            add_bos: file
                .meta("tokenizer.ggml.add_bos_token")
                .and_then(MetaValue::as_bool)
                .unwrap_or(false),
            chat_template: file
                .meta("tokenizer.chat_template")
                .and_then(MetaValue::as_str)
                .map(str::to_string),
        };
        tokenizer.end_of_generation = tokenizer.find_end_of_generation(&tokens);
        Ok(tokenizer)
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
        let mut control = vec![false; size];
        for (id, added) in inner.get_added_tokens_decoder() {
            if added.special && (id as usize) < size {
                control[id as usize] = true;
            }
        }
        let token_id = |key: &str| {
            config
                .and_then(|c| c.get(key))
                .and_then(special_token_text)
                .and_then(|t| inner.token_to_id(&t))
        };
        let bos = token_id("bos_token");
        let eos = token_id("eos_token");
        let add_bos = config
            .and_then(|c| c.get("add_bos_token"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let chat_template = config
            .and_then(|c| c.get("chat_template"))
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let token_bytes = tokens.iter().map(|t| byte_level_bytes(t)).collect();
        let mut tokenizer = Self {
            inner,
            token_bytes,
            control,
            bos,
            eos,
            end_of_generation: Vec::new(),
            add_bos,
            chat_template,
        };
        tokenizer.end_of_generation = tokenizer.find_end_of_generation(&tokens);
        tokenizer
    }

    fn find_end_of_generation(&self, tokens: &[String]) -> Vec<u32> {
        let mut ids: Vec<u32> = self.eos.into_iter().collect();
        for (id, text) in tokens.iter().enumerate() {
            if self.control[id]
                && END_OF_TURN_TEXTS.contains(&text.as_str())
                && !ids.contains(&(id as u32))
            {
                ids.push(id as u32);
            }
        }
        ids
    }

    /// Tokenizes `text`, matching special tokens written in it, and prepends BOS when the model asks for it.
    ///
    /// # Errors
    /// When the tokenizer fails on the input.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// The text of `ids`, control tokens left out.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.piece(id)).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The bytes token `id` stands for (empty for control tokens and unknown ids).
    pub fn piece(&self, id: u32) -> &[u8] {
        match self.token_bytes.get(id as usize) {
            Some(bytes) if !self.control[id as usize] => bytes,
            _ => &[],
        }
    }

    /// Number of token ids.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// Whether generating `id` ends the turn (EOS and end-of-turn control tokens).
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.contains(&id)
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
        self.inner
            .to_string(true)
            .map_err(|e| Error::Tokenizer(e.to_string()))
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

fn string_array(file: &GgufFile, key: &str) -> Result<Vec<String>> {
    let items = file
        .meta(key)
        .and_then(MetaValue::as_array)
        .ok_or_else(|| {
            Error::model(
                file.path(),
                format!("metadata key {key} is missing or not an array"),
            )
        })?;
    items
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            Error::model(
                file.path(),
                format!("metadata key {key} holds a non-string item"),
            )
        })
}

fn build_bpe(
    tokens: &[String],
    merges: &[String],
    types: &[u64],
    pre: &str,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let merges = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| format!("merge {m:?} is not \"a b\""))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevelDecoder::default())));
    let added: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|(_, t)| **t == TOKEN_TYPE_CONTROL || **t == TOKEN_TYPE_USER_DEFINED)
        .map(|(text, t)| AddedToken::from(text.clone(), *t == TOKEN_TYPE_CONTROL).normalized(false))
        .collect();
    tokenizer
        .add_special_tokens(added)
        .map_err(|e| e.to_string())?;
    Ok(tokenizer)
}

/// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` value.
fn pre_tokenizer(pre: &str) -> std::result::Result<PreTokenizerWrapper, String> {
    let split = |regex: &str| -> std::result::Result<PreTokenizerWrapper, String> {
        Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(PreTokenizerWrapper::Split)
        .map_err(|e| e.to_string())
    };
    let byte_level =
        |use_regex| PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, use_regex));
    Ok(match pre {
        "default" | "gpt2" | "gpt-2" => byte_level(true),
        // llama.cpp: digits are split one by one before the GPT-2 regex.
        "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" | "exaone" | "minerva-7b" => {
            PreTokenizerWrapper::Sequence(Sequence::new(vec![split(r"\p{N}")?, byte_level(true)]))
        }
        "llama3" | "llama-bpe" | "llama-v3" => PreTokenizerWrapper::Sequence(Sequence::new(vec![
            split(LLAMA3_REGEX)?,
            byte_level(false),
        ])),
        "qwen2" | "deepseek-r1-qwen" => PreTokenizerWrapper::Sequence(Sequence::new(vec![
            split(QWEN2_REGEX)?,
            byte_level(false),
        ])),
        other => {
            tracing::warn!(pre = other, "unknown pre-tokenizer; using the GPT-2 regex");
            byte_level(true)
        }
    })
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
    use super::*;

    #[test]
    fn byte_level_alphabet_covers_every_byte() {
        let table = unicode_to_byte();
        assert_eq!(table.len(), 256);
        assert_eq!(byte_level_bytes("Ġthe"), b" the");
        assert_eq!(byte_level_bytes("Ċ"), b"\n");
    }

    #[test]
    fn stream_decoder_holds_back_split_characters() {
        let tokens: Vec<String> = ["a", "Ã", "©"].iter().map(|s| s.to_string()).collect();
        let tok = build_bpe(&tokens, &[], &[1, 1, 1], "gpt2").map(|inner| Tokenizer {
            inner,
            token_bytes: tokens.iter().map(|t| byte_level_bytes(t)).collect(),
            control: vec![false; 3],
            bos: None,
            eos: None,
            end_of_generation: vec![],
            add_bos: false,
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
