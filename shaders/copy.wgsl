// dst = src, vec4 at a time: the bandwidth yardstick every kernel is measured against.

struct Params {
    n_vec4: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let i = (wid.x + wid.z * nwg.x) * WG + tid;
    if i < p.n_vec4 {
        dst[i] = src[i];
    }
}
