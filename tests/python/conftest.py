"""Fixtures for the Python package's tests.

KAIROX_LIBRARY: the libkairox.so under test. KAIROX_TINY_WRITER: the program that writes
tiny test models (build/tests/kx_write_tiny_model; found next to the library otherwise).
KAIROX_TEST_MODEL: the default model for tests marked `model`.
"""
import os
import subprocess
from pathlib import Path

import pytest


def _writer() -> Path:
    env = os.environ.get("KAIROX_TINY_WRITER")
    if env:
        return Path(env)
    lib = os.environ.get("KAIROX_LIBRARY")
    if lib:  # build/lib/libkairox.so → build/tests/kx_write_tiny_model
        return Path(lib).resolve().parent.parent / "tests" / "kx_write_tiny_model"
    return Path("build/tests/kx_write_tiny_model")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    writer = _writer()
    if not writer.exists():
        pytest.fail(f"tiny-model writer not found at {writer} (build kx_write_tiny_model or set "
                    "KAIROX_TINY_WRITER)")
    path = tmp_path_factory.mktemp("models") / "tiny.gguf"
    subprocess.run([str(writer), str(path)], check=True)
    return str(path)


@pytest.fixture(scope="session")
def default_model_path() -> str:
    path = os.environ.get("KAIROX_TEST_MODEL") or os.path.expanduser(
        "~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        pytest.skip(f"default model not found at {path} (run cmake/fetch_model.sh)")
    return path
