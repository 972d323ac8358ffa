#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo fuzz, libFuzzer, AddressSanitizer) of every parser that reads
# untrusted input: GGUF files and the tokenizer built from them, Hugging Face checkpoints
# (config.json + safetensors) and their tokenizer.json, chat templates, model replies' tool calls, the virtual shell's
# command lines and patches. Each target runs for SECONDS
# (default 15) from a corpus kept in the cache, so later runs start where earlier ones ended.
# A crash fails the run; its input is left in fuzz/artifacts/TARGET/ to become a regression test.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
SECONDS_EACH="${1:-15}"
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(gguf checkpoint tokenizer_json chat_template tool_call shell_syntax patch)

# cargo-fuzz from crates.io into the cache; libFuzzer needs the nightly toolchain.
export PATH="$LILYPAD_CACHE/tools/bin:$PATH"
if ! command -v cargo-fuzz >/dev/null; then
  cargo install -q --locked cargo-fuzz --root "$LILYPAD_CACHE/tools"
fi
rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
export CARGO_TARGET_DIR="$LILYPAD_CACHE/fuzz-target"
cargo +nightly fuzz build -O >/dev/null

# Seeds from real files: the test models and llama.cpp's small vocabulary GGUFs, every chat
# template llama.cpp ships; the other targets' seeds live in fuzz/seeds/.
LLAMA_MODELS="$LILYPAD_CACHE/llama.cpp-0.3.36/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models"
seed() {
  local target=$1 corpus=$2
  mkdir -p "$corpus"
  [[ -d fuzz/seeds/$target ]] && cp -n fuzz/seeds/"$target"/* "$corpus"/
  case $target in
    gguf)
      cp -n tests/fixtures/qwen/*/model.gguf "$corpus"/ 2>/dev/null || true
      for f in "$LLAMA_MODELS"/ggml-vocab-*.gguf; do
        [[ -f $f && $(stat -c %s "$f") -lt 3000000 ]] && cp -n "$f" "$corpus"/
      done ;;
    checkpoint)
      # The fixtures' config.json and safetensors, as the target reads them.
      for dir in tests/fixtures/qwen/*/; do
        python3 -c 'import struct, sys
config = open(sys.argv[1] + "config.json", "rb").read()
shard = open(sys.argv[1] + "model.safetensors", "rb").read()
sys.stdout.buffer.write(struct.pack("<I", len(config)) + config + shard)' "$dir" \
          >"$corpus/seed-$(basename "$dir")"
      done ;;
    tokenizer_json)
      # The fixtures' tokenizer.json files, each with a line of code to encode.
      for dir in tests/fixtures/qwen/*/; do
        python3 -c 'import struct, sys
json = open(sys.argv[1] + "tokenizer.json", "rb").read()
sys.stdout.buffer.write(struct.pack("<I", len(json)) + json + "def f(x):\n    return x  # héllo".encode())' "$dir" \
          >"$corpus/seed-$(basename "$dir")"
      done ;;
    chat_template)
      for f in "$LLAMA_MODELS"/templates/*.jinja; do [[ -f $f ]] && cp -n "$f" "$corpus"/; done ;;
  esac
  return 0
}

for target in "${TARGETS[@]}"; do
  corpus="$LILYPAD_CACHE/fuzz-corpus/$target"
  seed "$target" "$corpus"
  echo "fuzz: $target for ${SECONDS_EACH}s from $(ls "$corpus" | wc -l) inputs"
  # -timeout: one input may take at most 20 s (a template on its whole budget takes a few);
  # -rss_limit_mb: a blow-up past 2 GiB is a finding, not a slow machine.
  log="$LILYPAD_CACHE/fuzz-corpus/$target.log"
  status=0
  cargo +nightly fuzz run -O "$target" "$corpus" -- \
    -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+ *DONE" "$log" || true
  if [[ $status != 0 ]]; then
    grep -E "ERROR|SUMMARY|Test unit written|panicked" "$log" | head -20 >&2 || tail -20 "$log" >&2
    echo "fuzz: $target failed (log: $log; failing inputs in fuzz/artifacts/$target/)" >&2
    exit 1
  fi
done
