#!/usr/bin/env python3
"""Draws the RAM-tier figures from tier_curve.sh's output directory:
  tier_curve.png   tg (t/s) vs RAM budget per policy, beside all-in-RAM sparse and dense;
  tier_lambda.png  TAM's λ over tokens, with the I/O stall vs FFN compute per token.
matplotlib comes from a private venv (~/.cache/kairox/venv-plot), created on first use:
Debian's system Python refuses pip installs outside a venv.

  python3 benchmarks/tier/plot_tier.py DIR
"""
import csv
import os
import subprocess
import sys
import venv

VENV = os.path.join(os.path.expanduser("~"), ".cache", "kairox", "venv-plot")


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.environ.get("KAIROX_PLOT_IN_VENV") == "1":
        sys.exit("plot_tier: matplotlib is missing from " + VENV)
    if not os.path.exists(py):
        venv.create(VENV, with_pip=True)
    subprocess.check_call([py, "-m", "pip", "install", "-q", "matplotlib"])
    env = dict(os.environ, KAIROX_PLOT_IN_VENV="1")
    sys.exit(subprocess.call([py] + sys.argv, env=env))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_curve(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    refs = {r["policy"]: float(r["tg_ts"]) for r in rows if r["policy"] in ("dense", "all-in-RAM")}
    policies = sorted({r["policy"] for r in rows if r["budget_pct"]})
    for p in policies:
        pts = sorted((float(r["budget_pct"]), float(r["tg_ts"]), float(r["tg_sd"]))
                     for r in rows if r["policy"] == p and r["budget_pct"])
        ax.errorbar([x for x, _, _ in pts], [y for _, y, _ in pts], yerr=[s for _, _, s in pts],
                    marker="o", capsize=3, label=p)
    styles = {"all-in-RAM": ":", "dense": "--"}
    for name, ts in refs.items():
        ax.axhline(ts, linestyle=styles[name], color="gray", label="%s (%.0f t/s)" % (name, ts))
        if name == "all-in-RAM":
            ax.axhline(ts / 2, linestyle="-.", color="lightgray", label="0.5× all-in-RAM")
    ax.set_xlabel("RAM budget for resident bundles (% of the sidecar's bundle bytes)")
    ax.set_ylabel("decode tg (tokens/s)")
    ax.set_title("FFN bundles streamed from disk under a RAM budget")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def plot_lambda(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tokens = {}
    for r in rows:
        t = tokens.setdefault(int(r["token"]), {"lam": [], "wait": 0, "compute": 0, "bytes": 0})
        t["lam"].append(float(r["lambda"]))
        t["wait"] += int(r["io_wait_ns"])
        t["compute"] += int(r["compute_ns"])
        t["bytes"] += int(r["bytes_read"])
    xs = sorted(tokens)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    a1.plot(xs, [sum(tokens[x]["lam"]) / len(tokens[x]["lam"]) for x in xs], label="λ (mean over layers)")
    a1.plot(xs, [min(tokens[x]["lam"]) for x in xs], linewidth=0.6, label="min over layers")
    a1.plot(xs, [max(tokens[x]["lam"]) for x in xs], linewidth=0.6, label="max over layers")
    a1.set_ylabel("TAM λ")
    a1.legend(fontsize=8)
    a1.grid(alpha=0.3)
    a2.plot(xs, [tokens[x]["wait"] / 1e6 for x in xs], label="waiting on reads")
    a2.plot(xs, [tokens[x]["compute"] / 1e6 for x in xs], label="FFN compute")
    a2.set_ylabel("ms per token")
    a2.set_xlabel("token (all repetitions of the run, in order)")
    a2.legend(fontsize=8)
    a2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ensure_matplotlib()
    d = sys.argv[1]
    plot_curve(read_csv(os.path.join(d, "tier_curve.csv")), os.path.join(d, "tier_curve.png"))
    log = os.path.join(d, "tier_log.csv")
    if os.path.exists(log):
        plot_lambda(read_csv(log), os.path.join(d, "tier_lambda.png"))
    print("plot_tier: wrote", ", ".join(f for f in ("tier_curve.png", "tier_lambda.png")
                                         if os.path.exists(os.path.join(d, f))))


if __name__ == "__main__":
    main()
