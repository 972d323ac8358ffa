// Causal depthwise conv1d over time with a rolling state, then SiLU (Qwen3.5's DeltaNet input).
// x: [T, C] this step's inputs; w: [C, K], tap K - 1 multiplies the current token;
// state: [slots, K - 1, C], per sequence slot the inputs of the K - 1 tokens before this step
// (row 0 the oldest; zero at the start of a sequence), updated in place to the last K - 1
// inputs; token t uses its sequence's slot (Step.tok[t].z); y = silu(conv). A token with a
// checkpoint (Step.tok[t].w = c > 0) also leaves the window after it in slot c − 1.
// One thread per channel walks the step's tokens in order: each thread touches only its own
// channel of the state, and a batch does exactly the arithmetic of token-by-token calls.
// Macros: WG, N_TAPS (K).

#include "common/step.wgsl"

struct Params {
    channels: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn conv1d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) tid: u32) {
    let c = (wid.x + wid.z * nwg.x) * WG + tid;
    let n_ch = p.channels;
    if c >= n_ch {
        return;
    }
    var taps: array<f32, N_TAPS>;
    // win[j] holds the input at t - (K - 1) + j.
    var win: array<f32, N_TAPS>;
    for (var j = 0u; j < N_TAPS; j++) {
        taps[j] = w[c * N_TAPS + j];
    }
    let slot_len = (N_TAPS - 1u) * n_ch;
    var slot = step.tok[0].z;
    for (var j = 0u; j + 1u < N_TAPS; j++) {
        win[j] = state[slot * slot_len + j * n_ch + c];
    }
    for (var t = 0u; t < step.n_tokens; t++) {
        // A token of another sequence (batched decode): swap the window.
        if step.tok[t].z != slot {
            for (var j = 0u; j + 1u < N_TAPS; j++) {
                state[slot * slot_len + j * n_ch + c] = win[j];
            }
            slot = step.tok[t].z;
            for (var j = 0u; j + 1u < N_TAPS; j++) {
                win[j] = state[slot * slot_len + j * n_ch + c];
            }
        }
        win[N_TAPS - 1u] = x[t * n_ch + c];
        var acc = 0.0;
        for (var j = 0u; j < N_TAPS; j++) {
            acc += taps[j] * win[j];
        }
        y[t * n_ch + c] = acc / (1.0 + exp(-acc));
        for (var j = 0u; j + 1u < N_TAPS; j++) {
            win[j] = win[j + 1u];
        }
        let checkpoint = step.tok[t].w;
        if checkpoint != 0u {
            for (var j = 0u; j + 1u < N_TAPS; j++) {
                state[(checkpoint - 1u) * slot_len + j * n_ch + c] = win[j];
            }
        }
    }
    for (var j = 0u; j + 1u < N_TAPS; j++) {
        state[slot * slot_len + j * n_ch + c] = win[j];
    }
}
