//! Speculative decoding (`Model::set_draft`) gives exactly plain decoding's tokens, greedy and
//! sampled (with penalties), whatever the draft proposes: prompt lookup (which the tiny models'
//! repetitive output accepts often) and Qwen3.5's multi-token-prediction layer (random weights:
//! its drafts are mostly rejected, which exercises the other path). A stop or a declined token
//! leaves the model holding exactly the tokens before it, as plain decoding does, for Llama,
//! Qwen3 and Qwen3.5, whose recurrent state after the checked token comes back from the
//! checkpoint slot when the draft after it is rejected.

use lilypad_engine::{Draft, EngineError, Logits, Model, ModelOptions, SamplingParams};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen::{Fixture, assert_close, load_model, with_echo_mtp_layer, with_mtp_layer};
use lilypad_tests::{TINY_MODELS, repo_root, sampled_with_penalties};

const DRAFTS: [Draft; 3] = [
    Draft::Lookup { max: 1 },
    Draft::Lookup { max: 3 },
    Draft::Lookup { max: 8 },
];

fn options() -> ModelOptions {
    ModelOptions {
        context: Some(128),
        max_batch: 32,
        ..Default::default()
    }
}

fn model(path: &str) -> Option<Model> {
    let src = MmapSource::open(repo_root().join("tests/fixtures").join(path)).unwrap();
    let file = GgufFile::read(&src).unwrap();
    load_model(&file, &src, &options())
}

/// A prompt that repeats itself, as code under edit does: lookup drafts have something to find.
fn prompt(vocab: u32) -> Vec<u32> {
    let phrase: Vec<u32> = (0..6u32).map(|i| (i * 7919 + 11) % vocab).collect();
    [&phrase[..], &[3, 1][..], &phrase[..], &phrase[..2]].concat()
}

/// Generates up to `n` tokens after `prompt` from an empty cache; stops at `stop` or when
/// the caller declines the `take`-th token.
fn generate(
    m: &mut Model,
    prompt: &[u32],
    sp: &SamplingParams,
    n: usize,
    stop: Option<u32>,
    take: usize,
) -> Vec<u32> {
    m.reset();
    let mut seen = Vec::new();
    let generation =
        pollster::block_on(
            m.generate(prompt, sp, n, &|id| Some(id) == stop, &mut |id| {
                seen.push(id);
                seen.len() < take
            }),
        )
        .unwrap();
    assert_eq!(
        generation.tokens, seen,
        "every token is reported once, in order"
    );
    generation.tokens
}

/// After a generation the model holds the prompt and every generated token but the last; the
/// next step from there gives the logits of a model that never ran past it.
fn check_state(m: &mut Model, mut fresh: Model, prompt: &[u32], got: &[u32], what: &str) {
    let mut cached = prompt.to_vec();
    cached.extend_from_slice(&got[..got.len() - 1]);
    assert_eq!(m.tokens(), cached, "{what}: the tokens held");
    let next = pollster::block_on(m.eval(&got[got.len() - 1..], Logits::Last)).unwrap();
    let mut all = cached;
    all.push(*got.last().unwrap());
    let want = pollster::block_on(fresh.eval(&all, Logits::Last)).unwrap();
    assert_close(&next, &want, &format!("{what}: the next step's logits"));
}

#[test]
fn lookup_drafts_give_plain_decodings_tokens() {
    let (mut drafted, mut accepted) = (0, 0);
    for path in TINY_MODELS {
        let Some(mut m) = model(path) else { return };
        let prompt = prompt(m.config.vocab());
        for (what, sp) in [
            ("greedy", SamplingParams::greedy()),
            ("sampled", sampled_with_penalties()),
        ] {
            m.set_draft(None).unwrap();
            let want = generate(&mut m, &prompt, &sp, 48, None, usize::MAX);
            for draft in DRAFTS {
                m.set_draft(Some(draft)).unwrap();
                let got = generate(&mut m, &prompt, &sp, 48, None, usize::MAX);
                let what = format!("{path}, {what}, {draft}");
                assert_eq!(got, want, "{what}");
                let stats = m.speculative_stats();
                assert_eq!(stats.tokens, got.len(), "{what}");
                assert!(
                    stats.steps <= got.len() && stats.accepted <= stats.drafted,
                    "{what}"
                );
                assert_eq!(
                    stats.steps + stats.accepted,
                    got.len(),
                    "{what}: a step gives its kept drafts and one token"
                );
                drafted += stats.drafted;
                accepted += stats.accepted;
                let cached = m.tokens().len();
                assert_eq!(cached, prompt.len() + got.len() - 1, "{what}");
            }
        }
        m.set_draft(Some(Draft::Lookup { max: 4 })).unwrap();
        let got = generate(
            &mut m,
            &prompt,
            &sampled_with_penalties(),
            40,
            None,
            usize::MAX,
        );
        check_state(
            &mut m,
            model(path).unwrap(),
            &prompt,
            &got,
            &format!("{path}, lookup:4"),
        );
    }
    println!("lookup drafts: {accepted} of {drafted} kept");
    // Both paths ran: drafts kept and drafts rejected.
    assert!(
        accepted > 0 && accepted < drafted,
        "{accepted} of {drafted}"
    );
}

#[test]
fn a_stop_inside_a_kept_draft_leaves_exactly_the_tokens_before_it() {
    for path in TINY_MODELS {
        let Some(mut m) = model(path) else { return };
        let prompt = prompt(m.config.vocab());
        let sp = sampled_with_penalties();
        m.set_draft(None).unwrap();
        let free = generate(&mut m, &prompt, &sp, 40, None, usize::MAX);
        let at = (3..free.len())
            .find(|&i| !free[..i].contains(&free[i]))
            .expect("a token not seen before");
        for (what, stop, take) in [
            ("stop token", Some(free[at]), usize::MAX),
            ("declined", None, 9),
        ] {
            let end = if stop.is_some() { at + 1 } else { take };
            for draft in DRAFTS {
                m.set_draft(Some(draft)).unwrap();
                let got = generate(&mut m, &prompt, &sp, 40, stop, take);
                let what = format!("{path}, {what}, {draft}");
                assert_eq!(got, free[..end], "{what}");
                check_state(&mut m, model(path).unwrap(), &prompt, &got, &what);
            }
        }
    }
}

#[test]
fn the_mtp_layer_drafts_without_changing_the_tokens() {
    let f = Fixture::load("qwen35-tiny");
    let opts = ModelOptions {
        mtp: true,
        ..options()
    };
    // A random layer (its drafts rejected) and one that echoes (kept when the model repeats).
    let (mut drafted, mut accepted) = (0, 0);
    for (layer, bytes) in [
        ("random", with_mtp_layer(&f, None)),
        ("echo", with_echo_mtp_layer(&f)),
    ] {
        let file = GgufFile::read(&bytes).unwrap();
        let Some(mut m) = load_model(&file, &bytes, &opts) else {
            return;
        };
        let prompt = prompt(m.config.vocab());
        for (what, sp) in [
            ("greedy", SamplingParams::greedy()),
            ("sampled", sampled_with_penalties()),
        ] {
            let what = format!("{layer} layer, {what}");
            m.set_draft(None).unwrap();
            let want = generate(&mut m, &prompt, &sp, 48, None, usize::MAX);
            m.set_draft(Some(Draft::Mtp)).unwrap();
            let got = generate(&mut m, &prompt, &sp, 48, None, usize::MAX);
            assert_eq!(got, want, "mtp, {what}");
            let stats = m.speculative_stats();
            drafted += stats.drafted;
            accepted += stats.accepted;
            println!(
                "mtp, {what}: {} of {} drafts kept in {} steps",
                stats.accepted, stats.drafted, stats.steps
            );
            assert_eq!(stats.steps + stats.accepted, got.len(), "mtp, {what}");
            // A draft every step but the first (the prompt's) and perhaps the last (no room): a
            // rejection never leaves tokens to evaluate again (the state after the checked token
            // comes back from the checkpoint slot).
            assert!(stats.drafted + 2 >= stats.steps, "mtp, {what}: {stats:?}");

            assert_eq!(
                m.tokens().len(),
                prompt.len() + got.len() - 1,
                "mtp, {what}"
            );
        }

        // A stop in the middle: the state holds the tokens before it, MTP layer and all.
        let sp = sampled_with_penalties();
        m.set_draft(None).unwrap();
        let free = generate(&mut m, &prompt, &sp, 30, None, usize::MAX);
        m.set_draft(Some(Draft::Mtp)).unwrap();
        let got = generate(&mut m, &prompt, &sp, 30, Some(free[20]), usize::MAX);
        let end = free.iter().position(|&t| t == free[20]).unwrap() + 1;
        assert_eq!(got, free[..end], "{layer} layer, stopped");
        let fresh = load_model(&file, &bytes, &options()).unwrap();
        check_state(
            &mut m,
            fresh,
            &prompt,
            &got,
            &format!("{layer} layer, stopped"),
        );
    }
    assert!(
        accepted > 0 && accepted < drafted,
        "{accepted} of {drafted}"
    );

    // Without the layer loaded there is nothing to draft with.
    let bytes = with_mtp_layer(&f, None);
    let file = GgufFile::read(&bytes).unwrap();
    let Some(mut plain) = load_model(&file, &bytes, &options()) else {
        return;
    };
    let err = plain.set_draft(Some(Draft::Mtp)).unwrap_err();
    assert!(matches!(err, EngineError::Config(_)), "{err}");
    // A draft longer than a step can check is refused.
    let small = ModelOptions {
        max_batch: 4,
        ..options()
    };
    if let Some(mut m) = load_model(&file, &bytes, &small) {
        assert!(m.set_draft(Some(Draft::Lookup { max: 1 })).is_ok());
        let err = m.set_draft(Some(Draft::Lookup { max: 3 })).unwrap_err();
        assert!(err.to_string().contains("max_batch"), "{err}");
    }
}

/// A context that fills mid-draft: drafting stops where plain decoding stops, with the same
/// tokens (the draft is cut to the room left), for a position-cached and a recurrent model.
#[test]
fn a_full_context_ends_drafting_where_plain_decoding_ends() {
    for path in [TINY_MODELS[0], TINY_MODELS[2]] {
        let src = MmapSource::open(repo_root().join("tests/fixtures").join(path)).unwrap();
        let file = GgufFile::read(&src).unwrap();
        let opts = ModelOptions {
            context: Some(29),
            ..options()
        };
        let Some(mut m) = load_model(&file, &src, &opts) else {
            return;
        };
        let prompt = prompt(m.config.vocab());
        let mut run = |draft| {
            m.set_draft(draft).unwrap();
            let greedy = SamplingParams::greedy();
            generate(&mut m, &prompt, &greedy, 100, None, usize::MAX)
        };
        let want = run(None);
        let got = run(Some(Draft::Lookup { max: 8 }));
        assert_eq!(
            want.len(),
            29 - prompt.len() + 1,
            "{path}: plain decoding fills the context"
        );
        assert_eq!(got, want, "{path}");
        assert_eq!(m.tokens().len(), 29, "{path}");
    }
}
