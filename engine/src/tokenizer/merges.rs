//! Merges that can fire. Wherever a piece forms in a BPE tokenization, no merge has crossed its
//! edges, so the merges inside it are those its own text goes through alone, and the piece forms by
//! the last of them: always the same merge. A vocabulary's other ways of making the piece never fire,
//! nor does any merge making a piece its own text does not merge into. Leaving them out changes no
//! tokenization and shrinks the merge table, which the `tokenizers` model holds as a hash map
//! (Gemma 3's SentencePiece cuts: 514,847 of which 236,245 fire).

use std::collections::HashMap;

use tokenizers::models::bpe::Vocab;

/// A piece cut into two pieces.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    /// The piece's id.
    pub(super) piece: u32,
    /// The byte where the right part starts.
    pub(super) at: u32,
    pub(super) left: u32,
    pub(super) right: u32,
}

/// The `tokenizers` vocabulary of `tokens`: each text with its index as id.
pub(super) fn vocab_of(tokens: &[String]) -> Vocab {
    tokens
        .iter()
        .enumerate()
        .map(|(id, text)| (text.clone(), id as u32))
        .collect()
}

/// The merges of `cuts` (in rank order) that can fire, as `(left, right)` texts in that order.
pub(super) fn firing(tokens: &[String], vocab: &Vocab, cuts: Vec<Cut>) -> Vec<(String, String)> {
    let fires = fires(tokens, vocab, &cuts);
    cuts.iter()
        .zip(fires)
        .filter(|&(_, fires)| fires)
        .map(|(cut, _)| {
            let (left, right) = tokens[cut.piece as usize].split_at(cut.at as usize);
            (left.to_string(), right.to_string())
        })
        .collect()
}

/// Which of `cuts` (in rank order) fire: for each piece whose own text merges into it alone, the
/// last merge on the way.
fn fires(tokens: &[String], vocab: &Vocab, cuts: &[Cut]) -> Vec<bool> {
    let rank: HashMap<(u32, u32), (usize, u32)> = cuts
        .iter()
        .enumerate()
        .map(|(rank, cut)| ((cut.left, cut.right), (rank, cut.piece)))
        .collect();
    let mut fires = vec![false; cuts.len()];
    let mut symbols: Vec<u32> = Vec::new();
    for (id, text) in tokens.iter().enumerate() {
        symbols.clear();
        for c in text.chars() {
            match vocab.get(c.encode_utf8(&mut [0; 4]) as &str) {
                Some(&char_id) => symbols.push(char_id),
                None => break,
            }
        }
        if symbols.len() < 2 || symbols.len() != text.chars().count() {
            continue;
        }
        if let Some(last) = merge_alone(&mut symbols, &rank)
            && symbols == [id as u32]
        {
            fires[last] = true;
        }
    }
    fires
}

/// Merges `symbols` as BPE does (the lowest rank first, the leftmost of equal ones) until no merge
/// applies; returns the rank of the last merge.
fn merge_alone(symbols: &mut Vec<u32>, rank: &HashMap<(u32, u32), (usize, u32)>) -> Option<usize> {
    let mut last = None;
    loop {
        let best = symbols
            .windows(2)
            .enumerate()
            .filter_map(|(at, pair)| {
                rank.get(&(pair[0], pair[1]))
                    .map(|&(r, piece)| (r, at, piece))
            })
            .min_by_key(|&(r, at, _)| (r, at));
        let Some((r, at, piece)) = best else {
            return last;
        };
        symbols[at] = piece;
        symbols.remove(at + 1);
        last = Some(r);
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use tokenizers::{Model, models::bpe::BPE};

    use super::*;

    /// `(tokens, vocab, cuts)` of `merges` written as `(left, right)` texts, in rank order.
    fn cuts_of(tokens: &[String], merges: &[(String, String)]) -> (Vocab, Vec<Cut>) {
        let vocab = vocab_of(tokens);
        let cuts = merges
            .iter()
            .map(|(a, b)| Cut {
                piece: vocab[&format!("{a}{b}")],
                at: a.len() as u32,
                left: vocab[a],
                right: vocab[b],
            })
            .collect();
        (vocab, cuts)
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_piece_keeps_only_the_merge_its_own_text_ends_with() {
        let tokens = strings(&["a", "b", "c", "ab", "bc", "abc"]);
        let merges = pairs(&[("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]);
        let (vocab, cuts) = cuts_of(&tokens, &merges);
        // `abc` alone: a b -> ab, then ab c -> abc; a + bc never gets the chance.
        assert_eq!(
            firing(&tokens, &vocab, cuts),
            pairs(&[("a", "b"), ("b", "c"), ("ab", "c")])
        );
    }

    /// A BPE model over `tokens` and `merges`, with no pre-tokenizer.
    fn bpe(tokens: &[String], merges: Vec<(String, String)>) -> BPE {
        BPE::builder()
            .vocab_and_merges(vocab_of(tokens), merges)
            .build()
            .expect("builds")
    }

    #[test]
    fn the_merges_that_fire_tokenize_as_all_of_them() {
        let mut rng = StdRng::seed_from_u64(3);
        let alphabet = ["a", "b", "c", "d"];
        let mut tokens = strings(&alphabet);
        let mut merges: Vec<(String, String)> = Vec::new();
        // Pieces made by joining two random ones, each joinable more than one way.
        while merges.len() < 300 {
            let a = tokens[rng.random_range(0..tokens.len())].clone();
            let b = tokens[rng.random_range(0..tokens.len())].clone();
            let joined = format!("{a}{b}");
            if joined.len() > 8 || merges.iter().any(|m| m.0 == a && m.1 == b) {
                continue;
            }
            if !tokens.contains(&joined) {
                tokens.push(joined);
            }
            merges.push((a, b));
        }
        let (vocab, cuts) = cuts_of(&tokens, &merges);
        let kept = firing(&tokens, &vocab, cuts);
        assert!(
            kept.len() < merges.len(),
            "{} of {}",
            kept.len(),
            merges.len()
        );
        let (all, pruned) = (bpe(&tokens, merges), bpe(&tokens, kept));
        let ids = |model: &BPE, text: &str| -> Vec<u32> {
            let tokens = model.tokenize(text).expect("tokenizes");
            tokens.iter().map(|t| t.id).collect()
        };
        for _ in 0..3000 {
            let text: String = (0..rng.random_range(1..30))
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            assert_eq!(ids(&pruned, &text), ids(&all, &text), "{text:?}");
        }
    }
}
