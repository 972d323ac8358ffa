#!/usr/bin/env bash
# Regenerates the tiny Qwen3 / Qwen3.5 reference fixtures in tests/fixtures/qwen/.
#
#   scripts/reference/make_fixtures.sh [--only qwen3-tiny] [--only qwen35-tiny]
#
# 1. A Python venv with pinned torch / transformers (CPU is enough; about 5.6 GB, because
#    PyPI's torch wheel carries its CUDA libraries) in ${LILYPAD_CACHE:-~/.cache/lilypad}.
# 2. llama.cpp from the llama-cpp-python sdist via scripts/llama-cpp/build.sh (its converter,
#    gguf-py and libllama.so are used; nothing comes from PyPI's `gguf`).
# 3. make_fixtures.py: builds each model from a fixed seed, runs transformers, converts to GGUF,
#    runs llama.cpp and an independent float64 pass, and writes the fixture folder.
# Finished setup steps are skipped on re-runs; the fixtures themselves are always rewritten
# (byte-identical on the same machine).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
VENV="$CACHE/reference-venv"
PINS=(
  torch==2.15.0
  transformers==5.23.0
  tokenizers==0.23.3
  safetensors==0.8.0
  numpy==2.4.6
  # the llama.cpp converter's gguf-py and the llama-cpp-python ctypes bindings
  pyyaml==6.0.4 tqdm==4.70.1 requests==2.34.2 sentencepiece==0.2.3 diskcache==5.6.3
)

log() { echo "[reference] $*" >&2; }

STAMP="$VENV/.lilypad-pins"
if [[ ! -x "$VENV/bin/python" || ! -f "$STAMP" || "$(cat "$STAMP")" != "${PINS[*]}" ]]; then
  log "creating $VENV with ${PINS[*]} (a few minutes)"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >&2
  echo "${PINS[*]}" > "$STAMP"
else
  log "venv ready: $VENV"
fi

log "llama.cpp (scripts/llama-cpp/build.sh)"
"$ROOT/scripts/llama-cpp/build.sh" >/dev/null

cd "$ROOT"
exec "$VENV/bin/python" "$HERE/make_fixtures.py" "$@"
