"""Dumps real predictor training data from SmolLM2 for bench_predictor --data.

For every layer l it writes DIR/x{l}.bin (float32, tokens x n_embd: the FFN's
input as the MLP sees it, i.e. after post_attention_layernorm) and DIR/y{l}.bin
(uint8 0/1, tokens x n_ff: neuron active iff |silu(gate . x)| is above the
layer's (1 - active_frac) quantile, a CATS-style definition). Adjacent
prediction trains on x{l} with labels y{l+1}. Not part of the build: a research
helper run in /tmp/venv-ref (torch, transformers, gguf).

  /tmp/venv-ref/bin/python dump_activity.py MODEL.gguf OUT_DIR 12288 0.3
"""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SEQ_LEN = 512  # tokens per forward pass
TEXT = '/work/shared/data/text/austen/emma.txt'


def main():
    path, out, n_tok, active_frac = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    torch.set_num_threads(2)
    model_dir, model_file = path.rsplit('/', 1)
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=model_file)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=model_file, torch_dtype=torch.float32).eval()
    ids = tok(open(TEXT).read()[:400000], return_tensors='pt').input_ids[0][:n_tok]
    n_layers = len(model.model.layers)
    xs = {l: [] for l in range(n_layers)}
    acts = {l: [] for l in range(n_layers)}
    for l, layer in enumerate(model.model.layers):
        def hook(mod, args, l=l):
            x = args[0][0]
            xs[l].append(x.detach().clone())
            acts[l].append(mod.act_fn(mod.gate_proj(x)).abs().detach().clone())
        layer.mlp.register_forward_pre_hook(hook)
    with torch.no_grad():
        for s in range(0, len(ids), SEQ_LEN):
            model(ids[s:s + SEQ_LEN][None])
    for l in range(n_layers):
        x = torch.cat(xs[l]).numpy().astype(np.float32)
        a = torch.cat(acts[l]).numpy()
        labels = (a > np.quantile(a, 1 - active_frac)).astype(np.uint8)
        x.tofile(f'{out}/x{l}.bin')
        labels.tofile(f'{out}/y{l}.bin')
        print(l, x.shape, labels.mean(), flush=True)


if __name__ == '__main__':
    main()
