#!/usr/bin/env python3
"""kairox-server under load: N concurrent streaming clients for a fixed number of requests, for
each N in --parallel (the server is started with --parallel N --queue N for each, so no request
waits or is refused). Prints a table and, with --json, writes the figures:

    benchmarks/server/load.py -m MODEL [--server build/bin/kairox-server] [--parallel 1,2,4]
                              [--requests 16] [--max-tokens 32] [--threads T] [--json out.json]

Per N: requests/s (requests / wall time), aggregate tokens/s (completion tokens / wall time),
tokens/s per stream (per request: (completion tokens - 1) / (last token time - first token
time), the median), first-token latency p50 and p99 (request sent -> first content chunk).
Every request is a different chat prompt with temperature 0 (greedy) and stream_options
include_usage for the token count. Standard library only. /proc/loadavg before and after is
printed: the figures depend on what else the machine runs. A benchmark, not a test.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

STARTUP_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 600
LISTENING = re.compile(r"listening on http://([0-9.]+):([0-9]+)")


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))
    return ordered[k]


def start_server(args: argparse.Namespace, n: int) -> subprocess.Popen:
    cmd = [args.server, "-m", args.model, "--port", "0", "--parallel", str(n), "--queue", str(n),
           "--ctx-size", str(args.ctx_size)]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, KAIROX_SIDECAR_AUTO="0"))
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = LISTENING.search(line)
        if m:
            proc.host, proc.port = m.group(1), int(m.group(2))  # type: ignore[attr-defined]
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain
            return proc
    proc.kill()
    sys.exit("kairox-server did not start")


def one_request(host: str, port: int, prompt: str, max_tokens: int) -> Dict[str, Any]:
    body = json.dumps({"messages": [{"role": "user", "content": prompt}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    sent = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    token_times: List[float] = []
    tokens = 0
    for raw in resp:  # bounded by max_tokens and the timeout
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        payload = line[len("data: "):]
        if payload == "[DONE]":
            break
        event = json.loads(payload)
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
        if event["choices"] and event["choices"][0]["delta"].get("content"):
            token_times.append(time.perf_counter())
    conn.close()
    done = time.perf_counter()
    per_stream = float("nan")
    if tokens > 1 and len(token_times) > 1 and token_times[-1] > token_times[0]:
        per_stream = (tokens - 1) / (token_times[-1] - token_times[0])
    return {"ttft_s": (token_times[0] - sent) if token_times else float("nan"),
            "tokens": tokens, "seconds": done - sent, "tokens_per_s": per_stream}


def run_level(args: argparse.Namespace, n: int) -> Dict[str, Any]:
    proc = start_server(args, n)
    host, port = proc.host, proc.port  # type: ignore[attr-defined]
    try:
        one_request(host, port, "Warm up.", 4)
        prompts = [f"Tell me a short fact about the number {i}." for i in range(args.requests)]
        results: List[Dict[str, Any]] = []
        lock = threading.Lock()
        errors: List[BaseException] = []

        def client(index: int) -> None:
            try:
                for k in range(index, len(prompts), n):
                    r = one_request(host, port, prompts[k], args.max_tokens)
                    with lock:
                        results.append(r)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        wall_start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(REQUEST_TIMEOUT_S * args.requests)
        wall = time.perf_counter() - wall_start
        if errors:
            raise errors[0]
    finally:
        proc.terminate()
        proc.wait(60)
    ttft = [r["ttft_s"] for r in results]
    per_stream = [r["tokens_per_s"] for r in results if r["tokens_per_s"] == r["tokens_per_s"]]
    total_tokens = sum(r["tokens"] for r in results)
    return {"parallel": n, "requests": len(results), "wall_s": wall,
            "requests_per_s": len(results) / wall, "tokens_per_s": total_tokens / wall,
            "stream_tokens_per_s_median": statistics.median(per_stream) if per_stream else None,
            "ttft_p50_ms": 1000 * percentile(ttft, 50), "ttft_p99_ms": 1000 * percentile(ttft, 99),
            "completion_tokens": total_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--server", default="build/bin/kairox-server")
    ap.add_argument("--parallel", default="1,2,4", help="comma list of client/session counts")
    ap.add_argument("--requests", type=int, default=16, help="requests per level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--ctx-size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0, help="per session (0: server default)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    load_before = open("/proc/loadavg").read().split()[:3]
    rows = [run_level(args, int(n)) for n in args.parallel.split(",")]
    load_after = open("/proc/loadavg").read().split()[:3]
    print(f"loadavg before {' '.join(load_before)}, after {' '.join(load_after)}; "
          f"{os.cpu_count()} CPUs; {args.requests} requests x {args.max_tokens} tokens per level")
    print("| N | requests/s | tokens/s (all) | tokens/s per stream (median) | "
          "first token p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['parallel']} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
              f"{r['stream_tokens_per_s_median'] or float('nan'):.1f} | "
              f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"loadavg_before": load_before, "loadavg_after": load_after,
                       "args": vars(args), "levels": rows}, f, indent=2)


if __name__ == "__main__":
    main()
