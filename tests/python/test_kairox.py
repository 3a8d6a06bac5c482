"""The Python package over libkairox.so: models, tokens, chat, sessions, logits (numpy and
list), sampling, streaming generation, errors carrying the C message."""
import threading

import pytest

import kairox


def test_version():
    parts = kairox.version().split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)


def test_model_info_and_progress(tiny_model_path):
    seen = []
    model = kairox.Model(tiny_model_path, n_threads=2, progress=lambda f: seen.append(f))
    assert seen == [0.0, 0.5, 1.0]
    info = model.info
    assert info.arch == "llama" and info.n_vocab == 256 and info.eos_token == 2
    assert info.n_params > 0 and info.path == tiny_model_path
    assert info.chat_template_kind == "generic"


def test_errors_carry_the_message(tiny_model_path, tmp_path):
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Model(str(tmp_path / "missing.gguf"))
    assert e.value.status_name == "NOT_FOUND" and "missing.gguf" in str(e.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Model(str(bad))
    assert e.value.status_name == "INVALID_MODEL"
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Model(tiny_model_path, progress=lambda f: f < 0.5)
    assert e.value.status_name == "CANCELLED"
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Model(tiny_model_path, device="tpu")
    assert e.value.status_name == "INVALID_ARGUMENT" and "cpu, cuda, sim, auto" in e.value.message
    model = kairox.Model(tiny_model_path)
    with pytest.raises(kairox.KairoxError) as e:
        model.session(n_ctx=10**6)
    assert e.value.status_name == "INVALID_ARGUMENT" and "context" in e.value.message
    with pytest.raises(kairox.KairoxError) as e:
        model.session().logits()
    assert e.value.status_name == "INVALID_STATE"


def test_tokens_round_trip(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    text = "bytes and ünïcode ✓"
    ids = model.tokenize(text, add_special=False)
    assert len(ids) == len(text.encode())
    assert model.detokenize(ids) == text
    assert model.detokenize_bytes(ids[:-1]) == text.encode()[:-1]  # ends mid-character
    assert model.is_end_of_generation(model.info.eos_token)
    with pytest.raises(kairox.KairoxError):
        model.detokenize([10**6])


def test_logits_numpy_and_list(tiny_model_path):
    np = pytest.importorskip("numpy")
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=64, n_threads=2)
    s.eval(model.tokenize("abc", add_special=False), all_logits=True)
    last = s.logits()
    assert isinstance(last, np.ndarray) and last.dtype == np.float32 and last.shape == (256,)
    assert np.isfinite(last).all() and last.std() > 0
    as_list = s.logits(2, as_numpy=False)
    assert isinstance(as_list, list) and as_list == last.tolist()
    assert not np.array_equal(s.logits(0), last)
    greedy = kairox.Sampler.greedy()
    assert s.sample(greedy) == int(np.argmax(last))
    assert greedy.sample_logits(last) == int(np.argmax(last))
    # Without all_logits only the last row is kept: index 0 is refused, not the last row.
    s.eval(model.tokenize("xyz", add_special=False))
    assert np.array_equal(s.logits(2), s.logits())
    with pytest.raises(kairox.KairoxError) as e:
        s.logits(0)
    assert e.value.status_name == "INVALID_ARGUMENT" and "EVAL_ALL_LOGITS" in e.value.message


def test_mmap_off_reads_the_file_with_the_same_logits(tiny_model_path):
    ids = [1, 40, 41, 42]
    rows = []
    for use_mmap in (True, False):
        model = kairox.Model(tiny_model_path, use_mmap=use_mmap)
        s = model.session(n_ctx=32, n_threads=2)
        s.eval(ids)
        rows.append(s.logits(as_numpy=False))
    assert rows[0] == rows[1]


def test_generate_streams_and_matches_step_api(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=128, n_threads=2)
    greedy = kairox.Sampler.greedy()
    pieces = list(s.generate("hello", max_tokens=12, sampler=greedy))
    r = s.last_result
    assert r.n_prompt == 5 and r.stop_reason in ("max_tokens", "end_of_generation")
    assert s.n_past == 5 + r.n_tokens
    generated = s.tokens[5:]
    # The step API gives the same tokens.
    s.reset()
    s.eval(model.tokenize("hello"))
    manual = []
    for _ in range(r.n_tokens):
        manual.append(s.sample(greedy))
        s.eval([manual[-1]])
    assert manual == generated
    text = "".join(pieces)
    assert text == model.detokenize(generated) or "\ufffd" in text
    st = s.stats()
    assert st["n_prompt_tokens"] >= 5 and st["n_gen_tokens"] >= r.n_tokens


def test_generate_closed_early_and_abort(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=256, n_threads=2)
    it = s.generate("abc", max_tokens=-1, sampler=kairox.Sampler(seed=3, temperature=1.0))
    next(it, None)
    it.close()  # stops the C loop; the session is usable again
    n = s.n_past
    assert 3 <= n < 256
    # How it ended is recorded after an early close too (the C loop may have outrun the
    # close to the end of the context or of the generation).
    r = s.last_result
    assert r is not None and r.n_prompt == 3 and r.n_tokens == n - 3
    assert r.stop_reason in ("aborted", "context_full", "end_of_generation")
    s.truncate(3)
    assert s.n_past == 3
    timer = threading.Timer(0.05, s.abort)
    timer.start()
    list(s.generate("", max_tokens=-1, sampler=kairox.Sampler(seed=3, temperature=1.0)))
    timer.join()
    assert s.last_result.stop_reason in ("aborted", "end_of_generation", "context_full")


def test_chat_template_messages(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    text = model.apply_chat_template([{"role": "user", "content": "hi"}, ("assistant", "yo")])
    assert "hi" in text and "yo" in text


def test_session_chat_reuses_the_prefix(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    s = model.session(n_ctx=256, n_threads=2)
    msgs = [{"role": "user", "content": "hello there"}]
    first = s.chat_text(msgs, max_tokens=5, sampler=kairox.Sampler.greedy())
    first_prompt = s.last_result.n_prompt
    assert s.last_result.n_reused == 0 and s.n_past == first_prompt + s.last_result.n_tokens
    msgs += [("assistant", first), ("user", "again")]
    pieces = list(s.chat(msgs, max_tokens=5, sampler=kairox.Sampler.greedy()))
    assert s.last_result.n_reused >= first_prompt
    fresh = model.session(n_ctx=256, n_threads=2)
    assert fresh.chat_text(msgs, max_tokens=5, sampler=kairox.Sampler.greedy()) == "".join(pieces)
    assert fresh.last_result.n_reused == 0
    with pytest.raises(ValueError):
        s.chat([])
    with pytest.raises(kairox.KairoxError) as e:
        s.chat_text([("user", "x" * 400)])
    assert e.value.status_name == "CONTEXT_FULL"


def test_sampler_logit_bias():
    logits = [0.5, 3.0, 1.0, -2.0]
    greedy = kairox.Sampler.greedy()
    assert greedy.sample_logits(logits) == 1
    greedy.set_logit_bias({1: float("-inf")})
    assert greedy.sample_logits(logits) == 2
    greedy.set_logit_bias({3: float("inf")})
    assert greedy.sample_logits(logits) == 3
    greedy.set_logit_bias({})
    assert greedy.sample_logits(logits) == 1
    with pytest.raises(kairox.KairoxError):
        greedy.set_logit_bias({0: float("nan")})


def test_log_callback(tiny_model_path):
    lines = []
    kairox.set_log_callback(lambda level, msg: lines.append((level, msg)))
    kairox.set_log_level("info")
    try:
        kairox.Model(tiny_model_path).session(n_ctx=32)
    finally:
        kairox.set_log_level("warn")
        kairox.set_log_callback(None)
    assert any(level == "info" and "session" in msg for level, msg in lines)


@pytest.mark.model
def test_default_model_chat(default_model_path):
    model = kairox.Model(default_model_path)
    info = model.info
    assert (info.n_layer, info.n_embd, info.n_vocab) == (30, 576, 49152)
    assert info.chat_template_kind == "chatml"
    prompt = model.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    assert prompt.endswith("<|im_start|>assistant\n")
    s = model.session(n_ctx=512, n_threads=2)
    answer = s.generate_text(prompt, max_tokens=40, sampler=kairox.Sampler.greedy())
    assert "Paris" in answer
    assert s.last_result.n_tokens > 0
    # A stop string cuts the text before it.
    s.reset()
    cut = s.generate_text(prompt, max_tokens=40, stop=["Paris"], sampler=kairox.Sampler.greedy())
    assert "Paris" not in cut and s.last_result.stop_reason == "stop_string"
    assert answer.startswith(cut)


def test_ram_budget_is_checked(tiny_model_path):
    model = kairox.Model(tiny_model_path)
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Session(model, ram_budget="lots")
    assert e.value.status_name == "INVALID_ARGUMENT" and "--ram-budget" in e.value.message
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Session(model, ram_budget="1K")  # below the KV cache alone
    assert "KV cache" in e.value.message
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Session(model, policy="clairvoyant", ram_budget="50%")
    assert "clairvoyant" in e.value.message and "tam-adaptive" in e.value.message
    # No sidecar: the budget is accounted and enforced, there is nothing to stream.
    s = kairox.Session(model, ram_budget="64M", policy="lru", prefetch=False)
    s.eval(model.tokenize("hello"))
    assert len(s.logits()) > 0


@pytest.mark.parametrize("kwargs,name", [({"min_p": 2.0}, "min_p"), ({"top_p": 1.5}, "top_p"),
                                         ({"repeat_penalty": 0.0}, "repeat_penalty"),
                                         ({"temperature": float("nan")}, "temperature")])
def test_sampler_parameters_out_of_range_are_refused(kwargs, name):
    with pytest.raises(kairox.KairoxError) as e:
        kairox.Sampler(**kwargs)
    assert e.value.status_name == "INVALID_ARGUMENT"
    assert name in str(e.value) and "range" in str(e.value)


def test_integers_outside_their_c_type_are_refused_not_truncated(tiny_model_path):
    # ctypes keeps the low bits: n_ctx 2**32 + 64 was a 64-token context, token 2**40 was 0.
    with pytest.raises(ValueError, match=r"ram_budget must be in \[0, "):
        kairox.Model(tiny_model_path, ram_budget=-1)
    with pytest.raises(ValueError, match="n_threads"):
        kairox.Model(tiny_model_path, n_threads=2**32 + 1)
    with pytest.raises(TypeError, match="str, bytes or os.PathLike"):
        kairox.Model(None)
    model = kairox.Model(tiny_model_path)
    with pytest.raises(ValueError, match="n_ctx must be in"):
        model.session(n_ctx=2**32 + 64)
    with pytest.raises(ValueError, match=r"tokens\[1\] must be in \[0, 2147483647\], got 1099511627776"):
        model.session().eval([1, 2**40])
    with pytest.raises(TypeError, match="tokens\\[0\\] must be an integer"):
        model.session().eval(["a"])
    with pytest.raises(ValueError, match="top_k"):
        kairox.Sampler(top_k=2**40)
    with pytest.raises(ValueError, match="tokens"):
        model.detokenize([2**33])
    s = model.session(n_ctx=64)
    s.eval([1, 2, 3])
    assert s.n_ctx == 64 and s.n_past == 3


def test_device_sim_gives_the_cpu_logits(tiny_model_path):
    """The attention part and the LM head on the simulated GPU: the CPU's logits exactly."""
    model = kairox.Model(tiny_model_path, n_threads=2)
    prompt = [5, 17, 42, 99, 7]
    cpu = model.session(n_ctx=64, device="cpu")
    cpu.eval(prompt)
    want = list(cpu.logits())
    for ngl in (-1, 1, 0):
        sim = model.session(n_ctx=64, device="sim", n_gpu_layers=ngl)
        sim.eval(prompt)
        assert list(sim.logits()) == want
    with pytest.raises(ValueError):
        model.session(device="sim", n_gpu_layers=-2)
    with pytest.raises(kairox.KairoxError) as e:
        model.session(device="sim", vram_budget="lots")
    assert e.value.status_name == "INVALID_ARGUMENT" and "--vram-budget" in e.value.message


def test_sampler_defaults_are_the_librarys():
    """Sampler() takes every default from kx_sampler_params_init (no second copy in Python):
    the same draws as the library's documented values spelled out, and different draws when
    any one of them changes."""
    import inspect
    import random
    assert all(p.default is None for p in inspect.signature(kairox.Sampler).parameters.values())
    rng = random.Random(20261125)
    rows = [[rng.gauss(0.0, 2.0) for _ in range(64)] for _ in range(200)]
    history = [rng.randrange(64) for _ in range(80)]

    def draws(sampler):
        return [sampler.sample_logits(r, history) for r in rows]

    documented = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                      repeat_last_n=64, seed=0xC0FFEE)
    base = draws(kairox.Sampler())
    assert base == draws(kairox.Sampler(**documented))
    assert base != draws(kairox.Sampler(**dict(documented, seed=1)))
    assert base != draws(kairox.Sampler(**dict(documented, temperature=2.0)))
