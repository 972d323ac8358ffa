// The KV cache's elements, for the kernels that read it (attention.wgsl and its backward):
// f32, or with KV_F16 two f16 values packed in a u32 by `pack2x16float` (rope.wgsl's
// `rope_store` writes them), which needs no shader-f16 feature and halves the cache's
// memory and the bandwidth attention spends reading it.
// The includer binds `k` and `v` as arrays of KvVec4 (the per-thread layouts: a vec4 of
// values per element) or of KvScalar (the others) and reads them through k4/v4 or k_at/v_at.

#if KV_F16
alias KvVec4 = vec2<u32>;
// Two values.
alias KvScalar = u32;

fn unpack_kv4(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
#else
alias KvVec4 = vec4<f32>;
alias KvScalar = f32;

fn unpack_kv4(w: vec4<f32>) -> vec4<f32> {
    return w;
}
#endif

#if PER_THREAD
// Values 4i .. 4i + 3 of K or V.
fn k4(i: u32) -> vec4<f32> {
    return unpack_kv4(k[i]);
}

fn v4(i: u32) -> vec4<f32> {
    return unpack_kv4(v[i]);
}
#else
// Value i of K or V.
fn k_at(i: u32) -> f32 {
#if KV_F16
    return unpack2x16float(k[i / 2u])[i % 2u];
#else
    return k[i];
#endif
}

fn v_at(i: u32) -> f32 {
#if KV_F16
    return unpack2x16float(v[i / 2u])[i % 2u];
#else
    return v[i];
#endif
}
#endif
