// Rotary position embedding at token t's position (Step.tok[t].x).
// NEOX = 0: rotate adjacent pairs (2i, 2i+1) — llama.cpp's order for llama GGUFs, whose
//   converter permuted the Q/K rows so that this equals HF's rotate_half.
// NEOX = 1: rotate (i, i + n_rot/2), as Qwen models are stored.
// Only the first n_rot dims of each head rotate (partial RoPE); theta_i = pos * freq[i], with
// freq[i] = base^(-2i/n_rot) computed on the host in f64 (and where frequency scaling lives).
// Two forms:
// `rope`: in place on x[t, head, dim]. BACKWARD rotates by -theta instead, which is the
//   gradient: the rotation is orthogonal, so dx = R(theta)^T dy = R(-theta) dy (applied in
//   place to dy).
// `rope_store` (STORE): the step's K rows (x) rotated and its V rows (v_new), both
//   [T, n_heads · head_dim], written to the layer's caches at each token's cache row
//   (Step.tok[t].y): f32, or with KV_F16 packed f16 pairs (common/kv.wgsl). One thread per
//   pair of adjacent values, the unit of the packed cache.
// Macros: WG, NEOX, BACKWARD, STORE, KV_F16.

#include "common/step.wgsl"

struct Params {
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
}

#if STORE
@group(0) @binding(0) var<storage, read> x: array<f32>;
#else
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
#endif
@group(0) @binding(1) var<storage, read> freq: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> step: Step;

#if STORE
#include "common/kv.wgsl"

@group(0) @binding(4) var<storage, read> v_new: array<f32>;
@group(0) @binding(5) var<storage, read_write> k: array<KvScalar>;
@group(0) @binding(6) var<storage, read_write> v: array<KvScalar>;

// Values d and d + 1 (d even) of the head whose first value is x[base], after the rotation.
fn roped2(base: u32, d: u32, pos: f32) -> vec2<f32> {
    // n_rot is even, so both values are rotated or neither is.
    if d >= p.n_rot {
        return vec2<f32>(x[base + d], x[base + d + 1u]);
    }
#if NEOX
    // Two neighbours belong to two pairs (i, i + half).
    let half = p.n_rot / 2u;
    var out: vec2<f32>;
    for (var j = 0u; j < 2u; j++) {
        let i = (d + j) % half;
        let a = x[base + i];
        let b = x[base + i + half];
        let theta = pos * freq[i];
        let c = cos(theta);
        let s = sin(theta);
        out[j] = select(a * c - b * s, a * s + b * c, d + j >= half);
    }
    return out;
#else
    // Two neighbours are one pair: one angle for both.
    let a = x[base + d];
    let b = x[base + d + 1u];
    let theta = pos * freq[d / 2u];
    let c = cos(theta);
    let s = sin(theta);
    return vec2<f32>(a * c - b * s, a * s + b * c);
#endif
}

@compute @workgroup_size(WG)
fn rope_store(@builtin(global_invocation_id) gid: vec3<u32>) {
    let width = p.n_heads * p.head_dim;
    let t = gid.y;
    if gid.x >= width / 2u || t >= step.n_tokens {
        return;
    }
    // Values e, e + 1 of the row: one head's, as head_dim is even.
    let e = 2u * gid.x;
    let at = t * width + e;
    let base = t * width + (e / p.head_dim) * p.head_dim;
    let pos = f32(step.tok[t].x);
    let kv = vec4<f32>(roped2(base, e % p.head_dim, pos), v_new[at], v_new[at + 1u]);
    let row = step.tok[t].y;
#if KV_F16
    let w = row * (width / 2u) + gid.x;
    k[w] = pack2x16float(kv.xy);
    v[w] = pack2x16float(kv.zw);
#else
    let w = row * width + e;
    k[w] = kv.x;
    k[w + 1u] = kv.y;
    v[w] = kv.z;
    v[w + 1u] = kv.w;
#endif
}
#else
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
    let base = (t * p.n_heads + head) * p.head_dim;
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
#endif
