//! A Hugging Face `tokenizer.json` (a checkpoint folder's tokenizer) and a text to encode with
//! it. The input is the JSON's length (4 bytes, little-endian), the JSON, then the text. Any
//! input must give a tokenizer or an error, and encoding and decoding must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lilypad_tokenizer::TextTokenizer;

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (json, text) = rest.split_at(len);
    let Ok(tok) = TextTokenizer::from_tokenizer_json(json, true, Some("<|im_start|>"), Some("<|im_end|>")) else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    if let Ok(ids) = tok.encode(&text, true) {
        let _ = tok.decode(&ids);
    }
    let _ = tok.encode("def f(x):\n    return x  # <|im_start|> héllo", false);
});
