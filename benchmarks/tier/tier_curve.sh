#!/usr/bin/env bash
# Decode speed of FFN bundles streamed from disk under a RAM budget
# (docs/tiers.md): for each budget (a share of the sidecar's bundle bytes)
# and each placement policy, kairox-bench tg with --ram-budget, beside the
# same sparse model with every bundle in RAM and the dense model, all in one
# session. Writes DIR/tier_curve.csv (one row per run) and DIR/tier_log.csv
# (per layer step of one run: λ, resident groups, reads, stalls), then draws
# DIR/tier_curve.png and DIR/tier_lambda.png with plot_tier.py.
#
#   benchmarks/tier/tier_curve.sh [-m MODEL] [-s SIDECAR] [-b "100 75 50 25 10"]
#                                 [-p "static lru tam tam-adaptive"] [-n TG] [-r REPS]
#                                 [-t THREADS] [-o DIR] [-L LOG_POLICY] [-B LOG_BUDGET]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${KAIROX_BIN:-$here/build/bin}"
model="${KAIROX_MODEL:-$HOME/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
sidecar=""
budgets="100 75 50 25 10"
policies="static lru tam tam-adaptive"
tg=64; reps=3; threads=2; out="${TMPDIR:-/tmp}/kairox-tier"; log_policy="tam-adaptive"; log_budget=50
while getopts "m:s:b:p:n:r:t:o:L:B:" opt; do
  case "$opt" in
    m) model="$OPTARG" ;; s) sidecar="$OPTARG" ;; b) budgets="$OPTARG" ;; p) policies="$OPTARG" ;;
    n) tg="$OPTARG" ;; r) reps="$OPTARG" ;; t) threads="$OPTARG" ;; o) out="$OPTARG" ;;
    L) log_policy="$OPTARG" ;; B) log_budget="$OPTARG" ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
  esac
done
[[ -n "$sidecar" ]] || sidecar="${model%.gguf}.kairox.gguf"
[[ -f "$sidecar" ]] || { echo "tier_curve: no sidecar at $sidecar (run kairox-prepare -m $model)" >&2; exit 1; }
mkdir -p "$out"
csv="$out/tier_curve.csv"

# One kairox-bench run; prints "name,avg_ts,stddev_ts,needed,hit_rate,read_mib,read_ops,io_wait_ms,ffn_ms,lambda".
bench() {
  "$bin/kairox-bench" -m "$model" --sidecar "$sidecar" -t "$threads" -p 0 -n "$tg" -r "$reps" \
      -o json "$@" 2>/dev/null | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    if not r["kx_test"].startswith("tg"):
        continue
    t = r.get("kx_tiered", False)
    g = lambda k: r.get(k, 0) if t else 0
    print("%s,%.3f,%.3f,%.4f,%.4f,%.3f,%.1f,%.4f,%.4f,%.4f" % (
        r["kx_test"], r["avg_ts"], r["stddev_ts"], g("kx_needed_fraction"), g("kx_hit_rate"),
        g("kx_read_bytes_per_token") / 1048576.0, g("kx_read_ops_per_token"),
        g("kx_io_wait_ms_per_token"), g("kx_ffn_ms_per_token"), g("kx_lambda_mean")))'
}

echo "policy,budget_pct,test,tg_ts,tg_sd,needed,hit_rate,read_mib_per_token,read_ops_per_token,io_wait_ms_per_token,ffn_ms_per_token,lambda" > "$csv"
# The references: dense and all-in-RAM sparse (one kairox-bench run gives both
# beside a tiered run at 100 %).
while IFS=, read -r name rest; do
  case "$name" in
    *dense*) echo "dense,,$name,$rest" >> "$csv" ;;
    *all-in-RAM*) echo "all-in-RAM,,$name,$rest" >> "$csv" ;;
  esac
done < <(bench --ram-budget 100% --policy static)
for b in $budgets; do
  for p in $policies; do
    bench --no-dense --ram-budget "$b%" --policy "$p" | while IFS=, read -r name rest; do
      echo "$p,$b,$name,$rest" >> "$csv"
    done
    echo "tier_curve: $p at $b %: $(tail -1 "$csv")" >&2
  done
done
# λ over time: one run with the per-layer-step log.
"$bin/kairox-bench" -m "$model" --sidecar "$sidecar" -t "$threads" -p 0 -n "$tg" -r "$reps" \
    --no-dense --ram-budget "$log_budget%" --policy "$log_policy" --tier-log "$out/tier_log.csv" \
    >/dev/null 2>&1
python3 "$here/benchmarks/tier/plot_tier.py" "$out" || echo "tier_curve: plotting failed (see above)" >&2
column -s, -t "$csv"
