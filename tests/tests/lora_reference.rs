//! LoRA adapters against PEFT (tests/fixtures/lora/README.md): for a tiny Llama, Qwen3 and
//! Qwen3.5, a random PEFT adapter on every linear projection, and the logits that
//! transformers + peft compute with it at every position of a 20-token sequence. The engine
//! reads the PEFT folder onto the GGUF base (llama's from llama.cpp's converter) and must
//! reproduce them: as one prefill, token by token, after an in-place update of the adapter,
//! and with the adapter merged into F32 weights. Without the adapter it must give the base
//! logits back.
//!
//! Tolerance: [`qwen::TOL`] (max |Δ| / max(1, max |reference|) per position); the adapter
//! moves the logits by 1.7–2.8, so a wrong layout or scale cannot pass.

use std::path::PathBuf;

use lilypad_engine::{Logits, Model};
use lilypad_gguf::peft::{LoraAdapter, MergedType};
use lilypad_gguf::{ByteSource, GgmlType, GgufFile, MmapSource};
use lilypad_tests::qwen::{self, TOL, read_f32s};
use lilypad_tests::repo_root;
use serde::Deserialize;

#[derive(Deserialize)]
struct Manifest {
    token_ids: Vec<u32>,
    vocab: usize,
}

struct LoraFixture {
    name: &'static str,
    dir: PathBuf,
    manifest: Manifest,
    file: GgufFile,
    src: MmapSource,
}

impl LoraFixture {
    fn load(name: &'static str) -> Self {
        let dir = repo_root().join("tests/fixtures/lora").join(name);
        let manifest =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        // qwen3/qwen35 adapt the existing Qwen fixtures; llama-tiny carries its own base.
        let gguf = match name {
            "llama-tiny" => dir.join("model/model.gguf"),
            _ => qwen::fixture_dir(name).join("model.gguf"),
        };
        let src = MmapSource::open(gguf).unwrap();
        let file = GgufFile::read(&src).unwrap();
        Self {
            name,
            dir,
            manifest,
            file,
            src,
        }
    }

    fn adapter(&self) -> LoraAdapter {
        self.adapter_for(&self.file)
    }

    /// The PEFT folder mapped onto `base`.
    fn adapter_for(&self, base: &GgufFile) -> LoraAdapter {
        lilypad_tests::peft_adapter(&self.dir.join("adapter"), base)
    }

    fn logits(&self, which: &str) -> Vec<f32> {
        read_f32s(self.dir.join(which))
    }

    fn model(&self, file: &GgufFile, src: &dyn ByteSource) -> Option<Model> {
        qwen::load_model(file, src, &qwen::options(64, 32))
    }

    /// Asserts `got` (rows from position `first`) is within [`TOL`] of `want`'s rows.
    fn check(&self, got: &[f32], want: &[f32], first: usize, what: &str) {
        let vocab = self.manifest.vocab;
        assert_eq!(got.len() % vocab, 0);
        let mut worst = 0f32;
        for (i, row) in got.chunks_exact(vocab).enumerate() {
            let want = &want[(first + i) * vocab..][..vocab];
            let diff = row
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let rel = diff / want.iter().map(|v| v.abs()).fold(1f32, f32::max);
            assert!(
                rel <= TOL,
                "{} {what}: position {}: max |Δ| {diff:.3e} (relative {rel:.3e})",
                self.name,
                first + i
            );
            worst = worst.max(diff);
        }
        eprintln!("{} {what}: max |Δ| {worst:.3e}", self.name);
    }
}

const NAMES: [&str; 3] = ["llama-tiny", "qwen3-tiny", "qwen35-tiny"];

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// A safetensors file's tensors as f32 values, by name.
fn tensors(bytes: &[u8]) -> std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    st.iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let values = view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (name.to_string(), (view.shape().to_vec(), values))
        })
        .collect()
}

/// Exporting the adapter read from PEFT's own files gives those files back: every factor
/// under its module name with its rows and columns where peft had them (Llama's permuted
/// Q/K, Qwen3.5's tiled value heads undone), bit for bit, and the same rank, alpha and
/// target modules; reading the export gives the same adapter.
#[test]
fn exported_adapters_are_peft_files_again() {
    for name in NAMES {
        let f = LoraFixture::load(name);
        let adapter = f.adapter();
        let exported = adapter.to_peft(&f.file).unwrap();
        let original_dir = f.dir.join("adapter");
        let original =
            tensors(&std::fs::read(original_dir.join("adapter_model.safetensors")).unwrap());
        let ours = tensors(&exported.safetensors);
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            original.keys().collect::<Vec<_>>(),
            "{name}"
        );
        for (key, (shape, values)) in &ours {
            let (want_shape, want) = &original[key];
            assert_eq!(shape, want_shape, "{name} {key}");
            assert!(
                values
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} {key}: values differ"
            );
        }
        let config: serde_json::Value = serde_json::from_slice(&exported.config).unwrap();
        let want: serde_json::Value = serde_json::from_slice(
            &std::fs::read(original_dir.join("adapter_config.json")).unwrap(),
        )
        .unwrap();
        for field in [
            "peft_type",
            "r",
            "lora_alpha",
            "use_rslora",
            "target_modules",
            "base_model_name_or_path",
        ] {
            assert_eq!(config[field], want[field], "{name} {field}");
        }
        assert_eq!(
            LoraAdapter::from_peft(&exported.config, &exported.safetensors, &f.file).unwrap(),
            adapter,
            "{name}"
        );
        eprintln!(
            "{name}: {} factors exported and read back exactly",
            ours.len()
        );
    }
}

#[test]
fn adapters_match_peft() {
    for name in NAMES {
        let f = LoraFixture::load(name);
        let Some(mut m) = f.model(&f.file, &f.src) else {
            return;
        };
        let (tokens, adapted, base) = (
            &f.manifest.token_ids,
            f.logits("logits.f32"),
            f.logits("logits_base.f32"),
        );
        assert!(
            max_diff(&adapted, &base) > 0.5,
            "{name}: the adapter must move the logits"
        );
        let adapter = f.adapter();

        let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
        f.check(&got, &base, 0, "base, one prefill");

        m.set_lora(Some(&adapter)).unwrap();
        let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
        f.check(&got, &adapted, 0, "adapter, one prefill");

        // Prefill 12, then the decode graph one token at a time.
        m.reset();
        let mut got = pollster::block_on(m.eval(&tokens[..12], Logits::All)).unwrap();
        for &t in &tokens[12..] {
            got.extend(pollster::block_on(m.eval(&[t], Logits::Last)).unwrap());
        }
        f.check(&got, &adapted, 0, "adapter, prefill 12 then decode");

        // In place: an all-zero B (base logits), then the real factors again, into the same
        // buffers without recording the graphs again.
        let mut zero = adapter.clone();
        zero.tensors.iter_mut().for_each(|t| t.b.fill(0.0));
        m.set_lora(Some(&zero)).unwrap();
        let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
        f.check(&got, &base, 0, "zero adapter, in place");
        m.set_lora(Some(&adapter)).unwrap();
        let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
        f.check(&got, &adapted, 0, "adapter again, in place");

        m.set_lora(None).unwrap();
        let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
        f.check(&got, &base, 0, "adapter removed");
    }
}

#[test]
fn merged_adapters_match_peft() {
    for name in NAMES {
        let f = LoraFixture::load(name);
        let merged = f.adapter().merge(&f.file, &f.src).unwrap();
        let file = GgufFile::read(&merged).unwrap();
        let Some(mut m) = f.model(&file, &merged) else {
            return;
        };
        let got = pollster::block_on(m.eval(&f.manifest.token_ids, Logits::All)).unwrap();
        f.check(&got, &f.logits("logits.f32"), 0, "merged into F32 weights");
        f.check(
            &got,
            &f.logits("logits_merged.f32"),
            0,
            "vs peft's merge_and_unload",
        );
        // Re-quantized to Q8_0 (as `train-native export --quantize q8_0` writes it): as far
        // from peft's merged model as the same rounding puts the base model from itself.
        let q8_0 = |adapter: &LoraAdapter| {
            let merged = adapter
                .merge_as(&f.file, &f.src, MergedType::Type(GgmlType::Q8_0))
                .unwrap()
                .bytes;
            let file = GgufFile::read(&merged).unwrap();
            assert_eq!(
                file.tensor(&adapter.tensors[0].target).unwrap().ty,
                GgmlType::Q8_0
            );
            let mut m = f.model(&file, &merged).unwrap();
            pollster::block_on(m.eval(&f.manifest.token_ids, Logits::All)).unwrap()
        };
        let adapter = f.adapter();
        let mut nothing = adapter.clone();
        nothing.tensors.iter_mut().for_each(|t| t.b.fill(0.0));
        let error = max_diff(&q8_0(&adapter), &f.logits("logits_merged.f32"));
        let rounding = max_diff(&q8_0(&nothing), &f.logits("logits_base.f32"));
        eprintln!(
            "{name} merged into Q8_0: max |Δ| {error:.3e} from peft's merge; the base model \
             rounded the same way: {rounding:.3e} from itself"
        );
        assert!(
            error < 2.0 * rounding,
            "{name}: merging costs more than Q8_0's rounding: {error:.3e} vs {rounding:.3e}"
        );
    }
}

/// The Llama checkpoint converted on load (Q/K rows permuted as llama.cpp's converter does)
/// gives the same logits as llama.cpp's GGUF, with and without the adapter.
#[test]
fn llama_checkpoint_converts_like_llama_cpp() {
    let f = LoraFixture::load("llama-tiny");
    let dir = f.dir.join("model");
    let gguf = lilypad_gguf::hf::to_gguf(
        &std::fs::read(dir.join("config.json")).unwrap(),
        &[&std::fs::read(dir.join("model.safetensors")).unwrap()],
        None,
    )
    .unwrap();
    let file = GgufFile::read(&gguf).unwrap();
    for t in &f.file.tensors {
        let ours = file
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!((&ours.dims, ours.ty), (&t.dims, t.ty), "{}", t.name);
        assert_eq!(
            file.tensor_bytes(&gguf, ours).unwrap(),
            f.file.tensor_bytes(&f.src, t).unwrap(),
            "{}",
            t.name
        );
    }
    let Some(mut m) = f.model(&file, &gguf) else {
        return;
    };
    let tokens = &f.manifest.token_ids;
    let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
    f.check(
        &got,
        &f.logits("logits_base.f32"),
        0,
        "converted checkpoint",
    );
    let adapter = f.adapter_for(&file);
    m.set_lora(Some(&adapter)).unwrap();
    let got = pollster::block_on(m.eval(tokens, Logits::All)).unwrap();
    f.check(
        &got,
        &f.logits("logits.f32"),
        0,
        "converted checkpoint with adapter",
    );
}

/// An adapter made for another model is refused before anything changes.
#[test]
fn mismatched_adapters_are_refused() {
    let llama = LoraFixture::load("llama-tiny");
    let qwen3 = LoraFixture::load("qwen3-tiny");
    let a = qwen3.dir.join("adapter");
    let err = LoraAdapter::from_peft(
        &std::fs::read(a.join("adapter_config.json")).unwrap(),
        &std::fs::read(a.join("adapter_model.safetensors")).unwrap(),
        &llama.file,
    )
    .unwrap_err();
    assert!(err.to_string().contains("another base model"), "{err}");

    // An adapter that names a tensor the model does not run.
    let Some(mut m) = llama.model(&llama.file, &llama.src) else {
        return;
    };
    let mut adapter = llama.adapter();
    adapter.tensors[0].target = "blk.99.attn_q.weight".into();
    let err = m.set_lora(Some(&adapter)).unwrap_err();
    assert!(err.to_string().contains("blk.99.attn_q.weight"), "{err}");
    let got = pollster::block_on(m.eval(&llama.manifest.token_ids, Logits::All)).unwrap();
    llama.check(
        &got,
        &llama.logits("logits_base.f32"),
        0,
        "after a refused adapter",
    );
}
