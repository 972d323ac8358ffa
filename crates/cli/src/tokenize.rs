//! `lilypad tokenize`: text to token ids and back with a GGUF's own tokenizer, on the CPU
//! (a vocabulary-only GGUF is enough). Flags follow llama.cpp's `llama-tokenize`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

#[derive(Args)]
pub struct TokenizeArgs {
    /// GGUF path or http(s) URL; only its tokenizer metadata is read.
    #[arg(long, short)]
    model: String,
    /// The text (with --decode: token ids separated by spaces or commas).
    #[arg(long, short, conflicts_with = "file", required_unless_present = "file")]
    text: Option<String>,
    /// Read the text (or, with --decode, the ids) from this file.
    #[arg(long, short)]
    file: Option<PathBuf>,
    /// Turn token ids back into text.
    #[arg(long)]
    decode: bool,
    /// JSON output: the ids with each token's vocabulary entry and text.
    #[arg(long)]
    json: bool,
    /// Do not add the BOS token even when the model asks for it.
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text such as `<|im_start|>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
}

#[derive(serde::Serialize)]
struct Token {
    id: u32,
    /// The vocabulary entry (byte-level form for GPT-2-style vocabularies).
    token: String,
    /// What the token alone decodes to (U+FFFD for part of a multi-byte character).
    text: String,
}

#[derive(serde::Serialize)]
struct Report {
    ids: Vec<u32>,
    tokens: Vec<Token>,
    text: String,
}

pub fn run(args: &TokenizeArgs) -> Result<()> {
    let input = match (&args.text, &args.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) => bail!("give --text or --file"),
    };
    let local = std::path::Path::new(&args.model);
    let mut tok = if lilypad_cli::checkpoint::is_checkpoint(local) {
        lilypad_cli::checkpoint::tokenizer(local)?
    } else {
        let (path, _src, file) = lilypad_cli::open_file(
            &args.model,
            None,
            lilypad_cli::checkpoint::Quantize::None,
            false,
        )?;
        lilypad_cli::open_tokenizer(&path, &file)?
    };
    if args.no_bos {
        tok.add_bos = false;
    }
    let (ids, text) = if args.decode {
        let ids = parse_ids(&input, tok.vocab_size())?;
        let text = tok.decode(&ids)?;
        (ids, text)
    } else {
        (tok.encode(&input, !args.no_parse_special)?, input)
    };
    if args.json {
        let tokens = ids
            .iter()
            .map(|&id| Token {
                id,
                token: tok.token(id).unwrap_or_default(),
                text: tok.decode(&[id]).unwrap_or_default(),
            })
            .collect();
        let report = Report { ids, tokens, text };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.decode {
        println!("{text}");
    } else {
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("{}", ids.join(" "));
    }
    Ok(())
}

/// Ids separated by whitespace and/or commas; brackets are allowed, so `llama-tokenize
/// --ids` output (`[1, 2, 3]`) reads back as-is.
fn parse_ids(s: &str, vocab_size: usize) -> Result<Vec<u32>> {
    s.split(|c: char| c.is_whitespace() || matches!(c, ',' | '[' | ']'))
        .filter(|t| !t.is_empty())
        .map(|t| {
            let id: u32 = t
                .parse()
                .with_context(|| format!("{t:?} is not a token id"))?;
            if id as usize >= vocab_size {
                bail!("token id {id} is outside the vocabulary (size {vocab_size})");
            }
            Ok(id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_ids;

    #[test]
    fn ids_parse_from_spaces_commas_and_brackets() {
        assert_eq!(parse_ids("[1, 2,3]\n 4", 10).unwrap(), vec![1, 2, 3, 4]);
        assert!(parse_ids("", 10).unwrap().is_empty());
        assert!(parse_ids("1 x", 10).is_err());
        assert!(parse_ids("-1", 10).is_err());
        assert!(parse_ids("10", 10).is_err());
    }
}
