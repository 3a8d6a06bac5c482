"""Loading libkairox.so and declaring the C ABI (include/kairox/kairox.h) for ctypes.

The struct layouts here mirror kairox.h field by field; they only ever grow at the end,
as the C structs do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import List, Optional

c_int32 = ctypes.c_int32
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_float = ctypes.c_float
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER

STATUS_NAMES = {
    0: "OK", 1: "INVALID_ARGUMENT", 2: "NOT_FOUND", 3: "IO_ERROR", 4: "INVALID_MODEL",
    5: "UNSUPPORTED", 6: "UNIMPLEMENTED", 7: "OUT_OF_MEMORY", 8: "BUFFER_TOO_SMALL",
    9: "CONTEXT_FULL", 10: "CANCELLED", 11: "INVALID_STATE", 12: "INTERNAL",
    13: "BUSY",
}
STATUS_BUSY = 13
STATUS_BUFFER_TOO_SMALL = 8

TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
DETOKENIZE_RENDER_SPECIAL = 1
CHAT_ADD_GENERATION_PROMPT = 1
CHAT_NO_DEFAULT_SYSTEM = 2
EVAL_ALL_LOGITS = 1
TIER_GPU = 0
TIER_RAM = 1


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_uint32), ("n_layer", c_int32), ("n_embd", c_int32),
        ("n_ff", c_int32), ("n_head", c_int32), ("n_head_kv", c_int32), ("n_vocab", c_int32),
        ("n_ctx_train", c_int32), ("bos_token", c_int32), ("eos_token", c_int32),
        ("eot_token", c_int32), ("add_bos", c_int32), ("n_params", c_uint64),
        ("weight_bytes_per_token", c_uint64), ("arch", c_char_p),
        ("chat_template_kind", c_char_p), ("chat_template", c_char_p), ("path", c_char_p),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class SessionParams(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_ctx", c_int32), ("n_batch", c_int32),
                ("n_threads", c_int32), ("seed", c_uint64), ("sidecar", ctypes.c_char_p),
                ("sparse", c_int32), ("sparsity", c_float), ("ram_budget", ctypes.c_char_p),
                ("policy", ctypes.c_char_p), ("prefetch", c_int32),
                ("device", ctypes.c_char_p), ("vram_budget", ctypes.c_char_p),
                ("n_gpu_layers", c_int32), ("vram_ffn", ctypes.c_char_p),
                ("device_policy", ctypes.c_char_p)]


class SamplerParams(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("temperature", c_float), ("top_k", c_int32),
                ("top_p", c_float), ("min_p", c_float), ("repeat_penalty", c_float),
                ("repeat_last_n", c_int32), ("reserved", c_uint32), ("seed", c_uint64)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(c_int32, c_void_p, c_int32, POINTER(ctypes.c_char), c_uint64)
PROGRESS_CALLBACK = ctypes.CFUNCTYPE(c_int32, c_void_p, c_float)
LOG_CALLBACK = ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_int, c_char_p)


class GenerateParams(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("max_tokens", c_int32),
                ("stop_strings", POINTER(c_char_p)), ("n_stop_strings", c_uint32),
                ("flags", c_uint32), ("abort_flag", POINTER(c_int32)),
                ("on_token", TOKEN_CALLBACK), ("user_data", c_void_p)]


class GenerateResult(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_tokens", c_int32), ("n_prompt", c_int32),
                ("stop_reason", c_int32)]


class ChatResult(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_tokens", c_int32), ("n_prompt", c_int32),
                ("n_reused", c_int32), ("stop_reason", c_int32)]


class Stats(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_threads", c_int32),
                ("n_prompt_tokens", c_uint64), ("n_gen_tokens", c_uint64),
                ("n_evals", c_uint64), ("prompt_seconds", ctypes.c_double),
                ("gen_seconds", ctypes.c_double), ("sample_seconds", ctypes.c_double),
                ("prompt_tokens_per_second", ctypes.c_double),
                ("gen_tokens_per_second", ctypes.c_double)]


_P = c_void_p  # every opaque handle
_SIGNATURES = {
    "kx_version": (c_uint32, []),
    "kx_version_string": (c_char_p, []),
    "kx_status_name": (c_char_p, [ctypes.c_int]),
    "kx_last_error": (c_char_p, []),
    "kx_set_log_callback": (ctypes.c_int, [LOG_CALLBACK, c_void_p]),
    "kx_set_log_level": (ctypes.c_int, [ctypes.c_int]),
    "kx_model_options_create": (ctypes.c_int, [POINTER(_P)]),
    "kx_model_options_free": (None, [_P]),
    "kx_model_options_set_sidecar_path": (ctypes.c_int, [_P, c_char_p]),
    "kx_model_options_set_threads": (ctypes.c_int, [_P, c_int32]),
    "kx_model_options_set_device": (ctypes.c_int, [_P, c_char_p]),
    "kx_model_options_set_budget": (ctypes.c_int, [_P, ctypes.c_int, c_uint64]),
    "kx_model_options_set_mmap": (ctypes.c_int, [_P, c_int32]),
    "kx_model_options_set_progress_callback": (ctypes.c_int, [_P, PROGRESS_CALLBACK, c_void_p]),
    "kx_model_load": (ctypes.c_int, [c_char_p, _P, POINTER(_P)]),
    "kx_model_free": (None, [_P]),
    "kx_model_info_init": (ctypes.c_int, [POINTER(ModelInfo), c_uint32]),
    "kx_model_get_info": (ctypes.c_int, [_P, POINTER(ModelInfo)]),
    "kx_tokenize": (ctypes.c_int, [_P, c_char_p, c_uint64, c_uint32, POINTER(c_int32),
                                   c_uint64, POINTER(c_uint64)]),
    "kx_detokenize": (ctypes.c_int, [_P, POINTER(c_int32), c_uint64, c_uint32,
                                     ctypes.c_char_p, c_uint64, POINTER(c_uint64)]),
    "kx_model_is_end_of_generation": (ctypes.c_int, [_P, c_int32, POINTER(c_int32)]),
    "kx_model_apply_chat_template": (ctypes.c_int, [_P, POINTER(ChatMessage), c_uint64,
                                                    c_uint32, ctypes.c_char_p, c_uint64,
                                                    POINTER(c_uint64)]),
    "kx_session_params_init": (ctypes.c_int, [POINTER(SessionParams), c_uint32]),
    "kx_session_create": (ctypes.c_int, [_P, POINTER(SessionParams), POINTER(_P)]),
    "kx_session_free": (None, [_P]),
    "kx_session_set_progress_callback": (ctypes.c_int, [_P, PROGRESS_CALLBACK, c_void_p]),
    "kx_session_eval": (ctypes.c_int, [_P, POINTER(c_int32), c_uint64, c_uint32]),
    "kx_session_get_logits": (ctypes.c_int, [_P, c_int32, POINTER(POINTER(c_float)),
                                             POINTER(c_int32)]),
    "kx_session_get_n_past": (ctypes.c_int, [_P, POINTER(c_int32)]),
    "kx_session_get_n_ctx": (ctypes.c_int, [_P, POINTER(c_int32)]),
    "kx_session_get_tokens": (ctypes.c_int, [_P, POINTER(c_int32), c_uint64, POINTER(c_uint64)]),
    "kx_session_truncate": (ctypes.c_int, [_P, c_int32]),
    "kx_session_reset": (ctypes.c_int, [_P]),
    "kx_sampler_params_init": (ctypes.c_int, [POINTER(SamplerParams), c_uint32]),
    "kx_sampler_create": (ctypes.c_int, [POINTER(SamplerParams), POINTER(_P)]),
    "kx_sampler_free": (None, [_P]),
    "kx_sampler_reset": (ctypes.c_int, [_P, c_uint64]),
    "kx_sampler_sample_logits": (ctypes.c_int, [_P, POINTER(c_float), c_int32,
                                                POINTER(c_int32), c_uint64, POINTER(c_int32)]),
    "kx_sampler_sample": (ctypes.c_int, [_P, _P, POINTER(c_int32)]),
    "kx_generate_params_init": (ctypes.c_int, [POINTER(GenerateParams), c_uint32]),
    "kx_generate_result_init": (ctypes.c_int, [POINTER(GenerateResult), c_uint32]),
    "kx_session_generate": (ctypes.c_int, [_P, _P, c_char_p, POINTER(GenerateParams),
                                           POINTER(GenerateResult)]),
    "kx_chat_result_init": (ctypes.c_int, [POINTER(ChatResult), c_uint32]),
    "kx_session_chat": (ctypes.c_int, [_P, _P, POINTER(ChatMessage), c_uint64, c_uint32,
                                       POINTER(GenerateParams), POINTER(ChatResult)]),
    "kx_sampler_set_logit_bias": (ctypes.c_int, [_P, POINTER(c_int32), POINTER(c_float),
                                                 c_uint64]),
    "kx_stats_init": (ctypes.c_int, [POINTER(Stats), c_uint32]),
    "kx_session_get_stats": (ctypes.c_int, [_P, POINTER(Stats)]),
    "kx_session_reset_stats": (ctypes.c_int, [_P]),
}


def _candidates() -> List[str]:
    found: List[str] = []
    env = os.environ.get("KAIROX_LIBRARY")
    if env:
        found.append(env)
    here = Path(__file__).resolve().parent / "lib"
    found.extend(str(p) for p in sorted(here.glob("libkairox.so*")))
    name = ctypes.util.find_library("kairox")
    if name:
        found.append(name)
    found.extend(["libkairox.so", "libkairox.so.0"])
    return found


def load_library() -> ctypes.CDLL:
    """Loads libkairox.so from $KAIROX_LIBRARY, the package, or the system search path."""
    errors = []
    env = os.environ.get("KAIROX_LIBRARY")
    for candidate in _candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as e:
            errors.append(f"{candidate}: {e}")
            if env and candidate == env:
                raise OSError(f"KAIROX_LIBRARY={env} cannot be loaded: {e}") from e
            continue
        for fn, (restype, argtypes) in _SIGNATURES.items():
            f = getattr(lib, fn)
            f.restype = restype
            f.argtypes = argtypes
        return lib
    raise OSError("libkairox.so not found; set KAIROX_LIBRARY to its path (e.g. "
                  "build/lib/libkairox.so) or install kairox. Tried: " + "; ".join(errors))


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = load_library()
    return _lib
