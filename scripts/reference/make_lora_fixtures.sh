#!/usr/bin/env bash
# Regenerates the LoRA adapter reference fixtures in tests/fixtures/lora/.
#
#   scripts/reference/make_lora_fixtures.sh [--only llama-tiny] [--only qwen3-tiny] [--only qwen35-tiny]
#
# 1. The Python venv of pins.sh (torch, transformers, peft, ...; shared with make_fixtures.sh),
#    in ${LILYPAD_CACHE:-~/.cache/lilypad}/reference-venv (~5.6 GB, a few minutes the first time).
# 2. The llama-cpp-python 0.3.36 sdist, unpacked by scripts/llama-cpp/build.sh --vectors-only:
#    only its convert_hf_to_gguf.py and gguf-py are used (nothing is compiled).
# 3. make_lora_fixtures.py: a new tiny Llama (llama-tiny/model/, with its GGUF) plus random PEFT
#    adapters on it and on tests/fixtures/qwen/{qwen3-tiny,qwen35-tiny}, and their logits.
# Finished setup steps are skipped on re-runs; the fixtures are always rewritten (byte-identical
# on the same machine).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=pins.sh
source "$HERE/pins.sh"

reference_venv

echo "[reference] llama.cpp sources (scripts/llama-cpp/build.sh --vectors-only)" >&2
"$ROOT/scripts/llama-cpp/build.sh" --vectors-only >/dev/null

cd "$ROOT"
exec "$VENV/bin/python" "$HERE/make_lora_fixtures.py" "$@"
