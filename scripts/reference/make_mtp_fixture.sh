#!/usr/bin/env bash
# Regenerates tests/fixtures/qwen/qwen35-tiny/mtp.json and mtp-logits.f32: the reference logits
# of the random multi-token-prediction layer the test suite adds to qwen35-tiny. Needs only
# numpy and pyyaml (a small venv in the cache, the versions pins.sh names) and llama.cpp's gguf-py
# (from scripts/llama-cpp/build.sh's sdist); a minute the first time, seconds after.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
cd "$ROOT"
"$ROOT/scripts/llama-cpp/build.sh" >/dev/null
VENV="$CACHE/mtp-reference-venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV.tmp"
    "$VENV.tmp/bin/pip" install -q numpy==2.4.6 pyyaml==6.0.4
    mv "$VENV.tmp" "$VENV"
fi
PYTHON="$VENV/bin/python"
GGUF="$(mktemp --suffix=.gguf)"
trap 'rm -f "$GGUF"' EXIT
LILYPAD_MTP_GGUF="$GGUF" cargo test -q -p lilypad-tests --test qwen35_reference write_mtp_gguf \
    -- --ignored --exact >/dev/null
"$PYTHON" "$HERE/make_mtp_fixture.py" "$GGUF"
