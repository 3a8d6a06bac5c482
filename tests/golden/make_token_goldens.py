#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/smollm2_tokens.json: reference token ids for
SmolLM2's tokenizer, computed with Hugging Face `tokenizers`.

The reference tokenizer is built explicitly from the GGUF's vocabulary and
merges (read with the `gguf` package), configured as SmolLM2's tokenizer.json
configures it:
  model          BPE(vocab, merges), no unk token, no dropout
  pre_tokenizer  Sequence[Digits(individual_digits=True),
                          ByteLevel(add_prefix_space=False, use_regex=True)]
  decoder        ByteLevel
  added tokens   every control token (type 3) of the GGUF, special=True
(the transformers GGUF converter does not know `pre = smollm`, so it is not used.)

It also writes
  tok512_tokens.json   llama2.c's 512-token SentencePiece vocabulary (stories260K's
                       tok512.bin) encoded by the real `sentencepiece` library
                       (a BPE ModelProto built from the same vocabulary:
                       byte_fallback, identity normalizer, add_dummy_prefix), each
                       case checked against a plain score-greedy reference
                       (llama2.c's `encode`) written here
  pretok_goldens.json  (make_pretok_goldens.py) the words of the gpt2, smollm,
                       llama-bpe and qwen2 pre-tokenizers, and ids through each
  chat_templates.json  the Llama-2, Llama-3, Mistral (v0.1) and Gemma 3 chat
                       templates (their upstream Jinja sources, below) rendered
                       with jinja2 on a few conversations

Usage (needs `tokenizers`, `sentencepiece`, `jinja2` and `gguf`, e.g. /tmp/venv-ref
with gguf installed, or PYTHONPATH pointing at them):
  python tests/golden/make_token_goldens.py [--model path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
      [--tok512 ../shared/data/models/tok512.bin] [--only smollm2|spm|templates|pretok]
"""
import argparse
import json
import os
import random
import struct

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(os.environ.get("KAIROX_MODEL_DIR", os.path.expanduser(
    "~/.cache/kairox/models")), "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(HERE, "tokenizer", "smollm2_tokens.json")
CHAT_OUT = os.path.join(HERE, "tokenizer", "smollm2_chat.json")
SPM_OUT = os.path.join(HERE, "tokenizer", "tok512_tokens.json")
TEMPLATES_OUT = os.path.join(HERE, "tokenizer", "chat_templates.json")
DEFAULT_TOK512 = os.path.join(os.environ.get("KAIROX_SHARED_DATA", os.path.join(
    HERE, "..", "..", "..", "shared", "data")), "models", "tok512.bin")
TOKEN_TYPE_CONTROL = 3
RANDOM_SEED = 20240601
RANDOM_CASES = 200

TEXTS = [
    # ASCII prose
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "",
    " ",
    "a",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.",
    # contractions
    "I'm sure they'll say it's fine, don't you think? We've seen it; he'd agree, they're right.",
    "IT'S LOUD, DON'T SHOUT",
    "rock'n'roll 'quoted' ''double'' '",
    "'s 't 're 've 'm 'll 'd",
    # whitespace runs
    "tabs\tand\ttabs\t\t\tend",
    "line one\nline two\n\nline four\n\n\n",
    "windows\r\nline\r\nendings\r\n",
    "a  b   c    d     e",
    "   \n   \n\t \t",
    "mixed \u00a0nbsp\u3000ideographic\u2028line sep\u2009thin",
    # digits
    "1234567890",
    "3.14159 and 2.71828",
    "1,000,000 dollars in 2024",
    "version 10.2.3-rc1 build 00042",
    "x=42;y=-7;z=1e10",
    "\u0663\u0664\u0665 arabic-indic digits, superscript x\u00b2, fractions \u00bd \u00be, roman \u216b",
    "99 bottles of beer on the wall, 99 bottles of beer.",
    # code
    "def foo(x):\n    return x ** 2  # square\n",
    "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "    if (a && b || !c) { x += 1; }\n        else { y -= 2; }",
    "for i in range(10):\n    print(f\"{i:03d}\")\n",
    "<html><body class=\"main\">&amp; &lt;tag&gt;</body></html>",
    "SELECT * FROM users WHERE id = 7 AND name LIKE '%bob%';",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#frag",
    # Unicode
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade \u00c5ngstr\u00f6m",
    "e\u0301 combining acute, a\u0308 umlaut, \u0301 lone mark",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0420\u043e\u0441\u0441\u0438\u044f \u0438 \u0423\u043a\u0440\u0430\u0457\u043d\u0430",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "Emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \u2764\ufe0f \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "math: \u2200x\u2208\u211d, \u2211\u1d62 x\u1d62\u00b2 \u2264 \u221e \u2260 \u03c0",
    "Greek \u0391\u03b8\u03ae\u03bd\u03b1 and \u00df\u1e9e ligature \ufb01",
    # special tokens
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "abc<|endoftext|>def",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start partial <|im_end| almost <| |>",
    "<repo_name>kairox<file_sep>main.cc<filename>x.py<gh_stars>100",
    "text then <|endoftext|>",
    # invalid-ish / odd characters
    "replacement \ufffd char",
    "zero\u200bwidth\u200cjoiners\u200d and \ufeffBOM",
    "nul \x00 and bell \x07 and del \x7f and esc \x1b[0m",
    "file\x1csep\x1dgroup \x1c x",
    "c1 controls \x85\x80\x9f",
    "rtl \u200f mark \u202e override",
    "private use \ue000\U000F0000",
    "noncharacter \uffff \U0010FFFF",
    "!!!???...---***",
    " !! ?? .. -- ** ",
    "a\u00e0\u00e1\u00e2\u00e3\u00e4\u00e5\u00e6\u00e7\u00e8",
]

# Characters the random cases draw from: every class the pre-tokenizer treats
# differently, weighted towards the tricky ones.
ALPHABET = (list("abcXYZ019 ' ") + [" ", " ", "  ", "\n", "\t", "\r\n", "'s", "'ll", "'RE"] +
            ["\u00e9", "\u0301", "\u4e2d", "\U0001F600", "\u00a0", "\u3000", "\u0663", "\u00b2",
             "\u216b", "!", ".", "-", "_", "<|im_start|>", "<|im_end|>", "<|", "\u200b", "\x1c",
             "\ufffd", "\u0928\u094d"])


def random_texts(rng):
    out = []
    for _ in range(RANDOM_CASES):
        n = rng.randint(1, 24)
        out.append("".join(rng.choice(ALPHABET) for _ in range(n)))
    return out


def build_reference(model_path):
    r = gguf.GGUFReader(model_path)

    def field_strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def field_ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", f"this script builds the smollm reference, the model says {pre}"
    tokens = field_strings("tokenizer.ggml.tokens")
    types = field_ints("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in field_strings("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty == TOKEN_TYPE_CONTROL]
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    for t in specials:
        assert tk.token_to_id(t) == vocab[t], t
    return tk


CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Tell me a joke."},
     {"role": "assistant", "content": "Why did the chicken cross the road?"},
     {"role": "user", "content": "Why?\n\nI don't know."}],
    [{"role": "assistant", "content": "I start."}],
    [],
]


def chat_cases(model_path):
    """SmolLM2's own Jinja template rendered with jinja2 (as transformers does)."""
    import jinja2
    r = gguf.GGUFReader(model_path)
    source = bytes(r.fields["tokenizer.chat_template"].parts[-1]).decode("utf-8")
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(source)
    cases = []
    for messages in CONVERSATIONS:
        for gen in (False, True):
            cases.append({"messages": messages, "add_generation_prompt": gen,
                          "text": template.render(messages=messages, add_generation_prompt=gen)})
    return {"comment": "generated by tests/golden/make_token_goldens.py -- do not edit",
            "model": os.path.basename(model_path), "jinja2_version": jinja2.__version__,
            "cases": cases}


# ---------------------------------------------------------------- SentencePiece
SPACE_MARKER = "\u2581"
SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL, SPM_BYTE = 1, 2, 3, 6


def read_tok512(path):
    """llama2.c's tokenizer.bin: int32 max_token_length, then per token float
    score, int32 length, bytes. Its exporter wrote spaces for U+2581 and
    "\\n<s>\\n" / "\\n</s>\\n" for BOS/EOS: undone here, giving the
    SentencePiece spelling a GGUF holds. Returns (tokens, scores, types)."""
    with open(path, "rb") as f:
        data = f.read()
    (_max_len,) = struct.unpack_from("<i", data, 0)
    pos = 4
    tokens, scores, types = [], [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pos += 8
        text = data[pos:pos + n].decode("utf-8")
        pos += n
        i = len(tokens)
        if i == 0:
            ty = SPM_UNKNOWN
        elif i in (1, 2):
            text, ty = text.strip("\n"), SPM_CONTROL
        elif len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            ty = SPM_BYTE
        else:
            text, ty = text.replace(" ", SPACE_MARKER), SPM_NORMAL
        tokens.append(text)
        scores.append(score)
        types.append(ty)
    assert tokens[:3] == ["<unk>", "<s>", "</s>"], tokens[:3]
    return tokens, scores, types


def sentencepiece_processor(tokens, scores, types):
    """The real library on the same vocabulary: a BPE model with byte
    fallback and the settings of Llama's tokenizer.model (identity
    normalization, a dummy prefix, whitespace kept)."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    for text, score, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = text, score, ty
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id = 0, 1, 2
    m.trainer_spec.pad_id = -1
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def score_greedy_encode(text, vocab, scores, types):
    """llama2.c's `encode` (plain SentencePiece BPE): characters, unknown ones
    as byte tokens, then repeatedly merge the adjacent pair whose concatenation
    is the highest-scoring normal piece, leftmost on ties."""
    if not text:
        return []
    s = SPACE_MARKER + text.replace(" ", SPACE_MARKER)
    ids = []
    for ch in s:
        i = vocab.get(ch)
        if i is not None and types[i] == SPM_NORMAL:
            ids.append(i)
        else:
            ids.extend(vocab["<0x%02X>" % b] for b in ch.encode("utf-8"))
    texts = {i: t for t, i in vocab.items()}
    while True:
        best, best_pos, best_id = None, -1, -1
        for k in range(len(ids) - 1):
            j = vocab.get(texts[ids[k]] + texts[ids[k + 1]])
            if j is not None and types[j] == SPM_NORMAL and (best is None or scores[j] > best):
                best, best_pos, best_id = scores[j], k, j
        if best is None:
            return ids
        ids[best_pos:best_pos + 2] = [best_id]


def write_spm(tok512_path, out_path, texts):
    import sentencepiece
    tokens, scores, types = read_tok512(tok512_path)
    vocab = {t: i for i, t in enumerate(tokens)}
    sp = sentencepiece_processor(tokens, scores, types)
    cases = []
    for text in texts:
        ids = sp.encode(text)
        ref = score_greedy_encode(text, vocab, scores, types)
        assert ids == ref, (text, ids, ref)
        decoded = sp.decode(ids)
        cases.append({"text": text, "ids": ids, "roundtrip": decoded == text})
    doc = {
        "comment": "generated by tests/golden/make_token_goldens.py -- do not edit",
        "vocabulary": "llama2.c tok512.bin (stories260K), SentencePiece spelling",
        "sentencepiece_version": sentencepiece.__version__,
        "add_special": False,
        "parse_special": False,
        "cases": cases,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {out_path}: {len(cases)} cases (sentencepiece == score-greedy reference)")


# --------------------------------------------------------------- chat templates
# Upstream Jinja sources, as the models' tokenizer_config.json (and so their
# GGUF tokenizer.chat_template) hold them.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}")
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
MISTRAL_V1_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}")
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""
# (name, source, bos_token, eos_token)
TEMPLATES = [
    ("llama2", LLAMA2_TEMPLATE, "<s>", "</s>"),
    ("llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"),
    ("mistral", MISTRAL_V1_TEMPLATE, "<s>", "</s>"),
    ("gemma", GEMMA3_TEMPLATE, "<bos>", "<eos>"),
]
TEMPLATE_CONVERSATIONS = CONVERSATIONS + [
    [{"role": "system", "content": "You are a pirate."},
     {"role": "user", "content": "  Ahoy!\n"},
     {"role": "assistant", "content": " Arr, matey. "},
     {"role": "user", "content": "Where's the treasure?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Empty system."}],
]


def write_templates(out_path):
    """Each template rendered as transformers renders it (trim_blocks,
    lstrip_blocks, raise_exception); conversations a template rejects are
    left out for it."""
    import jinja2

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    families = []
    for name, source, bos, eos in TEMPLATES:
        template = env.from_string(source)
        cases = []
        for messages in TEMPLATE_CONVERSATIONS:
            for gen in (False, True):
                try:
                    text = template.render(messages=messages, add_generation_prompt=gen,
                                           bos_token=bos, eos_token=eos)
                except (jinja2.exceptions.TemplateError, jinja2.exceptions.UndefinedError):
                    continue
                cases.append({"messages": messages, "add_generation_prompt": gen, "text": text})
        families.append({"name": name, "source": source, "bos_token": bos, "eos_token": eos,
                         "cases": cases})
        print(f"  {name}: {len(cases)} cases")
    doc = {"comment": "generated by tests/golden/make_token_goldens.py -- do not edit",
           "jinja2_version": jinja2.__version__, "families": families}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {out_path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--tok512", default=DEFAULT_TOK512)
    ap.add_argument("--only", choices=["smollm2", "spm", "templates", "pretok"])
    args = ap.parse_args()
    if args.only in (None, "spm"):
        write_spm(args.tok512, SPM_OUT, TEXTS + random_texts(random.Random(RANDOM_SEED)))
    if args.only in (None, "templates"):
        write_templates(TEMPLATES_OUT)
    if args.only in (None, "pretok"):
        import make_pretok_goldens  # the pre-tokenizer variants (a sibling script)
        make_pretok_goldens.main()
    if args.only in (None, "smollm2"):
        write_smollm2(args)


def write_smollm2(args):
    tk = build_reference(args.model)
    texts = TEXTS + random_texts(random.Random(RANDOM_SEED))
    cases = []
    for text in texts:
        ids = tk.encode(text, add_special_tokens=False).ids
        # False where the text has bytes the vocabulary has no token for (dropped).
        roundtrip = tk.decode(ids, skip_special_tokens=False) == text
        cases.append({"text": text, "ids": ids, "roundtrip": roundtrip})
    doc = {
        "comment": "generated by tests/golden/make_token_goldens.py -- do not edit",
        "model": os.path.basename(args.model),
        "tokenizers_version": tokenizers.__version__,
        "parse_special": True,
        "add_special": False,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(cases)} cases")
    chat = chat_cases(args.model)
    with open(CHAT_OUT, "w", encoding="utf-8") as f:
        json.dump(chat, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {CHAT_OUT}: {len(chat['cases'])} cases")


if __name__ == "__main__":
    main()
