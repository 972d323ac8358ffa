#!/usr/bin/env bash
# Installs the system packages lilypad needs: a Vulkan loader and, for machines without a
# GPU, Mesa's lavapipe (a Vulkan driver that runs on the CPU); bubblewrap, the sandbox for
# model-written commands; python3-venv, for train-native's per-project venvs. Skips what is
# present.
set -euo pipefail

need=()
for pkg in libvulkan1 mesa-vulkan-drivers bubblewrap python3-venv; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "install a Vulkan driver and loader (missing: ${need[*]})" >&2
    exit 1
  fi
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi
