//! Linear projections: a frozen weight in its file format plus, optionally, a LoRA adapter
//! (y = W·x + scale · B·(A·x)). The adapter's two small products run on the same matvec
//! kernels as the weight (F32 matrices), the second one adding into the weight's output, so
//! every output mode (set, add to the residual, write into the KV cache) works unchanged.

use lilypad_gguf::GgmlType;
use lilypad_gguf::peft::LoraTensor;

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::weights::GpuWeight;

/// LoRA ranks are padded with zero rows/columns to this multiple: the matvec kernels read
/// eight weights at a time.
pub const RANK_MULTIPLE: usize = 8;

/// A LoRA adapter's factors on the GPU, the scale folded into B.
pub(crate) struct GpuLora {
    /// [rank, n_in].
    pub a: GpuWeight,
    /// [n_out, rank], scaled.
    pub b: GpuWeight,
    /// The padded rank, and the adapter's own.
    pub rank: u32,
    pub adapter_rank: u32,
    /// What B was scaled by (a gradient of the unscaled B is this times that of the stored one).
    pub scale: f32,
}

/// A linear projection of the forward pass.
pub struct Linear {
    pub weight: GpuWeight,
    pub(crate) lora: Option<GpuLora>,
}

impl Linear {
    pub fn new(weight: GpuWeight) -> Self {
        Self { weight, lora: None }
    }

    /// The GGUF name of its weight.
    pub fn name(&self) -> &str {
        &self.weight.name
    }

    /// The padded rank of its adapter, if it has one.
    pub fn lora_rank(&self) -> Option<u32> {
        self.lora.as_ref().map(|l| l.rank)
    }

    /// Puts `t` (scaled by `scale`) on this linear: written into the existing buffers when
    /// the padded rank is unchanged, uploaded otherwise. Returns whether new buffers were
    /// made, which means recorded graphs must be recorded again.
    pub(crate) fn set_lora(
        &mut self,
        ctx: &GpuContext,
        t: &LoraTensor,
        scale: f32,
    ) -> Result<bool> {
        let (rows, cols) = (self.weight.rows as usize, self.weight.cols as usize);
        if t.n_out != rows
            || t.n_in != cols
            || t.a.len() != t.rank * cols
            || t.b.len() != rows * t.rank
        {
            return Err(EngineError::Config(format!(
                "LoRA for {}: rank {} with {} inputs and {} outputs does not fit the weight [{rows} outputs, {cols} inputs]",
                self.name(),
                t.rank,
                t.n_in,
                t.n_out
            )));
        }
        let rank = t.rank.next_multiple_of(RANK_MULTIPLE);
        // A: zero rows past the rank; B: zero columns past it, scaled.
        let mut a = t.a.clone();
        a.resize(rank * cols, 0.0);
        let mut b = vec![0f32; rows * rank];
        for (dst, src) in b.chunks_exact_mut(rank).zip(t.b.chunks_exact(t.rank)) {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = s * scale;
            }
        }
        if let Some(l) = &mut self.lora
            && l.rank as usize == rank
            && l.a.chunks.len() == 1
            && l.b.chunks.len() == 1
        {
            ctx.queue
                .write_buffer(&l.a.chunks[0].q, 0, bytemuck::cast_slice(&a));
            ctx.queue
                .write_buffer(&l.b.chunks[0].q, 0, bytemuck::cast_slice(&b));
            l.scale = scale;
            l.adapter_rank = t.rank as u32;
            return Ok(false);
        }
        let upload = |what: &str, r: usize, c: usize, v: &[f32]| {
            GpuWeight::upload(
                ctx,
                &format!("{} lora_{what}", self.name()),
                GgmlType::F32,
                r as u64,
                c as u64,
                bytemuck::cast_slice(v),
                None,
            )
        };
        self.lora = Some(GpuLora {
            a: upload("a", rank, cols, &a)?,
            b: upload("b", rows, rank, &b)?,
            rank: rank as u32,
            adapter_rank: t.rank as u32,
            scale,
        });
        Ok(true)
    }

    /// Drops the adapter; returns whether there was one.
    pub(crate) fn clear_lora(&mut self) -> bool {
        self.lora.take().is_some()
    }
}
