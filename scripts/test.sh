#!/usr/bin/env bash
# Runs every test: static checks (scripts/check.sh), kernels against CPU references, the
# hostile inputs (under a memory limit), the tokenizer against llama.cpp's test vectors, the downloader against a local server,
# SmolLM2 against llama.cpp's fixture, train-native on two real Python projects, and the engine
# in headless Chromium (test-web.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup-system.sh
# rustfmt, clippy -D warnings and the crates' one-way dependencies.
scripts/check.sh
scripts/fetch-model.sh >/dev/null
# llama.cpp's tokenizer test vectors (the sdist only: no llama.cpp build).
scripts/llama-cpp/build.sh --vectors-only >/dev/null
# pytest for the agent's end-to-end tests, first on PATH for the shells they start.
PATH="$(scripts/setup-python.sh):$PATH"
# No silent skips: a missing adapter, model or pytest is a failure here.
export LILYPAD_REQUIRE_GPU=1 LILYPAD_REQUIRE_MODEL=1 LILYPAD_REQUIRE_PYTEST=1 LILYPAD_REQUIRE_SANDBOX=1
# train-native's tests run the real pipeline (rollouts graded by a project's suite, model-
# written bugs) on a real environment: inflection and xmltodict, built from PyPI once (about
# 20 s) and reused from the cache, then a handful of tasks synthesized and validated.
export LILYPAD_TEST_TRAIN_DIR="$LILYPAD_CACHE/train"
cargo run -q -p lilypad-train -- --dir "$LILYPAD_TEST_TRAIN_DIR" envs build --only inflection,xmltodict
cargo run -q -p lilypad-train -- --dir "$LILYPAD_TEST_TRAIN_DIR" synth --only inflection,xmltodict \
  --per-project 3 --max-tries 10 --out "$LILYPAD_TEST_TRAIN_DIR/tasks-ci"
# The hostile-input corpus (broken GGUFs, templates, prompts, texts, files given as models)
# first, under a 3 GiB data limit per process: a blow-up fails the test instead of taking
# the machine. Built without the limit, which would also bind the compiler.
HOSTILE=(-p lilypad-gguf --test hostile -p lilypad-tokenizer --test template_budget
  -p lilypad-cli --test limits -p lilypad-tests --test bad_input)
cargo test -q "${HOSTILE[@]}" --no-run
prlimit --data=$((3 << 30)) -- cargo test -q "${HOSTILE[@]}"
# Every parser of untrusted input fuzzed for 15 s each (cargo fuzz, libFuzzer + ASan).
scripts/fuzz.sh 15
# --all-targets: no doc-test pass (there are none), so the log closes on real tests.
cargo test --workspace --all-targets "$@"
# The backward kernels whose layout follows the adapter's, in the GPU layout too (this
# machine's lavapipe gets the CPU one above); the forward's take minutes in it, so not those.
LILYPAD_MATVEC=workgroup cargo test -q -p lilypad-engine --test kernels_backward
# The forward norms' GPU layout (a 64-thread workgroup; lavapipe runs a row as one subgroup).
LILYPAD_MATVEC=workgroup cargo test -q -p lilypad-engine --test kernels --test kernels_qwen35 -- rms_norm
# Real-model agent runs on SwiftShader take about 10 minutes each: the default suite skips
# them (0 steps), scripts/test-extended.sh runs them.
if [[ "${LILYPAD_EXTENDED:-0}" != 1 ]]; then
  export AGENT_E2E_STEPS=0 LILYPAD_E2E_STEPS=0
fi
# The browser: loader unit tests, then Chromium end to end against the native CLI.
scripts/test-web.sh
# The VS Code extension in code-server: the view, pending changes, the terminal, the native path.
scripts/test-vscode.sh
