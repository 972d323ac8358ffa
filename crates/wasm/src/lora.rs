//! LoRA adapters in the browser: a PEFT adapter's two files (`adapter_config.json` and
//! `adapter_model.safetensors`), as bytes the worker fetched or read, mapped onto the loaded
//! model's GGUF header with [`LoraAdapter::from_peft`]. Adapters are small next to a model, so
//! their bytes are held whole; the model itself never is.

use lilypad_engine::EngineError;
use lilypad_gguf::peft::LoraAdapter;
use lilypad_gguf::{GgufError, GgufFile, Metadata};

use crate::api::LoraInfo;
use crate::error::WebError;

/// The part of a model's header an adapter is mapped with, kept beside the loaded model: the
/// architecture's metadata and the tensor infos, without the tokenizer's vocabulary and merges
/// (the tokenizer has its own copy; a large vocabulary would be held twice).
pub fn adapter_header(mut file: GgufFile) -> GgufFile {
    let mut metadata = Metadata::new();
    for (key, value) in file.metadata.iter() {
        if !key.starts_with("tokenizer.") {
            metadata.insert(key, value.clone());
        }
    }
    file.metadata = metadata;
    file
}

/// Reads an adapter for `base` from its two files: both present applies an adapter, both
/// absent removes it (`None`), one without the other is a request error.
pub fn read_adapter(
    config_json: Option<&[u8]>,
    safetensors: Option<&[u8]>,
    base: &GgufFile,
) -> Result<Option<LoraAdapter>, WebError> {
    match (config_json, safetensors) {
        (None, None) => Ok(None),
        (Some(config), Some(weights)) => LoraAdapter::from_peft(config, weights, base)
            .map(Some)
            .map_err(adapter_error),
        (Some(_), None) => Err(WebError::request(
            "the LoRA adapter has adapter_config.json but no adapter_model.safetensors",
        )),
        (None, Some(_)) => Err(WebError::request(
            "the LoRA adapter has adapter_model.safetensors but no adapter_config.json",
        )),
    }
}

/// Whatever went wrong reading an adapter is the adapter's fault, not the model's: a bad
/// request, whichever part of the GGUF reader noticed it (a truncated tensor, a bad dtype).
pub fn adapter_error(e: GgufError) -> WebError {
    let e = match e {
        GgufError::Adapter(detail) => detail,
        other => other.to_string(),
    };
    WebError::request(format!("the LoRA adapter cannot be used: {e}"))
}

/// An error from `Model::set_lora`. An adapter that does not fit the model's linears is a
/// request error (the model is unchanged); GPU failures keep their codes (the model is back to
/// its base weights).
pub fn apply_error(e: EngineError) -> WebError {
    match e {
        EngineError::Config(detail) => {
            WebError::request(format!("the LoRA adapter cannot be used: {detail}"))
        }
        other => WebError::from(other),
    }
}

/// What `engine.info().lora` reports for an applied adapter.
pub fn info(adapter: &LoraAdapter) -> LoraInfo {
    LoraInfo {
        rank: adapter.rank,
        alpha: adapter.alpha,
        scale: adapter.scale,
        linears: adapter.tensors.len(),
        base_model: adapter.base_model.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use lilypad_gguf::MmapSource;

    use super::*;

    fn fixture(path: &str) -> PathBuf {
        PathBuf::from(
            std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../../tests/fixtures/lora")
        .join(path)
    }

    fn read(path: &str) -> Vec<u8> {
        std::fs::read(fixture(path)).unwrap()
    }

    fn llama_header() -> GgufFile {
        let src = MmapSource::open(fixture("llama-tiny/model/model.gguf")).unwrap();
        GgufFile::read(&src).unwrap()
    }

    #[test]
    fn the_slim_header_maps_an_adapter_as_the_whole_header_does() {
        let full = llama_header();
        assert!(
            full.metadata
                .iter()
                .any(|(k, _)| k.starts_with("tokenizer."))
        );
        let config = read("llama-tiny/adapter/adapter_config.json");
        let weights = read("llama-tiny/adapter/adapter_model.safetensors");
        let expected = read_adapter(Some(&config), Some(&weights), &full)
            .unwrap()
            .unwrap();

        let slim = adapter_header(full);
        assert!(
            slim.metadata
                .iter()
                .all(|(k, _)| !k.starts_with("tokenizer."))
        );
        assert_eq!(slim.metadata.architecture().unwrap(), "llama");
        let adapter = read_adapter(Some(&config), Some(&weights), &slim)
            .unwrap()
            .unwrap();
        assert_eq!(adapter, expected);
        let info = info(&adapter);
        assert_eq!(
            (info.rank, info.alpha, info.scale, info.linears),
            (4, 8.0, 2.0, 21)
        );
        assert_eq!(info.base_model.as_deref(), Some("llama-tiny"));
    }

    #[test]
    fn both_files_or_neither() {
        let header = adapter_header(llama_header());
        assert_eq!(read_adapter(None, None, &header).unwrap(), None);
        let config = read("llama-tiny/adapter/adapter_config.json");
        let e = read_adapter(Some(&config), None, &header).unwrap_err();
        assert_eq!(e.code, "bad-request");
        assert!(
            e.message.contains("adapter_model.safetensors"),
            "{}",
            e.message
        );
        assert_eq!(
            read_adapter(None, Some(b"x"), &header).unwrap_err().code,
            "bad-request"
        );
    }

    #[test]
    fn bad_adapters_are_request_errors() {
        let header = adapter_header(llama_header());
        let config = read("llama-tiny/adapter/adapter_config.json");
        let weights = read("llama-tiny/adapter/adapter_model.safetensors");

        // Another model's adapter: qwen3-tiny's q_proj has 128 outputs, llama-tiny's 64.
        let other = read_adapter(
            Some(&read("qwen3-tiny/adapter/adapter_config.json")),
            Some(&read("qwen3-tiny/adapter/adapter_model.safetensors")),
            &header,
        )
        .unwrap_err();
        assert_eq!(other.code, "bad-request");
        let m = &other.message;
        assert!(m.starts_with("the LoRA adapter cannot be used: "), "{m}");

        // Not JSON; a safetensors file cut short; DoRA.
        let dora = String::from_utf8(config.clone())
            .unwrap()
            .replace("\"use_dora\": false", "\"use_dora\": true");
        assert!(dora.contains("\"use_dora\": true"));
        for (config, weights) in [
            (b"<html>".to_vec(), weights.clone()),
            (config.clone(), weights[..weights.len() / 2].to_vec()),
            (dora.into_bytes(), weights.clone()),
        ] {
            let e = read_adapter(Some(&config), Some(&weights), &header).unwrap_err();
            assert_eq!(e.code, "bad-request", "{}", e.message);
        }
    }

    #[test]
    fn engine_errors_from_set_lora() {
        let shape = EngineError::Config("the LoRA adapter's blk.0.attn_q.weight is [1, 2]".into());
        assert_eq!(apply_error(shape).code, "bad-request");
        assert_eq!(
            apply_error(EngineError::OutOfMemory("x".into())).code,
            "out-of-memory"
        );
    }
}
