// What the gated delta rule's forward (delta_net.wgsl) and backward (delta_net_backward.wgsl)
// share: where token t's q, k (of key head kh) and v (of value head s) sit in the conv
// output qkv [T, 2·n_k·d_k + n_v·d_v], and the decay's log. The includer declares `p` (with
// n_k, n_v, d_k, d_v), `alpha`, `a` and `dt_bias`.

fn row_len() -> u32 {
    return 2u * p.n_k * p.d_k + p.n_v * p.d_v;
}

fn q_at(t: u32, kh: u32) -> u32 {
    return t * row_len() + kh * p.d_k;
}

fn k_at(t: u32, kh: u32) -> u32 {
    return t * row_len() + (p.n_k + kh) * p.d_k;
}

fn v_at(t: u32, s: u32) -> u32 {
    return t * row_len() + 2u * p.n_k * p.d_k + s * p.d_v;
}

// log γ: softplus (linear above 20, as torch's) times a ≤ 0.
fn log_decay(t: u32, s: u32) -> f32 {
    let x = alpha[t * p.n_v + s] + dt_bias[s];
    return select(log(1.0 + exp(x)), x, x > 20.0) * a[s];
}
