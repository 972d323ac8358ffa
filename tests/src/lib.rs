//! Shared set-up for the whole-model tests: the test model, the GPU, the llama.cpp fixture.

mod gpu;
pub mod qwen;
pub use gpu::gpu;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use lilypad_engine::{Model, ModelOptions, SamplingParams};
use lilypad_gguf::{ByteSource, GgufFile, GgufWriter, MmapSource};
use lilypad_tokenizer::TextTokenizer;
use serde::Deserialize;

/// The tiny fixture models (under tests/fixtures) every decoding mode is checked on: Llama,
/// Qwen3, Qwen3.5 in F32 and in Q8_0.
pub const TINY_MODELS: [&str; 4] = [
    "lora/llama-tiny/model/model.gguf",
    "qwen/qwen3-tiny/model.gguf",
    "qwen/qwen35-tiny/model.gguf",
    "qwen/qwen35-tiny/model-q8_0.gguf",
];

/// Sampling with every knob on (temperature, top-k, top-p, repetition and presence
/// penalties), seeded: what decoding modes must reproduce token for token.
pub fn sampled_with_penalties() -> SamplingParams {
    SamplingParams {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        repeat_penalty: 1.3,
        presence_penalty: 0.4,
        penalty_last_n: 24,
        seed: 7,
    }
}

/// The PEFT adapter in folder `dir` (`adapter_config.json`, `adapter_model.safetensors`),
/// mapped onto `base`.
pub fn peft_adapter(dir: &std::path::Path, base: &GgufFile) -> lilypad_gguf::peft::LoraAdapter {
    lilypad_gguf::peft::LoraAdapter::from_peft(
        &std::fs::read(dir.join("adapter_config.json")).unwrap(),
        &std::fs::read(dir.join("adapter_model.safetensors")).unwrap(),
        base,
    )
    .unwrap()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

/// The test model (fetched by `scripts/fetch-model.sh`).
pub fn smollm2_path() -> Option<PathBuf> {
    let p = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var("LILYPAD_REQUIRE_MODEL").as_deref() != Ok("1"),
        "{} is missing: run scripts/fetch-model.sh",
        p.display()
    );
    eprintln!(
        "skipping: {} is missing (scripts/fetch-model.sh fetches it)",
        p.display()
    );
    None
}

pub struct Smol {
    pub model: Model,
    pub tok: TextTokenizer,
    pub file: GgufFile,
}

/// SmolLM2 loaded once per test binary; tests lock it in turn.
pub fn smollm2() -> Option<&'static Mutex<Smol>> {
    static MODEL: OnceLock<Option<Mutex<Smol>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = smollm2_path()?;
            let ctx = gpu()?;
            let src = MmapSource::open(&path).unwrap();
            let file = GgufFile::read(&src).unwrap();
            let tok = TextTokenizer::from_gguf(&file.metadata).unwrap();
            let opts = ModelOptions {
                context: Some(512),
                ..Default::default()
            };
            let model =
                pollster::block_on(Model::load(ctx, &file, &src, &opts, &mut |_| {})).unwrap();
            Some(Mutex::new(Smol { model, tok, file }))
        })
        .as_ref()
}

#[derive(Deserialize)]
pub struct Fixture {
    pub model_sha256: String,
    pub prompts: Vec<FixturePrompt>,
}

#[derive(Deserialize)]
pub struct FixturePrompt {
    pub name: String,
    pub text: String,
    #[serde(default)]
    pub chat: bool,
    #[serde(default)]
    pub messages: Vec<lilypad_tokenizer::ChatMessage>,
    pub prompt_tokens: Vec<u32>,
    pub greedy_tokens: Vec<u32>,
    pub greedy_text: String,
    pub top_logits: Vec<TopLogits>,
}

#[derive(Deserialize)]
pub struct TopLogits {
    pub ids: Vec<u32>,
    pub logits: Vec<f32>,
}

pub fn llama_cpp_fixture() -> Fixture {
    let p = repo_root().join("tests/fixtures/smollm2-135m-q4_1.llamacpp.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// A fresh SmolLM2 with its own state (for tests that own the model, such as chat sessions).
pub fn smollm2_owned(context: u32) -> Option<(Model, TextTokenizer)> {
    let path = smollm2_path()?;
    let ctx = gpu()?;
    let src = MmapSource::open(&path).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let tok = TextTokenizer::from_gguf(&file.metadata).unwrap();
    let opts = ModelOptions {
        context: Some(context),
        ..Default::default()
    };
    let model = pollster::block_on(Model::load(ctx, &file, &src, &opts, &mut |_| {})).unwrap();
    Some((model, tok))
}

/// A writer holding a copy of `file` (metadata and tensors, in order) without the keys and
/// tensors `drop` names: for tests that edit a real model.
pub fn copy_gguf(file: &GgufFile, src: &dyn ByteSource, drop: &dyn Fn(&str) -> bool) -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata.iter().filter(|(k, _)| !drop(k)) {
        w.metadata(k, v.clone());
    }
    for t in file.tensors.iter().filter(|t| !drop(&t.name)) {
        let data = file.tensor_bytes(src, t).unwrap().into_owned();
        w.tensor(&t.name, &t.dims, t.ty, data).unwrap();
    }
    w
}
