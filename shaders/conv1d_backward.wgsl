// The input gradient of conv1d.wgsl for a step of one sequence. With e = [state_in; x], the
// K − 1 inputs before the step then the step's T, the forward is
//   a_t = Σ_j w[c, j] · e[t + j],  y_t = silu(a_t),  state_out = e[T ..],
// so, with da_t = dy_t · silu'(a_t) (a_t recomputed),
//   de[i] = Σ_j w[c, j] · da_{i − j}  (0 ≤ i − j < T)  + d_state_out[i − T]  (i ≥ T)
// and dx_t = de[K − 1 + t], d_state_in = de[.. K − 1]: the gradient that the step before
// receives as its d_state_out (zero after a sequence's last step). The weights are frozen.
// One thread per channel, as in the forward.
// state_in may be the step before's own inputs: its rows state_row0 .. state_row0 + K − 1.
// Macros: WG, N_TAPS (K).

#include "common/step.wgsl"

struct Params {
    channels: u32,
    state_row0: u32,  // the first of state_in's rows to read (the step before's conv input)
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> state_in: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read> d_state_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;
@group(0) @binding(6) var<storage, read_write> d_state_in: array<f32>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> step: Step;

var<private> c: u32;

// e[i]: the state's rows, then the step's inputs.
fn e(i: u32) -> f32 {
    if i + 1u < N_TAPS {
        return state_in[(p.state_row0 + i) * p.channels + c];
    }
    return x[(i + 1u - N_TAPS) * p.channels + c];
}

// dy_t · silu'(a_t).
fn da(t: u32) -> f32 {
    var a = 0.0;
    for (var j = 0u; j < N_TAPS; j++) {
        a += w[c * N_TAPS + j] * e(t + j);
    }
    let s = 1.0 / (1.0 + exp(-a));
    return dy[t * p.channels + c] * s * (1.0 + a * (1.0 - s));
}

@compute @workgroup_size(WG)
fn conv1d_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) tid: u32) {
    c = (wid.x + wid.z * nwg.x) * WG + tid;
    if c >= p.channels {
        return;
    }
    let n = step.n_tokens;
    for (var i = 0u; i + 1u < N_TAPS + n; i++) {
        var g = 0.0;
        for (var j = 0u; j < N_TAPS; j++) {
            if i >= j && i - j < n {
                g += w[c * N_TAPS + j] * da(i - j);
            }
        }
        if i >= n {
            g += d_state_out[(i - n) * p.channels + c];
        }
        if i + 1u < N_TAPS {
            d_state_in[i * p.channels + c] = g;
        } else {
            dx[(i + 1u - N_TAPS) * p.channels + c] = g;
        }
    }
}
