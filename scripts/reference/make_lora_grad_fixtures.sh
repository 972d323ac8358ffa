#!/usr/bin/env bash
# Regenerates the LoRA gradient fixtures, tests/fixtures/lora/<name>/grads/:
# PyTorch autograd's gradients of a weighted log-probability loss with respect to each adapter's
# lora_A and lora_B (make_lora_grad_fixtures.py). Needs the adapters of make_lora_fixtures.sh.
#
#   scripts/reference/make_lora_grad_fixtures.sh [llama-tiny] [qwen3-tiny] [qwen35-tiny]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=pins.sh
source "$HERE/pins.sh"

reference_venv

cd "$ROOT"
exec "$VENV/bin/python" "$HERE/make_lora_grad_fixtures.py" "$@"
