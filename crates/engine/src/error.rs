use lilypad_gguf::GgufError;

pub type Result<T> = std::result::Result<T, EngineError>;

/// Everything the engine can fail with. GPU problems are reported, never panicked on.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no usable GPU adapter{}: {reason}", adapter.as_ref().map(|a| format!(" matching {a:?}")).unwrap_or_default())]
    NoAdapter {
        adapter: Option<String>,
        reason: String,
    },
    #[error("the GPU device could not be created on {adapter}: {reason}")]
    DeviceRequest { adapter: String, reason: String },
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    #[error("GPU out of memory while {0}")]
    OutOfMemory(String),
    #[error("GPU validation error in {context}: {message}")]
    Validation { context: String, message: String },
    #[error("reading a GPU buffer back failed: {0}")]
    Readback(String),
    #[error("shader {name}: {message}")]
    Shader { name: String, message: String },
    #[error("{op}: shape mismatch: {detail}")]
    Shape { op: &'static str, detail: String },
    #[error("tensor {tensor} has type {ty}, which {context} does not support")]
    UnsupportedType {
        tensor: String,
        ty: &'static str,
        context: &'static str,
    },
    #[error(
        "unsupported model architecture {0:?} (supported: {supported})",
        supported = crate::models::supported_architectures().join(", ")
    )]
    UnsupportedArchitecture(String),
    #[error("model tensor {0:?} is missing")]
    MissingTensor(String),
    #[error("model tensor {name} has shape {got:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        got: Vec<u64>,
    },
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// The optimizer's gradient held a NaN or an infinity: nothing was updated.
    #[error("the gradient's norm is {0}: the adapter was not updated")]
    NonFiniteGradient(f32),
    #[error(
        "the model needs {needed} on the GPU but the adapter {adapter} allows {allowed} ({what})"
    )]
    TooLarge {
        adapter: String,
        what: &'static str,
        needed: String,
        allowed: String,
    },
    #[error(
        "the prompt is {prompt} tokens, but the context holds {context}: shorten the prompt or give a longer context"
    )]
    PromptTooLong { prompt: usize, context: usize },
    #[error("the prompt is empty: there is nothing to continue")]
    EmptyPrompt,
    #[error("context is full: {needed} positions needed, the context holds {capacity}")]
    ContextFull { needed: usize, capacity: usize },
    #[error("the sequence state does not fit this model: {0}")]
    State(String),
    #[error("sequences: {0}")]
    Sequence(String),
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    BadToken { id: u32, vocab: usize },
    #[error("invalid sampling parameter: {0}")]
    Sampling(String),
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// Formats a byte count for messages (MiB with one decimal).
pub fn human_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= 1024.0 * MIB {
        format!("{:.2} GiB", bytes as f64 / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}
