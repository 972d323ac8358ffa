# Shared by make_fixtures.sh and make_lora_fixtures.sh: one pinned Python environment for the
# reference fixtures, ${LILYPAD_CACHE:-~/.cache/lilypad}/reference-venv, with one stamp.
# Source it, then call `reference_venv` (sets VENV; creates or updates the venv when its stamp
# differs from PINS).
PINS=(
  torch==2.15.0
  transformers==5.23.0
  tokenizers==0.23.3
  safetensors==0.8.0
  numpy==2.4.6
  # LoRA adapters (make_lora_fixtures.py); peft 0.21.2 is the newest on PyPI and works with
  # transformers 5.23.0; accelerate and psutil are its dependencies
  peft==0.21.2 accelerate==1.16.0 psutil==7.2.2
  # the llama.cpp converter's gguf-py and the llama-cpp-python ctypes bindings
  pyyaml==6.0.4 tqdm==4.70.1 requests==2.34.2 sentencepiece==0.2.3 diskcache==5.6.3
)

reference_venv() {
  local cache="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
  VENV="$cache/reference-venv"
  local stamp="$VENV/.lilypad-pins"
  if [[ ! -x "$VENV/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "${PINS[*]}" ]]; then
    echo "[reference] creating $VENV with ${PINS[*]} (a few minutes)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >&2
    echo "${PINS[*]}" > "$stamp"
  else
    echo "[reference] venv ready: $VENV" >&2
  fi
}
