#!/usr/bin/env python3
"""Reference goldens for Gemma 3 270M (Q4_K_M GGUF) from Hugging Face transformers.

transformers reads the very same GGUF (its own dequantisation, its own Gemma3 modelling code:
float32, eager attention, CPU) and its own GGUF tokenizer conversion; nothing is shared with
kairox. test_gemma3_golden (tests/engine/test_gemma3_golden.cc) compares kairox against
these files.

Environment (a venv; never the system Python):
    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch transformers accelerate gguf tokenizers numpy

Run (the model from `cmake/fetch_model.sh gemma3`):
    /tmp/venv-ref/bin/python tests/golden/make_gemma3_reference.py \
        [--model ~/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf] \
        [--shared-data /work/shared/data] [--out tests/golden/gemma3]

It (re)writes the COMMITTED files under tests/golden/gemma3/ (about 300 KB in all):
    tokens.json      token ids (BOS included, as the GGUF's add_bos_token says) of a set of
                     texts, from transformers' GGUF tokenizer.
    logits.json      3 prompts x 32 token ids (BOS first); per position the reference top-16
                     (ids, float32 logits), the log-sum-exp over the whole vocabulary, and the
                     ids of a fixed sample of the vocabulary; the model's sha256; versions.
    logits_sample.f32  float32 little-endian [3][32][N_SAMPLE], C order: the reference logits
                     of the sampled ids (full rows would be 1 MiB per position).
    perplexity.json  kairox-perplexity's rule on an Austen novel: chunks of 256 tokens, BOS in
                     each chunk's first slot, tokens [128, 256) scored; per-chunk NLL sums.
    perplexity_tokens.json  the chunks' token ids, so the C++ side scores the same windows.

Facts this pins down, checked against the modelling code: Gemma 3's GGUF norm weights are
1 + w (transformers' loader subtracts the 1 and its RMSNorm multiplies by 1 + w); head_dim 256
comes from attention.key_length; layers 5, 11, 17 are global (sliding_window_pattern 6), the
others attend to the last 512 positions (key j visible from query i when i - 512 < j <= i)
with RoPE base 10000, the global ones with the file's 1e6; the attention scale is
query_pre_attn_scalar^-0.5 = 256^-0.5; no logit soft-capping.
"""

import argparse
import hashlib
import importlib.metadata
import json
import math
import os
import pathlib

import numpy as np
import torch
import transformers

DEFAULT_MODEL = os.path.expanduser("~/.cache/kairox/models/gemma-3-270m-q4_k_m.gguf")
MODEL_SHA256_PREFIX = "a5fd3b62"
DEFAULT_SHARED_DATA = "/work/shared/data"

N_POSITIONS = 32
N_TOP = 16
N_SAMPLE = 512
SAMPLE_SEED = 20251122
PPL_TEXT = "text/austen/persuasion.txt"
PPL_N_CTX = 256
PPL_N_CHUNKS = 16
PPL_FIRST_SCORED = PPL_N_CTX // 2

# Three prompts of different kinds; each gives more than 32 tokens, the first 32 are used.
PROMPTS = [
    "The capital of France is Paris, a city known for the Eiffel Tower, the Louvre museum, "
    "and its cafes along the Seine. Every year millions of visitors arrive to",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + "
    "fibonacci(n - 2)\n\nfor i in range(10):\n    print(i, fibonacci(i))\n",
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views",
]

# Tokenizer cases: SentencePiece spaces (none prepended: add_space_prefix is false), runs of
# spaces and newlines (user-defined tokens), byte fallback, digits, CJK, emoji, control-token
# text (transformers matches it as the control tokens: kairox's parse_special).
TOKEN_TEXTS = [
    "Hello world",
    "The capital of France is",
    " leading space",
    "trailing space ",
    "a  b   c    d",
    "line1\nline2\n\nline3\n\n\n",
    "tabs\tand\t\tmore",
    "Ünïcödé café naïve",
    "日本語のテキスト 中文 한국어",
    "emoji 🤗🚀 and symbols ©®™ ∑∫",
    "numbers 1234567890 3.14159 1,000,000",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "    indented code() {\n        return x;\n    }",
    "MiXeD CaSe and ALLCAPS and snake_case_name",
    "\u0001\u007f control bytes",
    "",
]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def versions():
    return {p: importlib.metadata.version(p) for p in ("torch", "transformers", "gguf", "tokenizers")}


def load(model_path):
    d, name = os.path.dirname(model_path), os.path.basename(model_path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    cfg = model.config
    # The facts the C++ side hard-codes; fail loudly if a transformers version reads them
    # differently.
    assert cfg.head_dim == 256 and cfg.hidden_size == 640 and cfg.num_hidden_layers == 18
    assert cfg.sliding_window == 512 and cfg.query_pre_attn_scalar == 256
    assert cfg.final_logit_softcapping is None and cfg.attn_logit_softcapping is None
    glob = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    assert glob == [5, 11, 17], glob
    assert cfg.rope_parameters["full_attention"]["rope_theta"] == 1e6
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
    return tok, model


def token_goldens(tok):
    cases = []
    for text in TOKEN_TEXTS:
        cases.append({"text": text, "ids": tok(text)["input_ids"]})
    # transformers always matches control-token text (its added tokens), so the kairox side
    # encodes with parse_special.
    return {"add_special": True, "parse_special": True, "cases": cases}


def logits_goldens(tok, model, out_dir):
    rng = np.random.default_rng(SAMPLE_SEED)
    n_vocab = model.config.vocab_size
    sample = np.sort(rng.choice(n_vocab, size=N_SAMPLE, replace=False))
    prompts, sample_rows = [], []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok(text)["input_ids"]
            assert len(ids) >= N_POSITIONS, (text, len(ids))
            ids = ids[:N_POSITIONS]
            logits = model(torch.tensor([ids])).logits[0].double()
            lse = torch.logsumexp(logits, dim=-1)
            top = torch.topk(logits, N_TOP, dim=-1)
            sample_rows.append(logits[:, sample].float().numpy())
            prompts.append({
                "text": text,
                "ids": ids,
                "top_ids": top.indices.tolist(),
                "top_logits": top.values.float().tolist(),
                "logsumexp": lse.tolist(),
            })
    np.stack(sample_rows).astype("<f4").tofile(out_dir / "logits_sample.f32")
    return {
        "n_vocab": n_vocab,
        "n_positions": N_POSITIONS,
        "sample_ids": sample.tolist(),
        "sample_file": "logits_sample.f32",
        "sample_layout": "float32 [prompt][position][sample], C order",
        "prompts": prompts,
    }


def perplexity_goldens(tok, model, shared_data, out_dir):
    path = pathlib.Path(shared_data) / PPL_TEXT
    text = path.read_text(encoding="utf-8")
    # kairox-perplexity: the text tokenized whole, BOS first, then BOS written into the
    # first slot of every chunk.
    ids = [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
    needed = PPL_N_CTX * PPL_N_CHUNKS
    assert len(ids) >= needed
    chunks = torch.tensor(ids[:needed], dtype=torch.long).view(PPL_N_CHUNKS, PPL_N_CTX)
    chunks[:, 0] = tok.bos_token_id
    nll = []
    with torch.no_grad():
        for c in range(PPL_N_CHUNKS):
            logits = model(chunks[c:c + 1]).logits[0].double()
            lp = torch.log_softmax(logits, dim=-1)
            targets = chunks[c, PPL_FIRST_SCORED:]
            scored = lp[PPL_FIRST_SCORED - 1:PPL_N_CTX - 1].gather(1, targets.unsqueeze(1))
            nll.append(float(-scored.sum()))
    n_scored = PPL_N_CHUNKS * (PPL_N_CTX - PPL_FIRST_SCORED)
    (out_dir / "perplexity_tokens.json").write_text(json.dumps({"chunks": chunks.tolist()}) + "\n")
    return {
        "text_file": PPL_TEXT,
        "text_sha256": sha256_of(path),
        "n_ctx": PPL_N_CTX,
        "n_chunks": PPL_N_CHUNKS,
        "scored_positions": [PPL_FIRST_SCORED, PPL_N_CTX],
        "rule": "BOS in slot 0 of each chunk; token i (i in [128, 256)) scored by the logits "
                "at i-1; each chunk from an empty cache; ppl = exp(sum NLL / n)",
        "nll_per_chunk": nll,
        "ppl": math.exp(sum(nll) / n_scored),
        "tokens_file": "perplexity_tokens.json",
    }


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--shared-data", default=DEFAULT_SHARED_DATA)
    ap.add_argument("--out", default=str(here / "gemma3"))
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_sha = sha256_of(args.model)
    assert model_sha.startswith(MODEL_SHA256_PREFIX), model_sha
    torch.manual_seed(0)
    tok, model = load(args.model)

    meta = {"generator": "tests/golden/make_gemma3_reference.py", "model_sha256": model_sha,
            "versions": versions()}
    (out_dir / "tokens.json").write_text(json.dumps({**meta, **token_goldens(tok)}, indent=1,
                                                    ensure_ascii=False) + "\n")
    logits = logits_goldens(tok, model, out_dir)
    (out_dir / "logits.json").write_text(json.dumps({**meta, **logits}) + "\n")
    ppl = perplexity_goldens(tok, model, args.shared_data, out_dir)
    (out_dir / "perplexity.json").write_text(json.dumps({**meta, **ppl}, indent=1) + "\n")
    print(f"wrote {out_dir}: ppl {ppl['ppl']:.4f}")


if __name__ == "__main__":
    main()
