#!/usr/bin/env bash
# Installs the Debian 12 packages kairox builds with, if any are missing.
# Uses sudo when not root. The CUDA toolkit is optional and not installed here:
# without nvcc, the build is CPU-only.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config git python3 python3-venv
          libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 libdnnl-dev
          libmetis-dev liburing-dev ocl-icd-opencl-dev libcli11-dev libssl-dev libedit-dev
          clang libclang-rt-14-dev tmux libcpp-httplib-dev curl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install_deps: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
