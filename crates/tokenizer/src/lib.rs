//! Text in and out of token ids: HF `tokenizers` built from a GGUF's own vocabulary and
//! merges (or loaded from a `tokenizer.json`), and chat templates rendered by a real Jinja
//! engine. Knows nothing about GPUs.

mod chat;
mod gguf_vocab;

pub use chat::{ChatMessage, ChatTemplate, TEMPLATE_FUEL};
/// Extra template variables (tools, enable_thinking, …).
pub use minijinja::Value as TemplateValue;

use tokenizers::Tokenizer;

pub type Result<T> = std::result::Result<T, TokenizerError>;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("the GGUF has no tokenizer: {0}")]
    Missing(String),
    #[error("unsupported tokenizer model {0:?} (supported: gpt2, gemma4, llama)")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer {0:?} (supported: {list})", list = gguf_vocab::supported_pre())]
    UnsupportedPre(String),
    #[error("invalid tokenizer data: {0}")]
    Invalid(String),
    #[error("tokenizer: {0}")]
    Tokenizers(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error(
        "chat template: rendering needed more than its budget ({fuel} steps, about {} MiB of text); a template that loops without end or builds huge strings is refused",
        fuel * 64 / (1 << 20)
    )]
    TemplateBudget { fuel: u64 },
    #[error(
        "the text is {bytes} bytes, over the {limit}-byte limit for tokenizing (a prompt that long fits no model's context)"
    )]
    TextTooLong { bytes: usize, limit: usize },
    #[error(
        "chat template: the rendered prompt passed {limit} bytes, the longest text the tokenizer takes"
    )]
    RenderedTooLong { limit: usize },
    #[error(transparent)]
    Gguf(#[from] lilypad_gguf::GgufError),
}

impl From<tokenizers::Error> for TokenizerError {
    fn from(e: tokenizers::Error) -> Self {
        TokenizerError::Tokenizers(e.to_string())
    }
}

/// The longest text [`TextTokenizer::encode`] takes: 4 MiB, about a million tokens of code,
/// four times what the longest supported context (262,144 tokens) holds. Tokenizing peaks at
/// about 155 bytes per input byte (8 MiB of code-like text: 1.3 GB), so near 650 MB here.
pub const MAX_TEXT_BYTES: usize = 4 << 20;

/// A tokenizer with the model's special-token conventions.
pub struct TextTokenizer {
    inner: Tokenizer,
    /// Same vocabulary, but special-token text is treated as ordinary text.
    literal: Tokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    /// Tokens that end a generation (EOS and end-of-turn markers).
    pub stop: Vec<u32>,
    pub chat_template: Option<String>,
}

impl TextTokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` metadata.
    pub fn from_gguf(md: &lilypad_gguf::Metadata) -> Result<Self> {
        gguf_vocab::from_metadata(md)
    }

    /// Loads an HF `tokenizer.json`; `bos`/`eos` name the special tokens when known.
    pub fn from_tokenizer_json(
        bytes: &[u8],
        add_bos: bool,
        bos: Option<&str>,
        eos: Option<&str>,
    ) -> Result<Self> {
        // tokenizers 0.23 panics on some malformed JSON inside a component (the decoder reads
        // its object with `expect`), so the text must be JSON before it gets to see it: parsed
        // whole, strings included (skipping them does not check their bytes are UTF-8).
        serde_json::from_slice::<serde_json::Value>(bytes)
            .map_err(|e| TokenizerError::Invalid(format!("tokenizer.json is not JSON: {e}")))?;
        let inner = Tokenizer::from_bytes(bytes)?;
        let id = |s: Option<&str>| s.and_then(|s| inner.token_to_id(s));
        let (bos, eos) = (id(bos), id(eos));
        let stop = eog_tokens(&inner, eos);
        Ok(Self::assemble(inner, bos, eos, add_bos, stop, None))
    }

    fn assemble(
        inner: Tokenizer,
        bos: Option<u32>,
        eos: Option<u32>,
        add_bos: bool,
        stop: Vec<u32>,
        chat_template: Option<String>,
    ) -> Self {
        let mut literal = inner.clone();
        literal.set_encode_special_tokens(true);
        Self {
            inner,
            literal,
            bos,
            eos,
            add_bos,
            stop,
            chat_template,
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token ids for `text`. `parse_special`: special-token text such as `<|im_start|>`
    /// becomes that token (as llama.cpp does for prompts). BOS follows `add_bos`.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        // Checked first: tokenizing holds about 155 bytes per input byte at its peak.
        if text.len() > MAX_TEXT_BYTES {
            return Err(TokenizerError::TextTooLong {
                bytes: text.len(),
                limit: MAX_TEXT_BYTES,
            });
        }
        let tok = if parse_special {
            &self.inner
        } else {
            &self.literal
        };
        let enc = tok.encode(text, false)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if self.add_bos
            && let Some(b) = self.bos
        {
            ids.push(b);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(self.inner.decode(ids, false)?)
    }

    /// The vocabulary entry of one token (byte-level form).
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    pub fn is_stop(&self, id: u32) -> bool {
        self.stop.contains(&id)
    }

    /// Incremental detokenizer for streaming: yields text only once it is valid UTF-8.
    pub fn stream(&self) -> Detokenizer<'_> {
        Detokenizer {
            tok: self,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// The GGUF's chat template, ready to render.
    pub fn template(&self) -> Result<ChatTemplate> {
        let src = self
            .chat_template
            .as_deref()
            .ok_or_else(|| TokenizerError::Template("the model has no chat template".into()))?;
        let tok_text = |id: Option<u32>| {
            id.and_then(|i| self.inner.id_to_token(i))
                .unwrap_or_default()
        };
        ChatTemplate::new(src, &tok_text(self.bos), &tok_text(self.eos))
    }
}

/// Streams text for a growing list of tokens.
pub struct Detokenizer<'a> {
    tok: &'a TextTokenizer,
    ids: Vec<u32>,
    emitted: usize,
}

impl Detokenizer<'_> {
    /// Adds a token; returns the newly completed text (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tok.decode(&self.ids)?;
        // A trailing U+FFFD means a multi-byte character is still incomplete.
        if text.ends_with('\u{fffd}') || text.len() < self.emitted {
            return Ok(String::new());
        }
        let new = text[self.emitted..].to_string();
        self.emitted = text.len();
        Ok(new)
    }
}

/// Names that mark the end of a turn across model families (llama.cpp's list).
const EOG_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
];

fn eog_tokens(tok: &Tokenizer, eos: Option<u32>) -> Vec<u32> {
    let mut v: Vec<u32> = eos.into_iter().collect();
    for name in EOG_NAMES {
        if let Some(id) = tok.token_to_id(name)
            && !v.contains(&id)
        {
            v.push(id);
        }
    }
    v
}
