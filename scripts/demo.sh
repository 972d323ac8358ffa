#!/usr/bin/env bash
# One command for a newcomer: installs what is missing, fetches SmolLM2-135M, builds
# lilypad and asks it a question on the GPU (or on the CPU through lavapipe).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup-system.sh
model="$(scripts/fetch-model.sh)"
cargo build --release -p lilypad-cli
"$CARGO_TARGET_DIR/release/lilypad" generate --model "$model" \
  --prompt $'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n' \
  --max-tokens 64 "$@"
