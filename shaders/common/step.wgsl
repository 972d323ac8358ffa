// Per-forward values shared by every kernel of a step: written once before each submit.
struct Step {
    n_tokens: u32,  // tokens in this step (prefill chunk or 1 for decode)
    pos0: u32,      // position of the first of them
    kv_len: u32,    // pos0 + n_tokens
    _pad: u32,
}
