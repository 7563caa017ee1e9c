//! Gemma 3 270M's SentencePiece tokenizer, built from its GGUF file, against llama.cpp: the token
//! ids of the reference prompts, the perplexity text's token count, decoding, and the chat template.
//!
//! The file's path comes from `STRATA_GEMMA_GGUF`; without it the tests say so and pass, unless
//! `CI=true`, where they fail.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use serde_json::Value;
use strata_engine::{
    chat::{ChatMessage, ChatTemplate},
    format::gguf::GgufFile,
    tokenizer::Tokenizer,
};

const ENV_GEMMA_GGUF: &str = "STRATA_GEMMA_GGUF";
const ENV_REFERENCE_DIR: &str = "STRATA_REFERENCE_DIR";
/// llama.cpp's perplexity run cut this many 128-token chunks from the text for Gemma.
const PERPLEXITY_CHUNKS: usize = 11;
const PERPLEXITY_CONTEXT: usize = 128;
/// Gemma's special tokens.
const BOS: u32 = 2;
const EOS: u32 = 1;
const START_OF_TURN: u32 = 105;
const END_OF_TURN: u32 = 106;
const NEWLINE: u32 = 107;
/// The pieces `user` and `model`.
const USER: u32 = 2364;
const MODEL: u32 = 4368;

/// The Gemma tokenizer, built once, or `None` (with a note) when the file is not configured outside
/// CI.
fn gemma() -> Option<&'static Tokenizer> {
    static GEMMA: OnceLock<Option<Tokenizer>> = OnceLock::new();
    GEMMA.get_or_init(build).as_ref()
}

fn build() -> Option<Tokenizer> {
    let path = match std::env::var_os(ENV_GEMMA_GGUF) {
        Some(path) => PathBuf::from(path),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{ENV_GEMMA_GGUF} must name the Gemma 3 270M GGUF file on CI")
        }
        None => {
            eprintln!("skipped: set {ENV_GEMMA_GGUF} to the Gemma 3 270M Q4_K_M GGUF file to run");
            return None;
        }
    };
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(Tokenizer::from_gguf(&file).expect("the Gemma tokenizer builds"))
}

fn reference_dir() -> PathBuf {
    match std::env::var_os(ENV_REFERENCE_DIR) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference"),
    }
}

fn read(name: &str) -> String {
    let path = reference_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("array of ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn prompt_ids_match_llama_cpp() {
    let Some(tokenizer) = gemma() else { return };
    for name in [
        "gemma-3-270m-Q4_K_M-greedy.json",
        "gemma-3-270m-Q5_K_M-greedy.json",
    ] {
        let reference: Value = serde_json::from_str(&read(name)).expect("reference JSON");
        let cases = reference["results"].as_array().expect("results");
        assert!(!cases.is_empty());
        for case in cases {
            let prompt = case["prompt"].as_str().expect("prompt");
            let want = ids(&case["prompt_token_ids_as_evaluated"]);
            assert_eq!(
                tokenizer.encode(prompt).expect("encodes"),
                want,
                "{name}: {prompt:?}"
            );
            assert_eq!(want[0], BOS);
            assert_eq!(
                tokenizer.decode(&want),
                prompt,
                "{name}: decoding {prompt:?}"
            );
        }
    }
}

#[test]
fn generated_ids_decode_to_the_reference_text() {
    let Some(tokenizer) = gemma() else { return };
    let reference: Value =
        serde_json::from_str(&read("gemma-3-270m-Q4_K_M-greedy.json")).expect("reference JSON");
    for case in reference["results"].as_array().expect("results") {
        let generated = ids(&case["generated_token_ids"]);
        let want = case["generated_text"].as_str().expect("text");
        assert_eq!(tokenizer.decode(&generated), want);
    }
}

#[test]
fn perplexity_text_makes_eleven_chunks() {
    let Some(tokenizer) = gemma() else { return };
    let text = read("perplexity-text.txt");
    let tokens = tokenizer.encode(&text).expect("encodes");
    assert_eq!(tokens[0], BOS);
    assert_eq!(
        tokens.len() / PERPLEXITY_CONTEXT,
        PERPLEXITY_CHUNKS,
        "{} tokens",
        tokens.len()
    );
    assert_eq!(tokenizer.decode(&tokens), text);
}

#[test]
fn text_round_trips_through_the_vocabulary() {
    let Some(tokenizer) = gemma() else { return };
    for text in [
        "Hello, world!",
        "  two spaces, a\ttab and\n\nnewlines\n",
        "naïve café, 東京, Ελληνικά, emoji 🦀 and ☃",
        "def f(x):\n    return x ** 2  # square\n",
        "<table><tr><td>cell</td></tr></table>",
        "==== ---- ____ .... 0000 1234567890",
    ] {
        let ids = tokenizer.encode(text).expect("encodes");
        assert_eq!(ids[0], BOS);
        assert_eq!(tokenizer.decode(&ids), text, "{ids:?}");
    }
}

#[test]
fn special_tokens_and_end_of_generation() {
    let Some(tokenizer) = gemma() else { return };
    let ids = tokenizer
        .encode("<start_of_turn>user\nHi<end_of_turn>\n")
        .expect("encodes");
    assert_eq!(ids[..3], [BOS, START_OF_TURN, USER]);
    assert_eq!(ids[3], NEWLINE);
    assert_eq!(ids[ids.len() - 2..], [END_OF_TURN, NEWLINE]);
    assert_eq!(
        tokenizer.decode(&ids),
        "user\nHi\n",
        "control tokens are not shown"
    );
    assert_eq!(tokenizer.vocab_size(), 262_144);
    assert!(tokenizer.adds_bos());
    assert_eq!(tokenizer.eos(), Some(EOS));
    assert!(tokenizer.is_end_of_generation(EOS));
    assert!(tokenizer.is_end_of_generation(END_OF_TURN));
    assert!(!tokenizer.is_end_of_generation(START_OF_TURN));
    assert!(!tokenizer.adds_eos());
}

#[test]
fn chat_template_renders_a_prompt_with_one_bos() {
    let Some(tokenizer) = gemma() else { return };
    let source = match tokenizer.chat_template() {
        Some(source) => source.to_string(),
        None => std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gemma-3-chat-template.jinja"),
        )
        .expect("template file"),
    };
    let template = ChatTemplate::new(&source).expect("compiles");
    let messages = [
        ChatMessage::new("system", "Answer in one word."),
        ChatMessage::new("user", "The capital of France?"),
    ];
    let prompt = template
        .render_prompt(&messages, true, tokenizer)
        .expect("renders");
    assert!(prompt.starts_with("<start_of_turn>user\nAnswer in one word.\n\nThe capital"));
    let ids = tokenizer.encode(&prompt).expect("encodes");
    assert_eq!(ids[..3], [BOS, START_OF_TURN, USER]);
    assert_eq!(ids.iter().filter(|&&id| id == BOS).count(), 1);
    assert_eq!(ids[ids.len() - 3..], [START_OF_TURN, MODEL, NEWLINE]);
}
