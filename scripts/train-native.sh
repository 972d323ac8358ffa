#!/usr/bin/env bash
# Runs train-native (environments, task synthesis, calibration, evaluation, a timed training
# step) with the shared build folder and caches; the arguments go to train-native. Installs
# bubblewrap and python3-venv when missing, and fetches the default model for commands that
# take --model.
#   scripts/train-native.sh envs build
#   scripts/train-native.sh synth --per-project 10
#   scripts/train-native.sh calibrate -k 4 --limit 50
#   scripts/train-native.sh eval -k 3
#   scripts/train-native.sh bench-step --tokens 512 --rank 16
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup-system.sh
args=("$@")
case "${1:-}" in
  calibrate|eval|featadd|bench-step|plan)
    if [[ " $* " != *" --model "* && " $* " != *" -m "* ]]; then
      args+=(--model "$(scripts/fetch-model.sh)")
    fi
    ;;
esac
exec cargo run -q -p lilypad-train -- "${args[@]}"
