//! A long prompt reports its progress and can be stopped between its steps
//! (`Model::generate_observed`, `Model::prefill`): the reports rise step by step to the whole
//! prompt, the tokens are those of `generate`, a stop leaves the model holding exactly the
//! prompt tokens evaluated so far, and asking again goes on from there to the same tokens and
//! logits as an uninterrupted run — for Llama, Qwen3 and Qwen3.5 (recurrent state).

use lilypad_engine::{Generation, Logits, Model, ModelOptions, SamplingParams};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen::{assert_close, load_model};
use lilypad_tests::repo_root;

const MODELS: [&str; 3] = [
    "lora/llama-tiny/model/model.gguf",
    "qwen/qwen3-tiny/model.gguf",
    "qwen/qwen35-tiny/model.gguf",
];

/// Tokens per step: a 45-token prompt takes six.
const STEP: u32 = 8;

fn model(path: &str) -> Option<Model> {
    let src = MmapSource::open(repo_root().join("tests/fixtures").join(path)).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let opts = ModelOptions {
        context: Some(96),
        max_batch: STEP,
        ..Default::default()
    };
    load_model(&file, &src, &opts)
}

fn prompt(vocab: u32) -> Vec<u32> {
    (0..45u32).map(|i| (i * 7919 + 11) % vocab).collect()
}

fn greedy_tokens(m: &mut Model, prompt: &[u32]) -> Vec<u32> {
    let sp = SamplingParams::greedy();
    let g = pollster::block_on(m.generate(prompt, &sp, 6, &|_| false, &mut |_| true)).unwrap();
    g.tokens
}

/// Greedy tokens after `prompt`, and every progress report `(done, total)` on the way.
fn observed(m: &mut Model, prompt: &[u32], n: usize) -> (Generation, Vec<(usize, usize)>) {
    let mut reports = Vec::new();
    let g = pollster::block_on(m.generate_observed(
        prompt,
        &SamplingParams::greedy(),
        n,
        &|_| false,
        &mut |done, total| {
            reports.push((done, total));
            true
        },
        &mut |_| true,
    ))
    .unwrap();
    (g, reports)
}

#[test]
fn a_long_prompt_reports_each_step_and_ends_with_all_of_it() {
    for path in MODELS {
        let Some(mut m) = model(path) else { return };
        let prompt = prompt(m.config.vocab());
        let want = greedy_tokens(&mut m, &prompt);
        m.reset();
        let (g, reports) = observed(&mut m, &prompt, 6);
        assert_eq!(g.tokens, want, "{path}: the tokens of generate");
        assert!(!g.prompt_stopped);
        // The last step (which samples) takes the prompt's last STEP tokens; the steps before
        // it report as they finish, then the whole prompt is reported.
        let total = prompt.len();
        let head = total - STEP as usize;
        let steps: Vec<(usize, usize)> = (STEP as usize..head)
            .step_by(STEP as usize)
            .chain([head, total])
            .map(|done| (done, total))
            .collect();
        assert_eq!(reports, steps, "{path}");

        // A prompt that extends the cached one reports only its new tokens.
        let mut longer = prompt.clone();
        longer.extend(&g.tokens);
        longer.extend((0..20u32).map(|i| (i * 31 + 5) % m.config.vocab()));
        let (g, reports) = observed(&mut m, &longer, 1);
        let pending = longer.len() - g.prompt_reused;
        assert_eq!(g.prompt_evaluated, pending);
        assert_eq!(reports.last(), Some(&(pending, pending)), "{path}");
        // All but the last generated token were evaluated while generating.
        assert_eq!(pending, 1 + 20, "{path}");
    }
}

#[test]
fn a_stopped_prompt_keeps_what_was_read_and_goes_on_from_there() {
    for path in MODELS {
        for stop_at in [1usize, 3] {
            let Some(mut m) = model(path) else { return };
            let prompt = prompt(m.config.vocab());
            let sp = SamplingParams::greedy();
            let mut heard = 0;
            let mut tokens_seen = 0;
            let g = pollster::block_on(m.generate_observed(
                &prompt,
                &sp,
                6,
                &|_| false,
                &mut |_, _| {
                    heard += 1;
                    heard < stop_at
                },
                &mut |_| {
                    tokens_seen += 1;
                    true
                },
            ))
            .unwrap();
            assert!(g.prompt_stopped, "{path}");
            assert!(g.tokens.is_empty() && tokens_seen == 0, "{path}: no token");
            assert_eq!(heard, stop_at);
            // The step reported and at most the one queued behind it.
            let read = stop_at * STEP as usize;
            assert!(
                g.prompt_evaluated == read || g.prompt_evaluated == read + STEP as usize,
                "{path}: {} evaluated after {stop_at} reports",
                g.prompt_evaluated
            );
            assert_eq!(m.tokens(), &prompt[..g.prompt_evaluated], "{path}");

            // Asked again, it evaluates only the rest, and answers as a fresh model does.
            let g2 =
                pollster::block_on(m.generate(&prompt, &sp, 6, &|_| false, &mut |_| true)).unwrap();
            assert_eq!(g2.prompt_reused, g.prompt_evaluated, "{path}");
            let mut fresh = model(path).unwrap();
            assert_eq!(
                g2.tokens,
                greedy_tokens(&mut fresh, &prompt),
                "{path}: stopped at report {stop_at}"
            );
            let next = [g2.tokens[g2.tokens.len() - 1]];
            let got = pollster::block_on(m.eval(&next, Logits::Last)).unwrap();
            let want = pollster::block_on(fresh.eval(&next, Logits::Last)).unwrap();
            // The same kernels on the same tokens; only the steps' split differs (TOL).
            assert_close(&got, &want, path);
        }
    }
}
