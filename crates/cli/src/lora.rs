//! `--lora DIR`: a PEFT adapter folder read for a loaded GGUF.

use std::path::Path;

use anyhow::{Context, Result, bail};
use lilypad_gguf::peft::LoraAdapter;
use lilypad_gguf::{ByteSource, GgufFile, MmapSource};

/// Reads `dir/adapter_config.json` and `dir/adapter_model.safetensors` and maps them onto
/// `base`'s tensors.
pub fn read(dir: &Path, base: &GgufFile) -> Result<LoraAdapter> {
    if !dir.is_dir() {
        bail!(
            "{}: not a folder (a LoRA adapter is a folder with adapter_config.json and \
             adapter_model.safetensors)",
            dir.display()
        );
    }
    let config_path = dir.join("adapter_config.json");
    let config = std::fs::read(&config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    let weights_path = dir.join("adapter_model.safetensors");
    if !weights_path.is_file() {
        bail!(
            "{}: no adapter_model.safetensors (adapters saved as .bin are not read; \
             save with safe_serialization=True)",
            dir.display()
        );
    }
    let weights = MmapSource::open(&weights_path)
        .with_context(|| format!("opening {}", weights_path.display()))?;
    let bytes = weights
        .as_slice()
        .with_context(|| format!("mapping {}", weights_path.display()))?;
    LoraAdapter::from_peft(&config, bytes, base)
        .with_context(|| format!("reading the LoRA adapter {}", dir.display()))
}

/// One line for the terminal.
pub fn summary(dir: &Path, a: &LoraAdapter) -> String {
    format!(
        "lora: {} (rank {}, alpha {}, scale {}, {} linears{})",
        dir.display(),
        a.rank,
        a.alpha,
        a.scale,
        a.tensors.len(),
        a.base_model
            .as_deref()
            .map(|b| format!(", trained on {b}"))
            .unwrap_or_default()
    )
}
