#!/usr/bin/env bash
# kairox-bench on a tiny model (no real model needed, so: unit): comma lists expand into one
# row per test in llama-bench's order (thread counts, then depths, then a pp test per -p
# value and a tg test per -n value; 0 skips), and csv, jsonl, json and md parse with
# llama-bench's field names.
#
#   bench_formats_test.sh path/to/kairox-bench path/to/kx_write_tiny_model SCRATCH_DIR
set -euo pipefail
bench=$1
writer=$2
dir=$3
mkdir -p "$dir"
"$writer" "$dir/tiny.gguf"
model=$dir/tiny.gguf

# jsonl: -p 8,16 -n 0,4 -t 1,2 -r 2 → per thread count pp8, pp16, tg4 (n 0 skipped).
"$bench" -m "$model" -p 8,16 -n 0,4 -t 1,2 -r 2 -o jsonl >"$dir/out.jsonl" 2>"$dir/err.txt"
python3 - "$dir/out.jsonl" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [json.loads(line) for line in lines]  # each line is one object
got = [(r["n_threads"], r["n_prompt"], r["n_gen"], r["n_depth"], r["kx_test"]) for r in rows]
want = [(1, 8, 0, 0, "pp8"), (1, 16, 0, 0, "pp16"), (1, 0, 4, 0, "tg4"),
        (2, 8, 0, 0, "pp8"), (2, 16, 0, 0, "pp16"), (2, 0, 4, 0, "tg4")]
assert got == want, f"rows {got}, expected {want}"
fields = ["cpu_info", "gpu_info", "backends", "model_filename", "model_type", "model_size",
          "model_n_params", "n_batch", "n_threads", "type_k", "type_v", "n_gpu_layers",
          "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts",
          "stddev_ts", "samples_ns", "samples_ts"]
for r in rows:
    missing = [f for f in fields if f not in r]
    assert not missing, f"{r['kx_test']}: missing {missing}"
    assert list(r)[:len(fields)] == fields, f"field order {list(r)[:len(fields)]}"
    assert len(r["samples_ns"]) == 2 and len(r["samples_ts"]) == 2, r["samples_ns"]
    assert r["avg_ts"] > 0 and r["avg_ns"] > 0, r
    assert r["model_filename"].endswith("tiny.gguf")
    assert r["type_k"] == "f16" and r["backends"] == "CPU", r
print("jsonl ok:", len(rows), "rows")
EOF

# csv: -d lists too; -t once; values quoted; one header, every row as wide as it.
"$bench" -m "$model" -p 8 -n 4 -d 0,4 -r 1 -t 1 -o csv >"$dir/out.csv" 2>>"$dir/err.txt"
python3 - "$dir/out.csv" <<'EOF'
import csv, sys
text = open(sys.argv[1]).read()
rows = list(csv.reader(text.splitlines()))
header, body = rows[0], rows[1:]
for col in ["cpu_info", "backends", "model_type", "model_size", "model_n_params", "n_threads",
            "type_k", "type_v", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns",
            "stddev_ns", "avg_ts", "stddev_ts", "kx_test", "kx_fraction_of_ceiling"]:
    assert col in header, f"no column {col} in {header}"
assert "samples_ns" not in header and "kx_profile" not in header, header
assert all(len(r) == len(header) for r in body), [len(r) for r in body]
recs = [dict(zip(header, r)) for r in body]
got = [(r["n_depth"], r["kx_test"]) for r in recs]
assert got == [("0", "pp8"), ("0", "tg4"), ("4", "pp8 @ d4"), ("4", "tg4 @ d4")], got
for r in recs:
    assert float(r["avg_ts"]) > 0 and int(r["n_threads"]) == 1, r
    assert r["type_k"] == "f16" and r["type_v"] == "f16", r
# llama-bench quotes every value.
assert all(line.startswith('"') for line in text.splitlines()[1:]), text
print("csv ok:", len(recs), "rows")
EOF

# md (the default) and json: the same tests.
"$bench" -m "$model" -p 8 -n 4 -r 1 -t 1 >"$dir/out.md" 2>>"$dir/err.txt"
grep -qE '^\| model +\| +size \| +params \| backend +\| threads \| +test \| +t/s \|' "$dir/out.md" ||
  { echo "FAIL: md header"; cat "$dir/out.md"; exit 1; }
[[ $(grep -c '^| .*| *pp8 *|' "$dir/out.md") == 1 && $(grep -c '^| .*| *tg4 *|' "$dir/out.md") == 1 ]] ||
  { echo "FAIL: md rows"; cat "$dir/out.md"; exit 1; }
"$bench" -m "$model" -p 8 -n 4 -r 1 -t 1 -o json >"$dir/out.json" 2>>"$dir/err.txt"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert [t["kx_test"] for t in j] == ["pp8", "tg4"], j
print("json ok")' "$dir/out.json"

# --no-probes (what benchmarks/tier/cgroup_bench.py runs under a memory limit): no bandwidth
# probe, so no ceiling; the storage bytes of the timed tokens are reported either way.
# --tg-tokens greedy feeds argmaxes: two runs decode the same tokens, so equal bytes.
for probes in "" --no-probes; do
  "$bench" -m "$model" -p 0 -n 4 -r 1 -t 1 -o json --tg-tokens greedy $probes \
      >"$dir/probes$probes.json" 2>>"$dir/err.txt"
done
python3 -c '
import json, sys
on, off = (json.load(open(p))[0] for p in sys.argv[1:3])
assert on["kx_bw_dram_gbps"] > 0 and on["kx_ceiling_dram_ts"] > 0, on
assert off["kx_bw_dram_gbps"] == 0 and off["kx_ceiling_dram_ts"] == 0, off
for r in (on, off):
    assert r["kx_disk_read_bytes_per_token"] >= 0 and r["avg_ts"] > 0, r
print("probes ok")' "$dir/probes.json" "$dir/probes--no-probes.json"

# Bad lists name the flag and the range, before any model is read.
fail=0
check_error() {
  local want=$1; shift
  local err rc=0
  err=$("$bench" "$@" 2>&1 >/dev/null) || rc=$?
  if (( rc != 1 )) || [[ $err != *"$want"* ]]; then
    echo "FAIL: kairox-bench $*: exit $rc, stderr: $err (expected '$want')"
    fail=1
  fi
}
check_error "--n-prompt: expects an integer in [0, 16777216], got 'x'" -m "$model" -p 8,x
check_error "--threads: expects an integer in [1, 4096], got '0'" -m "$model" -t 2,0
check_error "--n-gen: expects an integer in [0, 16777216], got '-1'" -m "$model" -n -1
check_error "--output: expects md, csv, json or jsonl, got 'xml'" -m "$model" -o xml
check_error "nothing to run" -m "$model" -p 0 -n 0,0
check_error "--tg-tokens: expects random or greedy, got 'argmax'" -m "$model" --tg-tokens argmax
exit $fail
