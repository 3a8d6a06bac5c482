#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/pretok_goldens.json: the words each byte-level
BPE pre-tokenizer kairox knows (`tokenizer.ggml.pre`) splits texts into, and
the token ids of a small BPE vocabulary encoded through each of them, all
computed with Hugging Face `tokenizers`.

Each variant is configured as the models' tokenizer.json configures it:
  gpt2       ByteLevel(add_prefix_space=False, use_regex=True)
  smollm     Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]
  llama-bpe  Sequence[Split(LLAMA3_REGEX, "isolated"), ByteLevel(use_regex=False)]
  qwen2      Sequence[Split(QWEN2_REGEX, "isolated"), ByteLevel(use_regex=False)]
The words are the pre-tokenizer's byte-level pieces mapped back to text.

The BPE vocabulary is trained here (BpeTrainer, byte-level alphabet) on the
texts themselves with no pre-tokenizer boundaries, so its merges cross the
places where the variants differ; it is stored in the golden, so the C++ test
does not depend on the trainer. The ids are computed with ignore_merges=False
(what kairox implements; Llama-3's own tokenizer.json sets ignore_merges=True,
the count of texts where that would change the ids is printed).

Usage (needs `tokenizers` and `gguf`, e.g. /tmp/venv-ref):
  python tests/golden/make_pretok_goldens.py
(also run by make_token_goldens.py without --only, or with --only pretok)
"""
import json
import os
import random

import tokenizers
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

import make_token_goldens as base

OUT = os.path.join(base.HERE, "tokenizer", "pretok_goldens.json")
RANDOM_SEED = 20261122
RANDOM_CASES = 250
MAX_RANDOM_CHARS = 28
BPE_VOCAB_SIZE = 900

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Texts where the variants differ: digit runs, contractions in any case,
# line breaks after punctuation and inside whitespace runs, a non-letter
# leading a word.
PRETOK_TEXTS = [
    "1234567", "12345678901", "a1b22c333d4444e55555", "1 22 333 4444", "x=1234;y=56789",
    "$1,234,567.89", "2026-11-22T06:21:17Z", "\u0663\u0664\u0665\u0666 \u00b2\u00b3 \u216b\u216b",
    "I'LL", "don'T", "DON'T YOU'RE WE'VE I'M HE'D IT'S THEY'LL", "'S 'T 'RE 'VE 'M 'LL 'D",
    "'Sx 'Tx 'REx 'vEx 'Mx 'lLx 'dx", "'\u017f 'x\u017f '\u017ft", "'", "''s", "'sup 'twas 'rex",
    "rock'n'roll", "y'all'd've", " 's", "\"quoted\" 'single'",
    "\n\n  x", "\r\n", "a\r\nb", "x \r\n y", "  \n  \n x", "\n", "\n\n\n", "a\n\n\nb", "\r\r\n \t",
    "line\n  indented\n\tno", "\t\tfoo", "tab\t\tend\t", "trailing   ", "trailing\t \t", " ", "   ",
    "\u00a0nbsp and \u00a0\u00a0x", "\u3000x \u3000\u3000y", "x\u000b\u000by", "\u2028x",
    "a\u0085\u0085b", "\x1c\x1cx", "a \u2009b",
    "...!!?", "...!!?\n\nfoo", " ...\n", "foo()\n\n", "end.\r\n\r\nNext", "?!\n x", "--\n--",
    "(foo [bar] {baz}", ".Hello ,world", "#include <stdio.h>", "@user #tag",
    "def f(x):\n\treturn x+1\n\n\n", "if(x){y=1;}\r\n", "    for (int i = 0; i < 10; ++i) {\n",
    "a_b__c", "snake_case_123", "x  \n", "x \n\n y",
    "\u4e2d\u6587123\u6587\u5b57", "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u00ff\u00e9\u00e8\u00e0 na\u00efve",
    "e\u0301t\u0301e\u0301", "\u0301\u0301x", "\U0001F600\U0001F600 x\U0001F44D\U0001F3FD",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "\ufb01 \u017f\u017f", "K\u212a \u00c5\u212b",
]

PRETOK_ALPHABET = (
    list("'''sStTlLeErRvVmMdDx ") + list("0123456789") +
    [" ", "  ", "\t", "\r", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x1c", "\u0085",
     "!", ".", "(", ")", "_", "-", "\"", "\u017f", "\u4e2d", "\u00e9", "\u0301", "\U0001F600",
     "\u0663", "\u00b2", "\u216b"])


def random_texts(rng):
    return ["".join(rng.choice(PRETOK_ALPHABET) for _ in range(rng.randint(1, MAX_RANDOM_CHARS)))
            for _ in range(RANDOM_CASES)]


def variant_pre_tokenizers():
    def split_then_bytes(regex):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    return [
        ("gpt2", lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
        ("smollm", lambda: pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])),
        ("llama-bpe", lambda: split_then_bytes(LLAMA3_REGEX)),
        ("qwen2", lambda: split_then_bytes(QWEN2_REGEX)),
    ]


def byte_decoder():
    """The inverse of GPT-2's byte -> printable character map."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    cps = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            cps.append(0x100 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, cps)}


def words(pre, text, decoder):
    out = []
    for piece, _ in pre.pre_tokenize_str(text):
        out.append(bytes(decoder[c] for c in piece).decode("utf-8"))
    assert "".join(out) == text, (text, out)
    return out


def train_vocab(texts):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB_SIZE, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(texts, trainer=trainer)
    model = json.loads(tk.to_str())["model"]
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return tokens, merges


def main():
    texts = base.TEXTS + PRETOK_TEXTS + random_texts(random.Random(RANDOM_SEED))
    decoder = byte_decoder()
    tokens, merges = train_vocab(base.TEXTS + PRETOK_TEXTS)
    vocab = {t: i for i, t in enumerate(tokens)}
    cases = [{"text": t, "pieces": {}, "ids": {}} for t in texts]
    names = []
    for name, make_pre in variant_pre_tokenizers():
        names.append(name)
        pre = make_pre()
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
        tk.pre_tokenizer = make_pre()
        tk_ignore = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
        tk_ignore.pre_tokenizer = make_pre()
        differ = 0
        for case in cases:
            text = case["text"]
            case["pieces"][name] = words(pre, text, decoder)
            ids = tk.encode(text, add_special_tokens=False).ids
            case["ids"][name] = ids
            differ += ids != tk_ignore.encode(text, add_special_tokens=False).ids
        print(f"  {name}: {len(texts)} texts; ignore_merges=True would change {differ}")
    head = {
        "comment": "generated by tests/golden/make_pretok_goldens.py -- do not edit",
        "tokenizers_version": tokenizers.__version__,
        "variants": names,
        "regexes": {"llama-bpe": LLAMA3_REGEX, "qwen2": QWEN2_REGEX},
    }

    def dump(v):
        return json.dumps(v, ensure_ascii=True)
    # One case per line: readable diffs without a line per piece.
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write(f" {dump(k)}: {dump(v)},\n")
        f.write(f' "bpe_tokens": {dump(tokens)},\n')
        f.write(f' "bpe_merges": {dump([" ".join(m) for m in merges])},\n')
        f.write(' "cases": [\n')
        f.write(",\n".join("  " + dump(c) for c in cases))
        f.write("\n ]\n}\n")
    json.load(open(OUT, encoding="utf-8"))  # well-formed
    print(f"wrote {OUT}: {len(texts)} texts, {len(tokens)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
