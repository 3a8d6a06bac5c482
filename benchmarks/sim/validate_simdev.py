#!/usr/bin/env python3
"""kairox-sim's VRAM mode against validate_simdev.sh's `--device sim` runs (docs/sim.md, "The
sim device").

The profile: the rtx4090-pcie4 links (what the sim device sleeps by default) and a "device"
bandwidth for the device half of the split FFN; the CPU branch priced by the CPU profile
calibrated as validate_tier.py does (2 threads, every bundle resident); the non-FFN part and
the head (on the CPU with -ngl 0) as --non-ffn-us / --per-token-us from the same profile.
Two device rates: (a) one CPU thread's sparse FFN rate (kairox-bench -t 1), the sim device's
compute if its ops ran the CPU kernels on its one worker thread; (b) the rate at which the
replay matches the 30 % run, used to predict the 60 % run of the same rep.

  python3 benchmarks/sim/validate_simdev.py OUT     (KAIROX_BIN: where kairox-sim is)
"""
import json
import os
import re
import subprocess
import sys

BIN = os.environ.get('KAIROX_BIN', 'build-cpu/bin')
SIM = os.path.join(BIN, 'kairox-sim')
OUT = sys.argv[1]
ENV = dict(os.environ, KAIROX_SIDECAR_AUTO='0')
PROMPT_STEPS = 11   # the prompt runs masked-dense: no device step to replay
MEAN_CTX = PROMPT_STEPS + 32
LINKS = {'memory': '24GiB', 'h2d_gb_per_s': 24.0, 'd2h_gb_per_s': 24.0, 'copy_latency_us': 10.0,
         'shared_h2d_link': True}  # rtx4090-pcie4's


def main():
    shape = json.loads(subprocess.run(
        [SIM, os.path.join(OUT, 'sim30-1.kxtr'), '--policy', 'static', '--budget', '0', '--json'],
        capture_output=True, text=True, env=ENV, check=True).stdout)
    n_layer, nb, n_ff = shape['n_layer'], shape['neuron_bytes'], shape['n_ff']
    attn, head, kv = shape['attn_bytes'], shape['head_bytes'], shape['kv_bytes_per_ctx']

    def rates(c):  # (FFN, rest) in bytes/s, as validate_tier.py calibrates them
        tok_ms, ffn_ms = 1000.0 / c['avg_ts'], c['kx_ffn_ms_per_token']
        ffn = n_layer * n_ff * c['kx_predicted_fraction'] * nb / (ffn_ms * 1e-3)
        rest = (n_layer * attn + head + n_layer * kv * (c['n_gen'] + 1) / 2) / ((tok_ms - ffn_ms) * 1e-3)
        return ffn, rest

    print('| rep | --vram-ffn | measured t/s | (a) one-thread device | error | (b) device fitted to 30 % | error |')
    print('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for rep in (1, 2):
        ffn2, rest2 = rates(json.load(open(os.path.join(OUT, f'calib2-{rep}.json')))[0])
        ffn1, _ = rates(json.load(open(os.path.join(OUT, f'calib1-{rep}.json')))[0])
        cpu_path = os.path.join(OUT, f'cpu-{rep}.json')
        with open(cpu_path, 'w') as f:
            json.dump({'ffn_gb_per_s': [[1.0, ffn2 / 1e9]], 'attn_gb_per_s': rest2 / 1e9,
                       'kv_gb_per_s': rest2 / 1e9, 'head_gb_per_s': rest2 / 1e9}, f)
        layer_us = (attn + kv * MEAN_CTX) / rest2 * 1e6
        token_us = head / rest2 * 1e6

        def simulate(vram, device_gbps):
            prof_path = os.path.join(OUT, 'profile.json')
            with open(prof_path, 'w') as f:
                json.dump({'default': 'sim-cpu', 'profiles': {'sim-cpu': dict(
                    LINKS, description='sim device as measured', device_gb_per_s=device_gbps)}}, f)
            out = subprocess.run(
                [SIM, os.path.join(OUT, f'sim{vram}-{rep}.kxtr'), '--profile', 'sim-cpu', '--policy',
                 'static', '--budget', str(vram), '--placement', 'sidecar', '--lookahead',
                 '--first-step', str(PROMPT_STEPS), '--non-ffn-us', f'{layer_us}', '--per-token-us',
                 f'{token_us}', '--launch-us', '0', '--cpu-profile', cpu_path, '--csv'],
                capture_output=True, text=True, env=dict(ENV, KAIROX_DEVICE_PROFILE=prof_path),
                check=True).stdout
            header, line = out.strip().split('\n')[:2]
            return float(dict(zip(header.split(','), line.split(',')))['tokens_per_s'])

        measured = {}
        for vram in (30, 60):
            err = open(os.path.join(OUT, f'sim{vram}-{rep}.err')).read()
            tg_s = float(re.search(r'generated (\d+) tokens in ([\d.]+) s', err).group(2))
            measured[vram] = 63 / tg_s  # the 63 decode evals of -n 64
        lo, hi = 1e-3, 100.0  # (b): bisection on the 30 % run
        for _ in range(40):
            mid = (lo * hi) ** 0.5
            lo, hi = (lo, mid) if simulate(30, mid) > measured[30] else (mid, hi)
        fitted = (lo * hi) ** 0.5
        for vram in (30, 60):
            a = simulate(vram, ffn1 / 1e9)
            b = simulate(vram, fitted) if vram == 60 else None
            print(f'| {rep} | {vram} % | {measured[vram]:.1f} | {a:.1f} ({ffn1 / 1e9:.2f} GB/s) | '
                  f'{(a / measured[vram] - 1) * 100:+.0f} % | '
                  + (f'{b:.1f} ({fitted:.3f} GB/s) | {(b / measured[vram] - 1) * 100:+.0f} % |'
                     if b is not None else f'fitted here ({fitted:.3f} GB/s) | – |'))


if __name__ == '__main__':
    main()
