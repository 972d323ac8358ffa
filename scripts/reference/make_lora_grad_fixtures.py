#!/usr/bin/env python3
"""Records PyTorch autograd's LoRA gradients for the tiny adapter fixtures.

For each model in MODELS (tests/fixtures/lora/<name>/, made by make_lora_fixtures.py) this
loads the base model with its adapter through transformers + peft in float64 and takes the
gradient of

    L = sum_t coef[t] * log_softmax(logits[t])[targets[t]]

over the fixture's 20 token ids, with targets[t] = token_ids[t + 1] (the last position has
coef 0) and coef drawn from a seeded normal distribution: the per-token weighted
log-probability loss a policy-gradient trainer differentiates. It writes
tests/fixtures/lora/<name>/grads/:

    adapter_config.json        a copy of the adapter's (so the folder reads as a PEFT adapter)
    adapter_model.safetensors  dL/d(lora_A) and dL/d(lora_B) under the adapter's tensor names,
                               f32 (the float64 values rounded once)
    grads.json                 targets, coef, the loss, the gradients' norms, versions

Reading grads/ as an adapter maps each gradient onto the GGUF's layout exactly as the adapter
itself is mapped (the mapping only permutes rows and columns), which is how the engine's test
compares them.

Run it through make_lora_grad_fixtures.sh (the pinned Python environment of pins.sh).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_lora_fixtures as mlf  # noqa: E402

SEED = 4242
MODELS = ["llama-tiny", "qwen3-tiny", "qwen35-tiny"]


def base_dir(name: str, manifest: dict) -> pathlib.Path:
    return mlf.ROOT / manifest["base_model"]


def build(name: str) -> dict:
    import numpy as np
    import peft
    import torch
    from safetensors.torch import save_file

    out = mlf.OUT_ROOT / name
    manifest = json.loads((out / "manifest.json").read_text())
    ids = manifest["token_ids"]
    n = len(ids)
    targets = ids[1:] + [0]
    rng = np.random.default_rng(SEED)
    coef = [float(c) for c in rng.normal(0.0, 1.0, n)]
    coef[-1] = 0.0

    model = peft.PeftModel.from_pretrained(mlf.load_base(base_dir(name, manifest)), out / "adapter")
    model = model.double().eval()
    params = {k: p for k, p in model.named_parameters() if "lora_" in k}
    for k, p in model.named_parameters():
        p.requires_grad_(k in params)
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp[torch.arange(n), torch.tensor(targets)]
    loss = (chosen * torch.tensor(coef, dtype=torch.float64)).sum()
    loss.backward()

    # In-memory names carry the adapter's name (".lora_A.default.weight"); the file does not.
    grads = {k.replace(".default.", "."): p.grad.detach().float().contiguous() for k, p in params.items()}
    from safetensors import safe_open

    with safe_open(out / "adapter" / "adapter_model.safetensors", "pt") as f:
        saved = set(f.keys())
    if set(grads) != saved:
        raise SystemExit(f"{name}: gradient names differ from the adapter's: {sorted(set(grads) ^ saved)}")
    gdir = out / "grads"
    gdir.mkdir(exist_ok=True)
    shutil.copy(out / "adapter" / "adapter_config.json", gdir / "adapter_config.json")
    save_file(grads, gdir / "adapter_model.safetensors", metadata={"format": "pt"})
    summary = {
        "name": name,
        "generator": "scripts/reference/make_lora_grad_fixtures.sh",
        "loss": "sum_t coef[t] * log_softmax(logits[t])[targets[t]], float64, eval, eager attention",
        "seed": SEED,
        "seed_note": "coef: numpy default_rng(seed).normal(0, 1, n), last set to 0",
        "token_ids": ids,
        "targets": targets,
        "coef": coef,
        "loss_value": float(loss.detach()),
        "grad_norms": {k: float(v.double().norm()) for k, v in sorted(grads.items())},
        "versions": mlf.versions(),
    }
    (gdir / "grads.json").write_text(json.dumps(summary, indent=1) + "\n")
    mlf.log(f"{name}: loss {float(loss.detach()):.6f}, {len(grads)} gradients -> {mlf.rel(gdir)}")
    return summary


def main() -> None:
    for name in sys.argv[1:] or MODELS:
        build(name)


if __name__ == "__main__":
    main()
