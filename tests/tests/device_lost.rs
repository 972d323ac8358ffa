//! A GPU device lost in the middle of a generation (destroyed here, as a driver reset, a
//! sleeping laptop or the browser would): the engine reports `DeviceLost` with its reason
//! instead of panicking or hanging, later calls on the dead device say the same, and a new
//! device loads the model again in the same process and generates what it did before.

use lilypad_engine::{
    AdapterOptions, EngineError, GpuContext, Model, ModelOptions, SamplingParams,
};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::{gpu, smollm2_path};
use lilypad_tokenizer::TextTokenizer;

#[test]
fn a_lost_device_is_reported_and_the_model_loads_again() {
    let (Some(path), Some(_)) = (smollm2_path(), gpu()) else {
        return;
    };
    let src = MmapSource::open(&path).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let tok = TextTokenizer::from_gguf(&file.metadata).unwrap();
    let prompt = tok.encode("The capital of France is", true).unwrap();
    let greedy = SamplingParams::greedy();
    // A device of its own: the other tests' shared one must live on.
    let load = || {
        let ctx = pollster::block_on(GpuContext::new(&AdapterOptions::from_env())).unwrap();
        let opts = ModelOptions {
            context: Some(128),
            ..Default::default()
        };
        let model = pollster::block_on(Model::load(ctx.clone(), &file, &src, &opts, &mut |_| {}));
        (ctx, model.unwrap())
    };
    let generate = |model: &mut Model, on_token: &mut dyn FnMut(u32) -> bool| {
        model.reset();
        pollster::block_on(model.generate(&prompt, &greedy, 8, &|_| false, on_token))
    };

    let (ctx, mut model) = load();
    let before = generate(&mut model, &mut |_| true).unwrap().tokens;
    assert_eq!(before.len(), 8);

    let mut seen = 0;
    let lost = generate(&mut model, &mut |_| {
        seen += 1;
        if seen == 3 {
            ctx.destroy();
        }
        true
    });
    match lost {
        Err(EngineError::DeviceLost(reason)) => {
            assert!(
                reason.contains("Destroyed"),
                "the reason is given: {reason}"
            )
        }
        other => panic!("expected DeviceLost, got {other:?}"),
    }
    assert_eq!(seen, 3, "no token came after the loss");
    assert!(matches!(
        generate(&mut model, &mut |_| true),
        Err(EngineError::DeviceLost(_))
    ));
    drop(model);

    let (_, mut again) = load();
    assert_eq!(generate(&mut again, &mut |_| true).unwrap().tokens, before);
}
