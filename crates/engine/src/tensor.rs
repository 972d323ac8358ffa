//! A GPU buffer with its shape and element type. Activations are [rows, cols] (rows =
//! tokens of a step, or cache rows); per-head layouts are flattened into cols. The graph's
//! ops ([`crate::graph::Graph`]) check the tensors they are given against each other and
//! against the weights, so a wrong width is an error when a graph is recorded, not garbage
//! when it runs.

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;

/// Element types of activation tensors (weights keep their GGUF types in
/// [`crate::weights::GpuWeight`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// IEEE half precision, two values packed in each u32 word (WGSL's `pack2x16float`), so
    /// no shader-f16 feature is needed: the KV cache's default. Rows hold an even count.
    F16,
}

impl DType {
    pub fn size(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            _ => Err(format!("{s:?} is not an element type (f16 or f32)")),
        }
    }
}

/// A [rows, cols] tensor in a storage buffer of its own.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub buffer: wgpu::Buffer,
    pub shape: [u32; 2],
    pub dtype: DType,
    pub label: &'static str,
}

impl Tensor {
    /// A zeroed f32 tensor.
    pub fn zeros(ctx: &GpuContext, label: &'static str, shape: [u32; 2]) -> Result<Self> {
        Self::zeros_of(ctx, label, shape, DType::F32)
    }

    /// A zeroed tensor of `dtype`.
    pub fn zeros_of(
        ctx: &GpuContext,
        label: &'static str,
        shape: [u32; 2],
        dtype: DType,
    ) -> Result<Self> {
        if dtype == DType::F16 && !shape[1].is_multiple_of(2) {
            return Err(EngineError::Shape {
                op: "tensor",
                detail: format!("{label} {shape:?}: f16 rows pack values in pairs"),
            });
        }
        let bytes = shape[0] as u64 * shape[1] as u64 * dtype.size();
        Ok(Self {
            buffer: ctx.storage_buffer(label, bytes, wgpu::BufferUsages::empty())?,
            shape,
            dtype,
            label,
        })
    }

    /// Wraps an existing buffer, which must hold the shape.
    pub fn from_buffer(
        buffer: wgpu::Buffer,
        label: &'static str,
        shape: [u32; 2],
        dtype: DType,
    ) -> Result<Self> {
        let t = Self {
            buffer,
            shape,
            dtype,
            label,
        };
        if t.buffer.size() < t.bytes() {
            return Err(EngineError::Shape {
                op: "tensor",
                detail: format!(
                    "{label} {shape:?} needs {} bytes, its buffer has {}",
                    t.bytes(),
                    t.buffer.size()
                ),
            });
        }
        Ok(t)
    }

    pub fn rows(&self) -> u32 {
        self.shape[0]
    }

    pub fn cols(&self) -> u32 {
        self.shape[1]
    }

    pub fn len(&self) -> u64 {
        self.shape[0] as u64 * self.shape[1] as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> u64 {
        self.len() * self.dtype.size()
    }

    /// Checks that rows of this tensor hold `cols` values and that it has at least `rows`
    /// of them.
    pub fn expect(&self, op: &'static str, rows: u32, cols: u32) -> Result<()> {
        if self.cols() == cols && self.rows() >= rows && self.dtype == DType::F32 {
            return Ok(());
        }
        Err(EngineError::Shape {
            op,
            detail: format!(
                "{} is {:?} {:?}, expected [≥ {rows}, {cols}] f32",
                self.label, self.shape, self.dtype
            ),
        })
    }
}
