//! PEFT LoRA adapters mapped onto GGUF bases. The layout rules are checked by commuting
//! two routes on random tiny checkpoints of every supported architecture: merging the
//! adapter in the checkpoint's own layout and then converting must give the same GGUF
//! weights as converting and then merging the mapped adapter (to f32 rounding). Bad
//! adapters are typed errors.

use std::collections::BTreeMap;

use lilypad_gguf::peft::LoraAdapter;
use lilypad_gguf::{GgmlType, GgufError, GgufFile, dequantize, hf};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// Row-major f32 tensors by name, with [out, in] shapes.
type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

fn random(rng: &mut StdRng, shape: &[usize]) -> Vec<f32> {
    (0..shape.iter().product::<usize>())
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect()
}

fn safetensors(tensors: &Tensors) -> Vec<u8> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (s, v))| (n.clone(), s.clone(), bytemuck::cast_slice(v).to_vec()))
        .collect();
    let views = bytes.iter().map(|(n, s, b)| {
        (
            n.clone(),
            TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
        )
    });
    safetensors::serialize(views, None).unwrap()
}

struct Case {
    name: &'static str,
    config: &'static str,
    /// (HF module under `model.layers.N.`, [out, in]).
    linears: Vec<(&'static str, [usize; 2])>,
}

fn cases() -> Vec<Case> {
    let mlp = [
        ("mlp.gate_proj", [48, 32]),
        ("mlp.up_proj", [48, 32]),
        ("mlp.down_proj", [32, 48]),
    ];
    // 4 heads, 2 KV heads, head dim 8, hidden 32.
    let attention = [
        ("self_attn.q_proj", [32, 32]),
        ("self_attn.k_proj", [16, 32]),
        ("self_attn.v_proj", [16, 32]),
        ("self_attn.o_proj", [32, 32]),
    ];
    let common = r#""hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0"#;
    vec![
        Case {
            name: "llama",
            config: Box::leak(format!(r#"{{"model_type": "llama", {common}}}"#).into_boxed_str()),
            linears: attention.iter().chain(&mlp).copied().collect(),
        },
        Case {
            name: "qwen3",
            config: Box::leak(format!(r#"{{"model_type": "qwen3", {common}}}"#).into_boxed_str()),
            linears: attention.iter().chain(&mlp).copied().collect(),
        },
        Case {
            name: "qwen35",
            // DeltaNet: 2 key heads of 8, 4 value heads of 8 (grouped → tiled order); the
            // attention layer's q_proj holds query and gate per head.
            config: Box::leak(
                format!(
                    r#"{{"model_type": "qwen3_5_text", {common}, "full_attention_interval": 2,
                    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                    "linear_num_key_heads": 2, "linear_num_value_heads": 4}}"#
                )
                .into_boxed_str(),
            ),
            linears: [
                ("linear_attn.in_proj_qkv", [64, 32]),
                ("linear_attn.in_proj_z", [32, 32]),
                ("linear_attn.in_proj_a", [4, 32]),
                ("linear_attn.in_proj_b", [4, 32]),
                ("linear_attn.out_proj", [32, 32]),
                ("self_attn.q_proj", [64, 32]),
                ("self_attn.k_proj", [16, 32]),
                ("self_attn.v_proj", [16, 32]),
                ("self_attn.o_proj", [32, 32]),
            ]
            .iter()
            .chain(&mlp)
            .copied()
            .collect(),
        },
    ]
}

const RANK: usize = 3;
const ALPHA: f32 = 5.0;

fn adapter_config(extra: &str) -> String {
    format!(
        r#"{{"peft_type": "LORA", "r": {RANK}, "lora_alpha": {ALPHA}, "bias": "none",
            "target_modules": ["q_proj"], "base_model_name_or_path": "tiny"{extra}}}"#
    )
}

/// A random checkpoint and adapter: (base tensors, adapter tensors).
fn checkpoint(case: &Case, seed: u64) -> (Tensors, Tensors) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut base, mut lora) = (Tensors::new(), Tensors::new());
    for layer in 0..2 {
        for &(module, [out, inp]) in &case.linears {
            // Qwen3.5 at interval 2: layer 0 is DeltaNet, layer 1 full attention.
            let deltanet = module.starts_with("linear_attn");
            if case.name == "qwen35" && module.contains("attn") && deltanet != (layer == 0) {
                continue;
            }
            let path = format!("model.layers.{layer}.{module}");
            base.insert(
                format!("{path}.weight"),
                (vec![out, inp], random(&mut rng, &[out, inp])),
            );
            let prefix = format!("base_model.model.{path}");
            lora.insert(
                format!("{prefix}.lora_A.weight"),
                (vec![RANK, inp], random(&mut rng, &[RANK, inp])),
            );
            lora.insert(
                format!("{prefix}.lora_B.weight"),
                (vec![out, RANK], random(&mut rng, &[out, RANK])),
            );
        }
    }
    (base, lora)
}

fn gguf_tensors(bytes: &[u8]) -> BTreeMap<String, Vec<f32>> {
    let file = GgufFile::read(&bytes).unwrap();
    file.tensors
        .iter()
        .map(|t| {
            let mut v = vec![0f32; t.n_elements() as usize];
            dequantize(t.ty, &file.tensor_bytes(&bytes, t).unwrap(), &mut v).unwrap();
            (t.name.clone(), v)
        })
        .collect()
}

#[test]
fn merging_commutes_with_conversion() {
    let scale = ALPHA as f64 / RANK as f64;
    for case in cases() {
        let (base, lora) = checkpoint(&case, 7);
        // Route 1: W + scale · B·A in the checkpoint's layout (f64), then convert.
        let mut merged = base.clone();
        for (name, (shape, w)) in merged.iter_mut() {
            let prefix = format!("base_model.model.{}", name.strip_suffix(".weight").unwrap());
            let (_, a) = &lora[&format!("{prefix}.lora_A.weight")];
            let (_, b) = &lora[&format!("{prefix}.lora_B.weight")];
            let (out, inp) = (shape[0], shape[1]);
            for o in 0..out {
                for i in 0..inp {
                    let ba: f64 = (0..RANK)
                        .map(|k| b[o * RANK + k] as f64 * a[k * inp + i] as f64)
                        .sum();
                    w[o * inp + i] = (w[o * inp + i] as f64 + scale * ba) as f32;
                }
            }
        }
        let config = case.config.as_bytes();
        let route1 = gguf_tensors(&hf::to_gguf(config, &[&safetensors(&merged)], None).unwrap());

        // Route 2: convert, map the adapter onto the GGUF, merge there.
        let base_gguf = hf::to_gguf(config, &[&safetensors(&base)], None).unwrap();
        let file = GgufFile::read(&base_gguf).unwrap();
        let adapter =
            LoraAdapter::from_peft(adapter_config("").as_bytes(), &safetensors(&lora), &file)
                .unwrap();
        assert_eq!(adapter.tensors.len(), base.len(), "{}", case.name);
        assert!((adapter.scale - ALPHA / RANK as f32).abs() < 1e-6);
        assert_eq!(adapter.base_model.as_deref(), Some("tiny"));
        let route2 = gguf_tensors(&adapter.merge(&file, &base_gguf).unwrap());

        assert_eq!(
            route1.keys().collect::<Vec<_>>(),
            route2.keys().collect::<Vec<_>>()
        );
        let merged_file = GgufFile::read(&adapter.merge(&file, &base_gguf).unwrap()).unwrap();
        for (name, w1) in &route1 {
            let w2 = &route2[name];
            let worst = w1
                .iter()
                .zip(w2)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-5, "{} {name}: max |Δ| {worst}", case.name);
            assert_eq!(merged_file.tensor(name).unwrap().ty, GgmlType::F32);
        }
        // The adapter moved the weights: a layout mistake cannot hide behind a tiny B·A.
        let base_tensors = gguf_tensors(&base_gguf);
        let moved = route1
            .iter()
            .map(|(n, w)| {
                w.iter()
                    .zip(&base_tensors[n])
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max)
            })
            .fold(f32::INFINITY, f32::min);
        assert!(moved > 0.1, "{}: smallest change {moved}", case.name);
    }
}

#[test]
fn rslora_scales_by_the_square_root_of_the_rank() {
    let case = &cases()[1];
    let (base, lora) = checkpoint(case, 1);
    let base_gguf = hf::to_gguf(case.config.as_bytes(), &[&safetensors(&base)], None).unwrap();
    let file = GgufFile::read(&base_gguf).unwrap();
    let config = adapter_config(r#", "use_rslora": true"#);
    let a = LoraAdapter::from_peft(config.as_bytes(), &safetensors(&lora), &file).unwrap();
    assert!((a.scale - ALPHA / (RANK as f32).sqrt()).abs() < 1e-6);
}

#[test]
fn bad_adapters_are_typed_errors() {
    let case = &cases()[0];
    let (base, lora) = checkpoint(case, 3);
    let base_gguf = hf::to_gguf(case.config.as_bytes(), &[&safetensors(&base)], None).unwrap();
    let file = GgufFile::read(&base_gguf).unwrap();
    let read = |config: &str, lora: &Tensors| {
        LoraAdapter::from_peft(config.as_bytes(), &safetensors(lora), &file)
    };
    let expect = |r: Result<LoraAdapter, GgufError>, needle: &str| match r {
        Err(GgufError::Adapter(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected an adapter error with {needle:?}, got {other:?}"),
    };
    let ok = adapter_config("");
    assert!(read(&ok, &lora).is_ok());

    for (extra, needle) in [
        (r#", "use_dora": true"#, "DoRA"),
        (r#", "fan_in_fan_out": true"#, "fan_in_fan_out"),
        (r#", "modules_to_save": ["lm_head"]"#, "modules_to_save"),
        (r#", "rank_pattern": {"q_proj": 8}"#, "rank_pattern"),
    ] {
        expect(read(&adapter_config(extra), &lora), needle);
    }
    expect(
        read(&ok.replace(r#""bias": "none""#, r#""bias": "all""#), &lora),
        "bias",
    );
    expect(read(&ok.replace("LORA", "IA3"), &lora), "IA3");
    expect(read("{", &lora), "adapter_config.json");
    expect(
        read(&ok.replace(&format!(r#""r": {RANK}"#), r#""r": 4"#), &lora),
        "another base model",
    );

    let mut missing_b = lora.clone();
    missing_b.retain(|k, _| !k.ends_with("layers.1.mlp.up_proj.lora_B.weight"));
    expect(read(&ok, &missing_b), "missing");

    let mut head = lora.clone();
    head.insert(
        "base_model.model.lm_head.lora_A.weight".into(),
        (vec![RANK, 32], vec![0.0; RANK * 32]),
    );
    expect(read(&ok, &head), "lm_head");

    let mut beyond = lora.clone();
    beyond.insert(
        "base_model.model.model.layers.9.mlp.up_proj.lora_A.weight".into(),
        (vec![RANK, 32], vec![0.0; RANK * 32]),
    );
    expect(read(&ok, &beyond), "has no blk.9.ffn_up.weight");

    let mut wrong = lora.clone();
    wrong.insert(
        "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight".into(),
        (vec![47, RANK], vec![0.0; 47 * RANK]),
    );
    expect(read(&ok, &wrong), "another base model");

    let mut nan = lora.clone();
    nan.get_mut("base_model.model.model.layers.0.mlp.up_proj.lora_B.weight")
        .unwrap()
        .1[0] = f32::NAN;
    expect(read(&ok, &nan), "non-finite");

    let mut dora = lora.clone();
    dora.insert(
        "base_model.model.model.layers.0.mlp.up_proj.lora_magnitude_vector".into(),
        (vec![48], vec![1.0; 48]),
    );
    expect(read(&ok, &dora), "not a LoRA factor");

    expect(
        LoraAdapter::from_peft(ok.as_bytes(), b"garbage", &file),
        "safetensors",
    );
}

/// What a merge keeps of the adapter's change: all of it in F32, nearly all in Q8_0, and
/// next to nothing when a change far below the weights' 4-bit step is re-quantized to Q4_0.
#[test]
fn merging_reports_how_much_of_the_change_the_stored_weights_keep() {
    use lilypad_gguf::GgufWriter;
    use lilypad_gguf::peft::{LoraTensor, MergedType};
    let mut rng = StdRng::seed_from_u64(7);
    let (n_out, n_in, rank) = (64usize, 64usize, 4usize);
    let weight = random(&mut rng, &[n_out, n_in]);
    let mut w = GgufWriter::new();
    w.tensor(
        "blk.0.attn_q.weight",
        &[n_in as u64, n_out as u64],
        GgmlType::Q4_0,
        lilypad_gguf::quantize(GgmlType::Q4_0, &weight).unwrap(),
    )
    .unwrap();
    let base = w.to_bytes();
    let file = GgufFile::read(&base).unwrap();
    // B·A of about `size` per weight (the weights are about 0.5, their Q4_0 step about 0.14).
    let adapter = |size: f32| LoraAdapter {
        rank,
        alpha: rank as f32,
        scale: 1.0,
        base_model: None,
        tensors: vec![LoraTensor {
            target: "blk.0.attn_q.weight".into(),
            rank,
            n_in,
            n_out,
            a: random(&mut StdRng::seed_from_u64(1), &[rank, n_in]),
            b: random(&mut StdRng::seed_from_u64(2), &[n_out, rank])
                .iter()
                .map(|b| b * size)
                .collect(),
        }],
    };
    let merged = |size: f32, to: MergedType| adapter(size).merge_as(&file, &base, to).unwrap();

    let f32 = merged(0.1, MergedType::F32);
    assert!(
        (f32.kept - 1.0).abs() < 1e-5 && f32.error < 1e-5,
        "kept {} error {}",
        f32.kept,
        f32.error
    );
    let q8 = merged(0.1, MergedType::Type(GgmlType::Q8_0));
    assert!(
        q8.kept > 0.95 && q8.error < 0.1,
        "kept {} error {}",
        q8.kept,
        q8.error
    );
    let q4 = merged(0.002, MergedType::Base);
    assert!(
        q4.kept < 0.5 && q4.error > 0.5,
        "kept {} error {}",
        q4.kept,
        q4.error
    );
    // An untrained adapter (B = 0) changes nothing and loses nothing.
    let none = merged(0.0, MergedType::Base);
    assert_eq!((none.kept, none.error), (1.0, 0.0));
}
