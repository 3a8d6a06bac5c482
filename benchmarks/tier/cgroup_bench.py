#!/usr/bin/env python3
"""The disk tier against llama.cpp under the same memory limit (issue #17 item 3).

For each memory limit (a share of the model FILE's bytes, and unlimited) every engine runs in a
fresh memory cgroup with that limit, after the page cache was dropped:
  - kairox: kairox-bench tg, sparse with the sidecar, --ram-budget B per tier policy (--policy),
    B chosen so that B + the model's mapped non-FFN weights + a margin fit the limit (below);
    without a limit, no budget (the all-in-RAM sparse path);
  - llama.cpp: dense, through llama-cpp-python in the peer venv and
    benchmarks/peer/peer_bench.py's Peer (one llama_decode per token), in a child of this
    script; its weights mapped (load mode MMAP, no repacking: llama.cpp's default repacks
    Q4_0 into anonymous memory and is OOM-killed under any limit below the model), plus its
    default mode without a limit.
Both decode the same number of tokens the same way (--tg-tokens: greedy from one random token by
default, each engine's own argmax, or random tokens), after 4 untimed warm-up tokens, and each
reports what its timed tokens read from storage (/proc/self/io read_bytes of its own process:
O_DIRECT reads and page-cache misses; the same method for both). The harness reads the group's
peak memory (v1 memory.max_usage_in_bytes, v2 memory.peak: anonymous memory AND the page cache
charged to the group, i.e. the mapped model pages it faulted), its failcnt / OOM kills, and the
1-minute load average before and after each run. Engines alternate: the order flips at every
limit. Also the disk's own ceiling: bench_io's sequential and random O_DIRECT reads of one
bundle's size on the sidecar file (same filesystem). Prints a markdown table, writes JSON.

Runs as root (cgroups, /proc/sys/vm/drop_caches). The groups are removed afterwards, also on
error and Ctrl-C. A benchmark, not a test: nothing asserts on speed.

Why the budget is smaller than the limit: --ram-budget bounds what the kairox session owns
(KV, scratch, predictors, bundle staging and slots), while the model's non-FFN weights
(attention, embedding, head: ~1.4 GB at 7B) stay memory-mapped and uncounted (docs/tiers.md).
Under a cgroup those pages are charged too, so B = limit - non-FFN bytes - --margin-mib (the
program, its libraries, thread stacks, the sidecar's predictor pages read at load). When that
is below --min-budget-mib (the non-FFN weights alone exceed the limit, e.g. 7B at 25 %), B is
that floor and the row is marked: the non-FFN weights then stream from disk in both engines.

  sudo benchmarks/tier/cgroup_bench.py -m /work/synth-data/7b-relu.q4_0.gguf \\
      --bin build-cpu/bin --limits 0,75,50,25 --policies tam-adaptive,static -n 12 -t 2
"""
import argparse
import contextlib
import datetime
import json
import os
import re
import shlex
import signal
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PEER_DIR = os.path.join(REPO, "benchmarks", "peer")
DEFAULT_VENV = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kairox", "peer-venv")
MIB = 1 << 20
GROUP_PREFIX = "kx_cgbench"
FFN_TENSOR = re.compile(r"^blk\.\d+\.ffn_(up|gate|down)(_exps)?\.weight$")
DROP_CACHES = "/proc/sys/vm/drop_caches"


def log(msg):
    print(f"cgroup_bench: {msg}", file=sys.stderr, flush=True)


def int_list(s):
    return [int(x) for x in s.split(",") if x != ""]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="GGUF model (both engines load it)")
    ap.add_argument("--sidecar", default=None,
                    help="kairox sidecar (default: <model>.kairox.gguf)")
    ap.add_argument("--limits", type=int_list, default=[0, 75, 50, 25],
                    help="memory limits in %% of the model file's bytes, 0 = unlimited "
                         "(default 0,75,50,25)")
    ap.add_argument("--policies", default="tam-adaptive,static",
                    help="kairox tier policies to run under each limit (comma list)")
    ap.add_argument("--engines", default="kairox,llama.cpp,llama.cpp-repack",
                    help="comma list: kairox, llama.cpp (weights mapped: load mode MMAP, no "
                         "repacking) and llama.cpp-repack (the package's default, which "
                         "repacks Q4_0 into anonymous memory: unlimited only)")
    ap.add_argument("-n", "--n-gen", type=int, default=12, help="timed tg tokens per run")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tg-tokens", choices=["greedy", "random"], default="greedy",
                    help="decode inputs, the same for both engines (default greedy)")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"),
                    help="kairox-bench and bench_io (default build/bin)")
    ap.add_argument("--venv", default=DEFAULT_VENV, help="the peer venv (llama-cpp-python)")
    ap.add_argument("--margin-mib", type=int, default=160,
                    help="memory left in the group beside kairox's budget and the mapped "
                         "non-FFN weights (default 160)")
    ap.add_argument("--min-budget-mib", type=int, default=288,
                    help="the smallest --ram-budget used (default 288: a 7B session's fixed "
                         "entries and two staging mirrors of one layer)")
    ap.add_argument("--run-timeout", type=int, default=900,
                    help="seconds a run may take before it is killed and reported as such")
    ap.add_argument("--warm-unlimited", action=argparse.BooleanOptionalAction, default=True,
                    help="unlimited runs read their files into the page cache inside their group "
                         "first, so 'all in RAM' holds from the first token (default on)")
    ap.add_argument("--resident-reference", action=argparse.BooleanOptionalAction,
                    default=True,
                    help="without a limit, also kairox with --ram-budget 100%% (every bundle in "
                         "the tier's own slots) beside the mapped all-in-RAM path (default on)")
    ap.add_argument("--io-reads", type=int, default=1500,
                    help="bench_io reads per run (0: no disk ceiling)")
    ap.add_argument("--cgroup-root", default="/sys/fs/cgroup", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="JSON output (default /tmp/kairox-cgroup/)")
    ap.add_argument("--md", default=None, help="markdown output (default beside the JSON)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan (limits, budgets, commands) and stop: no root needed")
    ap.add_argument("--peer-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--peer-load", choices=["mmap", "default"], default="mmap",
                    help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# --- GGUF: which bytes are FFN, and the sidecar's bundle size --------------------------------

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}


def read_gguf(path):
    """(metadata, [(name, offset, bytes)], data_start) of a GGUF file; tensor bytes are the
    distance to the next tensor (padding included), the last one's to the end of the file."""
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize("<" + fmt)
            b = f.read(n)
            if len(b) != n:
                raise ValueError(f"{path}: truncated GGUF header")
            return struct.unpack("<" + fmt, b)

        def rstr():
            (n,) = rd("Q")
            return f.read(n).decode("utf-8", "replace")

        def value(t):
            if t in _SCALARS:
                return rd(_SCALARS[t])[0]
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("IQ")
                if et in _SCALARS:
                    f.seek(struct.calcsize("<" + _SCALARS[et]) * n, os.SEEK_CUR)
                    return None
                return [value(et) for _ in range(n)]
            raise ValueError(f"{path}: unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        (_version,) = rd("I")
        n_tensors, n_kv = rd("QQ")
        kv = {}
        for _ in range(n_kv):
            key = rstr()
            (t,) = rd("I")
            kv[key] = value(t)
        infos = []
        for _ in range(n_tensors):
            name = rstr()
            (nd,) = rd("I")
            rd("Q" * nd)
            _type, off = rd("IQ")
            infos.append((name, off))
        align = kv.get("general.alignment", 32)
        data = (f.tell() + align - 1) // align * align
        size = os.fstat(f.fileno()).st_size
    order = sorted(infos, key=lambda x: x[1])
    ends = [o for _, o in order[1:]] + [size - data]
    return kv, [(n, o, e - o) for (n, o), e in zip(order, ends)], data


def model_split(path):
    """File bytes, FFN tensor bytes and the rest (what stays mapped under a kairox budget)."""
    _, tensors, data = read_gguf(path)
    ffn = sum(b for n, _, b in tensors if FFN_TENSOR.match(n))
    total = os.path.getsize(path)
    return {"file_bytes": total, "ffn_bytes": ffn, "non_ffn_bytes": total - ffn,
            "header_bytes": data}


def bundle_bytes(sidecar):
    """One bundle's bytes: layer 0's bundle tensor over its groups (n_ff / group size)."""
    kv, tensors, _ = read_gguf(sidecar)
    n_ff, gs = kv.get("kairox.model.n_ff"), kv.get("kairox.group_size")
    sizes = [b for n, _, b in tensors if n == "blk.0.kairox.bundles"]
    if not sizes or not n_ff or not gs:
        raise ValueError(f"{sidecar}: no blk.0.kairox.bundles / kairox.model.n_ff / "
                         "kairox.group_size: not a kairox sidecar?")
    groups = (n_ff + gs - 1) // gs
    return sizes[0] // groups


# --- limits and budgets ------------------------------------------------------------------------

def limit_bytes(file_bytes, pct):
    """The group's limit for `pct` % of the model file, page-aligned; None = unlimited."""
    if pct <= 0:
        return None
    if pct > 100:
        raise ValueError(f"--limits: {pct} % is above 100 %")
    return file_bytes * pct // 100 // 4096 * 4096


def kairox_budget(limit, non_ffn, margin, floor):
    """(--ram-budget bytes, whether the mapped non-FFN weights fit beside it) for a limit."""
    if limit is None:
        return None, True
    b = limit - non_ffn - margin
    return (b, True) if b >= floor else (floor, False)


# --- cgroups -----------------------------------------------------------------------------------

class CgroupError(RuntimeError):
    pass


def detect_cgroup(root):
    """('v1', dir) where the v1 memory controller is mounted at root/memory, else ('v2', dir)
    where a cgroup2 hierarchy with the memory controller is at root (or root/unified); the
    parent must be writable. Raises CgroupError naming what was looked for."""
    v1 = os.path.join(root, "memory")
    if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
        if not os.access(v1, os.W_OK):
            raise CgroupError(f"{v1} (cgroup v1 memory controller) is not writable: run as root")
        return "v1", v1
    for d in (root, os.path.join(root, "unified")):
        ctl = os.path.join(d, "cgroup.controllers")
        if os.path.exists(ctl):
            with open(ctl) as f:
                if "memory" not in f.read().split():
                    continue
            if not os.access(d, os.W_OK):
                raise CgroupError(f"{d} (cgroup v2 with memory) is not writable: run as root")
            return "v2", d
    raise CgroupError(
        f"no memory cgroup under {root}: neither cgroup v1's {v1}/memory.limit_in_bytes nor a "
        f"cgroup v2 hierarchy whose cgroup.controllers lists memory ({root} or {root}/unified)")


class Cgroup:
    """A fresh memory group; remove() kills nothing, so callers end their own children first."""

    def __init__(self, version, parent, name, limit):
        self.version, self.path = version, os.path.join(parent, name)
        if version == "v2":
            sub = os.path.join(parent, "cgroup.subtree_control")
            with open(sub) as f:
                if "memory" not in f.read().split():
                    with open(sub, "w") as w:
                        w.write("+memory")
        os.mkdir(self.path)
        try:
            if version == "v1":
                if limit is not None:
                    self._write("memory.limit_in_bytes", limit)
            else:
                self._write("memory.max", limit if limit is not None else "max")
                if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                    self._write("memory.swap.max", 0)
        except OSError:
            self.remove()
            raise

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def _read(self, name):
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return None

    @property
    def procs(self):
        return os.path.join(self.path, "cgroup.procs")

    def stats(self):
        """Peak bytes (anonymous + page cache charged), limit hits, OOM kills."""
        if self.version == "v1":
            peak = self._read("memory.max_usage_in_bytes")
            fail = self._read("memory.failcnt")
            oom = re.search(r"oom_kill (\d+)", self._read("memory.oom_control") or "")
            return {"peak_bytes": int(peak) if peak else None,
                    "limit_hits": int(fail) if fail else None,
                    "oom_kills": int(oom.group(1)) if oom else None}
        peak = self._read("memory.peak")
        ev = self._read("memory.events") or ""
        hits = re.search(r"^max (\d+)", ev, re.M)
        oom = re.search(r"^oom_kill (\d+)", ev, re.M)
        return {"peak_bytes": int(peak) if peak and peak.strip().isdigit() else None,
                "limit_hits": int(hits.group(1)) if hits else None,
                "oom_kills": int(oom.group(1)) if oom else None}

    def remove(self):
        remove_group(self.path)


def remove_group(path):
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # the last task's exit is still being accounted
    log(f"could not remove {path}")


def drop_caches():
    """sync, then drop the clean page cache (and slab) so that every run starts cold."""
    os.sync()
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("3")
    except OSError as e:
        raise CgroupError(f"cannot drop the page cache ({DROP_CACHES}: {e.strerror}): run as "
                          "root on a kernel that allows it") from e


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# --- one run -----------------------------------------------------------------------------------

def wrap(procs, argv, warm_files=()):
    """A shell that moves itself into the group, optionally reads files into the page cache
    there (charged to the group), then execs argv."""
    pre = "".join(f"cat {shlex.quote(p)} > /dev/null && " for p in warm_files)
    return ["sh", "-c", f'echo $$ > "$0" && {pre}exec "$@"', procs] + list(argv)


def run_in_group(cg, argv, timeout, warm_files=(), env=None):
    """Runs argv in the group (its own session, so a kill reaches all of it); kills it after
    `timeout` seconds or when this script is interrupted. The engine is the shell's exec, so
    wait4 on it gives the engine's own peak RSS (anonymous + resident file pages)."""
    t0 = time.time()
    proc = subprocess.Popen(wrap(cg.procs, argv, warm_files), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    chunks = {"out": [], "err": []}
    readers = [threading.Thread(target=lambda k=k, f=f: chunks[k].append(f.read()), daemon=True)
               for k, f in (("out", proc.stdout), ("err", proc.stderr))]
    for t in readers:
        t.start()

    def kill():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return os.wait4(proc.pid, 0)

    timed_out = False
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() - t0 > timeout:
                pid, status, usage = kill()
                timed_out = True
                break
            time.sleep(0.1)
    except BaseException:  # Ctrl-C: end the child before its group is removed
        kill()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join()
    return {"rc": proc.returncode, "stdout": "".join(chunks["out"]),
            "stderr": "".join(chunks["err"]), "wall_s": time.time() - t0,
            "timed_out": timed_out, "max_rss_bytes": usage.ru_maxrss * 1024}


def kairox_cmd(a, sidecar, budget, policy):
    cmd = [os.path.join(a.bin, "kairox-bench"), "-m", a.model, "--sidecar", sidecar,
           "-t", str(a.threads), "-p", "0", "-n", str(a.n_gen), "-r", "1", "--no-dense",
           "--no-probes", "--tg-tokens", a.tg_tokens, "-o", "json"]
    if isinstance(budget, str):  # "100%": every bundle resident in the session's own slots
        cmd += ["--ram-budget", budget, "--policy", policy]
    elif budget is not None:
        cmd += ["--ram-budget", f"{budget // 1024}K", "--policy", policy]
    return cmd


def llama_cmd(a, repack):
    return [os.path.join(a.venv, "bin", "python"), os.path.abspath(__file__), "--peer-child",
            "-m", a.model, "-t", str(a.threads), "-n", str(a.n_gen), "--tg-tokens", a.tg_tokens,
            "--peer-load", "default" if repack else "mmap"]


def parse_kairox(out):
    rows = [r for r in json.loads(out) if r.get("kx_test", "").startswith("tg")]
    if not rows:
        raise ValueError("kairox-bench printed no tg row")
    r = rows[-1]
    res = {"tg_ts": r["avg_ts"], "disk_read_bytes_per_token": r.get("kx_disk_read_bytes_per_token"),
           "test": r["kx_test"]}
    for k in ("kx_hit_rate", "kx_needed_fraction", "kx_read_bytes_per_token",
              "kx_read_ops_per_token", "kx_io_wait_ms_per_token", "kx_ffn_ms_per_token",
              "kx_slots_per_layer", "kx_groups_per_layer", "kx_lambda_mean", "kx_io_backend",
              "kx_predicted_fraction"):
        if k in r:
            res[k[3:]] = r[k]
    if "kx_policy" in r:
        res["tier_policy"] = r["kx_policy"]  # "policy" is the plan's label
    return res


def run_one(a, cg_info, plan, split, sidecar):
    version, parent = cg_info
    name = f"{GROUP_PREFIX}_{os.getpid()}_{plan['index']}"
    warm = ()
    if plan["limit"] is None and a.warm_unlimited:
        warm = (a.model,) + ((sidecar,) if plan["engine"] == "kairox" else ())
    row = dict(plan)
    drop_caches()
    row["load_before"] = loadavg()
    cg = Cgroup(version, parent, name, plan["limit"])
    try:
        env = dict(os.environ, KAIROX_SIDECAR_AUTO="0")
        if plan["engine"] == "llama.cpp":
            env["OMP_WAIT_POLICY"] = "passive"  # peer_bench.py's default for the peer
        res = run_in_group(cg, plan["command"], a.run_timeout, warm, env)
        row.update(cg.stats())
    finally:
        cg.remove()
    row["load_after"] = loadavg()
    row.update(rc=res["rc"], wall_s=round(res["wall_s"], 1), timed_out=res["timed_out"],
               max_rss_bytes=res["max_rss_bytes"])
    if res["timed_out"]:
        row["error"] = f"killed after {a.run_timeout} s"
        prog = re.findall(r"token (\d+) at ([0-9.]+) s", res["stderr"])
        if prog:
            row["partial"] = {"tokens": int(prog[-1][0]), "seconds": float(prog[-1][1])}
    elif row.get("oom_kills"):
        row["error"] = f"OOM-killed in the group (exit {res['rc']})"
    elif res["rc"] != 0:
        row["error"] = (res["stderr"].strip().splitlines() or ["(no message)"])[-1][:300]
    else:
        try:
            row.update(parse_kairox(res["stdout"]) if plan["engine"] == "kairox"
                       else json.loads(res["stdout"].strip().splitlines()[-1]))
        except (ValueError, KeyError, IndexError) as e:
            row["error"] = f"unreadable output ({e}): {res['stderr'][-300:]}"
    return row


def make_plan(a, split, sidecar):
    engines = [e for e in a.engines.split(",") if e]
    policies = [p for p in a.policies.split(",") if p]
    margin, floor = a.margin_mib * MIB, a.min_budget_mib * MIB
    plan, index = [], 0
    for li, pct in enumerate(a.limits):
        limit = limit_bytes(split["file_bytes"], pct)
        runs = []
        for e in engines:
            if e == "kairox":
                budget, fits = kairox_budget(limit, split["non_ffn_bytes"], margin, floor)
                for p in (policies if limit is not None else ["all-in-RAM"]):
                    runs.append({"engine": "kairox", "policy": p, "ram_budget": budget,
                                 "non_ffn_fits": fits,
                                 "command": kairox_cmd(a, sidecar, budget, p)})
                if limit is None and a.resident_reference:
                    # The tier's own all-in-RAM: every bundle read once into owned slots, so
                    # the tier's code path without I/O (the mapped sidecar above faults its
                    # pages in as tokens first touch them).
                    runs.append({"engine": "kairox", "policy": "static, 100 % resident",
                                 "ram_budget": None, "non_ffn_fits": True,
                                 "command": kairox_cmd(a, sidecar, "100%", "static")})
            elif e == "llama.cpp":
                runs.append({"engine": "llama.cpp", "policy": "dense mmap", "ram_budget": None,
                             "non_ffn_fits": True, "command": llama_cmd(a, False)})
            elif e == "llama.cpp-repack":
                if limit is None:  # its weights are anonymous memory: no limit below the model
                    runs.append({"engine": "llama.cpp", "policy": "dense repacked",
                                 "ram_budget": None, "non_ffn_fits": True,
                                 "command": llama_cmd(a, True)})
            else:
                raise ValueError(f"--engines: unknown engine '{e}' (kairox, llama.cpp, "
                                 "llama.cpp-repack)")
        if li % 2 == 1:
            runs.reverse()  # alternate which engine runs first
        for r in runs:
            r.update(index=index, limit_pct=pct, limit=limit)
            index += 1
            plan.append(r)
    return plan


# --- the disk's ceiling ------------------------------------------------------------------------

def disk_ceiling(a, path, chunk):
    exe = os.path.join(a.bin, "bench_io")
    if a.io_reads <= 0 or not os.path.exists(exe):
        return None
    drop_caches()
    load = loadavg()
    r = subprocess.run([exe, path, str(a.io_reads), "3", str(max(1, chunk // 1024))],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:]}
    j = json.loads(r.stdout.strip().splitlines()[-1])
    j["load"] = load
    return j


# --- output ------------------------------------------------------------------------------------

def fmt_mib(b):
    return "–" if b is None or b < 0 else f"{b / MIB:.0f}"


def table_row(r):
    """One run as a markdown table row ('–' where a value does not apply)."""
    lim = "unlimited" if r["limit"] is None else f"{r['limit_pct']} % ({fmt_mib(r['limit'])} MiB)"
    budget = fmt_mib(r["ram_budget"]) + ("" if r["non_ffn_fits"] else " ¹")
    if "error" in r:
        tg = f"**{r['error']}**"
        p = r.get("partial")
        if p and p["seconds"] > 0:
            tg += (f" ({p['tokens']} tokens in {p['seconds']:.0f} s: "
                   f"{p['tokens'] / p['seconds']:.3f} t/s)")
    else:
        tg = f"{r['tg_ts']:.3f}"
    tier = ["–"] * 4
    if "hit_rate" in r:
        tier = [fmt_mib(r["read_bytes_per_token"]), f"{100 * r['hit_rate']:.1f}",
                f"{100 * r['needed_fraction']:.1f}", f"{r['io_wait_ms_per_token']:.0f}"]
    cells = [lim, r["engine"], r["policy"], budget, tg,
             fmt_mib(r.get("disk_read_bytes_per_token"))] + tier + [
             fmt_mib(r.get("max_rss_bytes")), fmt_mib(r.get("peak_bytes")),
             f"{r['load_before']:.1f} / {r['load_after']:.1f}"]
    return "| " + " | ".join(cells) + " |"


def markdown(meta, rows, ceiling):
    out = [f"# Disk tier vs llama.cpp under a memory cgroup: {os.path.basename(meta['model'])}", "",
           f"- model file {meta['file_bytes'] / 1e9:.2f} GB (FFN {meta['ffn_bytes'] / 1e9:.2f} GB, "
           f"non-FFN {meta['non_ffn_bytes'] / 1e9:.2f} GB); sidecar bundles of "
           f"{meta['bundle_bytes'] / 1024:.0f} KiB",
           f"- cgroup {meta['cgroup']}; page cache dropped before every run; {meta['n_gen']} "
           f"timed tg tokens ({meta['tg_tokens']}) after 4 warm-up, {meta['threads']} threads; "
           f"{meta['date']}", "",
           "| limit | engine | policy | --ram-budget MiB | tg t/s | MiB read / token (disk) | "
           "kairox tier MiB / token | hit % | needed % | I/O wait ms / token | peak RSS MiB | "
           "group peak MiB | "
           "load before / after |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(table_row(r))
    if any(not r["non_ffn_fits"] for r in rows):
        out += ["", "¹ the model's non-FFN weights alone exceed the limit: kairox's budget is the "
                "floor (--min-budget-mib) and the non-FFN weights stream from disk in both "
                "engines."]
    if ceiling and "random" in ceiling:
        rnd = ", ".join(f"{x['backend']} qd{x['depth']} {x['gbps']:.2f}"
                        for x in ceiling["random"])
        best = max(ceiling["random"], key=lambda x: x["gbps"])
        out += ["", f"Disk ceiling (bench_io on the sidecar's filesystem, O_DIRECT, load "
                f"{ceiling['load']:.1f}): sequential 1 MiB reads, 4 in flight: "
                f"**{ceiling['seq_direct_gbps']:.2f} GB/s**; random "
                f"{ceiling['chunk_bytes'] // 1024} KiB reads (one bundle): {rnd} GB/s (best "
                f"{best['gbps']:.2f} GB/s = {best['gbps'] * 1e9 / MIB:.0f} MiB/s)."]
    return "\n".join(out) + "\n"


# --- the llama.cpp child (runs in the peer venv's python) ---------------------------------------

def peer_child(a):
    sys.path.insert(0, PEER_DIR)
    import peer_bench  # noqa: E402  (the peer's timing code, reused)
    peer = peer_bench.Peer(a.model, "auto", mmap_only=a.peer_load == "mmap")
    peer.context(a.threads, a.n_gen + peer_bench.TG_WARMUP_TOKENS + 1, 32)
    t0 = time.time()

    def progress(i):  # read back by the harness when a capped run is killed
        print(f"token {i + 1} at {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

    ts = peer.tg(a.n_gen, 0, True, greedy=a.tg_tokens == "greedy", on_token=progress)
    print(json.dumps({"tg_ts": ts, "disk_read_bytes_per_token":
                      None if peer.tg_read_bytes is None else peer.tg_read_bytes / a.n_gen,
                      "peer": peer.desc}))


# --- main --------------------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    a.model = os.path.abspath(a.model)
    if a.peer_child:
        return peer_child(a)
    sidecar = os.path.abspath(a.sidecar or re.sub(r"\.gguf$", "", a.model) + ".kairox.gguf")
    for p in (a.model, sidecar):
        if not os.path.exists(p):
            sys.exit(f"cgroup_bench: {p} does not exist")
    split = model_split(a.model)
    split["bundle_bytes"] = bundle_bytes(sidecar)
    plan = make_plan(a, split, sidecar)
    if a.dry_run:
        print(json.dumps({"split": split, "plan": plan}, indent=1))
        return 0
    if os.geteuid() != 0:
        sys.exit("cgroup_bench: needs root (memory cgroups, drop_caches); --dry-run does not")
    for prog in ("kairox-bench",):
        if "kairox" in a.engines and not os.path.exists(os.path.join(a.bin, prog)):
            sys.exit(f"cgroup_bench: {a.bin}/{prog} is missing: build it first")
    if "llama.cpp" in a.engines and not os.path.exists(os.path.join(a.venv, "bin", "python")):
        sys.exit(f"cgroup_bench: no peer venv at {a.venv}: benchmarks/peer/peer_bench.py "
                 "--setup-only makes it")
    try:
        cg_info = detect_cgroup(a.cgroup_root)
        drop_caches()  # fails early, before anything ran, where not permitted
    except CgroupError as e:
        sys.exit(f"cgroup_bench: {e}")
    json_path = a.json or os.path.join("/tmp", "kairox-cgroup",
                                       os.path.basename(a.model).replace(".gguf", ".json"))
    md_path = a.md or os.path.splitext(json_path)[0] + ".md"
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    meta = dict(split, model=a.model, sidecar=sidecar, cgroup=f"{cg_info[0]} at {cg_info[1]}",
                n_gen=a.n_gen, threads=a.threads, tg_tokens=a.tg_tokens,
                margin_mib=a.margin_mib, min_budget_mib=a.min_budget_mib,
                command=" ".join([os.path.relpath(__file__, REPO)] + (argv or sys.argv[1:])),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    rows, ceiling = [], None
    try:
        ceiling = disk_ceiling(a, sidecar, split["bundle_bytes"])
        if ceiling:
            log(f"disk ceiling: {json.dumps(ceiling)}")
        for p in plan:
            log(f"[{p['index'] + 1}/{len(plan)}] {p['engine']} {p['policy']} at "
                f"{p['limit_pct'] or 'unlimited'}{' %' if p['limit_pct'] else ''}: "
                f"{' '.join(p['command'])}")
            r = run_one(a, cg_info, p, split, sidecar)
            log("  -> " + (r.get("error") or f"{r['tg_ts']:.3f} t/s, disk "
                           f"{fmt_mib(r.get('disk_read_bytes_per_token'))} MiB/token, peak "
                           f"{fmt_mib(r.get('peak_bytes'))} MiB")
                + f" (load {r['load_before']:.1f})")
            rows.append(r)
    except KeyboardInterrupt:
        log("interrupted: writing what ran")
    finally:
        # Groups are removed in run_one's finally; sweep leftovers of this process too.
        for d in os.listdir(cg_info[1]):
            if d.startswith(f"{GROUP_PREFIX}_{os.getpid()}_"):
                remove_group(os.path.join(cg_info[1], d))
        with open(json_path, "w") as f:
            json.dump({"meta": meta, "disk_ceiling": ceiling, "rows": rows}, f, indent=1)
        md = markdown(meta, rows, ceiling)
        with open(md_path, "w") as f:
            f.write(md)
        print(md)
        log(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
