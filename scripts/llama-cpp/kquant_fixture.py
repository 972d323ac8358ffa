#!/usr/bin/env python3
"""Records llama.cpp's k-quant conversions (Q4_K, Q5_K, Q6_K) as test fixtures for lilypad-gguf.

For each type, writes crates/gguf/tests/fixtures/<type>.bin (little-endian):

    magic b"LPKQ", u32 version (1), u32 ggml type id, u32 D, u32 Q
    D blocks of random bytes (f16 scale fields set to finite values)
    D * 256 f32: those blocks dequantized by gguf-py's numpy code (gguf/quants.py)
    Q * 256 f32: varied input values
    Q blocks: those values quantized by ggml's quantize_row_*_ref (libggml-base.so)

Dequantization is also run through ggml's C dequantize_row_* and must agree bit for bit with
numpy. Needs the venv and libggml-base.so from scripts/llama-cpp/build.sh:

    scripts/llama-cpp/build.sh
    python3 scripts/llama-cpp/kquant_fixture.py
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pathlib
import struct
import sys
import types

VERSION = "0.3.36"
ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("LILYPAD_CACHE", pathlib.Path.home() / ".cache" / "lilypad"))
OUT_DIR = CACHE / f"llama.cpp-{VERSION}"
GGUF_PY = OUT_DIR / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp" / "gguf-py"
LIB = OUT_DIR / "build" / "bin" / "libggml-base.so"
VENV_PY = OUT_DIR / "venv" / "bin" / "python"
FIXTURES = ROOT / "crates" / "gguf" / "tests" / "fixtures"

QK_K = 256
N_DEQUANT = 12
N_QUANT = 12
SEED = 0x4B515541  # fixed, so regenerating gives the same files

# (name, ggml id, bytes per block, byte offsets of f16 scale fields, C suffix)
TYPES = [
    ("q4_k", 12, 144, (0, 2), "q4_K"),
    ("q5_k", 13, 176, (0, 2), "q5_K"),
    ("q6_k", 14, 210, (208,), "q6_K"),
]


def ensure_interpreter() -> None:
    """Re-runs under build.sh's venv when this interpreter has no numpy."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        if VENV_PY.exists() and pathlib.Path(sys.prefix).resolve() != VENV_PY.parents[1].resolve():
            os.execv(str(VENV_PY), [str(VENV_PY), __file__, *sys.argv[1:]])
        sys.exit(f"numpy missing and no venv at {VENV_PY}: run scripts/llama-cpp/build.sh")


def load_gguf_quants():
    """gguf-py's quants module without the package __init__ (which needs yaml and more)."""
    pkg = types.ModuleType("gguf")
    pkg.__path__ = [str(GGUF_PY / "gguf")]
    sys.modules["gguf"] = pkg
    return importlib.import_module("gguf.quants"), importlib.import_module("gguf.constants")


def finite_f16(np, rng, n: int):
    """Scale fields: random finite f16 bit patterns (both signs, subnormals, zero, the largest)
    mixed with typical small positive scales."""
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            bits = int(rng.integers(0, 1 << 16))
            while (bits >> 10) & 0x1F == 0x1F:  # inf / NaN
                bits = int(rng.integers(0, 1 << 16))
        elif kind == 1:
            bits = int(np.float16(rng.uniform(1e-4, 3e-2)).view(np.uint16))
        elif kind == 2:
            bits = [0x0000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0xFBFF][(i // 4) % 6]
        else:
            bits = int(np.float16(-rng.uniform(1e-4, 3e-2)).view(np.uint16))
        out.append(bits)
    return out


def quant_inputs(np, rng):
    """Blocks that reach every branch of the reference quantizers."""
    blocks = []
    for i in range(N_QUANT):
        kind = i % 6
        if kind == 0:
            x = rng.standard_normal(QK_K) * 0.02
        elif kind == 1:
            x = np.zeros(QK_K)  # all-zero block
        elif kind == 2:
            x = rng.uniform(0.5, 2.0, QK_K)  # all positive: the fitted min is clamped to 0
        elif kind == 3:
            x = rng.standard_normal(QK_K) * 1e-3
            x[rng.integers(0, QK_K)] = 0.5  # one outlier
            x[:32] = 0.0  # one all-zero sub-block
        elif kind == 4:
            x = -rng.uniform(0.0, 3e4, QK_K)  # large, all negative
        else:
            x = rng.standard_normal(QK_K) * 10.0 ** rng.uniform(-6, 2, QK_K // 16).repeat(16)
        blocks.append(x.astype(np.float32))
    return np.concatenate(blocks)


def main() -> None:
    ensure_interpreter()
    import numpy as np

    if not LIB.exists():
        sys.exit(f"{LIB} not found: run scripts/llama-cpp/build.sh")
    quants, constants = load_gguf_quants()
    lib = ctypes.CDLL(str(LIB))
    FIXTURES.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for name, type_id, type_size, f16_fields, c_name in TYPES:
        qtype = constants.GGMLQuantizationType(type_id)
        assert constants.GGML_QUANT_SIZES[qtype] == (QK_K, type_size), name

        blocks = rng.integers(0, 256, (N_DEQUANT, type_size), dtype=np.uint8)
        for at in f16_fields:
            bits = finite_f16(np, rng, N_DEQUANT)
            blocks[:, at] = [b & 0xFF for b in bits]
            blocks[:, at + 1] = [b >> 8 for b in bits]
        values = quants.dequantize(blocks, qtype).astype(np.float32).reshape(-1)

        c_values = np.empty(N_DEQUANT * QK_K, dtype=np.float32)
        getattr(lib, f"dequantize_row_{c_name}")(
            blocks.ctypes.data_as(ctypes.c_void_p),
            c_values.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_int64(N_DEQUANT * QK_K),
        )
        if not np.array_equal(values.view(np.uint32), c_values.view(np.uint32)):
            sys.exit(f"{name}: gguf-py and ggml's C dequantization disagree")

        x = quant_inputs(np, rng)
        q = np.zeros((N_QUANT, type_size), dtype=np.uint8)
        getattr(lib, f"quantize_row_{c_name}_ref")(
            x.ctypes.data_as(ctypes.c_void_p),
            q.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_int64(N_QUANT * QK_K),
        )

        path = FIXTURES / f"{name}.bin"
        with open(path, "wb") as f:
            f.write(b"LPKQ" + struct.pack("<4I", 1, type_id, N_DEQUANT, N_QUANT))
            f.write(blocks.tobytes())
            f.write(values.astype("<f4").tobytes())
            f.write(x.astype("<f4").tobytes())
            f.write(q.tobytes())
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
