"""kairox: LLM inference from Python, over the C ABI of libkairox.so (ctypes, no extension).

    import kairox
    model = kairox.Model("model.gguf")
    session = model.session(n_ctx=2048)
    prompt = model.apply_chat_template([{"role": "user", "content": "Hi!"}])
    for piece in session.generate(prompt, max_tokens=64):
        print(piece, end="", flush=True)

Threading: a Model may be shared between threads. A Session runs one call at a time: a
call made while another one on the same session is running — on another thread, or while a
generate() iterator's generation is still going (it runs on a helper thread) — raises
KairoxError with status_name "BUSY" at once; nothing waits, so no thread can deadlock on a
session. The exceptions are abort(), which stops a running generation from any thread, and
close(), which stops a running generation, waits for the running call to return and then
frees the session (an open generate() iterator then ends normally, stop_reason "aborted").
"""

from __future__ import annotations

import contextlib
import ctypes
import operator
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib as C

__all__ = ["KairoxError", "Model", "ModelInfo", "Session", "Sampler", "GenerateResult",
           "version", "set_log_callback", "set_log_level"]

STOP_REASONS = {0: "end_of_generation", 1: "max_tokens", 2: "stop_string", 3: "context_full",
                4: "aborted", 5: "callback"}


class KairoxError(RuntimeError):
    """A failed kairox call: `status` (int), `status_name` and the library's message."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.status_name = C.STATUS_NAMES.get(status, "UNKNOWN")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


def _check(status: int) -> None:
    if status != 0:
        raise KairoxError(status, (C.lib().kx_last_error() or b"").decode("utf-8", "replace"))


def version() -> str:
    """The library's version, "major.minor.patch"."""
    return C.lib().kx_version_string().decode()


_I32_MAX = 2**31 - 1
_U64_MAX = 2**64 - 1


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi]: TypeError for what is not an integer (numpy integers
    are), ValueError naming `name` and the range otherwise. ctypes would silently keep the
    low bits of an int too large for its C type (2**32 + 64 → 64)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _token_array(name: str, tokens: Sequence[int]) -> Tuple[Any, int]:
    """Token ids as a C int32 array (and their count), each checked to be in [0, 2**31 - 1]."""
    ids = [_int(f"{name}[{i}]", t, 0, _I32_MAX) for i, t in enumerate(tokens)]
    return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)


_log_callback_ref: Any = None  # keeps the ctypes thunk alive while installed

LOG_LEVELS = {"trace": 0, "debug": 1, "info": 2, "warn": 3, "error": 4, "off": 6}


def set_log_callback(fn: Optional[Callable[[str, str], None]]) -> None:
    """Sends kairox's log lines to fn(level_name, message); None restores stderr."""
    global _log_callback_ref
    names = {v: k for k, v in LOG_LEVELS.items()}
    if fn is None:
        _check(C.lib().kx_set_log_callback(C.LOG_CALLBACK(), None))
        _log_callback_ref = None
        return

    def thunk(_ud: Any, level: int, message: bytes) -> None:
        try:
            fn(names.get(level, "error"), message.decode("utf-8", "replace"))
        except Exception:  # never propagate into the C library
            pass

    ref = C.LOG_CALLBACK(thunk)
    _check(C.lib().kx_set_log_callback(ref, None))
    _log_callback_ref = ref


def set_log_level(level: str) -> None:
    """One of trace, debug, info, warn, error, off."""
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r}; one of {sorted(LOG_LEVELS)}")
    _check(C.lib().kx_set_log_level(LOG_LEVELS[level]))


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class ModelInfo:
    """What kx_model_get_info reports."""
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    n_ctx_train: int
    bos_token: int
    eos_token: int
    eot_token: int
    add_bos: bool
    n_params: int
    weight_bytes_per_token: int
    chat_template_kind: str
    chat_template: str
    path: str


Message = Union[Mapping[str, str], Tuple[str, str]]


class Model:
    """A loaded GGUF model (immutable; shareable between threads and sessions)."""

    def __init__(self, path: str, *, n_threads: int = 0, device: str = "auto",
                 sidecar_path: Optional[str] = None, ram_budget: int = 0, gpu_budget: int = 0,
                 progress: Optional[Callable[[float], Optional[bool]]] = None,
                 use_mmap: bool = True) -> None:
        """Loads `path`. `progress(fraction)` may return False to cancel (KairoxError
        CANCELLED). n_threads: default threads of sessions (0: all cores). use_mmap=False
        reads the whole file into memory at load instead of mapping it (same results)."""
        lib = C.lib()
        self._handle: Optional[int] = None
        path_bytes = os.fsencode(path)  # TypeError for what is not a path
        n_threads = _int("n_threads", n_threads, 0, _I32_MAX)
        ram_budget = _int("ram_budget", ram_budget, 0, _U64_MAX)
        gpu_budget = _int("gpu_budget", gpu_budget, 0, _U64_MAX)
        opts = ctypes.c_void_p()
        _check(lib.kx_model_options_create(ctypes.byref(opts)))
        try:
            _check(lib.kx_model_options_set_threads(opts, n_threads))
            _check(lib.kx_model_options_set_device(opts, device.encode()))
            if sidecar_path:
                _check(lib.kx_model_options_set_sidecar_path(opts, sidecar_path.encode()))
            _check(lib.kx_model_options_set_budget(opts, C.TIER_RAM, ram_budget))
            _check(lib.kx_model_options_set_budget(opts, C.TIER_GPU, gpu_budget))
            _check(lib.kx_model_options_set_mmap(opts, 1 if use_mmap else 0))
            cb = None
            if progress is not None:
                def thunk(_ud: Any, fraction: float) -> int:
                    try:
                        return 1 if progress(fraction) is False else 0
                    except Exception:
                        return 1
                cb = C.PROGRESS_CALLBACK(thunk)
                _check(lib.kx_model_options_set_progress_callback(opts, cb, None))
            handle = ctypes.c_void_p()
            _check(lib.kx_model_load(path_bytes, opts, ctypes.byref(handle)))
            self._handle = handle.value
        finally:
            lib.kx_model_options_free(opts)

    def close(self) -> None:
        """Releases the model (sessions made from it keep working)."""
        if self._handle is not None:
            C.lib().kx_model_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("the model is closed")
        return self._handle

    @property
    def info(self) -> ModelInfo:
        raw = C.ModelInfo()
        _check(C.lib().kx_model_info_init(ctypes.byref(raw), ctypes.sizeof(raw)))
        _check(C.lib().kx_model_get_info(self.handle, ctypes.byref(raw)))
        s = lambda b: (b or b"").decode("utf-8", "replace")  # noqa: E731
        return ModelInfo(s(raw.arch), raw.n_layer, raw.n_embd, raw.n_ff, raw.n_head,
                         raw.n_head_kv, raw.n_vocab, raw.n_ctx_train, raw.bos_token,
                         raw.eos_token, raw.eot_token, bool(raw.add_bos), raw.n_params,
                         raw.weight_bytes_per_token, s(raw.chat_template_kind),
                         s(raw.chat_template), s(raw.path))

    def tokenize(self, text: Union[str, bytes], add_special: bool = True,
                 parse_special: bool = True) -> List[int]:
        """Text → token ids (BOS as the model asks when add_special)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        flags = (C.TOKENIZE_ADD_SPECIAL if add_special else 0) | \
                (C.TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        n = ctypes.c_uint64()
        lib = C.lib()
        _check(lib.kx_tokenize(self.handle, data, len(data), flags, None, 0, ctypes.byref(n)))
        buf = (ctypes.c_int32 * max(n.value, 1))()
        _check(lib.kx_tokenize(self.handle, data, len(data), flags, buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    def detokenize_bytes(self, tokens: Sequence[int], render_special: bool = False) -> bytes:
        """Token ids → raw bytes (may end inside a UTF-8 character)."""
        ids, n_ids = _token_array("tokens", tokens)
        flags = C.DETOKENIZE_RENDER_SPECIAL if render_special else 0
        n = ctypes.c_uint64()
        lib = C.lib()
        _check(lib.kx_detokenize(self.handle, ids, n_ids, flags, None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(lib.kx_detokenize(self.handle, ids, n_ids, flags, buf, n.value + 1,
                                 ctypes.byref(n)))
        return buf.raw[:n.value]

    def detokenize(self, tokens: Sequence[int], render_special: bool = False) -> str:
        """Token ids → text (invalid UTF-8 becomes U+FFFD)."""
        return self.detokenize_bytes(tokens, render_special).decode("utf-8", "replace")

    def is_end_of_generation(self, token: int) -> bool:
        out = ctypes.c_int32()
        token = _int("token", token, -2**31, _I32_MAX)
        _check(C.lib().kx_model_is_end_of_generation(self.handle, token, ctypes.byref(out)))
        return bool(out.value)

    def apply_chat_template(self, messages: Iterable[Message], add_generation_prompt: bool = True,
                            default_system: bool = True) -> str:
        """Messages ({"role": ..., "content": ...} or (role, content)) → prompt text in the
        model's chat format."""
        pairs = []
        for m in messages:
            role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else m
            pairs.append((role.encode(), content.encode()))
        arr = (C.ChatMessage * max(len(pairs), 1))(*[C.ChatMessage(r, c) for r, c in pairs])
        flags = (C.CHAT_ADD_GENERATION_PROMPT if add_generation_prompt else 0) | \
                (0 if default_system else C.CHAT_NO_DEFAULT_SYSTEM)
        n = ctypes.c_uint64()
        lib = C.lib()
        _check(lib.kx_model_apply_chat_template(self.handle, arr, len(pairs), flags, None, 0,
                                                ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(lib.kx_model_apply_chat_template(self.handle, arr, len(pairs), flags, buf,
                                                n.value + 1, ctypes.byref(n)))
        return buf.raw[:n.value].decode("utf-8", "replace")

    def session(self, **kwargs: Any) -> "Session":
        """A new Session on this model (see Session for the arguments)."""
        return Session(self, **kwargs)


class Sampler:
    """The sampling chain: repetition penalty → greedy (temperature <= 0) or top-k → min-p →
    top-p → temperature → seeded draw."""

    def __init__(self, temperature: Optional[float] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, min_p: Optional[float] = None,
                 repeat_penalty: Optional[float] = None, repeat_last_n: Optional[int] = None,
                 seed: Optional[int] = None) -> None:
        """Each parameter left at None takes the library's default (kx_sampler_params_init,
        the one set kairox-cli and kairox-chat use: temperature 0.8, top_k 40, top_p 0.95,
        min_p 0.05, repeat_penalty 1, repeat_last_n 64, seed 0xC0FFEE)."""
        lib = C.lib()
        p = C.SamplerParams()
        _check(lib.kx_sampler_params_init(ctypes.byref(p), ctypes.sizeof(p)))
        if temperature is not None:
            p.temperature = temperature
        if top_p is not None:
            p.top_p = top_p
        if min_p is not None:
            p.min_p = min_p
        if top_k is not None:  # the library checks its own range
            p.top_k = _int("top_k", top_k, -2**31, _I32_MAX)
        if repeat_penalty is not None:
            p.repeat_penalty = repeat_penalty
        if repeat_last_n is not None:
            p.repeat_last_n = _int("repeat_last_n", repeat_last_n, -2**31, _I32_MAX)
        if seed is not None:
            p.seed = _int("seed", seed, 0, _U64_MAX)
        h = ctypes.c_void_p()
        _check(lib.kx_sampler_create(ctypes.byref(p), ctypes.byref(h)))
        self._handle: Optional[int] = h.value

    @classmethod
    def greedy(cls) -> "Sampler":
        return cls(temperature=0.0)

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("the sampler is closed")
        return self._handle

    def reset(self, seed: int) -> None:
        _check(C.lib().kx_sampler_reset(self.handle, _int("seed", seed, 0, _U64_MAX)))

    def set_logit_bias(self, bias: Mapping[int, float]) -> None:
        """{token id: bias} added to the logits first (-inf bans, +inf forces); {} clears."""
        ids = [_int("logit_bias token", t, 0, _I32_MAX) for t in bias]
        vals = [float(v) for v in bias.values()]
        id_arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        val_arr = (ctypes.c_float * max(len(vals), 1))(*vals)
        _check(C.lib().kx_sampler_set_logit_bias(self.handle, id_arr, val_arr, len(ids)))

    def sample_logits(self, logits: Sequence[float], history: Sequence[int] = ()) -> int:
        """Draws a token id from a row of logits (a list or numpy array)."""
        row = (ctypes.c_float * len(logits))(*[float(x) for x in logits])
        hist, n_hist = _token_array("history", history)
        out = ctypes.c_int32()
        _check(C.lib().kx_sampler_sample_logits(self.handle, row, len(logits), hist,
                                                n_hist, ctypes.byref(out)))
        return out.value

    def close(self) -> None:
        if self._handle is not None:
            C.lib().kx_sampler_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


@dataclass
class GenerateResult:
    """How the last generate() ended."""
    n_tokens: int
    n_prompt: int
    stop_reason: str  # end_of_generation, max_tokens, stop_string, context_full, aborted, callback
    n_reused: int = 0  # chat(): prompt tokens the session already held (not evaluated again)


class _Done:
    def __init__(self, status: int, message: str, error: Optional[BaseException] = None):
        self.status, self.message, self.error = status, message, error


class Session:
    """One sequence (KV cache, token history, statistics) on a model."""

    def __init__(self, model: Model, n_ctx: int = 0, n_batch: int = 0, n_threads: int = 0,
                 seed: Optional[int] = None, sidecar: Optional[str] = None, sparse: bool = True,
                 sparsity: float = 0.0, ram_budget: Optional[str] = None,
                 policy: Optional[str] = None, prefetch: bool = True,
                 device: Optional[str] = None, vram_budget: Optional[str] = None,
                 n_gpu_layers: int = -1, vram_ffn: Optional[str] = None,
                 device_policy: Optional[str] = None) -> None:
        """sidecar: a kairox-prepare sidecar (None: <model>.kairox.gguf beside the model, if
        present); sparse=False runs dense; sparsity 0 uses the sidecar's own level.
        ram_budget: "512M", "2G" or "50%" (None: the model's); with a sidecar, FFN bundles are
        then read from its file into the session's own memory; policy: which groups stay
        resident ("tam-adaptive" by default); prefetch=False reads a layer's bundles only
        when it runs. device: "cpu", "cuda", "sim" or "auto" (None: the model's, auto by
        default); vram_budget: "4G" or "50%" of the device (None: the model's); n_gpu_layers:
        at most that many layers' attention on the device (-1: all that fit, 0: none).
        vram_ffn: the split FFN's device slots, "2G" or "30%" of the sidecar's bundles ("0":
        the FFN stays on the CPU; None: what the device has left); device_policy: which FFN
        groups hold them ("tam-adaptive" by default)."""
        lib = C.lib()
        p = C.SessionParams()
        _check(lib.kx_session_params_init(ctypes.byref(p), ctypes.sizeof(p)))
        p.n_ctx = _int("n_ctx", n_ctx, 0, _I32_MAX)
        p.n_batch = _int("n_batch", n_batch, 0, _I32_MAX)
        p.n_threads = _int("n_threads", n_threads, 0, _I32_MAX)
        if seed is not None:  # None: the library's default sampler seed
            p.seed = _int("seed", seed, 0, _U64_MAX)
        p.sidecar = sidecar.encode() if sidecar else None
        p.sparse = 0 if sparse else 1
        p.sparsity = sparsity
        p.ram_budget = ram_budget.encode() if ram_budget else None
        p.policy = policy.encode() if policy else None
        p.prefetch = 0 if prefetch else 1
        p.device = device.encode() if device else None
        p.vram_budget = vram_budget.encode() if vram_budget else None
        if not isinstance(n_gpu_layers, int) or not -1 <= n_gpu_layers < 2**31:
            raise ValueError(f"n_gpu_layers must be -1 (all that fit), 0 or a layer count, "
                             f"got {n_gpu_layers!r}")
        p.n_gpu_layers = 0 if n_gpu_layers < 0 else (-1 if n_gpu_layers == 0 else n_gpu_layers)
        p.vram_ffn = vram_ffn.encode() if vram_ffn is not None else None
        p.device_policy = device_policy.encode() if device_policy else None
        # Set before anything can fail, so that close() (from __del__) always finds them.
        self._handle: Optional[int] = None
        self._lock = threading.Lock()  # held by the running call (see _use)
        self._abort: Optional[ctypes.c_int32] = None  # the running generation's abort flag
        h = ctypes.c_void_p()
        _check(lib.kx_session_create(model.handle, ctypes.byref(p), ctypes.byref(h)))
        self._handle = h.value
        self.model = model
        self.last_result: Optional[GenerateResult] = None

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("the session is closed")
        return self._handle

    def _acquire(self) -> int:
        """Takes the session for one call (released by the caller) and returns its handle;
        KairoxError BUSY when another call holds it, ValueError when it is closed."""
        if not self._lock.acquire(blocking=False):
            raise KairoxError(C.STATUS_BUSY,
                              "the session is busy: another call on it is running (on another "
                              "thread, or a generate() that has not finished); a session runs "
                              "one call at a time")
        if self._handle is None:
            self._lock.release()
            raise ValueError("the session is closed")
        return self._handle

    @contextlib.contextmanager
    def _use(self) -> Iterator[int]:
        handle = self._acquire()
        try:
            yield handle
        finally:
            self._lock.release()

    def close(self) -> None:
        """Frees the session. A running generation is stopped (as by abort()) and the call
        running on the session, if any, is waited for first; safe from any thread."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the session existed
            return
        abort = self._abort
        if abort is not None:
            abort.value = 1
        with lock:
            if self._handle is not None:
                C.lib().kx_session_free(self._handle)
                self._handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def eval(self, tokens: Sequence[int], all_logits: bool = False) -> None:
        """Appends and evaluates tokens (KairoxError CONTEXT_FULL if they do not fit)."""
        ids, n_ids = _token_array("tokens", tokens)
        with self._use() as h:
            _check(C.lib().kx_session_eval(h, ids, n_ids,
                                           C.EVAL_ALL_LOGITS if all_logits else 0))

    def logits(self, index: int = -1, as_numpy: Optional[bool] = None) -> Any:
        """A copy of the logits of token `index` of the last eval: a numpy float32 array when
        numpy is importable (or as_numpy=True), else a list of floats."""
        ptr = ctypes.POINTER(ctypes.c_float)()
        n = ctypes.c_int32()
        use_numpy = _has_numpy() if as_numpy is None else as_numpy
        index = _int("index", index, -2**31, _I32_MAX)
        with self._use() as h:  # the row lives in the session: copied before release
            _check(C.lib().kx_session_get_logits(h, index, ctypes.byref(ptr), ctypes.byref(n)))
            if use_numpy:
                import numpy as np
                return np.ctypeslib.as_array(ptr, shape=(n.value,)).copy()
            return ptr[:n.value]

    def sample(self, sampler: Sampler) -> int:
        """Draws the next token from the last logits with the session's history."""
        out = ctypes.c_int32()
        with self._use() as h:
            _check(C.lib().kx_sampler_sample(sampler.handle, h, ctypes.byref(out)))
        return out.value

    @property
    def n_past(self) -> int:
        out = ctypes.c_int32()
        with self._use() as h:
            _check(C.lib().kx_session_get_n_past(h, ctypes.byref(out)))
        return out.value

    @property
    def n_ctx(self) -> int:
        out = ctypes.c_int32()
        with self._use() as h:
            _check(C.lib().kx_session_get_n_ctx(h, ctypes.byref(out)))
        return out.value

    @property
    def tokens(self) -> List[int]:
        """The token ids in the KV cache."""
        lib = C.lib()
        n = ctypes.c_uint64()
        with self._use() as h:
            _check(lib.kx_session_get_tokens(h, None, 0, ctypes.byref(n)))
            buf = (ctypes.c_int32 * max(n.value, 1))()
            _check(lib.kx_session_get_tokens(h, buf, n.value, ctypes.byref(n)))
        return list(buf[:n.value])

    def truncate(self, n_keep: int) -> None:
        with self._use() as h:
            _check(C.lib().kx_session_truncate(h, _int("n_keep", n_keep, 0, _I32_MAX)))

    def reset(self) -> None:
        """Clears the KV cache and re-seeds the default sampler."""
        with self._use() as h:
            _check(C.lib().kx_session_reset(h))

    def stats(self) -> Dict[str, float]:
        """Counters since creation or reset_stats(), as a dict."""
        st = C.Stats()
        _check(C.lib().kx_stats_init(ctypes.byref(st), ctypes.sizeof(st)))
        with self._use() as h:
            _check(C.lib().kx_session_get_stats(h, ctypes.byref(st)))
        return {name: getattr(st, name) for name, _ in C.Stats._fields_ if name != "struct_size"}

    def reset_stats(self) -> None:
        with self._use() as h:
            _check(C.lib().kx_session_reset_stats(h))

    def abort(self) -> None:
        """Stops a running generate() from any thread: before the next token, or while its
        prompt is evaluated, between two layers (then nothing of it stays in the session)."""
        abort = self._abort
        if abort is not None:
            abort.value = 1

    def chat(self, messages: Iterable[Message], max_tokens: int = 256, stop: Sequence[str] = (),
             sampler: Optional[Sampler] = None, default_system: bool = True) -> Iterator[str]:
        """Streams the assistant's answer to a conversation: `messages` ({"role", "content"}
        mappings or (role, content) pairs) is the whole conversation so far, previous answers
        included. It is rendered with the model's chat template and only the tokens the
        session does not hold yet are evaluated (kx_session_chat); self.last_result.n_reused
        says how many were kept. Otherwise as generate()."""
        encoded = []  # the bytes the C structs point into, alive until the call returns
        for m in messages:
            role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else m
            encoded.append((role.encode(), content.encode()))
        if not encoded:
            raise ValueError("chat() needs at least one message")
        arr = (C.ChatMessage * len(encoded))(*[C.ChatMessage(r, c) for r, c in encoded])
        flags = 0 if default_system else C.CHAT_NO_DEFAULT_SYSTEM
        lib = C.lib()
        result = C.ChatResult()
        _check(lib.kx_chat_result_init(ctypes.byref(result), ctypes.sizeof(result)))

        def call(handle: int, sampler_handle: Any, gp: Any) -> int:
            assert encoded
            return lib.kx_session_chat(handle, sampler_handle, arr, len(encoded), flags,
                                       ctypes.byref(gp), ctypes.byref(result))

        def finished() -> GenerateResult:
            return GenerateResult(result.n_tokens, result.n_prompt,
                                  STOP_REASONS.get(result.stop_reason, str(result.stop_reason)),
                                  result.n_reused)

        return self._stream(call, finished, max_tokens, stop, sampler)

    def chat_text(self, messages: Iterable[Message], **kwargs: Any) -> str:
        """chat() joined into one string."""
        return "".join(self.chat(messages, **kwargs))

    def generate(self, prompt: str = "", max_tokens: int = 256, stop: Sequence[str] = (),
                 sampler: Optional[Sampler] = None) -> Iterator[str]:
        """Streams the text generated after `prompt` ("" continues the session), in pieces
        of whole characters. Stops at end of generation, max_tokens (-1: no limit), a stop
        string (excluded from the text), a full context, abort(), or when the iterator is
        closed, or close() of the session. How it ended is in self.last_result afterwards
        (also after an early close: stop_reason "aborted"). The session is taken when the
        iteration starts and stays taken until the generation has ended: calls on it meanwhile
        raise KairoxError BUSY (abort() and close() excepted)."""
        lib = C.lib()
        result = C.GenerateResult()
        _check(lib.kx_generate_result_init(ctypes.byref(result), ctypes.sizeof(result)))
        prompt_bytes = prompt.encode()

        def call(handle: int, sampler_handle: Any, gp: Any) -> int:
            return lib.kx_session_generate(handle, sampler_handle, prompt_bytes,
                                           ctypes.byref(gp), ctypes.byref(result))

        def finished() -> GenerateResult:
            return GenerateResult(result.n_tokens, result.n_prompt,
                                  STOP_REASONS.get(result.stop_reason, str(result.stop_reason)))

        return self._stream(call, finished, max_tokens, stop, sampler)

    def _stream(self, call: Callable[[int, Any, Any], int],
                finished_result: Callable[[], GenerateResult], max_tokens: int,
                stop: Sequence[str], sampler: Optional[Sampler]) -> Iterator[str]:
        """Runs `call(handle, sampler_handle, generate_params)` (a C call that streams through
        on_token) on a helper thread and yields its pieces (generate() and chat())."""
        lib = C.lib()
        gp = C.GenerateParams()
        _check(lib.kx_generate_params_init(ctypes.byref(gp), ctypes.sizeof(gp)))
        stops = [s.encode() for s in stop]
        stop_arr = (ctypes.c_char_p * max(len(stops), 1))(*stops)
        gp.max_tokens = _int("max_tokens", max_tokens, -1, _I32_MAX)
        gp.stop_strings = stop_arr if stops else None
        gp.n_stop_strings = len(stops)
        abort = ctypes.c_int32(0)  # this generation's own: a later one never sees it set
        gp.abort_flag = ctypes.pointer(abort)
        pieces: "queue.SimpleQueue[Union[str, _Done]]" = queue.SimpleQueue()

        def on_token(_ud: Any, _token: int, text: Any, n: int) -> int:
            if n:
                pieces.put(ctypes.string_at(text, n).decode("utf-8", "replace"))
            return 0

        callback = C.TOKEN_CALLBACK(on_token)  # referenced until the worker is joined
        gp.on_token = callback
        sampler_handle = sampler.handle if sampler is not None else None
        handle = self._acquire()  # released by the worker when the C call has returned
        self._abort = abort

        def run() -> None:
            try:
                status = call(handle, sampler_handle, gp)
                msg = (lib.kx_last_error() or b"").decode("utf-8", "replace") if status else ""
                done_item = _Done(status, msg)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                done_item = _Done(-1, str(e), e)
            finally:
                self._abort = None
                self._lock.release()
            pieces.put(done_item)

        def finished() -> None:
            self.last_result = finished_result()

        self.last_result = None
        worker = threading.Thread(target=run, name="kairox-generate", daemon=True)
        try:
            worker.start()
        except BaseException:
            self._abort = None
            self._lock.release()
            raise
        done = False
        try:
            while True:
                item = pieces.get()
                if isinstance(item, _Done):
                    done = True
                    if item.error is not None:
                        raise item.error
                    if item.status != 0:
                        raise KairoxError(item.status, item.message)
                    finished()
                    return
                yield item
        finally:
            if threading.current_thread() is worker:
                # Finalized by the garbage collector on the helper thread itself (inside a
                # token callback): it cannot wait for itself; the generation stops after it.
                abort.value = 1
            else:
                if not done:  # closed early: stop the C loop, then record how it ended
                    abort.value = 1
                    worker.join()
                    while True:
                        item = pieces.get()
                        if isinstance(item, _Done):
                            if item.error is None and item.status == 0:
                                finished()
                            break
                worker.join()

    def generate_text(self, prompt: str = "", **kwargs: Any) -> str:
        """generate() joined into one string."""
        return "".join(self.generate(prompt, **kwargs))
