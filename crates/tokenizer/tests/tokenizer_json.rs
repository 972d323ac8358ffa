//! A checkpoint folder's `tokenizer.json` comes from wherever the folder came from: a damaged
//! or hostile one is an error, never a panic.

use std::path::PathBuf;

use lilypad_tokenizer::{TextTokenizer, TokenizerError};

fn fixture() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen/qwen3-tiny/tokenizer.json");
    std::fs::read(path).unwrap()
}

fn load(bytes: &[u8]) -> Result<TextTokenizer, TokenizerError> {
    TextTokenizer::from_tokenizer_json(bytes, false, None, Some("<|im_end|>"))
}

#[test]
fn the_fixture_loads_and_round_trips() {
    let tok = load(&fixture()).unwrap();
    let text = "def f(x):\n    return x";
    let ids = tok.encode(text, false).unwrap();
    assert!(!ids.is_empty());
    assert_eq!(tok.decode(&ids).unwrap(), text);
}

/// Found by the `tokenizer_json` fuzz target: tokenizers reads the decoder's object with
/// `expect`, so a syntax error inside it panicked.
#[test]
fn a_syntax_error_inside_the_decoder_is_an_error() {
    let text = String::from_utf8(fixture()).unwrap();
    // `"add_prefix_space": true` without its colon, in the decoder's object.
    let decoder = "\"decoder\": {\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\":";
    let broken = text.replacen(decoder, decoder.trim_end_matches(':'), 1);
    assert_ne!(broken, text, "the fixture's decoder changed");
    let err = load(broken.as_bytes())
        .err()
        .expect("a broken decoder is refused");
    assert!(matches!(err, TokenizerError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("not JSON"), "{err}");
}

/// Found by the `tokenizer_json` fuzz target: a byte that is not UTF-8 inside a string of the
/// decoder's object (its type, "B\x99teLevel") passed a check that skipped over strings, and
/// tokenizers' `expect` panicked on it.
#[test]
fn a_byte_that_is_not_utf8_inside_the_decoder_is_an_error() {
    let bytes = fixture();
    let decoder = b"\"decoder\": {\n    \"type\": \"ByteLevel\"";
    let at = bytes
        .windows(decoder.len())
        .position(|w| w == decoder)
        .expect("the fixture's decoder changed");
    let mut broken = bytes.clone();
    broken[at + decoder.len() - "yteLevel\"".len()] = 0x99;
    let err = load(&broken).err().expect("a broken decoder is refused");
    assert!(matches!(err, TokenizerError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("not JSON"), "{err}");
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = fixture();
    for end in (0..bytes.len() - 1).step_by(37) {
        assert!(
            load(&bytes[..end]).is_err(),
            "cut at {end} of {}",
            bytes.len()
        );
    }
}
