#!/usr/bin/env bash
# lilypad and llama.cpp side by side, in one run on the same GGUF and machine: `lilypad bench`
# (release build, on the adapter wgpu picks — lavapipe where there is no GPU) with
# `--llama-bench`, which runs llama.cpp's CPU build (scripts/llama-cpp/build.sh) on all cores
# with the same prompt and generation lengths right after lilypad's own measurement. Prints
# both, lilypad's speed as a ratio to llama.cpp's, and writes every figure as JSON.
#
#   scripts/bench-llama-cpp.sh [MODEL.gguf] [--prompt-tokens N] [--gen-tokens N] [--json FILE]
#                              [--vulkan]
#
# --vulkan: llama.cpp's Vulkan backend too (scripts/llama-cpp/build.sh --vulkan), every layer
# on the GPU: on the same adapter as lilypad where that is the machine's only Vulkan device or
# a CPU one (lavapipe), so both sides run the same device through the same API.
#
# MODEL defaults to the test model, SmolLM2-135M-Instruct Q4_1 (scripts/fetch-model.sh).
# The first run builds llama.cpp (about 8 minutes on 2 cores); later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

model=""
prompt_tokens=128
gen_tokens=64
json="$LILYPAD_CACHE/bench/llama-cpp-$(date -u +%Y%m%dT%H%M%SZ).json"
vulkan=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prompt-tokens) prompt_tokens="$2"; shift 2 ;;
    --gen-tokens) gen_tokens="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    --vulkan) vulkan=(--llama-bench-vulkan); shift ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
[[ -n "$model" ]] || model="$(scripts/fetch-model.sh)"
[[ -f "$model" ]] || { echo "no such model file: $model" >&2; exit 2; }
mkdir -p "$(dirname "$json")"

llama="$(scripts/llama-cpp/build.sh)"
if (( ${#vulkan[@]} )); then
  vulkan+=("$(scripts/llama-cpp/build.sh --vulkan)/build-vulkan/bin/llama-bench")
fi
cargo build --release -q -p lilypad-cli
"$CARGO_TARGET_DIR/release/lilypad" bench --model "$model" \
  --prompt-tokens "$prompt_tokens" --gen-tokens "$gen_tokens" \
  --llama-bench "$llama/build/bin/llama-bench" "${vulkan[@]}" --json "$json"
