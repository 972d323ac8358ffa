#!/usr/bin/env bash
# Builds the VS Code extension: the engine and agent wasm (when missing), the bundles and
# web/vscode/lilypad.vsix. Needs the web packages (setup-web.sh), pytest's wheels (setup-pyodide.sh)
# and the extension's packages (setup-vscode.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f web/src/wasm/lilypad_wasm_bg.wasm ]] || scripts/build-wasm.sh
[[ -f web/src/agent/wasm/lilypad_agent_wasm_bg.wasm ]] || scripts/build-agent-wasm.sh
# Python for the agent's shell: Pyodide and pytest's wheels (setup-pyodide.sh), as the web build has them.
[[ -f web/public/pyodide/wheels/wheels.json ]] || node web/scripts/python-assets.mjs
cd web/vscode
npx tsc -p .
node build.mjs
npx vsce package --no-dependencies --allow-missing-repository --skip-license -o lilypad.vsix
