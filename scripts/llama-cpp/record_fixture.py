#!/usr/bin/env python3
"""Records llama.cpp's tokens and logits for SmolLM2-135M-Instruct (Q4_1) as a test fixture.

Drives the llama.cpp built by scripts/llama-cpp/build.sh through the ctypes bindings shipped in
the same llama-cpp-python sdist. See scripts/llama-cpp/README.md for the output format.

    scripts/fetch-model.sh && scripts/llama-cpp/build.sh
    python3 scripts/llama-cpp/record_fixture.py
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys

VERSION = "0.3.36"
ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("LILYPAD_CACHE", pathlib.Path.home() / ".cache" / "lilypad"))
OUT_DIR = CACHE / f"llama.cpp-{VERSION}"
SRC = OUT_DIR / "src" / f"llama_cpp_python-{VERSION}"
LIB_DIR = OUT_DIR / "build" / "bin"
VENV_PY = OUT_DIR / "venv" / "bin" / "python"

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FIXTURE = ROOT / "tests" / "fixtures" / "smollm2-135m-q4_1.llamacpp.json"

N_CTX = 512
MAX_NEW_TOKENS = 32
TOP_K = 8
DECIMALS = 5

QUESTION = "What is the capital of France?"
PROMPTS = [
    {
        "name": "chatml_raw",
        "text": f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
    },
    {"name": "chat_template", "messages": [{"role": "user", "content": QUESTION}]},
    {
        "name": "plain_fox",
        "text": "The quick brown fox jumps over the lazy dog. Once upon a time,",
    },
    {
        "name": "code_fibonacci",
        "text": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    },
    {
        "name": "long_paragraph",
        "text": (
            "The river that runs through the old town was once the main road for traders. "
            "Boats carried salt, wool and timber from the hills to the coast, and the town grew "
            "rich on the tolls collected at its stone bridge. When the railway arrived, the "
            "boats disappeared within a generation, and the warehouses along the water stood "
            "empty for many years. Today they hold small shops, a library and a museum that "
            "tells the story of the river trade. Every summer the town holds a festival in "
            "which volunteers sail copies of the old boats under the bridge, and children "
            "learn how the locks once worked. The museum's most popular exhibit is"
        ),
    },
]


def ensure_interpreter() -> None:
    """Re-runs under build.sh's venv when this interpreter lacks the bindings' imports."""
    try:
        import numpy  # noqa: F401
        import jinja2  # noqa: F401
        import typing_extensions  # noqa: F401
        import diskcache  # noqa: F401
    except ImportError:
        if VENV_PY.exists() and pathlib.Path(sys.prefix).resolve() != VENV_PY.parents[1].resolve():
            os.execv(str(VENV_PY), [str(VENV_PY), __file__, *sys.argv[1:]])
        sys.exit(f"missing Python packages and no venv at {VENV_PY}: run scripts/llama-cpp/build.sh")


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def llama_cpp_commit() -> str | None:
    vendor = SRC / "vendor" / "llama.cpp"
    try:
        out = subprocess.run(
            ["git", "-C", str(vendor), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        if re.fullmatch(r"[0-9a-f]{40}", out):
            return out
    except (OSError, subprocess.CalledProcessError):
        pass
    # The sdist's changelog names the vendored commit (abbreviated) for each release.
    m = re.search(rf"## \[{re.escape(VERSION)}\].*?llama\.cpp@([0-9a-f]+)",
                  (SRC / "CHANGELOG.md").read_text(), re.S)
    return m.group(1) if m else None


class Engine:
    def __init__(self, L, model_path: pathlib.Path, threads: int):
        self.L = L
        L.llama_log_set(_silent_log, ctypes.c_void_p())
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model_path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"cannot load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

        cp = L.llama_context_default_params()
        cp.n_ctx = N_CTX
        cp.n_batch = N_CTX
        cp.n_ubatch = N_CTX
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        # f32 KV: the f16 default alone shifts logits by ~1e-3. Plain attention (no flash
        # attention) keeps the reference a straightforward softmax(QK^T)V in f32.
        cp.type_k = L.GGML_TYPE_F32
        cp.type_v = L.GGML_TYPE_F32
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("cannot create context")
        self.batch = L.llama_batch_init(N_CTX, 0, 1)

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self.L.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode() if n >= 0 else None

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        cap = len(data) + 16
        arr = (self.L.llama_token * cap)()
        # add_special=True so llama.cpp applies the GGUF's add_bos_token itself;
        # parse_special=True so "<|im_start|>" etc. become their special tokens.
        n = self.L.llama_tokenize(self.vocab, data, len(data), arr, cap, True, True)
        if n < 0:
            raise RuntimeError("tokenize overflow")
        return list(arr[:n])

    def detokenize(self, tokens: list[int]) -> str:
        arr = (self.L.llama_token * len(tokens))(*tokens)
        cap = 64 * len(tokens) + 64
        buf = ctypes.create_string_buffer(cap)
        n = self.L.llama_detokenize(self.vocab, arr, len(tokens), buf, cap, False, True)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def is_eog(self, tok: int) -> bool:
        return bool(self.L.llama_vocab_is_eog(self.vocab, tok))

    def _decode(self, tokens: list[int], start_pos: int, all_logits: bool) -> None:
        b = self.batch
        b.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = start_pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if (all_logits or i == len(tokens) - 1) else 0
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _logits(self, i: int):
        import numpy as np
        ptr = self.L.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def reset(self) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def greedy(self, prompt: list[int]) -> tuple[list[int], str]:
        """Prompt in one batch, then one token per decode, as a chat engine would run."""
        import numpy as np
        self.reset()
        self._decode(prompt, 0, all_logits=False)
        out: list[int] = []
        logits = self._logits(-1)
        while True:
            tok = int(np.argmax(logits))
            out.append(tok)
            if self.is_eog(tok):
                return out, "eog"
            if len(out) == MAX_NEW_TOKENS:
                return out, "max_tokens"
            self._decode([tok], len(prompt) + len(out) - 1, all_logits=False)
            logits = self._logits(-1)

    def all_position_logits(self, tokens: list[int]):
        """Logits for every position of `tokens`, evaluated as one batch from an empty cache."""
        import numpy as np
        self.reset()
        self._decode(tokens, 0, all_logits=True)
        return np.stack([self._logits(i) for i in range(len(tokens))])

    def chat_apply_template(self, messages: list[dict], tmpl: str) -> str:
        L = self.L
        keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
        arr = (L.llama_chat_message * len(keep))()
        for i, (role, content) in enumerate(keep):
            arr[i].role = role
            arr[i].content = content
        cap = 4096
        buf = ctypes.create_string_buffer(cap)
        n = L.llama_chat_apply_template(tmpl.encode(), arr, len(keep), True, buf, cap)
        if n < 0 or n > cap:
            raise RuntimeError(f"llama_chat_apply_template returned {n}")
        return buf.raw[:n].decode()


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def _silent_log(level, text, user_data):
    pass


def render_jinja(template: str, messages: list[dict], bos: str, eos: str) -> str:
    """Renders like Hugging Face's apply_chat_template (same Jinja environment settings)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise RuntimeError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos
    )


def top_k(row, k: int) -> dict:
    import numpy as np
    # Ties broken by lower token id so the fixture is stable.
    idx = np.lexsort((np.arange(row.shape[0]), -row))[:k]
    return {"ids": [int(i) for i in idx], "logits": [round(float(row[i]), DECIMALS) for i in idx]}


def dump(fixture: dict) -> str:
    """JSON with one line per position, so diffs of the committed file stay readable."""
    text = json.dumps(fixture, indent=1, ensure_ascii=False)
    # Collapse arrays of numbers (and the small per-position objects) onto single lines.
    text = re.sub(r"\[\s*([-0-9.e,\s]*?)\s*\]",
                  lambda m: "[" + ",".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    text = re.sub(r"\{\s*(\"ids\": \[[^\]]*\]),\s*(\"logits\": \[[^\]]*\])\s*\}", r"{\1, \2}", text)
    return text + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=pathlib.Path, default=ROOT / "models" / MODEL_NAME)
    ap.add_argument("--out", type=pathlib.Path, default=FIXTURE)
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (results do not depend on it; 1 is the recorded setting)")
    args = ap.parse_args()

    ensure_interpreter()
    if not (LIB_DIR / "libllama.so").exists():
        sys.exit(f"{LIB_DIR}/libllama.so not found: run scripts/llama-cpp/build.sh")
    if not args.model.exists():
        sys.exit(f"{args.model} not found: run scripts/fetch-model.sh")
    digest = sha256(args.model)
    if digest != MODEL_SHA256:
        sys.exit(f"{args.model} has sha256 {digest}, expected {MODEL_SHA256}")

    # llama_cpp loads libllama.so from LLAMA_CPP_LIB_PATH at import time.
    os.environ["LLAMA_CPP_LIB_PATH"] = str(LIB_DIR)
    sys.path.insert(0, str(SRC))
    import llama_cpp as L
    import numpy as np

    eng = Engine(L, args.model, args.threads)
    template = eng.meta("tokenizer.chat_template")
    add_bos = bool(L.llama_vocab_get_add_bos(eng.vocab))
    bos_id, eos_id = L.llama_vocab_bos(eng.vocab), L.llama_vocab_eos(eng.vocab)
    bos, eos = eng.detokenize([bos_id]), eng.detokenize([eos_id])

    prompts = []
    for spec in PROMPTS:
        entry: dict = {"name": spec["name"]}
        if "messages" in spec:
            text = render_jinja(template, spec["messages"], bos, eos)
            native = eng.chat_apply_template(spec["messages"], template)
            entry.update({
                "chat": True,
                "messages": spec["messages"],
                "add_generation_prompt": True,
                "text": text,
                "llama_chat_apply_template_text": native,
                "renderers_agree": text == native,
            })
        else:
            text = spec["text"]
            entry["text"] = text
        prompt = eng.tokenize(text)
        gen, stop = eng.greedy(prompt)
        seq = prompt + gen
        logits = eng.all_position_logits(seq)
        # Greedy tokens come from one-token decode steps, the logits from one batch. The two
        # kernels' rounding differs and this model amplifies it (residual stream reaches ~2.6e3),
        # so near-tied steps can pick different tokens; list them so tests can skip those.
        flips = [
            {"step": j, "greedy": gen[j], "batch_argmax": int(np.argmax(logits[len(prompt) - 1 + j]))}
            for j in range(len(gen))
            if int(np.argmax(logits[len(prompt) - 1 + j])) != gen[j]
        ]
        entry.update({
            "prompt_tokens": prompt,
            "greedy_tokens": gen,
            "greedy_stop": stop,
            "greedy_text": eng.detokenize(gen),
            "batch_argmax_flips": flips,
            "top_logits": [top_k(row, TOP_K) for row in logits],
        })
        prompts.append(entry)
        print(f"{spec['name']}: {len(prompt)} prompt tokens -> {eng.detokenize(gen)!r}", file=sys.stderr)

    fixture = {
        "model": args.model.name,
        "model_sha256": digest,
        "llama_cpp_python_version": VERSION,
        "llama_cpp_commit": llama_cpp_commit(),
        "kv_type": "f32",
        "flash_attn": False,
        "n_ctx": N_CTX,
        "add_bos": add_bos,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "max_new_tokens": MAX_NEW_TOKENS,
        "top_k": TOP_K,
        "logit_decimals": DECIMALS,
        "generator": "scripts/llama-cpp/record_fixture.py",
        "prompts": prompts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dump(fixture))
    print(args.out)


if __name__ == "__main__":
    main()
