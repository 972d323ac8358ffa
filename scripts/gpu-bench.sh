#!/usr/bin/env bash
# FrogNano-4B-shaped benchmark with a prebuilt `lilypad` binary, for machines that may have
# a GPU but no Rust toolchain (build here with `cargo build --release -p lilypad-cli`, copy
# the binary and this script). Writes a synthetic model (random Q4_K weights, FrogNano-4B's
# shapes) once, then prints: the adapter, the memory plan at 2k, 8k and 32k context with
# f16 and f32 KV caches, kernel bandwidth against the copy kernel, prefill/decode tokens/s
# (and after a 4k prompt with each KV cache type), speculative decoding with the MTP layer
# against plain decode, and batched decode at 1–16 sequences;
# with a `train-native` binary beside `lilypad` (or at $TRAIN_NATIVE), a timed GRPO training
# step (rank-16 LoRA on every linear, 1,024 tokens) with every kernel of it profiled.
#
#   scripts/gpu-bench.sh [path/to/lilypad] [--prompt-tokens N] [--gen-tokens N]
set -euo pipefail
bin="${1:-}"
if [[ -z "$bin" || "$bin" == --* ]]; then
  bin="$(command -v lilypad || true)"
  [[ -z "$bin" && -x "${CARGO_TARGET_DIR:-$HOME/.cache/lilypad/target}/release/lilypad" ]] \
    && bin="${CARGO_TARGET_DIR:-$HOME/.cache/lilypad/target}/release/lilypad"
else
  shift
fi
[[ -x "$bin" ]] || { echo "usage: $0 path/to/lilypad [--prompt-tokens N] [--gen-tokens N]" >&2; exit 2; }
prompt_tokens=512
gen_tokens=64
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prompt-tokens) prompt_tokens="$2"; shift 2 ;;
    --gen-tokens) gen_tokens="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/lilypad-runtime-$(id -u)}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

model="${LILYPAD_BENCH_MODEL:-${TMPDIR:-/tmp}/frognano-4b-synthetic-q4_k.gguf}"
[[ -f "$model" ]] || "$bin" synth --out "$model"

echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(uname -n), $(nproc) CPUs"
"$bin" adapters
for ctx in 2048 8192 32768; do
  for kv in f16 f32; do
    echo "== memory at context $ctx, $kv KV cache"
    "$bin" inspect "$model" --context "$ctx" --kv-cache "$kv" | grep -E '^(GPU memory|largest|fits)'
  done
done
echo "== kernels and whole model (prompt $prompt_tokens, generate $gen_tokens)"
"$bin" bench --model "$model" --context 4096 --prompt-tokens "$prompt_tokens" --gen-tokens "$gen_tokens" --profile
echo "== the same whole-model run with an f32 KV cache (f16 above), after a 4,096-token prompt"
"$bin" bench --model "$model" --context 8192 --kv-cache f32 --prompt-tokens 4096 --gen-tokens 16
"$bin" bench --model "$model" --context 8192 --kv-cache f16 --prompt-tokens 4096 --gen-tokens 16
echo "== speculative decoding with the MTP layer (random weights: drafts are rejected, so this"
echo "   is the check's cost; the same run's plain decode is the baseline)"
"$bin" bench --model "$model" --context 2048 --prompt-tokens 256 --gen-tokens 32 --draft mtp
echo "== batched decode: total tokens/s with 1 to 16 sequences decoded together"
"$bin" bench --model "$model" --context 2048 --batch 1,2,4,8,16 --prompt-tokens 256 --gen-tokens 32
train_bin="${TRAIN_NATIVE:-$(dirname "$bin")/train-native}"
if [[ -x "$train_bin" ]]; then
  echo "== a training step: forward, log-probabilities, backward and AdamW, 1,024 tokens in steps of 64"
  "$train_bin" bench-step -m "$model" --tokens 1024 --step-tokens 64 --rank 16 --steps 2 --profile
fi
