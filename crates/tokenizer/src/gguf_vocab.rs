//! A HF tokenizer assembled from `tokenizer.ggml.*` metadata, pre-tokenizing the way
//! llama.cpp does for each `tokenizer.ggml.pre` name.

use lilypad_gguf::{Metadata, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use crate::{Result, TextTokenizer, TokenizerError, eog_tokens};

pub(crate) const SUPPORTED_PRE: &[&str] = &[
    "default",
    "gpt2",
    "smollm",
    "llama-bpe",
    "llama3",
    "qwen2",
    "qwen35",
];

const LLAMA3_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp token types.
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;

fn split(re: &str) -> Result<PreTokenizerWrapper> {
    let s = Split::new(
        SplitPattern::Regex(re.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )?;
    Ok(s.into())
}

fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    let byte_level =
        |regex: bool| -> PreTokenizerWrapper { ByteLevel::new(false, false, regex).into() };
    Ok(match pre {
        "default" | "gpt2" => byte_level(true),
        // SmolLM: digits split one by one, then GPT-2's rules.
        "smollm" => Sequence::new(vec![Digits::new(true).into(), byte_level(true)]).into(),
        "llama-bpe" | "llama3" => Sequence::new(vec![split(LLAMA3_RE)?, byte_level(false)]).into(),
        "qwen2" | "qwen35" => Sequence::new(vec![split(QWEN2_RE)?, byte_level(false)]).into(),
        other => return Err(TokenizerError::UnsupportedPre(other.to_string())),
    })
}

pub(crate) fn from_metadata(md: &Metadata) -> Result<TextTokenizer> {
    let model = md
        .str("tokenizer.ggml.model")
        .map_err(|e| TokenizerError::Missing(e.to_string()))?;
    if model != "gpt2" {
        return Err(TokenizerError::UnsupportedModel(model.to_string()));
    }
    let tokens = md.string_array("tokenizer.ggml.tokens")?;
    let merges = md.string_array("tokenizer.ggml.merges")?;
    let types = md
        .i32_array("tokenizer.ggml.token_type")
        .unwrap_or_default();
    if !types.is_empty() && types.len() != tokens.len() {
        return Err(TokenizerError::Invalid(format!(
            "{} token types for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u32))
        .collect();
    let merges = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| TokenizerError::Invalid(format!("merge {m:?} is not two tokens")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(false)
        .build()?;
    let mut tok = Tokenizer::new(bpe);
    let pre = md.str("tokenizer.ggml.pre").unwrap_or("default");
    tok.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    // Control and user-defined tokens are matched whole in text, like llama.cpp's
    // special-token parsing.
    let specials: Vec<AddedToken> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == TOKEN_CONTROL || **t == TOKEN_USER_DEFINED)
        .map(|(i, t)| AddedToken::from(tokens[i], *t == TOKEN_CONTROL))
        .collect();
    tok.add_special_tokens(specials)?;

    let id = |key: &str| {
        md.get(key)
            .and_then(Value::as_u64)
            .map(|v| v as u32)
            .filter(|&v| (v as usize) < tokens.len())
    };
    let bos = id("tokenizer.ggml.bos_token_id");
    let eos = id("tokenizer.ggml.eos_token_id");
    // llama.cpp's default for BPE vocabularies is to add no BOS unless asked.
    let add_bos = md
        .get("tokenizer.ggml.add_bos_token")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut stop = eog_tokens(&tok, eos);
    if let Some(eot) = id("tokenizer.ggml.eot_token_id") {
        if !stop.contains(&eot) {
            stop.push(eot);
        }
    }
    let template = md
        .get("tokenizer.chat_template")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(TextTokenizer::assemble(
        tok, bos, eos, add_bos, stop, template,
    ))
}
