//! Chat templates: the model's own Jinja template rendered by minijinja, configured like
//! the Python Jinja2 environment that HF transformers and llama.cpp's templates assume
//! (trim_blocks, lstrip_blocks, Python string methods, `raise_exception`).

use minijinja::{Environment, Error, ErrorKind, Value, context};
use serde::{Deserialize, Serialize};

use crate::{Result, TokenizerError};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A render's budget in minijinja's fuel: one per instruction, one per 64 bytes of data made
/// or processed (so at most about 1 GiB made in all, and a few seconds). Real templates
/// rendering a 1 MiB agent conversation use at most a fifth of it (Qwen3.5: under 1 %;
/// tests/template_budget.rs); nested `range(100000)` loops or a string doubled forty times
/// run out of it instead of out of time or memory. The output itself stops at [`crate::MAX_TEXT_BYTES`].
pub const TEMPLATE_FUEL: u64 = 16_000_000;

pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn raise_exception(msg: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

impl ChatTemplate {
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        // Templates come from model files: a budget bounds a render's time and memory.
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| TokenizerError::Template(format!("{e:#}")))?;
        Ok(Self {
            env,
            bos: bos.into(),
            eos: eos.into(),
        })
    }

    /// The prompt for `messages`, ending with the assistant's turn opener when
    /// `add_generation_prompt`. `extra` adds template variables (tools, enable_thinking, …).
    /// Messages are any serialisable form of OpenAI-style messages (tool calls included).
    pub fn render<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
        extra: Value,
    ) -> Result<String> {
        self.render_counting_fuel(messages, add_generation_prompt, extra)
            .map(|(text, _)| text)
    }

    /// [`ChatTemplate::render`], also returning the fuel the render used out of
    /// [`TEMPLATE_FUEL`].
    pub fn render_counting_fuel<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
        extra: Value,
    ) -> Result<(String, u64)> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        let ctx = context! {
            messages => Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos,
            eos_token => &self.eos,
            ..extra
        };
        let mut out = CappedOutput {
            text: Vec::new(),
            limit: crate::MAX_TEXT_BYTES,
            over: false,
        };
        let rendered = tmpl.render_captured_to(ctx, &mut out);
        if out.over {
            return Err(TokenizerError::RenderedTooLong { limit: out.limit });
        }
        let captured = rendered.map_err(|e| match e.kind() {
            ErrorKind::OutOfFuel => TokenizerError::TemplateBudget {
                fuel: TEMPLATE_FUEL,
            },
            _ => TokenizerError::Template(format!("{e:#}")),
        })?;
        let fuel = captured.state().fuel_levels().map_or(0, |(used, _)| used);
        let text = String::from_utf8(out.text)
            .map_err(|e| TokenizerError::Template(format!("rendered invalid UTF-8: {e}")))?;
        Ok((text, fuel))
    }
}

/// Collects a render's output, refusing it past `limit` bytes: longer text could not be
/// tokenized anyway, and this stops a template that writes without end early.
struct CappedOutput {
    text: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.text.len() + bytes.len() > self.limit {
            self.over = true;
            return Err(std::io::Error::other("the rendered prompt is too long"));
        }
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_default_system() {
        let t = ChatTemplate::new(CHATML, "", "").unwrap();
        let out = t
            .render(&[ChatMessage::new("user", "Hi")], true, Value::UNDEFINED)
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_methods_and_raise_exception() {
        let t = ChatTemplate::new("{{ messages[0].content.strip().upper() }}{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}", "", "").unwrap();
        assert_eq!(
            t.render(
                &[ChatMessage::new("user", "  hi ")],
                false,
                Value::UNDEFINED
            )
            .unwrap(),
            "HI"
        );
        let err = t
            .render(
                &[ChatMessage::new("user", "a"), ChatMessage::new("user", "b")],
                false,
                Value::UNDEFINED,
            )
            .unwrap_err();
        assert!(err.to_string().contains("one message only"), "{err}");
    }

    #[test]
    fn trim_and_lstrip_blocks_like_jinja2() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\n    {{ m.content }}\n{% endfor %}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(
                &[ChatMessage::new("user", "a"), ChatMessage::new("user", "b")],
                false,
                Value::UNDEFINED
            )
            .unwrap(),
            "    a\n    b\n"
        );
    }

    #[test]
    fn broken_template_is_an_error() {
        assert!(matches!(
            ChatTemplate::new("{% for %}", "", ""),
            Err(TokenizerError::Template(_))
        ));
    }
}
