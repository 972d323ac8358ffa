// dx[t, c] (+)= Σ_r W[r, c] · dy[t, row_offset + r]: the input gradient of matvec.wgsl's
// y = W·x for a frozen weight, read from its blocks as stored, with the forward's decoders
// (common/quant.wgsl), so the gradient flows through exactly the weights the forward used.
// A decoded unit is 8 weights of one row whose columns are the same in every row: one thread
// owns a unit's columns and TILE tokens, walks down the rows, and reuses each decoded unit for
// all of its tokens. Neighbouring threads read neighbouring units of the same row.
// A dispatch covers rows row_begin .. row_end of one weight chunk, and every dispatch after
// a weight's first adds its rows' share (ACCUMULATE): CPU adapters cut a loop short after
// 65535 iterations per invocation (llvmpipe's loop limiter, shared by all of a shader's
// loops), so no invocation walks more than a few thousand rows. The token loop has a
// constant bound so that it unrolls.
// SUBGROUPS (native CPU adapters, with WG = TILE = 8): where the workgroup is one subgroup,
// lane i loads token i's gradients and subgroup broadcasts hand them to the others, instead
// of every lane loading every token's (storage loads are issued lane by lane there).
// Macros: one weight type flag, WG, TILE, ACCUMULATE, SUBGROUPS, SCALES4.

#include "common/step.wgsl"

struct Params {
    row_begin: u32,   // rows of this weight chunk that this dispatch covers
    row_end: u32,
    cols: u32,
    row_offset: u32,  // the chunk's first row: its column in dy
    dy_stride: u32,   // floats per token in dy
}

@group(0) @binding(0) var<storage, read> w_q: array<u32>;
@group(0) @binding(1) var<storage, read> w_s: array<u32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> p: Params;
#if SCALES4
// Q4_K/Q5_K: w_s again, a block's four scale words as one vec4 (common/quant.wgsl).
@group(0) @binding(6) var<storage, read> w_s4: array<vec4<u32>>;
#endif
@group(0) @binding(5) var<uniform> step: Step;

#include "common/quant.wgsl"

@compute @workgroup_size(WG)
fn matvec_backward(
    @builtin(global_invocation_id) gid: vec3<u32>,
#if SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_id: u32,
#endif
) {
    let u = gid.x;
    let t0 = gid.y * TILE;
    if t0 >= step.n_tokens {
        return;
    }
#if SUBGROUPS
    // Every lane takes part in the broadcasts: lanes past the last unit repeat it and store
    // nothing.
    let shared_dy = sg_size == WG && WG == 8u && TILE == 8u;
    let uu = min(u, p.cols / 8u - 1u);
#else
    if u >= p.cols / 8u {
        return;
    }
    let uu = u;
#endif
    let nt = min(TILE, step.n_tokens - t0);
    var acc_a: array<vec4<f32>, TILE>;
    var acc_b: array<vec4<f32>, TILE>;
    // Four rows at a time: each token's four products are summed before they reach its
    // accumulators. Rows past the end repeat the last one with a zero gradient.
    let rl = p.row_end - 1u;
    for (var r = p.row_begin; r < p.row_end; r += 4u) {
        let r1 = min(r + 1u, rl);
        let r2 = min(r + 2u, rl);
        let r3 = min(r + 3u, rl);
        let live = vec4<f32>(1.0, f32(r + 1u <= rl), f32(r + 2u <= rl), f32(r + 3u <= rl));
        let w0 = load_unit(r, uu, p.cols);
        let w1 = load_unit(r1, uu, p.cols);
        let w2 = load_unit(r2, uu, p.cols);
        let w3 = load_unit(r3, uu, p.cols);
#if SUBGROUPS
        if shared_dy {
            let mr = (t0 + min(sg_id, nt - 1u)) * p.dy_stride + p.row_offset;
            let mine = vec4<f32>(dy[mr + r], dy[mr + r1], dy[mr + r2], dy[mr + r3]) * live;
            let gs = array<vec4<f32>, 8>(subgroupBroadcast(mine, 0u), subgroupBroadcast(mine, 1u),
                                         subgroupBroadcast(mine, 2u), subgroupBroadcast(mine, 3u),
                                         subgroupBroadcast(mine, 4u), subgroupBroadcast(mine, 5u),
                                         subgroupBroadcast(mine, 6u), subgroupBroadcast(mine, 7u));
            for (var k = 0u; k < TILE; k++) {
                let g = gs[k];
                acc_a[k] += w0.a * g.x + w1.a * g.y + w2.a * g.z + w3.a * g.w;
                acc_b[k] += w0.b * g.x + w1.b * g.y + w2.b * g.z + w3.b * g.w;
            }
            continue;
        }
#endif
        for (var k = 0u; k < TILE; k++) {
            let row = (t0 + min(k, nt - 1u)) * p.dy_stride + p.row_offset;
            let g = vec4<f32>(dy[row + r], dy[row + r1], dy[row + r2], dy[row + r3]) * live;
            acc_a[k] += w0.a * g.x + w1.a * g.y + w2.a * g.z + w3.a * g.w;
            acc_b[k] += w0.b * g.x + w1.b * g.y + w2.b * g.z + w3.b * g.w;
        }
    }
    // The unit's columns (as vec4 indices within a row), the same in every row. Written out
    // per token: a loop that breaks early stays rolled on llvmpipe, and indexing the
    // accumulators with its counter would keep them in memory for the whole kernel.
    let w = load_unit(0u, uu, p.cols);
    let row4 = p.cols / 4u;
    let store = u < p.cols / 8u;
#repeat TILE
    if $iu < nt && store {
        let ia = (t0 + $iu) * row4 + w.ia;
        let ib = (t0 + $iu) * row4 + w.ib;
#if ACCUMULATE
        dx[ia] += acc_a[$i];
        dx[ib] += acc_b[$i];
#else
        dx[ia] = acc_a[$i];
        dx[ib] = acc_b[$i];
#endif
    }
#endrepeat
}
