#!/usr/bin/env python3
"""kairox-sim's tg predictions against validate_tier.sh's runs (docs/sim.md, "Checked against
the engine: tg").

Per rep: the CPU profile is calibrated from that rep's kairox-bench run with every bundle
resident (--ram-budget 100 %: no reads): the FFN rate = the FFN bytes it computed per token
(predicted fraction x n_ff x layers x bytes per neuron) / its FFN time (the tier's Acquire to
Release); one rate for everything else = (non-FFN weights + LM head + the K/V read at the mean
context) / (its time per token - the FFN time). The disk: bench_io's sequential O_DIRECT
bandwidth and its depth-1 io_uring latency (mean of the runs before and after). Nothing is
fitted to the runs predicted. Then kairox-sim --ram-budget replays each run's own trace.

  python3 benchmarks/sim/validate_tier.py OUT     (KAIROX_BIN: where kairox-sim is)
"""
import json
import os
import re
import statistics
import subprocess
import sys

BIN = os.environ.get('KAIROX_BIN', 'build-cpu/bin')
SIM = os.path.join(BIN, 'kairox-sim')
OUT = sys.argv[1]
AN = os.path.join(OUT, 'an')
PROMPT_STEPS = 11  # validate_tier.sh's prompt: decode starts at trace step 11
IO_CHUNK = 24576   # bench_io's random read size
ENV = dict(os.environ, KAIROX_SIDECAR_AUTO='0')


def disk(path):
    text = open(path).read()
    seq = float(re.search(r'sequential O_DIRECT 1 MiB x4 \(device ceiling\): ([\d.]+)', text).group(1))
    iops = float(re.search(r'io_uring\s+1\s+[\d.]+\s+(\d+)', text).group(1))
    return seq, iops


def main():
    os.makedirs(AN, exist_ok=True)
    ios = [disk(os.path.join(OUT, f'io-{i}.txt')) for i in (0, 1)]
    bw = statistics.mean(s for s, _ in ios)
    lat_us = statistics.mean(1e6 / i for _, i in ios) - IO_CHUNK / (bw * 1e9) * 1e6
    print(f'disk: {bw:.3f} GB/s sequential O_DIRECT, {lat_us:.1f} us a read (io_uring depth 1)')
    shape = json.loads(subprocess.run(
        [SIM, os.path.join(OUT, 'ram-1.kxtr'), '--policy', 'static', '--budget', '0', '--json'],
        capture_output=True, text=True, env=ENV, check=True).stdout)
    n_layer, nb, n_ff = shape['n_layer'], shape['neuron_bytes'], shape['n_ff']
    rows, in_situ_rows, in_situ = [], [], {}

    def simulate(base, budget, policy, profile, disk_gbps, latency_us):
        out = subprocess.run(
            [SIM, os.path.join(OUT, base + '.kxtr'), '--ram-budget', str(budget), '--policy',
             policy, '--cpu-profile', profile, '--disk-gb-per-s', f'{disk_gbps}',
             '--disk-latency-us', f'{latency_us}', '--time-from-step', str(PROMPT_STEPS), '--csv'],
            capture_output=True, text=True, env=ENV, check=True)
        header, line = out.stdout.strip().split('\n')[:2]
        return dict(zip(header.split(','), line.split(',')))

    for rep in (1, 2, 3):
        c = json.load(open(os.path.join(OUT, f'calib-{rep}.json')))[0]
        tok_ms = 1000.0 / c['avg_ts']
        ffn_ms = c['kx_ffn_ms_per_token']
        ffn_bytes = n_layer * n_ff * c['kx_predicted_fraction'] * nb
        mean_ctx = (c['n_gen'] + 1) / 2
        rest_bytes = (n_layer * shape['attn_bytes'] + shape['head_bytes'] +
                      n_layer * shape['kv_bytes_per_ctx'] * mean_ctx)
        rest_gbps = rest_bytes / ((tok_ms - ffn_ms) * 1e-3) / 1e9
        prof = {'description': f'kairox-bench tg{c["n_gen"]} --ram-budget 100% rep {rep} '
                               f'({c["test_time"]})',
                'ffn_gb_per_s': [[1.0, ffn_bytes / (ffn_ms * 1e-3) / 1e9]],
                'attn_gb_per_s': rest_gbps, 'kv_gb_per_s': rest_gbps, 'head_gb_per_s': rest_gbps}
        path = os.path.join(AN, f'cpu-{rep}.json')
        with open(path, 'w') as f:
            json.dump(prof, f, indent=1)
        print(f'rep {rep}: calibration tg {c["avg_ts"]:.2f} t/s, FFN {ffn_ms:.3f} ms/token -> '
              f'{prof["ffn_gb_per_s"][0][1]:.2f} GB/s, the rest {tok_ms - ffn_ms:.3f} ms/token -> '
              f'{rest_gbps:.2f} GB/s')
        # A second disk, calibrated in place: the bandwidth at which the replay's I/O wait
        # equals the engine's measured stall in this rep's 50 % static run (bisection), to
        # predict the 25 % runs with (a different run again; the stall is systematically above
        # the bench_io disk's wait, docs/sim.md).
        lo, hi = 0.05, 20.0
        for _ in range(30):
            mid = (lo * hi) ** 0.5
            r = simulate(f't50-static-{rep}', 50, 'static', path, mid, lat_us)
            if float(r['io_wait_ms']) > float(r['recorded_stall_ms']):
                lo = mid
            else:
                hi = mid
        in_situ[rep] = (lo * hi) ** 0.5
        print(f'rep {rep}: in-place disk from the 50 % static run: {in_situ[rep]:.3f} GB/s')
        runs = [('no budget', 100, 'static', f'ram-{rep}')] + [
            (f'{b} %', b, p, f't{b}-{p}-{rep}') for b in (50, 25) for p in ('static', 'tam')]
        for name, budget, policy, base in runs:
            err = open(os.path.join(OUT, base + '.err')).read()
            tg_s = float(re.search(r'generated \d+ tokens in ([\d.]+) s', err).group(1))
            r = simulate(base, budget, policy, path, bw, lat_us)
            measured = int(r['tokens']) / tg_s  # tg_s covers these evals (and the sampling)
            predicted = float(r['tokens_per_s'])
            rows.append((rep, name, policy, measured, predicted, predicted / measured - 1, r))
            if budget == 25:
                r2 = simulate(base, budget, policy, path, in_situ[rep], lat_us)
                in_situ_rows.append((rep, name, policy, measured, float(r2['tokens_per_s']),
                                     float(r2['tokens_per_s']) / measured - 1, r2))
    print('\n| rep | run | policy | measured t/s | predicted t/s | error | MiB read/token '
          '(sim = engine) | layer steps equal | I/O wait ms/token sim / engine |')
    print('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for rep, name, policy, measured, predicted, error, r in rows:
        print(f'| {rep} | {name} | {policy} | {measured:.1f} | {predicted:.1f} | {error * 100:+.0f} % '
              f'| {float(r["mib_read_per_token"]):.2f} = {float(r["recorded_mib_per_token"]):.2f} '
              f'| {r["equal_steps"]} of {r["recorded_steps"]} '
              f'| {float(r["io_wait_ms"]):.2f} / {float(r["recorded_stall_ms"]):.2f} |')
    errors = [abs(e) for *_, e, _ in rows]
    print(f'\n|error|: median {statistics.median(errors) * 100:.0f} %, max {max(errors) * 100:.0f} %, '
          f'{sum(e <= 0.2 for e in errors)} of {len(errors)} within 20 %')
    print('\n25 % runs with the disk calibrated in place (from the same rep\'s 50 % static run):')
    print('| rep | policy | measured t/s | predicted t/s | error | I/O wait ms/token sim / engine |')
    print('| --- | --- | ---: | ---: | ---: | ---: |')
    for rep, name, policy, measured, predicted, error, r in in_situ_rows:
        print(f'| {rep} | {policy} | {measured:.1f} | {predicted:.1f} | {error * 100:+.0f} % '
              f'| {float(r["io_wait_ms"]):.2f} / {float(r["recorded_stall_ms"]):.2f} |')


if __name__ == '__main__':
    main()
