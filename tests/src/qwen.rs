//! The tiny Qwen reference fixtures (`tests/fixtures/qwen/`, described in its README):
//! a GGUF, the prompt and greedy tokens, and transformers' logits over all 80 tokens.

use std::path::PathBuf;

use lilypad_engine::{DType, Model, ModelOptions};
use lilypad_gguf::{ByteSource, GgmlType, GgufFile, MmapSource, Value};
use serde::Deserialize;

use crate::{copy_gguf, gpu, repo_root};

/// Allowed error per position: max |Δ| / max(1, max |reference|). Three independent
/// implementations agree with the fixtures to ~4e-5; f32 kernels stay well under this.
pub const TOL: f32 = 1e-3;

/// (max |Δ|, max |Δ| / max(1, max |want|)) between two logits rows.
pub fn row_error(got: &[f32], want: &[f32]) -> (f32, f32) {
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = want.iter().map(|v| v.abs()).fold(1f32, f32::max);
    (diff, diff / scale)
}

/// Asserts that two logits rows agree within [`TOL`].
pub fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let (diff, rel) = row_error(got, want);
    assert!(rel <= TOL, "{what}: max |Δ| {diff:.3e}");
}

pub fn fixture_dir(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/qwen").join(name)
}

/// A model on the shared GPU, or None (test skipped) without an adapter.
pub fn load_model(file: &GgufFile, src: &dyn ByteSource, opts: &ModelOptions) -> Option<Model> {
    Some(pollster::block_on(Model::load(gpu()?, file, src, opts, &mut |_| {})).unwrap())
}

/// The reference checks run an f32 KV cache, so that they see the kernels' own error
/// (~1e-6 here); the f16 cache (the default) has its own check in `tests/kv_cache.rs`.
pub fn options(context: u32, max_batch: u32) -> ModelOptions {
    ModelOptions {
        context: Some(context),
        max_batch,
        kv_cache: DType::F32,
        ..Default::default()
    }
}

#[derive(Deserialize)]
pub struct Manifest {
    pub prompt_tokens: Vec<u32>,
    pub greedy_tokens: Vec<u32>,
    pub tokenizer_check: TokenizerCheck,
}

#[derive(Deserialize)]
pub struct TokenizerCheck {
    pub text: String,
    pub transformers_ids: Vec<u32>,
}

pub struct Fixture {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// [80, vocab]: row i scores the token after tokens[..=i].
    pub logits: Vec<f32>,
    pub vocab: usize,
    pub file: GgufFile,
    pub src: MmapSource,
}

pub fn read_f32s(path: PathBuf) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

impl Fixture {
    /// `name`'s `model.gguf` with transformers' f32 logits.
    pub fn load(name: &str) -> Self {
        Self::with(name, "model.gguf", "logits.f32")
    }

    /// Another GGUF of the same checkpoint, with the logits recorded for it.
    pub fn with(name: &str, gguf: &str, logits: &str) -> Self {
        let dir = fixture_dir(name);
        let manifest =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        let logits = read_f32s(dir.join(logits));
        let src = MmapSource::open(dir.join(gguf)).unwrap();
        let file = GgufFile::read(&src).unwrap();
        let vocab = file.tensor("token_embd.weight").unwrap().dims[1] as usize;
        Self {
            dir,
            manifest,
            logits,
            vocab,
            file,
            src,
        }
    }

    pub fn tokens(&self) -> Vec<u32> {
        let mut all = self.manifest.prompt_tokens.clone();
        all.extend(&self.manifest.greedy_tokens);
        all
    }

    pub fn model(&self, context: u32, max_batch: u32) -> Option<Model> {
        load_model(&self.file, &self.src, &options(context, max_batch))
    }

    /// [`Fixture::model`] with a KV cache of `kv` elements.
    pub fn model_with_kv(&self, context: u32, max_batch: u32, kv: DType) -> Option<Model> {
        let opts = ModelOptions {
            kv_cache: kv,
            ..options(context, max_batch)
        };
        load_model(&self.file, &self.src, &opts)
    }

    /// Asserts that `got` (rows for positions first..) is within [`TOL`] of the reference
    /// at every position, and prints and returns the worst errors (max |Δ|, relative).
    pub fn check(&self, got: &[f32], first: usize, what: &str) -> (f32, f32) {
        let vocab = self.vocab;
        assert_eq!(got.len() % vocab, 0, "{what}: logits length");
        let (mut worst, mut worst_abs) = (0f32, 0f32);
        for (i, row) in got.chunks_exact(vocab).enumerate() {
            let pos = first + i;
            let want = &self.logits[pos * vocab..][..vocab];
            let (diff, rel) = row_error(row, want);
            assert!(
                rel <= TOL,
                "{what}: position {pos}: max |Δ| {diff:.3e} (relative {rel:.3e})"
            );
            worst = worst.max(rel);
            worst_abs = worst_abs.max(diff);
        }
        eprintln!("{what}: max |Δ| {worst_abs:.3e}, relative {worst:.3e}");
        (worst_abs, worst)
    }
}

/// The fixture plus one multi-token-prediction layer (random weights, as llama.cpp's
/// converter lays one out): `block_count` 7 with `nextn_predict_layers` 1.
pub fn with_mtp_layer(f: &Fixture, drop: Option<&str>) -> Vec<u8> {
    mtp_layer(f, drop, &|_, _| None)
}

/// The fixture plus an MTP layer that echoes: its decoder layer adds nothing (zero output
/// projections) and `eh_proj` passes the next token's normed embedding through, so with the
/// tied LM head it drafts the token it was given again — right whenever the model repeats one.
pub fn with_echo_mtp_layer(f: &Fixture) -> Vec<u8> {
    mtp_layer(f, None, &|name, n| {
        let v = match name {
            "blk.6.attn_output.weight" | "blk.6.ffn_down.weight" => vec![0.0; n],
            "blk.6.nextn.eh_proj.weight" => (0..n)
                .map(|i| ((i % 128) == i / 128) as u8 as f32)
                .collect(),
            "blk.6.nextn.enorm.weight" | "blk.6.nextn.shared_head_norm.weight" => vec![1.0; n],
            _ => return None,
        };
        Some(v)
    })
}

/// [`with_mtp_layer`] with the values `fill` gives (name, count) in place of random ones.
fn mtp_layer(
    f: &Fixture,
    drop: Option<&str>,
    fill: &dyn Fn(&str, usize) -> Option<Vec<f32>>,
) -> Vec<u8> {
    let mut w = copy_gguf(&f.file, &f.src, &|_| false);
    w.metadata("qwen35.block_count", Value::U32(7));
    w.metadata("qwen35.nextn_predict_layers", Value::U32(1));
    let mut flags = f
        .file
        .metadata
        .bool_array("qwen35.attention.recurrent_layers")
        .unwrap();
    flags.push(false);
    w.metadata(
        "qwen35.attention.recurrent_layers",
        Value::Array(flags.into_iter().map(Value::Bool).collect()),
    );
    // The MTP block: a gated-attention layer like blk.2 plus the nextn projections.
    let mut seed = 7u32;
    let mut random = |n: u64| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((seed >> 8) as f32 / (1 << 24) as f32 - 0.5).to_le_bytes()
            })
            .collect()
    };
    let mut add = |name: String, dims: &[u64]| {
        if Some(name.as_str()) != drop {
            let n: u64 = dims.iter().product();
            let bytes = match fill(&name, n as usize) {
                Some(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                None => random(n),
            };
            w.tensor(&name, dims, GgmlType::F32, bytes).unwrap();
        }
    };
    for t in f
        .file
        .tensors
        .iter()
        .filter(|t| t.name.starts_with("blk.2."))
    {
        add(t.name.replacen("blk.2.", "blk.6.", 1), &t.dims);
    }
    add("blk.6.nextn.eh_proj.weight".into(), &[128, 64]);
    add("blk.6.nextn.enorm.weight".into(), &[64]);
    add("blk.6.nextn.hnorm.weight".into(), &[64]);
    add("blk.6.nextn.shared_head_norm.weight".into(), &[64]);
    w.to_bytes()
}
