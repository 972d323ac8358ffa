// Row-wise softmax (or log-softmax with LOG) of n_rows rows of n values, one workgroup a row.
// Max-subtracted for stability; sums reduce in a fixed tree order, so results are reproducible.
// GATHER: only log p of one given column per row, y[row] = x[row, targets[row]] − logsumexp
// (the log-probabilities of chosen tokens, without the whole rows leaving the GPU); rows run
// along the grid's y (one per token of the step).
// GATHER with GRAD: the gradient of a loss Σ_row coef[row] · log p(targets[row]) with respect
// to the logits, y[row, i] = coef[row] · ([i = target] − p_i), a whole row per token: what the
// policy-gradient loss sends back into the LM head.
// Macros: WG, LOG, GATHER, GRAD.

struct Params {
    n: u32,
    n_rows: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
#if GATHER
@group(0) @binding(3) var<storage, read> targets: array<u32>;
#endif
#if GRAD
@group(0) @binding(4) var<storage, read> coef: array<f32>;
#endif

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
#if GATHER
    let row = wid.y;
#else
    let row = wid.x;
#endif
    let live = row < p.n_rows;
    let base = row * p.n;
    var mx = -3.0e38;
    if live {
        for (var i = tid; i < p.n; i += WG) {
            mx = max(mx, x[base + i]);
        }
    }
    red[tid] = mx;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            red[tid] = max(red[tid], red[tid + s]);
        }
    }
    workgroupBarrier();
    mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    if live {
        for (var i = tid; i < p.n; i += WG) {
            sum += exp(x[base + i] - mx);
        }
    }
    red[tid] = sum;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            red[tid] += red[tid + s];
        }
    }
    workgroupBarrier();
    sum = red[0];
#if GRAD
    if live {
        let chosen = targets[row];
        let c = coef[row];
        for (var i = tid; i < p.n; i += WG) {
            y[base + i] = c * (select(0.0, 1.0, i == chosen) - exp(x[base + i] - mx) / sum);
        }
    }
#else
#if GATHER
    if live && tid == 0u {
        y[row] = x[base + min(targets[row], p.n - 1u)] - mx - log(sum);
    }
#else
    if live {
        for (var i = tid; i < p.n; i += WG) {
#if LOG
            y[base + i] = x[base + i] - mx - log(sum);
#else
            y[base + i] = exp(x[base + i] - mx) / sum;
#endif
        }
    }
#endif
#endif
}
