//! Many sequences per step: every sequence's logits in a batched decode step equal the same
//! sequence run alone (within the kernels' tolerance), for Llama, Qwen3 and Qwen3.5 — with
//! prompts of different lengths, a sequence that joins mid-way, a fork of another sequence's
//! state, and a slot reused after its sequence left. Sampling in a batch gives each sequence
//! its own parameters and draw.
//!
//! The models are the tiny reference fixtures (tests/fixtures/qwen, tests/fixtures/lora),
//! whose single-sequence outputs are themselves checked against transformers and llama.cpp.

use lilypad_engine::ops::sample::reference_sample;
use lilypad_engine::{BatchToken, EngineError, Logits, Model, ModelOptions, SamplingParams};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen::{assert_close, load_model};
use lilypad_tests::repo_root;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MODELS: [&str; 4] = [
    "lora/llama-tiny/model/model.gguf",
    "qwen/qwen3-tiny/model.gguf",
    "qwen/qwen35-tiny/model.gguf",
    "qwen/qwen35-tiny/model-q8_0.gguf",
];

fn open(path: &str) -> (GgufFile, MmapSource) {
    let src = MmapSource::open(repo_root().join("tests/fixtures").join(path)).unwrap();
    (GgufFile::read(&src).unwrap(), src)
}

fn model(path: &str, sequences: u32) -> Option<(Model, u32)> {
    let (file, src) = open(path);
    let opts = ModelOptions {
        context: Some(64),
        max_batch: 16,
        sequences,
        ..Default::default()
    };
    let m = load_model(&file, &src, &opts)?;
    let vocab = m.config.vocab();
    Some((m, vocab))
}

/// Logits of `tokens` run alone: a prefill of `prefill` tokens, then one token at a time.
/// Row i scores the token after tokens[..=i], for i ≥ prefill − 1.
fn alone(path: &str, tokens: &[u32], prefill: usize) -> Vec<Vec<f32>> {
    let (mut m, vocab) = model(path, 1).unwrap();
    let mut rows = vec![Vec::new(); prefill - 1];
    rows.push(pollster::block_on(m.eval(&tokens[..prefill], Logits::Last)).unwrap());
    for &t in &tokens[prefill..] {
        rows.push(pollster::block_on(m.eval(&[t], Logits::Last)).unwrap());
    }
    assert!(
        rows.iter()
            .skip(prefill - 1)
            .all(|r| r.len() == vocab as usize)
    );
    rows
}

fn argmax(row: &[f32]) -> u32 {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
        .unwrap() as u32
}

/// One sequence of the scenario: its tokens (prompt then continuation, teacher-forced), its
/// prompt length, and the decode step at which it joins.
struct Seq {
    tokens: Vec<u32>,
    prompt: usize,
    joins: usize,
}

#[test]
fn batched_sequences_equal_each_run_alone() {
    for path in MODELS {
        let Some((mut m, vocab)) = model(path, 4) else {
            return;
        };
        let mut rng = StdRng::seed_from_u64(11);
        let mut random =
            |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(0..vocab)).collect() };
        // Slot 0 and 1 from the start (prompts of 5 and 11 tokens), slot 2 joins at step 3
        // (prompt 8, crossing the chunked form's boundary with one prefill tile left over).
        let seqs = [
            Seq {
                tokens: random(5 + 9),
                prompt: 5,
                joins: 0,
            },
            Seq {
                tokens: random(11 + 9),
                prompt: 11,
                joins: 0,
            },
            Seq {
                tokens: random(8 + 6),
                prompt: 8,
                joins: 3,
            },
        ];
        let reference: Vec<_> = seqs
            .iter()
            .map(|s| alone(path, &s.tokens, s.prompt))
            .collect();
        let mut fed = vec![0usize; seqs.len()];
        for step in 0..9 {
            for (slot, s) in seqs.iter().enumerate() {
                if s.joins == step {
                    let last = pollster::block_on(m.eval_sequence(
                        slot as u32,
                        &s.tokens[..s.prompt],
                        Logits::Last,
                    ))
                    .unwrap();
                    assert_close(
                        &last,
                        &reference[slot][s.prompt - 1],
                        &format!("{path}: prefill of {slot}"),
                    );
                    fed[slot] = s.prompt;
                }
            }
            let batch: Vec<(u32, u32)> = seqs
                .iter()
                .enumerate()
                .filter(|(i, s)| s.joins <= step && fed[*i] < s.tokens.len())
                .map(|(i, s)| (i as u32, s.tokens[fed[i]]))
                .collect();
            let logits = pollster::block_on(m.eval_batch(&batch)).unwrap();
            for (row, &(slot, _)) in logits.chunks_exact(vocab as usize).zip(&batch) {
                let i = slot as usize;
                assert_close(
                    row,
                    &reference[i][fed[i]],
                    &format!("{path}: step {step}, sequence {slot}"),
                );
                fed[i] += 1;
            }
        }
        for (slot, s) in seqs.iter().enumerate() {
            assert_eq!(m.sequence_tokens(slot as u32), &s.tokens[..fed[slot]]);
        }

        // A fork of sequence 0 into slot 3 continues from its state with other tokens; slot 1
        // is released and a new sequence starts in it.
        m.fork(0, 3).unwrap();
        let (a, b) = (&seqs[0].tokens[..fed[0]], random(4));
        let forked: Vec<u32> = a.iter().chain(&b).copied().collect();
        let fresh = random(6 + 3);
        let fork_ref = alone(path, &forked, a.len() - 1);
        let fresh_ref = alone(path, &fresh, 6);
        m.release(1);
        pollster::block_on(m.eval_sequence(1, &fresh[..6], Logits::None)).unwrap();
        for k in 0..3 {
            let logits = pollster::block_on(m.eval_batch(&[(3, b[k]), (1, fresh[6 + k])])).unwrap();
            let (r3, r1) = logits.split_at(vocab as usize);
            assert_close(
                r3,
                &fork_ref[a.len() + k],
                &format!("{path}: fork, step {k}"),
            );
            assert_close(
                r1,
                &fresh_ref[6 + k],
                &format!("{path}: reused slot, step {k}"),
            );
        }
        eprintln!("{path}: batched steps equal the sequences run alone");
    }
}

#[test]
fn batch_sampling_uses_each_sequences_parameters() {
    let path = MODELS[1];
    let Some((mut m, vocab)) = model(path, 4) else {
        return;
    };
    let prompts: [&[u32]; 3] = [&[1, 2, 3], &[7, 8, 9, 10, 11], &[400, 17]];
    let refs: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| alone(path, p, p.len()).pop().unwrap())
        .collect();
    for (slot, p) in prompts.iter().enumerate() {
        pollster::block_on(m.eval_sequence(slot as u32, &p[..p.len() - 1], Logits::None)).unwrap();
    }
    let greedy = SamplingParams::greedy();
    let warm = SamplingParams {
        temperature: 1.5,
        top_k: 40,
        seed: 3,
        ..SamplingParams::greedy()
    };
    let hot = SamplingParams {
        temperature: 2.0,
        top_p: 0.9,
        repeat_penalty: 1.3,
        ..SamplingParams::greedy()
    };
    let params = [&greedy, &warm, &hot];
    let us = [0.0, 0.37, 0.81];
    let items: Vec<BatchToken> = (0..3)
        .map(|i| BatchToken {
            seq: i as u32,
            token: *prompts[i].last().unwrap(),
            params: params[i],
            u: us[i],
            history: prompts[i],
        })
        .collect();
    let got = pollster::block_on(m.sample_batch(&items)).unwrap();
    for i in 0..3 {
        let want = reference_sample(&refs[i], params[i], prompts[i], us[i]);
        assert_eq!(got[i], want, "sequence {i}");
    }
    assert_eq!(got[0], argmax(&refs[0]));
    assert!(got.iter().all(|&t| t < vocab));

    // A sequence twice in one step, or a slot the model does not have, is refused.
    let twice = [items[0].clone(), items[0].clone()];
    let err = pollster::block_on(m.sample_batch(&twice)).unwrap_err();
    assert!(matches!(err, EngineError::Sequence(_)), "{err}");
    let err = pollster::block_on(m.eval_batch(&[(9, 1)])).unwrap_err();
    assert!(matches!(err, EngineError::Sequence(_)), "{err}");
    assert!(m.fork(0, 0).is_err() && m.fork(0, 4).is_err());
}

/// `ChatSession::complete_many`: n samples of one chat request decoded together equal n
/// single-sequence generations with seeds seed, seed + 1, … (greedy: n equal answers).
#[test]
fn chat_samples_equal_single_generations() {
    use lilypad_agent::{LanguageModel, Message, Request, Sampling};
    use lilypad_chat::ChatSession;
    use lilypad_tokenizer::TextTokenizer;

    let (file, src) = open(MODELS[2]);
    let opts = ModelOptions {
        context: Some(128),
        max_batch: 16,
        sequences: 3,
        ..Default::default()
    };
    let Some(model) = load_model(&file, &src, &opts) else {
        return;
    };
    let tok = TextTokenizer::from_gguf(&file.metadata).unwrap();
    let mut chat = ChatSession::new(model, tok, "qwen35-tiny").unwrap();
    let messages = [Message::user("The river carried boats of salt.")];
    for sampling in [
        Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: 5,
            ..Sampling::default()
        },
    ] {
        let request = Request {
            messages: &messages,
            tools: &[],
            sampling,
            max_tokens: 10,
            enable_thinking: false,
        };
        let many = pollster::block_on(chat.complete_many(&request, 3)).unwrap();
        let prompt = chat.prompt_text(&request).unwrap();
        for (i, (completion, tokens)) in many.iter().enumerate() {
            let one = Sampling {
                seed: sampling.seed + i as u64,
                ..sampling
            };
            let (single, single_tokens) = pollster::block_on(chat.complete_prompt(
                &prompt,
                one,
                10,
                &mut |_| true,
                &mut |_| true,
            ))
            .unwrap();
            assert_eq!(
                tokens, &single_tokens,
                "sample {i} at temperature {}",
                sampling.temperature
            );
            assert_eq!(completion.text, single.text);
            assert_eq!(completion.finish, single.finish);
        }
        if sampling.temperature == 0.0 {
            assert!(many.iter().all(|(_, t)| t == &many[0].1));
        } else {
            assert!(
                many.iter().any(|(_, t)| t != &many[0].1),
                "different seeds, different samples"
            );
        }
        // With transcripts (what a trainer reads): each equals the one a single chat turn
        // with that seed leaves.
        let group = pollster::block_on(chat.complete_group(&request, 3)).unwrap();
        for (i, (completion, transcript)) in group.iter().enumerate() {
            chat.reset();
            let _ = chat.take_transcript();
            let one = Request {
                sampling: Sampling {
                    seed: sampling.seed + i as u64,
                    ..sampling
                },
                ..request
            };
            let single = pollster::block_on(chat.complete(&one, &mut |_| true)).unwrap();
            assert_eq!(transcript, &chat.take_transcript(), "sample {i}");
            assert_eq!(completion.text, single.text);
            assert!(transcript.generated.iter().any(|&g| g));
        }
    }
}
