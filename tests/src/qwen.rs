//! The tiny Qwen reference fixtures (`tests/fixtures/qwen/`, described in its README):
//! a GGUF, the prompt and greedy tokens, and transformers' logits over all 80 tokens.

use std::path::PathBuf;

use lilypad_engine::{DType, Model, ModelOptions};
use lilypad_gguf::{ByteSource, GgufFile, MmapSource};
use serde::Deserialize;

use crate::{gpu, repo_root};

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
