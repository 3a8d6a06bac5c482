#!/usr/bin/env python3
"""Draws kairox-sim's results (its --csv output) as PNGs, one figure per hardware profile:
tokens/s vs VRAM budget and reload bytes per token vs VRAM budget, one line per policy.
Needs matplotlib (Debian: apt-get install python3-matplotlib; run it with /usr/bin/python3).

  build/bin/kairox-sim TRACE --profile rtx4090-pcie4,h100-pcie5 --csv > sim.csv
  /usr/bin/python3 benchmarks/sim/plot.py sim.csv [OUT_PREFIX]   # writes OUT_PREFIX-<profile>.png

The paper's figures from benchmarks/sim/paper.py's CSVs (docs/sim.md):
  /usr/bin/python3 benchmarks/sim/plot.py --paper docs/sim/paper docs/sim
"""
import csv
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--paper":
        if len(sys.argv) < 4:
            sys.exit(__doc__)
        import plot_paper
        plot_paper.draw(sys.argv[2], sys.argv[3])
        return
    src = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else src.rsplit(".", 1)[0]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: matplotlib is missing (Debian: apt-get install python3-matplotlib, then "
                 "run this with /usr/bin/python3)")
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("plot.py: " + src + " has no rows")
    # hardware -> policy -> [(budget %, tok/s, reload KB/token)]
    series = defaultdict(lambda: defaultdict(list))
    for r in rows:
        series[r["hardware"]][r["policy"]].append(
            (100 * float(r["budget"]), float(r["tokens_per_s"]),
             float(r["reload_bytes_per_token"]) / 1e3))
    for hw, policies in series.items():
        fig, (ax_ts, ax_io) = plt.subplots(1, 2, figsize=(11, 4.2))
        for name, pts in sorted(policies.items()):
            pts.sort()
            budgets = [p[0] for p in pts]
            ax_ts.plot(budgets, [p[1] for p in pts], marker="o", label=name)
            ax_io.plot(budgets, [p[2] for p in pts], marker="o", label=name)
        ax_ts.set(xlabel="VRAM budget (% of FFN groups per layer)", ylabel="simulated tokens/s",
                  title=hw + ": decode throughput")
        ax_io.set(xlabel="VRAM budget (% of FFN groups per layer)",
                  ylabel="reload KB per token (host to device)", title=hw + ": reload traffic")
        for ax in (ax_ts, ax_io):
            ax.grid(True, alpha=0.3)
        ax_ts.legend(fontsize=8)
        fig.tight_layout()
        out = "%s-%s.png" % (prefix, hw)
        fig.savefig(out, dpi=110)
        print(out)


if __name__ == "__main__":
    main()
