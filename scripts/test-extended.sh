#!/usr/bin/env bash
# The extended suite: everything scripts/test.sh runs, plus the runs too slow for every CI
# run: SmolLM2 taking real agent steps in Chromium (web/test/agent-e2e.mjs, part 3) and in the
# VS Code view (web/vscode/test/e2e.mjs), about 10 minutes each on SwiftShader.
set -euo pipefail
cd "$(dirname "$0")/.."
export LILYPAD_EXTENDED=1
exec scripts/test.sh "$@"
