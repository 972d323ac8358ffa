#!/usr/bin/env bash
# A Python with pytest for the agent's end-to-end tests (the example repositories' test
# suites run through the agent's Bash tool). Prints the venv's bin folder; skipped once made.
set -euo pipefail
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
VENV="$CACHE/py-tests"
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -m pytest --version >/dev/null 2>&1; then
  echo "[setup-python] creating $VENV with pytest" >&2
  python3 -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest==8.4.2 >&2
fi
echo "$VENV/bin"
