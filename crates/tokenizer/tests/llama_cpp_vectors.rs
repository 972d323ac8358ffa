//! The tokenizer against llama.cpp's own test vectors: for each vocabulary-only GGUF in
//! llama.cpp's `models/` folder, every `.inp` text must give exactly the `.out` ids.
//! The vectors come from the llama-cpp-python sdist (`scripts/llama-cpp/build.sh --vectors-only`).
//! As in llama.cpp's `test-tokenizer-0`, texts are tokenized without BOS/EOS and without
//! parsing special-token text (`add_special = false`, `parse_special = false`).

use std::path::PathBuf;

use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tokenizer::TextTokenizer;

/// Separates the texts in a `.inp` file (llama.cpp's `tests/test-tokenizer-0.cpp`).
const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

/// llama.cpp's `models/` folder inside the extracted sdist, or `None` (with a notice) when
/// the vectors have not been fetched. `LILYPAD_REQUIRE_MODEL=1` turns that into a failure.
fn vectors_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("LILYPAD_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lilypad")))
        .unwrap_or_default();
    let dir = cache.join("llama.cpp-0.3.36/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models");
    if dir.join("ggml-vocab-gpt-2.gguf.inp").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var("LILYPAD_REQUIRE_MODEL").as_deref() != Ok("1"),
        "{} has no tokenizer vectors: run scripts/llama-cpp/build.sh --vectors-only",
        dir.display()
    );
    eprintln!(
        "skipping: {} is missing (`scripts/llama-cpp/build.sh --vectors-only` fetches them)",
        dir.display()
    );
    None
}

/// The (text, ids) pairs of one vocabulary, in file order.
fn read_cases(inp: &str, out: &str) -> Vec<(String, Vec<u32>)> {
    // A trailing separator ends the last text rather than starting an empty one.
    let texts: Vec<&str> = inp
        .strip_suffix(SEPARATOR)
        .unwrap_or(inp)
        .split(SEPARATOR)
        .collect();
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("token id"))
                .collect()
        })
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        ".inp and .out disagree on the case count"
    );
    texts.into_iter().map(str::to_string).zip(ids).collect()
}

/// Tokenizes every case of `ggml-vocab-{name}.gguf`; asserts that all match.
fn check_vocab(name: &str) {
    let Some(dir) = vectors_dir() else { return };
    let gguf = dir.join(format!("ggml-vocab-{name}.gguf"));
    let read = |ext: &str| {
        let p = format!("{}.{ext}", gguf.display());
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let cases = read_cases(&read("inp"), &read("out"));
    assert!(!cases.is_empty(), "{name}: no cases");

    let src = MmapSource::open(&gguf).unwrap();
    let file = GgufFile::read(&src).unwrap();
    assert!(file.tensors.is_empty(), "a vocabulary-only GGUF");
    let mut tok = TextTokenizer::from_gguf(&file.metadata).unwrap();
    tok.add_bos = false;

    let mut failures = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text, false).unwrap();
        if &got != want {
            failures.push(format!("  {text:?}\n    want {want:?}\n    got  {got:?}"));
            continue;
        }
        // The ids must also decode back to the text.
        let back = tok.decode(want).unwrap();
        if &back != text {
            failures.push(format!("  {text:?}\n    decodes to {back:?}"));
        }
    }
    let passed = cases.len() - failures.len();
    eprintln!(
        "{name}: {passed}/{} cases give llama.cpp's ids and decode back",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

macro_rules! vocab_tests {
    ($($test:ident => $name:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            check_vocab($name);
        }
    )*};
}

vocab_tests! {
    gpt_2 => "gpt-2",
    llama_bpe => "llama-bpe",
    qwen2 => "qwen2",
    qwen35 => "qwen35",
    command_r => "command-r",
    deepseek_coder => "deepseek-coder",
    deepseek_llm => "deepseek-llm",
    falcon => "falcon",
    mpt => "mpt",
    refact => "refact",
    starcoder => "starcoder",
    llama_spm => "llama-spm",
    phi_3 => "phi-3",
    gemma_4 => "gemma-4",
}
