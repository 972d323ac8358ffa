//! A HF tokenizer assembled from `tokenizer.ggml.*` metadata: byte-level BPE pre-tokenizing
//! the way llama.cpp does for each `tokenizer.ggml.pre` name, or SentencePiece BPE.

use lilypad_gguf::{Metadata, Value};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{
    NormalizerWrapper, Prepend, Replace, Sequence as NormalizerSequence,
};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use crate::{Result, TextTokenizer, TokenizerError, eog_tokens};

/// How one family of `tokenizer.ggml.pre` values splits text before BPE: the pre-tokenizer
/// of the family's HF `tokenizer.json`, which llama.cpp's `llama-vocab.cpp` reproduces.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pre {
    /// GPT-2's one regex.
    Gpt2,
    /// llama.cpp's rules for a BPE vocabulary without a named pre-tokenizer.
    Default,
    /// Digits one by one, then GPT-2's rules (StarCoder, Refact, Command R, SmolLM).
    Starcoder,
    Llama3,
    Qwen2,
    /// Qwen2's regex with combining marks kept inside words.
    Qwen35,
    Falcon,
    DeepseekLlm,
    DeepseekCoder,
}

/// `tokenizer.ggml.pre` values and their families (llama.cpp's names).
const PRE_NAMES: &[(&str, Pre)] = &[
    ("default", Pre::Default),
    ("gpt2", Pre::Gpt2),
    ("gpt-2", Pre::Gpt2),
    ("phi-2", Pre::Gpt2),
    ("mpt", Pre::Gpt2),
    ("olmo", Pre::Gpt2),
    ("starcoder", Pre::Starcoder),
    ("refact", Pre::Starcoder),
    ("command-r", Pre::Starcoder),
    ("smollm", Pre::Starcoder),
    ("codeshell", Pre::Starcoder),
    ("llama3", Pre::Llama3),
    ("llama-v3", Pre::Llama3),
    ("llama-bpe", Pre::Llama3),
    ("falcon3", Pre::Llama3),
    ("qwen2", Pre::Qwen2),
    ("deepseek-r1-qwen", Pre::Qwen2),
    ("stablelm2", Pre::Qwen2),
    ("qwen35", Pre::Qwen35),
    ("falcon", Pre::Falcon),
    ("deepseek-llm", Pre::DeepseekLlm),
    ("deepseek-coder", Pre::DeepseekCoder),
];

/// The accepted `tokenizer.ggml.pre` values, for error messages.
pub(crate) fn supported_pre() -> String {
    let names: Vec<&str> = PRE_NAMES.iter().map(|(n, _)| *n).collect();
    names.join(", ")
}

const LLAMA3_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-2's regex, for families that apply it after other splits.
const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Runs of punctuation and ASCII symbols, split off before GPT-2's rules.
const DEFAULT_PUNCT_RE: &str = r"[\p{P}\$\+<=>\^~\|]+";
/// Falcon also counts the backtick.
const FALCON_PUNCT_RE: &str = r"[\p{P}\$\+<=>\^~\|`]+";
/// Han, and everything from U+0800 through Hangul, as DeepSeek's tokenizers group it.
const DEEPSEEK_CJK_RE: &str = r"[一-龥ࠀ-一가-\x{D7FF}]+";
/// DeepSeek LLM's cased letters (Latin, Greek, Cyrillic, …), listed as its tokenizer lists them.
const DEEPSEEK_LLM_LETTERS_RE: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
const DEEPSEEK_LLM_PUNCT_RE: &str = r"\s?[!-/:-~！-／：-～‘-‟\x{3000}-。]+";

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

/// Each regex splits the pieces the previous ones left (llama.cpp's `unicode_regex_split`),
/// then the pieces are mapped to GPT-2's byte alphabet.
fn regex_chain(res: &[&str]) -> Result<PreTokenizerWrapper> {
    let mut steps = res.iter().map(|re| split(re)).collect::<Result<Vec<_>>>()?;
    steps.push(ByteLevel::new(false, false, false).into());
    Ok(Sequence::new(steps).into())
}

fn pre_tokenizer(pre: Pre) -> Result<PreTokenizerWrapper> {
    let gpt2 = || -> PreTokenizerWrapper { ByteLevel::new(false, false, true).into() };
    Ok(match pre {
        Pre::Gpt2 => gpt2(),
        Pre::Default => regex_chain(&[DEFAULT_PUNCT_RE, GPT2_RE, r"\p{N}+", "[0-9][0-9][0-9]"])?,
        Pre::Starcoder => Sequence::new(vec![Digits::new(true).into(), gpt2()]).into(),
        Pre::Llama3 => regex_chain(&[LLAMA3_RE])?,
        Pre::Qwen2 => regex_chain(&[QWEN2_RE])?,
        Pre::Qwen35 => regex_chain(&[QWEN35_RE])?,
        Pre::Falcon => regex_chain(&[FALCON_PUNCT_RE, GPT2_RE, "[0-9][0-9][0-9]"])?,
        Pre::DeepseekLlm => regex_chain(&[
            "[\r\n]",
            DEEPSEEK_LLM_LETTERS_RE,
            DEEPSEEK_LLM_PUNCT_RE,
            r"\s+$",
            DEEPSEEK_CJK_RE,
            r"\p{N}+",
        ])?,
        Pre::DeepseekCoder => regex_chain(&[
            "[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            DEEPSEEK_CJK_RE,
            r"\p{N}",
        ])?,
    })
}

pub(crate) fn from_metadata(md: &Metadata) -> Result<TextTokenizer> {
    let model = md
        .str("tokenizer.ggml.model")
        .map_err(|e| TokenizerError::Missing(e.to_string()))?;
    let tokens = md.string_array("tokenizer.ggml.tokens")?;
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
    let id = |key: &str| {
        md.get(key)
            .and_then(Value::as_u64)
            .map(|v| v as u32)
            .filter(|&v| (v as usize) < tokens.len())
    };
    let (mut tok, default_add_bos) = match model {
        "gpt2" => byte_level_bpe(md, vocab)?,
        "gemma4" => (gemma4_bpe(md, vocab)?, true),
        "llama" => {
            let unk = id("tokenizer.ggml.unknown_token_id").map(|i| tokens[i as usize]);
            (sentencepiece_bpe(md, &tokens, vocab, unk)?, true)
        }
        other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
    };
    // Control and user-defined tokens are matched whole in text, like llama.cpp's
    // special-token parsing.
    let specials: Vec<AddedToken> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == TOKEN_CONTROL || **t == TOKEN_USER_DEFINED)
        .map(|(i, t)| AddedToken::from(tokens[i], *t == TOKEN_CONTROL))
        .collect();
    tok.add_special_tokens(specials)?;

    let bos = id("tokenizer.ggml.bos_token_id");
    let eos = id("tokenizer.ggml.eos_token_id");
    // llama.cpp always adds BOS for Gemma 4, whatever the GGUF says.
    let add_bos = model == "gemma4"
        || md
            .get("tokenizer.ggml.add_bos_token")
            .and_then(Value::as_bool)
            .unwrap_or(default_add_bos);
    let mut stop = eog_tokens(&tok, eos);
    if let Some(eot) = id("tokenizer.ggml.eot_token_id")
        && !stop.contains(&eot)
    {
        stop.push(eot);
    }
    let template = md
        .get("tokenizer.chat_template")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(TextTokenizer::assemble(
        tok, bos, eos, add_bos, stop, template,
    ))
}

/// GPT-2-style byte-level BPE (`tokenizer.ggml.model` "gpt2"), split per
/// `tokenizer.ggml.pre`. Also returns llama.cpp's default for adding BOS.
fn byte_level_bpe(md: &Metadata, vocab: Vocab) -> Result<(Tokenizer, bool)> {
    let merges = read_merges(md)?;
    let pre_name = md.str("tokenizer.ggml.pre").unwrap_or("default");
    let pre = PRE_NAMES
        .iter()
        .find(|(n, _)| *n == pre_name)
        .map(|(_, p)| *p)
        .ok_or_else(|| TokenizerError::UnsupportedPre(pre_name.to_string()))?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        // Llama 3 takes a word found whole in the vocabulary as one token, merges or not.
        .ignore_merges(pre == Pre::Llama3)
        .build()?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    // llama.cpp adds BOS by default for Llama 3 and for no other BPE vocabulary.
    Ok((tok, pre == Pre::Llama3))
}

/// `tokenizer.ggml.merges` as token pairs.
fn read_merges(md: &Metadata) -> Result<Vec<(String, String)>> {
    md.string_array("tokenizer.ggml.merges")?
        .iter()
        .map(|m| {
            // As llama.cpp reads them: split at the first space after the first character.
            let first = m.chars().next().map_or(0, char::len_utf8);
            m[first..]
                .find(' ')
                .map(|i| (m[..first + i].to_string(), m[first + i + 1..].to_string()))
                .ok_or_else(|| TokenizerError::Invalid(format!("merge {m:?} is not two tokens")))
        })
        .collect()
}

/// Gemma 4's BPE (`tokenizer.ggml.model` "gemma4"): merges over raw UTF-8 with spaces as
/// `▁`, each line and each run of newlines merged on its own, `<0xXX>` byte fallback.
fn gemma4_bpe(md: &Metadata, vocab: Vocab) -> Result<Tokenizer> {
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, read_merges(md)?)
        .byte_fallback(true)
        .build()?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_normalizer(Some(Replace::new(" ", "▁")?))?;
    tok.with_pre_tokenizer(Some(split(r"[^\n]+|[\n]+")?));
    tok.with_decoder(Some(sentencepiece_decoder(false)?));
    Ok(tok)
}

/// SentencePiece BPE (`tokenizer.ggml.model` "llama"): spaces become `▁`, a `▁` starts the
/// text, pieces merge best score first, and characters outside the vocabulary fall back to
/// `<0xXX>` byte tokens.
fn sentencepiece_bpe(
    md: &Metadata,
    tokens: &[&str],
    vocab: Vocab,
    unk: Option<&str>,
) -> Result<Tokenizer> {
    let scores = md.f32_array("tokenizer.ggml.scores")?;
    if scores.len() != tokens.len() {
        return Err(TokenizerError::Invalid(format!(
            "{} token scores for {} tokens",
            scores.len(),
            tokens.len()
        )));
    }
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab.clone(), merges_from_scores(tokens, &scores, &vocab))
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = unk {
        bpe = bpe.unk_token(unk.to_string());
    }
    let mut tok = Tokenizer::new(bpe.build()?);
    let add_space_prefix = md
        .get("tokenizer.ggml.add_space_prefix")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let escape_spaces: NormalizerWrapper = Replace::new(" ", "▁")?.into();
    let normalizer = if add_space_prefix {
        NormalizerSequence::new(vec![Prepend::new("▁".into()).into(), escape_spaces]).into()
    } else {
        escape_spaces
    };
    tok.with_normalizer(Some(normalizer))?;
    tok.with_decoder(Some(sentencepiece_decoder(add_space_prefix)?));
    Ok(tok)
}

/// `▁` back to spaces and `<0xXX>` tokens back to bytes; `strip_prefix` drops the space the
/// encoder put at the start.
fn sentencepiece_decoder(strip_prefix: bool) -> Result<DecoderSequence> {
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new("▁", " ")?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if strip_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(decoders))
}

/// SentencePiece keeps scores, not merges: every split of a token into two vocabulary
/// pieces is a merge, ranked by the token's score (best first, ties in vocabulary order),
/// as HF's `SentencePieceExtractor` derives them.
fn merges_from_scores(tokens: &[&str], scores: &[f32], vocab: &Vocab) -> Vec<(String, String)> {
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut merges = Vec::new();
    for t in order {
        let text = tokens[t];
        let mut splits: Vec<(u32, u32, &str, &str)> = text
            .char_indices()
            .skip(1)
            .filter_map(|(i, _)| {
                let (l, r) = text.split_at(i);
                Some((*vocab.get(l)?, *vocab.get(r)?, l, r))
            })
            .collect();
        splits.sort_unstable();
        merges.extend(
            splits
                .into_iter()
                .map(|(_, _, l, r)| (l.to_string(), r.to_string())),
        );
    }
    merges
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Value {
        Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect())
    }

    /// A SentencePiece vocabulary: `▁ab` is reachable as `▁a`+`b` and as `▁`+`ab`.
    fn spm(scores: &[f32]) -> Metadata {
        let mut md = Metadata::new();
        md.insert("tokenizer.ggml.model", Value::String("llama".into()));
        md.insert(
            "tokenizer.ggml.tokens",
            strings(&["<unk>", "▁", "a", "b", "ab", "▁a", "▁ab"]),
        );
        md.insert(
            "tokenizer.ggml.scores",
            Value::Array(scores.iter().map(|&s| Value::F32(s)).collect()),
        );
        md
    }

    #[test]
    fn sentencepiece_merges_follow_scores() {
        let tok = from_metadata(&spm(&[0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0])).unwrap();
        // llama.cpp adds BOS for SentencePiece by default (this vocabulary has none to add).
        assert!(tok.add_bos && tok.bos.is_none());
        assert_eq!(tok.encode("ab ab", false).unwrap(), [6, 6]);
        assert_eq!(tok.decode(&[6, 6]).unwrap(), "ab ab");
        // "a b": no `▁b` token, so `▁` stays alone before `b`.
        assert_eq!(tok.encode("a b", false).unwrap(), [5, 1, 3]);
    }

    #[test]
    fn merges_rank_by_score_then_by_piece_ids() {
        let tokens = ["▁", "a", "b", "ab", "▁a", "▁ab"];
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges = merges_from_scores(&tokens, &[0.0, 0.0, 0.0, -1.0, -3.0, -2.0], &vocab);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            merges,
            [
                pair("a", "b"),
                pair("▁", "ab"),
                pair("▁a", "b"),
                pair("▁", "a")
            ]
        );
    }

    #[test]
    fn malformed_vocabularies_are_errors() {
        let err = |md: &Metadata| from_metadata(md).err().map(|e| e.to_string());
        assert!(
            err(&spm(&[0.0]))
                .unwrap()
                .contains("1 token scores for 7 tokens")
        );

        let mut md = Metadata::new();
        md.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
        md.insert("tokenizer.ggml.tokens", strings(&["a", "b", "ab"]));
        md.insert("tokenizer.ggml.merges", strings(&["ab"]));
        assert!(err(&md).unwrap().contains("is not two tokens"));
        md.insert("tokenizer.ggml.merges", strings(&["a b"]));
        md.insert("tokenizer.ggml.pre", Value::String("no-such-pre".into()));
        assert!(matches!(
            from_metadata(&md),
            Err(TokenizerError::UnsupportedPre(p)) if p == "no-such-pre"
        ));
        md.insert("tokenizer.ggml.model", Value::String("bert".into()));
        assert!(matches!(
            from_metadata(&md),
            Err(TokenizerError::UnsupportedModel(m)) if m == "bert"
        ));
    }
}
