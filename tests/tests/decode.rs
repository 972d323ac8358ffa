//! Decoding with steps queued ahead of the host (`Model::set_decode_depth`): every depth
//! gives exactly the tokens of a host-driven loop (one step per token, each token read back
//! before the next step), greedy and sampled with repetition and presence penalties (the
//! penalties then see tokens the host has not read yet); and a stop seen late leaves the model
//! holding exactly the tokens before it, so the next turn continues from the same state —
//! for Llama, Qwen3 and Qwen3.5, whose recurrent state is put back after the steps that ran
//! past the stop.

use lilypad_engine::ops::sample::reference_sample;
use lilypad_engine::{Logits, Model, ModelOptions, Rng, SamplingParams};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen::{assert_close, load_model};
use lilypad_tests::{TINY_MODELS, repo_root, sampled_with_penalties};

const DEPTHS: [u32; 4] = [1, 2, 4, 8];

fn model(path: &str) -> Option<Model> {
    let src = MmapSource::open(repo_root().join("tests/fixtures").join(path)).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let opts = ModelOptions {
        context: Some(96),
        max_batch: 16,
        ..Default::default()
    };
    load_model(&file, &src, &opts)
}

fn prompt(vocab: u32) -> Vec<u32> {
    (0..13u32).map(|i| (i * 7919 + 11) % vocab).collect()
}

/// The loop the queued decoder replaces: evaluate one token, read back what comes after it,
/// repeat. Greedy picks on the CPU (the arg-max of the logits read back); sampled picks use
/// `Model::next_token`, the GPU sampler driven from the host with the whole history each
/// step (that sampler is checked against `reference_sample` in the kernel tests, where a
/// near-tie in its f32 running mass is allowed to pick a neighbour).
fn host_loop(m: &mut Model, prompt: &[u32], sp: &SamplingParams, n: usize) -> Vec<u32> {
    m.reset();
    let mut rng = Rng::new(sp.seed);
    let mut history = prompt.to_vec();
    let mut feed = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < n {
        let id = if sp.is_greedy() {
            let logits = pollster::block_on(m.eval(&feed, Logits::Last)).unwrap();
            reference_sample(&logits, sp, &history, 0.0)
        } else {
            pollster::block_on(m.next_token(&feed, sp, &mut rng, &history)).unwrap()
        };
        out.push(id);
        history.push(id);
        feed = vec![id];
    }
    out
}

fn generate(
    m: &mut Model,
    prompt: &[u32],
    sp: &SamplingParams,
    n: usize,
    stop: Option<u32>,
    take: usize,
) -> Vec<u32> {
    let mut seen = 0;
    let generation =
        pollster::block_on(m.generate(prompt, sp, n, &|id| Some(id) == stop, &mut |_| {
            seen += 1;
            seen < take
        }))
        .unwrap();
    assert_eq!(
        generation.tokens.len(),
        seen,
        "every token is reported once"
    );
    generation.tokens
}

#[test]
fn every_depth_decodes_the_host_loops_tokens() {
    for path in TINY_MODELS {
        let Some(mut m) = model(path) else { return };
        let prompt = prompt(m.config.vocab());
        for (what, sp) in [
            ("greedy", SamplingParams::greedy()),
            ("sampled", sampled_with_penalties()),
        ] {
            let want = host_loop(&mut m, &prompt, &sp, 40);
            for depth in DEPTHS {
                m.set_decode_depth(depth).unwrap();
                m.reset();
                let got = generate(&mut m, &prompt, &sp, 40, None, usize::MAX);
                assert_eq!(got, want, "{path}, {what}, depth {depth}");
                // Every generated token but the last was evaluated, nothing more.
                let mut cached = prompt.clone();
                cached.extend_from_slice(&got[..got.len() - 1]);
                assert_eq!(m.tokens(), cached, "{path}, {what}, depth {depth}");
            }
        }
    }
}

/// Logits after `tokens` from a fresh model fed the same way as generation feeds them
/// (the prompt in one step, then one token per step).
fn fresh_logits(path: &str, prompt_len: usize, tokens: &[u32]) -> Vec<f32> {
    let mut m = model(path).unwrap();
    let mut logits = pollster::block_on(m.eval(&tokens[..prompt_len], Logits::Last)).unwrap();
    for &t in &tokens[prompt_len..] {
        logits = pollster::block_on(m.eval(&[t], Logits::Last)).unwrap();
    }
    logits
}

#[test]
fn a_late_stop_leaves_exactly_the_tokens_before_it() {
    for path in TINY_MODELS {
        let Some(mut m) = model(path) else { return };
        let prompt = prompt(m.config.vocab());
        let sp = sampled_with_penalties();
        m.set_decode_depth(1).unwrap();
        let free = generate(&mut m, &prompt, &sp, 30, None, usize::MAX);
        // A stop token first sampled mid-run, and a caller that declines the 9th token.
        let at = (5..free.len())
            .find(|&i| !free[..i].contains(&free[i]))
            .expect("a token not seen before");
        for (what, stop, take) in [
            ("stop token", Some(free[at]), usize::MAX),
            ("declined", None, 9),
        ] {
            let end = if stop.is_some() { at + 1 } else { take };
            for depth in DEPTHS {
                m.set_decode_depth(depth).unwrap();
                m.reset();
                let got = generate(&mut m, &prompt, &sp, 30, stop, take);
                assert_eq!(got, free[..end], "{path}, {what}, depth {depth}");
                let mut cached = prompt.clone();
                cached.extend_from_slice(&got[..got.len() - 1]);
                assert_eq!(m.tokens(), cached, "{path}, {what}, depth {depth}");
                // The next turn evaluates only the last token, from the state the model kept:
                // its logits are those of a model that never ran past the stop.
                let mut all = cached.clone();
                all.push(*got.last().unwrap());
                let next = pollster::block_on(m.eval(&all[cached.len()..], Logits::Last)).unwrap();
                let want = fresh_logits(path, prompt.len(), &all);
                assert_close(&next, &want, &format!("{path}, {what}, depth {depth}"));
            }
        }
    }
}
