// Rotary position embedding, in place on x[t, head, dim], at token t's position.
// NEOX = 0: rotate adjacent pairs (2i, 2i+1) — llama.cpp's order for llama GGUFs, whose
//   converter permuted the Q/K rows so that this equals HF's rotate_half.
// NEOX = 1: rotate (i, i + n_rot/2), as Qwen models are stored.
// Only the first n_rot dims of each head rotate (partial RoPE); theta_i = pos * freq[i], with
// freq[i] = base^(-2i/n_rot) computed on the host in f64 (and where frequency scaling lives).
// BACKWARD: rotates by -theta instead, which is the gradient: the rotation is orthogonal, so
//   dx = R(theta)^T dy = R(-theta) dy (applied in place to dy).
// Macros: WG, NEOX, BACKWARD.

#include "common/step.wgsl"

struct Params {
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    pos_rows: u32,  // 1: token t lives in its KV-cache row of x (the cache); 0: row t
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> freq: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half = p.n_rot / 2u;
    let t = gid.y;
    if gid.x >= p.n_heads * half || t >= step.n_tokens {
        return;
    }
    let head = gid.x / half;
    let i = gid.x % half;
    let pos = f32(step.tok[t].x);
#if BACKWARD
    let theta = -pos * freq[i];
#else
    let theta = pos * freq[i];
#endif
    let c = cos(theta);
    let s = sin(theta);
    let base = (select(t, step.tok[t].y, p.pos_rows == 1u) * p.n_heads + head) * p.head_dim;
#if NEOX
    let i0 = base + i;
    let i1 = base + i + half;
#else
    let i0 = base + 2u * i;
    let i1 = i0 + 1u;
#endif
    let a = x[i0];
    let b = x[i1];
    x[i0] = a * c - b * s;
    x[i1] = a * s + b * c;
}
