#!/usr/bin/env bash
# Builds the VS Code extension: the engine and agent wasm (when missing), the bundles and
# web/vscode/lilypad.vsix. Needs the web packages (setup-web.sh) and the extension's (setup-vscode.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f web/src/wasm/lilypad_wasm_bg.wasm ]] || scripts/build-wasm.sh
[[ -f web/src/agent/wasm/lilypad_agent_wasm_bg.wasm ]] || scripts/build-agent-wasm.sh
cd web/vscode
npx tsc -p .
node build.mjs
npx vsce package --no-dependencies --allow-missing-repository --skip-license -o lilypad.vsix
