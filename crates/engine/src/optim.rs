//! AdamW over a model's LoRA adapter, on the GPU: the moments live next to the adapter's
//! buffers, the update is `shaders/adamw.wgsl`, and only the gradient's global norm (one float
//! per tensor) comes back to the host, for clipping. The adapter is updated in place, so the
//! model's recorded graphs keep serving it.

use std::collections::HashMap;

use crate::backward::LoraGradients;
use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::ops::adamw::{AdamWStep, adamw, sum_squares};
use crate::tensor::Tensor;

/// AdamW's settings; the learning rate of each step is given to [`LoraAdamW::step`] (a
/// schedule's value).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Gradients whose global L2 norm exceeds this are scaled down to it.
    pub max_grad_norm: Option<f32>,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            max_grad_norm: Some(1.0),
        }
    }
}

/// What one step measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// The gradient's global L2 norm before clipping.
    pub grad_norm: f32,
    /// The factor it was scaled by (1 unless clipped).
    pub grad_scale: f32,
}

/// The optimizer's state for a checkpoint: the step count and, per adapted linear, the
/// adapter's buffers as stored (A, then B times its scale, ranks padded) and the moments.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerState {
    pub step: u32,
    /// (weight name, [A, B as stored, m(A), v(A), m(B), v(B)]), in the model's linear order.
    pub tensors: Vec<(String, [Vec<f32>; 6])>,
}

/// AdamW over every LoRA factor of a model (see the module docs).
pub struct LoraAdamW {
    pub config: AdamWConfig,
    /// Steps taken.
    pub step: u32,
    /// Per adapted linear: the moments m and v of A, then of B (padded like the adapter).
    moments: HashMap<String, [Tensor; 4]>,
}

impl LoraAdamW {
    /// Zero moments for the adapter `model` has now.
    pub fn new(model: &mut Model, config: AdamWConfig) -> Result<Self> {
        let ctx = model.gpu().clone();
        let mut moments = HashMap::new();
        for l in model.arch.linears_mut() {
            if let Some(ad) = &l.lora {
                let a = [ad.rank, l.weight.cols as u32];
                let b = [l.weight.rows as u32, ad.rank];
                let z = |label, shape| Tensor::zeros(&ctx, label, shape);
                moments.insert(
                    l.name().to_string(),
                    [z("m A", a)?, z("v A", a)?, z("m B", b)?, z("v B", b)?],
                );
            }
        }
        if moments.is_empty() {
            return Err(EngineError::Config(
                "the model has no LoRA adapter to optimize".into(),
            ));
        }
        Ok(Self {
            config,
            step: 0,
            moments,
        })
    }

    /// One update of the adapter from `grads` at learning rate `lr`; the gradients are zeroed
    /// after. A gradient that is not finite changes nothing (not the adapter, the moments or
    /// the step count) and is [`EngineError::NonFiniteGradient`].
    pub async fn step(
        &mut self,
        model: &mut Model,
        grads: &LoraGradients,
        lr: f32,
    ) -> Result<StepStats> {
        let ctx = model.gpu().clone();
        let names: Vec<&String> = grads.tensors.keys().collect();
        let sums = Tensor::zeros(&ctx, "gradient norms", [1, 2 * names.len() as u32])?;
        let mut ds = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let (da, db) = &grads.tensors[*name];
            ds.push(sum_squares(
                &ctx,
                &da.buffer,
                da.len() as u32,
                &sums.buffer,
                2 * i as u32,
            )?);
            ds.push(sum_squares(
                &ctx,
                &db.buffer,
                db.len() as u32,
                &sums.buffer,
                2 * i as u32 + 1,
            )?);
        }
        run(&ctx, &ds);
        let sq = ctx.read_f32(&sums.buffer, 0, sums.len()).await?;
        let grad_norm = sq.iter().map(|&s| s as f64).sum::<f64>().sqrt() as f32;
        if !grad_norm.is_finite() {
            grads.zero(&ctx);
            return Err(EngineError::NonFiniteGradient(grad_norm));
        }
        let grad_scale = match self.config.max_grad_norm {
            Some(max) if grad_norm > max => max / grad_norm,
            _ => 1.0,
        };
        let c = self.config;
        let s = AdamWStep {
            lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay,
            t: self.step + 1,
            grad_scale,
        };
        let mut ds = Vec::new();
        for l in model.arch.linears_mut() {
            let Some(ad) = &l.lora else { continue };
            let (Some((da, db)), Some([ma, va, mb, vb])) =
                (grads.tensors.get(l.name()), self.moments.get(l.name()))
            else {
                return Err(EngineError::Config(format!(
                    "the optimizer or the gradients were made for another adapter than {}'s",
                    l.name()
                )));
            };
            if ma.shape != da.shape || mb.shape != db.shape {
                return Err(EngineError::Config(format!(
                    "{}: the adapter's rank changed since the optimizer was made",
                    l.name()
                )));
            }
            let (a, b) = (&ad.a.chunks[0].q, &ad.b.chunks[0].q);
            ds.push(adamw(
                &ctx,
                a,
                &da.buffer,
                &ma.buffer,
                &va.buffer,
                da.len() as u32,
                &s,
                1.0,
            )?);
            ds.push(adamw(
                &ctx,
                b,
                &db.buffer,
                &mb.buffer,
                &vb.buffer,
                db.len() as u32,
                &s,
                ad.scale,
            )?);
        }
        run(&ctx, &ds);
        model.adapter_changed();
        grads.zero(&ctx);
        ctx.check()?;
        self.step += 1;
        Ok(StepStats {
            grad_norm,
            grad_scale,
        })
    }

    /// The state to checkpoint (see [`OptimizerState`]).
    pub async fn state(&self, model: &mut Model) -> Result<OptimizerState> {
        let ctx = model.gpu().clone();
        let mut tensors = Vec::new();
        for l in model.arch.linears_mut() {
            let (Some(ad), Some(moments)) = (&l.lora, self.moments.get(l.name())) else {
                continue;
            };
            let (na, nb) = (moments[0].len(), moments[2].len());
            let parts = [
                (&ad.a.chunks[0].q, na),
                (&ad.b.chunks[0].q, nb),
                (&moments[0].buffer, na),
                (&moments[1].buffer, na),
                (&moments[2].buffer, nb),
                (&moments[3].buffer, nb),
            ];
            let mut values: [Vec<f32>; 6] = Default::default();
            for (v, (buf, n)) in values.iter_mut().zip(parts) {
                *v = ctx.read_f32(buf, 0, n).await?;
            }
            tensors.push((l.name().to_string(), values));
        }
        Ok(OptimizerState {
            step: self.step,
            tensors,
        })
    }

    /// An optimizer resumed from `state`, whose adapter buffers are written back into
    /// `model` (which must carry an adapter of the same shapes): the next steps are those
    /// the saved run would have taken.
    pub fn restore(model: &mut Model, config: AdamWConfig, state: &OptimizerState) -> Result<Self> {
        let mut opt = Self::new(model, config)?;
        let ctx = model.gpu().clone();
        let mut linears = model.arch.linears_mut();
        if state.tensors.len() != opt.moments.len() {
            return Err(EngineError::Config(format!(
                "the checkpoint has {} adapted linears, the model {}",
                state.tensors.len(),
                opt.moments.len()
            )));
        }
        for (name, [a, b, ma, va, mb, vb]) in &state.tensors {
            let linear = linears.iter_mut().find(|l| l.name() == name);
            let (Some(ad), Some(moments)) =
                (linear.and_then(|l| l.lora.as_ref()), opt.moments.get(name))
            else {
                return Err(EngineError::Config(format!(
                    "the checkpoint adapts {name}, which the model's adapter does not"
                )));
            };
            let (na, nb) = (moments[0].len() as usize, moments[2].len() as usize);
            if [a.len(), ma.len(), va.len()] != [na; 3] || [b.len(), mb.len(), vb.len()] != [nb; 3]
            {
                return Err(EngineError::Config(format!(
                    "{name}: the checkpoint's shapes differ from the model's adapter"
                )));
            }
            let write = |buf: &wgpu::Buffer, v: &[f32]| {
                ctx.queue.write_buffer(buf, 0, bytemuck::cast_slice(v))
            };
            write(&ad.a.chunks[0].q, a);
            write(&ad.b.chunks[0].q, b);
            for (t, v) in moments.iter().zip([ma, va, mb, vb]) {
                write(&t.buffer, v);
            }
        }
        drop(linears);
        model.adapter_changed();
        opt.step = state.step;
        Ok(opt)
    }
}

fn run(ctx: &crate::gpu::GpuContext, ds: &[crate::kernels::Dispatch]) {
    crate::kernels::submit(ctx, &ds.iter().collect::<Vec<_>>(), 1);
}
