//! Special tokens matched whole in text before the model sees it, as llama.cpp's
//! `tokenizer_st_partition` does: the longest token text first, each taking its leftmost
//! non-overlapping occurrences in the text the longer ones left.
//!
//! A byte trie finds every occurrence in one pass, O(text length × longest special text); the
//! occurrences are then accepted in priority order where they do not overlap an accepted one.

/// A piece of partitioned text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fragment<'a> {
    /// Text for the model.
    Text(&'a str),
    /// A special token written in the text.
    Token(u32),
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// (byte, node index), sorted by byte.
    children: Vec<(u8, u32)>,
    /// The priority of the token whose text ends here.
    priority: Option<u32>,
}

/// The special tokens of a vocabulary, ready to split text.
#[derive(Debug, Clone)]
pub(super) struct SpecialTokens {
    nodes: Vec<Node>,
    /// (token id, text length in bytes) by priority: longest text first, then lowest id.
    by_priority: Vec<(u32, usize)>,
}

impl SpecialTokens {
    /// Indexes `(id, text)` pairs; empty texts are ignored.
    pub(super) fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a str)>) -> Self {
        let mut list: Vec<(u32, &str)> = tokens
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .collect();
        list.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut index = Self {
            nodes: vec![Node::default()],
            by_priority: Vec::with_capacity(list.len()),
        };
        for (priority, &(id, text)) in list.iter().enumerate() {
            index.insert(text.as_bytes(), priority as u32);
            index.by_priority.push((id, text.len()));
        }
        index
    }

    /// The ids of the special tokens, longest text first.
    pub(super) fn ids(&self) -> Vec<u32> {
        self.by_priority.iter().map(|&(id, _)| id).collect()
    }

    fn insert(&mut self, text: &[u8], priority: u32) {
        let mut node = 0usize;
        for &byte in text {
            node = match self.child(node, byte) {
                Some(next) => next,
                None => {
                    let next = self.nodes.len();
                    self.nodes.push(Node::default());
                    let children = &mut self.nodes[node].children;
                    let at = children.partition_point(|&(b, _)| b < byte);
                    children.insert(at, (byte, next as u32));
                    next
                }
            };
        }
        self.nodes[node].priority.get_or_insert(priority);
    }

    fn child(&self, node: usize, byte: u8) -> Option<usize> {
        let children = &self.nodes[node].children;
        children
            .binary_search_by_key(&byte, |&(b, _)| b)
            .ok()
            .map(|i| children[i].1 as usize)
    }

    /// Splits `text` into special tokens and the text between them (never empty).
    pub(super) fn split<'a>(&self, text: &'a str) -> Vec<Fragment<'a>> {
        if self.by_priority.is_empty() || text.is_empty() {
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![Fragment::Text(text)]
            };
        }
        let mut out = Vec::new();
        let mut pos = 0;
        for (start, end, id) in self.accepted_matches(text) {
            if start > pos {
                out.push(Fragment::Text(&text[pos..start]));
            }
            out.push(Fragment::Token(id));
            pos = end;
        }
        if pos < text.len() {
            out.push(Fragment::Text(&text[pos..]));
        }
        out
    }

    /// (start, end, id) of the occurrences llama.cpp keeps, in text order. Starts and ends are
    /// character boundaries: a match is a whole UTF-8 string inside a UTF-8 string.
    fn accepted_matches(&self, text: &str) -> Vec<(usize, usize, u32)> {
        let mut found = self.all_matches(text);
        found.sort_unstable();
        let mut taken = vec![false; text.len()];
        let mut accepted = Vec::new();
        for (priority, start) in found {
            let (id, len) = self.by_priority[priority as usize];
            let span = start..start + len;
            if taken[span.clone()].iter().any(|&t| t) {
                continue;
            }
            taken[span.clone()].fill(true);
            accepted.push((span.start, span.end, id));
        }
        accepted.sort_unstable();
        accepted
    }

    /// (priority, start) of every occurrence of every special text.
    fn all_matches(&self, text: &str) -> Vec<(u32, usize)> {
        let bytes = text.as_bytes();
        let mut found = Vec::new();
        for start in (0..bytes.len()).filter(|&i| text.is_char_boundary(i)) {
            let mut node = 0;
            for &byte in &bytes[start..] {
                let Some(next) = self.child(node, byte) else {
                    break;
                };
                node = next;
                if let Some(priority) = self.nodes[node].priority {
                    found.push((priority, start));
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::{Fragment::*, *};

    fn split<'a>(specials: &[(u32, &str)], text: &'a str) -> Vec<Fragment<'a>> {
        SpecialTokens::new(specials.iter().copied()).split(text)
    }

    #[test]
    fn text_without_specials_is_one_fragment() {
        assert_eq!(split(&[(5, "<bos>")], "plain text"), [Text("plain text")]);
        assert_eq!(split(&[], "plain"), [Text("plain")]);
        assert!(split(&[(5, "<bos>")], "").is_empty());
    }

    #[test]
    fn specials_split_text_and_stand_alone() {
        let specials = [(1, "<start_of_turn>"), (2, "<end_of_turn>"), (3, "\n")];
        assert_eq!(
            split(&specials, "<start_of_turn>user\nHi<end_of_turn>\n"),
            [
                Token(1),
                Text("user"),
                Token(3),
                Text("Hi"),
                Token(2),
                Token(3)
            ]
        );
        assert_eq!(
            split(&specials, "<end_of_turn><end_of_turn>"),
            [Token(2), Token(2)]
        );
    }

    #[test]
    fn runs_take_the_longest_token_first_from_the_left() {
        let specials = [(2, "  "), (3, "   "), (4, "    ")];
        // Nine spaces: 4 + 4, then the single space left is text.
        assert_eq!(
            split(&specials, "a         b"),
            [Text("a"), Token(4), Token(4), Text(" b")]
        );
        assert_eq!(
            split(&specials, "a     b"),
            [Text("a"), Token(4), Text(" b")]
        );
        assert_eq!(
            split(&specials, "a      b"),
            [Text("a"), Token(4), Token(2), Text("b")]
        );
    }

    #[test]
    fn longer_tokens_win_over_earlier_shorter_ones() {
        // llama.cpp matches "bcd" (longest) before "ab", though "ab" starts further left; a
        // leftmost-longest matcher would take "ab" and leave "cd".
        let specials = [(1, "ab"), (2, "bcd")];
        assert_eq!(split(&specials, "abcd"), [Text("a"), Token(2)]);
        assert_eq!(split(&specials, "ab cd"), [Token(1), Text(" cd")]);
    }

    #[test]
    fn equal_lengths_go_to_the_lower_id() {
        let specials = [(9, "bc"), (4, "ab")];
        assert_eq!(split(&specials, "abc"), [Token(4), Text("c")]);
    }

    #[test]
    fn multibyte_text_splits_on_character_boundaries() {
        let specials = [(7, "▁<PRE>"), (8, "é")];
        assert_eq!(
            split(&specials, "café▁<PRE>naïve"),
            [Text("caf"), Token(8), Token(7), Text("naïve")]
        );
    }
}
