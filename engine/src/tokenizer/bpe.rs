//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): the word regexes llama.cpp applies for each
//! `tokenizer.ggml.pre` value (`llm_tokenizer_bpe`), each splitting the pieces the previous one
//! left, then GPT-2's byte alphabet and the file's ranked merges.

use super::merges::{self, Cut};
use tokenizers::{
    DecoderWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
    decoders::byte_level::ByteLevel as ByteLevelDecoder,
    models::bpe::{BPE, Vocab},
    pre_tokenizers::{
        byte_level::ByteLevel, sequence::Sequence, split::Split, split::SplitPattern,
    },
};

/// GPT-2's word regex (with the trailing `\s+` llama.cpp's own implementation of it has).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's word regex, case-insensitive contractions spelled out as llama.cpp does.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// One digit at a time.
const DIGIT: &str = r"\p{N}";

/// How one family of `tokenizer.ggml.pre` values splits text into words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PreTokenizer {
    /// The regexes, applied in order.
    pub(super) regexes: &'static [&'static str],
    /// A word that is a whole vocabulary token becomes that token without merging.
    pub(super) ignore_merges: bool,
    /// Whether BOS is added when the file does not say.
    pub(super) add_bos: bool,
}

/// `tokenizer.ggml.pre` values by the pre-tokenizer llama.cpp gives them.
const FAMILIES: &[(&[&str], PreTokenizer)] = &[
    (
        &["default"],
        PreTokenizer {
            regexes: &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
            ignore_merges: false,
            add_bos: false,
        },
    ),
    (
        &[
            "gpt2",
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        PreTokenizer {
            regexes: &[GPT2],
            ignore_merges: false,
            add_bos: false,
        },
    ),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        PreTokenizer {
            regexes: &[LLAMA3],
            ignore_merges: true,
            add_bos: true,
        },
    ),
    (
        &["dbrx", "smaug-bpe"],
        PreTokenizer {
            regexes: &[LLAMA3],
            ignore_merges: false,
            add_bos: false,
        },
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        PreTokenizer {
            regexes: &[QWEN2],
            ignore_merges: false,
            add_bos: false,
        },
    ),
    (
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        PreTokenizer {
            regexes: &[DIGIT, GPT2],
            ignore_merges: false,
            add_bos: false,
        },
    ),
];

impl PreTokenizer {
    /// The pre-tokenizer of a `tokenizer.ggml.pre` value (`default` when the file has none).
    ///
    /// # Errors
    /// Names the value and every supported one when it is unknown.
    pub(super) fn named(pre: &str) -> Result<Self, String> {
        FAMILIES
            .iter()
            .find(|(names, _)| names.contains(&pre))
            .map(|&(_, family)| family)
            .ok_or_else(|| {
                let supported: Vec<&str> = FAMILIES
                    .iter()
                    .flat_map(|(names, _)| names.iter().copied())
                    .collect();
                format!(
                    "tokenizer.ggml.pre {pre:?} is not supported (supported: {})",
                    supported.join(", ")
                )
            })
    }

    fn wrapper(&self) -> Result<PreTokenizerWrapper, String> {
        let mut steps = self
            .regexes
            .iter()
            .map(|regex| {
                Split::new(
                    SplitPattern::Regex((*regex).to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map(PreTokenizerWrapper::Split)
                .map_err(|e| format!("pre-tokenizer regex {regex:?}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, true, false,
        )));
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
    }
}

/// The `tokenizers` model of a byte-level BPE vocabulary: `tokens` by id, `merges` as `"a b"`.
///
/// # Errors
/// When a merge is not `"a b"` or names a token outside the vocabulary.
pub(super) fn model(
    tokens: &[String],
    merges: &[String],
    pre: PreTokenizer,
) -> Result<tokenizers::Tokenizer, String> {
    let vocab = merges::vocab_of(tokens);
    let cuts = merges
        .iter()
        .map(|m| merge_cut(m, &vocab))
        .collect::<Result<Vec<_>, String>>()?;
    let merges = merges::firing(tokens, &vocab, cuts);
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre.wrapper()?));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevelDecoder::default())));
    Ok(tokenizer)
}

/// Merge `"a b"` as a cut of the vocabulary token `ab`.
///
/// # Errors
/// When the merge is not `"a b"`, or `a`, `b` or `ab` is not in the vocabulary (`tokenizers` needs
/// all three, and panics on some merges whose result is missing).
fn merge_cut(merge: &str, vocab: &Vocab) -> Result<Cut, String> {
    let (a, b) = split_merge(merge).ok_or_else(|| format!("merge {merge:?} is not \"a b\""))?;
    let id = |text: &str| vocab.get(text).copied();
    let piece = id(&format!("{a}{b}"))
        .ok_or_else(|| format!("merge {merge:?} makes a token that is not in the vocabulary"))?;
    match (id(a), id(b)) {
        (Some(left), Some(right)) => Ok(Cut {
            piece,
            at: a.len() as u32,
            left,
            right,
        }),
        _ => Err(format!(
            "merge {merge:?} joins a token that is not in the vocabulary"
        )),
    }
}

/// `"a b"` as llama.cpp splits it: at the first space after the first byte, so `"  a"` is
/// (`" "`, `"a"`).
fn split_merge(merge: &str) -> Option<(&str, &str)> {
    let at = merge.bytes().skip(1).position(|b| b == b' ')? + 1;
    Some((&merge[..at], &merge[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer as _};
        let family = PreTokenizer::named(pre).expect("known");
        let mut s = PreTokenizedString::from(text);
        family
            .wrapper()
            .expect("compiles")
            .pre_tokenize(&mut s)
            .expect("splits");
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(piece, _, _)| piece.to_string())
            .collect()
    }

    #[test]
    fn every_family_compiles() {
        for (names, family) in FAMILIES {
            assert!(family.wrapper().is_ok(), "{names:?}");
        }
    }

    #[test]
    fn unknown_pre_names_itself_and_the_supported_ones() {
        let err = PreTokenizer::named("mystery-bpe").unwrap_err();
        assert!(err.contains("\"mystery-bpe\""), "{err}");
        for name in ["default", "gpt2", "llama-bpe", "qwen2", "smollm"] {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn digits_group_by_family() {
        // Pieces are in GPT-2's byte alphabet: `Ġ` is a space.
        assert_eq!(pieces("llama-bpe", "x 12345"), ["x", "Ġ", "123", "45"]);
        assert_eq!(pieces("qwen2", "x 123"), ["x", "Ġ", "1", "2", "3"]);
        assert_eq!(pieces("smollm", "x 123"), ["x", "Ġ", "1", "2", "3"]);
        assert_eq!(pieces("gpt2", "x 12345"), ["x", "Ġ12345"]);
        assert_eq!(pieces("default", "x 12345"), ["x", "Ġ", "123", "45"]);
    }

    #[test]
    fn llama3_keeps_newlines_and_contractions_apart() {
        assert_eq!(
            pieces("llama-bpe", "I'M here!\n\nok"),
            ["I", "'M", "Ġhere", "!ĊĊ", "ok"]
        );
        assert_eq!(pieces("gpt2", "I'M"), ["I", "'", "M"]);
    }

    #[test]
    fn default_isolates_punctuation_runs() {
        assert_eq!(
            pieces("default", "a+b=c!?"),
            ["a", "+", "b", "=", "c", "!?"]
        );
        assert_eq!(pieces("gpt2", "a+b=c!?"), ["a", "+", "b", "=", "c", "!?"]);
        assert_eq!(
            pieces("default", "hi ... there"),
            ["hi", "Ġ", "...", "Ġthere"]
        );
        assert_eq!(pieces("gpt2", "hi ... there"), ["hi", "Ġ...", "Ġthere"]);
    }

    #[test]
    fn merges_must_make_vocabulary_tokens() {
        let tokens: Vec<String> = ["a", "b", "ab", "abab"].map(String::from).to_vec();
        let pre = PreTokenizer::named("gpt2").expect("known");
        assert!(model(&tokens, &["a b".into(), "ab ab".into()], pre).is_ok());
        let err = model(&tokens, &["ab abab".into()], pre).unwrap_err();
        assert!(
            err.contains("\"ab abab\" makes a token that is not in the vocabulary"),
            "{err}"
        );
        let err = model(&tokens, &["ab".into()], pre).unwrap_err();
        assert!(err.contains("\"ab\" is not \"a b\""), "{err}");
        let err = model(&tokens, &["aba b".into()], pre).unwrap_err();
        assert!(
            err.contains("\"aba b\" joins a token that is not in the vocabulary"),
            "{err}"
        );
    }

    #[test]
    fn merges_split_at_the_first_space_after_the_first_byte() {
        assert_eq!(split_merge("a b"), Some(("a", "b")));
        assert_eq!(split_merge("Ġ Ġ"), Some(("Ġ", "Ġ")));
        assert_eq!(split_merge("  a"), Some((" ", "a")));
        assert_eq!(split_merge("ab"), None);
        assert_eq!(split_merge(""), None);
    }
}
