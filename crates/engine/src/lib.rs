//! lilypad's inference engine: WGSL compute kernels (from `shaders/`) run by wgpu, the
//! model architectures (`models/`) over GGUF weights, and GPU sampling. Compiles natively
//! (Vulkan, Metal, DX12) and for wasm32 (browser WebGPU): all GPU waits are async.

pub mod activations;
pub mod backward;
pub mod batch;
pub mod decode;
pub mod error;
pub mod gpu;
pub mod graph;
pub mod kernels;
pub mod linear;
pub mod model;
pub mod models;
pub mod ops;
pub mod optim;
pub mod profile;
pub mod speculative;
pub mod state;
pub mod tensor;
pub mod training;
pub mod weights;

pub use activations::{ActivationMode, ActivationPlan, ActivationShape, ActivationStore};
pub use backward::LoraGradients;
pub use batch::{Batch, BatchEvent, DoneReason, RequestId};
pub use error::{EngineError, Result};
pub use gpu::{AdapterOptions, AdapterSummary, GpuContext};
pub use model::{BatchToken, Generation, LoadProgress, Logits, MemoryPlan, Model, ModelOptions};
pub use models::{LlamaConfig, ModelConfig, Qwen35Config};
pub use ops::sample::{Rng, SamplingParams};
pub use optim::{AdamWConfig, LoraAdamW, OptimizerState, StepStats};
pub use profile::KernelTimes;
pub use speculative::{Draft, SpeculativeStats};
pub use state::SequenceState;
pub use tensor::{DType, Tensor};
pub use training::TrainingForward;
