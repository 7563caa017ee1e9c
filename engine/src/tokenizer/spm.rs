//! SentencePiece vocabularies (`tokenizer.ggml.model = llama`) as a `tokenizers` BPE model.
//!
//! llama.cpp's SPM tokenizer (`llm_tokenizer_spm_session`) starts from the characters of the text
//! (spaces spelled `▁`), repeatedly merges the adjacent pair whose concatenation is a vocabulary
//! piece of highest score (leftmost first on ties), and spells what is left outside the vocabulary
//! as `<0xXX>` byte tokens. BPE merges ranked by the score of the piece they make give the same
//! result: every way of cutting a piece into two pieces is one merge. Finding them costs two hash
//! lookups per character boundary of the vocabulary, so Gemma's 262,144 pieces take a fraction of a
//! second.
//!
//! Where pieces of equal score could merge at once, llama.cpp takes the leftmost and BPE the one
//! listed first; and a character outside the vocabulary goes to bytes at once here, where llama.cpp
//! could still merge it with a neighbour. Real vocabularies give their pieces distinct scores and
//! hold every character their pieces are made of, so neither shows.

use tokenizers::{
    DecoderWrapper, NormalizerWrapper,
    decoders::{
        byte_fallback::ByteFallback, fuse::Fuse, sequence::Sequence as DecoderSequence,
        strip::Strip,
    },
    models::bpe::{BPE, Vocab},
    normalizers::{Prepend, Replace, Sequence as NormalizerSequence},
};

use super::{
    merges::{self, Cut},
    vocab::Vocabulary,
};

/// SentencePiece's stand-in for a space.
pub(super) const SPACE_MARK: &str = "\u{2581}";

/// The BPE merges equivalent to scoring pieces, best first: for each piece, each cut into two
/// pieces of `vocab`, ordered by the piece's score (higher first), then its id, then the cut; of
/// those, only the ones that can ever fire ([`merges::firing`]).
pub(super) fn derive_merges(
    tokens: &[String],
    scores: &[f32],
    vocab: &Vocab,
) -> Vec<(String, String)> {
    merges::firing(tokens, vocab, ranked_cuts(tokens, scores, vocab))
}

/// Every cut of every piece into two pieces, in merge order.
fn ranked_cuts(tokens: &[String], scores: &[f32], vocab: &Vocab) -> Vec<Cut> {
    let mut cuts: Vec<(f32, Cut)> = Vec::with_capacity(tokens.len() * 2);
    for (id, text) in tokens.iter().enumerate() {
        for (at, _) in text.char_indices().skip(1) {
            if let (Some(&left), Some(&right)) = (vocab.get(&text[..at]), vocab.get(&text[at..])) {
                let score = score_key(scores.get(id).copied().unwrap_or(0.0));
                let piece = id as u32;
                let at = at as u32;
                cuts.push((
                    score,
                    Cut {
                        piece,
                        at,
                        left,
                        right,
                    },
                ));
            }
        }
    }
    cuts.sort_unstable_by(|(sa, a), (sb, b)| {
        sb.total_cmp(sa)
            .then(a.piece.cmp(&b.piece))
            .then(a.at.cmp(&b.at))
    });
    cuts.into_iter().map(|(_, cut)| cut).collect()
}

/// A score as a totally ordered key: -0 equals 0 (llama.cpp compares with `<`) and NaN is lowest.
fn score_key(score: f32) -> f32 {
    if score.is_nan() {
        f32::NEG_INFINITY
    } else if score == 0.0 {
        0.0
    } else {
        score
    }
}

/// The `tokenizers` model of a SentencePiece vocabulary: spaces become `▁` (with one prepended to
/// each stretch of text when `add_space_prefix`), pieces merge by score, and characters outside the
/// vocabulary fall back to byte tokens (then to `unknown`, if the byte tokens are missing).
///
/// # Errors
/// When `tokenizers` refuses the vocabulary.
pub(super) fn model(
    vocab: &Vocabulary,
    add_space_prefix: bool,
    unknown: Option<u32>,
) -> Result<tokenizers::Tokenizer, String> {
    let map = merges::vocab_of(&vocab.tokens);
    let merges = derive_merges(&vocab.tokens, &vocab.scores, &map);
    // No word cache: with no pre-tokenizer a "word" is a whole stretch of text, which seldom comes
    // twice, and `tokenizers` would keep up to 10,000 of them on each thread that encodes.
    let mut builder = BPE::builder()
        .vocab_and_merges(map, merges)
        .byte_fallback(true)
        .cache_capacity(0);
    if let Some(text) = unknown.and_then(|id| vocab.tokens.get(id as usize)) {
        builder = builder.unk_token(text.clone());
    }
    let bpe = builder.build().map_err(|e| e.to_string())?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer
        .with_normalizer(Some(normalizer(add_space_prefix)?))
        .map_err(|e| e.to_string())?;
    tokenizer.with_decoder(Some(decoder(add_space_prefix)));
    Ok(tokenizer)
}

fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper, String> {
    let escape: NormalizerWrapper = Replace::new(" ", SPACE_MARK)
        .map_err(|e| e.to_string())?
        .into();
    Ok(if add_space_prefix {
        NormalizerSequence::new(vec![Prepend::new(SPACE_MARK.into()).into(), escape]).into()
    } else {
        escape
    })
}

/// What Hugging Face's SentencePiece-style `tokenizer.json` decodes with.
fn decoder(add_space_prefix: bool) -> DecoderWrapper {
    let mut steps: Vec<DecoderWrapper> = Vec::with_capacity(4);
    if let Ok(unescape) = Replace::new(SPACE_MARK, " ") {
        steps.push(unescape.into());
    }
    steps.push(ByteFallback::new().into());
    steps.push(Fuse::new().into());
    if add_space_prefix {
        steps.push(Strip::new(' ', 1, 0).into());
    }
    DecoderSequence::new(steps).into()
}

/// The byte a `<0xXX>` token stands for.
pub(super) fn byte_of(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

/// llama.cpp's SPM algorithm written out directly, the reference the BPE model is tested against.
#[cfg(test)]
pub(super) mod reference {
    use std::{cmp::Ordering, collections::BinaryHeap, collections::HashMap};

    use super::{SPACE_MARK, Vocabulary, byte_of};

    /// A pair of adjacent symbols whose text is a piece.
    struct Candidate {
        score: f32,
        left: usize,
        right: usize,
        len: usize,
    }

    impl PartialEq for Candidate {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other) == Ordering::Equal
        }
    }
    impl Eq for Candidate {}
    impl PartialOrd for Candidate {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Candidate {
        /// Higher score first, then the leftmost.
        fn cmp(&self, other: &Self) -> Ordering {
            self.score
                .partial_cmp(&other.score)
                .unwrap_or(Ordering::Equal)
                .then(other.left.cmp(&self.left))
        }
    }

    #[derive(Clone, Copy)]
    struct Symbol {
        start: usize,
        len: usize,
        prev: Option<usize>,
        next: Option<usize>,
    }

    /// A vocabulary indexed for [`Reference::encode`].
    pub(in crate::tokenizer) struct Reference<'a> {
        vocab: &'a Vocabulary,
        index: HashMap<&'a str, u32>,
        byte_tokens: HashMap<u8, u32>,
    }

    impl<'a> Reference<'a> {
        pub(in crate::tokenizer) fn new(vocab: &'a Vocabulary) -> Self {
            let index = vocab
                .tokens
                .iter()
                .enumerate()
                .map(|(id, t)| (t.as_str(), id as u32))
                .collect();
            let byte_tokens = vocab
                .tokens
                .iter()
                .enumerate()
                .filter_map(|(id, t)| byte_of(t).map(|b| (b, id as u32)))
                .collect();
            Self {
                vocab,
                index,
                byte_tokens,
            }
        }

        /// Token ids of `text` (one stretch between special tokens), with the space prefix when
        /// asked.
        pub(in crate::tokenizer) fn encode(&self, text: &str, add_space_prefix: bool) -> Vec<u32> {
            let mut text = text.replace(' ', SPACE_MARK);
            if add_space_prefix {
                text.insert_str(0, SPACE_MARK);
            }
            let symbols = self.merge(&text);
            let mut ids = Vec::new();
            let mut at = (!symbols.is_empty()).then_some(0);
            while let Some(i) = at {
                let s = symbols[i];
                let piece = &text[s.start..s.start + s.len];
                match self.index.get(piece) {
                    Some(&id) => ids.push(id),
                    None => ids.extend(
                        piece
                            .bytes()
                            .filter_map(|b| self.byte_tokens.get(&b).copied()),
                    ),
                }
                at = s.next;
            }
            ids
        }

        /// The symbols of `text` after merging, linked from the first.
        fn merge(&self, text: &str) -> Vec<Symbol> {
            let mut symbols: Vec<Symbol> = text
                .char_indices()
                .enumerate()
                .map(|(i, (start, c))| Symbol {
                    start,
                    len: c.len_utf8(),
                    prev: i.checked_sub(1),
                    next: Some(i + 1),
                })
                .collect();
            if let Some(last) = symbols.last_mut() {
                last.next = None;
            }
            let mut queue = BinaryHeap::new();
            let push = |queue: &mut BinaryHeap<Candidate>,
                        symbols: &[Symbol],
                        left: usize,
                        right: usize| {
                let (l, r) = (symbols[left], symbols[right]);
                let piece = &text[l.start..l.start + l.len + r.len];
                if let Some(&id) = self.index.get(piece) {
                    queue.push(Candidate {
                        score: self.vocab.scores[id as usize],
                        left,
                        right,
                        len: piece.len(),
                    });
                }
            };
            for i in 1..symbols.len() {
                push(&mut queue, &symbols, i - 1, i);
            }
            while let Some(best) = queue.pop() {
                let (l, r) = (symbols[best.left], symbols[best.right]);
                if l.len == 0 || r.len == 0 || l.len + r.len != best.len {
                    continue;
                }
                symbols[best.left].len += r.len;
                symbols[best.left].next = r.next;
                symbols[best.right].len = 0;
                if let Some(next) = r.next {
                    symbols[next].prev = Some(best.left);
                }
                if let Some(prev) = l.prev {
                    push(&mut queue, &symbols, prev, best.left);
                }
                if let Some(next) = r.next {
                    push(&mut queue, &symbols, best.left, next);
                }
            }
            symbols
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merges(tokens: &[&str], scores: &[f32]) -> Vec<(String, String)> {
        let tokens: Vec<String> = tokens.iter().map(|s| s.to_string()).collect();
        derive_merges(&tokens, scores, &merges::vocab_of(&tokens))
    }

    #[test]
    fn merges_follow_the_score_of_the_piece_they_make() {
        let merges = merges(
            &["a", "b", "c", "ab", "bc", "abc"],
            &[0.0, 0.0, 0.0, -2.0, -1.0, -3.0],
        );
        let pairs: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [("b", "c"), ("a", "b"), ("a", "bc")],
            "bc (-1) before ab (-2) before abc (-3), which its own text forms from a + bc: \
             the cut ab + c never fires"
        );
    }

    #[test]
    fn pieces_their_own_text_does_not_form_get_no_merge() {
        // `abcd` alone merges to `ab c d` and stops, so `a + bcd` can never fire.
        let merges = merges(
            &["a", "b", "c", "d", "ab", "bc", "bcd", "abcd"],
            &[0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0],
        );
        let pairs: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(pairs, [("a", "b"), ("b", "c"), ("bc", "d")]);
    }

    #[test]
    fn negative_zero_ties_with_zero() {
        let merges = merges(&["a", "b", "ba", "ab"], &[0.0, 0.0, 0.0, -0.0]);
        assert_eq!(
            merges[0],
            ("b".to_string(), "a".to_string()),
            "lower id first"
        );
    }

    #[test]
    fn byte_tokens_parse_only_in_their_exact_form() {
        assert_eq!(byte_of("<0x0A>"), Some(b'\n'));
        assert_eq!(byte_of("<0xff>"), Some(255));
        for text in ["<0x1>", "<0x123>", "0x0A", "<0xZZ>", "<0x0A"] {
            assert_eq!(byte_of(text), None, "{text}");
        }
    }
}
