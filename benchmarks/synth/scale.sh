#!/usr/bin/env bash
# The 7B/13B test bed of docs/scale.md: a kairox-synth model, its sidecar (kairox-prepare,
# timed with /usr/bin/time -v), an activity trace of greedy decode (kairox-cli --trace, for
# kairox-sim) and the trace's realised statistics checked against the request.
#
#   benchmarks/synth/scale.sh [-s SHAPE] [-l LAYERS] [-a ACT] [-T TOKENS] [-n DECODE] [-o DIR]
#
# -l 0 writes every layer of the shape; a smaller number writes that many layers of the same
# per-layer shape (docs/scale.md says when that stands in for the whole model). Files go to
# DIR (default /work/synth-data: 4-8 GB a model; not the repository, not /tmp).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${KAIROX_BIN:-$here/build/bin}"
shape=7b; layers=0; act=relu; tokens=1024; decode=64; out=/work/synth-data; threads=2
while getopts "s:l:a:T:n:o:t:" opt; do
  case "$opt" in
    s) shape="$OPTARG" ;; l) layers="$OPTARG" ;; a) act="$OPTARG" ;; T) tokens="$OPTARG" ;;
    n) decode="$OPTARG" ;; o) out="$OPTARG" ;; t) threads="$OPTARG" ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
name="$shape-$act.q4_0"
[[ "$layers" == 0 ]] || name="$shape-l$layers-$act.q4_0"
model="$out/$name.gguf"; sidecar="$out/$name.kairox.gguf"; trace="$out/$name.kxtr"
# Calibration text: the repository's own docs, evaluated as prompt batches (generating the
# calibration at 7B would take ~1 s a token on 2 cores).
calib="$out/calib.txt"
[[ -f "$calib" ]] || cat "$here"/docs/*.md "$here"/README.md > "$calib"
prompt="Explain how a CPU cache works, step by step."

/usr/bin/time -v "$bin/kairox-synth" --shape "$shape" --layers "$layers" --act "$act" \
  --type q4_0 -t "$threads" -o "$model" 2> "$out/$name.synth.log"
/usr/bin/time -v "$bin/kairox-prepare" -m "$model" -o "$sidecar" --calib-file "$calib" \
  --tokens "$tokens" -t "$threads" --report "$out/$name.prepare.json" > "$out/$name.prepare.log" 2>&1
# Without a tier, --trace decodes masked-dense: records carry the predicted and the actual set.
KAIROX_SIDECAR_AUTO=0 "$bin/kairox-cli" -m "$model" --sidecar "$sidecar" -p "$prompt" \
  -n "$decode" --temp 0 -t "$threads" --trace "$trace" > "$out/$name.cli.log" 2>&1
# The prompt's steps come first (their tokens are not on the decode cycle): skip them. The
# byte-level tokenizer has no merges and adds no BOS, so the prompt is one token a byte.
"$bin/kairox-synth" --measure "$trace" --first-step "${#prompt}" --check "$model"
