//! Hugging Face checkpoint folders as models: `config.json` and `*.safetensors` shards are
//! converted on load into an in-memory GGUF (optionally quantized), and the tokenizer comes
//! from `tokenizer.json` with `tokenizer_config.json`'s special tokens and chat template.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use lilypad_gguf::{ByteSource, GgmlType, MmapSource};
use lilypad_tokenizer::TextTokenizer;

/// What a checkpoint's matrices become on load (norms and small tensors keep their type).
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Quantize {
    /// Keep the checkpoint's F32/F16/BF16.
    #[value(name = "none")]
    None,
    #[default]
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_k")]
    Q4K,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
}

impl Quantize {
    fn ggml(self) -> Option<GgmlType> {
        match self {
            Self::None => None,
            Self::Q8_0 => Some(GgmlType::Q8_0),
            Self::Q4K => Some(GgmlType::Q4K),
            Self::Q4_0 => Some(GgmlType::Q4_0),
            Self::Q4_1 => Some(GgmlType::Q4_1),
        }
    }
}

/// A folder holding a `config.json`.
pub fn is_checkpoint(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// The checkpoint as GGUF bytes, laid out as llama.cpp's converter writes them.
pub fn convert(dir: &Path, quantize: Quantize) -> Result<Vec<u8>> {
    let config = read(&dir.join("config.json"))?;
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    if shards.is_empty() {
        bail!(
            "{}: no *.safetensors files next to config.json",
            dir.display()
        );
    }
    shards.sort();
    let maps = shards
        .iter()
        .map(|p| MmapSource::open(p).with_context(|| format!("opening {}", p.display())))
        .collect::<Result<Vec<_>>>()?;
    let bytes: Vec<&[u8]> = maps.iter().filter_map(|m| m.as_slice()).collect();
    lilypad_gguf::hf::to_gguf(&config, &bytes, quantize.ggml())
        .with_context(|| format!("converting {}", dir.display()))
}

/// `tokenizer.json`, with BOS/EOS, `add_bos_token` and the chat template from
/// `tokenizer_config.json` (or `chat_template.jinja`) when present.
pub fn tokenizer(dir: &Path) -> Result<TextTokenizer> {
    let json = read(&dir.join("tokenizer.json"))?;
    let config_path = dir.join("tokenizer_config.json");
    let config: serde_json::Value = if config_path.is_file() {
        serde_json::from_slice(&read(&config_path)?)
            .with_context(|| format!("parsing {}", config_path.display()))?
    } else {
        serde_json::Value::Null
    };
    // Special tokens are written as strings or as `{"content": …}` objects.
    fn token(v: &serde_json::Value) -> Option<&str> {
        v.as_str().or_else(|| v["content"].as_str())
    }
    let mut tok = TextTokenizer::from_tokenizer_json(
        &json,
        config["add_bos_token"].as_bool().unwrap_or(false),
        token(&config["bos_token"]),
        token(&config["eos_token"]),
    )
    .with_context(|| format!("loading {}", dir.join("tokenizer.json").display()))?;
    tok.chat_template = match &config["chat_template"] {
        serde_json::Value::String(s) => Some(s.clone()),
        // Several named templates: the default one.
        serde_json::Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str())
            .map(String::from),
        _ => std::fs::read_to_string(dir.join("chat_template.jinja")).ok(),
    };
    Ok(tok)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A model's bytes: a memory-mapped GGUF, or a checkpoint converted in memory.
pub enum ModelBytes {
    Mapped(MmapSource),
    Converted(Vec<u8>),
}

impl ByteSource for ModelBytes {
    fn len(&self) -> u64 {
        match self {
            Self::Mapped(m) => m.len(),
            Self::Converted(v) => ByteSource::len(v),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> lilypad_gguf::Result<()> {
        match self {
            Self::Mapped(m) => m.read_at(offset, buf),
            Self::Converted(v) => v.read_at(offset, buf),
        }
    }

    fn as_slice(&self) -> Option<&[u8]> {
        match self {
            Self::Mapped(m) => m.as_slice(),
            Self::Converted(v) => Some(v),
        }
    }
}
