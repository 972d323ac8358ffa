//! `train-native export`: a trained LoRA adapter merged into its base model, as one GGUF that
//! the browser playground, the VS Code view and the CLI load like any other model.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use lilypad_gguf::peft::MergedType;
use lilypad_gguf::{GgmlType, GgufFile, MmapSource};

#[derive(Args)]
pub struct ExportArgs {
    /// The base model (a GGUF file) the adapter was trained on.
    #[arg(long, short)]
    model: PathBuf,
    /// The adapter: a PEFT folder (adapter_config.json, adapter_model.safetensors), as a
    /// training run's checkpoints hold it.
    #[arg(long)]
    adapter: PathBuf,
    /// The merged model to write (a .gguf file).
    #[arg(long)]
    out: PathBuf,
    /// How the weights the adapter changes are stored: `same` keeps each one's base type, so
    /// the merged model is as large as the base.
    #[arg(long, value_enum, default_value_t = MergeQuantize::Same)]
    quantize: MergeQuantize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MergeQuantize {
    Same,
    F32,
    F16,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q4_k")]
    Q4K,
    #[value(name = "q5_k")]
    Q5K,
    #[value(name = "q6_k")]
    Q6K,
}

impl MergeQuantize {
    fn merged_type(self) -> MergedType {
        match self {
            Self::Same => MergedType::Base,
            Self::F32 => MergedType::F32,
            Self::F16 => MergedType::Type(GgmlType::F16),
            Self::Q8_0 => MergedType::Type(GgmlType::Q8_0),
            Self::Q4_0 => MergedType::Type(GgmlType::Q4_0),
            Self::Q4_1 => MergedType::Type(GgmlType::Q4_1),
            Self::Q4K => MergedType::Type(GgmlType::Q4K),
            Self::Q5K => MergedType::Type(GgmlType::Q5K),
            Self::Q6K => MergedType::Type(GgmlType::Q6K),
        }
    }
}

pub fn export_command(args: &ExportArgs) -> Result<()> {
    let started = Instant::now();
    let src = MmapSource::open(&args.model)
        .with_context(|| format!("opening {}", args.model.display()))?;
    let base = GgufFile::read(&src).with_context(|| format!("reading {}", args.model.display()))?;
    let adapter = lilypad_cli::lora::read(&args.adapter, &base)?;
    eprintln!("{}", lilypad_cli::lora::summary(&args.adapter, &adapter));
    let merged = adapter
        .merge_as(&base, &src, args.quantize.merged_type())
        .with_context(|| {
            format!(
                "merging {} into {}",
                args.adapter.display(),
                args.model.display()
            )
        })?;
    // Written beside the target and renamed: a reader never sees half a model.
    crate::workspace::write_atomic(&args.out, &merged.bytes)?;
    let stored_as = match args.quantize {
        MergeQuantize::Same => "in their base types".to_string(),
        q => format!(
            "as {}",
            q.to_possible_value()
                .map_or("?".into(), |v| v.get_name().to_string())
        ),
    };
    eprintln!(
        "merged model: {} ({:.1} MiB, {} adapted weights stored {stored_as}) in {:.1} s; \
         they keep {:.0}% of the adapter's change (relative error {:.2})",
        args.out.display(),
        merged.bytes.len() as f64 / (1 << 20) as f64,
        adapter.tensors.len(),
        started.elapsed().as_secs_f64(),
        100.0 * merged.kept,
        merged.error,
    );
    if merged.kept < 0.5 {
        eprintln!(
            "warning: re-quantizing rounds most of this adapter's change away: the merged \
             model behaves much like the base; --quantize q8_0, f16 or f32 keeps it"
        );
    }
    Ok(())
}
