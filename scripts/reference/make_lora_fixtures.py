#!/usr/bin/env python3
"""Records reference outputs for random PEFT LoRA adapters on three tiny models.

For each model in MODELS this writes tests/fixtures/lora/<name>/:

    adapter/adapter_config.json         PEFT LoraConfig as saved by save_pretrained (target_modules
                                        sorted, base_model_name_or_path = <name>)
    adapter/adapter_model.safetensors   every lora_A / lora_B, f32, random (fixed seed)
    logits.f32                          transformers + peft, f32, base model with the adapter
    logits_base.f32                     the same forward without the adapter
    logits_merged.f32                   after merge_and_unload() (f32)
    manifest.json                       token ids, LoRA settings, tensor shapes, measured numbers,
                                        versions, and how each adapter tensor maps onto model.gguf
    model/ (llama-tiny only)            config.json, model.safetensors, model.gguf (f32) and the
                                        tokenizer the GGUF converter needs

The qwen3-tiny and qwen35-tiny adapters sit on the existing base models in
tests/fixtures/qwen/<name>/ (loaded from there, not copied). Every logits file is
little-endian f32 [SEQ_LEN, vocab], row i = logits after token i, one forward over the whole
sequence.

Besides transformers, an independent float64 numpy forward pass reads the base model.gguf, adds
scale * B @ A for every adapter tensor after mapping it into the GGUF's layout (rows of B and
columns of A permuted where the converter permuted the weight), and must reproduce logits.f32:
that checks the mapping rules recorded in manifest.json ("gguf_mapping") that an engine applying a
PEFT adapter to a GGUF base needs.

Run it through make_lora_fixtures.sh, which prepares the pinned Python environment and the
llama.cpp sources (only the converter and gguf-py are used; nothing is compiled).
tests/fixtures/lora/README.md describes the files.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import shutil
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures as mf  # noqa: E402  (converter, gguf-py access, numpy forward for qwen)

ROOT = mf.ROOT
OUT_ROOT = ROOT / "tests" / "fixtures" / "lora"
QWEN_ROOT = ROOT / "tests" / "fixtures" / "qwen"
SEQ_LEN = 20
VOCAB = 512

ATTN_MLP = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DELTANET = ["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"]

# New tiny Llama (llama-tiny/model/): head_dim * heads == hidden, GQA 2:1, untied, no biases.
LLAMA_CONFIG = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
}

# `strength`: the std of the merged update scale * B @ A relative to the base weights' std
# (1/sqrt(fan_in)); chosen so that max |logit(adapter) - logit(base)| is of order 1.
MODELS = [
    {"name": "llama-tiny", "arch": "llama", "base": None, "seed": 2718,
     "r": 4, "alpha": 8, "use_rslora": False, "targets": ATTN_MLP, "strength": 0.035},
    {"name": "qwen3-tiny", "arch": "qwen3", "base": QWEN_ROOT / "qwen3-tiny", "seed": 3141,
     "r": 8, "alpha": 16, "use_rslora": True, "targets": ATTN_MLP, "strength": 0.035},
    {"name": "qwen35-tiny", "arch": "qwen35", "base": QWEN_ROOT / "qwen35-tiny", "seed": 1618,
     "r": 6, "alpha": 12, "use_rslora": False, "targets": ATTN_MLP + DELTANET, "strength": 0.025},
]

TOL_BASE_VS_QWEN_FIXTURE = 1e-4
TOL_MERGED = 1e-4  # f32 rounding only: measured 0.9e-5 .. 4.3e-5, the order of |f32 - f64|
TOL_NUMPY = 1e-3


def log(msg: str) -> None:
    print(f"[lora] {msg}", file=sys.stderr, flush=True)


def rel(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


# --------------------------------------------------------------------------------------------
# Models


def build_llama(spec: dict, model_dir: pathlib.Path) -> dict:
    """New random LlamaForCausalLM saved to model_dir (+ tokenizer + f32 GGUF)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(**LLAMA_CONFIG, bos_token_id=None, eos_token_id=VOCAB - 1,
                                      pad_token_id=VOCAB - 3)
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "float32"
    torch.manual_seed(spec["seed"])
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="eager",
                                                       dtype=torch.float32).eval()
    # make_fixtures.randomise: linear N(0, 1/fan_in), embeddings and LM head N(0, 0.4^2),
    # norm weights 1 + N(0, 0.25^2) (arch "llama" is not zero-centred); fails on a constant tensor.
    summary = mf.randomise(model, {"arch": "llama"}, spec["seed"])
    model_dir.mkdir(parents=True)
    model.save_pretrained(model_dir, safe_serialization=True)
    (model_dir / "generation_config.json").unlink(missing_ok=True)
    (model_dir / "model.safetensors").chmod(0o644)
    # The converter wants a tokenizer; the engine tests use token ids only. qwen3-tiny's 512-token
    # byte-level BPE fits (ids 509..511 are its control tokens, as eos/pad above).
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(QWEN_ROOT / "qwen3-tiny" / f, model_dir / f)
    log(f"{spec['name']}: converting to model/model.gguf")
    mf.run_converter(model_dir, model_dir / "model.gguf", "f32",
                     {"name": spec["name"], "arch": "llama", "pre": "qwen2"})
    return summary


def load_base(path: pathlib.Path, dtype=None):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                 dtype=dtype or torch.float32)
    return model.eval()


def forward(model, ids: list[int]):
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].detach().double().numpy()


# --------------------------------------------------------------------------------------------
# Adapter


def lora_scale(spec: dict) -> float:
    return spec["alpha"] / (math.sqrt(spec["r"]) if spec["use_rslora"] else spec["r"])


def make_adapter(spec: dict, base_dir: pathlib.Path, adapter_dir: pathlib.Path) -> None:
    """get_peft_model on the base, random lora_A / lora_B (seeded), save_pretrained."""
    import peft
    import torch

    model = load_base(base_dir)
    cfg = peft.LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], use_rslora=spec["use_rslora"],
                          target_modules=list(spec["targets"]), lora_dropout=0.0, bias="none")
    pm = peft.get_peft_model(model, cfg)
    scale = lora_scale(spec)
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    b_std = spec["strength"] / (scale * math.sqrt(spec["r"]))
    seen = set()
    for name, p in sorted(pm.named_parameters(), key=lambda kv: kv[0]):
        if ".lora_A." in name:
            v = torch.randn(tuple(p.shape), generator=g, dtype=torch.float64) / math.sqrt(p.shape[1])
        elif ".lora_B." in name:
            v = torch.randn(tuple(p.shape), generator=g, dtype=torch.float64) * b_std
        else:
            continue
        with torch.no_grad():
            p.copy_(v.to(p.dtype))
        seen.add(name.split(".")[-4])
    missing = set(spec["targets"]) - seen
    if missing:
        raise SystemExit(f"{spec['name']}: no LoRA layer for {sorted(missing)}")
    for layer in pm.modules():
        if hasattr(layer, "scaling") and isinstance(layer.scaling, dict) and "default" in layer.scaling:
            if abs(layer.scaling["default"] - scale) > 1e-12:
                raise SystemExit(f"peft scaling {layer.scaling['default']} != {scale}")
    pm.peft_config["default"].base_model_name_or_path = spec["name"]
    pm.save_pretrained(adapter_dir, safe_serialization=True, save_embedding_layers=False)
    # peft stores target_modules as a set: sort it so the file is the same on every run.
    cfg_path = adapter_dir / "adapter_config.json"
    cfg_json = json.loads(cfg_path.read_text())
    cfg_json["target_modules"] = sorted(cfg_json["target_modules"])
    cfg_path.write_text(json.dumps(cfg_json, indent=2, sort_keys=True))
    (adapter_dir / "README.md").unlink(missing_ok=True)  # peft's model-card template
    (adapter_dir / "adapter_model.safetensors").chmod(0o644)


# --------------------------------------------------------------------------------------------
# Adapter tensors in the GGUF's layout, and an independent float64 forward pass


def adapter_tensors(adapter_dir: pathlib.Path) -> dict:
    """{module path (model.layers.L.x.y): (A [r, in], B [out, r])} as float64 numpy."""
    import numpy as np
    from safetensors.numpy import load_file

    t = load_file(str(adapter_dir / "adapter_model.safetensors"))
    out = {}
    for k in sorted(t):
        assert k.startswith("base_model.model.") and (k.endswith(".lora_A.weight") or k.endswith(".lora_B.weight")), k
        if k.endswith(".lora_A.weight"):
            mod = k[len("base_model.model."):-len(".lora_A.weight")]
            out[mod] = (t[k].astype(np.float64), t[k.replace(".lora_A.", ".lora_B.")].astype(np.float64))
    return out


GGUF_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "linear_attn.in_proj_qkv": "attn_qkv",
    "linear_attn.in_proj_z": "attn_gate", "linear_attn.in_proj_a": "ssm_alpha",
    "linear_attn.in_proj_b": "ssm_beta", "linear_attn.out_proj": "ssm_out",
}


def gguf_mapping(spec: dict, config: dict) -> dict:
    """How each adapted module's (A, B) maps onto the base GGUF tensor: the rules an engine needs.

    Returns {hf suffix: {"gguf": name, "rule": text, "fn": (A, B) -> (A', B')}}."""
    import numpy as np

    ident = lambda A, B: (A, B)  # noqa: E731
    rules = {}
    for suffix, gname in GGUF_NAMES.items():
        if suffix.split(".")[-1] in spec["targets"]:
            rules[suffix] = {"gguf": f"blk.{{L}}.{gname}.weight", "rule": "unchanged", "fn": ident}
    if spec["arch"] == "llama":
        n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]

        def permute(B, heads):  # convert_hf_to_gguf LlamaModel.permute, applied to B's rows
            return B.reshape(heads, 2, B.shape[0] // heads // 2, B.shape[1]).swapaxes(1, 2).reshape(B.shape)

        rules["self_attn.q_proj"].update(
            rule=f"rows of B permuted like the converter permutes attn_q (n_head = {n_head}): within each "
                 "head, row 2i <- HF row i and row 2i+1 <- HF row i + head_dim/2; A unchanged",
            fn=lambda A, B: (A, permute(B, n_head)))
        rules["self_attn.k_proj"].update(
            rule=f"rows of B permuted like attn_k (heads = n_kv = {n_kv}), same pattern as q_proj; "
                 "A unchanged",
            fn=lambda A, B: (A, permute(B, n_kv)))
    if spec["arch"] == "qwen35":
        hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
        dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
        r = hv // hk
        perm = np.array([k * r + j for j in range(r) for k in range(hk)])
        rows = lambda x, d: x.reshape(hv, d, x.shape[1])[perm].reshape(x.shape)  # noqa: E731
        kd = hk * dk
        p = ", ".join(str(int(x)) for x in perm)
        rules["linear_attn.in_proj_qkv"].update(
            rule=f"rows of B: q and k rows ([0, {2 * kd})) unchanged, v rows (blocks of {dv}, one per "
                 f"value head) reordered grouped -> tiled: GGUF slot s holds HF head [{p}][s]; A unchanged",
            fn=lambda A, B: (A, np.concatenate([B[:2 * kd], rows(B[2 * kd:], dv)])))
        rules["linear_attn.in_proj_z"].update(
            rule=f"rows of B in blocks of {dv} reordered like the value heads ([{p}]); A unchanged",
            fn=lambda A, B: (A, rows(B, dv)))
        rules["linear_attn.in_proj_a"].update(
            rule=f"rows of B (one per value head) reordered [{p}]; A unchanged",
            fn=lambda A, B: (A, rows(B, 1)))
        rules["linear_attn.in_proj_b"].update(
            rule=f"rows of B (one per value head) reordered [{p}]; A unchanged",
            fn=lambda A, B: (A, rows(B, 1)))
        rules["linear_attn.out_proj"].update(
            rule=f"columns of A in blocks of {dv} reordered like the value heads ([{p}]); B unchanged",
            fn=lambda A, B: (A.reshape(A.shape[0], hv, dv)[:, perm].reshape(A.shape), B))
    return rules


def gguf_deltas(spec: dict, config: dict, adapter_dir: pathlib.Path, unmapped: bool = False) -> dict:
    """{gguf tensor name: scale * B' @ A'} with (A', B') mapped into the GGUF layout (unmapped:
    the HF layout as is, the mistake the mapping rules are there to prevent)."""
    rules = gguf_mapping(spec, config)
    scale = lora_scale(spec)
    deltas = {}
    for mod, (A, B) in adapter_tensors(adapter_dir).items():
        layer = int(mod.split(".")[2])
        suffix = ".".join(mod.split(".")[3:])
        rule = rules[suffix]
        A2, B2 = (A, B) if unmapped else rule["fn"](A, B)
        deltas[rule["gguf"].format(L=layer)] = scale * (B2 @ A2)
    return deltas


class PatchedGGUF:
    """Stands in for gguf-py in make_fixtures.numpy_forward: the reader adds deltas to tensors."""

    def __init__(self, deltas: dict):
        self.real = mf.gguf_module()
        self.deltas = deltas
        self.GGMLQuantizationType = self.real.GGMLQuantizationType
        self.dequantize = self.real.dequantize
        self.used = set()

    def GGUFReader(self, path):  # noqa: N802  (mirrors gguf.GGUFReader)
        import types

        import numpy as np

        r = self.real.GGUFReader(path)
        tensors = []
        for t in r.tensors:
            data = t.data
            if t.name in self.deltas:
                assert t.tensor_type == self.real.GGMLQuantizationType.F32, t.name
                shape = [int(x) for x in reversed(t.shape)]
                data = np.asarray(data, dtype=np.float64).reshape(shape) + self.deltas[t.name]
                self.used.add(t.name)
            tensors.append(types.SimpleNamespace(name=t.name, data=data, tensor_type=t.tensor_type,
                                                 shape=t.shape))
        return types.SimpleNamespace(fields=r.fields, tensors=tensors)


def llama_numpy_forward(path: pathlib.Path, seq: list[int], deltas: dict):
    """float64 forward of a llama-arch GGUF (Q/K rows permuted by the converter, so RoPE rotates
    adjacent pairs (2i, 2i + 1)), with deltas added to the named tensors."""
    import numpy as np

    gguf = mf.gguf_module()
    r = gguf.GGUFReader(str(path))
    meta = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("tokenizer.")}
    assert meta["general.architecture"] == "llama"
    W, used = {}, set()
    for t in r.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        W[t.name] = np.asarray(t.data, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
        if t.name in deltas:
            W[t.name] = W[t.name] + deltas[t.name]
            used.add(t.name)
    assert used == set(deltas), sorted(set(deltas) - used)
    K = lambda k: meta[f"llama.{k}"]  # noqa: E731
    n_layer, n_head, n_kv = K("block_count"), K("attention.head_count"), K("attention.head_count_kv")
    n_rot, base, eps = K("rope.dimension_count"), K("rope.freq_base"), K("attention.layer_norm_rms_epsilon")
    hd = K("embedding_length") // n_head
    assert n_rot == hd
    T = len(seq)
    rms = lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w  # noqa: E731

    def rope(x):  # [T, heads, hd], NORM style: pairs (2i, 2i + 1)
        inv = base ** (-np.arange(hd // 2) * 2.0 / hd)
        ang = np.arange(T)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = a * c - b * s
        y[..., 1::2] = b * c + a * s
        return y

    h = W["token_embd.weight"][seq]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for il in range(n_layer):
        p = f"blk.{il}."
        x = rms(h, W[p + "attn_norm.weight"])
        q = rope((x @ W[p + "attn_q.weight"].T).reshape(T, n_head, hd))
        k = rope((x @ W[p + "attn_k.weight"].T).reshape(T, n_kv, hd))
        v = (x @ W[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        o = np.zeros((T, n_head, hd))
        for hh in range(n_head):
            j = hh // (n_head // n_kv)
            sc = q[:, hh] @ k[:, j].T / math.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, hh] = (sc / sc.sum(-1, keepdims=True)) @ v[:, j]
        h = h + o.reshape(T, n_head * hd) @ W[p + "attn_output.weight"].T
        x = rms(h, W[p + "ffn_norm.weight"])
        a = x @ W[p + "ffn_gate.weight"].T
        h = h + ((a / (1.0 + np.exp(-a))) * (x @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    return rms(h, W["output_norm.weight"]) @ W["output.weight"].T


def numpy_logits(spec: dict, gguf_path: pathlib.Path, seq: list[int], deltas: dict):
    if spec["arch"] == "llama":
        return llama_numpy_forward(gguf_path, seq, deltas)
    patched = PatchedGGUF(deltas)
    saved = mf.gguf_module
    mf.gguf_module = lambda: patched
    try:
        logits, _ = mf.numpy_forward(gguf_path, seq)
    finally:
        mf.gguf_module = saved
    assert patched.used == set(deltas), sorted(set(deltas) - patched.used)
    return logits


# --------------------------------------------------------------------------------------------


def build_one(spec: dict, versions: dict) -> dict:
    import numpy as np
    import peft
    import torch
    from safetensors import safe_open

    name = spec["name"]
    out = OUT_ROOT / name
    t0 = time.time()
    log(f"{name}: building")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    base_params = None
    if spec["base"] is None:
        base_dir = out / "model"
        base_params = build_llama(spec, base_dir)
    else:
        base_dir = spec["base"]
    gguf_path = base_dir / "model.gguf"
    config = json.loads((base_dir / "config.json").read_text())
    vocab = config["vocab_size"]
    ids = [int(x) for x in np.random.default_rng(spec["seed"]).integers(0, vocab, SEQ_LEN)]

    # 1. Base model.
    base = load_base(base_dir)
    logits_base = forward(base, ids)
    checks = {}
    if spec["base"] is not None:
        m = json.loads((base_dir / "manifest.json").read_text())
        seq = m["prompt_tokens"] + m["greedy_tokens"]
        ref = np.fromfile(base_dir / "logits.f32", dtype="<f4").reshape(len(seq), vocab)
        d = mf.maxabs(forward(base, seq), ref)
        if d > TOL_BASE_VS_QWEN_FIXTURE:
            raise SystemExit(f"{name}: base logits differ from {rel(base_dir)}/logits.f32 by {d}")
        checks["base_vs_qwen_fixture_logits"] = d
        log(f"{name}: base reproduces {rel(base_dir)}/logits.f32 to {d:.3g}")

    # 2. Adapter: built, randomised, saved; everything below loads it back from disk.
    adapter_dir = out / "adapter"
    make_adapter(spec, base_dir, adapter_dir)
    pm = peft.PeftModel.from_pretrained(load_base(base_dir), adapter_dir).eval()
    logits = forward(pm, ids)
    with pm.disable_adapter():
        checks["disabled_adapter_vs_base"] = mf.maxabs(forward(pm, ids), logits_base)
    if checks["disabled_adapter_vs_base"] > 1e-6:
        raise SystemExit(f"{name}: disabled adapter != base ({checks['disabled_adapter_vs_base']})")

    # 3. float64 pass of the adapted model.
    pm64 = peft.PeftModel.from_pretrained(load_base(base_dir), adapter_dir).double().eval()
    assert all(p.dtype == torch.float64 for p in pm64.parameters())
    logits64 = forward(pm64, ids)
    base64 = load_base(base_dir).double().eval()
    logits_base64 = forward(base64, ids)

    # 4. Merged.
    merged = pm.merge_and_unload().eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    logits_merged = forward(merged, ids)
    checks["merged_vs_adapter"] = mf.maxabs(logits_merged, logits)
    if checks["merged_vs_adapter"] > TOL_MERGED:
        raise SystemExit(f"{name}: merged logits differ by {checks['merged_vs_adapter']}")

    # 5. Independent float64 numpy pass: base GGUF + adapter mapped into the GGUF layout.
    deltas = gguf_deltas(spec, config, adapter_dir)
    np_base = numpy_logits(spec, gguf_path, ids, {})
    np_lora = numpy_logits(spec, gguf_path, ids, deltas)
    checks["numpy_f64_gguf_base_vs_logits_base"] = mf.maxabs(np_base, logits_base)
    checks["numpy_f64_gguf_plus_mapped_lora_vs_logits"] = mf.maxabs(np_lora, logits)
    checks["numpy_f64_gguf_plus_mapped_lora_vs_transformers_f64"] = mf.maxabs(np_lora, logits64)
    for k in ("numpy_f64_gguf_base_vs_logits_base", "numpy_f64_gguf_plus_mapped_lora_vs_logits"):
        if checks[k] > TOL_NUMPY:
            raise SystemExit(f"{name}: {k} = {checks[k]}")
    if any(r["rule"] != "unchanged" for r in gguf_mapping(spec, config).values()):
        # Negative control: the same pass with the adapter left in the HF layout must fail.
        np_wrong = numpy_logits(spec, gguf_path, ids, gguf_deltas(spec, config, adapter_dir, unmapped=True))
        checks["numpy_f64_gguf_plus_unmapped_lora_vs_logits"] = mf.maxabs(np_wrong, logits)
        if checks["numpy_f64_gguf_plus_unmapped_lora_vs_logits"] < 100 * TOL_NUMPY:
            raise SystemExit(f"{name}: the unmapped adapter is not distinguishable from the mapped one")

    diff = np.abs(logits - logits_base)
    d_lora = {
        "max_abs_adapter_vs_base": float(diff.max()),
        "mean_abs_adapter_vs_base": float(diff.mean()),
        "argmax_changed_rows": int((logits.argmax(-1) != logits_base.argmax(-1)).sum()),
        "min_top2_gap_adapter": round(float(np.diff(np.sort(logits, -1)[:, -2:], axis=-1).min()), 5),
        "min_top2_gap_base": round(float(np.diff(np.sort(logits_base, -1)[:, -2:], axis=-1).min()), 5),
        "max_abs_f32_vs_f64": mf.maxabs(logits, logits64),
        "max_abs_base_f32_vs_f64": mf.maxabs(logits_base, logits_base64),
        **checks,
    }
    log(f"{name}: max |adapter - base| {d_lora['max_abs_adapter_vs_base']:.3f}, f32 vs f64 "
        f"{d_lora['max_abs_f32_vs_f64']:.2g}, merged {checks['merged_vs_adapter']:.2g}, numpy "
        f"{checks['numpy_f64_gguf_plus_mapped_lora_vs_logits']:.2g}")

    files = {}
    for fname, arr, what in (
        ("logits.f32", logits, "transformers + peft, f32, base model with the adapter"),
        ("logits_base.f32", logits_base, "the same forward without the adapter"),
        ("logits_merged.f32", logits_merged, "f32 model after merge_and_unload()"),
    ):
        files[fname] = {"dtype": "f32 little-endian, row-major", "shape": mf.write_f32(out / fname, arr),
                        "what": what + "; row i = logits after token_ids[0..=i]"}

    with safe_open(str(adapter_dir / "adapter_model.safetensors"), "np") as f:
        shapes = {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}
        dtypes = sorted({f.get_slice(k).get_dtype() for k in f.keys()})
    rules = gguf_mapping(spec, config)
    manifest = {
        "name": name,
        "generator": "scripts/reference/make_lora_fixtures.sh",
        "versions": versions,
        "seed": spec["seed"],
        "seed_note": "token ids: numpy default_rng(seed).integers(0, vocab, 20); lora_A/lora_B: "
                     "torch.Generator seeded with seed + 1, parameters in name order",
        "base_model": rel(base_dir),
        "base_gguf": rel(gguf_path),
        "token_ids": ids,
        "vocab": vocab,
        "r": spec["r"],
        "lora_alpha": spec["alpha"],
        "use_rslora": spec["use_rslora"],
        "scale": lora_scale(spec),
        "scale_rule": "lora_alpha / sqrt(r) (use_rslora)" if spec["use_rslora"] else "lora_alpha / r",
        "forward": "W x + scale * B (A x) for every adapted Linear (no bias, dropout 0)",
        "target_modules": sorted(spec["targets"]),
        "init": {"lora_A": "N(0, 1/in_features)",
                 "lora_B": f"N(0, ({spec['strength']} / (scale * sqrt(r)))^2): scale * B @ A has "
                           f"entries of std ~{spec['strength']}/sqrt(in_features)"},
        "adapter_tensors": {"dtype": dtypes, "count": len(shapes), "shapes": shapes},
        "files": files,
        "max_abs_logit_diff": d_lora,
        "gguf_mapping": {k: {"gguf": v["gguf"], "rule": v["rule"]} for k, v in sorted(rules.items())},
    }
    if base_params is not None:
        manifest["base_parameters"] = base_params
        manifest["base_gguf_sha256"] = mf.sha256(gguf_path)
    (out / "manifest.json").write_text(mf.dump_json(manifest))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    log(f"{name}: done in {time.time() - t0:.0f}s, {size / 1e6:.2f} MB")
    return d_lora


def versions() -> dict:
    import accelerate
    import peft

    v = mf.versions()
    keep = {k: v[k] for k in ("python", "torch", "transformers", "safetensors", "numpy",
                              "llama_cpp_python", "llama_cpp_commit", "gguf_py")}
    return {**keep, "peft": peft.__version__, "accelerate": accelerate.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="build only this model (repeatable)")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    ver = versions()
    summary = {}
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        summary[spec["name"]] = build_one(spec, ver)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
