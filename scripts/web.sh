#!/usr/bin/env bash
# Builds the browser engine, the agent and the playground, fetches SmolLM2-135M and pytest's
# wheels for Pyodide, and serves them at http://127.0.0.1:${PORT:-8080}/ (the chat) and
# /agent.html (the coding agent); open them in Chrome or Edge; Ctrl-C stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
NODE_BIN="$(scripts/setup-web.sh)"
[[ -n "$NODE_BIN" ]] && export PATH="$NODE_BIN:$PATH"
scripts/fetch-model.sh >/dev/null
scripts/build-wasm.sh
scripts/build-agent-wasm.sh
scripts/setup-pyodide.sh >/dev/null
(cd web && npm run --silent build)
exec node web/scripts/serve.mjs --port "${PORT:-8080}" --models models --dist web/dist
