#!/usr/bin/env bash
# Static checks, before the tests: formatting, clippy with warnings as errors, and the
# architecture's one-way dependencies (ARCHITECTURE.md, "Invariants") read off `cargo tree`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

# crate ↛ dependency: the crate's normal dependencies (transitively) must not include it.
forbid() {
  local crate="$1"; shift
  local deps
  deps="$(cargo tree -p "$crate" -e normal --target all --prefix none --format '{p}' | awk '{print $1}' | sort -u)"
  for dep in "$@"; do
    if grep -qx "$dep" <<<"$deps"; then
      echo "dependency rule broken: $crate depends on $dep (ARCHITECTURE.md, Invariants)" >&2
      cargo tree -p "$crate" -e normal --target all -i "$dep" >&2 || true
      exit 1
    fi
  done
}
engine_users=(lilypad-agent lilypad-agent-wasm lilypad-chat lilypad-cli lilypad-wasm)
forbid lilypad-gguf lilypad-engine lilypad-tokenizer wgpu "${engine_users[@]}"
forbid lilypad-tokenizer lilypad-engine wgpu "${engine_users[@]}"
forbid lilypad-engine "${engine_users[@]}" lilypad-tokenizer
# (wasm-bindgen may come in through platform shims such as web-time; web-sys may not.)
forbid lilypad-agent lilypad-engine lilypad-gguf lilypad-tokenizer wgpu web-sys
forbid lilypad-agent-wasm lilypad-engine wgpu
# The agent's layers: the language-model interface, the repository and the shell know nothing
# of each other's upper layers (lm ← chat, lm ← agent; repo ← shell ← agent).
forbid lilypad-lm lilypad-repo lilypad-shell lilypad-agent lilypad-engine wgpu
forbid lilypad-repo lilypad-lm lilypad-shell lilypad-agent lilypad-engine wgpu web-sys
forbid lilypad-shell lilypad-lm lilypad-agent lilypad-engine wgpu web-sys
# The chat session and the browser engine need only the model interface, not the agent.
forbid lilypad-chat lilypad-agent lilypad-repo lilypad-shell
forbid lilypad-wasm lilypad-agent lilypad-repo lilypad-shell
# train-native sits on top: nothing of ours depends on it.
for crate in lilypad-gguf lilypad-tokenizer lilypad-engine lilypad-chat lilypad-cli lilypad-agent; do
  forbid "$crate" lilypad-train
done
echo "checks passed: rustfmt, clippy, dependency directions"
