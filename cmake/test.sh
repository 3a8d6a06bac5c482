#!/usr/bin/env bash
# One command from a fresh clone: install what is missing, build (release),
# fetch the default model and run the whole test suite: unit, model, golden,
# slow and gpu tests (gpu tests skip with a message where no GPU is usable).
#
#   cmake/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

cmake/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
cmake/fetch_model.sh >/dev/null
ctest --preset release
