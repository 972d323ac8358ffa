//! `lilypad synth`: a Qwen3.5 GGUF with FrogNano-4B's exact shapes and random quantized
//! weights, so speed and memory can be measured without trained weights. The weights are
//! random blocks scaled so activations stay finite through every layer; the tokenizer is a
//! byte-level vocabulary of the real size with no merges (each byte one token) and the
//! ChatML special tokens, enough for `generate`, `bench` and `inspect`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use half::f16;
use indicatif::{ProgressBar, ProgressStyle};
use lilypad_engine::ModelConfig;
use lilypad_engine::Qwen35Config;
use lilypad_engine::ops::delta_net::DeltaNetShape;
use lilypad_gguf::{ByteSource, GgmlType, GgufFile, GgufWriter, MmapSource, Value};

#[derive(Args)]
pub struct SynthArgs {
    /// Where to write the GGUF.
    #[arg(long)]
    out: PathBuf,
    /// Type of the weight matrices (norms and small per-head parameters stay F32).
    #[arg(long, value_enum, default_value_t = WeightType::Q4K)]
    weights: WeightType,
    /// Main layers (default 32); every fourth is full attention, as in FrogNano-4B.
    #[arg(long)]
    layers: Option<u32>,
    /// Vocabulary size (default 248,320).
    #[arg(long)]
    vocab: Option<u32>,
    /// Leave out the multi-token-prediction layer.
    #[arg(long)]
    no_mtp: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum WeightType {
    #[value(name = "q4_k")]
    Q4K,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q8_0")]
    Q8_0,
}

impl WeightType {
    fn ggml(self) -> GgmlType {
        match self {
            Self::Q4K => GgmlType::Q4K,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q8_0 => GgmlType::Q8_0,
        }
    }
}

/// FrogNano-4B (Qwen3.5-4B): 32 layers, 3 Gated DeltaNet layers to each gated attention
/// layer, hidden 2560, MLP 9216, 16 query / 4 KV heads of 256 with RoPE on a quarter of each
/// head (base 1e7), DeltaNet 16 key / 32 value heads of 128, conv kernel 4, tied 248,320-token
/// vocabulary, one MTP layer.
fn frognano_4b(layers: u32, vocab: u32, mtp: bool) -> Qwen35Config {
    Qwen35Config {
        n_layer: layers,
        n_embd: 2560,
        n_ff: 9216,
        n_head: 16,
        n_kv_head: 4,
        head_dim: 256,
        n_rot: 64,
        vocab,
        rope_base: 1e7,
        rms_eps: 1e-6,
        context_train: 262_144,
        tied_embeddings: true,
        recurrent: (0..layers).map(|i| (i + 1) % 4 != 0).collect(),
        delta: DeltaNetShape {
            n_k: 16,
            n_v: 32,
            d_k: 128,
            d_v: 128,
            eps: 1e-6,
        },
        conv_kernel: 4,
        n_mtp: mtp as u32,
    }
}

/// The metadata llama.cpp's converter writes for such a model.
fn metadata(w: &mut GgufWriter, c: &Qwen35Config) {
    let key = |k: &str| format!("qwen35.{k}");
    w.metadata("general.architecture", Value::String("qwen35".into()));
    w.metadata(
        "general.name",
        Value::String("frognano-4b-synthetic".into()),
    );
    for (k, v) in [
        ("block_count", c.n_layer + c.n_mtp),
        ("nextn_predict_layers", c.n_mtp),
        ("context_length", c.context_train),
        ("embedding_length", c.n_embd),
        ("feed_forward_length", c.n_ff),
        ("attention.head_count", c.n_head),
        ("attention.head_count_kv", c.n_kv_head),
        ("attention.key_length", c.head_dim),
        ("attention.value_length", c.head_dim),
        ("rope.dimension_count", c.n_rot),
        ("full_attention_interval", 4),
        ("ssm.conv_kernel", c.conv_kernel),
        ("ssm.state_size", c.delta.d_k),
        ("ssm.group_count", c.delta.n_k),
        ("ssm.time_step_rank", c.delta.n_v),
        ("ssm.inner_size", c.delta.n_v * c.delta.d_v),
    ] {
        w.metadata(&key(k), Value::U32(v));
    }
    w.metadata(
        &key("attention.layer_norm_rms_epsilon"),
        Value::F32(c.rms_eps),
    );
    w.metadata(&key("rope.freq_base"), Value::F32(c.rope_base));
    let mut flags: Vec<Value> = c.recurrent.iter().map(|&r| Value::Bool(r)).collect();
    flags.extend((0..c.n_mtp).map(|_| Value::Bool(false)));
    w.metadata(&key("attention.recurrent_layers"), Value::Array(flags));
    w.metadata(
        &key("rope.dimension_sections"),
        Value::Array([11, 11, 10, 0].map(Value::I32).to_vec()),
    );
}

const SPECIAL: [&str; 7] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
];

/// A byte-level vocabulary of `vocab` tokens: the 256 byte symbols (GPT-2's byte-to-unicode
/// map), fillers, and the special tokens last.
fn tokenizer(w: &mut GgufWriter, vocab: u32) {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut shifted = 0;
    let mut tokens: Vec<String> = (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                shifted += 1;
                255 + shifted
            };
            char::from_u32(c).unwrap().to_string()
        })
        .collect();
    let first_special = vocab as usize - SPECIAL.len();
    tokens.extend((256..first_special).map(|i| format!("<|synthetic_{i}|>")));
    tokens.extend(SPECIAL.iter().map(|s| s.to_string()));
    let types = (0..vocab as usize).map(|i| Value::I32(if i >= first_special { 3 } else { 1 }));
    let id = |s: &str| {
        Value::U32((first_special + SPECIAL.iter().position(|t| *t == s).unwrap()) as u32)
    };
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()));
    w.metadata("tokenizer.ggml.pre", Value::String("qwen35".into()));
    w.metadata(
        "tokenizer.ggml.tokens",
        Value::Array(tokens.into_iter().map(Value::String).collect()),
    );
    w.metadata("tokenizer.ggml.token_type", Value::Array(types.collect()));
    w.metadata("tokenizer.ggml.merges", Value::Array(Vec::new()));
    w.metadata("tokenizer.ggml.eos_token_id", id("<|im_end|>"));
    w.metadata("tokenizer.ggml.padding_token_id", id("<|endoftext|>"));
    w.metadata("tokenizer.ggml.add_bos_token", Value::Bool(false));
    w.metadata(
        "tokenizer.chat_template",
        Value::String(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
             {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                .into(),
        ),
    );
}

/// xorshift64*: fast enough to fill gigabytes, and reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }

    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Random blocks of `ty` for a matrix with rows of `cols` values: uniform-ish weights of
/// standard deviation about 1/sqrt(cols), so each layer keeps activations in range.
fn random_blocks(rng: &mut Rng, ty: GgmlType, cols: u64, len: u64) -> Vec<u8> {
    let mut data = vec![0u8; len as usize];
    rng.fill(&mut data);
    let amplitude = (3.0 / cols as f32).sqrt();
    let block = ty.type_size() as usize;
    let set = |b: &mut [u8], at: usize, v: f32| {
        b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
    };
    for b in data.chunks_exact_mut(block) {
        match ty {
            // d · (q − 8), q in 0..16.
            GgmlType::Q4_0 => set(b, 0, amplitude / 8.0),
            // d · q, q in −128..128.
            GgmlType::Q8_0 => set(b, 0, amplitude / 128.0),
            // d · scale · q − dmin · min, 6-bit scales and mins, q in 0..16: dmin = 7.5 d
            // roughly centres the values.
            _ => {
                let d = amplitude / 500.0;
                set(b, 0, d);
                set(b, 2, 7.5 * d);
            }
        }
    }
    data
}

/// Values of a small F32 tensor, by what it is.
fn small_tensor(rng: &mut Rng, name: &str, n: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            if name.ends_with("ssm_a") {
                -(1.0 + 15.0 * u) // −exp(A_log), A_log in log(1..16)
            } else if name.ends_with("ssm_dt.bias") {
                u
            } else if name.contains("conv1d") {
                u - 0.5
            } else {
                1.0 + 0.1 * (u - 0.5) // norm weights, stored as 1 + w
            }
        })
        .flat_map(f32::to_le_bytes)
        .collect()
}

pub fn run(args: &SynthArgs) -> Result<()> {
    let layers = args.layers.unwrap_or(32);
    let vocab = args.vocab.unwrap_or(248_320);
    if layers == 0 || vocab < 256 + SPECIAL.len() as u32 {
        bail!("need at least one layer and {} tokens", 256 + SPECIAL.len());
    }
    let cfg = frognano_4b(layers, vocab, !args.no_mtp);
    let matrix = args.weights.ggml();
    let mut w = GgufWriter::new();
    metadata(&mut w, &cfg);
    tokenizer(&mut w, vocab);
    let mut shapes = cfg.tensor_shapes();
    shapes.extend(cfg.mtp_tensor_shapes());
    // Per tensor: its type and row length. Norms, conv taps and per-head parameters stay F32.
    let mut plan = std::collections::HashMap::new();
    let mut total = 0;
    for (name, [rows, cols]) in &shapes {
        let (dims, ty) = match (*rows, name.contains("conv1d")) {
            (1, _) => (vec![*cols], GgmlType::F32),
            (_, true) => (vec![*cols, *rows], GgmlType::F32),
            _ => (vec![*cols, *rows], matrix),
        };
        total += w.declare_tensor(name, &dims, ty)?;
        plan.insert(name.clone(), (ty, *cols));
    }

    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("writing {bar:30} {bytes}/{total_bytes} {wide_msg}")
            .expect("valid template"),
    );
    let mut rng = Rng(args.seed.max(1));
    let mut out = BufWriter::with_capacity(1 << 22, file);
    w.write_to(&mut out, &mut |name, len| {
        bar.set_message(name.to_string());
        bar.inc(len);
        match plan[name] {
            (GgmlType::F32, _) => small_tensor(&mut rng, name, len / 4),
            (ty, cols) => random_blocks(&mut rng, ty, cols, len),
        }
    })?;
    out.flush()?;
    bar.finish_and_clear();

    // Read it back as any model would be.
    let src = MmapSource::open(&args.out)?;
    let file = GgufFile::read(&src)?;
    let cfg = ModelConfig::from_gguf(&file)?;
    println!(
        "wrote {} ({})",
        args.out.display(),
        lilypad_engine::error::human_bytes(src.len())
    );
    println!("{}", cfg.summary());
    Ok(())
}
