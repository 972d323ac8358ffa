//! The graph recorder: a step's kernel launches, recorded once and replayed every step.
//! Its methods are the typed ops the model blocks (`models/`) are written in: each takes
//! [`Tensor`]s, checks their shapes against each other and against the weights, and appends
//! the kernel dispatches from [`crate::ops`]. A trainer records its own graphs with the same
//! ops, over the same blocks, and adds its kernels with [`Graph::push`].

// An op names each tensor it reads and writes: many arguments by nature.
#![allow(clippy::too_many_arguments)]

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::Dispatch;
use crate::linear::Linear;
use crate::ops::{
    self,
    attn_gate::GatedHeads,
    delta_net::{DeltaNetInputs, DeltaNetShape},
    rope::RopeMode,
};
use crate::tensor::Tensor;
use crate::weights::GpuWeight;

/// Where a matrix product writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Set,
    /// Adds to y (the residual stream).
    Add,
}

/// What the runtime hands an architecture to record a graph with: the step's token ids and
/// uniform, the tile, and the LoRA scratch when adapters are set.
pub struct GraphIo<'a> {
    pub ctx: &'a GpuContext,
    /// u32 token ids of the step.
    pub ids: &'a wgpu::Buffer,
    /// The `Step` uniform (`ops::Step`).
    pub step: &'a wgpu::Buffer,
    /// Tokens per workgroup in the matrix products: 1 for decode, `PREFILL_TILE` for more.
    pub tile: u32,
    /// [max tokens, rank] for LoRA's A·x, when any linear has an adapter.
    pub lora: Option<&'a Tensor>,
    /// The step may hold tokens of several sequences (batched decode).
    pub multi_sequence: bool,
    /// Whether the linears' LoRA adapters take part (false: the base model alone).
    pub adapters: bool,
}

fn check_rope(x: &Tensor, freqs: &Tensor, head_dim: u32, n_rot: u32) -> Result<()> {
    if head_dim == 0 || !x.cols().is_multiple_of(head_dim) || freqs.cols() < n_rot / 2 {
        return Err(EngineError::Shape {
            op: "rope",
            detail: format!(
                "{} {:?} in heads of {head_dim}, {n_rot} rotated, {} frequencies",
                x.label,
                x.shape,
                freqs.cols()
            ),
        });
    }
    Ok(())
}

/// Records one graph: the dispatches of a step of up to `max_tokens` tokens.
pub struct Graph<'a> {
    pub ctx: &'a GpuContext,
    pub step: &'a wgpu::Buffer,
    pub tile: u32,
    pub max_tokens: u32,
    pub lora: Option<&'a Tensor>,
    pub multi_sequence: bool,
    pub adapters: bool,
    pub dispatches: Vec<Dispatch>,
}

impl<'a> Graph<'a> {
    pub fn new(io: &GraphIo<'a>, max_tokens: u32) -> Self {
        Self {
            ctx: io.ctx,
            step: io.step,
            tile: io.tile,
            max_tokens,
            lora: io.lora,
            multi_sequence: io.multi_sequence,
            adapters: io.adapters,
            dispatches: Vec::new(),
        }
    }

    pub fn push(&mut self, d: Dispatch) {
        self.dispatches.push(d);
    }

    /// x[t] = embd[ids[t]].
    pub fn embed(&mut self, embd: &GpuWeight, ids: &wgpu::Buffer, x: &Tensor) -> Result<()> {
        x.expect("embed", self.max_tokens, embd.cols as u32)?;
        self.dispatches.extend(ops::get_rows::get_rows(
            self.ctx,
            embd,
            ids,
            &x.buffer,
            self.max_tokens,
            self.step,
        )?);
        Ok(())
    }

    /// y[t] (+)= W · x[t] + scale · B·(A·x[t]) (see [`ops::matvec::matvec`]): the adapter's
    /// second product adds into whatever the weight's wrote. y's rows hold W's outputs.
    pub fn matvec(&mut self, linear: &Linear, x: &Tensor, y: &Tensor, write: Write) -> Result<()> {
        let w = &linear.weight;
        x.expect("matvec", self.max_tokens, w.cols as u32)?;
        y.expect("matvec", self.max_tokens, w.rows as u32)?;
        self.dispatches.extend(ops::matvec::matvec(
            self.ctx,
            w,
            &x.buffer,
            &y.buffer,
            y.cols(),
            self.step,
            self.tile,
            write == Write::Add,
        )?);
        if let Some(lora) = linear.lora.as_ref().filter(|_| self.adapters) {
            let u = self.lora.ok_or_else(|| {
                EngineError::Config(format!(
                    "{} has a LoRA adapter but the graph has no LoRA scratch",
                    linear.name()
                ))
            })?;
            if u.cols() < lora.rank || u.rows() < self.max_tokens {
                return Err(EngineError::Shape {
                    op: "matvec",
                    detail: format!(
                        "LoRA scratch {:?} for rank {} and {} tokens",
                        u.shape, lora.rank, self.max_tokens
                    ),
                });
            }
            self.dispatches.extend(ops::matvec::matvec(
                self.ctx, &lora.a, &x.buffer, &u.buffer, lora.rank, self.step, self.tile, false,
            )?);
            self.dispatches.extend(ops::matvec::matvec(
                self.ctx,
                &lora.b,
                &u.buffer,
                &y.buffer,
                y.cols(),
                self.step,
                self.tile,
                true,
            )?);
        }
        Ok(())
    }

    /// y = rmsnorm(x) · w per row of w.cols() values (`x.cols() / w.cols()` rows per token:
    /// per-head norms), optionally gated by silu(z) (`z` like x), keeping each row's
    /// reciprocal RMS in `rstd` [T, rows per token] when given.
    pub fn rms_norm(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        z: Option<&Tensor>,
        y: &Tensor,
        rstd: Option<&Tensor>,
        eps: f32,
    ) -> Result<()> {
        let n = w.cols();
        if n == 0 || w.rows() != 1 || !x.cols().is_multiple_of(n) {
            return Err(EngineError::Shape {
                op: "rms_norm",
                detail: format!(
                    "{} {:?} by rows of {} {:?}",
                    x.label, x.shape, w.label, w.shape
                ),
            });
        }
        let groups = x.cols() / n;
        x.expect("rms_norm", self.max_tokens, x.cols())?;
        y.expect("rms_norm", self.max_tokens, x.cols())?;
        if let Some(z) = z {
            z.expect("rms_norm", self.max_tokens, x.cols())?;
        }
        if let Some(r) = rstd {
            r.expect("rms_norm", self.max_tokens, groups)?;
        }
        self.push(ops::rms_norm::rms_norm_saving(
            self.ctx,
            &x.buffer,
            &w.buffer,
            z.map(|z| &z.buffer),
            &y.buffer,
            rstd.map(|r| &r.buffer),
            n,
            groups,
            eps,
            self.step,
        )?);
        Ok(())
    }

    /// Rotates the first `n_rot` dims of each `head_dim`-wide head of x in place.
    pub fn rope(
        &mut self,
        x: &Tensor,
        freqs: &Tensor,
        head_dim: u32,
        n_rot: u32,
        mode: RopeMode,
    ) -> Result<()> {
        check_rope(x, freqs, head_dim, n_rot)?;
        x.expect("rope", self.max_tokens, x.cols())?;
        self.push(ops::rope::rope(
            self.ctx,
            &x.buffer,
            &freqs.buffer,
            x.cols() / head_dim,
            head_dim,
            n_rot,
            mode,
            self.step,
        )?);
        Ok(())
    }

    /// The step's keys, rotated as [`Graph::rope`] does, and values into a layer's caches
    /// (each token's row to its cache row, in the caches' element type): k_new, v_new
    /// [T, n_kv · head_dim] f32; k_cache, v_cache [rows, n_kv · head_dim].
    pub fn rope_store(
        &mut self,
        (k_new, v_new): (&Tensor, &Tensor),
        freqs: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
        head_dim: u32,
        n_rot: u32,
        mode: RopeMode,
    ) -> Result<()> {
        check_rope(k_new, freqs, head_dim, n_rot)?;
        let width = k_new.cols();
        k_new.expect("rope_store", self.max_tokens, width)?;
        v_new.expect("rope_store", self.max_tokens, width)?;
        if k_cache.cols() != width
            || k_cache.shape != v_cache.shape
            || k_cache.dtype != v_cache.dtype
        {
            return Err(EngineError::Shape {
                op: "rope_store",
                detail: format!(
                    "rows of {width} into caches {:?} {} and {:?} {}",
                    k_cache.shape, k_cache.dtype, v_cache.shape, v_cache.dtype
                ),
            });
        }
        self.push(ops::rope::rope_store(
            self.ctx,
            [&k_new.buffer, &v_new.buffer],
            &freqs.buffer,
            [&k_cache.buffer, &v_cache.buffer],
            k_cache.dtype,
            [width / head_dim, head_dim, n_rot],
            mode,
            self.step,
        )?);
        Ok(())
    }

    /// Causal grouped-query attention of q [T, n_head · head_dim] over a layer's K/V cache
    /// [rows, n_kv · head_dim] into out (like q), keeping each (token, head)'s log-sum-exp
    /// in `lse` [T, n_head] when given.
    pub fn attention(
        &mut self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        lse: Option<&Tensor>,
        head_dim: u32,
    ) -> Result<()> {
        let bad = head_dim == 0
            || !q.cols().is_multiple_of(head_dim)
            || !k.cols().is_multiple_of(head_dim)
            || k.shape != v.shape
            || k.dtype != v.dtype;
        if bad {
            return Err(EngineError::Shape {
                op: "attention",
                detail: format!(
                    "q {:?}, k {:?}, v {:?} in heads of {head_dim}",
                    q.shape, k.shape, v.shape
                ),
            });
        }
        let (n_head, n_kv) = (q.cols() / head_dim, k.cols() / head_dim);
        q.expect("attention", self.max_tokens, q.cols())?;
        out.expect("attention", self.max_tokens, q.cols())?;
        if let Some(l) = lse {
            l.expect("attention", self.max_tokens, n_head)?;
        }
        self.push(ops::attention::attention_saving(
            self.ctx,
            ops::attention::AttentionLayout::for_context(self.ctx),
            &q.buffer,
            &k.buffer,
            &v.buffer,
            k.dtype,
            &out.buffer,
            lse.map(|l| &l.buffer),
            n_head,
            n_kv,
            head_dim,
            1.0 / (head_dim as f32).sqrt(),
            self.step,
        )?);
        Ok(())
    }

    /// Gated attention's query half: q[t, h] = qg[t, h, ..head_dim] (qg holds each head's
    /// query then its gate).
    pub fn split_query(&mut self, qg: &Tensor, q: &Tensor, head_dim: u32) -> Result<()> {
        let heads = self.gated_heads("split_query", qg, q, head_dim)?;
        self.push(heads.split_query(self.ctx, &qg.buffer, &q.buffer, self.step)?);
        Ok(())
    }

    /// x[t, h] *= sigmoid(gate of head h in qg).
    pub fn sigmoid_gate(&mut self, x: &Tensor, qg: &Tensor, head_dim: u32) -> Result<()> {
        let heads = self.gated_heads("sigmoid_gate", qg, x, head_dim)?;
        self.push(heads.sigmoid_gate(self.ctx, &x.buffer, &qg.buffer, self.step)?);
        Ok(())
    }

    fn gated_heads(
        &self,
        op: &'static str,
        qg: &Tensor,
        x: &Tensor,
        head_dim: u32,
    ) -> Result<GatedHeads> {
        if head_dim == 0 || !x.cols().is_multiple_of(head_dim) {
            return Err(EngineError::Shape {
                op,
                detail: format!("{} {:?} in heads of {head_dim}", x.label, x.shape),
            });
        }
        x.expect(op, self.max_tokens, x.cols())?;
        qg.expect(op, self.max_tokens, 2 * x.cols())?;
        Ok(GatedHeads {
            n_head: x.cols() / head_dim,
            head_dim,
            max_tokens: self.max_tokens,
        })
    }

    /// out = silu(gate) ⊙ up.
    pub fn silu_mul(&mut self, gate: &Tensor, up: &Tensor, out: &Tensor) -> Result<()> {
        for t in [gate, up, out] {
            t.expect("silu_mul", self.max_tokens, gate.cols())?;
        }
        self.push(ops::elementwise::silu_mul(
            self.ctx,
            &gate.buffer,
            &up.buffer,
            &out.buffer,
            gate.cols(),
            self.step,
        )?);
        Ok(())
    }

    /// Causal depthwise conv over the step's tokens and the sequence's last `taps − 1`
    /// inputs in `state` (updated): w is [channels, taps].
    pub fn conv1d(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        state: &wgpu::Buffer,
        y: &Tensor,
    ) -> Result<()> {
        x.expect("conv1d", self.max_tokens, w.rows())?;
        y.expect("conv1d", self.max_tokens, w.rows())?;
        self.push(ops::conv1d::conv1d(
            self.ctx,
            &x.buffer,
            &w.buffer,
            state,
            &y.buffer,
            w.rows(),
            w.cols(),
            self.step,
        )?);
        Ok(())
    }

    /// The gated delta rule (see [`ops::delta_net`]): token by token for decode and batched
    /// steps, chunked for prefill (`chunks` its scratch; token by token per lane on CPU
    /// adapters), keeping each chunk's incoming state in `states` when given (prefill only).
    pub fn delta_net(
        &mut self,
        shape: &DeltaNetShape,
        inputs: &DeltaNetInputs<'_>,
        state: &wgpu::Buffer,
        out: &Tensor,
        chunks: &Tensor,
        states: Option<&Tensor>,
    ) -> Result<()> {
        out.expect("delta_net", self.max_tokens, shape.n_v * shape.d_v)?;
        // Decode steps, and batched steps of several sequences (one token each): the
        // recurrent form, token by token. Prefill of one sequence: the chunked form, except
        // on CPU adapters, whose per-lane recurrent form is several times faster (the chunked
        // form's barriers and shared memory are what they do worst) and keeps the chunk
        // states as well.
        let per_lane = ops::delta_net::DeltaNetLayout::for_shape(self.ctx, shape)
            == ops::delta_net::DeltaNetLayout::PerLane;
        let prefill = self.tile > 1 && !self.multi_sequence;
        match states {
            Some(_) if !prefill => {
                return Err(EngineError::Config(
                    "chunk states are kept by prefill graphs only".into(),
                ));
            }
            Some(states) if per_lane => self.push(ops::delta_net::delta_net_keeping(
                self.ctx,
                shape,
                inputs,
                state,
                &out.buffer,
                &states.buffer,
                self.max_tokens,
                self.step,
            )?),
            None if per_lane || !prefill => self.push(ops::delta_net::delta_net(
                self.ctx,
                shape,
                inputs,
                state,
                &out.buffer,
                self.step,
            )?),
            _ => self
                .dispatches
                .extend(ops::delta_net::delta_net_chunked_saving(
                    self.ctx,
                    shape,
                    inputs,
                    state,
                    &out.buffer,
                    &chunks.buffer,
                    states.map(|s| &s.buffer),
                    self.max_tokens,
                    self.step,
                )?),
        }
        Ok(())
    }

    /// out[t] = [a[t], b[t]]: two tensors' rows side by side.
    pub fn concat(&mut self, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<()> {
        a.expect("concat", self.max_tokens, a.cols())?;
        b.expect("concat", self.max_tokens, b.cols())?;
        out.expect("concat", self.max_tokens, a.cols() + b.cols())?;
        self.push(ops::copy::concat_rows(
            self.ctx,
            &a.buffer,
            &b.buffer,
            &out.buffer,
            a.cols(),
            b.cols(),
            self.step,
        )?);
        Ok(())
    }

    /// dst = src, all rows.
    pub fn copy(&mut self, src: &Tensor, dst: &Tensor) -> Result<()> {
        if src.shape != dst.shape || !src.len().is_multiple_of(4) {
            return Err(EngineError::Shape {
                op: "copy",
                detail: format!(
                    "{} {:?} into {} {:?} (whole vec4s)",
                    src.label, src.shape, dst.label, dst.shape
                ),
            });
        }
        let n_vec4 = u32::try_from(src.len() / 4).map_err(|_| EngineError::Shape {
            op: "copy",
            detail: format!("{} {:?}", src.label, src.shape),
        })?;
        self.push(ops::copy::copy(self.ctx, &src.buffer, &dst.buffer, n_vec4)?);
        Ok(())
    }
}
