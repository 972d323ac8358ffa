#!/usr/bin/env bash
# Regenerates the tiny Qwen3 / Qwen3.5 reference fixtures in tests/fixtures/qwen/.
#
#   scripts/reference/make_fixtures.sh [--only qwen3-tiny] [--only qwen35-tiny]
#
# 1. A Python venv with the packages pinned in pins.sh (torch, transformers, peft, ...; CPU is
#    enough; about 5.6 GB, because PyPI's torch wheel carries its CUDA libraries) in
#    ${LILYPAD_CACHE:-~/.cache/lilypad}; make_lora_fixtures.sh shares it.
# 2. llama.cpp from the llama-cpp-python sdist via scripts/llama-cpp/build.sh (its converter,
#    gguf-py and libllama.so are used; nothing comes from PyPI's `gguf`).
# 3. make_fixtures.py: builds each model from a fixed seed, runs transformers, converts to GGUF,
#    runs llama.cpp and an independent float64 pass, and writes the fixture folder.
# Finished setup steps are skipped on re-runs; the fixtures themselves are always rewritten
# (byte-identical on the same machine).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=pins.sh
source "$HERE/pins.sh"

log() { echo "[reference] $*" >&2; }

reference_venv

log "llama.cpp (scripts/llama-cpp/build.sh)"
"$ROOT/scripts/llama-cpp/build.sh" >/dev/null

cd "$ROOT"
exec "$VENV/bin/python" "$HERE/make_fixtures.py" "$@"
