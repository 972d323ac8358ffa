//! What single operations cost inside a compute shader on this adapter: each probe is a
//! kernel whose loop of 4,096 iterations does one kind of work, run over 128 workgroups of 8
//! lanes, timed against the same loop doing only arithmetic. On CPU adapters (llvmpipe) the
//! answers decide how kernels are laid out (ARCHITECTURE.md: what a kernel's time goes to).
//!
//! `cargo run --release -p lilypad-engine --example adapter_op_costs` (the adapter as for
//! every command: `LILYPAD_ADAPTER`, `LILYPAD_BACKEND`). Needs subgroups.

use std::time::Instant;

use lilypad_engine::{AdapterOptions, GpuContext};

/// vec4s in the storage buffer the probes read (64 MiB, past every cache).
const N: u32 = 1 << 22;
const GROUPS: u32 = 128;
const ITERATIONS: u32 = 4096;

/// (what, loop body). The body runs with `i` the iteration, `fi` = f32(i), `base` this
/// workgroup's first vec4 and `lane` the subgroup lane; it adds into `acc` or the private
/// arrays, which the kernel stores at the end so nothing is optimised away.
const PROBES: &[(&str, &str)] = &[
    (
        "arithmetic only (the baseline)",
        "acc = acc * 0.999 + vec4<f32>(fi, fl, fi, fl);",
    ),
    (
        "storage vec4 load, same address in every lane",
        "acc += data[base + i];",
    ),
    (
        "storage vec4 load, one row per lane",
        "acc += data[base + i + lane * 64u];",
    ),
    (
        "storage f32 load, one row per lane",
        "acc.x += scalars[(base + i + lane * 64u) * 4u];",
    ),
    (
        "workgroup-memory vec4 load",
        "acc += shared_v[(i + lane * 64u) % 1024u];",
    ),
    ("uniform-buffer vec4 load", "acc += uniforms[i % 1024u];"),
    (
        "subgroupShuffle (f32)",
        "acc.x += subgroupShuffle(fi + fl, i % 8u);",
    ),
    (
        "subgroupBroadcast (f32)",
        "acc.x += subgroupBroadcast(fi + fl, 3u);",
    ),
    (
        "subgroupBroadcast (vec4)",
        "acc += subgroupBroadcast(vec4<f32>(fi, fl, fi, fl), 3u);",
    ),
    ("subgroupAdd (f32)", "acc.x += subgroupAdd(fi + fl);"),
    ("exp (f32)", "acc.x += exp(fi * -0.001 + fl);"),
    (
        "16 vec4s of a private array, unrolled loop",
        "for (var j = 0u; j < 16u; j++) { rows[0][j] = rows[0][j] * 0.9 + vec4<f32>(fi); }",
    ),
    (
        "3 x 16 vec4s, three unrolled loops written out",
        "for (var j = 0u; j < 16u; j++) { rows[0][j] = rows[0][j] * 0.9 + vec4<f32>(fi); } \
         for (var j = 0u; j < 16u; j++) { rows[1][j] = rows[1][j] * 0.9 + vec4<f32>(fi); } \
         for (var j = 0u; j < 16u; j++) { rows[2][j] = rows[2][j] * 0.9 + vec4<f32>(fi); }",
    ),
    (
        "3 x 16 vec4s, a loop around the unrolled one",
        "for (var g = 0u; g < 3u; g++) { for (var j = 0u; j < 16u; j++) { \
         rows[g][j] = rows[g][j] * 0.9 + vec4<f32>(fi); } }",
    ),
];

fn kernel(body: &str) -> String {
    format!(
        "@group(0) @binding(0) var<storage, read> data: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> scalars: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> uniforms: array<vec4<f32>, 1024>;
var<workgroup> shared_v: array<vec4<f32>, 1024>;

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {{
    var acc = vec4<f32>(0.0);
    var rows: array<array<vec4<f32>, 16>, 3>;
    let base = wid.x * {ITERATIONS}u;
    let fl = f32(lane);
    for (var i = 0u; i < {ITERATIONS}u; i++) {{
        let fi = f32(i);
        {body}
    }}
    // Every binding is used (the layout is derived from the shader), and every result kept.
    out[wid.x * 8u + lane] = acc.x + acc.y + acc.z + acc.w + rows[0][3].x + rows[1][2].x
        + rows[2][15].y + data[lane].x + scalars[lane] + shared_v[lane].x + uniforms[lane].x;
}}"
    )
}

fn main() {
    let ctx =
        pollster::block_on(GpuContext::new(&AdapterOptions::from_env())).expect("a GPU adapter");
    if !ctx.features.contains(wgpu::Features::SUBGROUP) {
        eprintln!("this adapter has no subgroups: the probes need them");
        std::process::exit(1);
    }
    let values: Vec<f32> = (0..N * 4).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let data = ctx
        .storage_buffer_init("data", bytemuck::cast_slice(&values))
        .expect("data buffer");
    let uniforms = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("uniforms"),
        size: 16 * 1024,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    let out = ctx
        .storage_buffer("out", GROUPS as u64 * 32, wgpu::BufferUsages::empty())
        .expect("output buffer");
    println!(
        "{} ({} workgroups of 8 lanes, {ITERATIONS} iterations each)",
        ctx.adapter.name, GROUPS
    );
    let mut baseline = None;
    for (what, body) in PROBES {
        let module = ctx
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(what),
                source: wgpu::ShaderSource::Wgsl(kernel(body).into()),
            });
        let pipeline = ctx
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(what),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(what),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: data.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: data.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: out.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: uniforms.as_entire_binding(),
                },
            ],
        });
        if let Err(e) = ctx.check() {
            eprintln!("{what}: {e}");
            std::process::exit(1);
        }
        let mut best = f64::MAX;
        for _ in 0..4 {
            let start = Instant::now();
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(GROUPS, 1, 1);
            }
            ctx.queue.submit([encoder.finish()]);
            ctx.device
                .poll(wgpu::PollType::wait_indefinitely())
                .expect("the device");
            best = best.min(start.elapsed().as_secs_f64());
        }
        // Time per iteration of one workgroup, as if the workgroups ran one after another.
        let ns = best / (GROUPS * ITERATIONS) as f64 * 1e9;
        let extra = baseline.map(|b: f64| format!(", {:+.2} ns over the baseline", ns - b));
        baseline.get_or_insert(ns);
        println!(
            "{what:50} {ns:7.2} ns per iteration{}",
            extra.unwrap_or_default()
        );
    }
}
