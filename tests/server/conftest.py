"""Fixtures for kairox-server's tests: the real binary on a free loopback port with the default
model, started once per configuration and stopped with SIGTERM (which must end it cleanly).

KAIROX_SERVER: the kairox-server binary (default build/bin/kairox-server).
KAIROX_TEST_MODEL: the default model (cmake/fetch_model.sh prints its path).
KAIROX_LIBRARY: libkairox.so, for the `kairox` package the tests read token ids with.
"""
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

STARTUP_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20
LISTENING = re.compile(r"listening on (http://[0-9.]+:[0-9]+)")


def server_binary() -> Path:
    return Path(os.environ.get("KAIROX_SERVER", "build/bin/kairox-server"))


@pytest.fixture(scope="session")
def model_path() -> str:
    path = os.environ.get("KAIROX_TEST_MODEL") or os.path.expanduser(
        "~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        pytest.skip(f"default model not found at {path} (run cmake/fetch_model.sh)")
    return path


class Server:
    """A running kairox-server: its base URL, process and what it printed."""

    def __init__(self, args: List[str]):
        binary = server_binary()
        if not binary.exists():
            pytest.fail(f"kairox-server not found at {binary} (build it or set KAIROX_SERVER)")
        env = dict(os.environ, KAIROX_SIDECAR_AUTO="0")
        self.proc = subprocess.Popen([str(binary), "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: List[str] = []
        found = threading.Event()
        self.url = ""

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                m = LISTENING.search(line)
                if m and not self.url:
                    self.url = m.group(1)
                    found.set()
            found.set()  # the process ended

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not found.wait(STARTUP_TIMEOUT_S) or not self.url:
            self.proc.kill()
            pytest.fail("kairox-server did not start: " + "".join(self.lines))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        """SIGTERM, then the exit status (killed and failed after STOP_TIMEOUT_S)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
            pytest.fail("kairox-server did not stop within %d s of SIGTERM" % STOP_TIMEOUT_S)
        self.reader.join(STOP_TIMEOUT_S)
        return rc


def start(model: str, *args: str) -> Server:
    return Server(["-m", model, "-t", "1", "--ctx-size", "512", *args])


@pytest.fixture(scope="module")
def server(model_path: str) -> Iterator[Server]:
    """Two sessions, a queue of two, short timeouts, a small body limit."""
    s = start(model_path, "--parallel", "2", "--queue", "2", "--timeout", "2",
              "--max-body", "65536")
    yield s
    assert s.stop() == 0, "".join(s.lines)


@pytest.fixture(scope="module")
def end_tokens(model_path: str) -> Dict[str, int]:
    """logit_bias entries (id -> -100) that ban every end-of-generation token, read with the
    kairox package, so that a generation runs to max_tokens."""
    import kairox  # noqa: PLC0415 - needs KAIROX_LIBRARY
    with kairox.Model(model_path) as m:
        n = m.info.n_vocab
        ids = [t for t in range(min(n, 64)) if m.is_end_of_generation(t)]
        for t in (m.info.eos_token, m.info.eot_token):
            if t >= 0 and t not in ids:
                ids.append(t)
    assert ids
    return {str(t): -100 for t in ids}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wait_for(predicate, timeout_s: float, what: str) -> None:
    """Polls `predicate` every 50 ms; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
