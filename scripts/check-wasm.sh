#!/usr/bin/env bash
# Type-checks the browser crates for wasm32-unknown-unknown (toolchain choice: wasm-cargo.sh).
# Extra arguments are passed on to cargo check.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/wasm-cargo.sh check -p lilypad-gguf -p lilypad-engine -p lilypad-tokenizer \
    -p lilypad-agent -p lilypad-agent-wasm -p lilypad-chat -p lilypad-wasm "$@"
