// The optimizer's update, in place on a parameter tensor (AdamW, decoupled weight decay):
//   g = grad · grad_scale                       (gradient clipping's factor)
//   m = β1 m + (1 − β1) g;   v = β2 v + (1 − β2) g²
//   param −= lr · (param_scale · (m / bc1) / (sqrt(v / bc2) + eps) + wd · param)
// bc1 = 1 − β1^t and bc2 = 1 − β2^t come from the host. `param_scale`: the parameter is stored
// times that (a LoRA B scaled by alpha / r) while its gradient and moments are of the unscaled
// one, so the step moves the unscaled parameter by the usual amount.
// sum_squares: out[index] = Σ grad², one workgroup per tensor (the global norm's parts).
// Macros: WG.

struct Params {
    n: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    wd: f32,
    bc1: f32,
    bc2: f32,
    grad_scale: f32,
    param_scale: f32,
    index: u32,  // sum_squares: where its sum goes
}

@group(0) @binding(0) var<storage, read_write> param: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn adamw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) tid: u32) {
    let i = (wid.x + wid.z * nwg.x) * WG + tid;
    if i >= p.n {
        return;
    }
    let g = grad[i] * p.grad_scale;
    let mi = p.beta1 * m[i] + (1.0 - p.beta1) * g;
    let vi = p.beta2 * v[i] + (1.0 - p.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    let step = p.param_scale * (mi / p.bc1) / (sqrt(vi / p.bc2) + p.eps);
    param[i] -= p.lr * (step + p.wd * param[i]);
}

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn sum_squares(@builtin(local_invocation_index) tid: u32) {
    var s = 0.0;
    for (var i = tid; i < p.n; i += WG) {
        s += grad[i] * grad[i];
    }
    partial[tid] = s;
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        workgroupBarrier();
        if tid < h {
            partial[tid] += partial[tid + h];
        }
    }
    if tid == 0u {
        out[p.index] = partial[0];
    }
}
