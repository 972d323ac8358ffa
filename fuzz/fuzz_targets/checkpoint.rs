//! A Hugging Face checkpoint converted on load: `config.json` and a safetensors shard become a
//! GGUF, or an error. The input is the config's length (4 bytes, little-endian), the config,
//! then the shard.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lilypad_gguf::{GgmlType, GgufFile, hf};

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (config, shard) = rest.split_at(len);
    // The odd inputs also quantize, as `--quantize q8_0` does.
    let quantize = (len % 2 == 1).then_some(GgmlType::Q8_0);
    if let Ok(gguf) = hf::to_gguf(config, &[shard], quantize) {
        // What the converter writes, the reader takes.
        GgufFile::read(&gguf).expect("a converted checkpoint reads back");
    }
});
