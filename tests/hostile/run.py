#!/usr/bin/env python3
"""kairox's hostile-input suite: what a careless or hostile user can pass must be refused with a
message (or, where it is valid, accepted) and must never crash, hang or trip a sanitizer.

    tests/hostile/run.py --build build          # release build
    tests/hostile/run.py --build build-asan     # ASan+UBSan build (detected from CMakeCache)
    tests/hostile/run.py --build build -k sidecar -v

Every case runs in its own process. One line per case, then
"hostile inputs: N cases, R refused cleanly, A accepted, 0 crashed, 0 unexpected".
A crash is death by a signal, an exit status >= 128, a sanitizer report (ASan/UBSan exit with
status 86 here) or a hang past --timeout; an unexpected status is 0 where a refusal was
expected, a refusal where success was expected, or a refusal without a message. Exit status:
0 when every case behaved, 1 otherwise.

Categories (see docs/validation.md): model files (truncations, header and metadata
corruptions, a FIFO, a directory, /dev/zero, empty, not GGUF), sidecars (truncated, flipped
bytes, another model's, down_layout and bundle type ids changed), command-line arguments of
every program, the C ABI's argument checks (tests/capi/capi_args_test), Python misuse, an I/O
error injected during decode (the sidecar truncated under a RAM budget) and files changed under
a running session. Needs only the build: models are written by kx_write_tiny_model and their
sidecars by kairox-prepare. Standard library only.
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SANITIZER_EXIT = 86  # ASAN_OPTIONS/UBSAN_OPTIONS exitcode: a report, counted as a crash
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|"
                              r"WARNING: ThreadSanitizer|: runtime error: ")
REPO = Path(__file__).resolve().parents[2]
REFUSE = "refuse"   # expect an exit status in 1..127 with a message on stderr
ACCEPT = "accept"   # expect exit status 0


_TENSOR_SIZES = {0: 4, 1: 2, 24: 1, 25: 2, 26: 4, 27: 8, 28: 8}  # F32 F16 I8 I16 I32 I64 F64
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_layout(data):
    """(kvs, tensors) of a well-formed GGUF v3 file: kvs as (key, type, value offset, value
    end), tensors as (name, info offset, absolute data offset, bytes (0 for block types))."""
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)

    def string(pos):
        (n,) = struct.unpack_from("<Q", data, pos)
        return data[pos + 8:pos + 8 + n].decode(), pos + 8 + n

    def skip(t, pos):
        if t == 8:
            return string(pos)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(n):
                pos = skip(et, pos)
            return pos
        return pos + _GGUF_SIZES[t]

    kvs, tensors, alignment = [], [], 32
    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", data, pos + 4)
        end = skip(t, pos + 4)
        kvs.append((key, t, pos + 4, end))
        pos = end
    infos = []
    for _ in range(n_tensors):
        at = pos
        name, pos = string(pos)
        (nd,) = struct.unpack_from("<I", data, pos)
        dims = struct.unpack_from(f"<{nd}Q", data, pos + 4)
        (ttype, off) = struct.unpack_from("<IQ", data, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        n = 1
        for d in dims:
            n *= d
        infos.append((name, at, off, n * _TENSOR_SIZES.get(ttype, 0)))
    base = (pos + alignment - 1) // alignment * alignment
    tensors = [(name, at, base + off, nbytes) for name, at, off, nbytes in infos]
    return kvs, tensors


_LAYER_TENSORS = ["perm", "freq", "thresholds", "bundles", "pred.w1", "pred.b1", "pred.w2",
                  "pred.b2"]  # sidecar_verify.h kLayerHashedTensors


def reseal(data):
    """A sidecar with its digests (blk.N.kairox.sha256, then kairox.sha256.meta) recomputed as
    kairox-prepare computes them (sidecar_verify.h): a change that a digest would catch reaches
    the checks behind it."""
    data = bytearray(data)
    kvs, tensors = gguf_layout(data)
    by_name = {t[0]: t for t in tensors}

    def patch(at, hexdigest):
        assert struct.unpack_from("<Q", data, at)[0] == 64
        data[at + 8:at + 72] = hexdigest.encode()

    for key, _, at, _ in kvs:
        m = re.fullmatch(r"blk\.(\d+)\.kairox\.sha256", key)
        if m:
            h = hashlib.sha256()
            for what in _LAYER_TENSORS:
                t = by_name.get(f"blk.{m.group(1)}.kairox.{what}")
                if t:
                    h.update(struct.pack("<Q", len(what)) + what.encode() + struct.pack("<Q", t[3]))
                    h.update(data[t[2]:t[2] + t[3]])
            patch(at, h.hexdigest())
    h = hashlib.sha256()
    meta_at = None
    for key, t, at, end in kvs:
        if key == "kairox.sha256.meta":
            meta_at = at
            continue
        h.update(struct.pack("<Q", len(key.encode())) + key.encode() + struct.pack("<I", t) +
                 struct.pack("<Q", end - at) + data[at:end])
    patch(meta_at, h.hexdigest())
    return bytes(data)


class Case:
    def __init__(self, category, name, argv, expect=REFUSE, needle=None, timeout=None, env=None,
                 refusal_inside=False, weight=1):
        self.category, self.name, self.argv = category, name, argv
        self.expect, self.needle = expect, needle  # needle: a string the message must hold
        self.timeout, self.env = timeout, env
        # A program that checks a refusal itself (the Python cases) and exits 0 when it came.
        self.refusal_inside = refusal_inside
        self.weight = weight  # cases it stands for (a program that checks many itself)


class Suite:
    def __init__(self, args):
        self.build = Path(args.build).resolve()
        self.bin = self.build / "bin"
        self.tests = self.build / "tests"
        self.lib = self.build / "lib" / "libkairox.so"
        self.work = Path(tempfile.mkdtemp(prefix="kx_hostile_"))
        self.timeout = args.timeout
        self.cases = []
        cache = (self.build / "CMakeCache.txt")
        text = cache.read_text(errors="replace") if cache.exists() else ""
        m = re.search(r"^KX_SANITIZE:STRING=(.*)$", text, re.M)
        self.sanitize = (m.group(1) if m else "").strip()
        self.env = dict(os.environ)
        # Programs never read the user's cache or models by accident.
        self.env["KAIROX_CACHE_DIR"] = str(self.work / "cache")
        self.env.pop("KAIROX_MODEL", None)
        self.env["KAIROX_CHAT_HISTORY"] = "off"
        san = f"exitcode={SANITIZER_EXIT}:abort_on_error=0:handle_segv=1:handle_sigbus=1"
        self.env["ASAN_OPTIONS"] = san + ":allocator_may_return_null=1"  # leaks are reports
        self.env["UBSAN_OPTIONS"] = (f"exitcode={SANITIZER_EXIT}:halt_on_error=1:"
                                     "print_stacktrace=1")
        self.py_env = dict(self.env)
        self.py_env["KAIROX_LIBRARY"] = str(self.lib)
        self.py_env["PYTHONPATH"] = str(REPO / "capi" / "python")
        if "thread" in self.sanitize:
            self.env["TSAN_OPTIONS"] = f"exitcode={SANITIZER_EXIT}:halt_on_error=1"
            self.py_env["TSAN_OPTIONS"] = self.env["TSAN_OPTIONS"]
            tsan = subprocess.run(["gcc", "-print-file-name=libtsan.so"], capture_output=True,
                                  text=True).stdout.strip()
            if tsan and os.path.isabs(tsan):
                self.py_env["LD_PRELOAD"] = tsan
            self.timeout *= 4
        if "address" in self.sanitize:
            # The interpreter is not instrumented: the runtime must come first, and its own
            # allocations at exit are not kairox's leaks.
            asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                  text=True).stdout.strip()
            if asan and os.path.isabs(asan):
                self.py_env["LD_PRELOAD"] = asan
            self.py_env["ASAN_OPTIONS"] = (self.env["ASAN_OPTIONS"] +
                                           ":detect_leaks=0:verify_asan_link_order=0")
            self.timeout *= 4

    # ---------------------------------------------------------------- fixtures
    def prog(self, name):
        p = self.bin / name
        return str(p) if p.exists() else None

    def setup(self):
        writer = self.tests / "kx_write_tiny_model"
        if not writer.exists():
            sys.exit(f"hostile: {writer} not found (build kx_write_tiny_model)")
        self.tiny = self.work / "tiny.gguf"
        subprocess.run([str(writer), str(self.tiny)], check=True, env=self.env)
        # Same shapes and weights, another file (its n_ctx_train differs): another sha256.
        self.tiny2 = self.work / "tiny-other.gguf"
        subprocess.run([str(writer), str(self.tiny2), "512"], check=True, env=self.env)
        self.model_bytes = self.tiny.read_bytes()
        (self.work / "prompt.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 12)
        self.sidecar = None
        prep = self.prog("kairox-prepare")
        if prep:
            self.sidecar = self.work / "tiny.kairox.gguf"
            r = subprocess.run([prep, "-m", str(self.tiny), "-o", str(self.sidecar),
                                "--calib-file", str(self.work / "prompt.txt"), "--tokens", "64",
                                "-t", "1", "--levels", "0.3,0.5", "--sparsity", "0.5"],
                               capture_output=True, text=True, env=self.env,
                               timeout=self.timeout * 10)
            if r.returncode != 0:
                sys.exit(f"hostile: kairox-prepare on the tiny model failed:\n{r.stderr}")

    def file(self, name, data):
        p = self.work / name
        p.write_bytes(data)
        return str(p)

    # ------------------------------------------------------------------ cases
    def add(self, *a, **k):
        self.cases.append(Case(*a, **k))

    def cli_model(self, path, extra=()):
        return [self.prog("kairox-cli"), "-m", path, "-p", "hi", "-n", "2", "-t", "1",
                *extra]

    def model_cases(self):
        data = self.model_bytes
        n = len(data)
        # Truncations: inside the header, the metadata, the tensor index, and the data.
        offsets = sorted({0, 1, 3, 4, 7, 8, 12, 16, 20, 24, 31, 40, 64, 100, 200, 500, 1000,
                          2000, 4000, n // 8, n // 4, n // 2, (3 * n) // 4, n - 4096, n - 1})
        for off in offsets:
            if 0 <= off < n:
                self.add("model", f"truncated at {off} of {n}",
                         self.cli_model(self.file(f"trunc_{off}.gguf", data[:off])))
        # Header fields: version, tensor count, kv count set to hostile values.
        for field, at, fmt in [("version", 4, "<I"), ("n_tensors", 8, "<Q"), ("n_kv", 16, "<Q")]:
            for val in [0, 2**31, 2**32 - 1, 2**63, 2**64 - 1] if fmt == "<Q" else \
                       [0, 1, 4, 99, 2**32 - 1]:
                b = bytearray(data)
                struct.pack_into(fmt, b, at, val)
                self.add("model", f"header {field} = {val}",
                         self.cli_model(self.file(f"hdr_{field}_{val}.gguf", bytes(b))))
        # Metadata corruption: the first keys' lengths and types, seeded byte flips.
        pos = 24
        for i in range(4):
            (klen,) = struct.unpack_from("<Q", data, pos)
            for val in [0, 2**32, 2**63, klen + 10**6]:
                b = bytearray(data)
                struct.pack_into("<Q", b, pos, val)
                self.add("model", f"key {i} length = {val}",
                         self.cli_model(self.file(f"klen_{i}_{val}.gguf", bytes(b))))
            tpos = pos + 8 + klen
            for t in [13, 255, 2**31]:
                b = bytearray(data)
                struct.pack_into("<I", b, tpos, t)
                self.add("model", f"key {i} type = {t}",
                         self.cli_model(self.file(f"ktype_{i}_{t}.gguf", bytes(b))))
            # Skip to the next key (string and uint values only, which the first keys are).
            (vtype,) = struct.unpack_from("<I", data, tpos)
            vpos = tpos + 4
            if vtype == 8:
                (slen,) = struct.unpack_from("<Q", data, vpos)
                pos = vpos + 8 + slen
            elif vtype in (4, 5, 6):
                pos = vpos + 4
            elif vtype in (10, 11, 12):
                pos = vpos + 8
            else:
                break
        # Special files.
        self.add("model", "empty file", self.cli_model(self.file("empty.gguf", b"")))
        self.add("model", "not GGUF (text)",
                 self.cli_model(self.file("text.gguf", b"hello, I am not a model\n" * 100)))
        self.add("model", "GGUF magic only", self.cli_model(self.file("magic.gguf", b"GGUF")))
        regular = "not a regular file"
        self.add("model", "a directory", self.cli_model(str(self.work)), needle=regular)
        self.add("model", "/dev/zero", self.cli_model("/dev/zero"), needle=regular)
        self.add("model", "/dev/null", self.cli_model("/dev/null"))
        fifo = self.work / "fifo.gguf"
        if not fifo.exists():
            os.mkfifo(fifo)
        self.add("model", "a FIFO", self.cli_model(str(fifo)), needle=regular)
        self.add("model", "a missing file", self.cli_model(str(self.work / "nope.gguf")))
        unreadable = self.file("unreadable.gguf", data)
        os.chmod(unreadable, 0)
        if os.geteuid() != 0:
            self.add("model", "no read permission", self.cli_model(unreadable))
        self.add("model", "valid tiny model (control)", self.cli_model(str(self.tiny)),
                 expect=ACCEPT)

    @staticmethod
    def set_string(data, at, new, tensors):
        """`data` with the string value at `at` replaced by `new`, the tensor data left where
        it was (the header's alignment padding absorbs the difference); None if it cannot."""
        (n,) = struct.unpack_from("<Q", data, at)
        base = min(t[2] for t in tensors)
        head = data[:at] + struct.pack("<Q", len(new)) + new + data[at + 8 + n:base]
        if len(head) > base:
            if any(head[base:]):
                return None  # more than the padding would be cut
            head = head[:base]
        b = head + bytes(base - len(head)) + data[base:]
        if [t[2] for t in gguf_layout(b)[1]] != [t[2] for t in tensors]:
            return None
        return b

    def sidecar_cases(self):
        if self.sidecar is None:
            return
        sc = self.sidecar.read_bytes()
        n = len(sc)

        def run(path, extra=()):
            return self.cli_model(str(self.tiny), ["--sidecar", path, *extra])

        self.add("sidecar", "valid sidecar (control)", run(str(self.sidecar)), expect=ACCEPT)
        self.add("sidecar", "valid sidecar under --ram-budget (control)",
                 run(str(self.sidecar), ["--ram-budget", "50%"]), expect=ACCEPT)
        kvs, tensors = gguf_layout(sc)
        end = max(t[2] + t[3] for t in tensors)  # past it: alignment padding only
        for off in sorted({0, 4, 24, 100, 1000, n // 4, n // 2, end - 100, end - 1}):
            if 0 <= off < n:
                self.add("sidecar", f"truncated at {off} of {n}",
                         run(self.file(f"sc_trunc_{off}.kairox.gguf", sc[:off])))
        kvs, tensors = gguf_layout(sc)
        kv_at = {k: (t, at) for k, t, at, _ in kvs}
        # A byte flipped in every tensor (its first element) and in the metadata: the digests.
        for name, _, at, _ in tensors:
            b = bytearray(sc)
            b[at + 1] ^= 0x5A
            self.add("sidecar", f"{name} byte flipped",
                     run(self.file(f"sc_flip_{name}.kairox.gguf", bytes(b))))
        for key in ["kairox.sparsity", "kairox.group_size", "kairox.model.n_ff",
                    "blk.0.kairox.pred.threshold", "kairox.calibration"]:
            if key in kv_at:
                b = bytearray(sc)
                b[kv_at[key][1] + 1] ^= 0x5A
                self.add("sidecar", f"{key} byte flipped",
                         run(self.file(f"sc_kvflip_{key}.kairox.gguf", bytes(b))))
        # Tensor infos: type, offset and first dimension set to hostile values.
        for name, info, _, _ in tensors[:4]:
            (nlen,) = struct.unpack_from("<Q", sc, info)
            p = info + 8 + nlen
            (nd,) = struct.unpack_from("<I", sc, p)
            for what, at, fmt, vals in [("n_dims", p, "<I", [0, 5, 2**31]),
                                        ("dim0", p + 4, "<Q", [0, 2**40, 2**63]),
                                        ("type", p + 4 + 8 * nd, "<I", [99, 2**31]),
                                        ("offset", p + 8 + 8 * nd, "<Q", [1, 2**40, 2**64 - 64])]:
                for v in vals:
                    b = bytearray(sc)
                    struct.pack_into(fmt, b, at, v)
                    self.add("sidecar", f"{name} {what} = {v}",
                             run(self.file(f"sc_ti_{name}_{what}_{v}.kairox.gguf", bytes(b))))
        # Keys changed to values that parse: down_layout (a same-size wrong reading), the
        # bundle type id 999, an unknown layout name.
        if "kairox.down_layout" in kv_at:
            at = kv_at["kairox.down_layout"][1]
            (n,) = struct.unpack_from("<Q", sc, at)
            old = sc[at + 8:at + 8 + n]
            for new in [b"rows", b"blocks", b"", b"ROWS", b"x" * 300]:
                if new == old:
                    continue
                b = self.set_string(sc, at, new, tensors)
                if b is None:
                    continue
                self.add("sidecar", f"down_layout {old.decode()!r} -> {new.decode()[:8]!r}",
                         run(self.file(f"sc_layout_{len(new)}_{new[:4].hex()}.kairox.gguf", b)))
        for key in ["blk.0.kairox.bundle_types", "blk.1.kairox.bundle_types"]:
            if key in kv_at:
                at = kv_at[key][1] + 4 + 8  # element type, count, then the ids
                for i, v in [(0, 999), (1, 999), (2, 2**31), (0, 2**32 - 1)]:
                    b = bytearray(sc)
                    struct.pack_into("<I", b, at + 4 * i, v)
                    self.add("sidecar", f"{key}[{i}] = {v}",
                             run(self.file(f"sc_bt_{key}_{i}_{v}.kairox.gguf", bytes(b))))
        # The same and other structural damage with the digests recomputed (as if the tool
        # that wrote it were wrong or hostile): the value and shape checks must refuse it.
        tens = {t[0]: t for t in tensors}

        def resealed(what, edit, needle=None):
            b = bytearray(sc)
            edit(b)
            self.add("sidecar", f"resealed: {what}",
                     run(self.file(f"sc_rs_{len(self.cases)}.kairox.gguf", reseal(bytes(b)))),
                     needle=needle)

        def put(fmt, at, v):
            return lambda b: struct.pack_into(fmt, b, at, v)

        for key in ["blk.0.kairox.bundle_types", "blk.1.kairox.bundle_types"]:
            if key in kv_at:
                for i in range(3):
                    for v in [999, 2**31, 2**32 - 1]:
                        resealed(f"{key}[{i}] = {v}", put("<I", kv_at[key][1] + 12 + 4 * i, v),
                                 needle=f"{key}[{i}] is {v}")
        for l in range(2):
            pre = f"blk.{l}.kairox."
            if pre + "thresholds" in tens:
                at = tens[pre + "thresholds"][2]
                for v in [1e30, float("nan"), float("inf"), -1.0]:
                    resealed(f"{pre}thresholds[0] = {v}", put("<f", at, v),
                             needle=f"{pre}thresholds[0]")
            if pre + "freq" in tens:
                at = tens[pre + "freq"][2]
                for v in [2.0, -0.5, float("nan")]:
                    resealed(f"{pre}freq[3] = {v}", put("<f", at + 12, v))
            if pre + "perm" in tens:
                at = tens[pre + "perm"][2]
                for i, v in [(0, -1), (0, 2**31 - 1), (5, 128), (1, None)]:
                    if v is None:  # a duplicate
                        v = struct.unpack_from("<i", sc, at)[0]
                    resealed(f"{pre}perm[{i}] = {v}", put("<i", at + 4 * i, v))
            for t, fmt, vals in [("pred.w1", "<H", [0x7E00, 0x7C00]),
                                 ("pred.w2", "<H", [0xFC00]),
                                 ("pred.b1", "<f", [float("nan")]),
                                 ("pred.b2", "<f", [float("-inf")])]:
                if pre + t in tens:
                    for v in vals:
                        resealed(f"{pre}{t}[0] = {v}", put(fmt, tens[pre + t][2], v))
            if pre + "pred.threshold" in kv_at:
                for v in [float("nan"), 2.0, -1.0]:
                    resealed(f"{pre}pred.threshold = {v}",
                             put("<f", kv_at[pre + "pred.threshold"][1], v))
        for key, fmt, vals in [("kairox.group_size", "<I", [0, 7, 33, 2**31]),
                               ("kairox.model.n_ff", "<I", [0, 64, 2**31]),
                               ("kairox.model.n_layer", "<I", [0, 1, 2**31]),
                               ("kairox.sparsity", "<f", [float("nan"), -1.0, 1.0])]:
            if key in kv_at:
                t = kv_at[key][0]
                if t in (10, 11):
                    fmt = "<Q"
                for v in vals:
                    resealed(f"{key} = {v}", put(fmt, kv_at[key][1], v))
        if "kairox.down_layout" in kv_at:
            at = kv_at["kairox.down_layout"][1]
            (n,) = struct.unpack_from("<Q", sc, at)
            old = sc[at + 8:at + 8 + n]
            for new in [b"rows", b"blocks", b"ROWS"]:
                if new != old:
                    b = self.set_string(sc, at, new, tensors)
                    if b is not None:
                        self.add("sidecar", f"resealed: down_layout {old.decode()!r} -> "
                                 f"{new.decode()!r}",
                                 run(self.file(f"sc_rs_layout_{new.decode()}.kairox.gguf",
                                               reseal(b))))
        i = sc.find(b"kairox.version")
        if i >= 0:
            b = bytearray(sc)
            struct.pack_into("<I", b, i + len(b"kairox.version") + 4, 2)
            self.add("sidecar", "format version 2", run(self.file("sc_v2.kairox.gguf", bytes(b))))
        self.add("sidecar", "another model's sidecar",
                 [self.prog("kairox-cli"), "-m", str(self.tiny2), "-p", "hi", "-n", "2",
                  "--sidecar", str(self.sidecar)])
        self.add("sidecar", "a model as its own sidecar", run(str(self.tiny)))
        self.add("sidecar", "an empty sidecar", run(self.file("sc_empty.kairox.gguf", b"")))
        self.add("sidecar", "a directory as sidecar", run(str(self.work)),
                 needle="not a regular file")
        self.add("sidecar", "/dev/zero as sidecar", run("/dev/zero"), needle="not a regular file")
        fifo = self.work / "fifo.kairox.gguf"
        if not fifo.exists():
            os.mkfifo(fifo)
        self.add("sidecar", "a FIFO as sidecar", run(str(fifo)), needle="not a regular file")

    def cli_arg_cases(self):
        tiny = str(self.tiny)
        huge = ["4294967552", "4294967296", str(2**63), str(2**64), "-2",
                "99999999999999999999999", "-99999999999999999999999", "nan", "1.5", "abc", ""]
        programs = {
            "kairox-cli": (["-m", tiny, "-p", "hi", "-n", "1", "-t", "1"],
                           ["-c", "-t", "-n", "-b", "--top-k", "--repeat-last-n"],
                           ["--temp", "--top-p", "--min-p", "--repeat-penalty", "--sparsity"]),
            "kairox-chat": (["-m", tiny, "-t", "1"], ["-c", "-t", "-n", "--top-k"],
                            ["--temp", "--top-p", "--min-p", "--repeat-penalty"]),
            "kairox-bench": (["-m", tiny, "-t", "1", "-p", "0", "-n", "1", "-r", "1"],
                             ["-p", "-n", "-t", "-r", "-d"], ["--sparsity"]),
            "kairox-prepare": (["-m", tiny, "-o", str(self.work / "never.kairox.gguf")],
                               ["--tokens", "--group-size", "--max-rank", "-t"],
                               ["--sparsity", "--target-recall", "--pin-fraction"]),
            "kairox-perplexity": (["-m", tiny, "-f", str(self.work / "prompt.txt")],
                                  ["-c", "--chunks", "-t", "-b"], ["--sparsity"]),
        }
        floats = ["nan", "-nan", "inf", "-inf", "1e999", "abc", "", "0.5x"]
        # Values outside each flag's range (the programs' --help states them).
        out_of_range = {"--top-p": ["-0.5", "1.5"], "--min-p": ["-0.5", "2", "1.01"],
                        "--repeat-penalty": ["0", "-1"], "--sparsity": ["-0.1", "1", "2"],
                        "--target-recall": ["0", "-1", "2"], "--pin-fraction": ["-0.1", "2"]}
        for prog, (base, int_flags, float_flags) in programs.items():
            exe = self.prog(prog)
            if exe is None:
                continue
            for flag in int_flags:
                for v in huge:
                    self.add("args", f"{prog} {flag} {v!r}", [exe, *base, flag, v])
            for flag in float_flags:
                for v in floats + out_of_range.get(flag, []):
                    self.add("args", f"{prog} {flag} {v!r}", [exe, *base, flag, v])
            self.add("args", f"{prog} {int_flags[0]} (no value)", [exe, *base, int_flags[0]])
            self.add("args", f"{prog} unknown flag", [exe, *base, "--no-such-flag"])
            self.add("args", f"{prog} stray positional", [exe, *base, "stray"])
            self.add("args", f"{prog} -m missing", [exe, "-m", str(self.work / "nope.gguf")])
            self.add("args", f"{prog} --help", [exe, "--help"], expect=ACCEPT)
        cli = self.prog("kairox-cli")
        if cli:
            base = ["-m", tiny, "-p", "hi", "-n", "1", "-t", "1"]
            for spelling in ["-i", "-cnv", "--interactive", "--conversation", "-if"]:
                self.add("args", f"kairox-cli llama.cpp {spelling} refused", [cli, *base, spelling])
            for flag, v in [("--ram-budget", "-1"), ("--ram-budget", "0x10"),
                            ("--ram-budget", "101%"), ("--ram-budget", "1Q"),
                            ("--ram-budget", "99999999999999999999G"), ("--device", "tpu"),
                            ("--vram-budget", "-5%"), ("-f", str(self.work)),
                            ("-f", str(self.work / "missing.txt")), ("-s", "-2"),
                            ("--sidecar", str(self.work / "missing.kairox.gguf"))]:
                self.add("args", f"kairox-cli {flag} {v!r}", [cli, *base, flag, v])

    def capi_cases(self):
        exe = self.tests / "capi_args_test"
        if not exe.exists():
            return
        huge = self.work / "huge_ctx.gguf"
        subprocess.run([str(self.tests / "kx_write_tiny_model"), str(huge), "16777216"],
                       check=True, env=self.env)
        src = REPO / "tests" / "capi" / "capi_args_test.c"
        n = len(re.findall(r"\bEXPECT_STATUS\(", src.read_text())) if src.exists() else 0
        self.add("capi", f"capi_args_test: {n} refusals of NULL and invalid arguments",
                 [str(exe), str(self.tiny), str(huge), str(self.work)], expect=ACCEPT,
                 timeout=self.timeout * 6, refusal_inside=True, weight=max(n, 1))

    def py(self, name, code, expect=ACCEPT, category="python"):
        prelude = ("import kairox, os, sys, threading\n"
                   f"TINY = {str(self.tiny)!r}\nSIDECAR = {str(self.sidecar)!r}\n"
                   "def refused(f, *exc):\n"
                   "    exc = exc or (kairox.KairoxError, ValueError, TypeError, OverflowError)\n"
                   "    try:\n        f()\n    except exc as e:\n"
                   "        assert str(e), 'no message'\n        return str(e)\n"
                   "    raise SystemExit('accepted: ' + name)\n")
        self.add(category, name, [sys.executable, "-c", prelude.replace("name", repr(name)) +
                                  code], expect=expect, env=self.py_env,
                 refusal_inside="refused(" in code)

    def python_cases(self):
        if not self.lib.exists():
            return
        py = self.py
        py("Model(None)", "refused(lambda: kairox.Model(None))")
        py("Model(3)", "refused(lambda: kairox.Model(3))")
        py("Model(ram_budget=-1)", "refused(lambda: kairox.Model(TINY, ram_budget=-1))")
        py("Model(ram_budget=2**64)", "refused(lambda: kairox.Model(TINY, ram_budget=2**64))")
        py("Model(n_threads=2**32+1)", "refused(lambda: kairox.Model(TINY, n_threads=2**32+1))")
        py("Model(device='tpu')", "refused(lambda: kairox.Model(TINY, device='tpu'))")
        py("Model(missing path)", "refused(lambda: kairox.Model(TINY + '.missing'))")
        py("session(n_ctx=2**32+64)",
           "m = kairox.Model(TINY)\nrefused(lambda: m.session(n_ctx=2**32 + 64))")
        py("session(n_ctx=-1)", "m = kairox.Model(TINY)\nrefused(lambda: m.session(n_ctx=-1))")
        py("session(n_threads='4')",
           "m = kairox.Model(TINY)\nrefused(lambda: m.session(n_threads='4'))")
        py("session(ram_budget='-5M')",
           "m = kairox.Model(TINY)\nrefused(lambda: m.session(ram_budget='-5M'))")
        py("session(sparsity=nan)",
           "m = kairox.Model(TINY)\nrefused(lambda: m.session(sparsity=float('nan')))")
        py("eval([2**40])", "s = kairox.Model(TINY).session()\nrefused(lambda: s.eval([2**40]))")
        py("eval([-1])", "s = kairox.Model(TINY).session()\nrefused(lambda: s.eval([-1]))")
        py("eval(['a'])", "s = kairox.Model(TINY).session()\nrefused(lambda: s.eval(['a']))")
        py("eval past n_ctx",
           "s = kairox.Model(TINY).session(n_ctx=16)\nrefused(lambda: s.eval(list(range(40))))")
        py("logits(index=10**6)",
           "s = kairox.Model(TINY).session()\ns.eval([1, 2])\n"
           "refused(lambda: s.logits(10**6), kairox.KairoxError, IndexError, ValueError)")
        py("truncate(-1)", "s = kairox.Model(TINY).session()\nrefused(lambda: s.truncate(-1))")
        py("generate(max_tokens=-5)",
           "s = kairox.Model(TINY).session()\n"
           "refused(lambda: list(s.generate('hi', max_tokens=-5)))")
        py("Sampler(min_p=2.0)", "refused(lambda: kairox.Sampler(min_p=2.0))")
        py("Sampler(temperature=nan)", "refused(lambda: kairox.Sampler(temperature=float('nan')))")
        py("Sampler(top_k=2**40)", "refused(lambda: kairox.Sampler(top_k=2**40))")
        py("sample_logits([])", "refused(lambda: kairox.Sampler().sample_logits([]))")
        py("detokenize([2**33])",
           "m = kairox.Model(TINY)\nrefused(lambda: m.detokenize([2**33]))")
        py("tokenize(None)", "m = kairox.Model(TINY)\nrefused(lambda: m.tokenize(None))")
        py("session use after close",
           "s = kairox.Model(TINY).session()\ns.close()\nrefused(lambda: s.eval([1]))\n"
           "s.close()")
        py("model close, session lives on",
           "m = kairox.Model(TINY)\ns = m.session()\nm.close()\ns.eval([1, 2, 3])\n"
           "assert s.n_past == 3")
        py("close during generate",
           "s = kairox.Model(TINY).session()\nit = s.generate('hello', max_tokens=200)\n"
           "next(it)\ns.close()\n")
        py("two threads, one session",
           "s = kairox.Model(TINY).session()\nerrs = []\n"
           "def work():\n"
           "    for _ in range(20):\n"
           "        try:\n            s.reset(); s.eval(list(range(1, 30)))\n"
           "        except kairox.KairoxError as e:\n            errs.append(str(e))\n"
           "ts = [threading.Thread(target=work) for _ in range(2)]\n"
           "[t.start() for t in ts]\n[t.join() for t in ts]\n"
           "assert all('BUSY' in e or 'busy' in e or 'another' in e for e in errs), errs\n")
        if self.sidecar is None:
            return
        # An I/O error injected during decode: the sidecar truncated under a RAM budget, after
        # the session read it; the next evaluation fails with an error, not SIGBUS.
        py("sidecar truncated during decode (--ram-budget)",
           "import shutil\nsc = SIDECAR + '.trunc.kairox.gguf'\nshutil.copy(SIDECAR, sc)\n"
           "s = kairox.Model(TINY).session(sidecar=sc, ram_budget='50%')\n"
           "s.eval(list(range(1, 9)))\nos.truncate(sc, 4096)\n"
           "msg = refused(lambda: [s.eval([i]) for i in range(10, 20)], kairox.KairoxError)\n"
           "assert sc in msg, msg\n", category="io")
        py("sidecar overwritten in place during decode",
           "import shutil\nsc = SIDECAR + '.over.kairox.gguf'\nshutil.copy(SIDECAR, sc)\n"
           "s = kairox.Model(TINY).session(sidecar=sc, ram_budget='50%')\n"
           "s.eval(list(range(1, 9)))\n"
           "with open(sc, 'r+b') as f:\n    f.seek(os.path.getsize(sc) // 2)\n"
           "    f.write(b'\\x5a' * 4096)\n"
           "msg = refused(lambda: [s.eval([i]) for i in range(10, 20)], kairox.KairoxError)\n"
           "assert sc in msg, msg\n", category="io")
        py("sidecar replaced by rename during a session (old file kept open)",
           "import shutil\nsc = SIDECAR + '.ren.kairox.gguf'\nshutil.copy(SIDECAR, sc)\n"
           "s = kairox.Model(TINY).session(sidecar=sc)\ns.eval(list(range(1, 9)))\n"
           "open(sc + '.new', 'wb').write(b'junk')\nos.replace(sc + '.new', sc)\n"
           "s.eval([10, 11])\nassert s.n_past == 10\n", category="changed")
        py("model replaced by rename during a session",
           "import shutil\nm = TINY + '.ren.gguf'\nshutil.copy(TINY, m)\n"
           "s = kairox.Model(m).session()\ns.eval([1, 2])\n"
           "open(m + '.new', 'wb').write(b'junk')\nos.replace(m + '.new', m)\n"
           "s.eval([3, 4])\nassert s.n_past == 4\n", category="changed")
        py("sidecar deleted during a session",
           "import shutil\nsc = SIDECAR + '.del.kairox.gguf'\nshutil.copy(SIDECAR, sc)\n"
           "s = kairox.Model(TINY).session(sidecar=sc, ram_budget='50%')\n"
           "s.eval([1, 2])\nos.unlink(sc)\ns.eval([3, 4])\nassert s.n_past == 4\n",
           category="changed")

    # -------------------------------------------------------------------- run
    def run_case(self, c):
        if c.argv[0] is None:
            return c, "skip", "program not built"
        timeout = c.timeout or self.timeout
        t0 = time.monotonic()
        try:
            r = subprocess.run(c.argv, capture_output=True, timeout=timeout,
                               env=c.env or self.env, stdin=subprocess.DEVNULL,
                               start_new_session=True)
        except subprocess.TimeoutExpired:
            return c, "crash", f"hung: no exit within {timeout:.0f} s"
        dt = time.monotonic() - t0
        err = r.stderr.decode(errors="replace")
        rc = r.returncode
        tail = err.strip().splitlines()[-1][:150] if err.strip() else ""
        if rc < 0:
            return c, "crash", f"killed by {signal.Signals(-rc).name}; {tail}"
        if rc == SANITIZER_EXIT or SANITIZER_REPORT.search(err):
            return c, "crash", "sanitizer report:\n" + "\n".join(err.splitlines()[-30:])
        if rc >= 128:
            return c, "crash", f"exit status {rc}; {tail}"
        if c.expect == ACCEPT:
            if rc != 0:
                return c, "unexpected", f"exit status {rc}, expected 0; {tail}"
            return c, "refused" if c.refusal_inside else "accepted", f"{dt:.2f} s"
        if rc == 0:
            return c, "unexpected", "exit status 0, expected a refusal"
        if not err.strip():
            return c, "unexpected", f"exit status {rc} without a message"
        if c.needle and c.needle not in err:
            return c, "unexpected", f"message lacks {c.needle!r}: {tail}"
        return c, "refused", f"{rc}: {tail}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build directory (bin/, tests/, lib/)")
    ap.add_argument("--timeout", type=float, default=20.0,
                    help="seconds before a case counts as hung (x4 under ASan)")
    ap.add_argument("-k", default="", help="only cases whose category or name contains this")
    ap.add_argument("-j", type=int, default=max(2, min(8, os.cpu_count() or 2)),
                    help="cases run in parallel")
    ap.add_argument("-v", action="store_true", help="print each case's message")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    s = Suite(args)
    # The judge itself: a signal, a sanitizer's exit status, a hang and a silent success where
    # a refusal was expected must each be caught (else every line below could lie).
    for argv, want in [(["sh", "-c", "kill -SEGV $$"], "crash"),
                       (["sh", "-c", f"exit {SANITIZER_EXIT}"], "crash"),
                       (["sh", "-c", "exit 134"], "crash"),
                       (["sleep", "30"], "crash"),
                       (["true"], "unexpected"), (["sh", "-c", "exit 1"], "unexpected"),
                       (["sh", "-c", "echo no >&2; exit 1"], "refused")]:
        got = s.run_case(Case("self-check", " ".join(argv), argv, timeout=0.5))[1]
        if got != want:
            sys.exit(f"hostile: self-check: {argv} judged {got}, expected {want}")
    try:
        s.setup()
        s.model_cases()
        s.sidecar_cases()
        s.cli_arg_cases()
        s.capi_cases()
        s.python_cases()
        cases = [c for c in s.cases if args.k in c.category or args.k in c.name]
        counts = {"refused": 0, "accepted": 0, "crash": 0, "unexpected": 0, "skip": 0}
        with ThreadPoolExecutor(max_workers=args.j) as pool:
            for c, verdict, detail in pool.map(s.run_case, cases):
                counts[verdict] += c.weight
                bad = verdict in ("crash", "unexpected")
                line = f"{verdict.upper() if bad else verdict:10} [{c.category}] {c.name}"
                if bad or args.v:
                    line += f" -- {detail}"
                print(line, flush=True)
        ran = sum(c.weight for c in cases) - counts["skip"]
        print(f"hostile inputs: {ran} cases, {counts['refused']} refused cleanly, "
              f"{counts['accepted']} accepted, {counts['crash']} crashed, "
              f"{counts['unexpected']} unexpected" +
              (f" ({counts['skip']} skipped: program not built)" if counts["skip"] else "") +
              (f" [{s.sanitize}]" if s.sanitize else ""))
        return 0 if counts["crash"] == 0 and counts["unexpected"] == 0 and ran > 0 else 1
    finally:
        if not args.keep:
            for p in s.work.rglob("*"):
                try:
                    os.chmod(p, 0o644) if p.is_file() else None
                except OSError:
                    pass
            shutil.rmtree(s.work, ignore_errors=True)
        else:
            print(f"scratch: {s.work}")


if __name__ == "__main__":
    sys.exit(main())
