#!/usr/bin/env python3
"""kairox against llama.cpp on the same GGUF, in one run, alternating rounds.

llama.cpp is the peer: the PyPI package llama-cpp-python (pinned below), installed by pip into a
private venv outside the source tree (pip builds llama.cpp from the package's sdist, natively for
this CPU: the peer at its best). It is timed through the package's low-level ctypes API only:
one llama_decode of n tokens for pp, one llama_decode per token for tg, nothing sampled.
kairox is timed by build/bin/kairox-bench (-r 1 per round, -o json).

  benchmarks/peer/peer_bench.py -m MODEL [-t 1,2] [-p 512] [-n 128] [-d 0,1024,4096] [-r 3]
                                [--ppl-text FILE] [--ppl-ctx 512] [--ppl-chunks 4]

A round runs every (depth, threads) group once through both engines; the order flips every
round (even rounds kairox first). Prints per-round ratios (kairox / llama.cpp) and medians,
the CPU, its ISA flags and the load average, as a markdown table; writes the same as JSON.
Perplexity: both engines score the same token ids (llama.cpp's tokenization of the text) in
chunks of --ppl-ctx tokens from an empty cache, BOS first where the model adds one; see
benchmarks/peer/README.md for the positions each convention scores.

A benchmark, not a test: nothing here asserts on speed.
"""
import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PEER_PACKAGE = "llama-cpp-python"
PEER_VERSION = "0.3.36"  # what pip offered when this was written; the measurements too
CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kairox")
DEFAULT_VENV = os.path.join(CACHE_DIR, "peer-venv")
# --peer-isa: what pip builds llama.cpp for, and which kernels kairox runs (KAIROX_ISA).
# native: the package's defaults (GGML_NATIVE, -march=native: AVX-512 where the CPU has it).
# avx2: the x86-64-v3 level of an AVX2-only CPU such as AMD Zen 1 (AVX, AVX2, FMA, F16C, BMI2,
# SSE4.2), everything above it off, so llama.cpp runs the kernels it would run there; ggml's
# option names as of llama-cpp-python 0.3.36 (ggml/CMakeLists.txt).
PEER_ISAS = {
    "native": {"venv": DEFAULT_VENV, "cmake_args": None, "kairox_isa": None},
    "avx2": {"venv": os.path.join(CACHE_DIR, "peer-venv-avx2"), "kairox_isa": "avx2",
             "cmake_args": " ".join(
                 ["-DGGML_NATIVE=OFF"] +
                 [f"-DGGML_{o}=ON" for o in ("SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2")] +
                 [f"-DGGML_{o}=OFF" for o in ("AVX_VNNI", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
                                              "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16",
                                              "CPU_ALL_VARIANTS")])},
}
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
TG_WARMUP_TOKENS = 4  # kairox-bench's kTgWarmupTokens
TOKEN_SEED = 0xBE7C4


def log(msg):
    print(f"peer_bench: {msg}", file=sys.stderr, flush=True)


def int_list(s):
    return [int(x) for x in s.split(",") if x != ""]


def parse_args():
    ap = argparse.ArgumentParser(
        description="kairox-bench against llama.cpp (llama-cpp-python, low-level API), "
                    "alternating rounds in one run.")
    ap.add_argument("-m", "--model", required=True, help="GGUF model")
    ap.add_argument("-t", "--threads", type=int_list, default=None,
                    help="comma list (default: 1 and all cores)")
    ap.add_argument("-p", "--n-prompt", type=int, default=512, help="pp tokens (0: no pp)")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="tg tokens (0: no tg)")
    ap.add_argument("-d", "--n-depth", type=int_list, default=[0, 1024, 4096],
                    help="KV depths for tg, comma list (pp runs at depth 0 only)")
    ap.add_argument("--depth-threads", type=int_list, default=None,
                    help="thread counts for depth > 0 (default: as -t)")
    ap.add_argument("-r", "--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"),
                    help="kairox's programs (default: build/bin)")
    ap.add_argument("--ppl-text", default=os.path.join(
        REPO, "..", "shared", "data", "text", "austen", "persuasion.txt"),
        help="held-out text for perplexity")
    ap.add_argument("--ppl-ctx", type=int, default=512, help="perplexity chunk (n_ctx)")
    ap.add_argument("--ppl-chunks", type=int, default=4, help="perplexity chunks (0: skip)")
    ap.add_argument("--ppl-threads", type=int, default=None, help="default: all cores")
    ap.add_argument("--peer-fa", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp flash attention (its default: auto)")
    ap.add_argument("--peer-threadpool", choices=["persistent", "auto"], default="persistent",
                    help="llama.cpp threads: a persistent ggml threadpool attached to the context "
                         "(llama-bench's way) or llama.cpp's own per-graph one")
    ap.add_argument("--peer-omp-wait", choices=["passive", "default"], default="passive",
                    help="OMP_WAIT_POLICY for llama.cpp (built with OpenMP): passive threads sleep "
                         "at barriers; llama.cpp's default spins, which collapses on a shared, "
                         "oversubscribed machine (measured 6 vs 42 t/s at load 11 on 2 cores)")
    ap.add_argument("--peer-isa", choices=sorted(PEER_ISAS), default="native",
                    help="native: llama.cpp built for this CPU, kairox with its own dispatch; "
                         "avx2: llama.cpp built for AVX2/FMA/F16C with AVX-512 and VNNI off (its "
                         "own venv), kairox with KAIROX_ISA=avx2 — an AVX2-only CPU's pair on an "
                         "AVX-512 machine")
    ap.add_argument("--venv", default=None,
                    help=f"peer venv (default {DEFAULT_VENV}, "
                         f"{PEER_ISAS['avx2']['venv']} with --peer-isa avx2)")
    ap.add_argument("--json", default=None, help="JSON output (default: $TMPDIR/kairox-peer/)")
    ap.add_argument("--md", default=None, help="markdown output (default: beside the JSON)")
    ap.add_argument("--setup-only", action="store_true", help="build the venv and stop")
    return ap.parse_args()


# --- the private venv ----------------------------------------------------------------------

def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def venv_cmake_args(venv):
    """The CMAKE_ARGS the venv's llama.cpp was built with, from its stamp; None: defaults."""
    try:
        with open(os.path.join(venv, "kairox-peer.json")) as f:
            return json.load(f).get("cmake_args_env")
    except (OSError, ValueError):
        return None


ANY_BUILD = object()


def installed_peer_version(venv, cmake_args=ANY_BUILD):
    """The peer's version in venv; None where absent or, unless cmake_args is ANY_BUILD,
    built with other CMAKE_ARGS (None: the package's native defaults) than asked for."""
    py = venv_python(venv)
    if not os.path.exists(py):
        return None
    if cmake_args is not ANY_BUILD and venv_cmake_args(venv) != cmake_args:
        return None  # built for another ISA: rebuild
    r = subprocess.run([py, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_venv(venv, cmake_args=None):
    """Creates the venv and pip-installs the pinned peer once; later runs reuse it.
    cmake_args: CMAKE_ARGS for llama.cpp's build (None: the package's native defaults)."""
    if installed_peer_version(venv, cmake_args) == PEER_VERSION:
        return
    if not os.path.exists(venv_python(venv)):
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    jobs = str(os.cpu_count() or 1)
    log(f"pip install {PEER_PACKAGE}=={PEER_VERSION} into {venv}: builds llama.cpp from the sdist "
        f"({cmake_args or 'GGML_NATIVE'}, {jobs} jobs, nice); several minutes on 2 cores")
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=jobs)
    env.pop("CMAKE_ARGS", None)  # None: the package's defaults, a native CPU build
    if cmake_args is not None:
        env["CMAKE_ARGS"] = cmake_args
    t0 = time.time()
    # --force-reinstall --no-deps: a venv whose llama.cpp was built for another ISA is rebuilt.
    subprocess.run(["nice", venv_python(venv), "-m", "pip", "install", "--no-cache-dir"] +
                   (["--force-reinstall", "--no-deps"] if installed_peer_version(venv) else []) +
                   [f"{PEER_PACKAGE}=={PEER_VERSION}"], check=True, env=env)
    with open(os.path.join(venv, "kairox-peer.json"), "w") as f:
        json.dump({"package": PEER_PACKAGE, "version": PEER_VERSION,
                   "built": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "build_seconds": round(time.time() - t0), "python": platform.python_version(),
                   "cmake_args": cmake_args or "(package defaults: GGML_NATIVE=ON)",
                   "cmake_args_env": cmake_args}, f, indent=1)
    if installed_peer_version(venv, cmake_args) != PEER_VERSION:
        sys.exit(f"peer_bench: {PEER_PACKAGE}=={PEER_VERSION} did not install into {venv}")


# --- the machine ---------------------------------------------------------------------------

def cpu_info():
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return {"model": model, "cores": os.cpu_count(),
            "isa": [f for f in ISA_FLAGS if f in flags]}


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def proc_read_bytes():
    """Bytes this process has caused to be read from storage (/proc/self/io read_bytes:
    page-cache misses and O_DIRECT reads, not page-cache hits); None where unreadable."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# --- llama.cpp through llama_cpp's ctypes API -----------------------------------------------

class Peer:
    """One model, one context per (threads, n_ctx); decode through llama_decode only."""

    def __init__(self, model_path, fa, threadpool="persistent", mmap_only=False):
        """mmap_only: weights stay in the file's mapping (load mode MMAP, no extra buffer
        types). llama.cpp's default repacks Q4_0 and other types into an interleaved copy in
        anonymous memory on CPUs with AVX2 (its CPU_REPACK buffer), so the model is then held
        in RAM whatever the mapping: under a memory limit below the model it is OOM-killed."""
        import ctypes
        import llama_cpp as L
        self.L, self.ct = L, ctypes
        # Quiet llama.cpp's logging (kept referenced: ctypes must not free the callback).
        self._log_cb = L.llama_log_callback(lambda level, text, data: None)
        L.llama_log_set(self._log_cb, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        if mmap_only:
            if not hasattr(mp, "use_extra_bufts"):
                raise RuntimeError("this llama_cpp has no use_extra_bufts: cannot keep the "
                                   "weights mapped")
            mp.use_extra_bufts = False
            if hasattr(mp, "load_mode"):
                mp.load_mode = L.LLAMA_LOAD_MODE_MMAP
        self.model = L.llama_model_load_from_file(model_path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.fa = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                   "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[fa]
        self.ctx, self.ctx_key, self.batch, self.batch_cap = None, None, None, 0
        self.threadpool = "auto"
        self._tp_lib = self._load_threadpool_api() if threadpool == "persistent" else None
        self.rng = random.Random(TOKEN_SEED)
        buf = ctypes.create_string_buffer(64 * 1024)
        L.llama_model_desc(self.model, buf, len(buf))
        self.desc = buf.value.decode(errors="replace")
        self.system_info = L.llama_print_system_info().decode(errors="replace").strip()

    def _load_threadpool_api(self):
        """ggml's persistent threadpool (what llama-bench attaches: poll 50); llama_cpp does not
        bind it, so look the C symbols up in the package's own libraries. None: llama.cpp's
        automatic per-graph threadpool."""
        ct = self.ct
        try:
            import llama_cpp.llama_cpp as bindings  # the module that loaded libllama
            libdir = str(bindings._base_path)
            cpu = ct.CDLL(os.path.join(libdir, "libggml-cpu.so"))
            base = ct.CDLL(os.path.join(libdir, "libggml-base.so"))
            llama = bindings._lib
            base.ggml_threadpool_params_init.argtypes = [ct.c_void_p, ct.c_int]
            base.ggml_threadpool_params_init.restype = None
            cpu.ggml_threadpool_new.argtypes = [ct.c_void_p]
            cpu.ggml_threadpool_new.restype = ct.c_void_p
            cpu.ggml_threadpool_free.argtypes = [ct.c_void_p]
            cpu.ggml_threadpool_free.restype = None
            llama.llama_attach_threadpool.argtypes = [ct.c_void_p, ct.c_void_p, ct.c_void_p]
            llama.llama_attach_threadpool.restype = None
            return base, cpu, llama
        except (ImportError, OSError, AttributeError) as e:
            log(f"no persistent threadpool ({e}); llama.cpp makes one per graph")
            return None

    def context(self, n_threads, n_ctx, n_batch):
        L = self.L
        key = (n_threads, n_ctx, n_batch)
        if self.ctx_key == key:
            return
        self.close_context()
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, n_batch
        cp.n_threads = cp.n_threads_batch = n_threads
        cp.flash_attn_type = self.fa
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {n_ctx}")
        self.ctx_key = key
        if self._tp_lib is not None:
            base, cpu, llama = self._tp_lib
            params = self.ct.create_string_buffer(4096)  # > sizeof(ggml_threadpool_params)
            base.ggml_threadpool_params_init(params, n_threads)
            self._tp = cpu.ggml_threadpool_new(params)
            if self._tp:
                llama.llama_attach_threadpool(self.ctx, self._tp, self._tp)
                self.threadpool = "persistent (ggml_threadpool_new, default poll)"
        if self.batch_cap < n_batch:
            if self.batch is not None:
                L.llama_batch_free(self.batch)
            self.batch, self.batch_cap = L.llama_batch_init(n_batch, 0, 1), n_batch

    def close_context(self):
        if self.ctx:
            self.L.llama_free(self.ctx)
            self.ctx, self.ctx_key = None, None
            if self._tp_lib is not None and getattr(self, "_tp", None):
                self._tp_lib[1].ggml_threadpool_free(self._tp)
                self._tp = None

    def clear(self):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def decode(self, tokens, pos0, logits_from=None):
        """One llama_decode of `tokens` at positions pos0...; logits for positions
        >= logits_from (default: the last token only)."""
        b, n = self.batch, len(tokens)
        if logits_from is None:
            logits_from = n - 1
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if i >= logits_from else 0
        b.n_tokens = n
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        self.L.llama_synchronize(self.ctx)

    def random_tokens(self, n):
        return [self.rng.randrange(self.n_vocab) for _ in range(n)]

    def fill(self, depth):
        """Empties the cache and prefills `depth` random tokens (untimed)."""
        self.clear()
        n_batch = self.ctx_key[2]
        for start in range(0, depth, n_batch):
            self.decode(self.random_tokens(min(n_batch, depth - start)), start)

    def pp(self, n_prompt, warm):
        prompt = self.random_tokens(n_prompt)
        if warm:
            self.fill(0)
            self.decode(prompt, 0)
        self.fill(0)
        t0 = time.perf_counter_ns()
        self.decode(prompt, 0)
        return n_prompt * 1e9 / (time.perf_counter_ns() - t0)

    def argmax(self):
        """The last decoded token's most likely successor (greedy decoding)."""
        import numpy as np
        ptr = self.L.llama_get_logits_ith(self.ctx, -1)
        return int(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).argmax())

    def tg(self, n_gen, depth, warm, greedy=False, on_token=None):
        """t/s of n_gen single-token decodes: random tokens, or (greedy) each token the argmax
        of the previous one's logits from one random token, as kairox-bench --tg-tokens.
        Sets self.tg_read_bytes: what the timed decodes read from storage (/proc/self/io,
        None where unreadable). on_token(i), if given, is called after each timed decode."""
        if warm:
            self.fill(depth)
            for i, tok in enumerate(self.random_tokens(TG_WARMUP_TOKENS)):
                self.decode([tok], depth + i)
        self.fill(depth)
        ids = self.random_tokens(n_gen)
        if greedy:
            import numpy  # noqa: F401  (argmax's import: loaded here, not inside the timing)
        io0 = proc_read_bytes()
        t0 = time.perf_counter_ns()
        tok = ids[0]
        for i in range(n_gen):
            self.decode([tok if greedy else ids[i]], depth + i)
            if greedy:
                tok = self.argmax()
            if on_token is not None:
                on_token(i)
        ns = time.perf_counter_ns() - t0
        io1 = proc_read_bytes()
        self.tg_read_bytes = None if io0 is None or io1 is None else io1 - io0
        return n_gen * 1e9 / ns

    def tokenize(self, text, add_special=True):
        """llama-perplexity's tokenization: add_special (BOS if the model adds one), no
        special-token parsing."""
        raw = text.encode()
        n_max = len(raw) + 16
        buf = (self.L.llama_token * n_max)()
        n = self.L.llama_tokenize(self.vocab, raw, len(raw), buf, n_max, add_special, False)
        if n < 0:
            raise RuntimeError("llama_tokenize: buffer too small")
        return list(buf[:n])

    def perplexity(self, tokens, n_ctx, n_chunks, n_threads):
        """Both conventions from one pass per chunk: llama.cpp's (logits at [c/2, c-1) scoring
        tokens [c/2+1, c): c/2-1 per chunk) and kairox-perplexity's (tokens [c/2, c): c/2)."""
        import numpy as np
        self.context(n_threads, n_ctx, n_ctx)
        add_bos = bool(self.L.llama_vocab_get_add_bos(self.vocab))
        bos = self.L.llama_vocab_bos(self.vocab)
        first = n_ctx // 2
        sums = {"llama.cpp": [0.0, 0.0, 0], "kairox": [0.0, 0.0, 0]}
        t0 = time.time()
        for c in range(n_chunks):
            chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
            targets = np.array(chunk[first:], dtype=np.int64)  # before BOS replaces slot 0
            if add_bos:
                chunk[0] = bos
            self.clear()
            self.decode(chunk, 0, logits_from=first - 1)
            n_out = n_ctx - first + 1
            ptr = self.L.llama_get_logits(self.ctx)
            rows = np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab)).astype(np.float64)
            rows = rows[:-1]  # row j: position first-1+j, predicts targets[j]
            m = rows.max(axis=1)
            lse = m + np.log(np.exp(rows - m[:, None]).sum(axis=1))
            nll = lse - rows[np.arange(len(targets)), targets]
            for name, part in (("kairox", nll), ("llama.cpp", nll[1:])):
                s = sums[name]
                s[0] += float(part.sum())
                s[1] += float((part * part).sum())
                s[2] += len(part)
        out = {}
        for name, (s1, s2, count) in sums.items():
            mean = s1 / count
            var = max(0.0, s2 / count - mean * mean)
            ppl = float(np.exp(mean))
            out[name] = {"ppl": ppl, "ppl_err": ppl * (var / (count - 1)) ** 0.5,
                         "mean_nll": mean, "scored_tokens": count}
        out["seconds"] = round(time.time() - t0, 1)
        return out


# --- kairox through its programs ------------------------------------------------------------

KAIROX_ISA = None  # --peer-isa's kernels for kairox (KAIROX_ISA); None: its own dispatch


def kairox_env():
    env = dict(os.environ, KAIROX_SIDECAR_AUTO=os.environ.get("KAIROX_SIDECAR_AUTO", "0"))
    if KAIROX_ISA:
        env["KAIROX_ISA"] = KAIROX_ISA
    env.pop("OMP_WAIT_POLICY", None)  # the peer's setting; kairox gets the caller's own
    if os.environ.get("KX_PEER_USER_OMP_WAIT_POLICY"):
        env["OMP_WAIT_POLICY"] = os.environ["KX_PEER_USER_OMP_WAIT_POLICY"]
    env.pop("KX_PEER_USER_OMP_WAIT_POLICY", None)
    env.pop("KX_PEER_IN_VENV", None)
    return env


def run_kairox_bench(bin_dir, model, threads, n_prompt, n_gen, depth):
    cmd = [os.path.join(bin_dir, "kairox-bench"), "-m", model, "-t", str(threads),
           "-p", str(n_prompt), "-n", str(n_gen), "-d", str(depth), "-r", "1", "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=kairox_env())
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return cmd, json.loads(r.stdout)


def run_kairox_ppl(bin_dir, model, tokens_json, n_ctx, n_chunks, threads):
    cmd = [os.path.join(bin_dir, "kairox-perplexity"), "-m", model, "--tokens-json", tokens_json,
           "-c", str(n_ctx), "--chunks", str(n_chunks), "-t", str(threads)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=kairox_env())
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    m = re.search(r"PPL = ([0-9.]+) \+/- ([0-9.]+)", r.stdout)
    s = re.search(r"scored tokens: (\d+)", r.stdout)
    n = re.search(r"mean NLL = ([0-9.]+)", r.stdout)
    return {"ppl": float(m.group(1)), "ppl_err": float(m.group(2)),
            "mean_nll": float(n.group(1)) if n else None,
            "scored_tokens": int(s.group(1)) if s else None,
            "seconds": round(time.time() - t0, 1), "command": " ".join(cmd)}


# --- the run --------------------------------------------------------------------------------

def test_name(kind, n, depth):
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def groups_of(args):
    """(depth, threads, tests) in run order."""
    out = []
    for depth in args.n_depth:
        for t in (args.threads if depth == 0 else args.depth_threads):
            tests = []
            if depth == 0 and args.n_prompt > 0:
                tests.append(("pp", args.n_prompt))
            if args.n_gen > 0:
                tests.append(("tg", args.n_gen))
            if tests:
                out.append((depth, t, tests))
    return out


def run_rounds(args, peer):
    results = {}  # (test, threads) -> {"kairox": [...], "llama.cpp": [...], "load": [...]}
    kx_extra = {}  # (test, threads) -> kairox-bench's ceiling and profile (last round)
    kx_commands = []
    groups = groups_of(args)
    for rnd in range(args.rounds):
        kairox_first = rnd % 2 == 0
        for depth, t, tests in groups:
            load = loadavg()
            p = dict(tests).get("pp", 0)
            n = dict(tests).get("tg", 0)

            def kairox():
                cmd, rows = run_kairox_bench(args.bin, args.model, t, p, n, depth)
                if rnd == 0:
                    kx_commands.append(" ".join(cmd))
                for row in rows:
                    key = (row["kx_test"], row["n_threads"])
                    results.setdefault(key, {}).setdefault("kairox", []).append(row["avg_ts"])
                    kx_extra[key] = row

            def llama():
                n_ctx = depth + max(p, n + TG_WARMUP_TOKENS)
                peer.context(t, n_ctx, max(p, min(512, max(depth, 1))))
                # Warmed up every round, as each kairox-bench run warms up its own.
                for kind, count in tests:
                    ts = peer.pp(count, True) if kind == "pp" else peer.tg(count, depth, True)
                    key = (test_name(kind, count, depth), t)
                    results.setdefault(key, {}).setdefault("llama.cpp", []).append(ts)

            for f in ((kairox, llama) if kairox_first else (llama, kairox)):
                f()
            for kind, count in tests:
                results[(test_name(kind, count, depth), t)].setdefault("load", []).append(load)
            log(f"round {rnd + 1}/{args.rounds}, d{depth} t{t}: " + ", ".join(
                f"{test_name(k, c, depth)} kairox {results[(test_name(k, c, depth), t)]['kairox'][-1]:.2f}"
                f" / llama.cpp {results[(test_name(k, c, depth), t)]['llama.cpp'][-1]:.2f} t/s"
                for k, c in tests) + f" (load {load[0]:.2f})")
    return results, kx_extra, kx_commands


def summarize(results, kx_extra):
    rows = []
    for (test, t), r in results.items():
        kx, ll = r.get("kairox", []), r.get("llama.cpp", [])
        ratios = [a / b for a, b in zip(kx, ll) if b > 0]
        row = {"test": test, "threads": t, "kairox_ts": kx, "llama_cpp_ts": ll,
               "ratio_per_round": ratios,
               "kairox_median": statistics.median(kx) if kx else None,
               "llama_cpp_median": statistics.median(ll) if ll else None,
               "ratio_median": statistics.median(ratios) if ratios else None,
               "load_1min": [l[0] for l in r.get("load", [])]}
        e = kx_extra.get((test, t))
        if e is not None and test.startswith("tg") and e.get("kx_bw_dram_gbps"):
            bytes_tok = e["kx_weight_bytes_per_token"] + e["kx_kv_bytes_per_token"]
            bw = e["kx_bw_dram_gbps"] * 1e9
            row["ceiling"] = {
                "read_bw_gbps": e["kx_bw_dram_gbps"], "mb_per_token": bytes_tok / 1e6,
                "ceiling_ts": bw / bytes_tok,
                "kairox_share": row["kairox_median"] * bytes_tok / bw,
                "llama_cpp_share": row["llama_cpp_median"] * bytes_tok / bw}
            row["kairox_profile"] = e.get("kx_profile", [])[:8]
        if e is not None:
            row["kairox_isa"] = e.get("kx_isa")
        rows.append(row)
    return rows


def markdown(meta, rows, ppl):
    out = [f"# kairox vs llama.cpp: {os.path.basename(meta['model'])}", "",
           f"- CPU: {meta['cpu']['model']}, {meta['cpu']['cores']} cores; ISA flags: "
           f"{' '.join(meta['cpu']['isa'])}",
           f"- kairox: {meta.get('kairox_isa', '?')} kernels "
           f"(KAIROX_ISA={meta['kairox_isa_env']}), "
           f"KAIROX_SIDECAR_AUTO={meta['sidecar_auto']}; llama.cpp: {PEER_PACKAGE} {PEER_VERSION} "
           f"({meta['peer_desc']}), built --peer-isa {meta['peer_isa']} "
           f"(CMAKE_ARGS {meta['peer_cmake_args']}), "
           f"flash attention {meta['peer_fa']}, threadpool {meta['peer_threadpool']}, "
           f"OMP_WAIT_POLICY={meta['peer_omp_wait_policy']}",
           f"- llama.cpp build: {meta['peer_system_info']}",
           f"- {meta['rounds']} alternating rounds; load average at start {meta['load_start']}, "
           f"at end {meta['load_end']}; {meta['date']}", "",
           "| test | threads | kairox t/s (median) | llama.cpp t/s (median) | kairox / llama.cpp "
           "(median) | per-round ratios | load (1 min) per round |",
           "|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        out.append(
            f"| {r['test']} | {r['threads']} | {r['kairox_median']:.2f} | "
            f"{r['llama_cpp_median']:.2f} | **{r['ratio_median']:.2f}×** | "
            f"{', '.join(f'{x:.2f}' for x in r['ratio_per_round'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['load_1min'])} |")
    ceil = [r for r in rows if "ceiling" in r]
    if ceil:
        out += ["", "Read-bandwidth ceiling (kairox-bench's probe at the tg working set, "
                "median t/s × bytes per token ÷ bandwidth):", "",
                "| test | threads | read GB/s | MB/token | ceiling t/s | kairox share | "
                "llama.cpp share |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in ceil:
            c = r["ceiling"]
            out.append(f"| {r['test']} | {r['threads']} | {c['read_bw_gbps']:.1f} | "
                       f"{c['mb_per_token']:.1f} | {c['ceiling_ts']:.1f} | "
                       f"{100 * c['kairox_share']:.0f} % | {100 * c['llama_cpp_share']:.0f} % |")
        for r in ceil:
            if r.get("kairox_profile"):
                out += ["", f"kairox per-op profile, {r['test']}, {r['threads']} threads: " +
                        ", ".join(f"{op['op']} {op['percent']:.1f} %"
                                  for op in r["kairox_profile"][:6])]
    if ppl:
        out += ["", f"Perplexity: {ppl['text']}, {ppl['chunks']} chunks of {ppl['ctx']} tokens "
                f"(llama.cpp's tokenization, {ppl['n_tokens']} tokens in all), "
                f"{ppl['threads']} threads:", "",
                "| engine | convention | scored tokens | PPL |", "|---|---|---:|---:|"]
        for label, v in (("kairox (kairox-perplexity)", ppl["kairox"]),
                         ("llama.cpp", ppl["llama.cpp"]["llama.cpp"]),
                         ("llama.cpp", ppl["llama.cpp"]["kairox"])):
            conv = ("llama.cpp's: tokens [c/2+1, c)" if v is ppl["llama.cpp"]["llama.cpp"]
                    else "kairox's: tokens [c/2, c)")
            out.append(f"| {label} | {conv} | {v['scored_tokens']} | "
                       f"{v['ppl']:.4f} ± {v['ppl_err']:.4f} |")
    out += ["", "kairox commands (round 1): " + "; ".join(f"`{c}`" for c in meta["kairox_commands"])]
    return "\n".join(out) + "\n"


def main():
    global KAIROX_ISA
    args = parse_args()
    isa = PEER_ISAS[args.peer_isa]
    args.venv = args.venv or isa["venv"]
    KAIROX_ISA = isa["kairox_isa"]
    if os.environ.get("KX_PEER_IN_VENV") != "1":
        ensure_venv(args.venv, isa["cmake_args"])
        if args.setup_only:
            log(f"{PEER_PACKAGE} {PEER_VERSION} is in {args.venv}")
            return
        env = dict(os.environ, KX_PEER_IN_VENV="1")
        # libgomp reads OMP_WAIT_POLICY when it loads: set it for the peer's process only.
        env["KX_PEER_USER_OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "")
        if args.peer_omp_wait == "passive":
            env["OMP_WAIT_POLICY"] = "passive"
        os.execve(venv_python(args.venv), [venv_python(args.venv)] + sys.argv, env)

    args.model = os.path.abspath(args.model)
    cores = os.cpu_count() or 1
    if args.threads is None:
        args.threads = sorted({1, cores})
    if args.depth_threads is None:
        args.depth_threads = args.threads
    for prog in ("kairox-bench", "kairox-perplexity"):
        if not os.path.exists(os.path.join(args.bin, prog)):
            sys.exit(f"peer_bench: {args.bin}/{prog} is missing: build it first "
                     "(cmake --build build --target kairox-bench kairox-perplexity)")
    stem = os.path.splitext(os.path.basename(args.model))[0]
    json_path = args.json or os.path.join(tempfile.gettempdir(), "kairox-peer", f"{stem}.json")
    md_path = args.md or os.path.splitext(json_path)[0] + ".md"
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)

    meta = {"model": args.model, "date": datetime.datetime.now().astimezone().isoformat(
        timespec="seconds"), "cpu": cpu_info(), "rounds": args.rounds,
        "load_start": loadavg(), "sidecar_auto": kairox_env()["KAIROX_SIDECAR_AUTO"],
        "peer_package": f"{PEER_PACKAGE}=={PEER_VERSION}", "peer_fa": args.peer_fa,
        "peer_isa": args.peer_isa, "peer_venv": args.venv,
        "peer_cmake_args": isa["cmake_args"] or "(package defaults: GGML_NATIVE=ON)",
        "kairox_isa_env": KAIROX_ISA or os.environ.get("KAIROX_ISA", "(dispatch)"),
        "peer_omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(llama.cpp's default)"),
        "command": " ".join([os.path.relpath(__file__, REPO)] + sys.argv[1:])}
    log(f"{meta['cpu']['model']} ({' '.join(meta['cpu']['isa'])}), load {meta['load_start']}")
    peer = Peer(args.model, args.peer_fa, args.peer_threadpool)
    meta.update(peer_desc=peer.desc, peer_system_info=peer.system_info)

    results, kx_extra, meta["kairox_commands"] = run_rounds(args, peer)
    meta["peer_threadpool"] = peer.threadpool
    rows = summarize(results, kx_extra)
    meta["kairox_isa"] = next((r["kairox_isa"] for r in rows if r.get("kairox_isa")), None)

    ppl = None
    if args.ppl_chunks > 0 and os.path.exists(args.ppl_text):
        threads = args.ppl_threads or cores
        with open(args.ppl_text, encoding="utf-8") as f:
            tokens = peer.tokenize(f.read())
        chunks = min(args.ppl_chunks, len(tokens) // args.ppl_ctx)
        tok_path = os.path.splitext(json_path)[0] + ".ppl-tokens.json"
        with open(tok_path, "w") as f:
            json.dump({"tokens": tokens[:chunks * args.ppl_ctx]}, f)
        log(f"perplexity: {chunks} chunks of {args.ppl_ctx}, {threads} threads")
        ppl = {"text": os.path.relpath(os.path.abspath(args.ppl_text), REPO),
               "ctx": args.ppl_ctx, "chunks": chunks, "threads": threads,
               "n_tokens": len(tokens), "tokens_json": tok_path,
               "llama.cpp": peer.perplexity(tokens, args.ppl_ctx, chunks, threads),
               "kairox": run_kairox_ppl(args.bin, args.model, tok_path, args.ppl_ctx, chunks,
                                        threads)}
    elif args.ppl_chunks > 0:
        log(f"no perplexity: {args.ppl_text} is missing")
    peer.close_context()
    meta["load_end"] = loadavg()

    with open(json_path, "w") as f:
        json.dump({"meta": meta, "results": rows, "perplexity": ppl}, f, indent=1)
    md = markdown(meta, rows, ppl)
    with open(md_path, "w") as f:
        f.write(md)
    print(md)
    log(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
