#!/usr/bin/env bash
# Builds the agent for the browser: crates/agent-wasm for wasm32 (toolchain: wasm-cargo.sh),
# its JS glue with the wasm-bindgen CLI that build-wasm.sh installs (the same exact version),
# and wasm-opt where installed. Output: web/src/agent/wasm/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

OUT=web/src/agent/wasm
scripts/wasm-cargo.sh build --release -p lilypad-agent-wasm
WASM="$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/lilypad_agent_wasm.wasm"
version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
BINDGEN="$LILYPAD_CACHE/tools/bin/wasm-bindgen"
if [[ ! -x "$BINDGEN" ]] || [[ "$("$BINDGEN" --version)" != "wasm-bindgen $version" ]]; then
    echo "build-agent-wasm: installing wasm-bindgen-cli $version into $LILYPAD_CACHE/tools" >&2
    CARGO_TARGET_DIR="$LILYPAD_CACHE/tools/target" cargo install --quiet --force \
        wasm-bindgen-cli --version "$version" --root "$LILYPAD_CACHE/tools"
fi
rm -rf "$OUT"
"$BINDGEN" --target web --remove-name-section --remove-producers-section --out-dir "$OUT" "$WASM"
# Kept only if the optimised module still instantiates: an old binaryen can break it.
if command -v wasm-opt >/dev/null 2>&1 &&
    wasm-opt -O2 --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
        --enable-mutable-globals --enable-reference-types --enable-multivalue \
        "$OUT/lilypad_agent_wasm_bg.wasm" -o "$OUT/opt.wasm" &&
    node --input-type=module -e "
        import { initSync } from '$PWD/$OUT/lilypad_agent_wasm.js';
        import { readFileSync } from 'node:fs';
        initSync({ module: readFileSync('$OUT/opt.wasm') });" 2>/dev/null; then
    mv "$OUT/opt.wasm" "$OUT/lilypad_agent_wasm_bg.wasm"
else
    rm -f "$OUT/opt.wasm"
    echo "build-agent-wasm: the module is not size-optimised (wasm-opt missing or too old)" >&2
fi
echo "build-agent-wasm: $OUT/lilypad_agent_wasm_bg.wasm: $(stat -c %s "$OUT/lilypad_agent_wasm_bg.wasm") bytes" >&2
