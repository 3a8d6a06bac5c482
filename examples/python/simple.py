#!/usr/bin/env python3
"""simple.py: generate text with kairox from Python (the ctypes package in capi/python).

    python3 -m venv venv && venv/bin/pip install ./capi/python
    KAIROX_LIBRARY=build/lib/libkairox.so venv/bin/python examples/python/simple.py [MODEL] [PROMPT]
"""
import os
import sys

import kairox


def main() -> int:
    path = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KAIROX_MODEL")) or \
        os.path.expanduser("~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    question = sys.argv[2] if len(sys.argv) > 2 else "What is 2 + 2?"
    try:
        model = kairox.Model(path)
    except kairox.KairoxError as e:
        print(f"simple.py: {e}", file=sys.stderr)
        return 1
    info = model.info
    print(f"kairox {kairox.version()}, {info.arch}, {info.n_layer} layers, "
          f"{info.chat_template_kind} template")
    session = model.session(n_ctx=1024)
    prompt = model.apply_chat_template([{"role": "user", "content": question}])
    print(f"> {question}")
    for piece in session.generate(prompt, max_tokens=64, sampler=kairox.Sampler.greedy()):
        print(piece, end="", flush=True)
    print()
    stats = session.stats()
    print(f"[{session.last_result.n_tokens} tokens, stop: {session.last_result.stop_reason}, "
          f"{stats['gen_tokens_per_second']:.1f} t/s]", file=sys.stderr)
    return 0 if session.last_result.n_tokens > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
