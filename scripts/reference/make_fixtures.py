#!/usr/bin/env python3
"""Builds tiny random-weight Qwen3 and Qwen3.5 models and records reference outputs for them.

For each model in MODELS this writes tests/fixtures/qwen/<name>/:

    config.json, model.safetensors          Hugging Face checkpoint (F32), fixed seed
    tokenizer.json, tokenizer_config.json   a 512-token byte-level BPE (Qwen pre-tokenizer regex)
    model.gguf [, model-q8_0.gguf]          llama.cpp's convert_hf_to_gguf.py output
    logits.f32                              transformers (f32) logits, one batch over prompt + greedy
    hidden.f32                              transformers residual stream after every layer
    logits.q8_0.f32                         float64 logits over the dequantized Q8_0 tensors
    manifest.json                           tokens, shapes, versions, measured agreement (llama.cpp's
                                            greedy tokens and top logits included), GGUF layout

Run it through make_fixtures.sh, which prepares the pinned Python environment and llama.cpp.
tests/fixtures/qwen/README.md describes the files and the layouts they exercise.

Internal sub-command (used by the script itself): `convert-hf --pre NAME -- ARGS...` runs
llama.cpp's converter with the BPE pre-tokenizer name forced (see convert_hf()).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("LILYPAD_CACHE", pathlib.Path.home() / ".cache" / "lilypad"))
LLAMA_VERSION = "0.3.36"
LLAMA_DIR = CACHE / f"llama.cpp-{LLAMA_VERSION}"
LLAMA_SRC = LLAMA_DIR / "src" / f"llama_cpp_python-{LLAMA_VERSION}"
LLAMA_VENDOR = LLAMA_SRC / "vendor" / "llama.cpp"
LLAMA_LIB = LLAMA_DIR / "build" / "bin"
OUT_ROOT = ROOT / "tests" / "fixtures" / "qwen"

PROMPT_LEN = 64
GEN_LEN = 16
TOP_K = 8
N_CTX = 128

# Byte-level BPE: 256 byte tokens + merges up to BPE_SIZE, then the three Qwen control tokens.
VOCAB = 512
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BPE_SIZE = VOCAB - len(SPECIAL_TOKENS)

# Pre-tokenizer regexes from the real Qwen tokenizer.json files (the same strings llama.cpp
# implements for tokenizer.ggml.pre = "qwen2" and "qwen35", see src/llama-vocab.cpp).
PRE_REGEX = {
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen35": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

# Fixed training text for the tiny tokenizer (any stable text works; this one is in the script).
CORPUS = """\
The river that runs through the old town was once the main road for traders. Boats carried salt,
wool and timber from the hills to the coast, and the town grew rich on the tolls collected at its
stone bridge. When the railway arrived, the boats disappeared within a generation, and the
warehouses along the water stood empty for many years. Today they hold small shops, a library and a
museum that tells the story of the river trade. Every summer the town holds a festival in which
volunteers sail copies of the old boats under the bridge, and children learn how the locks worked.
def fibonacci(n):
    \"\"\"Return the n-th Fibonacci number.\"\"\"
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
Beautiful is better than ugly. Explicit is better than implicit. Simple is better than complex.
Complex is better than complicated. Flat is better than nested. Sparse is better than dense.
Readability counts. Special cases aren't special enough to break the rules. Although practicality
beats purity. Errors should never pass silently, unless explicitly silenced. In the face of
ambiguity, refuse the temptation to guess. There should be one-- and preferably only one --obvious
way to do it. Now is better than never. If the implementation is hard to explain, it's a bad idea.
Quantized weights, attention heads, recurrent state, rotary positions and normalisation layers
all have to agree before the logits do. We've checked: they'll match, or the test says where not.
"""

# The models. Everything that can differ from a default does, so that an engine reading the
# wrong field fails. Sizes keep every file small (see the README for the byte counts).
MODELS = [
    {
        "name": "qwen3-tiny",
        "arch": "qwen3",
        "pre": "qwen2",
        "seed": 1234,
        "gguf_types": ["f32"],
        "config": {
            "architectures": ["Qwen3ForCausalLM"],
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,  # q width 128 != hidden 64, as in real Qwen3 models
            "max_position_embeddings": 512,
            "rms_norm_eps": 1e-5,
            "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0},
            "tie_word_embeddings": False,
            "attention_bias": False,
        },
    },
    {
        "name": "qwen35-tiny",
        "arch": "qwen35",
        "pre": "qwen35",
        "seed": 4321,
        "gguf_types": ["f32", "q8_0"],
        "config": {
            "architectures": ["Qwen3_5ForCausalLM"],
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 6,
            "full_attention_interval": 3,  # layers 2 and 5 are full attention (real models: 4)
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,  # llama.cpp's qwen35 requires key dim == value dim
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,  # 2 value heads per key head
            "max_position_embeddings": 512,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000.0,
                "partial_rotary_factor": 0.25,  # 8 of 32 head dims rotate
                "mrope_section": [2, 1, 1],  # 4 rotated pairs; text positions make it plain RoPE
                "mrope_interleaved": True,
            },
            "tie_word_embeddings": True,
            "attention_bias": False,
        },
    },
]


def log(msg: str) -> None:
    print(f"[reference] {msg}", file=sys.stderr, flush=True)


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def llama_cpp_commit() -> str | None:
    m = re.search(rf"## \[{re.escape(LLAMA_VERSION)}\].*?llama\.cpp@([0-9a-f]+)",
                  (LLAMA_SRC / "CHANGELOG.md").read_text(), re.S)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------
# Tokenizer


def build_tokenizer(pre: str, out_dir: pathlib.Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_REGEX[pre]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_SIZE,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    n_bpe = tok.get_vocab_size()
    if n_bpe != BPE_SIZE:
        raise SystemExit(f"tokenizer training gave {n_bpe} tokens, expected {BPE_SIZE}")
    tok.add_special_tokens(SPECIAL_TOKENS)
    assert tok.token_to_id(SPECIAL_TOKENS[0]) == BPE_SIZE
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 512,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": (
            "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
        ),
    }, indent=2) + "\n")


# --------------------------------------------------------------------------------------------
# Model construction


def make_config(spec: dict):
    import transformers

    cfg = dict(spec["config"])
    arch = cfg.pop("architectures")[0]
    common = dict(
        bos_token_id=None,
        eos_token_id=VOCAB - 1,          # <|im_end|>
        pad_token_id=BPE_SIZE,           # <|endoftext|>
    )
    if spec["arch"] == "qwen3":
        config = transformers.Qwen3Config(**cfg, **common)
    else:
        config = transformers.Qwen3_5TextConfig(**cfg, **common)
    config.architectures = [arch]
    config.dtype = "float32"
    return config, getattr(transformers, arch)


QK_CORRELATION = 0.95


def correlate_qk(v, spec: dict, randn):
    """Makes the DeltaNet key channels (rows of in_proj_qkv, channels of conv1d) a noisy copy of
    the query channels.

    With independent random q and k, q_t . k_s ~ 1/sqrt(d_k): the delta rule's output is a small
    sum of cancelling terms, and the gated RMSNorm after it magnifies rounding error (in an
    8-layer draft, f16 weights moved logits by 1.4 and Q8_0 by 6.7). Trained models have aligned
    queries and keys; a correlation of 0.95 keeps the fixture well conditioned (the rounding
    sensitivity is then close to the dense Qwen3 fixture's) while every weight stays random.
    """
    c = spec["config"]
    kd = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    v = v.clone()
    noise = randn()[kd:2 * kd] * v[:kd].std()
    v[kd:2 * kd] = QK_CORRELATION * v[:kd] + math.sqrt(1 - QK_CORRELATION ** 2) * noise
    return v


def randomise(model, spec: dict, seed: int) -> dict:
    """Overwrites every parameter with seeded random values; returns a per-tensor summary."""
    import torch

    g = torch.Generator().manual_seed(seed)
    zero_centred = spec["arch"] == "qwen35"  # Qwen3_5RMSNorm computes x_hat * (1 + w)
    summary = {}
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        shape = tuple(p.shape)
        randn = lambda: torch.randn(shape, generator=g, dtype=torch.float64)  # noqa: E731
        rand = lambda: torch.rand(shape, generator=g, dtype=torch.float64)    # noqa: E731
        if name.endswith("A_log"):
            # g = -exp(A_log) * softplus(a + dt_bias): A in [0.05, 2] gives per-step decays
            # exp(g) between ~0.99 and ~0.2.
            v = torch.log(0.05 + 1.95 * rand())
        elif name.endswith("dt_bias"):
            v = 2.0 * rand() - 1.0
        elif name.endswith("conv1d.weight"):
            v = 0.5 * randn()
        elif name.endswith("linear_attn.norm.weight"):
            v = 0.5 + rand()  # gated RMSNorm: plain weight, default ones
        elif "norm" in name and name.endswith("weight"):
            v = 0.25 * randn() if zero_centred else 1.0 + 0.25 * randn()
        elif name.endswith("embed_tokens.weight") or name.endswith("lm_head.weight"):
            v = 0.4 * randn()
        elif name.endswith("bias"):
            v = 0.1 * randn()
        elif p.ndim == 2:
            v = randn() / math.sqrt(shape[1])
        else:
            raise SystemExit(f"no randomisation rule for parameter {name} {shape}")
        if name.endswith("linear_attn.in_proj_qkv.weight") or name.endswith("linear_attn.conv1d.weight"):
            v = correlate_qk(v, spec, randn)
        with torch.no_grad():
            p.copy_(v.to(p.dtype))
        t = p.detach().double()
        if t.std() < 1e-3:
            raise SystemExit(f"parameter {name} stayed constant")
        summary[name] = {"shape": list(shape), "mean": round(float(t.mean()), 4), "std": round(float(t.std()), 4)}
    return summary


# --------------------------------------------------------------------------------------------
# transformers reference


class HiddenRecorder:
    """Collects the residual stream: the embeddings and the output of every decoder layer."""

    def __init__(self, model):
        self.states = []
        self.handles = [model.model.embed_tokens.register_forward_hook(self._hook)]
        for layer in model.model.layers:
            self.handles.append(layer.register_forward_hook(self._hook))

    def _hook(self, module, inputs, output):
        out = output[0] if isinstance(output, tuple) else output
        self.states.append(out.detach()[0].clone())

    def close(self):
        for h in self.handles:
            h.remove()


def hf_reference(model, prompt: list[int]) -> dict:
    import torch

    with torch.no_grad():
        # Greedy continuation through the cache: prefill, then one token per step.
        ids = torch.tensor([prompt])
        out = model(input_ids=ids, use_cache=True)
        cache = out.past_key_values
        step_logits = [out.logits[0, -1].clone()]
        greedy = []
        for _ in range(GEN_LEN):
            tok = int(torch.argmax(step_logits[-1]))
            greedy.append(tok)
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            step_logits.append(out.logits[0, -1].clone())

        # One batch over prompt + greedy tokens, with the residual stream recorded.
        seq = prompt + greedy
        rec = HiddenRecorder(model)
        batch = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].clone()
        rec.close()
        hidden = torch.stack(rec.states)  # [n_layer + 1, len(seq), hidden]

    # Cached decode against the batch: step j's logits are row PROMPT_LEN - 1 + j of the batch.
    steps = torch.stack(step_logits)
    decode_diff = float((steps - batch[PROMPT_LEN - 1:]).abs().max())
    return {"seq": seq, "greedy": greedy, "logits": batch, "hidden": hidden, "decode_vs_batch": decode_diff}


def hf_f64_logits(model, seq: list[int]):
    import copy
    import torch

    m64 = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        return m64(input_ids=torch.tensor([seq]), use_cache=False).logits[0].clone()


# --------------------------------------------------------------------------------------------
# GGUF conversion (llama.cpp's converter, run as a sub-command of this script)


def convert_hf(argv: list[str]) -> None:
    """Runs convert_hf_to_gguf.py with the BPE pre-tokenizer name forced.

    The converter identifies a tokenizer's pre-tokenizer by hashing how it tokenizes a test
    string, which only works for tokenizers it knows. The fixtures' tokenizer is trained here,
    with the same regex as the real Qwen tokenizers, so the converter is told the name.
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("--pre", required=True)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    sys.path.insert(0, str(LLAMA_VENDOR))
    sys.path.insert(0, str(LLAMA_VENDOR / "gguf-py"))
    import convert_hf_to_gguf  # noqa: F401  (puts the vendored gguf-py first on sys.path)
    from conversion.base import TextModel

    TextModel.get_vocab_base_pre = lambda self, tokenizer: args.pre
    sys.argv = ["convert_hf_to_gguf.py", *rest]
    convert_hf_to_gguf.main()


def run_converter(model_dir: pathlib.Path, out: pathlib.Path, outtype: str, spec: dict) -> None:
    cmd = [sys.executable, __file__, "convert-hf", "--pre", spec["pre"], "--",
           str(model_dir), "--outtype", outtype, "--outfile", str(out),
           "--model-name", spec["name"]]
    if spec["arch"] == "qwen35":
        cmd.append("--no-mtp")
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout + res.stderr)
        raise SystemExit(f"converter failed for {out.name}")


def gguf_module():
    """llama.cpp's own gguf-py (from the sdist), not PyPI's `gguf`."""
    path = str(LLAMA_VENDOR / "gguf-py")
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf
    return gguf


def gguf_dump(path: pathlib.Path) -> dict:
    """Metadata (except the token list) and tensor table of a GGUF file, as written."""
    gguf = gguf_module()
    r = gguf.GGUFReader(str(path))
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                                     "tokenizer.ggml.merges"):
            if f.name.startswith("tokenizer.ggml."):
                meta[f.name] = f"<array of {len(f.data)}>"
            continue
        v = f.contents()
        meta[f.name] = v
    tensors = [{
        "name": t.name,
        "type": t.tensor_type.name,
        "ne": [int(x) for x in t.shape],  # ggml order: ne[0] is the contiguous dimension
        "bytes": int(t.n_bytes),
    } for t in r.tensors]
    return {"metadata": meta, "tensors": tensors}


def check_layout(out: pathlib.Path, spec: dict) -> list[str]:
    """Asserts, tensor by tensor, how the converter mapped the checkpoint into model.gguf.

    Returns the statements it verified (they are the layout rules in the README)."""
    import numpy as np
    from safetensors.numpy import load_file

    gguf = gguf_module()
    hf = load_file(str(out / "model.safetensors"))
    g = {t.name: np.asarray(t.data).reshape([int(x) for x in reversed(t.shape)])
         for t in gguf.GGUFReader(str(out / "model.gguf")).tensors}
    c = spec["config"]
    n_layer = c["num_hidden_layers"]
    done: list[str] = []

    def same(a, b, what, rtol=0.0):
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=0.0):
            raise SystemExit(f"layout check failed: {what}")

    def note(text):
        if text not in done:
            done.append(text)

    plus_one = spec["arch"] == "qwen35"
    norm = (lambda w: (w + 1).astype(np.float32)) if plus_one else (lambda w: w)
    same(g["token_embd.weight"], hf["model.embed_tokens.weight"], "token_embd")
    note("token_embd.weight (numpy [vocab, hidden]) == model.embed_tokens.weight")
    if c["tie_word_embeddings"]:
        assert "output.weight" not in g
        note("tied embeddings: no output.weight; the LM head is token_embd.weight")
    else:
        same(g["output.weight"], hf["lm_head.weight"], "output")
        note("output.weight (numpy [vocab, hidden]) == lm_head.weight")
    same(g["output_norm.weight"], norm(hf["model.norm.weight"]), "output_norm")
    for il in range(n_layer):
        p, h = f"blk.{il}.", f"model.layers.{il}."
        same(g[p + "attn_norm.weight"], norm(hf[h + "input_layernorm.weight"]), "attn_norm")
        post = "post_attention_norm.weight" if plus_one else "ffn_norm.weight"
        same(g[p + post], norm(hf[h + "post_attention_layernorm.weight"]), post)
        for a, b in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
            same(g[p + a + ".weight"], hf[h + f"mlp.{b}.weight"], a)
        if plus_one:
            note("qwen35: attn_norm, post_attention_norm, attn_q_norm, attn_k_norm and output_norm hold "
                 "1 + w (the checkpoint's zero-centred weights plus one): multiply by them directly")
        else:
            note("qwen3: every norm weight is stored as in the checkpoint (multiply directly)")
        note("linear weights keep PyTorch's [out, in] row layout (GGUF ne = [in, out])")
        if h + "self_attn.q_proj.weight" in hf:
            same(g[p + "attn_q.weight"], hf[h + "self_attn.q_proj.weight"], "attn_q")
            for a, b in (("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
                same(g[p + a + ".weight"], hf[h + f"self_attn.{b}.weight"], a)
            same(g[p + "attn_q_norm.weight"], norm(hf[h + "self_attn.q_norm.weight"]), "q_norm")
            same(g[p + "attn_k_norm.weight"], norm(hf[h + "self_attn.k_norm.weight"]), "k_norm")
            note("attn_q/attn_k/attn_v/attn_output are the checkpoint's q/k/v/o_proj unchanged "
                 "(no RoPE row permutation)")
            if plus_one:
                note("qwen35 attn_q rows: per head h, rows [2*h*D, 2*h*D + D) are the query and "
                     "[2*h*D + D, 2*(h+1)*D) the output gate (D = key_length)")
            continue
        hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        r = hv // hk
        # new value-head slot n = j * hk + k holds original head k * r + j
        perm = np.array([k * r + j for j in range(r) for k in range(hk)])
        rows = lambda x, d: x.reshape(hv, d, *x.shape[1:])[perm].reshape(x.shape)  # noqa: E731
        la = h + "linear_attn."
        qkv = hf[la + "in_proj_qkv.weight"]
        kd = hk * dk
        same(g[p + "attn_qkv.weight"], np.concatenate([qkv[:2 * kd], rows(qkv[2 * kd:], dv)]), "attn_qkv")
        same(g[p + "attn_gate.weight"], rows(hf[la + "in_proj_z.weight"], dv), "attn_gate")
        same(g[p + "ssm_beta.weight"], rows(hf[la + "in_proj_b.weight"], 1), "ssm_beta")
        same(g[p + "ssm_alpha.weight"], rows(hf[la + "in_proj_a.weight"], 1), "ssm_alpha")
        same(g[p + "ssm_dt.bias"], hf[la + "dt_bias"][perm], "ssm_dt")
        same(g[p + "ssm_a"], (-np.exp(hf[la + "A_log"].astype(np.float32)))[perm], "ssm_a", rtol=1e-6)
        conv = hf[la + "conv1d.weight"][:, 0, :]
        same(g[p + "ssm_conv1d.weight"], np.concatenate([conv[:2 * kd], rows(conv[2 * kd:], dv)]), "conv")
        same(g[p + "ssm_norm.weight"], hf[la + "norm.weight"], "ssm_norm")
        same(g[p + "ssm_out.weight"],
             hf[la + "out_proj.weight"].reshape(-1, hv, dv)[:, perm].reshape(-1, hv * dv), "ssm_out")
        note("qwen35 value heads are reordered from grouped (key head k owns value heads k*r .. k*r+r-1) "
             "to tiled order: GGUF value-head slot j*n_k + k holds checkpoint head k*r + j "
             "(r = n_v / n_k); applies to the V rows of attn_qkv, the rows of attn_gate, ssm_beta, "
             "ssm_alpha, the entries of ssm_a and ssm_dt.bias, the V channels of ssm_conv1d and the "
             "columns of ssm_out; value-head slot n reads key head n % n_k")
        note("attn_qkv rows: [q (n_k*d_k) | k (n_k*d_k) | v (n_v*d_v, tiled)]; attn_gate = in_proj_z")
        note("ssm_a = -exp(A_log) (computed in f32); ssm_dt.bias = dt_bias; ssm_norm = the gated "
             "norm's weight, stored as is (no +1)")
        note("ssm_conv1d.weight: numpy [channels, kernel] = conv1d.weight[:, 0, :]; tap j multiplies "
             "x[t - (kernel - 1) + j]")
    return done


# --------------------------------------------------------------------------------------------
# Independent float64 forward pass straight from the GGUF tensors (checks the layout notes)


def numpy_forward(path: pathlib.Path, seq: list[int], mtp_next: list[int] | None = None):
    """Logits and residual streams of `seq`; with `mtp_next` (the token after each of `seq`),
    also the multi-token-prediction layer's logits for each position, as llama.cpp's qwen35
    draft graph computes them: [rms(embd[next]) · enorm, rms(h) · hnorm] through eh_proj, one
    gated-attention decoder layer, its shared_head_norm (else output_norm), the LM head; h is
    the main model's last hidden state after output_norm."""
    import numpy as np

    gguf = gguf_module()
    r = gguf.GGUFReader(str(path))
    meta = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("tokenizer.")}
    W = {}
    for t in r.tensors:
        a = np.asarray(t.data)
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            a = gguf.dequantize(t.data, t.tensor_type)
        # numpy shape is ne reversed: a 2-D tensor is [rows = ne[1], cols = ne[0]].
        W[t.name] = a.astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
    arch = meta["general.architecture"]
    K = lambda k: meta[f"{arch}.{k}"]  # noqa: E731
    n_layer, n_head, n_kv = K("block_count"), K("attention.head_count"), K("attention.head_count_kv")
    n_layer -= meta.get(f"{arch}.nextn_predict_layers", 0)  # MTP blocks come after the main ones
    hd = K("attention.key_length")
    eps = K("attention.layer_norm_rms_epsilon")
    base = K("rope.freq_base")
    n_rot = meta.get(f"{arch}.rope.dimension_count", hd)  # absent: the whole head rotates
    T = len(seq)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):  # x: [T, heads, hd]; NEOX pairs (i, i + n_rot/2) over the first n_rot dims
        half = n_rot // 2
        inv = base ** (-np.arange(half) * 2.0 / n_rot)
        ang = np.arange(T)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x = x.copy()
        a, b = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half] = a * c - b * s
        x[..., half:n_rot] = b * c + a * s
        return x

    def attention(x, il, gated):
        p = f"blk.{il}."
        q = x @ W[p + "attn_q.weight"].T
        if gated:
            q = q.reshape(T, n_head, 2 * hd)
            q, gate = q[..., :hd], q[..., hd:].reshape(T, n_head * hd)
        else:
            q = q.reshape(T, n_head, hd)
        k = (x @ W[p + "attn_k.weight"].T).reshape(T, n_kv, hd)
        v = (x @ W[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        q = rope(rms(q, W[p + "attn_q_norm.weight"]))
        k = rope(rms(k, W[p + "attn_k_norm.weight"]))
        out = np.zeros((T, n_head, hd))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for h in range(n_head):
            j = h // (n_head // n_kv)
            sc = q[:, h] @ k[:, j].T / math.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            out[:, h] = (sc / sc.sum(-1, keepdims=True)) @ v[:, j]
        out = out.reshape(T, n_head * hd)
        if gated:
            out = out / (1.0 + np.exp(-gate))
        return out @ W[p + "attn_output.weight"].T

    def delta_net(x, il):
        p = f"blk.{il}."
        dk, hk, hv = K("ssm.state_size"), K("ssm.group_count"), K("ssm.time_step_rank")
        dv = K("ssm.inner_size") // hv
        kconv = K("ssm.conv_kernel")
        qkv = x @ W[p + "attn_qkv.weight"].T                      # [T, 2*hk*dk + hv*dv]
        z = (x @ W[p + "attn_gate.weight"].T).reshape(T, hv, dv)
        beta = 1.0 / (1.0 + np.exp(-(x @ W[p + "ssm_beta.weight"].T)))          # [T, hv]
        alpha = x @ W[p + "ssm_alpha.weight"].T + W[p + "ssm_dt.bias"]
        g = np.logaddexp(0.0, alpha) * W[p + "ssm_a"]              # softplus * (-exp(A_log))
        cw = W[p + "ssm_conv1d.weight"]                            # [channels, kconv]
        padded = np.concatenate([np.zeros((kconv - 1, qkv.shape[1])), qkv])
        conv = sum(padded[j:j + T] * cw[:, j] for j in range(kconv))
        conv = conv / (1.0 + np.exp(-conv))                        # SiLU
        q = conv[:, :hk * dk].reshape(T, hk, dk)
        k = conv[:, hk * dk:2 * hk * dk].reshape(T, hk, dk)
        v = conv[:, 2 * hk * dk:].reshape(T, hv, dv)
        l2 = lambda a: a / np.sqrt((a * a).sum(-1, keepdims=True) + eps)  # noqa: E731
        q, k = l2(q) / math.sqrt(dk), l2(k)
        out = np.zeros((T, hv, dv))
        for h in range(hv):
            j = h % hk  # value heads are stored tiled: value head h reads key head h % hk
            S = np.zeros((dk, dv))
            for t in range(T):
                S = S * math.exp(g[t, h])
                delta = (v[t, h] - S.T @ k[t, j]) * beta[t, h]
                S = S + np.outer(k[t, j], delta)
                out[t, h] = S.T @ q[t, j]
        out = rms(out, W[p + "ssm_norm.weight"]) * (z / (1.0 + np.exp(-z)))
        return out.reshape(T, hv * dv) @ W[p + "ssm_out.weight"].T

    recurrent = meta.get(f"{arch}.attention.recurrent_layers")
    h = W["token_embd.weight"][seq]
    hidden = [h]
    for il in range(n_layer):
        p = f"blk.{il}."
        xn = rms(h, W[p + "attn_norm.weight"])
        if arch == "qwen35" and recurrent[il]:
            h = h + delta_net(xn, il)
        else:
            h = h + attention(xn, il, gated=(arch == "qwen35"))
        post = "post_attention_norm.weight" if arch == "qwen35" else "ffn_norm.weight"
        xn = rms(h, W[p + post])
        a = xn @ W[p + "ffn_gate.weight"].T
        h = h + ((a / (1.0 + np.exp(-a))) * (xn @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
        hidden.append(h)
    out_w = W.get("output.weight", W["token_embd.weight"])
    normed = rms(h, W["output_norm.weight"])
    if mtp_next is None:
        return normed @ out_w.T, np.stack(hidden)
    p = f"blk.{n_layer}."
    e = rms(W["token_embd.weight"][mtp_next], W[p + "nextn.enorm.weight"])
    x = np.concatenate([e, rms(normed, W[p + "nextn.hnorm.weight"])], axis=-1)
    x = x @ W[p + "nextn.eh_proj.weight"].T
    x = x + attention(rms(x, W[p + "attn_norm.weight"]), n_layer, gated=True)
    xn = rms(x, W[p + "post_attention_norm.weight"])
    a = xn @ W[p + "ffn_gate.weight"].T
    x = x + ((a / (1.0 + np.exp(-a))) * (xn @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    head_norm = W.get(p + "nextn.shared_head_norm.weight", W["output_norm.weight"])
    return normed @ out_w.T, np.stack(hidden), rms(x, head_norm) @ out_w.T


def numpy_greedy(path: pathlib.Path, prompt: list[int]) -> list[int]:
    seq = list(prompt)
    for _ in range(GEN_LEN):
        logits, _ = numpy_forward(path, seq)
        seq.append(int(logits[-1].argmax()))
    return seq[len(prompt):]


# --------------------------------------------------------------------------------------------
# llama.cpp


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _silent_log(level, text, user_data):
    pass


class LlamaCpp:
    """llama.cpp through the ctypes bindings of the llama-cpp-python sdist (f32 KV cache)."""

    def __init__(self):
        os.environ["LLAMA_CPP_LIB_PATH"] = str(LLAMA_LIB)
        sys.path.insert(0, str(LLAMA_SRC))
        import llama_cpp
        self.L = llama_cpp
        self.L.llama_log_set(_silent_log, ctypes.c_void_p())
        self.L.llama_backend_init()

    def load(self, path: pathlib.Path):
        L = self.L
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        model = L.llama_model_load_from_file(str(path).encode(), mp)
        if not model:
            raise SystemExit(f"llama.cpp cannot load {path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cp.n_ubatch = N_CTX
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = 1
        cp.type_k = cp.type_v = L.GGML_TYPE_F32
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.no_perf = True
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise SystemExit("llama.cpp cannot create a context")
        return model, ctx

    def free(self, model, ctx):
        self.L.llama_free(ctx)
        self.L.llama_model_free(model)

    def _decode(self, ctx, batch, tokens, start, all_logits):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if (all_logits or i == len(tokens) - 1) else 0
        rc = self.L.llama_decode(ctx, batch)
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")

    def run(self, path: pathlib.Path, prompt: list[int], seq: list[int]):
        """Greedy tokens (prompt batch, then one token per step), logits for `seq` as one batch,
        and logits for `seq` decoded one token at a time after the prompt."""
        import numpy as np

        L = self.L
        model, ctx = self.load(path)
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        batch = L.llama_batch_init(N_CTX, 0, 1)
        row = lambda i: np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()  # noqa: E731

        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        self._decode(ctx, batch, prompt, 0, False)
        greedy = [int(np.argmax(row(-1)))]
        while len(greedy) < GEN_LEN:
            self._decode(ctx, batch, [greedy[-1]], len(prompt) + len(greedy) - 1, False)
            greedy.append(int(np.argmax(row(-1))))

        # Teacher-forced decode of `seq` (one token per step after the prompt), for comparison
        # with the batch below: same tokens, different kernels and cache paths.
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        self._decode(ctx, batch, prompt, 0, False)
        steps = [row(-1)]
        for i in range(len(prompt), len(seq)):
            self._decode(ctx, batch, [seq[i]], i, False)
            steps.append(row(-1))

        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        self._decode(ctx, batch, seq, 0, True)
        logits = np.stack([row(i) for i in range(len(seq))])
        L.llama_batch_free(batch)
        self.free(model, ctx)
        return greedy, logits, np.stack(steps)

    def tokenize(self, path: pathlib.Path, text: str) -> list[int]:
        L = self.L
        mp = L.llama_model_default_params()
        mp.vocab_only = True
        model = L.llama_model_load_from_file(str(path).encode(), mp)
        vocab = L.llama_model_get_vocab(model)
        data = text.encode()
        arr = (L.llama_token * (len(data) + 16))()
        n = L.llama_tokenize(vocab, data, len(data), arr, len(arr), False, True)
        L.llama_model_free(model)
        return list(arr[:n])


# --------------------------------------------------------------------------------------------


def write_f32(path: pathlib.Path, array) -> list[int]:
    import numpy as np

    a = np.ascontiguousarray(np.asarray(array, dtype="<f4"))
    path.write_bytes(a.tobytes())
    return list(a.shape)


def maxabs(a, b) -> float:
    import numpy as np

    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def top_k(logits, k: int = TOP_K) -> list[dict]:
    """Per row: the k highest logits, best first (ties by lower id), rounded to 1e-5."""
    import numpy as np

    rows = []
    for row in logits:
        idx = np.lexsort((np.arange(row.shape[0]), -row))[:k]
        rows.append({"ids": [int(i) for i in idx], "logits": [round(float(row[i]), 5) for i in idx]})
    return rows


def compare_llamacpp(name, fname, llama, out, prompt, seq, ref_greedy, ref_logits, what) -> tuple:
    """Runs llama.cpp on one GGUF and measures it against a reference (logits for `seq`)."""
    import numpy as np

    greedy, logits, steps = llama.run(out / fname, prompt, seq)
    info = {
        "reference": what,
        "greedy_tokens": greedy,
        "greedy_matches_reference": greedy == ref_greedy,
        "max_abs_logit_diff": maxabs(logits, ref_logits),
        "batch_argmax_agreement": float(np.mean(logits.argmax(-1) == ref_logits.argmax(-1))),
        "max_abs_logit_diff_decode_vs_batch": maxabs(steps, logits[PROMPT_LEN - 1:]),
    }
    log(f"{name}: llama.cpp on {fname} vs {what}: max |dlogit| {info['max_abs_logit_diff']:.3g}, "
        f"greedy match {info['greedy_matches_reference']}")
    return info, logits


def build_one(spec: dict, llama: LlamaCpp, versions: dict) -> dict:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    name = spec["name"]
    out = OUT_ROOT / name
    t0 = time.time()
    log(f"{name}: building ({spec['arch']})")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    build_tokenizer(spec["pre"], out)
    config, cls = make_config(spec)
    torch.manual_seed(spec["seed"])
    model = cls._from_config(config, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    param_summary = randomise(model, spec, spec["seed"])
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    (out / "model.safetensors").chmod(0o644)
    if "full_attention_interval" in spec["config"]:
        # transformers turns the interval into `layer_types` and does not save it; real Qwen3.5
        # config.json files carry both, and llama.cpp's converter reads the interval (default 4).
        cfg = json.loads((out / "config.json").read_text())
        cfg["full_attention_interval"] = spec["config"]["full_attention_interval"]
        (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {n_params} parameters, checkpoint saved")

    # Reload from disk so the reference runs on exactly the stored weights.
    model = cls.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    prompt = [int(x) for x in np.random.default_rng(spec["seed"]).integers(0, BPE_SIZE, PROMPT_LEN)]
    ref = hf_reference(model, prompt)
    seq, logits, hidden = ref["seq"], ref["logits"].numpy(), ref["hidden"].numpy()
    log(f"{name}: transformers logits std {logits.std():.3f}, greedy {ref['greedy']}")
    l64 = hf_f64_logits(model, seq).numpy()

    files = {
        "logits.f32": {"shape": write_f32(out / "logits.f32", logits),
                       "what": "transformers, f32, one batch over prompt_tokens + greedy_tokens; "
                               "row i scores token i + 1"},
        "hidden.f32": {"shape": write_f32(out / "hidden.f32", hidden),
                       "what": "transformers residual stream for the same batch: [0] token embeddings, "
                               "[l + 1] output of layer l (the last one before the final norm)"},
    }
    agreement = {
        "transformers_f32_vs_f64_cast": maxabs(logits, l64),
        "transformers_decode_vs_batch": ref["decode_vs_batch"],
    }
    ggufs = {}
    for outtype in spec["gguf_types"]:
        fname = "model.gguf" if outtype == "f32" else f"model-{outtype}.gguf"
        log(f"{name}: converting to {fname}")
        run_converter(out, out / fname, outtype, spec)
        entry = {"outtype": outtype, "sha256": sha256(out / fname), "bytes": (out / fname).stat().st_size}
        lnp, hnp = numpy_forward(out / fname, seq)
        if outtype == "f32":
            layout_checks = check_layout(out, spec)
            log(f"{name}: {len(layout_checks)} layout rules verified against the checkpoint")
            agreement["numpy_f64_vs_transformers_f32"] = maxabs(lnp, logits)
            agreement["numpy_f64_vs_transformers_f64_cast"] = maxabs(lnp, l64)
            agreement["numpy_f64_hidden_vs_transformers_f32"] = maxabs(hnp, hidden)
            info, cpp = compare_llamacpp(name, fname, llama, out, prompt, seq, ref["greedy"], logits,
                                         "transformers f32 (logits.f32)")
            agreement["llamacpp_f32_gguf_vs_transformers_f32"] = info["max_abs_logit_diff"]
            agreement["llamacpp_f32_gguf_vs_numpy_f64"] = maxabs(cpp, lnp)
            entry["llamacpp"] = info
            entry["llamacpp_top_logits"] = top_k(cpp)
        else:
            # The exact answer for these rounded weights: float64 over the dequantized tensors.
            ref_name = f"logits.{outtype}.f32"
            files[ref_name] = {
                "shape": write_f32(out / ref_name, lnp),
                "what": f"float64 forward pass over the dequantized tensors of {fname} (stored as f32), "
                        "same batch as logits.f32"}
            q_greedy = numpy_greedy(out / fname, prompt)
            entry["reference_greedy_tokens"] = q_greedy
            entry["reference_note"] = (
                f"{ref_name} scores prompt_tokens + greedy_tokens (the f32 model's continuation); "
                "reference_greedy_tokens is the greedy continuation of the dequantized model itself")
            entry["max_abs_logit_diff_vs_f32_weights"] = maxabs(lnp, logits)
            info, cpp = compare_llamacpp(name, fname, llama, out, prompt, seq, q_greedy, lnp,
                                         f"float64 over dequantized {fname} ({ref_name})")
            info["note"] = "llama.cpp also rounds activations to 8-bit blocks for Q8_0 products"
            entry["llamacpp"] = info
        ggufs[fname] = entry

    tok = AutoTokenizer.from_pretrained(out)
    sample = "The river's boats carried 33 tons of salt.\n<|im_start|>user\nHello<|im_end|>"
    hf_ids = tok.encode(sample, add_special_tokens=False)
    cpp_ids = llama.tokenize(out / "model.gguf", sample)

    manifest = {
        "name": name,
        "architecture": spec["arch"],
        "hf_class": config.architectures[0],
        "seed": spec["seed"],
        "parameters_total": n_params,
        "generator": "scripts/reference/make_fixtures.sh",
        "versions": versions,
        "prompt_tokens": prompt,
        "greedy_tokens": ref["greedy"],
        "greedy_note": f"{GEN_LEN} argmax steps through the cache after the prompt; end-of-sequence not special",
        "files": {k: {"dtype": "f32 little-endian, row-major", **v} for k, v in files.items()},
        "logits_std": round(float(logits.std()), 4),
        "min_top2_gap": round(float(np.min(np.diff(np.sort(logits, -1)[:, -2:], axis=-1))), 5),
        "max_abs_logit_diff": agreement,
        "gguf_files": ggufs,
        "tokenizer_check": {"text": sample, "transformers_ids": hf_ids, "llamacpp_ids": cpp_ids,
                            "agree": hf_ids == cpp_ids},
        "hf_parameters": param_summary,
        "gguf_layout_checks": layout_checks,
        "gguf_layout": gguf_dump(out / "model.gguf"),
    }
    for fname, entry in ggufs.items():
        if fname != "model.gguf":
            manifest["gguf_layout_" + fname] = [
                {"name": t["name"], "type": t["type"]} for t in gguf_dump(out / fname)["tensors"]]
    (out / "manifest.json").write_text(dump_json(manifest))
    size = sum(f.stat().st_size for f in out.iterdir())
    log(f"{name}: done in {time.time() - t0:.0f}s, {size / 1e6:.2f} MB")
    return {"max_abs_logit_diff": agreement, **{k: v["llamacpp"] for k, v in ggufs.items()}}


def dump_json(obj) -> str:
    """Indented JSON with short number lists on one line."""
    text = json.dumps(obj, indent=1)
    text = re.sub(r"\[\s*([-0-9.e,\s]*?)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    text = re.sub(r'\{\s*("ids": \[[^\]]*\]),\s*("logits": \[[^\]]*\])\s*\}', r"{\1, \2}", text)
    return text + "\n"


def versions() -> dict:
    import numpy
    import safetensors
    import tokenizers
    import torch
    import transformers

    gguf_ver = re.search(r'^version = "([^"]+)"', (LLAMA_VENDOR / "gguf-py" / "pyproject.toml").read_text(), re.M)
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": numpy.__version__,
        "llama_cpp_python": LLAMA_VERSION,
        "llama_cpp_commit": llama_cpp_commit(),
        "gguf_py": gguf_ver.group(1) if gguf_ver else None,
    }


def main() -> None:
    if sys.argv[1:2] == ["convert-hf"]:
        convert_hf(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="build only this model (repeatable)")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(1)
    if not (LLAMA_LIB / "libllama.so").exists():
        raise SystemExit(f"{LLAMA_LIB}/libllama.so missing: run scripts/llama-cpp/build.sh")
    llama = LlamaCpp()
    ver = versions()
    summary = {}
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        m = build_one(spec, llama, ver)
        summary[spec["name"]] = m
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
