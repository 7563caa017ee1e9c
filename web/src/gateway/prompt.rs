//! How long a request's prompt is, as far as the gateway can tell without a tokenizer: a `/v1/completions`
//! prompt sent as token ids is counted exactly; anything else is estimated from the body size.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// A `prompt` field read only for its length: `Some(n)` when it is a list of `n` token ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TokenIds(pub(crate) Option<u32>);

impl TokenIds {
    /// The prompt's tokens: exact for token ids, else a quarter of the body's bytes (at least 1).
    pub(crate) fn tokens_or_estimate(self, body_bytes: usize) -> u32 {
        self.0
            .unwrap_or_else(|| u32::try_from(body_bytes / 4).unwrap_or(u32::MAX))
            .max(1)
    }
}

impl<'de> Deserialize<'de> for TokenIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PromptVisitor)
    }
}

struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = TokenIds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TokenIds, A::Error> {
        let mut ids = 0u32;
        let mut all_ids = true;
        while let Some(is_id) = seq.next_element::<IsTokenId>()? {
            all_ids &= is_id.0;
            ids = ids.saturating_add(1);
        }
        Ok(TokenIds(all_ids.then_some(ids)))
    }

    fn visit_str<E>(self, _: &str) -> Result<TokenIds, E> {
        Ok(TokenIds(None))
    }

    fn visit_unit<E>(self) -> Result<TokenIds, E> {
        Ok(TokenIds(None))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TokenIds, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(TokenIds(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<TokenIds, E> {
        Ok(TokenIds(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<TokenIds, E> {
        Ok(TokenIds(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<TokenIds, E> {
        Ok(TokenIds(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<TokenIds, E> {
        Ok(TokenIds(None))
    }
}

/// One list element: true when it is a non-negative integer (a token id).
struct IsTokenId(bool);

impl<'de> Deserialize<'de> for IsTokenId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ElementVisitor)
    }
}

struct ElementVisitor;

impl<'de> Visitor<'de> for ElementVisitor {
    type Value = IsTokenId;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt element")
    }

    fn visit_u64<E>(self, _: u64) -> Result<IsTokenId, E> {
        Ok(IsTokenId(true))
    }

    fn visit_i64<E>(self, v: i64) -> Result<IsTokenId, E> {
        Ok(IsTokenId(v >= 0))
    }

    fn visit_f64<E>(self, _: f64) -> Result<IsTokenId, E> {
        Ok(IsTokenId(false))
    }

    fn visit_bool<E>(self, _: bool) -> Result<IsTokenId, E> {
        Ok(IsTokenId(false))
    }

    fn visit_str<E>(self, _: &str) -> Result<IsTokenId, E> {
        Ok(IsTokenId(false))
    }

    fn visit_unit<E>(self) -> Result<IsTokenId, E> {
        Ok(IsTokenId(false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IsTokenId, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(IsTokenId(false))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<IsTokenId, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(IsTokenId(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(prompt: &str) -> Option<u32> {
        serde_json::from_str::<TokenIds>(prompt).expect("parses").0
    }

    #[test]
    fn token_id_lists_are_counted_and_everything_else_is_not() {
        assert_eq!(count("[1, 2, 30000]"), Some(3));
        assert_eq!(count("[]"), Some(0));
        assert_eq!(count("\"hello world\""), None);
        assert_eq!(count("[\"a\", \"b\"]"), None);
        assert_eq!(count("[[1, 2], [3]]"), None);
        assert_eq!(count("[1, -2]"), None);
        assert_eq!(count("{\"x\": [1]}"), None);
        assert_eq!(count("null"), None);
        assert_eq!(TokenIds(Some(0)).tokens_or_estimate(400), 1);
        assert_eq!(TokenIds(Some(7)).tokens_or_estimate(400), 7);
        assert_eq!(TokenIds(None).tokens_or_estimate(400), 100);
    }
}
