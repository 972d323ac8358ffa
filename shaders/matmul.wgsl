// c[i, j] (+)= alpha · Σ_l A[i, l] · B[l, j] for f32 row-major matrices, A = a or aᵀ
// (TRANS_A), B = b or bᵀ (TRANS_B): the small products of a LoRA adapter's backward pass
// (dB = dYᵀ·u, du = dY·B, dA = duᵀ·x, dx += du·A) and of the optimizer.
// One 16 × 16 tile of c per workgroup, one element per thread; A and B pass through workgroup
// memory in 16-wide slices of l, so each loaded value serves 16 threads.
// The token count of the step can stand for m (rows of c) or k (the summed dimension):
// `token_dim` 1 or 3 reads it from the step (capped by the size given), 0 takes the sizes as given.
// PER_THREAD (CPU adapters, where a barrier is a coroutine switch and every storage load is
// issued lane by lane): no workgroup memory; each thread computes a 4 × 4 block of c, 8 loads
// for 16 products per step of l. A workgroup is 8 lanes: CB column blocks side by side, and
// 8 / CB row blocks under them (CB = 8, or the column block count where that is 1, 2 or 4).
// Macros: TRANS_A, TRANS_B, ACCUMULATE, PER_THREAD with CB.

#include "common/step.wgsl"

struct Params {
    m: u32,        // rows of c
    n: u32,        // columns of c
    k: u32,        // the summed dimension
    lda: u32,      // floats per row of a as stored
    ldb: u32,
    ldc: u32,
    alpha: f32,
    token_dim: u32,  // 0: sizes as given; 1: m is the step's token count; 3: k is
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<uniform> step: Step;

fn a_at(i: u32, l: u32) -> f32 {
#if TRANS_A
    return a[l * p.lda + i];
#else
    return a[i * p.lda + l];
#endif
}

fn b_at(l: u32, j: u32) -> f32 {
#if TRANS_B
    return b[j * p.ldb + l];
#else
    return b[l * p.ldb + j];
#endif
}

#if PER_THREAD
@compute @workgroup_size(8)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let m = select(p.m, min(p.m, step.n_tokens), p.token_dim == 1u);
    let k = select(p.k, min(p.k, step.n_tokens), p.token_dim == 3u);
    let i0 = (wid.y * (8u / CB) + lane / CB) * 4u;
    let j0 = (wid.x * CB + lane % CB) * 4u;
    if i0 >= m || j0 >= p.n {
        return;
    }
    // Rows and columns past the edges repeat the last one and are not stored.
    var ii: array<u32, 4>;
    var jj: array<u32, 4>;
    for (var r = 0u; r < 4u; r++) {
        ii[r] = min(i0 + r, m - 1u);
        jj[r] = min(j0 + r, p.n - 1u);
    }
    var acc: array<vec4<f32>, 4>;
    for (var l = 0u; l < k; l++) {
        let bv = vec4<f32>(b_at(l, jj[0]), b_at(l, jj[1]), b_at(l, jj[2]), b_at(l, jj[3]));
        for (var r = 0u; r < 4u; r++) {
            acc[r] += a_at(ii[r], l) * bv;
        }
    }
    for (var r = 0u; r < 4u; r++) {
        for (var q = 0u; q < 4u; q++) {
            if i0 + r < m && j0 + q < p.n {
#if ACCUMULATE
                c[(i0 + r) * p.ldc + j0 + q] += p.alpha * acc[r][q];
#else
                c[(i0 + r) * p.ldc + j0 + q] = p.alpha * acc[r][q];
#endif
            }
        }
    }
}
#else
const TS = 16u;
var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = select(p.m, min(p.m, step.n_tokens), p.token_dim == 1u);
    let k = select(p.k, min(p.k, step.n_tokens), p.token_dim == 3u);
    let i = wid.y * TS + lid.y;
    let j = wid.x * TS + lid.x;
    var acc = 0.0;
    for (var l0 = 0u; l0 < k; l0 += TS) {
        // Thread (y, x) loads A[i, l0 + x] and B[l0 + y, j]; zeros past the edges.
        let la = l0 + lid.x;
        let lb = l0 + lid.y;
        ta[lid.y][lid.x] = select(0.0, a_at(min(i, m - 1u), min(la, k - 1u)), i < m && la < k);
        tb[lid.y][lid.x] = select(0.0, b_at(min(lb, k - 1u), min(j, p.n - 1u)), lb < k && j < p.n);
        workgroupBarrier();
        for (var l = 0u; l < TS; l++) {
            acc += ta[lid.y][l] * tb[l][lid.x];
        }
        workgroupBarrier();
    }
    if i < m && j < p.n {
#if ACCUMULATE
        c[i * p.ldc + j] += p.alpha * acc;
#else
        c[i * p.ldc + j] = p.alpha * acc;
#endif
    }
}
#endif
