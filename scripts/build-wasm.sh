#!/usr/bin/env bash
# Builds the browser engine: crates/wasm for wasm32 (toolchain: wasm-cargo.sh), its JS glue
# with wasm-bindgen (installed once into the cache, at exactly the crate's version), and
# wasm-opt where it is installed. Output: web/src/wasm/ (lilypad_wasm.js, .wasm, .d.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

OUT=web/src/wasm
TOOLS="$LILYPAD_CACHE/tools"

scripts/wasm-cargo.sh build --release -p lilypad-wasm
WASM="$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/lilypad_wasm.wasm"

# The CLI must match the wasm-bindgen crate in Cargo.lock exactly, or the glue is refused.
version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
BINDGEN="$TOOLS/bin/wasm-bindgen"
if [[ ! -x "$BINDGEN" ]] || [[ "$("$BINDGEN" --version)" != "wasm-bindgen $version" ]]; then
    echo "build-wasm: installing wasm-bindgen-cli $version into $TOOLS" >&2
    CARGO_TARGET_DIR="$TOOLS/target" cargo install --quiet --force \
        wasm-bindgen-cli --version "$version" --root "$TOOLS"
fi

rm -rf "$OUT"
# Function names (a tenth of the module) only serve stack traces: a panic's message survives.
"$BINDGEN" --target web --remove-name-section --remove-producers-section --out-dir "$OUT" "$WASM"
# Instantiates the module in Node: an old binaryen can emit a module that fails at start-up.
starts() {
    node --input-type=module -e "
        import { initSync } from '$PWD/$OUT/lilypad_wasm.js';
        import { readFileSync } from 'node:fs';
        initSync({ module: readFileSync(process.argv[1]) });" "$1" 2>/dev/null
}
if command -v wasm-opt >/dev/null 2>&1; then
    # A binaryen that broke this wasm-bindgen's output once is not tried again (Debian 12's
    # binaryen 108 turns the externref table into a funcref table).
    opt_version="$(wasm-opt --version | tr -c 'A-Za-z0-9.\n' _)"
    BROKEN="$TOOLS/wasm-opt-fails-$opt_version-bindgen-$version"
    if [[ -e "$BROKEN" ]]; then
        echo "build-wasm: $(wasm-opt --version) breaks this module; keeping it as built" >&2
    # The features rustc enables by default for wasm32.
    elif wasm-opt -O2 --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
        --enable-mutable-globals --enable-reference-types --enable-multivalue \
        "$OUT/lilypad_wasm_bg.wasm" -o "$OUT/opt.wasm" && starts "$OUT/opt.wasm"; then
        mv "$OUT/opt.wasm" "$OUT/lilypad_wasm_bg.wasm"
    else
        rm -f "$OUT/opt.wasm"
        mkdir -p "$TOOLS" && touch "$BROKEN"
        echo "build-wasm: $(wasm-opt --version) could not optimise the module; keeping it as built" >&2
    fi
else
    echo "build-wasm: wasm-opt not found (Debian: binaryen); the module is not size-optimised" >&2
fi
raw=$(stat -c %s "$OUT/lilypad_wasm_bg.wasm")
gz=$(gzip -9 -c "$OUT/lilypad_wasm_bg.wasm" | wc -c)
echo "build-wasm: $OUT/lilypad_wasm_bg.wasm: $raw bytes, $gz gzipped" >&2
