// Per-forward values shared by every kernel of a step: written once before each submit.
// A step holds tokens of one sequence (prefill, decode) or one token each of several
// sequences (batched decode): every token carries its own position, the row of the KV caches
// it writes and reads up to, and the slot of its sequence, whose recurrent state it uses.
struct Step {
    n_tokens: u32,  // tokens in this step
    pos0: u32,      // position of the first of them
    kv_len: u32,    // pos0 + n_tokens
    _pad: u32,
    // Per token: (position, KV-cache row = slot · context + position, slot, checkpoint). The
    // recurrent kernels (conv1d, the delta rule's recurrent form) also write the state after a
    // token whose checkpoint is c > 0 into slot c − 1 (speculative decoding keeps the state
    // after the checked token, in case the draft after it is rejected).
    tok: array<vec4<u32>, 512>,
}
