//! The kernel registry: WGSL sources from `shaders/` embedded at compile time (the same
//! bytes natively and in wasm), a small preprocessor for variants, and a pipeline cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;

/// Every shader file, by its path under `shaders/`.
const SOURCES: &[(&str, &str)] = &[
    (
        "common/quant.wgsl",
        include_str!("../../../shaders/common/quant.wgsl"),
    ),
    (
        "common/step.wgsl",
        include_str!("../../../shaders/common/step.wgsl"),
    ),
    (
        "common/attention_rows.wgsl",
        include_str!("../../../shaders/common/attention_rows.wgsl"),
    ),
    (
        "common/kv.wgsl",
        include_str!("../../../shaders/common/kv.wgsl"),
    ),
    (
        "common/delta_rule.wgsl",
        include_str!("../../../shaders/common/delta_rule.wgsl"),
    ),
    ("copy.wgsl", include_str!("../../../shaders/copy.wgsl")),
    ("adamw.wgsl", include_str!("../../../shaders/adamw.wgsl")),
    (
        "get_rows.wgsl",
        include_str!("../../../shaders/get_rows.wgsl"),
    ),
    ("matvec.wgsl", include_str!("../../../shaders/matvec.wgsl")),
    (
        "matvec_backward.wgsl",
        include_str!("../../../shaders/matvec_backward.wgsl"),
    ),
    ("matmul.wgsl", include_str!("../../../shaders/matmul.wgsl")),
    (
        "rms_norm.wgsl",
        include_str!("../../../shaders/rms_norm.wgsl"),
    ),
    (
        "rms_norm_backward.wgsl",
        include_str!("../../../shaders/rms_norm_backward.wgsl"),
    ),
    ("rope.wgsl", include_str!("../../../shaders/rope.wgsl")),
    (
        "attention.wgsl",
        include_str!("../../../shaders/attention.wgsl"),
    ),
    (
        "attention_backward.wgsl",
        include_str!("../../../shaders/attention_backward.wgsl"),
    ),
    (
        "elementwise.wgsl",
        include_str!("../../../shaders/elementwise.wgsl"),
    ),
    (
        "elementwise_backward.wgsl",
        include_str!("../../../shaders/elementwise_backward.wgsl"),
    ),
    (
        "softmax.wgsl",
        include_str!("../../../shaders/softmax.wgsl"),
    ),
    ("sample.wgsl", include_str!("../../../shaders/sample.wgsl")),
    ("conv1d.wgsl", include_str!("../../../shaders/conv1d.wgsl")),
    (
        "conv1d_backward.wgsl",
        include_str!("../../../shaders/conv1d_backward.wgsl"),
    ),
    (
        "delta_net.wgsl",
        include_str!("../../../shaders/delta_net.wgsl"),
    ),
    (
        "delta_net_backward.wgsl",
        include_str!("../../../shaders/delta_net_backward.wgsl"),
    ),
    (
        "attn_gate.wgsl",
        include_str!("../../../shaders/attn_gate.wgsl"),
    ),
    (
        "attn_gate_backward.wgsl",
        include_str!("../../../shaders/attn_gate_backward.wgsl"),
    ),
];

pub fn source(path: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(p, _)| *p == path).map(|(_, s)| *s)
}

/// Named compile-time values for one variant of a kernel. Each becomes a WGSL
/// `const NAME = value;` and can be tested with `#if NAME` (defined and not 0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Macros(Vec<(String, String)>);

impl Macros {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn u32(mut self, name: &str, v: u32) -> Self {
        self.set(name, format!("{v}u"));
        self
    }
    pub fn f32(mut self, name: &str, v: f32) -> Self {
        self.set(name, format!("{v:?}f"));
        self
    }
    pub fn flag(mut self, name: &str) -> Self {
        self.set(name, "1".into());
        self
    }
    fn set(&mut self, name: &str, value: String) {
        self.0.retain(|(n, _)| n != name);
        self.0.push((name.to_string(), value));
        self.0.sort();
    }
    fn is_set(&self, name: &str) -> bool {
        self.0
            .iter()
            .any(|(n, v)| n == name && v != "0" && v != "0u")
    }
}

/// Expands `#include "file"`, `#if NAME` / `#ifdef NAME`, `#if !NAME`, `#else`, `#endif`,
/// and `#repeat NAME` … `#endrepeat` ([`write_out_repeat`]).
pub fn preprocess(path: &str, macros: &Macros) -> Result<String> {
    let mut out = String::new();
    for (name, value) in &macros.0 {
        out.push_str(&format!("const {name} = {value};\n"));
    }
    expand(path, macros, &mut out, 0)?;
    Ok(out)
}

fn expand(path: &str, macros: &Macros, out: &mut String, depth: usize) -> Result<()> {
    let err = |message: String| EngineError::Shader {
        name: path.to_string(),
        message,
    };
    if depth > 4 {
        return Err(err("#include nested too deeply".into()));
    }
    let src = source(path).ok_or_else(|| err("no such shader".into()))?;
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    // Each entry: (this branch active, some branch of this #if was taken).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let active = |stack: &Vec<(bool, bool)>| stack.iter().all(|(a, _)| *a);
    let mut lineno = 0;
    while lineno < lines.len() {
        let line = &lines[lineno];
        let t = line.trim_start();
        if t.starts_with("#repeat") && active(&stack) {
            // Written out in place; the copies are read next.
            write_out_repeat(&mut lines, lineno, macros).map_err(err)?;
            continue;
        }
        lineno += 1;
        let lineno = lineno - 1;
        if let Some(rest) = t.strip_prefix("#if") {
            let rest = rest.strip_prefix("def").unwrap_or(rest).trim();
            let cond = match rest.strip_prefix('!') {
                Some(n) => !macros.is_set(n.trim()),
                None => macros.is_set(rest),
            };
            stack.push((cond, cond));
        } else if t.starts_with("#else") {
            let top = stack
                .last_mut()
                .ok_or_else(|| err(format!("line {}: #else without #if", lineno + 1)))?;
            *top = (!top.1, true);
        } else if t.starts_with("#endif") {
            stack
                .pop()
                .ok_or_else(|| err(format!("line {}: #endif without #if", lineno + 1)))?;
        } else if let Some(rest) = t.strip_prefix("#include") {
            if active(&stack) {
                let inc = rest.trim().trim_matches('"');
                expand(inc, macros, out, depth + 1)?;
            }
        } else if t.starts_with("#repeat") || t.starts_with("#endrepeat") {
            // An inactive branch's block.
        } else if active(&stack) {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err(err("unterminated #if".into()));
    }
    Ok(())
}

/// Writes out the `#repeat NAME` … `#endrepeat` block that starts at `lines[at]`: NAME
/// copies (a u32 constant of `macros`), `$i` in copy i replaced by i. CPU adapters need this
/// where a kernel keeps a value per head or row: llvmpipe leaves a loop around other loops
/// rolled, and a private array indexed by its counter then lives in memory, each access
/// several times the cost of the arithmetic (18x slower for three rows of 16 vec4s).
fn write_out_repeat(
    lines: &mut Vec<String>,
    at: usize,
    macros: &Macros,
) -> std::result::Result<(), String> {
    let name = lines[at].trim_start()["#repeat".len()..].trim().to_string();
    let n = macros
        .0
        .iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.trim_end_matches('u').parse::<usize>().ok())
        .ok_or_else(|| format!("line {}: #repeat needs the u32 constant {name}", at + 1))?;
    let len = lines[at + 1..]
        .iter()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with("#endrepeat") || t.starts_with("#repeat")
        })
        .filter(|&k| lines[at + 1 + k].trim_start().starts_with("#endrepeat"))
        .ok_or_else(|| format!("line {}: #repeat without its #endrepeat", at + 1))?;
    let body: Vec<String> = lines[at + 1..at + 1 + len].to_vec();
    let copies = (0..n).flat_map(|i| body.iter().map(move |l| l.replace("$i", &i.to_string())));
    lines.splice(at..at + len + 2, copies.collect::<Vec<_>>());
    Ok(())
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct PipelineKey {
    path: &'static str,
    entry: &'static str,
    macros: Macros,
}

#[derive(Default)]
pub(crate) struct KernelCache {
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
    /// Scratch that one op's dispatches write and read back to back (so every graph on this
    /// device may share it), by label: the largest asked for so far.
    scratch: Mutex<HashMap<&'static str, wgpu::Buffer>>,
}

impl GpuContext {
    /// A storage buffer of at least `size` bytes shared by every op that asks for `label`:
    /// only for data an op writes and reads within its own back-to-back dispatches.
    pub(crate) fn shared_scratch(&self, label: &'static str, size: u64) -> Result<wgpu::Buffer> {
        let mut scratch = self.kernels.scratch.lock().unwrap();
        if let Some(b) = scratch.get(label)
            && b.size() >= size
        {
            return Ok(b.clone());
        }
        let b = self.storage_buffer(label, size, wgpu::BufferUsages::empty())?;
        scratch.insert(label, b.clone());
        Ok(b)
    }

    /// The compute pipeline for `entry` in `path` with `macros`, compiled once.
    pub fn pipeline(
        &self,
        path: &'static str,
        entry: &'static str,
        macros: &Macros,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = PipelineKey {
            path,
            entry,
            macros: macros.clone(),
        };
        if let Some(p) = self.kernels.pipelines.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let code = preprocess(path, macros)?;
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(path),
                source: wgpu::ShaderSource::Wgsl(code.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            });
        // Native wgpu reports shader errors synchronously through the error handler.
        self.check().map_err(|e| EngineError::Shader {
            name: format!("{path}:{entry}"),
            message: e.to_string(),
        })?;
        let pipeline = Arc::new(pipeline);
        self.kernels
            .pipelines
            .lock()
            .unwrap()
            .insert(key, pipeline.clone());
        Ok(pipeline)
    }
}

/// One recorded kernel launch: a pipeline, its bindings, and its grid (which may
/// depend on how many tokens the current step carries).
pub struct Dispatch {
    pub label: &'static str,
    pub pipeline: Arc<wgpu::ComputePipeline>,
    pub bind_group: wgpu::BindGroup,
    pub grid: Grid,
    /// What runs instead in a step of at most this many tokens (a kernel laid out for decode).
    pub few_tokens: Option<(u32, Box<Dispatch>)>,
    /// What runs right after it (a pass that combines what its workgroups wrote, the next
    /// range of a long walk).
    pub then: Option<Box<Dispatch>>,
    /// Steps of at most this many tokens skip it and what follows it (a range of tokens past
    /// theirs).
    pub skip_up_to: u32,
}

#[derive(Clone, Copy, Debug)]
pub enum Grid {
    Fixed([u32; 3]),
    /// `[x, ceil(tokens / per_y), 1]`.
    PerTokens {
        x: u32,
        per_y: u32,
    },
    /// `[x, ceil(tokens / per_y), z]`: z segments of each token's work.
    PerTokensSegments {
        x: u32,
        per_y: u32,
        z: u32,
    },
}

/// Largest workgroup count in one dimension (WebGPU's default limit).
pub const MAX_GROUPS: u32 = 65535;

/// Splits a long 1-D grid over x and z; kernels rebuild the linear id with `num_workgroups`.
pub fn fold_grid(n: u32) -> (u32, u32) {
    if n <= MAX_GROUPS {
        (n.max(1), 1)
    } else {
        (MAX_GROUPS, n.div_ceil(MAX_GROUPS))
    }
}

impl Dispatch {
    /// Binds `buffers` to bindings 0, 1, 2, … of group 0.
    pub fn new(
        ctx: &GpuContext,
        label: &'static str,
        pipeline: Arc<wgpu::ComputePipeline>,
        buffers: &[wgpu::BindingResource<'_>],
        grid: Grid,
    ) -> Self {
        let indexed: Vec<(u32, wgpu::BindingResource)> = buffers
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u32, r.clone()))
            .collect();
        Self::with_bindings(ctx, label, pipeline, &indexed, grid)
    }

    /// Binds each resource to its binding number (entry points that skip some bindings).
    pub fn with_bindings(
        ctx: &GpuContext,
        label: &'static str,
        pipeline: Arc<wgpu::ComputePipeline>,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        grid: Grid,
    ) -> Self {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = bindings
            .iter()
            .map(|(i, r)| wgpu::BindGroupEntry {
                binding: *i,
                resource: r.clone(),
            })
            .collect();
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &layout,
            entries: &entries,
        });
        Self {
            label,
            pipeline,
            bind_group,
            grid,
            few_tokens: None,
            then: None,
            skip_up_to: 0,
        }
    }

    /// Runs `other` instead in steps of at most `max_tokens` tokens.
    pub fn with_few_tokens(mut self, max_tokens: u32, other: Dispatch) -> Self {
        self.few_tokens = Some((max_tokens, Box::new(other)));
        self
    }

    /// Runs `next` right after this one (and after its few-token alternative, if it has one).
    pub fn then(mut self, next: Dispatch) -> Self {
        self.then = Some(Box::new(next));
        self
    }

    /// Skips this one, and what runs after it, in steps of at most `tokens` tokens.
    pub fn skipped_up_to(mut self, tokens: u32) -> Self {
        self.skip_up_to = tokens;
        self
    }

    pub fn grid_for(&self, tokens: u32) -> [u32; 3] {
        match self.grid {
            Grid::Fixed(g) => g,
            Grid::PerTokens { x, per_y } => {
                let (gx, gz) = fold_grid(x);
                [gx, tokens.div_ceil(per_y).max(1), gz]
            }
            Grid::PerTokensSegments { x, per_y, z } => [x, tokens.div_ceil(per_y).max(1), z],
        }
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>, tokens: u32) {
        if tokens <= self.skip_up_to {
            return;
        }
        if let Some((max, other)) = &self.few_tokens
            && tokens <= *max
        {
            return other.record(pass, tokens);
        }
        let [x, y, z] = self.grid_for(tokens);
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(x, y, z);
        if let Some(next) = &self.then {
            next.record(pass, tokens);
        }
    }
}

/// Runs dispatches in one compute pass and submits them.
pub fn submit(ctx: &GpuContext, dispatches: &[&Dispatch], tokens: u32) {
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for d in dispatches {
            d.record(&mut pass, tokens);
        }
    }
    ctx.queue.submit([encoder.finish()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preprocessor_branches_and_constants() {
        let code = preprocess(
            "common/quant.wgsl",
            &Macros::new().u32("WG", 64).flag("Q4_0"),
        )
        .unwrap();
        assert!(code.starts_with("const Q4_0 = 1;\nconst WG = 64u;\n"));
        assert!(!code.contains("#if"));
    }

    #[test]
    fn repeat_blocks_are_written_out() {
        let run = |src: &str, macros: &Macros| {
            let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
            write_out_repeat(&mut lines, 1, macros).map(|_| lines)
        };
        let src = "a\n#repeat G\nvar x$i = $i;\n#endrepeat\nb";
        let lines = run(src, &Macros::new().u32("G", 3)).unwrap();
        assert_eq!(
            lines,
            ["a", "var x0 = 0;", "var x1 = 1;", "var x2 = 2;", "b"]
        );
        assert!(run(src, &Macros::new()).is_err());
        assert!(run("a\n#repeat G\nx", &Macros::new().u32("G", 1)).is_err());
        assert!(
            run(
                "a\n#repeat G\n#repeat G\n#endrepeat",
                &Macros::new().u32("G", 1)
            )
            .is_err()
        );
    }

    #[test]
    fn every_shader_preprocesses() {
        // The constants that blocks outside every #if repeat by (matvec_backward's TILE).
        let macros = Macros::new().u32("TILE", 8);
        for (path, _) in SOURCES {
            preprocess(path, &macros).unwrap();
        }
    }
}
