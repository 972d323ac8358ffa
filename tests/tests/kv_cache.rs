//! The f16 KV cache (the default) against the f32 one on the reference fixtures
//! (tests/fixtures/qwen/README.md): dense Qwen3 and hybrid Qwen3.5 must reproduce
//! transformers' f32 logits within the same tolerance either way ([`qwen::TOL`]: max |Δ| /
//! max(1, max |reference|) ≤ 1e-3 per position), over all 80 tokens in one prefill and one
//! token at a time. The f16 cache rounds every K and V value to 11 significant bits, so its
//! logits differ from the f32 cache's (checked, so the test knows which cache it ran), and
//! it takes half the memory.

use lilypad_engine::{DType, Logits, Model};
use lilypad_tests::qwen::{Fixture, TOL};

fn eval(m: &mut Model, tokens: &[u32], want: Logits) -> Vec<f32> {
    pollster::block_on(m.eval(tokens, want)).unwrap()
}

/// Errors against transformers of each cache type, prefill and decode, as (kv, max relative).
fn compare(name: &str) {
    let f = Fixture::load(name);
    let tokens = f.tokens();
    let mut prefill = Vec::new();
    for kv in [DType::F32, DType::F16] {
        let Some(mut m) = f.model_with_kv(256, 128, kv) else {
            return;
        };
        assert_eq!(m.kv_cache, kv);
        let all = eval(&mut m, &tokens, Logits::All);
        let (_, rel_prefill) = f.check(&all, 0, &format!("{name}, {kv} KV cache, prefill"));
        m.reset();
        let mut one_by_one = Vec::new();
        for &t in &tokens {
            one_by_one.extend(eval(&mut m, &[t], Logits::Last));
        }
        let (_, rel_decode) = f.check(&one_by_one, 0, &format!("{name}, {kv} KV cache, decode"));
        eprintln!(
            "{name}: {kv} KV cache {} bytes, worst relative error {:.3e} (tolerance {TOL:.0e})",
            m.plan.kv_cache,
            rel_prefill.max(rel_decode)
        );
        prefill.push((m.plan.kv_cache, all));
    }
    let [(bytes32, logits32), (bytes16, logits16)] = &prefill[..] else {
        unreachable!()
    };
    assert_eq!(*bytes16 * 2, *bytes32, "{name}: f16 KV cache bytes");
    let moved = logits32
        .iter()
        .zip(logits16)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("{name}: f16 vs f32 KV cache, max |Δ logit| {moved:.3e}");
    assert!(
        moved > 0.0,
        "{name}: the f16 cache gave the f32 cache's logits bit for bit"
    );
}

#[test]
fn qwen3_f16_kv_cache_matches_transformers() {
    compare("qwen3-tiny");
}

#[test]
fn qwen35_f16_kv_cache_matches_transformers() {
    compare("qwen35-tiny");
}
