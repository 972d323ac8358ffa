#!/usr/bin/env bash
# pytest for Python in the browser (Pyodide): pure-Python wheels downloaded from PyPI once into
# $LILYPAD_CACHE/pyodide-wheels, which web/scripts/python-assets.mjs serves with the app.
# Prints that folder; skipped when every wheel is there.
set -euo pipefail
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
DIR="$CACHE/pyodide-wheels"
# pytest and its dependencies, pinned; all py3-none-any.
WHEELS=(pytest==8.4.2 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0)
have=0
for w in "${WHEELS[@]}"; do
  compgen -G "$DIR/${w%%==*}-${w##*==}-*.whl" >/dev/null && have=$((have + 1))
done
if [[ $have -ne ${#WHEELS[@]} ]]; then
  echo "[setup-pyodide] downloading ${WHEELS[*]} into $DIR" >&2
  mkdir -p "$DIR"
  # The test venv's pip (setup-python.sh), so no system pip is needed.
  PY="$("$(dirname "$0")/setup-python.sh")/python"
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$DIR" "${WHEELS[@]}" >&2
fi
echo "$DIR"
