"""The multi-token-prediction layer's reference logits for qwen35-tiny.

transformers has no Qwen3.5 MTP module, so the reference is the independent float64 numpy pass
of make_fixtures.py (checked there against transformers and llama.cpp for the main model),
extended with the MTP layer as llama.cpp's qwen35 draft graph lays it out. Input: the fixture's
GGUF plus a random MTP layer, as the test suite builds it (`tests/src/qwen.rs`,
`with_mtp_layer`), written by the ignored test `write_mtp_gguf`. Output, in
tests/fixtures/qwen/qwen35-tiny/: mtp.json (the GGUF's sha256, the tokens) and mtp-logits.f32
(one vocab-wide row per position: the logits of the token after next).

    python make_mtp_fixture.py MODEL_WITH_MTP.gguf
"""

import hashlib
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402


def main() -> None:
    import numpy as np

    gguf_path = pathlib.Path(sys.argv[1])
    out = mf.OUT_ROOT / "qwen35-tiny"
    manifest = json.loads((out / "manifest.json").read_text())
    seq = manifest["prompt_tokens"] + manifest["greedy_tokens"]
    tokens, nxt = seq[:-1], seq[1:]
    logits, _, mtp = mf.numpy_forward(gguf_path, tokens, mtp_next=nxt)
    # The main model's logits are unchanged by the extra layer: the fixture's own check.
    main_ref = np.fromfile(out / "logits.f32", dtype="<f4").reshape(len(seq), -1)[:-1]
    main_err = float(np.abs(logits - main_ref).max())
    assert main_err < 1e-3, main_err
    mf.write_f32(out / "mtp-logits.f32", mtp)
    (out / "mtp.json").write_text(mf.dump_json({
        "gguf_sha256": hashlib.sha256(gguf_path.read_bytes()).hexdigest(),
        "tokens": tokens,
        "next": nxt,
        "main_logits_max_abs_vs_fixture": main_err,
        "mtp_logits_max_abs": float(np.abs(mtp).max()),
        "mtp_greedy": [int(i) for i in mtp.argmax(-1)],
    }))
    print(f"mtp logits: {mtp.shape}, main model within {main_err:.2e} of the fixture")


if __name__ == "__main__":
    main()
