//! Log-probabilities of given tokens computed on the GPU (`Model::log_probs`): checked
//! against log-softmax in f64 of transformers' own logits for the tiny Qwen3 and Qwen3.5
//! fixtures (tests/fixtures/qwen), over steps split into chunks and after a cached prefix,
//! and in another sequence slot.

use lilypad_engine::{DType, EngineError, ModelOptions};
use lilypad_tests::qwen::{Fixture, load_model};

/// log p in f64 from a row of reference logits.
fn log_prob(row: &[f32], target: u32) -> f64 {
    let m = row.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
    let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
    row[target as usize] as f64 - lse
}

#[test]
fn log_probs_match_transformers() {
    for name in ["qwen3-tiny", "qwen35-tiny"] {
        let f = Fixture::load(name);
        let tokens = f.tokens();
        let n = tokens.len();
        // Row i of the fixture scores the token after tokens[..=i].
        let want: Vec<f64> = (0..n - 1)
            .map(|i| log_prob(&f.logits[i * f.vocab..][..f.vocab], tokens[i + 1]))
            .collect();
        // The f32 KV cache, as for every reference check (`qwen::options`).
        let opts = ModelOptions {
            context: Some(128),
            max_batch: 16,
            sequences: 2,
            kv_cache: DType::F32,
            ..Default::default()
        };
        let Some(mut m) = load_model(&f.file, &f.src, &opts) else {
            return;
        };
        // All at once (chunks of 16), then a cached prefix of 30 and the rest, in slot 1.
        let all = pollster::block_on(m.log_probs(0, &tokens[..n - 1], &tokens[1..])).unwrap();
        pollster::block_on(m.eval_sequence(1, &tokens[..30], lilypad_engine::Logits::None))
            .unwrap();
        let rest = pollster::block_on(m.log_probs(1, &tokens[30..n - 1], &tokens[31..])).unwrap();
        let mut worst = 0f64;
        for (i, w) in want.iter().enumerate() {
            for (got, what) in [
                (all[i], "one pass"),
                (
                    *rest.get(i.wrapping_sub(30)).unwrap_or(&all[i]),
                    "after a prefix",
                ),
            ] {
                let d = (got as f64 - w).abs();
                assert!(d < 2e-3, "{name} {what}: position {i}: {got} vs {w}");
                worst = worst.max(d);
            }
        }
        assert!(
            want.iter().any(|&w| w < -1.0),
            "{name}: the targets are not all near-certain"
        );
        eprintln!(
            "{name}: {} log-probabilities, max |Δ| {worst:.2e}",
            want.len()
        );

        let err = pollster::block_on(m.log_probs(0, &[1, 2], &[3])).unwrap_err();
        assert!(matches!(err, EngineError::Shape { .. }), "{err}");
        let err = pollster::block_on(m.log_probs(0, &[1], &[f.vocab as u32])).unwrap_err();
        assert!(matches!(err, EngineError::BadToken { .. }), "{err}");
    }
}
