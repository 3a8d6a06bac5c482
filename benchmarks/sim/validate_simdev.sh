#!/bin/bash
# kairox-sim against `--device sim` (docs/sim.md, "The sim device"): per rep, the CPU calibration
# (kairox-bench, every bundle resident, 2 threads and 1 thread) and kairox-cli on the sim device
# with the split FFN at --vram-ffn 30 % and 60 % (static), each with --trace.
#   S=sidecar.kairox.gguf benchmarks/sim/validate_simdev.sh OUT && python3 benchmarks/sim/validate_simdev.py OUT
BIN=${KAIROX_BIN:-build-cpu/bin}
M=${M:-~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf}
S=${S:?the sidecar of $M (kairox-prepare)}
P="Explain how a CPU cache works, step by step."
export KAIROX_SIDECAR_AUTO=0
O=${1:?output folder}; mkdir -p $O
for rep in 1 2; do
  echo "== rep $rep $(date -u +%T) $(uptime)"
  $BIN/kairox-bench -m $M --sidecar $S -p 0 -n 64 -r 3 --no-dense --ram-budget 100% --policy static -t 2 -o json > $O/calib2-$rep.json 2>/dev/null
  $BIN/kairox-bench -m $M --sidecar $S -p 0 -n 64 -r 3 --no-dense --ram-budget 100% --policy static -t 1 -o json > $O/calib1-$rep.json 2>/dev/null
  echo "calib $(uptime)"
  for v in 30 60; do
    $BIN/kairox-cli -m $M --sidecar $S -p "$P" -n 64 -s 1 --temp 0 -t 2 --device sim -ngl 0 --vram-ffn $v% --device-policy static --trace $O/sim$v-$rep.kxtr > $O/sim$v-$rep.out 2> $O/sim$v-$rep.err
    echo "$v $(uptime) $(tail -1 $O/sim$v-$rep.err | grep -o 'generated.*t/s')"
  done
done
echo "== end $(date -u +%T) $(uptime)"
