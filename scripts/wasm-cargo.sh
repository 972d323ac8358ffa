#!/usr/bin/env bash
# Runs cargo for wasm32-unknown-unknown with the first toolchain that has it:
#   1. rustup's toolchain with the wasm32-unknown-unknown target installed;
#   2. the same after `rustup target add wasm32-unknown-unknown` (given 120 s);
#   3. Debian's browser toolchain (rustc-web, cargo-web, rust-web-src, lld-19), which has no
#      prebuilt wasm32 std: std is built from source with -Zbuild-std.
# Usage: scripts/wasm-cargo.sh check|build [cargo arguments]; --target is added here.
set -euo pipefail

TARGET=wasm32-unknown-unknown
cmd="$1"
shift

have_rustup_target() {
    command -v rustup >/dev/null 2>&1 &&
        rustup target list --installed 2>/dev/null | grep -qx "$TARGET"
}

if have_rustup_target; then
    echo "wasm-cargo: rustup toolchain with $TARGET" >&2
    exec cargo "$cmd" --target "$TARGET" "$@"
fi

# A failed attempt is remembered for an hour, so one CI run waits for it only once.
FAILED="${LILYPAD_CACHE:-$HOME/.cache/lilypad}/rustup-wasm32-failed"
if command -v rustup >/dev/null 2>&1 && ! [[ -n "$(find "$FAILED" -mmin -60 2>/dev/null)" ]]; then
    echo "wasm-cargo: installing $TARGET with rustup" >&2
    if timeout 120 rustup target add "$TARGET" && have_rustup_target; then
        exec cargo "$cmd" --target "$TARGET" "$@"
    fi
    mkdir -p "$(dirname "$FAILED")" && touch "$FAILED"
    echo "wasm-cargo: rustup could not install $TARGET; using Debian's rustc-web" >&2
fi

if [[ ! -x /usr/bin/cargo || ! -d /usr/lib/rustlib/src/rust/library ]] ||
    ! command -v wasm-ld-19 >/dev/null 2>&1; then
    SUDO=()
    if [[ $(id -u) -ne 0 ]]; then
        SUDO=(sudo)
    fi
    "${SUDO[@]}" apt-get update
    "${SUDO[@]}" apt-get install -y rustc-web cargo-web rust-web-src lld-19
fi

echo "wasm-cargo: Debian rustc-web with -Zbuild-std" >&2
# /usr/bin/rust-lld points to an lld that is not installed, hence the explicit linker.
PATH=/usr/bin:$PATH RUSTC_BOOTSTRAP=1 \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-19 \
    exec /usr/bin/cargo "$cmd" --target "$TARGET" -Zbuild-std=std,panic_abort "$@"
