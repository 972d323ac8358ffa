#!/usr/bin/env bash
# Builds llama.cpp (CPU only, Release) from the PyPI sdist of llama-cpp-python, which vendors a
# pinned llama.cpp, plus a Python venv able to drive it through the sdist's ctypes bindings.
# Everything lands in a cache folder outside the repo; finished steps are skipped on re-runs.
#
# Output (printed at the end):
#   $OUT/build/bin/libllama.so         shared library (LLAMA_CPP_LIB_PATH points here)
#   $OUT/build/bin/llama-bench, llama-simple, llama-completion, llama-tokenize
#   $OUT/venv/bin/python               Python with numpy/jinja2 for record_fixture.py
#   $OUT/src/llama_cpp_python-0.3.36   extracted sdist (llama_cpp package + vendor/llama.cpp)
#
# --vectors-only: download and extract the sdist, then stop and print llama.cpp's models/
# folder, whose ggml-vocab-*.gguf files with .inp/.out are the tokenizer test vectors.
# --vulkan: llama.cpp's Vulkan backend instead (glslc and the Vulkan headers from apt), in
# $OUT/build-vulkan, for llama-bench only: the same adapter lilypad runs on (lavapipe without
# a GPU; GGML_VK_VISIBLE_DEVICES=0 makes it take a CPU device). Its shaders take a while.
set -euo pipefail

VECTORS_ONLY=0
VULKAN=0
case "${1:-}" in
  "") ;;
  --vectors-only) VECTORS_ONLY=1 ;;
  --vulkan) VULKAN=1 ;;
  *) echo "usage: $0 [--vectors-only | --vulkan]" >&2; exit 2 ;;
esac

VERSION="0.3.36"
CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
OUT="$CACHE/llama.cpp-$VERSION"
SDIST_DIR="$CACHE/pip"
SRC="$OUT/src/llama_cpp_python-$VERSION"
BUILD="$OUT/build"
VENV="$OUT/venv"
JOBS="${JOBS:-$(nproc)}"
TARGETS=(llama llama-bench llama-simple llama-completion llama-tokenize)
PY_DEPS=(numpy==2.2.6 typing-extensions==4.15.0 diskcache==5.6.3 jinja2==3.1.6)

log() { echo "[llama-cpp/build] $*" >&2; }
mkdir -p "$OUT" "$SDIST_DIR"

# 1. Source. --no-binary only for this package: `:all:` would also compile the sdist's build
#    backend (cmake included) from source just to read its metadata, which takes many minutes.
SDIST="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
  log "downloading llama-cpp-python==$VERSION sdist"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" -d "$SDIST_DIR" >&2
fi
if [[ ! -f "$SRC/.extracted" ]]; then
  log "extracting $SDIST"
  rm -rf "$SRC"
  mkdir -p "$OUT/src"
  tar xzf "$SDIST" -C "$OUT/src"
  touch "$SRC/.extracted"
fi
if [[ "$VECTORS_ONLY" == 1 ]]; then
  echo "$SRC/vendor/llama.cpp/models"
  exit 0
fi

# 2. Python environment for the ctypes bindings (they import numpy etc. at package import).
if [[ ! -f "$VENV/.ready" ]]; then
  log "creating venv $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet "${PY_DEPS[@]}" >&2
  touch "$VENV/.ready"
fi

# 3. cmake: the system one if present, else Debian's, else the PyPI wheel inside the venv.
if ! command -v cmake >/dev/null; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "installing cmake with apt-get"
    if ! { apt-get update -qq && apt-get install -y -qq cmake; } >&2; then
      log "apt-get could not install cmake"
    fi
  fi
fi
if ! command -v cmake >/dev/null; then
  if [[ ! -x "$VENV/bin/cmake" ]]; then
    log "installing cmake from PyPI into the venv"
    "$VENV/bin/python" -m pip install --quiet "cmake>=3.21" >&2
  fi
  export PATH="$VENV/bin:$PATH"
fi

# 4. Configure and build. The stamp holds the configuration, so a changed one reconfigures.
GGML_VULKAN=OFF
if [[ "$VULKAN" == 1 ]]; then
  missing=()
  command -v glslc >/dev/null || missing+=(glslc)
  [[ -f /usr/include/vulkan/vulkan.hpp ]] || missing+=(libvulkan-dev)
  if (( ${#missing[@]} )); then
    [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null ||
      { log "needs ${missing[*]} (apt)"; exit 1; }
    log "installing ${missing[*]} with apt-get"
    { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; } >&2
  fi
  GGML_VULKAN=ON
  BUILD="$OUT/build-vulkan"
  TARGETS=(llama llama-bench)
  # Debian 12's Vulkan headers (1.3.239) predate VK_EXT_layer_settings, which llama.cpp uses
  # only to configure the validation layer (GGML_VULKAN_VALIDATE): that block is compiled
  # out for older headers. Nothing else changes.
  python3 - "$SRC/vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp" <<'PY'
import sys
path = sys.argv[1]
src = open(path).read()
start = "    VkBool32 enable_best_practice = layer_settings;\n"
end = "&layer_setting_info);\n"
if "LILYPAD_OLD_HEADERS" not in src:
    a = src.index(start)
    b = src.index(end, a) + len(end)
    src = (src[:a] + "#if VK_HEADER_VERSION >= 261 // LILYPAD_OLD_HEADERS\n" + src[a:b]
           + "#else\n    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);\n#endif\n"
           + src[b:])
    open(path, "w").write(src)
PY
fi
CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=ON
  -DGGML_NATIVE=ON          # tuned to this CPU: the benchmark is meant for the local machine
  -DGGML_CUDA=OFF -DGGML_VULKAN=$GGML_VULKAN -DGGML_METAL=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF  # would download at configure time
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON
)
STAMP="$BUILD/.lilypad-stamp"
WANT="$VERSION ${CMAKE_ARGS[*]} ${TARGETS[*]}"
done_already=1
[[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] || done_already=0
for t in libllama.so "${TARGETS[@]:1}"; do
  [[ -e "$BUILD/bin/$t" ]] || done_already=0
done
if [[ "$done_already" == 0 ]]; then
  log "configuring"
  cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${CMAKE_ARGS[@]}" >&2
  log "building ${TARGETS[*]} with $JOBS jobs (several minutes on 2 cores)"
  cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2
  echo "$WANT" > "$STAMP"
else
  log "already built"
fi

echo "$OUT"
