"""One Session, several threads: a call while another runs raises KairoxError BUSY, close()
during a running generate() stops it and waits for it before freeing the session.

The running call is held deterministically inside the C library by a gate: a progress
callback (installed through the C ABI) that blocks until the test releases it.
"""
import threading

import pytest

import kairox
from kairox import _lib as C

WAIT_S = 30  # a bound on every wait, so that a broken build fails instead of hanging


class Gate:
    """A session progress callback that blocks on its first call until release()."""

    def __init__(self, session: kairox.Session) -> None:
        self.entered = threading.Event()
        self._release = threading.Event()

        def poll(_ud, _progress):
            self.entered.set()
            self._release.wait(WAIT_S)
            return 0

        self._ref = C.PROGRESS_CALLBACK(poll)  # kept alive while installed
        assert C.lib().kx_session_set_progress_callback(session.handle, self._ref, None) == 0

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT_S), "the call never reached the progress callback"

    def release(self) -> None:
        self._release.set()


def _busy(call) -> None:
    with pytest.raises(kairox.KairoxError) as e:
        call()
    assert e.value.status_name == "BUSY"
    assert "busy" in e.value.message


def test_close_during_generate_stops_it_and_waits(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=256, n_threads=1)
    gate = Gate(s)
    pieces = []
    consumer = threading.Thread(
        target=lambda: pieces.extend(s.generate("abc", max_tokens=-1)), daemon=True)
    consumer.start()
    gate.wait_entered()  # the worker is inside kx_session_generate (its prompt)
    _busy(lambda: s.n_past)
    closer = threading.Thread(target=s.close, daemon=True)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() returned while the generation was still running"
    gate.release()
    closer.join(WAIT_S)
    consumer.join(WAIT_S)
    assert not closer.is_alive() and not consumer.is_alive()
    assert s.last_result is not None and s.last_result.stop_reason == "aborted"
    with pytest.raises(ValueError, match="closed"):
        s.eval([1])
    s.close()  # closing twice is harmless


def test_close_from_the_iterating_thread(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=256, n_threads=1)
    it = s.generate("abc", max_tokens=-1, sampler=kairox.Sampler(seed=5, temperature=1.0))
    next(it, None)
    s.close()  # stops the generation still running on the helper thread, then frees
    rest = list(it)  # the iterator ends normally with what was already streamed
    assert isinstance(rest, list)
    assert s.last_result is not None
    with pytest.raises(ValueError, match="closed"):
        _ = s.n_past


def test_two_threads_on_one_session_get_busy(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=256, n_threads=1)
    gate = Gate(s)
    errors = []

    def run_eval():
        try:
            s.eval([1, 2, 3])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    worker = threading.Thread(target=run_eval, daemon=True)
    worker.start()
    gate.wait_entered()
    _busy(lambda: s.eval([4]))
    _busy(lambda: s.tokens)
    _busy(lambda: s.truncate(0))
    _busy(lambda: s.logits())
    _busy(lambda: list(s.generate("x", max_tokens=2)))
    gate.release()
    worker.join(WAIT_S)
    assert not worker.is_alive() and errors == []
    assert s.tokens == [1, 2, 3]  # the refused calls changed nothing

    # Without the gate: two threads race; every call either runs or is refused, never both.
    assert C.lib().kx_session_set_progress_callback(s.handle, C.PROGRESS_CALLBACK(), None) == 0
    s.reset()
    done = [0, 0]
    unexpected = []

    def hammer(slot):
        for _ in range(60):
            try:
                s.eval([7])
                done[slot] += 1
            except kairox.KairoxError as e:
                if e.status_name != "BUSY":
                    unexpected.append(e)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert unexpected == []
    assert s.n_past == done[0] + done[1] > 0
