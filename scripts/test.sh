#!/usr/bin/env bash
# Runs every test: kernels against CPU references, the GGUF reader's hostile inputs, the
# tokenizer, the downloader against a local server, and SmolLM2 against llama.cpp's fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup-system.sh
scripts/fetch-model.sh >/dev/null
# No silent skips: a missing adapter or model is a failure here.
export LILYPAD_REQUIRE_GPU=1 LILYPAD_REQUIRE_MODEL=1
# --all-targets: no doc-test pass (there are none), so the log closes on real tests.
cargo test --workspace --all-targets "$@"
