#!/usr/bin/env bash
# The quality/speed curve of activation sparsity on one model: for each target
# sparsity s, builds a sidecar (kairox-prepare --sparsity s), then measures
#   - perplexity on held-out text, dense / oracle (threshold only) / predictor,
#     evaluated masked-dense in batches (tests/prepare proves the sparse
#     kernels give the same logits as masked-dense);
#   - decode speed (kairox-bench tg) dense vs sparse.
# Prints a markdown table. Takes minutes per level.
#
#   benchmarks/sparse/sparsity_curve.sh [-m MODEL] [-f TEXT] [-l "0.5 0.6 0.7 0.8 0.9"]
#                                       [-c CTX] [-k CHUNKS] [-t THREADS] [-o DIR]
#                                       [-n TG_TOKENS] [-r REPS] [-T CALIBRATION_TOKENS]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${KAIROX_BIN:-$here/build/bin}"
model="${KAIROX_MODEL:-$HOME/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
text="$here/../shared/data/text/austen/persuasion.txt"
levels="0.5 0.6 0.7 0.8 0.9"
ctx=256; chunks=16; threads=2; out="${TMPDIR:-/tmp}/kairox-curve"; tg=64; reps=3; tokens=8192
while getopts "m:f:l:c:k:t:o:n:r:T:" opt; do
  case "$opt" in
    m) model="$OPTARG" ;; f) text="$OPTARG" ;; l) levels="$OPTARG" ;; c) ctx="$OPTARG" ;;
    k) chunks="$OPTARG" ;; t) threads="$OPTARG" ;; o) out="$OPTARG" ;; n) tg="$OPTARG" ;;
    r) reps="$OPTARG" ;; T) tokens="$OPTARG" ;;
    *) echo "usage: $0 [-m MODEL] [-f TEXT] [-l LEVELS] [-c CTX] [-k CHUNKS] [-t THREADS] [-o DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
ppl() { "$bin/kairox-perplexity" -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" "$@" 2>/dev/null | tail -1 | awk '{print $3}'; }
tgs() { "$bin/kairox-bench" -m "$model" -t "$threads" -p 0 -n "$tg" -r "$reps" -o json --no-dense "$@" 2>/dev/null \
          | python3 -c 'import json,sys; d=json.load(sys.stdin); r=[x for x in d if x["kx_test"].startswith("tg")][-1]; print("%.1f" % r["avg_ts"])'; }

dense_ppl=$(ppl --no-sparse)
dense_tg=$(tgs --no-sparse)
echo "model: $(basename "$model"); held-out text: $(basename "$text"), -c $ctx, $chunks chunks; $threads threads"
echo
echo "| s | PPL oracle | PPL predictor | Δ predictor vs dense | tg dense (t/s) | tg sparse (t/s) | speed-up |"
echo "|---|---|---|---|---|---|---|"
echo "| 0 (dense) | $dense_ppl | $dense_ppl | 0 % | $dense_tg | – | – |"
for s in $levels; do
  sc="$out/sidecar-$s.kairox.gguf"
  [ -f "$sc" ] || "$bin/kairox-prepare" -m "$model" -o "$sc" --sparsity "$s" --tokens "$tokens" -t "$threads" > "$out/prepare-$s.txt"
  o=$(ppl --sidecar "$sc" --oracle)
  p=$(ppl --sidecar "$sc")
  t=$(tgs --sidecar "$sc")
  d=$(python3 -c "print('%+.1f %%' % (100*($p/$dense_ppl-1)))")
  x=$(python3 -c "print('%.2fx' % ($t/$dense_tg))")
  echo "| $s | $o | $p | $d | $dense_tg | $t | $x |"
done
