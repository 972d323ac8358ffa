#!/usr/bin/env bash
# Builds the browser engine and the playground, fetches SmolLM2-135M and serves them at
# http://127.0.0.1:${PORT:-8080}/ (open it in Chrome or Edge; Ctrl-C stops the server).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
NODE_BIN="$(scripts/setup-web.sh)"
[[ -n "$NODE_BIN" ]] && export PATH="$NODE_BIN:$PATH"
scripts/fetch-model.sh >/dev/null
scripts/build-wasm.sh
(cd web && npm run --silent build)
exec node web/scripts/serve.mjs --port "${PORT:-8080}" --models models --dist web/dist
