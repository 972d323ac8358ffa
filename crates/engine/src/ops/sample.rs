use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::bind;

const WG: u32 = 256;

/// Most recent tokens the penalties look at: the size of the sampler's history ring.
pub const MAX_RECENT: usize = 1024;

/// How the next token is chosen. `temperature == 0` means greedy.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 = off.
    pub top_k: u32,
    /// 1 = off.
    pub top_p: f32,
    /// 1 = off; llama.cpp's repetition penalty.
    pub repeat_penalty: f32,
    /// 0 = off; subtracted once from each token seen in the last `penalty_last_n` tokens.
    pub presence_penalty: f32,
    pub penalty_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::Sampling(m));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!("temperature {} must be ≥ 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad(format!(
                "repeat penalty {} must be > 0",
                self.repeat_penalty
            ));
        }
        if !self.presence_penalty.is_finite() {
            return bad("presence penalty must be finite".into());
        }
        if self.penalty_last_n > MAX_RECENT {
            return bad(format!(
                "penalty window {} exceeds {MAX_RECENT}",
                self.penalty_last_n
            ));
        }
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// SplitMix64: a tiny generator whose stream never changes between releases, so a seed
/// reproduces the same text everywhere.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 24 bits, exactly representable as f32.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GpuParams {
    vocab: u32,
    top_k: u32,
    n_penalty: u32,
    greedy: u32,
    temperature: f32,
    top_p: f32,
    repeat_penalty: f32,
    presence_penalty: f32,
    u: f32,
    row: u32,
    window_end: u32,
    _pad: u32,
}

/// The sampling kernel bound to one logits buffer, with its scratch and result buffers.
pub struct Sampler {
    dispatch: Dispatch,
    params: wgpu::Buffer,
    recent: wgpu::Buffer,
    pub result: wgpu::Buffer,
    vocab: u32,
}

impl Sampler {
    pub fn new(ctx: &GpuContext, logits: &wgpu::Buffer, vocab: u32) -> Result<Self> {
        let macros = Macros::new().u32("WG", WG).u32("RING", MAX_RECENT as u32);
        let pipeline = ctx.pipeline("sample.wgsl", "sample", &macros)?;
        let params = ctx.uniform_buffer("sample", bytemuck::bytes_of(&GpuParams::zeroed()));
        let recent = ctx.storage_buffer(
            "recent tokens",
            (MAX_RECENT * 4) as u64,
            wgpu::BufferUsages::empty(),
        )?;
        let work = ctx.storage_buffer(
            "sample scratch",
            vocab as u64 * 4,
            wgpu::BufferUsages::empty(),
        )?;
        let result = ctx.storage_buffer("sampled token", 16, wgpu::BufferUsages::empty())?;
        let dispatch = Dispatch::new(
            ctx,
            "sample",
            pipeline,
            &[
                bind(logits),
                bind(&recent),
                bind(&work),
                bind(&result),
                bind(&params),
            ],
            Grid::Fixed([1, 1, 1]),
        );
        Ok(Self {
            dispatch,
            params,
            recent,
            result,
            vocab,
        })
    }

    /// Writes this draw's parameters; the dispatch then picks from logits row `row`.
    /// `recent` is the token history (the last `penalty_last_n` are penalised).
    pub fn prepare(
        &self,
        ctx: &GpuContext,
        sp: &SamplingParams,
        recent: &[u32],
        row: u32,
        u: f32,
    ) -> Result<()> {
        sp.validate()?;
        self.write_history(ctx, sp, recent);
        self.write_draw(ctx, sp, recent.len(), row, u);
        Ok(())
    }

    /// Puts the history's penalty window into the ring, each token at its position (nothing
    /// to write when the penalties are off).
    pub fn write_history(&self, ctx: &GpuContext, sp: &SamplingParams, history: &[u32]) {
        if !has_penalties(sp) {
            return;
        }
        let from = history.len() - window_len(sp, history.len());
        // The window fits the ring, so it wraps at most once.
        let at = from % MAX_RECENT;
        let (head, tail) = history[from..].split_at((history.len() - from).min(MAX_RECENT - at));
        ctx.queue
            .write_buffer(&self.recent, at as u64 * 4, bytemuck::cast_slice(head));
        if !tail.is_empty() {
            ctx.queue
                .write_buffer(&self.recent, 0, bytemuck::cast_slice(tail));
        }
    }

    /// Writes one draw's parameters: the history has `history_len` tokens (the ring holds
    /// the window before it), the pick reads logits row `row` with uniform draw `u`.
    pub fn write_draw(
        &self,
        ctx: &GpuContext,
        sp: &SamplingParams,
        history_len: usize,
        row: u32,
        u: f32,
    ) {
        let window = if has_penalties(sp) {
            window_len(sp, history_len)
        } else {
            0
        };
        let p = GpuParams {
            vocab: self.vocab,
            top_k: sp.top_k,
            n_penalty: window as u32,
            greedy: sp.is_greedy() as u32,
            temperature: if sp.is_greedy() { 1.0 } else { sp.temperature },
            top_p: sp.top_p,
            repeat_penalty: sp.repeat_penalty,
            presence_penalty: sp.presence_penalty,
            u,
            row,
            window_end: history_len as u32,
            _pad: 0,
        };
        ctx.queue
            .write_buffer(&self.params, 0, bytemuck::bytes_of(&p));
    }

    /// Records a copy of the sampled token into the history ring at position `pos`, so the
    /// next draw's penalties see it without a round trip to the host.
    pub fn record_append(&self, encoder: &mut wgpu::CommandEncoder, pos: usize) {
        let at = (pos % MAX_RECENT) as u64 * 4;
        encoder.copy_buffer_to_buffer(&self.result, 0, &self.recent, at, 4);
    }

    pub fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }
}

use bytemuck::Zeroable;

fn has_penalties(sp: &SamplingParams) -> bool {
    sp.repeat_penalty != 1.0 || sp.presence_penalty != 0.0
}

/// History entries the penalties look at (never more than the ring holds).
fn window_len(sp: &SamplingParams, history_len: usize) -> usize {
    history_len.min(sp.penalty_last_n).min(MAX_RECENT)
}

/// CPU reference of the kernel's rule, written the plain way (sort, cut, normalise), for tests.
pub fn reference_sample(logits: &[f32], sp: &SamplingParams, recent: &[u32], u: f32) -> u32 {
    let mut l: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
    let window = &recent[recent.len().saturating_sub(sp.penalty_last_n)..];
    let mut uniq = window.to_vec();
    uniq.sort_unstable();
    uniq.dedup();
    if sp.repeat_penalty != 1.0 || sp.presence_penalty != 0.0 {
        for &t in &uniq {
            if let Some(x) = l.get_mut(t as usize) {
                let rp = sp.repeat_penalty as f64;
                *x = if *x > 0.0 { *x / rp } else { *x * rp } - sp.presence_penalty as f64;
            }
        }
    }
    let argmax = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b });
    if sp.is_greedy() {
        return argmax as u32;
    }
    let t = sp.temperature as f64;
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &b| l[b].partial_cmp(&l[a]).unwrap().then(a.cmp(&b)));
    let k = if sp.top_k == 0 {
        l.len()
    } else {
        (sp.top_k as usize).min(l.len())
    };
    let kth = l[order[k - 1]];
    let m = l[argmax] / t;
    let p: Vec<f64> = l
        .iter()
        .map(|&x| if x >= kth { (x / t - m).exp() } else { 0.0 })
        .collect();
    let z: f64 = p.iter().sum();
    let mut keep = vec![false; l.len()];
    let mut mass = 0.0;
    let mut cut = f64::INFINITY;
    for &i in &order {
        if p[i] == 0.0 || (sp.top_p < 1.0 && mass >= sp.top_p as f64 * z && p[i] < cut) {
            break;
        }
        keep[i] = true;
        mass += p[i];
        cut = p[i];
    }
    let target = u as f64 * mass;
    let mut acc = 0.0;
    let mut last = argmax;
    for i in 0..l.len() {
        if keep[i] {
            acc += p[i];
            last = i;
            if acc > target {
                return i as u32;
            }
        }
    }
    last as u32
}
