//! Chat templates: a model's Jinja `tokenizer.chat_template`, compiled once with minijinja and
//! rendered over [`ChatMessage`]s the way Hugging Face `apply_chat_template` does (trimmed blocks,
//! Python string methods, `raise_exception`), with ChatML as the fallback.

use minijinja::value::{Serde, Value};
use minijinja::{Environment, ErrorKind, context};
use serde::{Deserialize, Serialize};

use crate::{
    error::{Error, Result},
    tokenizer::Tokenizer,
};

/// The name the one template is stored under in its environment.
const TEMPLATE_NAME: &str = "chat_template";

/// ChatML, for models whose files carry no chat template.
const CHATML: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user`, `assistant`, or whatever else the template knows.
    pub role: String,
    /// What they said.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template, ready to render conversations into prompt text.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl ChatTemplate {
    /// Compiles the Jinja `source` (a model's `tokenizer.chat_template`).
    ///
    /// # Errors
    /// [`Error::ChatTemplate`] when `source` does not parse.
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_syntax(hf_syntax()?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(template_error)?;
        Ok(Self { env })
    }

    /// The ChatML template, for models that carry none.
    pub fn fallback_chatml() -> Self {
        // The source is a constant covered by tests; failing here is a bug, not bad input.
        Self::new(CHATML).expect("the built-in ChatML template compiles")
    }

    /// Renders `messages` into prompt text, ending with the assistant's turn opener when
    /// `add_generation_prompt` is set.
    ///
    /// # Errors
    /// [`Error::ChatTemplate`] when rendering fails, including a template's own
    /// `raise_exception` (its message is kept).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(template_error)?;
        let ctx = context! {
            messages => Value::from(Serde(messages)),
            add_generation_prompt,
            bos_token,
            eos_token,
            // Hugging Face passes these as None when a request has no tools or documents.
            tools => Value::from(()),
            documents => Value::from(()),
        };
        template.render(ctx).map_err(template_error)
    }

    /// Renders `messages` for `tokenizer`'s model: its BOS and EOS texts fill `bos_token` and
    /// `eos_token`, and a BOS the template writes first is dropped when the tokenizer adds one
    /// itself, as llama.cpp's chat code does, so that the prompt does not start with two.
    ///
    /// # Errors
    /// As [`ChatTemplate::render`].
    pub fn render_prompt(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tokenizer: &Tokenizer,
    ) -> Result<String> {
        let text = |id: Option<u32>| {
            id.and_then(|id| tokenizer.token_text(id))
                .unwrap_or_default()
        };
        let (bos, eos) = (text(tokenizer.bos()), text(tokenizer.eos()));
        let rendered = self.render(messages, add_generation_prompt, &bos, &eos)?;
        Ok(match rendered.strip_prefix(bos.as_str()) {
            Some(rest) if tokenizer.adds_bos() && !bos.is_empty() => rest.to_string(),
            _ => rendered,
        })
    }
}

/// The whitespace rules Hugging Face renders chat templates with.
fn hf_syntax() -> Result<minijinja::syntax::SyntaxConfig> {
    minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(template_error)
}

/// The `raise_exception(message)` templates call to refuse a conversation.
fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// Wraps a minijinja error, keeping its causes.
fn template_error(err: minijinja::Error) -> Error {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    Error::ChatTemplate(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2's `tokenizer.chat_template`, verbatim.
    const SMOLLM2: &str = r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// Gemma 3's `tokenizer.chat_template` (Hugging Face `google/gemma-3-*-it`), verbatim.
    const GEMMA3: &str = include_str!("../tests/data/gemma-3-chat-template.jinja");

    fn render(
        source: &str,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        ChatTemplate::new(source)?.render(messages, add_generation_prompt, "<s>", "</s>")
    }

    #[test]
    fn smollm2_adds_default_system_and_generation_prompt() {
        let got = render(SMOLLM2, &[ChatMessage::new("user", "Hi")], true).unwrap();
        let want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                    <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
    }

    #[test]
    fn smollm2_keeps_given_system_and_omits_generation_prompt() {
        let messages = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello!"),
        ];
        let got = render(SMOLLM2, &messages, false).unwrap();
        let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
                    <|im_start|>assistant\nHello!<|im_end|>\n";
        assert_eq!(got, want);
    }

    #[test]
    fn gemma3_folds_the_system_turn_into_the_first_user_turn() {
        let messages = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "  Hi \n"),
        ];
        let got = ChatTemplate::new(GEMMA3)
            .unwrap()
            .render(&messages, true, "<bos>", "<eos>")
            .unwrap();
        assert_eq!(
            got,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn gemma3_names_the_assistant_model_and_loops_over_turns() {
        let messages = [
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello!"),
            ChatMessage::new("user", "Bye"),
        ];
        let got = ChatTemplate::new(GEMMA3)
            .unwrap()
            .render(&messages, false, "<bos>", "<eos>")
            .unwrap();
        let want = "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n\
                    <start_of_turn>user\nBye<end_of_turn>\n";
        assert_eq!(got, want);
    }

    #[test]
    fn gemma3_refuses_turns_out_of_order() {
        let messages = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
        let err = render(GEMMA3, &messages, true).unwrap_err();
        assert!(
            err.to_string()
                .contains("Conversation roles must alternate user/assistant/user/assistant/..."),
            "{err}"
        );
        let err = render(GEMMA3, &[ChatMessage::new("assistant", "a")], true).unwrap_err();
        assert!(matches!(err, Error::ChatTemplate(_)), "{err:?}");
    }

    #[test]
    fn fallback_is_chatml() {
        let got = ChatTemplate::fallback_chatml()
            .render(&[ChatMessage::new("user", "Hi")], true, "", "")
            .unwrap();
        assert_eq!(
            got,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_fails_with_its_message() {
        let source = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with a user turn') }}{% endif %}ok";
        let err = render(source, &[ChatMessage::new("assistant", "x")], true).unwrap_err();
        assert!(matches!(err, Error::ChatTemplate(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("Conversation must start with a user turn"),
            "{err}"
        );
        assert_eq!(
            render(source, &[ChatMessage::new("user", "x")], true).unwrap(),
            "ok"
        );
    }

    #[test]
    fn python_string_methods_work() {
        let source = "{% for message in messages %}[{{ message['content'].strip() }}]\
                      {% if message['role'].startswith('us') %}U{% endif %}{% endfor %}";
        let got = render(source, &[ChatMessage::new("user", "  padded \n")], false).unwrap();
        assert_eq!(got, "[padded]U");
    }

    #[test]
    fn special_tokens_and_blocks_render_like_transformers() {
        let source = "{{ bos_token }}\n{% for message in messages %}\n  {{ message.content }}{{ eos_token }}\n{% endfor %}\n{% if tools %}T{% endif %}";
        let got = render(
            source,
            &[ChatMessage::new("user", "a"), ChatMessage::new("user", "b")],
            false,
        )
        .unwrap();
        assert_eq!(got, "<s>\n  a</s>\n  b</s>\n");
    }

    #[test]
    fn bad_source_is_a_template_error() {
        let err = ChatTemplate::new("{% for message in messages %}").unwrap_err();
        assert!(matches!(err, Error::ChatTemplate(_)), "{err:?}");
    }

    #[test]
    fn messages_round_trip_through_serde() {
        let m: ChatMessage = serde_json::from_str(r#"{"role":"user","content":"Hi"}"#).unwrap();
        assert_eq!(m, ChatMessage::new("user", "Hi"));
    }
}
