#!/usr/bin/env bash
# The VS Code extension's tests: type-check and package web/vscode/lilypad.vsix, then the
# end-to-end test in code-server driven by headless Chromium (web/vscode/test/e2e.mjs): a
# scripted fix of examples/leap-year through the view, pending until accepted, tests pass after.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
WEB_BIN="$(scripts/setup-web.sh --browser)"
[[ -n "$WEB_BIN" ]] && export PATH="$WEB_BIN:$PATH"
scripts/setup-python.sh >/dev/null
VSCODE_BIN="$(scripts/setup-vscode.sh)"
scripts/build-vscode.sh
export PATH="$VSCODE_BIN:$PATH"
export PYTHON="${PYTHON:-$LILYPAD_CACHE/py-tests/bin/python}"
node web/vscode/test/e2e.mjs
