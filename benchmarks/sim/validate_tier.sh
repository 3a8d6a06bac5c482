#!/bin/bash
# kairox-sim against the engine's RAM tier (docs/sim.md, "Checked against the engine: tg"):
# per rep, the calibration run (kairox-bench, every bundle resident: no reads) and, in the
# same minute, the runs kairox-sim predicts (kairox-cli: no budget; --ram-budget 50 % and
# 25 %, static and tam, each with --trace); bench_io before and after for the disk.
#   S=sidecar.kairox.gguf benchmarks/sim/validate_tier.sh OUT && python3 benchmarks/sim/validate_tier.py OUT
BIN=${KAIROX_BIN:-build-cpu/bin}
M=${M:-~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf}
S=${S:?the sidecar of $M (kairox-prepare)}
P="Explain how a CPU cache works, step by step."
export KAIROX_SIDECAR_AUTO=0
O=${1:?output folder}; mkdir -p $O
echo "== io $(date -u +%T) $(uptime)"; $BIN/bench_io $S 2000 5 > $O/io-0.txt 2>&1
$BIN/bench_sparse_ffn -m $M --gs 32 --down-layout blocks -t 2 --json $O/sparse_ffn.json > $O/sparse_ffn.txt 2>&1
for rep in 1 2 3; do
  echo "== rep $rep $(date -u +%T) $(uptime)"
  $BIN/kairox-bench -m $M --sidecar $S -p 0 -n 64 -r 3 --no-dense --ram-budget 100% --policy static -o json > $O/calib-$rep.json 2> $O/calib-$rep.err
  echo "calib $(uptime)"
  $BIN/kairox-cli -m $M --sidecar $S -p "$P" -n 64 -s 1 --temp 0 -t 2 --trace $O/ram-$rep.kxtr > $O/ram-$rep.out 2> $O/ram-$rep.err
  echo "ram $(uptime) $(tail -1 $O/ram-$rep.err | grep -o 'generated.*t/s')"
  for b in 50 25; do
    for pol in static tam; do
      $BIN/kairox-cli -m $M --sidecar $S -p "$P" -n 64 -s 1 --temp 0 -t 2 --ram-budget $b% --policy $pol --trace $O/t$b-$pol-$rep.kxtr > $O/t$b-$pol-$rep.out 2> $O/t$b-$pol-$rep.err
      echo "$b $pol $(uptime) $(tail -1 $O/t$b-$pol-$rep.err | grep -o 'generated.*t/s')"
    done
  done
done
echo "== io $(date -u +%T) $(uptime)"; $BIN/bench_io $S 2000 5 > $O/io-1.txt 2>&1
echo "== end $(date -u +%T) $(uptime)"
