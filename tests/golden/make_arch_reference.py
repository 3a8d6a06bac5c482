#!/usr/bin/env python3
"""Transformers goldens for tiny llama, Mistral, Qwen2 and Gemma 3 models (test_arch_golden).

Each model is written by kairox's own test writer, `kx_write_arch_model VARIANT PATH`
(tests/engine/write_arch_model.cc; the specs are ArchGoldenSpec in tests/engine/tiny_model.cc:
seeded random weights, 2 layers, n_embd 64, 4 heads, GQA, a 256-token byte vocabulary), then
loaded by Hugging Face transformers' own GGUF reader (`from_pretrained(dir, gguf_file=...)`,
float32, CPU), which shares no code with kairox. Transformers un-permutes the Q/K rows of
"llama" files and applies rotate-half RoPE; it leaves "qwen2" files as they are. So kairox's
logits agree with these only if it rotates adjacent pairs for llama, NeoX halves for qwen2,
and adds qwen2's Q/K/V biases.

Variants:
    llama    arch "llama", F32 weights, tied head              -> LlamaForCausalLM
    mistral  arch "llama" (llama.cpp writes Mistral 7B as llama), F16 weights, separate head,
             1 KV head, RoPE base 1e6: read by transformers' GGUF loader as a llama (which
             un-permutes Q/K), then its state dict is loaded into a MistralForCausalLM of the
             same configuration, whose logits are recorded -> MistralForCausalLM.
             (transformers would build Mistral itself only for general.name == "mistral",
             and then fails: gguf-py has no "mistral" architecture.)
    qwen2    arch "qwen2", Q/K/V biases, F32 weights, F16 tied head    -> Qwen2ForCausalLM
    gemma3   arch "gemma3", 6 layers, head_dim 256 != n_embd/n_head, 1 KV head, sliding
             window 5 (layer 5 global: transformers' default pattern of 6), QK-norm, post
             norms, GeGLU, scaled embedding, F32 weights, F16 tied head -> Gemma3ForCausalLM

Environment (a venv; never the system Python):
    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch transformers accelerate gguf numpy

Run (after building kx_write_arch_model in a build directory):
    /tmp/venv-ref/bin/python tests/golden/make_arch_reference.py \
        --writer build-arch/tests/kx_write_arch_model [--out tests/golden/arch]

It (re)writes the COMMITTED files under tests/golden/arch/:
    arch.json          token ids, and per variant: the model file's sha256 (the C++ test
                       rewrites the model and requires the same bytes), the transformers
                       class, n_vocab, the logits file, package versions.
    <variant>.f32      float32 little-endian, shape [16][256], C order: teacher-forced
                       logits at every position of the token ids.
"""

import argparse
import hashlib
import importlib.metadata
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

VARIANTS = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}
# 16 byte-token ids, fixed; spread over the vocabulary, one repeat (attention to an
# identical key at another position exercises RoPE's relative phase).
TOKEN_IDS = [72, 101, 108, 108, 111, 44, 32, 107, 97, 105, 114, 111, 120, 200, 3, 255]
N_VOCAB = 256


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def as_mistral(llama):
    """The same weights in transformers' Mistral implementation (no sliding window at 16
    positions; Mistral 7B v0.2+ has none)."""
    c = llama.config
    cfg = transformers.MistralConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
        head_dim=c.hidden_size // c.num_attention_heads,
        max_position_embeddings=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps,
        rope_theta=llama_rope_theta(c), tie_word_embeddings=c.tie_word_embeddings,
        sliding_window=None)
    mistral = transformers.MistralForCausalLM(cfg).to(torch.float32)
    mistral.load_state_dict(llama.state_dict(), strict=True)
    return mistral


def llama_rope_theta(config):
    rp = getattr(config, "rope_parameters", None)
    if rp and "rope_theta" in rp:
        return rp["rope_theta"]
    return config.rope_theta


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writer", required=True, help="path of the built kx_write_arch_model")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "arch"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)  # nothing here is random; set anyway so a change would show

    meta = {
        "token_ids": TOKEN_IDS,
        "generator": "tests/golden/make_arch_reference.py",
        "versions": {p: importlib.metadata.version(p) for p in ("torch", "transformers", "gguf")},
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for variant, cls in VARIANTS.items():
            gguf_name = f"{variant}.gguf"
            subprocess.run([args.writer, variant, str(pathlib.Path(tmp) / gguf_name)], check=True)
            digest = sha256(pathlib.Path(tmp) / gguf_name)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                tmp, gguf_file=gguf_name, dtype=torch.float32)
            if cls == "MistralForCausalLM":
                model = as_mistral(model)
            model.eval()
            got_cls = type(model).__name__
            if got_cls != cls:
                sys.exit(f"{variant}: transformers built {got_cls}, expected {cls}")
            with torch.no_grad():
                logits = model(torch.tensor([TOKEN_IDS])).logits[0].float().numpy()
            assert logits.shape == (len(TOKEN_IDS), N_VOCAB), logits.shape
            logits_file = f"{variant}.f32"
            logits.astype("<f4").tofile(out / logits_file)
            meta["models"][variant] = {
                "sha256": digest,
                "transformers_class": got_cls,
                "n_vocab": N_VOCAB,
                "logits_file": logits_file,
                "top1": [int(i) for i in logits.argmax(axis=1)],
            }
            print(f"{variant}: {got_cls}, sha256 {digest}, logit range "
                  f"[{logits.min():.3f}, {logits.max():.3f}]")
    with open(out / "arch.json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
