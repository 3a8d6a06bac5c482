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
model=$(cmake/fetch_model.sh)
# The other real models (Gemma 3 270M; Qwen2.5-Coder-1.5B, 1.04 GiB): their golden tests
# (test_hf_golden_*) run when they are cached.
cmake/fetch_model.sh gemma3 >/dev/null
cmake/fetch_model.sh qwen1.5b >/dev/null
ctest --preset release

# The Python package (capi/python, ctypes over build/lib/libkairox.so) and its
# pytest tests, in a virtual environment under build/ (PyPI once, for pytest, numpy and the
# openai client that kairox-server's tests talk through).
venv=build/venv
if [[ ! -x $venv/bin/pytest ]] || ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip setuptools pytest numpy openai
fi
"$venv/bin/pip" install -q --no-build-isolation --no-deps ./capi/python
KAIROX_LIBRARY="$PWD/build/lib/libkairox.so" KAIROX_TINY_WRITER="$PWD/build/tests/kx_write_tiny_model" \
  KAIROX_SIDECAR_AUTO=0 KAIROX_TEST_MODEL="$model" "$venv/bin/python" -m pytest -q tests/python
# kairox-server on loopback with the default model: the openai client, curl, a load test and
# hostile requests (tests/server; under a minute).
KAIROX_LIBRARY="$PWD/build/lib/libkairox.so" KAIROX_SERVER="$PWD/build/bin/kairox-server" \
  KAIROX_SIDECAR_AUTO=0 KAIROX_TEST_MODEL="$model" "$venv/bin/python" -m pytest -q tests/server
