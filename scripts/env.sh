# Shared environment for lilypad's scripts (sourced): build outputs and downloads live
# outside the checkout so fresh clones reuse them.
export LILYPAD_CACHE="${LILYPAD_CACHE:-$HOME/.cache/lilypad}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$LILYPAD_CACHE/target}"
# Mesa's Vulkan loader warns without a runtime dir.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/lilypad-runtime-$(id -u)}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
