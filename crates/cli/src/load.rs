//! Opening a model for the command line and for `train-native`: a GGUF path or URL (downloaded
//! once) or a checkpoint folder, its tokenizer, the GPU, and an optional LoRA adapter.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use lilypad_engine::{AdapterOptions, GpuContext, Model, ModelOptions};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tokenizer::{ChatMessage, TextTokenizer};

use crate::checkpoint::{self, ModelBytes, Quantize};
use crate::{download, lora};

#[derive(Args)]
pub struct ModelArgs {
    /// GGUF path or http(s) URL (downloaded once into the cache), or a Hugging Face
    /// checkpoint folder (config.json, *.safetensors, tokenizer.json) converted on load.
    #[arg(long, short)]
    pub model: String,
    /// What a checkpoint folder's matrices are quantized to on load.
    #[arg(long, value_enum, default_value_t)]
    pub quantize: Quantize,
    /// Expected sha256 of a downloaded model.
    #[arg(long)]
    pub sha256: Option<String>,
    /// A LoRA adapter folder in PEFT's format (adapter_config.json and
    /// adapter_model.safetensors) trained on this model's Hugging Face checkpoint.
    #[arg(long, value_name = "DIR")]
    pub lora: Option<PathBuf>,
    /// Context length (KV cache positions).
    #[arg(long)]
    pub context: Option<u32>,
    /// The KV cache's element type: f16 halves its memory; f32 keeps every bit.
    #[arg(long, default_value = "f16", value_name = "f16|f32")]
    pub kv_cache: lilypad_engine::DType,
    /// Speculative decoding: `lookup[:N]` drafts up to N tokens (default 4) from what
    /// followed the latest earlier occurrence of the last few tokens (edits and quotations of
    /// the context), `mtp` drafts one with the model's multi-token-prediction layer (Qwen3.5).
    /// The output is exactly what plain decoding gives.
    #[arg(long, value_name = "lookup[:N]|mtp")]
    pub draft: Option<lilypad_engine::Draft>,
    /// GPU adapter name substring or index (also LILYPAD_ADAPTER).
    #[arg(long)]
    pub adapter: Option<String>,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Opens a GGUF (a path or a URL, downloaded once) or converts a checkpoint folder.
pub fn open_file(
    spec: &str,
    sha256: Option<&str>,
    quantize: Quantize,
    quiet: bool,
) -> Result<(PathBuf, ModelBytes, GgufFile)> {
    let local = std::path::Path::new(spec);
    if local.is_dir() && !checkpoint::is_checkpoint(local) {
        bail!(
            "{spec} is a folder without config.json: a model is a GGUF file, an http(s) URL, or a \
             Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)"
        );
    }
    let (path, src) = if checkpoint::is_checkpoint(local) {
        if !quiet {
            eprintln!("converting {spec} ({quantize:?})");
        }
        let bytes = checkpoint::convert(local, quantize)?;
        (local.to_path_buf(), ModelBytes::Converted(bytes))
    } else {
        let path = download::resolve_model(spec, &download::default_cache_dir(), sha256, quiet)?;
        let map = MmapSource::open(&path)?;
        (path, ModelBytes::Mapped(map))
    };
    let file = GgufFile::read(&src).with_context(|| format!("reading {}", path.display()))?;
    Ok((path, src, file))
}

/// The model's tokenizer: a checkpoint folder's `tokenizer.json`, or the GGUF's vocabulary.
pub fn open_tokenizer(path: &std::path::Path, file: &GgufFile) -> Result<TextTokenizer> {
    if checkpoint::is_checkpoint(path) {
        checkpoint::tokenizer(path)
    } else {
        Ok(TextTokenizer::from_gguf(&file.metadata)?)
    }
}

pub struct Loaded {
    pub model: Model,
    pub tok: TextTokenizer,
    pub file: GgufFile,
    pub src: ModelBytes,
    /// The LoRA adapter put on the model (`--lora`), in one line.
    pub lora: Option<String>,
}

impl Loaded {
    pub fn open(args: &ModelArgs) -> Result<Self> {
        Self::open_with_progress(args, 1, &mut |_| {})
    }

    /// Like [`Loaded::open`], also reporting GPU-upload progress (the stdio agent streams it).
    pub fn open_with_progress(
        args: &ModelArgs,
        sequences: u32,
        on_progress: &mut dyn FnMut(&lilypad_engine::LoadProgress),
    ) -> Result<Self> {
        let (path, src, file) = open_file(
            &args.model,
            args.sha256.as_deref(),
            args.quantize,
            args.quiet,
        )?;
        let tok = open_tokenizer(&path, &file)?;
        let mut opts = AdapterOptions::from_env();
        if let Some(a) = &args.adapter {
            opts.name = Some(a.clone());
        }
        let ctx: Arc<GpuContext> = pollster::block_on(GpuContext::new(&opts))?;
        if !args.quiet {
            eprintln!("adapter: {}", ctx.adapter);
        }
        let bar = if args.quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(0)
        };
        bar.set_style(
            ProgressStyle::with_template("loading {bar:30} {bytes}/{total_bytes} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let opts = ModelOptions {
            context: args.context,
            sequences,
            kv_cache: args.kv_cache,
            mtp: args.draft == Some(lilypad_engine::Draft::Mtp),
            ..Default::default()
        };
        // The adapter is read and checked against the file before the upload starts.
        let lora = args
            .lora
            .as_deref()
            .map(|dir| lora::read(dir, &file))
            .transpose()?;
        let mut model = pollster::block_on(Model::load(ctx, &file, &src, &opts, &mut |p| {
            bar.set_length(p.total_bytes);
            bar.set_position(p.done_bytes);
            bar.set_message(p.tensor.clone());
            on_progress(&p);
        }))?;
        bar.finish_and_clear();
        model.set_draft(args.draft)?;
        let mut lora_summary = None;
        if let (Some(adapter), Some(dir)) = (&lora, &args.lora) {
            model
                .set_lora(Some(adapter))
                .with_context(|| format!("applying the LoRA adapter {}", dir.display()))?;
            let summary = lora::summary(dir, adapter);
            if !args.quiet {
                eprintln!("{summary}");
            }
            lora_summary = Some(summary);
        }
        Ok(Self {
            model,
            tok,
            file,
            src,
            lora: lora_summary,
        })
    }

    pub fn render_chat(&self, system: Option<&str>, turns: &[ChatMessage]) -> Result<String> {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.extend_from_slice(turns);
        Ok(self
            .tok
            .template()?
            .render(&messages, true, minijinja_undefined())?)
    }
}

/// What a model is called in reports and trajectories: its file or folder name.
pub fn model_name(spec: &str) -> String {
    std::path::Path::new(spec)
        .file_name()
        .map_or(spec.to_string(), |n| n.to_string_lossy().into_owned())
}

fn minijinja_undefined() -> lilypad_tokenizer::TemplateValue {
    lilypad_tokenizer::TemplateValue::UNDEFINED
}
