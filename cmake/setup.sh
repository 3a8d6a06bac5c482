#!/usr/bin/env bash
# One command from a fresh clone: install what is missing, build everything
# (release; with CUDA when nvcc is present), fetch the default model and
# generate from a prompt.
#
#   cmake/setup.sh ["prompt"]
set -euo pipefail
cd "$(dirname "$0")/.."

cmake/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
model="$(cmake/fetch_model.sh)"
prompt="${1:-What is the capital of France? Answer in one sentence.}"
echo "--- build/bin/kairox-cli -m $model --chat -p \"$prompt\"" >&2
build/bin/kairox-cli -m "$model" --chat -n 96 --temp 0 -p "$prompt"
