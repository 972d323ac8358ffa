//! Bad input gets a typed error before any GPU work: broken files, unsupported quant types,
//! models too large for the adapter, no adapter, bad token ids, a full context.

use lilypad_engine::{AdapterOptions, EngineError, GpuContext, Logits, Model, ModelOptions};
use lilypad_gguf::{GgmlType, GgufFile, GgufWriter, Value, quantize};
use lilypad_tests::{copy_gguf, gpu, smollm2, smollm2_path};

/// A 2-layer llama GGUF with zero weights; `q_type` is the type of every attn_q.
fn tiny_llama(q_type: GgmlType) -> Vec<u8> {
    let (e, f, vocab) = (64u64, 128u64, 96u64);
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()));
    for (k, v) in [
        ("block_count", 2u32),
        ("embedding_length", 64),
        ("feed_forward_length", 128),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("context_length", 256),
    ] {
        w.metadata(&format!("llama.{k}"), Value::U32(v));
    }
    let zeros = |ty: GgmlType, n: u64| {
        if ty == GgmlType::F32 || ty == GgmlType::Q8_0 || ty == GgmlType::Q4_0 {
            quantize(ty, &vec![0.0; n as usize]).unwrap()
        } else {
            vec![0u8; ty.row_bytes(n).unwrap() as usize]
        }
    };
    let mut t = |name: &str, dims: &[u64], ty: GgmlType| {
        w.tensor(name, dims, ty, zeros(ty, dims.iter().product()))
            .unwrap()
    };
    t("token_embd.weight", &[e, vocab], GgmlType::Q8_0);
    t("output_norm.weight", &[e], GgmlType::F32);
    for i in 0..2 {
        t(&format!("blk.{i}.attn_norm.weight"), &[e], GgmlType::F32);
        t(&format!("blk.{i}.ffn_norm.weight"), &[e], GgmlType::F32);
        t(&format!("blk.{i}.attn_q.weight"), &[e, e], q_type);
        t(&format!("blk.{i}.attn_k.weight"), &[e, 32], GgmlType::Q4_0);
        t(&format!("blk.{i}.attn_v.weight"), &[e, 32], GgmlType::Q4_0);
        t(
            &format!("blk.{i}.attn_output.weight"),
            &[e, e],
            GgmlType::Q4_0,
        );
        t(&format!("blk.{i}.ffn_gate.weight"), &[e, f], GgmlType::Q4_0);
        t(&format!("blk.{i}.ffn_up.weight"), &[e, f], GgmlType::Q4_0);
        t(&format!("blk.{i}.ffn_down.weight"), &[f, e], GgmlType::Q4_0);
    }
    w.to_bytes()
}

fn load(bytes: &[u8], opts: &ModelOptions) -> Option<Result<Model, EngineError>> {
    let ctx = gpu()?;
    let file = GgufFile::read(&bytes.to_vec()).unwrap();
    Some(pollster::block_on(Model::load(
        ctx,
        &file,
        &bytes.to_vec(),
        opts,
        &mut |_| {},
    )))
}

#[test]
fn tiny_model_loads_and_runs() {
    let Some(r) = load(&tiny_llama(GgmlType::Q4_0), &ModelOptions::default()) else {
        return;
    };
    let mut m = r.unwrap();
    let logits = pollster::block_on(m.eval(&[1, 2, 3], Logits::Last)).unwrap();
    assert_eq!(logits.len(), 96);
}

#[test]
fn unsupported_quant_type_is_named() {
    let Some(r) = load(&tiny_llama(GgmlType::Q5_0), &ModelOptions::default()) else {
        return;
    };
    let err = r.err().expect("Q5_0 must be refused");
    assert!(matches!(err, EngineError::UnsupportedType { .. }), "{err}");
    assert!(
        err.to_string().contains("Q5_0") && err.to_string().contains("attn_q"),
        "{err}"
    );
}

#[test]
fn missing_tensor_is_named() {
    let bytes = tiny_llama(GgmlType::Q4_0);
    let Some(ctx) = gpu() else { return };
    let file = GgufFile::read(&bytes).unwrap();
    let bytes = copy_gguf(&file, &bytes, &|name| name == "blk.1.ffn_up.weight").to_bytes();
    let file = GgufFile::read(&bytes).unwrap();
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
        matches!(&err, EngineError::MissingTensor(n) if n == "blk.1.ffn_up.weight"),
        "{err}"
    );
}

#[test]
fn truncated_model_file_is_refused() {
    let Some(path) = smollm2_path() else { return };
    let bytes = std::fs::read(path).unwrap();
    for cut in [10, 1000, 3_000_000, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            GgufFile::read(&bytes[..cut].to_vec()).is_err(),
            "a file cut at {cut} bytes was accepted"
        );
    }
}

#[test]
fn context_larger_than_the_adapter_allows_is_refused_up_front() {
    let Some(ctx) = gpu() else { return };
    let Some(path) = smollm2_path() else { return };
    let src = lilypad_gguf::MmapSource::open(path).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let opts = ModelOptions {
        context: Some(1 << 22),
        ..Default::default()
    };
    let err = pollster::block_on(Model::load(ctx, &file, &src, &opts, &mut |_| {}))
        .err()
        .unwrap();
    assert!(matches!(err, EngineError::TooLarge { .. }), "{err}");
}

/// A plan larger than the memory it would live in is refused before anything is allocated,
/// naming both sizes: a GPU's device-local heap, or the machine's memory for a CPU adapter
/// (whose heap is nominal: lavapipe reports 2 GiB and is not held to it).
#[test]
fn a_model_larger_than_the_adapters_memory_is_refused_up_front() {
    let Some(ctx) = gpu() else { return };
    if ctx.adapter.backend == "Vulkan" {
        let memory = ctx.adapter.memory.expect("Vulkan reports its heaps");
        assert!(memory >= 256 << 20, "{}", ctx.adapter);
    }
    if ctx.adapter.device_type == "Cpu" && cfg!(target_os = "linux") {
        let host = ctx.adapter.host_memory.expect("/proc/meminfo says");
        assert!(host >= 512 << 20, "{}", ctx.adapter);
        assert!(
            ctx.adapter.to_string().contains(", system memory "),
            "{}",
            ctx.adapter
        );
    }
    let bytes = tiny_llama(GgmlType::Q4_0);
    let file = GgufFile::read(&bytes).unwrap();
    let cfg = lilypad_engine::ModelConfig::from_gguf(&file).unwrap();
    let plan = cfg.memory_plan(&file, 128, 8, lilypad_engine::DType::F16, false);
    let refused = |adapter: &lilypad_engine::AdapterSummary, what: &str| {
        let err = plan.check_memory(adapter, 128).unwrap_err();
        assert!(matches!(err, EngineError::TooLarge { .. }), "{err}");
        let message = err.to_string();
        let needed = lilypad_engine::error::human_bytes(plan.total());
        let allowed = lilypad_engine::error::human_bytes(plan.total() - 1);
        assert!(
            message.contains(&needed) && message.contains(&allowed) && message.contains(what),
            "{message}"
        );
    };
    let mut adapter = ctx.adapter.clone();
    // A GPU is held to its heap, whatever the machine has.
    adapter.device_type = "DiscreteGpu".into();
    adapter.memory = Some(plan.total() - 1);
    adapter.host_memory = Some(u64::MAX);
    refused(&adapter, "device memory");
    adapter.memory = Some(plan.total());
    assert!(plan.check_memory(&adapter, 128).is_ok());
    adapter.memory = None;
    assert!(plan.check_memory(&adapter, 128).is_ok());
    // A CPU adapter is held to the machine's memory, not to its nominal heap.
    adapter.device_type = "Cpu".into();
    adapter.memory = Some(1);
    adapter.host_memory = Some(plan.total() - 1);
    refused(&adapter, "the machine's memory");
    adapter.host_memory = Some(plan.total());
    assert!(plan.check_memory(&adapter, 128).is_ok());
    adapter.host_memory = None;
    assert!(plan.check_memory(&adapter, 128).is_ok());
}

#[test]
fn unknown_adapter_is_a_typed_error() {
    let opts = AdapterOptions {
        name: Some("no-such-gpu-anywhere".into()),
        ..AdapterOptions::default()
    };
    let err = pollster::block_on(GpuContext::new(&opts))
        .err()
        .expect("no adapter has that name");
    assert!(matches!(err, EngineError::NoAdapter { .. }), "{err}");
}

#[test]
fn bad_token_and_full_context_are_typed_errors() {
    let Some(m) = smollm2() else { return };
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    m.model.reset();
    let vocab = m.model.config.vocab();
    assert!(matches!(
        pollster::block_on(m.model.eval(&[vocab], Logits::Last)),
        Err(EngineError::BadToken { .. })
    ));
    let too_many = vec![1u32; m.model.context as usize + 1];
    assert!(matches!(
        pollster::block_on(m.model.eval(&too_many, Logits::None)),
        Err(EngineError::ContextFull { .. })
    ));
    assert!(
        m.model.tokens().is_empty(),
        "a refused step must not change the state"
    );
}

#[test]
fn prompt_longer_than_the_context_or_empty_is_refused_before_generating() {
    let Some(m) = smollm2() else { return };
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    m.model.reset();
    let context = m.model.context as usize;
    let greedy = lilypad_engine::SamplingParams::greedy();
    let generate = |model: &mut Model, prompt: &[u32]| {
        pollster::block_on(model.generate(prompt, &greedy, 4, &|_| false, &mut |_| true))
    };
    for len in [context + 1, 72_001] {
        match generate(&mut m.model, &vec![1u32; len]) {
            Err(EngineError::PromptTooLong { prompt, context: c }) => {
                assert_eq!((prompt, c), (len, context));
            }
            other => panic!("{len} tokens: {other:?}"),
        }
    }
    assert!(matches!(
        generate(&mut m.model, &[]),
        Err(EngineError::EmptyPrompt)
    ));
    assert!(m.model.tokens().is_empty(), "nothing was evaluated");
    // A prompt that fills the context still gives one token: it needs no position of its own.
    let generation = generate(&mut m.model, &vec![1u32; context]).unwrap();
    assert_eq!(generation.tokens.len(), 1);
    m.model.reset();
}
