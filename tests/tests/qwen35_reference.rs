//! Qwen3.5 (hybrid Gated DeltaNet + gated attention) against the committed reference fixture
//! (tests/fixtures/qwen/README.md): qwen35-tiny's `model.gguf` (F32) must reproduce
//! transformers' f32 logits over the prompt and its 16-token greedy continuation however the
//! 80 tokens are split into steps (the chunked delta rule for prefill, the recurrent one for
//! decode, with conv and delta state carried between steps), and across snapshot / restore.
//! The Q8_0 GGUF must reproduce a float64 pass over its dequantized weights.

use lilypad_engine::{
    DType, Draft, EngineError, Logits, Model, ModelConfig, ModelOptions, SamplingParams,
};
use lilypad_gguf::{GgmlType, GgufFile, Value};
use lilypad_tests::copy_gguf;
use lilypad_tests::qwen::{self, Fixture};
use lilypad_tokenizer::TextTokenizer;

const NAME: &str = "qwen35-tiny";

fn fixture() -> Fixture {
    Fixture::load(NAME)
}

fn eval(m: &mut Model, tokens: &[u32], want: Logits) -> Vec<f32> {
    pollster::block_on(m.eval(tokens, want)).unwrap()
}

#[test]
fn config_reads_qwen35_metadata() {
    let f = fixture();
    let ModelConfig::Qwen35(cfg) = ModelConfig::from_gguf(&f.file).unwrap() else {
        panic!("not read as qwen35");
    };
    assert_eq!(cfg.recurrent, [true, true, false, true, true, false]);
    assert_eq!(
        (cfg.n_layer, cfg.n_embd, cfg.n_ff, cfg.vocab),
        (6, 64, 96, 512)
    );
    assert_eq!(
        (cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.n_rot),
        (4, 2, 32, 8)
    );
    let d = cfg.delta;
    assert_eq!((d.n_k, d.n_v, d.d_k, d.d_v), (2, 4, 16, 16));
    assert_eq!((cfg.conv_kernel, cfg.n_mtp), (4, 0));
    assert!(cfg.tied_embeddings);
    assert_eq!(cfg.rope_base, 1000.0);
    assert_eq!(cfg.rms_eps, 1e-6);
}

/// All 80 tokens in one step, in steps of 24 (chunks of the delta rule that straddle step
/// boundaries) and of 7 (steps shorter than a chunk).
#[test]
fn prefill_matches_transformers() {
    let f = fixture();
    for max_batch in [128, 24, 7] {
        let Some(mut m) = f.model(256, max_batch) else {
            return;
        };
        let logits = eval(&mut m, &f.tokens(), Logits::All);
        f.check(&logits, 0, &format!("prefill in steps of {max_batch}"));
    }
}

#[test]
fn token_by_token_matches_transformers() {
    let f = fixture();
    let Some(mut m) = f.model(256, 64) else {
        return;
    };
    let mut all = Vec::new();
    for &t in &f.tokens() {
        all.extend(eval(&mut m, &[t], Logits::Last));
    }
    f.check(&all, 0, "decode one token at a time");
}

/// Prefill, then decode on top of the prefilled state, then prefill again on top of that.
#[test]
fn prefill_and_decode_interleave() {
    let f = fixture();
    let Some(mut m) = f.model(256, 64) else {
        return;
    };
    let tokens = f.tokens();
    let mut all = eval(&mut m, &tokens[..37], Logits::All);
    for &t in &tokens[37..45] {
        all.extend(eval(&mut m, &[t], Logits::Last));
    }
    all.extend(eval(&mut m, &tokens[45..], Logits::All));
    f.check(&all, 0, "prefill 37, decode 8, prefill 35");
}

#[test]
fn greedy_continuation_matches_transformers() {
    let f = fixture();
    let Some(mut m) = f.model(256, 64) else {
        return;
    };
    let sp = SamplingParams::greedy();
    let n = f.manifest.greedy_tokens.len();
    let prompt = &f.manifest.prompt_tokens;
    let g = pollster::block_on(m.generate(prompt, &sp, n, &|_| false, &mut |_| true)).unwrap();
    assert_eq!(g.tokens, f.manifest.greedy_tokens);
}

/// The snapshot holds the conv and delta state as well as the KV caches: after a detour
/// that overwrites all of them, restoring continues exactly.
#[test]
fn restored_snapshot_continues_as_if_never_diverged() {
    let f = fixture();
    let Some(mut m) = f.model(256, 128) else {
        return;
    };
    let tokens = f.tokens();
    let (head, tail) = tokens.split_at(40);
    let first = eval(&mut m, head, Logits::All);
    f.check(&first, 0, "first half");
    let snap = pollster::block_on(m.snapshot()).unwrap();
    assert_eq!(snap.tokens(), head);

    let garbage: Vec<u32> = (0..60).map(|i| (i * 37 + 11) % 509).collect();
    eval(&mut m, &garbage, Logits::None);
    let sp = SamplingParams::greedy();
    pollster::block_on(m.generate(&[1, 2, 3], &sp, 5, &|_| false, &mut |_| true)).unwrap();

    m.restore(&snap).unwrap();
    assert_eq!(m.tokens(), head);
    let rest = eval(&mut m, tail, Logits::All);
    f.check(&rest, 40, "after restore");
    m.restore(&snap).unwrap();
    let again = eval(&mut m, &tail[..1], Logits::Last);
    f.check(&again, 40, "second restore");
}

/// Recurrent state cannot be rewound: truncating below the current length starts over,
/// reset starts from zero state, and a prompt that extends the sequence reuses all of it.
#[test]
fn recurrent_state_is_never_reused_wrongly() {
    let f = fixture();
    let Some(mut m) = f.model(256, 64) else {
        return;
    };
    assert!(!m.can_rewind());
    let tokens = f.tokens();
    eval(&mut m, &tokens[..30], Logits::None);
    m.truncate(30);
    assert_eq!(m.tokens().len(), 30, "keeping every token keeps the state");
    m.truncate(20);
    assert!(m.tokens().is_empty(), "a rewind forgets the sequence");
    let logits = eval(&mut m, &tokens[..22], Logits::All);
    f.check(&logits, 0, "after a refused rewind");

    m.reset();
    let logits = eval(&mut m, &tokens[..5], Logits::All);
    f.check(&logits, 0, "after reset");

    // generate() on a prompt that extends the sequence evaluates only the new tokens; on one
    // that diverges, everything again.
    let sp = SamplingParams::greedy();
    let g = pollster::block_on(m.generate(&tokens[..64], &sp, 1, &|_| false, &mut |_| true));
    let g = g.unwrap();
    assert_eq!((g.prompt_reused, g.prompt_evaluated), (5, 59));
    assert_eq!(g.tokens[0], f.manifest.greedy_tokens[0]);
    let mut other = tokens[..64].to_vec();
    other[50] = (other[50] + 1) % 500;
    let g = pollster::block_on(m.generate(&other, &sp, 1, &|_| false, &mut |_| true)).unwrap();
    assert_eq!((g.prompt_reused, g.prompt_evaluated), (0, 64));
    let g = pollster::block_on(m.generate(&tokens[..64], &sp, 1, &|_| false, &mut |_| true));
    assert_eq!(g.unwrap().tokens[0], f.manifest.greedy_tokens[0]);
}

/// Q8_0 matrices dequantized in the kernels with f32 activations: compared with a float64
/// pass over the same dequantized weights (`logits.q8_0.f32`).
#[test]
fn q8_0_gguf_matches_float64_over_its_weights() {
    let f = Fixture::with(NAME, "model-q8_0.gguf", "logits.q8_0.f32");
    assert_eq!(
        f.file.tensor("blk.0.attn_qkv.weight").unwrap().ty,
        GgmlType::Q8_0
    );
    let Some(mut m) = f.model(256, 128) else {
        return;
    };
    let logits = eval(&mut m, &f.tokens(), Logits::All);
    f.check(&logits, 0, "Q8_0 prefill");
    m.reset();
    let mut all = Vec::new();
    for &t in &f.tokens()[..20] {
        all.extend(eval(&mut m, &[t], Logits::Last));
    }
    f.check(&all, 0, "Q8_0 decode");
}

#[test]
fn gguf_tokenizer_matches_transformers() {
    let f = fixture();
    let tok = TextTokenizer::from_gguf(&f.file.metadata).unwrap();
    let check = &f.manifest.tokenizer_check;
    assert_eq!(
        tok.encode(&check.text, true).unwrap(),
        check.transformers_ids
    );
}

/// The MTP layer is read, checked and (on request) uploaded; the main model's logits are
/// unchanged by it.
#[test]
fn multi_token_prediction_layer_loads() {
    let f = fixture();
    let bytes = qwen::with_mtp_layer(&f, None);
    let file = GgufFile::read(&bytes).unwrap();
    let cfg = ModelConfig::from_gguf(&file).unwrap();
    let ModelConfig::Qwen35(c) = &cfg else {
        panic!("not qwen35")
    };
    assert_eq!((c.n_layer, c.n_mtp), (6, 1));
    let without = cfg.memory_plan(&file, 256, 64, DType::F16, false);
    let with = cfg.memory_plan(&file, 256, 64, DType::F16, true);
    assert!(with.weights > without.weights && with.kv_cache > without.kv_cache);

    for mtp in [false, true] {
        let opts = ModelOptions {
            mtp,
            ..qwen::options(256, 128)
        };
        let Some(mut m) = qwen::load_model(&file, &bytes, &opts) else {
            return;
        };
        assert_eq!(
            m.plan.weights,
            if mtp { with.weights } else { without.weights }
        );
        let logits = eval(&mut m, &f.tokens(), Logits::All);
        f.check(&logits, 0, &format!("with an MTP layer (uploaded: {mtp})"));
    }

    // A broken MTP layer is refused even when it would not be uploaded.
    let bytes = qwen::with_mtp_layer(&f, Some("blk.6.nextn.eh_proj.weight"));
    let file = GgufFile::read(&bytes).unwrap();
    let Some(ctx) = lilypad_tests::gpu() else {
        return;
    };
    let err = pollster::block_on(Model::load(
        ctx,
        &file,
        &bytes,
        &ModelOptions::default(),
        &mut |_| {},
    ))
    .err()
    .unwrap();
    assert!(
        matches!(&err, EngineError::MissingTensor(n) if n == "blk.6.nextn.eh_proj.weight"),
        "{err}"
    );
}

/// Metadata that cannot describe a runnable Qwen3.5 is a typed error, not a panic.
#[test]
fn bad_qwen35_metadata_is_a_typed_error() {
    let f = fixture();
    let rewrite = |key: &str, v: Option<Value>| {
        let mut w = copy_gguf(&f.file, &f.src, &|k| k == key);
        if let Some(v) = v {
            w.metadata(key, v);
        }
        GgufFile::read(&w.to_bytes()).unwrap()
    };
    for (key, v) in [
        ("qwen35.ssm.group_count", Some(Value::U32(3))),
        ("qwen35.ssm.inner_size", Some(Value::U32(63))),
        ("qwen35.ssm.conv_kernel", Some(Value::U32(64))),
        ("qwen35.ssm.state_size", Some(Value::U32(4096))),
        ("qwen35.nextn_predict_layers", Some(Value::U32(6))),
        (
            "qwen35.attention.recurrent_layers",
            Some(Value::Array(vec![Value::Bool(true); 3])),
        ),
    ] {
        let err = ModelConfig::from_gguf(&rewrite(key, v)).unwrap_err();
        assert!(matches!(err, EngineError::Config(_)), "{key}: {err}");
    }
    let err = ModelConfig::from_gguf(&rewrite("qwen35.ssm.time_step_rank", None)).unwrap_err();
    assert!(matches!(err, EngineError::Gguf(_)), "{err}");

    // Without the schedule array, full_attention_interval decides.
    let file = rewrite("qwen35.attention.recurrent_layers", None);
    let ModelConfig::Qwen35(c) = ModelConfig::from_gguf(&file).unwrap() else {
        panic!()
    };
    assert_eq!(c.recurrent, [true, true, false, true, true, false]);
}

/// qwen35-tiny's `config.json` + `model.safetensors` converted on load.
fn from_safetensors(quantize_to: Option<GgmlType>) -> Vec<u8> {
    let dir = qwen::fixture_dir(NAME);
    let config = std::fs::read(dir.join("config.json")).unwrap();
    let st = std::fs::read(dir.join("model.safetensors")).unwrap();
    lilypad_gguf::hf::to_gguf(&config, &[&st], quantize_to).unwrap()
}

/// The conversion reproduces llama.cpp's converter tensor by tensor: names, shapes, types,
/// the 1 + w norms, −exp(A_log) and the tiled value heads. Values agree to float rounding
/// (exp is computed by a different library).
#[test]
fn safetensors_convert_to_the_reference_gguf() {
    let f = fixture();
    let bytes = from_safetensors(None);
    let ours = GgufFile::read(&bytes).unwrap();
    assert_eq!(
        ModelConfig::from_gguf(&ours).unwrap(),
        ModelConfig::from_gguf(&f.file).unwrap()
    );
    assert_eq!(ours.tensors.len(), f.file.tensors.len());
    let floats = |b: &[u8]| -> Vec<f32> { bytemuck::pod_collect_to_vec(b) };
    for want in &f.file.tensors {
        let got = ours
            .tensor(&want.name)
            .unwrap_or_else(|| panic!("{} missing", want.name));
        assert_eq!((&got.dims, got.ty), (&want.dims, want.ty), "{}", want.name);
        let (a, b) = (
            floats(&ours.tensor_bytes(&bytes, got).unwrap()),
            floats(&f.file.tensor_bytes(&f.src, want).unwrap()),
        );
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-6 * y.abs().max(1.0),
                "{}: {x} vs {y}",
                want.name
            );
        }
    }
}

#[test]
fn safetensors_checkpoint_matches_transformers() {
    let f = fixture();
    for quantize_to in [None, Some(GgmlType::F16)] {
        let bytes = from_safetensors(quantize_to);
        let file = GgufFile::read(&bytes).unwrap();
        let Some(mut m) = qwen::load_model(&file, &bytes, &qwen::options(128, 128)) else {
            return;
        };
        let logits = eval(&mut m, &f.tokens(), Logits::All);
        match quantize_to {
            None => {
                f.check(&logits, 0, "from safetensors");
            }
            // F16 weights move this model's logits by ~4e-2 (fixture README).
            Some(_) => {
                let worst = logits
                    .iter()
                    .zip(&f.logits)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                eprintln!("from safetensors, F16 weights: max |Δ| {worst:.3e}");
                assert!(worst < 0.1, "F16: max |Δ| {worst}");
            }
        }
    }
}

/// Writes the fixture with its random MTP layer (`qwen::with_mtp_layer`) to
/// `$LILYPAD_MTP_GGUF`: the input of scripts/reference/make_mtp_fixture.sh.
#[test]
#[ignore = "writes the input of scripts/reference/make_mtp_fixture.sh"]
fn write_mtp_gguf() {
    let path = std::env::var("LILYPAD_MTP_GGUF").expect("LILYPAD_MTP_GGUF: where to write");
    std::fs::write(path, qwen::with_mtp_layer(&fixture(), None)).unwrap();
}

#[derive(serde::Deserialize)]
struct MtpReference {
    gguf_sha256: String,
    tokens: Vec<u32>,
    next: Vec<u32>,
}

/// The fixture with its random MTP layer (checked to be the one the reference was made
/// for), the reference's tokens and its logits.
fn mtp_reference(f: &Fixture) -> (Vec<u8>, MtpReference, Vec<f32>) {
    use sha2::{Digest, Sha256};
    let bytes = qwen::with_mtp_layer(f, None);
    let dir = qwen::fixture_dir(NAME);
    let reference: MtpReference =
        serde_json::from_slice(&std::fs::read(dir.join("mtp.json")).unwrap()).unwrap();
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sha, reference.gguf_sha256,
        "the layer the reference was made for"
    );
    (
        bytes,
        reference,
        qwen::read_f32s(dir.join("mtp-logits.f32")),
    )
}

/// A model of `bytes` with its MTP layer loaded and drafting.
fn mtp_model(file: &GgufFile, bytes: &[u8]) -> Option<Model> {
    let opts = ModelOptions {
        mtp: true,
        ..qwen::options(128, 80)
    };
    let mut m = qwen::load_model(file, &bytes, &opts)?;
    m.set_draft(Some(Draft::Mtp)).unwrap();
    Some(m)
}

/// The multi-token-prediction layer's logits (`Model::mtp_logits`: the main model's last
/// hidden state and the next token's embedding through the layer, its KV cache carried across
/// steps) match an independent float64 pass laid out as llama.cpp's qwen35 draft graph
/// (scripts/reference/make_mtp_fixture.py) at every position, in one step and in three.
#[test]
fn multi_token_prediction_layer_matches_reference() {
    let f = fixture();
    let (bytes, reference, want) = mtp_reference(&f);
    let file = GgufFile::read(&bytes).unwrap();
    let Some(mut m) = mtp_model(&file, &bytes) else {
        return;
    };
    let (tokens, next) = (&reference.tokens, &reference.next);
    let vocab = f.vocab;
    for split in [vec![tokens.len()], vec![30, 1, tokens.len() - 31]] {
        m.reset();
        let mut got = Vec::new();
        let mut at = 0;
        for n in &split {
            let rows = pollster::block_on(m.mtp_logits(&tokens[at..at + n], &next[at..at + n]));
            got.extend(rows.unwrap());
            at += n;
        }
        let mut worst = (0f32, 0f32);
        for (i, (g, w)) in got.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
            let (abs, rel) = qwen::row_error(g, w);
            assert!(
                rel < qwen::TOL,
                "steps {split:?}, position {i}: max |Δ| {abs} ({rel} relative)"
            );
            worst = (worst.0.max(abs), worst.1.max(rel));
        }
        assert_eq!(got.len(), want.len());
        eprintln!(
            "MTP logits, steps {split:?}: max |Δ| {:.2e} ({:.2e} relative)",
            worst.0, worst.1
        );
    }
}

/// A saved state carries the MTP layer's KV cache: a model that loads the state of the first
/// 40 positions gives the reference MTP logits for the rest, as if it had read them all; a
/// state saved without the layer is refused by a model with it (other keys), not mixed up.
#[test]
fn saved_states_carry_the_mtp_layers_cache() {
    let f = fixture();
    let (bytes, reference, want) = mtp_reference(&f);
    let file = GgufFile::read(&bytes).unwrap();
    let Some(mut first) = mtp_model(&file, &bytes) else {
        return;
    };
    let (tokens, next) = (&reference.tokens, &reference.next);
    pollster::block_on(first.mtp_logits(&tokens[..40], &next[..40])).unwrap();
    let saved = pollster::block_on(first.save_state()).unwrap();
    let mut second = mtp_model(&file, &bytes).unwrap();
    second.load_state(&saved).unwrap();
    let got = pollster::block_on(second.mtp_logits(&tokens[40..], &next[40..])).unwrap();
    let vocab = f.vocab;
    for (i, (g, w)) in got
        .chunks(vocab)
        .zip(want[40 * vocab..].chunks(vocab))
        .enumerate()
    {
        let (abs, rel) = qwen::row_error(g, w);
        assert!(rel < qwen::TOL, "position {}: max |Δ| {abs}", 40 + i);
    }

    let plain_opts = qwen::options(128, 80);
    let mut plain = qwen::load_model(&file, &bytes, &plain_opts).unwrap();
    pollster::block_on(plain.eval(&tokens[..40], Logits::None)).unwrap();
    let without = pollster::block_on(plain.save_state()).unwrap();
    let err = second.load_state(&without).unwrap_err();
    assert!(matches!(err, EngineError::State(_)), "{err}");
}
