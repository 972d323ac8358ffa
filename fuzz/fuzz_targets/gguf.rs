//! A GGUF file: the reader, the metadata accessors the engine uses, and the tokenizer built
//! from the metadata. Any input must give a value or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lilypad_gguf::GgufFile;
use lilypad_tokenizer::TextTokenizer;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::read(&data.to_vec()) else {
        return;
    };
    let md = &file.metadata;
    let _ = md.architecture();
    for (key, _) in md.iter() {
        let _ = (md.u32(key), md.f32(key), md.str(key), md.bool(key));
        let _ = (md.string_array(key), md.f32_array(key), md.i32_array(key));
        let _ = md.bool_array(key);
    }
    if let Ok(tok) = TextTokenizer::from_gguf(md) {
        if let Ok(ids) = tok.encode("def f(x):\n    return x  # <|im_start|> héllo", true) {
            let _ = tok.decode(&ids);
        }
        let _ = tok.template();
    }
});
