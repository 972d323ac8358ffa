//! Errors as the page sees them: a stable `code` to branch on and a message to show.

use lilypad_engine::EngineError;
use lilypad_gguf::GgufError;
use lilypad_lm::ModelError;
use lilypad_tokenizer::TokenizerError;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct WebError {
    /// One of: no-webgpu, device-lost, out-of-memory, too-large, corrupt-model,
    /// unsupported-model, read-failed, bad-request, context-full, busy, unloaded, internal.
    pub code: &'static str,
    pub message: String,
}

impl WebError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn request(message: impl Into<String>) -> Self {
        Self::new("bad-request", message)
    }
}

/// The byte source failed (a read the page could not serve), not the file's contents.
fn read_failed(e: &GgufError) -> bool {
    match e {
        GgufError::Io { .. } => true,
        GgufError::Context { source, .. } => read_failed(source),
        _ => false,
    }
}

impl From<GgufError> for WebError {
    fn from(e: GgufError) -> Self {
        if let GgufError::Adapter(_) = e {
            // A LoRA adapter the page passed in, not the model file.
            return crate::lora::adapter_error(e);
        }
        let code = if read_failed(&e) {
            "read-failed"
        } else {
            "corrupt-model"
        };
        Self::new(code, format!("the model file cannot be read: {e}"))
    }
}

impl From<EngineError> for WebError {
    fn from(e: EngineError) -> Self {
        let code = match &e {
            EngineError::NoAdapter { .. } | EngineError::DeviceRequest { .. } => "no-webgpu",
            EngineError::DeviceLost(_) => "device-lost",
            EngineError::OutOfMemory(_) => "out-of-memory",
            EngineError::TooLarge { .. } => "too-large",
            EngineError::UnsupportedArchitecture(_) | EngineError::UnsupportedType { .. } => {
                "unsupported-model"
            }
            EngineError::MissingTensor(_)
            | EngineError::TensorShape { .. }
            | EngineError::Config(_) => "corrupt-model",
            EngineError::ContextFull { .. } | EngineError::PromptTooLong { .. } => "context-full",
            EngineError::Sampling(_) | EngineError::BadToken { .. } | EngineError::EmptyPrompt => {
                "bad-request"
            }
            EngineError::Gguf(GgufError::Adapter(_)) => "bad-request",
            EngineError::Gguf(g) if read_failed(g) => "read-failed",
            EngineError::Gguf(_) => "corrupt-model",
            _ => "internal",
        };
        Self::new(code, e.to_string())
    }
}

impl From<TokenizerError> for WebError {
    fn from(e: TokenizerError) -> Self {
        Self::new("unsupported-model", format!("the model's tokenizer: {e}"))
    }
}

impl From<ModelError> for WebError {
    fn from(e: ModelError) -> Self {
        let code = match &e {
            ModelError::ContextFull { .. } | ModelError::PromptTooLong { .. } => "context-full",
            ModelError::Other(m) if m.contains("device was lost") => "device-lost",
            ModelError::Other(m) if m.contains("out of memory") => "out-of-memory",
            ModelError::Other(_) => "internal",
        };
        Self::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_get_codes_the_page_can_branch_on() {
        let bad = WebError::from(GgufError::BadMagic { found: *b"<htm" });
        assert_eq!(bad.code, "corrupt-model");
        assert!(bad.message.contains("not a GGUF file"), "{}", bad.message);

        let io = GgufError::Io {
            path: "model".into(),
            source: std::io::Error::other("HTTP 500"),
        };
        let wrapped = GgufError::Context {
            what: "tensor \"x\"".into(),
            source: Box::new(io),
        };
        assert_eq!(
            WebError::from(EngineError::Gguf(wrapped)).code,
            "read-failed"
        );

        let truncated = GgufError::Truncated {
            offset: 10,
            needed: 4,
            len: 12,
        };
        assert_eq!(
            WebError::from(EngineError::Gguf(truncated)).code,
            "corrupt-model"
        );
        assert_eq!(
            WebError::from(EngineError::DeviceLost("Destroyed".into())).code,
            "device-lost"
        );
        assert_eq!(
            WebError::from(EngineError::OutOfMemory("x".into())).code,
            "out-of-memory"
        );
        assert_eq!(
            WebError::from(EngineError::NoAdapter {
                adapter: None,
                reason: "none".into()
            })
            .code,
            "no-webgpu"
        );
        let lost = ModelError::Other(EngineError::DeviceLost("Unknown".into()).to_string());
        assert_eq!(WebError::from(lost).code, "device-lost");
        let full = ModelError::ContextFull {
            needed: 9,
            capacity: 8,
        };
        assert_eq!(WebError::from(full).code, "context-full");

        let adapter = WebError::from(GgufError::Adapter(
            "DoRA (use_dora) is not supported".into(),
        ));
        assert_eq!(adapter.code, "bad-request");
        let m = &adapter.message;
        assert!(m.contains("LoRA adapter") && m.contains("DoRA"), "{m}");
    }
}
