#!/usr/bin/env python3
"""Reference goldens for the real GGUF models from Hugging Face transformers.

transformers reads the very same GGUF (its own dequantisation, its own modelling code: float32,
eager attention, CPU) and its own GGUF tokenizer conversion; nothing is shared with kairox.
test_hf_golden (tests/engine/test_hf_golden.cc; one CTest entry per model,
test_hf_golden_<name>) compares kairox against these files. The models:

    gemma3     Gemma 3 270M Q4_K_M                     (cmake/fetch_model.sh gemma3)
    qwen1.5b   Qwen2.5-Coder-1.5B-Instruct Q4_K_M      (cmake/fetch_model.sh qwen1.5b)

Environment (a venv; never the system Python; the goldens were made with the versions that
each logits.json records):
    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch transformers accelerate gguf tokenizers numpy

Run (the Qwen model dequantised to float32 needs about 7 GB of RAM and a few minutes):
    /tmp/venv-ref/bin/python tests/golden/make_hf_reference.py {gemma3|qwen1.5b} \
        [--model PATH] [--shared-data /work/shared/data] [--out tests/golden/NAME]

It (re)writes the COMMITTED files under tests/golden/NAME/ (under 300 KB per model):
    tokens.json      token ids (BOS included where the GGUF's add_bos_token says so) of a set of
                     texts, from transformers' GGUF tokenizer.
    logits.json      3 prompts x 32 token ids; per position the reference top-16 (ids, float32
                     logits), the log-sum-exp over the whole vocabulary, and the ids of a fixed
                     sample of the vocabulary; the model's sha256; versions.
    logits_sample.f32  float32 little-endian [3][32][N_SAMPLE], C order: the reference logits
                     of the sampled ids (full rows would be 1 MiB per position).
    greedy.json      from each prompt's 32 tokens, 16 greedy tokens decoded one at a time with
                     the KV cache; per step the chosen id, its logit and the runner-up's logit
                     (the C++ side requires the same tokens up to the first near-tie).
    perplexity.json  kairox-perplexity's rule on an Austen novel: chunks of n_ctx tokens, BOS
                     in each chunk's first slot when the model adds BOS, tokens [n_ctx/2, n_ctx)
                     scored; per-chunk NLL sums.
    perplexity_tokens.json  the chunks' token ids, so the C++ side scores the same windows.

Facts the per-model `check` functions pin down, checked against the modelling code:
- Gemma 3: the GGUF norm weights are 1 + w (transformers' loader subtracts the 1 and its
  RMSNorm multiplies by 1 + w); head_dim 256 comes from attention.key_length; layers 5, 11,
  17 are global (sliding_window_pattern 6), the others attend to the last 512 positions (key
  j visible from query i when i - 512 < j <= i) with RoPE base 10000, the global ones with the
  file's 1e6; the attention scale is query_pre_attn_scalar^-0.5 = 256^-0.5; no soft-capping.
- Qwen2.5-Coder-1.5B: 28 layers, hidden 1536, 12 query heads and 2 KV heads of 128, biases on
  Q/K/V only, NeoX RoPE with base 1e6, tied embeddings absent (the GGUF has output.weight,
  Q6_K), no sliding window, vocabulary 151936, no BOS added.
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

DEFAULT_SHARED_DATA = "/work/shared/data"
MODEL_DIR = os.path.expanduser("~/.cache/kairox/models")

N_POSITIONS = 32
N_TOP = 16
N_SAMPLE = 512
N_GREEDY = 16
SAMPLE_SEED = 20251122
PPL_TEXT = "text/austen/persuasion.txt"

# Three prompts of different kinds; each gives more than 32 tokens, the first 32 are used.
PROMPTS = [
    "The capital of France is Paris, a city known for the Eiffel Tower, the Louvre museum, "
    "and its cafes along the Seine. Every year millions of visitors arrive to",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + "
    "fibonacci(n - 2)\n\nfor i in range(10):\n    print(i, fibonacci(i))\n",
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views",
]

# Tokenizer cases: spaces (leading, trailing, runs), newlines, tabs, byte fallback / byte-level
# BPE, digits, CJK, emoji, control bytes; each model adds its chat control-token text
# (transformers matches it as the control tokens: kairox's parse_special).
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
    None,  # the model's chat turn, from MODELS[...]["chat_text"]
    "    indented code() {\n        return x;\n    }",
    "MiXeD CaSe and ALLCAPS and snake_case_name",
    "\u0001\u007f control bytes",
    "",
]


def check_gemma3(cfg):
    assert cfg.head_dim == 256 and cfg.hidden_size == 640 and cfg.num_hidden_layers == 18
    assert cfg.sliding_window == 512 and cfg.query_pre_attn_scalar == 256
    assert cfg.final_logit_softcapping is None and cfg.attn_logit_softcapping is None
    glob = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    assert glob == [5, 11, 17], glob
    assert cfg.rope_parameters["full_attention"]["rope_theta"] == 1e6
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 1e4


def check_qwen2(cfg):
    assert cfg.model_type == "qwen2", cfg.model_type
    assert cfg.hidden_size == 1536 and cfg.num_hidden_layers == 28
    assert cfg.num_attention_heads == 12 and cfg.num_key_value_heads == 2
    assert cfg.vocab_size == 151936 and not cfg.tie_word_embeddings
    assert cfg.rope_parameters["rope_theta"] == 1e6, cfg.rope_parameters
    assert all(t == "full_attention" for t in cfg.layer_types), cfg.layer_types


# Per model: the file fetch_model.sh caches, the first bytes of its sha256, the facts above,
# the chat text for the tokenizer cases, and the perplexity windows (the 1.5B model gets
# shorter ones: its C++ test must stay within CI's time on 2 cores).
MODELS = {
    "gemma3": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "sha256_prefix": "a5fd3b62",
        "check": check_gemma3,
        "chat_text": "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
        "ppl_n_ctx": 256,
        "ppl_n_chunks": 16,
    },
    "qwen1.5b": {
        "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "sha256_prefix": "cc324af0",
        "check": check_qwen2,
        "chat_text": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "ppl_n_ctx": 128,
        "ppl_n_chunks": 8,
    },
}


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def versions():
    return {p: importlib.metadata.version(p) for p in ("torch", "transformers", "gguf", "tokenizers")}


def gguf_add_bos(model_path):
    """The GGUF's tokenizer.ggml.add_bos_token (what kairox's Tokenizer::add_bos reads)."""
    import gguf  # pylint: disable=import-outside-toplevel
    field = gguf.GGUFReader(model_path).get_field("tokenizer.ggml.add_bos_token")
    return bool(field.contents()) if field is not None else False


def load(model_path, check):
    d, name = os.path.dirname(model_path), os.path.basename(model_path)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    # The facts the C++ side relies on; fail loudly if a transformers version reads them
    # differently.
    check(model.config)
    return tok, model


def token_goldens(tok, chat_text):
    cases = []
    for text in TOKEN_TEXTS:
        text = chat_text if text is None else text
        cases.append({"text": text, "ids": tok(text)["input_ids"]})
    # transformers always matches control-token text (its added tokens), so the kairox side
    # encodes with parse_special.
    return {"add_special": True, "parse_special": True, "cases": cases}


def prompt_ids(tok):
    out = []
    for text in PROMPTS:
        ids = tok(text)["input_ids"]
        assert len(ids) >= N_POSITIONS, (text, len(ids))
        out.append(ids[:N_POSITIONS])
    return out


def logits_goldens(tok, model, out_dir):
    rng = np.random.default_rng(SAMPLE_SEED)
    n_vocab = model.config.vocab_size
    sample = np.sort(rng.choice(n_vocab, size=N_SAMPLE, replace=False))
    prompts, sample_rows = [], []
    with torch.no_grad():
        for text, ids in zip(PROMPTS, prompt_ids(tok)):
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


def greedy_goldens(tok, model):
    """Greedy decoding, one token per forward pass on the KV cache (kairox's decode path)."""
    runs = []
    with torch.no_grad():
        for ids in prompt_ids(tok):
            out = model(torch.tensor([ids]), use_cache=True)
            steps = []
            for _ in range(N_GREEDY):
                logits = out.logits[0, -1].double()
                top = torch.topk(logits, 2)
                nxt = int(top.indices[0])
                steps.append({"id": nxt, "logit": float(top.values[0]),
                              "runner_up_logit": float(top.values[1])})
                out = model(torch.tensor([[nxt]]), past_key_values=out.past_key_values,
                            use_cache=True)
            runs.append({"prompt_ids": ids, "steps": steps,
                         "text": tok.decode([s["id"] for s in steps])})
    return {"n_steps": N_GREEDY, "runs": runs}


def perplexity_goldens(tok, model, spec, add_bos, shared_data, out_dir):
    n_ctx, n_chunks = spec["ppl_n_ctx"], spec["ppl_n_chunks"]
    first_scored = n_ctx // 2
    path = pathlib.Path(shared_data) / PPL_TEXT
    text = path.read_text(encoding="utf-8")
    # kairox-perplexity: the text tokenized whole (BOS first when the model adds BOS), then
    # BOS written into the first slot of every chunk.
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if add_bos:
        ids = [tok.bos_token_id] + ids
    needed = n_ctx * n_chunks
    assert len(ids) >= needed
    chunks = torch.tensor(ids[:needed], dtype=torch.long).view(n_chunks, n_ctx)
    if add_bos:
        chunks[:, 0] = tok.bos_token_id
    nll = []
    with torch.no_grad():
        for c in range(n_chunks):
            logits = model(chunks[c:c + 1]).logits[0].double()
            lp = torch.log_softmax(logits, dim=-1)
            targets = chunks[c, first_scored:]
            scored = lp[first_scored - 1:n_ctx - 1].gather(1, targets.unsqueeze(1))
            nll.append(float(-scored.sum()))
    n_scored = n_chunks * (n_ctx - first_scored)
    (out_dir / "perplexity_tokens.json").write_text(json.dumps({"chunks": chunks.tolist()}) + "\n")
    bos_rule = "BOS in slot 0 of each chunk; " if add_bos else "no BOS; "
    return {
        "text_file": PPL_TEXT,
        "text_sha256": sha256_of(path),
        "n_ctx": n_ctx,
        "n_chunks": n_chunks,
        "scored_positions": [first_scored, n_ctx],
        "rule": bos_rule + f"token i (i in [{first_scored}, {n_ctx})) scored by the logits "
                "at i-1; each chunk from an empty cache; ppl = exp(sum NLL / n)",
        "nll_per_chunk": nll,
        "ppl": math.exp(sum(nll) / n_scored),
        "tokens_file": "perplexity_tokens.json",
    }


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", choices=sorted(MODELS))
    ap.add_argument("--model", help="the GGUF (default: ~/.cache/kairox/models/<its file>)")
    ap.add_argument("--shared-data", default=DEFAULT_SHARED_DATA)
    ap.add_argument("--out", help="default: tests/golden/<name>")
    args = ap.parse_args()
    spec = MODELS[args.name]
    model_path = args.model or os.path.join(MODEL_DIR, spec["file"])
    out_dir = pathlib.Path(args.out or here / args.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_sha = sha256_of(model_path)
    assert model_sha.startswith(spec["sha256_prefix"]), model_sha
    torch.manual_seed(0)
    tok, model = load(model_path, spec["check"])
    add_bos = gguf_add_bos(model_path)

    meta = {"generator": f"tests/golden/make_hf_reference.py {args.name}",
            "model_sha256": model_sha, "versions": versions()}
    (out_dir / "tokens.json").write_text(
        json.dumps({**meta, **token_goldens(tok, spec["chat_text"])}, indent=1,
                   ensure_ascii=False) + "\n")
    logits = logits_goldens(tok, model, out_dir)
    (out_dir / "logits.json").write_text(json.dumps({**meta, **logits}) + "\n")
    greedy = greedy_goldens(tok, model)
    (out_dir / "greedy.json").write_text(json.dumps({**meta, **greedy}, ensure_ascii=False) + "\n")
    ppl = perplexity_goldens(tok, model, spec, add_bos, args.shared_data, out_dir)
    (out_dir / "perplexity.json").write_text(json.dumps({**meta, **ppl}, indent=1) + "\n")
    print(f"wrote {out_dir}: ppl {ppl['ppl']:.4f}; greedy: "
          + " | ".join(repr(r["text"]) for r in greedy["runs"]))


if __name__ == "__main__":
    main()
