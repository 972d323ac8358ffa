#!/usr/bin/env bash
# The VS Code extension's tests: type-check and package web/vscode/lilypad.vsix, then the
# end-to-end test in code-server driven by headless Chromium (web/vscode/test/e2e.mjs): a
# scripted fix of examples/leap-year through the view, pending until accepted, tests pass after;
# SmolLM2 running agent steps and a chat in the view's WebGPU engine, its cache surviving a
# restart, a model file on disk; the same scripted fix through the native `lilypad agent-stdio`
# in a window without WebGPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
WEB_BIN="$(scripts/setup-web.sh --browser)"
[[ -n "$WEB_BIN" ]] && export PATH="$WEB_BIN:$PATH"
scripts/setup-python.sh >/dev/null
scripts/setup-pyodide.sh >/dev/null
VSCODE_BIN="$(scripts/setup-vscode.sh)"
scripts/build-vscode.sh
cargo build --quiet -p lilypad-cli
export PATH="$VSCODE_BIN:$PATH"
export LILYPAD_BIN="$CARGO_TARGET_DIR/debug/lilypad" LILYPAD_REQUIRE_NATIVE=1
export PYTHON="${PYTHON:-$LILYPAD_CACHE/py-tests/bin/python}"
export LILYPAD_MODEL="$(scripts/fetch-model.sh)" LILYPAD_REQUIRE_MODEL=1
export E2E_SCREENSHOTS="${E2E_SCREENSHOTS:-$LILYPAD_CACHE/e2e-screenshots}"
node web/vscode/test/e2e.mjs
