#!/usr/bin/env bash
# The browser tests: the loader's unit tests (ranges, resume, cache keys) in Node, then the
# end-to-end test in headless Chromium with WebGPU on SwiftShader (web/test/e2e.mjs), checked
# against the native CLI, then the coding agent in Chromium (web/test/agent-e2e.mjs: Pyodide
# running pytest, a scripted fix through the agent panel, SmolLM2 steps). e2e.mjs also loads
# an adapter that train-native trains here, and the model it exports. Figures go to
# $E2E_RESULTS and $AGENT_E2E_RESULTS (default: the cache's e2e.json, agent-e2e.json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
NODE_BIN="$(scripts/setup-web.sh --browser)"
[[ -n "$NODE_BIN" ]] && export PATH="$NODE_BIN:$PATH"
MODEL="$(scripts/fetch-model.sh)"
scripts/build-wasm.sh
scripts/build-agent-wasm.sh
scripts/setup-pyodide.sh >/dev/null
cargo build --quiet -p lilypad-cli -p lilypad-train
# What train-native writes, for the browser to load: the adapter of one large GRPO update of
# SmolLM2 (a fresh run each time, about a minute) and the model export merges it into (Q8_0:
# a 4-bit re-quantization would round a change this small away).
TRAINED="$LILYPAD_CACHE/e2e-trained"
rm -rf "$TRAINED"
"$CARGO_TARGET_DIR/debug/train-native" --dir "$TRAINED" run --config train-native/configs/one-update.toml
"$CARGO_TARGET_DIR/debug/train-native" export -m "$MODEL" --adapter "$TRAINED/runs/one-update/checkpoint/adapter" \
  --out "$TRAINED/merged.gguf" --quantize q8_0
export LILYPAD_TRAINED="$TRAINED"
(cd web && npm run --silent build && npm test --silent)
export LILYPAD_MODEL="$MODEL" LILYPAD_BIN="$CARGO_TARGET_DIR/debug/lilypad"
export E2E_RESULTS="${E2E_RESULTS:-$LILYPAD_CACHE/e2e.json}"
export E2E_SCREENSHOTS="${E2E_SCREENSHOTS:-$LILYPAD_CACHE/e2e-screenshots}"
node web/test/e2e.mjs
export AGENT_E2E_RESULTS="${AGENT_E2E_RESULTS:-$LILYPAD_CACHE/agent-e2e.json}"
node web/test/agent-e2e.mjs
