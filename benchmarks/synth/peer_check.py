#!/usr/bin/env python3
"""Loads a kairox-synth model in llama.cpp (llama-cpp-python, the peer venv) and decodes greedily.

    ~/.cache/kairox/peer-venv/bin/python benchmarks/synth/peer_check.py MODEL.gguf [N]

Prints the prompt's tokens and N decoded token ids: kairox-cli -p "hello world" -n N --temp 0
decodes the same ids (the LM head's successor map does not depend on the FFN, which llama.cpp
computes as SwiGLU because it ignores llama.feed_forward_activation). docs/scale.md.
"""
import sys

from llama_cpp import Llama


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    m = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
    toks = m.tokenize(b"hello world", add_bos=False, special=False)
    print("prompt tokens", toks)
    m.eval(toks)
    out = []
    for _ in range(n):
        t = m.sample(temp=0.0)
        out.append(t)
        m.eval([t])
    print("decoded", out)
    print("distinct", len(set(out)), "of", len(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
