//! A GGUF file's vocabulary as llama.cpp reads it (`llama_vocab::impl::load`): token texts, kinds
//! and scores, the special token ids and flags, and the tokens that end a generation.

use std::collections::HashMap;

use crate::format::gguf::{GgufFile, MetaValue};

/// What a token is, from GGUF `tokenizer.ggml.token_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// Type 0, or a value outside the known ones: never shown.
    Undefined,
    /// Type 1: ordinary text.
    Normal,
    /// Type 2: the unknown-text token.
    Unknown,
    /// Type 3: markup such as `<bos>` or `<|im_end|>`.
    Control,
    /// Type 4: text the vocabulary keeps whole, such as `<table>` or runs of newlines.
    UserDefined,
    /// Type 5: reserved, never shown.
    Unused,
    /// Type 6: one raw byte, spelled `<0xXX>`.
    Byte,
}

impl TokenKind {
    fn from_gguf(value: Option<u64>) -> Self {
        match value {
            Some(1) => Self::Normal,
            Some(2) => Self::Unknown,
            Some(3) => Self::Control,
            Some(4) => Self::UserDefined,
            Some(5) => Self::Unused,
            Some(6) => Self::Byte,
            _ => Self::Undefined,
        }
    }

    /// Matched whole in text before the model runs (llama.cpp's special-token cache).
    pub(super) fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::UserDefined | Self::Unknown)
    }

    /// Left out of decoded text.
    pub(super) fn is_hidden(self) -> bool {
        matches!(self, Self::Control | Self::Unknown)
    }
}

/// The tokenizer algorithm a file names in `tokenizer.ggml.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Algorithm {
    /// `llama`: SentencePiece pieces with scores and byte fallback.
    SentencePiece,
    /// `gpt2`: byte-level BPE with ranked merges.
    BytePairs,
}

impl Algorithm {
    /// The algorithm of a `tokenizer.ggml.model` value.
    ///
    /// # Errors
    /// Names the value and the supported ones when it is not supported.
    pub(super) fn from_gguf(model: &str) -> Result<Self, String> {
        match model {
            "llama" => Ok(Self::SentencePiece),
            "gpt2" => Ok(Self::BytePairs),
            other => Err(format!(
                "tokenizer model {other:?} is not supported (supported: llama = SentencePiece, \
                 gpt2 = byte-level BPE)"
            )),
        }
    }
}

/// Token texts with their kinds and scores, one entry per id.
#[derive(Debug, Clone, Default)]
pub(super) struct Vocabulary {
    pub(super) tokens: Vec<String>,
    pub(super) kinds: Vec<TokenKind>,
    /// SentencePiece scores (0 where the file has none).
    pub(super) scores: Vec<f32>,
}

impl Vocabulary {
    /// Reads `tokenizer.ggml.tokens`, `token_type` and `scores`; an empty text becomes `[EMPTY_<id>]`
    /// as in llama.cpp.
    ///
    /// # Errors
    /// When the token list is missing, a text repeats, or the types or scores are fewer than the
    /// tokens.
    pub(super) fn from_gguf(file: &GgufFile) -> Result<Self, String> {
        let mut tokens = string_array(file, "tokenizer.ggml.tokens")?;
        for (id, text) in tokens.iter_mut().enumerate() {
            if text.is_empty() {
                *text = format!("[EMPTY_{id}]");
            }
        }
        check_unique(&tokens)?;
        let kinds = match array(file, "tokenizer.ggml.token_type") {
            Some(items) => {
                at_least(items.len(), tokens.len(), "tokenizer.ggml.token_type")?;
                items
                    .iter()
                    .map(|v| TokenKind::from_gguf(v.as_u64()))
                    .collect()
            }
            None => vec![TokenKind::Normal; tokens.len()],
        };
        let scores = match array(file, "tokenizer.ggml.scores") {
            Some(items) => {
                at_least(items.len(), tokens.len(), "tokenizer.ggml.scores")?;
                items
                    .iter()
                    .map(|v| v.as_f64().map_or(0.0, |s| s as f32))
                    .collect()
            }
            None => vec![0.0; tokens.len()],
        };
        let mut vocab = Self {
            tokens,
            kinds,
            scores,
        };
        vocab.kinds.truncate(vocab.tokens.len());
        vocab.scores.truncate(vocab.tokens.len());
        Ok(vocab)
    }

    /// Number of tokens.
    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Ids by text.
    fn index(&self) -> HashMap<&str, u32> {
        self.tokens
            .iter()
            .enumerate()
            .map(|(id, text)| (text.as_str(), id as u32))
            .collect()
    }
}

/// Token texts llama.cpp takes for end-of-turn when the file names none (`eot_token_id`).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
/// Token texts taken for end-of-message when the file names none (`eom_token_id`).
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
/// Fill-in-the-middle markers by role, each list searched when the file names no id for it.
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Token texts that end a generation whatever their type (llama.cpp's `special_eog_ids`).
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// The roles a fill-in-the-middle marker can have: metadata key and the texts searched without it.
const FIM_ROLES: [(&str, &[&str]); 6] = [
    ("tokenizer.ggml.fim_pre_token_id", FIM_PRE_TEXTS),
    ("tokenizer.ggml.fim_suf_token_id", FIM_SUF_TEXTS),
    ("tokenizer.ggml.fim_mid_token_id", FIM_MID_TEXTS),
    ("tokenizer.ggml.fim_pad_token_id", FIM_PAD_TEXTS),
    ("tokenizer.ggml.fim_rep_token_id", FIM_REP_TEXTS),
    ("tokenizer.ggml.fim_sep_token_id", FIM_SEP_TEXTS),
];
/// Older names of the first three fill-in-the-middle keys.
const FIM_OLD_KEYS: [&str; 3] = [
    "tokenizer.ggml.prefix_token_id",
    "tokenizer.ggml.suffix_token_id",
    "tokenizer.ggml.middle_token_id",
];

/// Everything a GGUF file says about its tokenizer besides the algorithm's own data.
#[derive(Debug, Clone)]
pub(super) struct GgufVocab {
    pub(super) vocab: Vocabulary,
    pub(super) bos: Option<u32>,
    pub(super) eos: Option<u32>,
    pub(super) unknown: Option<u32>,
    /// Ids whose generation ends the turn, ascending.
    pub(super) end_of_generation: Vec<u32>,
    pub(super) add_bos: bool,
    pub(super) add_eos: bool,
    pub(super) add_space_prefix: bool,
}

impl GgufVocab {
    /// Reads the vocabulary of a file using `algorithm`; `default_add_bos` applies when the file has
    /// no `tokenizer.ggml.add_bos_token`.
    ///
    /// # Errors
    /// When the vocabulary is malformed, a special token id is outside it, or BOS is to be added
    /// but there is none.
    pub(super) fn from_gguf(
        file: &GgufFile,
        algorithm: Algorithm,
        default_add_bos: bool,
    ) -> Result<Self, String> {
        let mut vocab = Vocabulary::from_gguf(file)?;
        let spm = algorithm == Algorithm::SentencePiece;
        let n = vocab.len();
        // llama.cpp's defaults for SentencePiece files (none for BPE ones, see the module docs).
        let default_id = |id: u32| (spm && (id as usize) < n).then_some(id);
        let bos = token_id(file, "tokenizer.ggml.bos_token_id", n)?.or(default_id(1));
        let eos = token_id(file, "tokenizer.ggml.eos_token_id", n)?.or(default_id(2));
        let unknown = token_id(file, "tokenizer.ggml.unknown_token_id", n)?.or(default_id(0));
        let end_of_generation = end_of_generation(file, &mut vocab, eos)?;
        let flag = |key: &str, default: bool| {
            file.meta(key)
                .and_then(MetaValue::as_bool)
                .unwrap_or(default)
        };
        let add_bos = flag("tokenizer.ggml.add_bos_token", default_add_bos);
        let add_eos = flag("tokenizer.ggml.add_eos_token", false);
        if add_bos && bos.is_none() {
            return Err(
                "tokenizer.ggml.add_bos_token is set but the file names no BOS token".into(),
            );
        }
        if add_eos && eos.is_none() {
            return Err(
                "tokenizer.ggml.add_eos_token is set but the file names no EOS token".into(),
            );
        }
        Ok(Self {
            vocab,
            bos,
            eos,
            unknown,
            end_of_generation,
            add_bos,
            add_eos,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix", spm),
        })
    }
}

/// The ids that end a generation as llama.cpp finds them: the EOS, end-of-turn and end-of-message
/// ids (from the file, else by text), the fill-in-the-middle pad/repo/separator markers, and every
/// token spelled like an end-of-generation marker. Tokens found by text become control tokens.
fn end_of_generation(
    file: &GgufFile,
    vocab: &mut Vocabulary,
    eos: Option<u32>,
) -> Result<Vec<u32>, String> {
    let n = vocab.len();
    let index = vocab.index();
    let lowest = |texts: &[&str]| texts.iter().filter_map(|t| index.get(t).copied()).min();
    let mut found_by_text = Vec::new();
    let mut role = |key: &str, old_key: Option<&str>, texts: &[&str]| -> Result<_, String> {
        let mut id = token_id(file, key, n)?;
        if let (None, Some(old)) = (id, old_key) {
            id = token_id(file, old, n)?;
        }
        if id.is_none() {
            id = lowest(texts);
            found_by_text.extend(id);
        }
        Ok(id)
    };
    let eot = role("tokenizer.ggml.eot_token_id", None, EOT_TEXTS)?;
    let eom = role("tokenizer.ggml.eom_token_id", None, EOM_TEXTS)?;
    let mut fim = Vec::with_capacity(FIM_ROLES.len());
    for (i, (key, texts)) in FIM_ROLES.iter().enumerate() {
        fim.push(role(key, FIM_OLD_KEYS.get(i).copied(), texts)?);
    }
    let by_text: Vec<u32> = END_OF_GENERATION_TEXTS
        .iter()
        .filter_map(|t| index.get(t).copied())
        .collect();
    drop(index);
    let mut eog: Vec<u32> = fim[3..].iter().flatten().copied().collect();
    eog.extend(&by_text);
    found_by_text.extend(by_text);
    eog.extend(eos.into_iter().chain(eot).chain(eom));
    for id in found_by_text {
        vocab.kinds[id as usize] = TokenKind::Control;
    }
    eog.sort_unstable();
    eog.dedup();
    drop_false_ends(vocab, &mut eog);
    Ok(eog)
}

/// llama.cpp's two exceptions: `<|end|>` does not end a generation where `<|return|>` and
/// `<|call|>` (or `<|calls|>` and `<|flush|>`) do, and `</s>` is plain text where `<|tool_response>`
/// or `<|plamo:eos|>` ends generations.
fn drop_false_ends(vocab: &mut Vocabulary, eog: &mut Vec<u32>) {
    let text_of = |id: u32| vocab.tokens[id as usize].as_str();
    let has = |texts: &[&str]| eog.iter().any(|&id| texts.contains(&text_of(id)));
    let end = eog.iter().copied().find(|&id| text_of(id) == "<|end|>");
    let calls = has(&["<|call|>", "<|calls|>"]);
    if let Some(end) = end
        && calls
        && (has(&["<|return|>"]) || has(&["<|flush|>"]))
    {
        eog.retain(|&id| id != end);
        vocab.kinds[end as usize] = TokenKind::UserDefined;
    }
    let text_of = |id: u32| vocab.tokens[id as usize].as_str();
    let plain_s = eog
        .iter()
        .any(|&id| matches!(text_of(id), "<|tool_response>" | "<|plamo:eos|>"));
    if let Some(s) = eog.iter().copied().find(|&id| text_of(id) == "</s>")
        && plain_s
    {
        eog.retain(|&id| id != s);
        vocab.kinds[s as usize] = TokenKind::Normal;
    }
}

/// A token id from metadata `key`, checked against a vocabulary of `n` tokens.
fn token_id(file: &GgufFile, key: &str, n: usize) -> Result<Option<u32>, String> {
    match file.meta(key).and_then(MetaValue::as_u64) {
        Some(id) if (id as usize) < n => Ok(Some(id as u32)),
        Some(id) => Err(format!("{key} = {id} is outside the vocabulary of {n}")),
        None => Ok(None),
    }
}

fn array<'a>(file: &'a GgufFile, key: &str) -> Option<&'a [MetaValue]> {
    file.meta(key).and_then(MetaValue::as_array)
}

/// The strings of array `key`.
pub(super) fn string_array(file: &GgufFile, key: &str) -> Result<Vec<String>, String> {
    let items =
        array(file, key).ok_or_else(|| format!("metadata key {key} is missing or not an array"))?;
    items
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("metadata key {key} holds a non-string item"))
}

fn at_least(have: usize, tokens: usize, key: &str) -> Result<(), String> {
    if have < tokens {
        return Err(format!("{key} has {have} entries for {tokens} tokens"));
    }
    Ok(())
}

/// llama.cpp refuses a vocabulary that spells two ids the same.
fn check_unique(tokens: &[String]) -> Result<(), String> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
    for (id, text) in tokens.iter().enumerate() {
        if let Some(first) = seen.insert(text, id) {
            return Err(format!(
                "token {text:?} appears twice in tokenizer.ggml.tokens (ids {first} and {id})"
            ));
        }
    }
    Ok(())
}

/// Whether llama.cpp ends generations at a token spelled `text`.
pub(super) fn is_end_of_generation_text(text: &str) -> bool {
    END_OF_GENERATION_TEXTS.contains(&text)
}
