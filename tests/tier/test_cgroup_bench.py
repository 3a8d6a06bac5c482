#!/usr/bin/env python3
"""The logic of benchmarks/tier/cgroup_bench.py that needs neither root nor cgroups: the GGUF
split into FFN and mapped bytes, limits and budgets, cgroup-version detection on fake roots, the
run plan, the wrapper that joins a group before exec, and the table. Standard library only;
well under a second."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks", "tier"))
import cgroup_bench as cb  # noqa: E402


def write_gguf(path, kv, tensors, align=32):
    """A minimal GGUF v3: kv is {key: (type, value)} with types 4 (u32) or 8 (string);
    tensors are (name, dims, data bytes), laid out in order, each padded to `align`."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv) + 1)
    out += s("general.alignment") + struct.pack("<II", 4, align)
    for k, (t, v) in kv.items():
        out += s(k) + struct.pack("<I", t) + (struct.pack("<I", v) if t == 4 else s(v))
    off = 0
    for name, dims, nbytes in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + struct.pack("<" + "Q" * len(dims), *dims)
        out += struct.pack("<IQ", 0, off)
        off += (nbytes + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    with open(path, "wb") as f:
        f.write(out + b"\x5a" * off)


class GgufSplit(unittest.TestCase):
    def test_ffn_and_mapped_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "m.gguf")
            write_gguf(p, {"general.architecture": (8, "llama")}, [
                ("token_embd.weight", (8, 4), 96),
                ("blk.0.attn_q.weight", (8, 8), 64),
                ("blk.0.ffn_gate.weight", (8, 16), 160),
                ("blk.0.ffn_up.weight", (8, 16), 160),
                ("blk.0.ffn_down.weight", (16, 8), 128),
                ("output.weight", (8, 4), 40)])
            split = cb.model_split(p)
            self.assertEqual(split["ffn_bytes"], 160 + 160 + 128)
            self.assertEqual(split["file_bytes"], os.path.getsize(p))
            self.assertEqual(split["non_ffn_bytes"], split["file_bytes"] - 448)
            self.assertGreater(split["non_ffn_bytes"], 96 + 64 + 40)  # header and padding too

    def test_bundle_bytes_and_bad_files(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "s.gguf")
            write_gguf(p, {"kairox.model.n_ff": (4, 64), "kairox.group_size": (4, 16)},
                       [("blk.0.kairox.perm", (64,), 256),
                        ("blk.0.kairox.bundles", (4 * 1536,), 4 * 1536),
                        ("blk.1.kairox.bundles", (4 * 1536,), 4 * 1536)])
            self.assertEqual(cb.bundle_bytes(p), 1536)
            write_gguf(p, {"general.architecture": (8, "llama")}, [("a", (4,), 16)])
            with self.assertRaisesRegex(ValueError, "not a kairox sidecar"):
                cb.bundle_bytes(p)
            with open(p, "wb") as f:
                f.write(b"GGML" + b"\0" * 60)
            with self.assertRaisesRegex(ValueError, "not a GGUF file"):
                cb.model_split(p)


class LimitsAndBudgets(unittest.TestCase):
    def test_limit(self):
        self.assertIsNone(cb.limit_bytes(3857393152, 0))
        half = cb.limit_bytes(3857393152, 50)
        self.assertEqual(half % 4096, 0)
        self.assertLessEqual(half, 3857393152 // 2)
        self.assertGreater(half, 3857393152 // 2 - 4096)
        with self.assertRaisesRegex(ValueError, "above 100"):
            cb.limit_bytes(1 << 30, 150)

    def test_budget_leaves_the_mapped_weights(self):
        mib = cb.MIB
        b, fits = cb.kairox_budget(2000 * mib, 1400 * mib, 160 * mib, 288 * mib)
        self.assertEqual((b, fits), (440 * mib, True))
        b, fits = cb.kairox_budget(1000 * mib, 1400 * mib, 160 * mib, 288 * mib)
        self.assertEqual((b, fits), (288 * mib, False))  # the floor, marked
        self.assertEqual(cb.kairox_budget(None, 1, 1, 1), (None, True))


class Detect(unittest.TestCase):
    def touch(self, path, text=""):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def test_versions(self):
        with tempfile.TemporaryDirectory() as root:
            with self.assertRaisesRegex(cb.CgroupError, "no memory cgroup"):
                cb.detect_cgroup(root)
            # cgroup2 without the memory controller (this machine's /sys/fs/cgroup/unified)
            self.touch(os.path.join(root, "unified", "cgroup.controllers"), "cpu io pids\n")
            with self.assertRaisesRegex(cb.CgroupError, "memory.limit_in_bytes"):
                cb.detect_cgroup(root)
            self.touch(os.path.join(root, "unified", "cgroup.controllers"), "cpu memory io\n")
            self.assertEqual(cb.detect_cgroup(root), ("v2", os.path.join(root, "unified")))
            self.touch(os.path.join(root, "memory", "memory.limit_in_bytes"), "9223372036854771712")
            self.assertEqual(cb.detect_cgroup(root), ("v1", os.path.join(root, "memory")))

    def test_cgroup_files_v2(self):
        # A fake v2 parent: mkdir makes a plain directory, so the group's files are written
        # as plain files and read back.
        with tempfile.TemporaryDirectory() as root:
            self.touch(os.path.join(root, "cgroup.subtree_control"), "")
            g = cb.Cgroup("v2", root, "g", 12288)
            with open(os.path.join(root, "cgroup.subtree_control")) as f:
                self.assertEqual(f.read(), "+memory")
            with open(os.path.join(g.path, "memory.max")) as f:
                self.assertEqual(f.read(), "12288")
            self.touch(os.path.join(g.path, "memory.peak"), "4096\n")
            self.touch(os.path.join(g.path, "memory.events"), "low 0\nhigh 0\nmax 7\noom 0\n"
                       "oom_kill 1\n")
            self.assertEqual(g.stats(), {"peak_bytes": 4096, "limit_hits": 7, "oom_kills": 1})


class Plan(unittest.TestCase):
    def test_alternates_and_budgets(self):
        a = cb.parse_args(["-m", "/m.gguf", "--limits", "0,50,25", "--policies", "static,lru",
                           "-n", "8", "--bin", "/b"])
        a.engines = "kairox,llama.cpp"
        a.resident_reference = False
        split = {"file_bytes": 4000 * cb.MIB, "non_ffn_bytes": 1400 * cb.MIB}
        plan = cb.make_plan(a, split, "/s.gguf")
        self.assertEqual([(p["limit_pct"], p["engine"], p["policy"]) for p in plan], [
            (0, "kairox", "all-in-RAM"), (0, "llama.cpp", "dense mmap"),
            (50, "llama.cpp", "dense mmap"), (50, "kairox", "lru"), (50, "kairox", "static"),
            (25, "kairox", "static"), (25, "kairox", "lru"), (25, "llama.cpp", "dense mmap")])
        self.assertNotIn("--ram-budget", plan[0]["command"])
        cmd = plan[3]["command"]
        self.assertEqual(cmd[cmd.index("--ram-budget") + 1], f"{(2000 - 1400 - 160) * 1024}K")
        self.assertEqual(cmd[cmd.index("--policy") + 1], "lru")
        self.assertIn("--no-probes", cmd)
        self.assertFalse(plan[5]["non_ffn_fits"])
        a.resident_reference = True
        plan = cb.make_plan(a, split, "/s.gguf")
        self.assertEqual(plan[1]["policy"], "static, 100 % resident")
        self.assertEqual(plan[1]["command"][-4:], ["--ram-budget", "100%", "--policy", "static"])
        a.engines = "llama.cpp-repack,llama.cpp"  # the repacked peer runs without a limit only
        self.assertEqual([(p["limit_pct"], p["policy"]) for p in cb.make_plan(a, split, "/s")],
                         [(0, "dense repacked"), (0, "dense mmap"), (50, "dense mmap"),
                          (25, "dense mmap")])
        with self.assertRaisesRegex(ValueError, "unknown engine"):
            cb.make_plan(cb.parse_args(["-m", "/m", "--engines", "vllm"]), split, "/s")


class Wrapper(unittest.TestCase):
    def test_joins_before_exec(self):
        with tempfile.TemporaryDirectory() as d:
            procs = os.path.join(d, "cgroup.procs")
            warm = os.path.join(d, "w")
            with open(warm, "w") as f:
                f.write("x")
            r = subprocess.run(cb.wrap(procs, ["sh", "-c", "echo $$"], [warm]),
                               capture_output=True, text=True, check=True)
            with open(procs) as f:
                self.assertEqual(f.read().strip(), r.stdout.strip())  # exec kept the pid

    def test_run_and_timeout(self):
        class FakeGroup:  # run_in_group only needs the procs file
            procs = os.path.join(tempfile.gettempdir(), f"kx_cgbench_test_{os.getpid()}")
        try:
            r = cb.run_in_group(FakeGroup, ["sh", "-c", "echo out; echo err >&2; exit 3"], 30)
            self.assertEqual((r["rc"], r["stdout"], r["stderr"], r["timed_out"]),
                             (3, "out\n", "err\n", False))
            self.assertGreater(r["max_rss_bytes"], 0)
            r = cb.run_in_group(FakeGroup, ["sleep", "30"], 0.3)
            self.assertTrue(r["timed_out"])
            self.assertEqual(r["rc"], -9)
            self.assertLess(r["wall_s"], 10)
        finally:
            os.unlink(FakeGroup.procs)


class Table(unittest.TestCase):
    def test_rows(self):
        base = {"limit": 1024 * cb.MIB, "limit_pct": 50, "ram_budget": 300 * cb.MIB,
                "non_ffn_fits": True, "load_before": 2.0, "load_after": 2.5,
                "peak_bytes": 1000 * cb.MIB, "max_rss_bytes": 700 * cb.MIB}
        kx = dict(base, engine="kairox", policy="static", tg_ts=0.75,
                  disk_read_bytes_per_token=900 * cb.MIB, read_bytes_per_token=880 * cb.MIB,
                  hit_rate=0.1, needed_fraction=0.8, io_wait_ms_per_token=512.0)
        self.assertEqual(cb.table_row(kx), "| 50 % (1024 MiB) | kairox | static | 300 | 0.750 | "
                         "900 | 880 | 10.0 | 80.0 | 512 | 700 | 1000 | 2.0 / 2.5 |")
        ll = dict(base, engine="llama.cpp", policy="dense mmap", ram_budget=None,
                  non_ffn_fits=False, error="killed after 600 s",
                  partial={"tokens": 3, "seconds": 60.0})
        row = cb.table_row(ll)
        self.assertIn("**killed after 600 s** (3 tokens in 60 s: 0.050 t/s)", row)
        self.assertIn("| – ¹ |", row)
        md = cb.markdown({"model": "/m.gguf", "file_bytes": 4e9, "ffn_bytes": 2.5e9,
                          "non_ffn_bytes": 1.5e9, "bundle_bytes": 143360, "cgroup": "v1",
                          "n_gen": 8, "tg_tokens": "greedy", "threads": 2, "date": "now"},
                         [kx, ll], {"load": 1.0, "seq_direct_gbps": 2.5, "chunk_bytes": 143360,
                                    "random": [{"backend": "pread", "depth": 1, "gbps": 0.5},
                                               {"backend": "io_uring", "depth": 64,
                                                "gbps": 2.0}]})
        self.assertIn("non-FFN weights alone exceed the limit", md)
        self.assertIn("random 140 KiB reads (one bundle): pread qd1 0.50, io_uring qd64 2.00", md)
        json.dumps(kx)  # rows are what the JSON holds


if __name__ == "__main__":
    unittest.main()
