"""kairox-server with real clients on loopback: the `openai` package (streamed and not), raw
HTTP (httpx, the openai package's own transport), curl, a load test and hostile requests.
Every wait has a timeout and every loop a bound. Greedy decoding (temperature 0) where texts
are compared. About 20-30 s on 2 cores, most of it generation.
"""
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import openai
import pytest

try:  # the openai package's HTTP transport: httpx, or its successor httpx2 in newer releases
    import httpx
except ImportError:
    import httpx2 as httpx  # type: ignore[no-redef]

from conftest import Server, rss_kib, start, wait_for

pytestmark = pytest.mark.model

TIMEOUT_S = 60  # every HTTP call; a generation of a few tokens takes well under a second


def client(server: Server, api_key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key, timeout=TIMEOUT_S,
                         max_retries=0)


def post(server: Server, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) or hasattr(body, "__next__") \
        else json.dumps(body)
    return httpx.post(server.url + path, content=content, timeout=TIMEOUT_S,
                      headers={"Content-Type": "application/json", **kwargs.pop("headers", {})},
                      **kwargs)


def sse_events(lines) -> List[Any]:
    """The JSON of each `data:` line up to [DONE] (which must come last)."""
    events: List[Any] = []
    done = False
    for line in lines:
        if not line:
            continue
        assert line.startswith("data: "), line
        assert not done, "data after [DONE]"
        payload = line[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        events.append(json.loads(payload))
    assert done, "the stream did not end with [DONE]"
    return events


def stream_chat(server: Server, body: Dict[str, Any]) -> Tuple[str, List[Any]]:
    """Streams a chat completion over raw HTTP: (text, events)."""
    with httpx.stream("POST", server.url + "/v1/chat/completions",
                      json={**body, "stream": True}, timeout=TIMEOUT_S) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.iter_lines())
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    return text, events


def greedy(messages: List[Dict[str, str]], max_tokens: int = 8, **extra: Any) -> Dict[str, Any]:
    return {"messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra}


# ---------------------------------------------------------------- the openai package


def test_models_and_health(server: Server, model_path: str) -> None:
    models = client(server).models.list()
    ids = [m.id for m in models.data]
    assert ids == [os.path.basename(model_path)[:-len(".gguf")]]
    health = httpx.get(server.url + "/health", timeout=TIMEOUT_S).json()
    assert health["status"] == "ok" and health["slots"] == 2 and health["busy"] == 0


def test_openai_chat_streamed_equals_whole(server: Server) -> None:
    c = client(server)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    whole = c.chat.completions.create(model="any", messages=msgs, max_tokens=8, temperature=0)
    text = whole.choices[0].message.content
    assert whole.choices[0].message.role == "assistant"
    assert text and whole.choices[0].finish_reason in ("stop", "length")
    assert 0 < whole.usage.completion_tokens <= 8
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    pieces, ids, finish = [], set(), []
    for chunk in c.chat.completions.create(model="any", messages=msgs, max_tokens=8,
                                           temperature=0, stream=True):
        ids.add(chunk.id)
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            if chunk.choices[0].finish_reason:
                finish.append(chunk.choices[0].finish_reason)
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
    assert finish == [whole.choices[0].finish_reason]
    assert "".join(pieces) == text


def test_openai_completions(server: Server) -> None:
    c = client(server)
    whole = c.completions.create(model="any", prompt="Once upon a time", max_tokens=6,
                                 temperature=0)
    assert whole.object == "text_completion" and whole.choices[0].text
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model="any", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True)
        if ch.choices)
    assert streamed == whole.choices[0].text


def test_stream_usage_chunk(server: Server) -> None:
    c = client(server)
    chunks = list(c.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4,
        temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 4


def test_multi_turn_reuses_the_cache(server: Server) -> None:
    msgs = [{"role": "user", "content": "Name a colour."}]
    first = post(server, "/v1/chat/completions", greedy(msgs)).json()
    msgs += [first["choices"][0]["message"], {"role": "user", "content": "Another one?"}]
    second = post(server, "/v1/chat/completions", greedy(msgs)).json()
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    # The whole first prompt is kept (the session that answered it is chosen again).
    assert cached >= first["usage"]["prompt_tokens"]
    assert cached < second["usage"]["prompt_tokens"]


def test_stop_max_tokens_seed(server: Server) -> None:
    msgs = [{"role": "user", "content": "Count from one to ten in words."}]
    full = post(server, "/v1/chat/completions", greedy(msgs, 24)).json()
    text = full["choices"][0]["message"]["content"]
    assert len(text) > 8, text
    stop = text[4:7]
    cut = post(server, "/v1/chat/completions", greedy(msgs, 24, stop=[stop])).json()
    assert cut["choices"][0]["message"]["content"] == text[:text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    short = post(server, "/v1/chat/completions", greedy(msgs, 2)).json()
    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 2
    hot = {"messages": msgs, "max_tokens": 12, "temperature": 1.5, "seed": 1234}
    a = post(server, "/v1/chat/completions", hot).json()["choices"][0]["message"]["content"]
    b = post(server, "/v1/chat/completions", hot).json()["choices"][0]["message"]["content"]
    assert a == b


def test_logit_bias(server: Server, model_path: str, end_tokens: Dict[str, int]) -> None:
    import kairox  # noqa: PLC0415
    with kairox.Model(model_path) as m:
        forced = m.tokenize(" banana", add_special=False)[0]
        piece = m.detokenize([forced])
    body = {"prompt": "My favourite fruit is", "max_tokens": 3, "temperature": 0,
            "logit_bias": {str(forced): 100}}
    r = post(server, "/v1/completions", body).json()
    assert r["choices"][0]["text"] == piece * 3
    # Banning every end-of-generation token makes the answer run to max_tokens.
    r = post(server, "/v1/chat/completions",
             greedy([{"role": "user", "content": "Say OK."}], 12, logit_bias=end_tokens)).json()
    assert r["usage"]["completion_tokens"] == 12 and r["choices"][0]["finish_reason"] == "length"


# ---------------------------------------------------------------- curl


def test_curl(server: Server) -> None:
    curl = shutil.which("curl")
    assert curl, "curl is not installed (cmake/install_deps.sh installs it)"
    body = json.dumps(greedy([{"role": "user", "content": "Hello"}], 4))
    out = subprocess.run([curl, "-sS", "--max-time", str(TIMEOUT_S), server.url +
                          "/v1/chat/completions", "-H", "Content-Type: application/json",
                          "-d", body], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["object"] == "chat.completion"
    out = subprocess.run([curl, "-sSN", "--max-time", str(TIMEOUT_S), server.url +
                          "/v1/chat/completions", "-H", "Content-Type: application/json",
                          "-d", json.dumps({**json.loads(body), "stream": True})],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    events = sse_events(out.stdout.splitlines())
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"


def test_readme_curl(server: Server) -> None:
    """README.md's curl example, verbatim but for the port."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()
    start_line = next(i for i, line in enumerate(readme)
                      if line.startswith("curl -s http://127.0.0.1:8080/"))
    command = ""
    for line in readme[start_line:]:  # the command and its continuation lines
        command += line.rstrip("\\") + " "
        if not line.endswith("\\"):
            break
    command = command.replace("http://127.0.0.1:8080", server.url)
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["choices"][0]["message"]["content"]


# ---------------------------------------------------------------- load


def test_load_parallel_streams(server: Server) -> None:
    """4 clients x 3 streamed requests on 2 sessions + a queue of 2: every request is
    answered (no 503: 4 fit), each stream carries one id and exactly the text the same
    request gives unstreamed (nothing lost, doubled or mixed from another stream), and the
    server's memory stays flat across the rounds."""
    n_clients, n_rounds = 4, 3
    prompts = [f"Write the number {i} in words." for i in range(n_clients * n_rounds)]
    reference = {}
    for p in prompts:  # one at a time: the expected text of each request
        body = greedy([{"role": "user", "content": p}], 6)
        reference[p] = post(server, "/v1/chat/completions", body).json()[
            "choices"][0]["message"]["content"]
    rss_before = rss_kib(server.pid)
    results: Dict[str, Tuple[str, List[Any]]] = {}
    errors: List[BaseException] = []

    def run(client_index: int) -> None:
        try:
            for k in range(n_rounds):
                p = prompts[client_index * n_rounds + k]
                results[p] = stream_chat(server, greedy([{"role": "user", "content": p}], 6))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S * n_rounds)
        assert not t.is_alive(), "a client did not finish"
    assert not errors, errors
    seen_ids = set()
    for p in prompts:
        text, events = results[p]
        ids = {e["id"] for e in events}
        assert len(ids) == 1 and not ids & seen_ids
        seen_ids |= ids
        assert text == reference[p], p
    rss_after = rss_kib(server.pid)
    assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)
    assert httpx.get(server.url + "/health", timeout=TIMEOUT_S).json()["refused"] == 0


def test_queue_full_is_503_and_disconnect_frees_the_session(
        model_path: str, end_tokens: Dict[str, int]) -> None:
    """One session, a queue of one: a long stream holds the session, a second request waits,
    a third is refused with 503; closing the first stream stops its generation and the
    waiting request is answered. Also the API key, and the server's sampling flags as the
    defaults of requests."""
    s = start(model_path, "--parallel", "1", "--queue", "1", "--api-key", "secret", "--temp", "0")
    try:
        auth = {"Authorization": "Bearer secret"}
        plain = {"messages": [{"role": "user", "content": "Pick a word."}], "max_tokens": 6}
        texts = {post(s, "/v1/chat/completions", {**plain, **extra}, headers=auth).json()[
            "choices"][0]["message"]["content"] for extra in ({}, {"seed": 7}, {"temperature": 0})}
        assert len(texts) == 1, texts  # --temp 0: greedy whatever the seed
        assert post(s, "/v1/chat/completions", greedy([{"role": "user", "content": "hi"}])
                    ).status_code == 401
        assert post(s, "/v1/chat/completions", greedy([{"role": "user", "content": "hi"}]),
                    headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(s.url + "/health", timeout=TIMEOUT_S).status_code == 200
        long_body = greedy([{"role": "user", "content": "Count to a thousand."}], 400,
                           logit_bias=end_tokens, stream=True)
        with httpx.stream("POST", s.url + "/v1/chat/completions", json=long_body,
                          headers=auth, timeout=TIMEOUT_S) as first:
            assert first.status_code == 200
            lines = first.iter_lines()
            for _, line in zip(range(3), lines):  # the role chunk, then generated text
                pass
            waiting: Dict[str, Any] = {}

            def second() -> None:
                waiting["response"] = post(s, "/v1/chat/completions",
                                           greedy([{"role": "user", "content": "hi"}], 2),
                                           headers=auth)

            t = threading.Thread(target=second)
            t.start()
            wait_for(lambda: httpx.get(s.url + "/health", timeout=TIMEOUT_S).json()["queued"]
                     == 1, 20, "the second request to wait in the queue")
            third = post(s, "/v1/chat/completions", greedy([{"role": "user", "content": "x"}]),
                         headers=auth)
            assert third.status_code == 503
            assert third.json()["error"]["code"] == "server_busy"
            assert third.headers.get("retry-after") == "1"
        # The first stream is closed here: its generation must stop and free the session.
        t.join(TIMEOUT_S)
        assert not t.is_alive()
        assert waiting["response"].status_code == 200
        health = httpx.get(s.url + "/health", timeout=TIMEOUT_S).json()
        assert health["disconnects"] == 1 and health["refused"] == 1 and health["busy"] == 0
        # Not streamed: a client that gives up (its timeout) stops the generation too.
        with pytest.raises(httpx.TimeoutException):
            httpx.post(s.url + "/v1/chat/completions", json={**long_body, "stream": False},
                       headers=auth, timeout=1.0)
        wait_for(lambda: httpx.get(s.url + "/health", timeout=TIMEOUT_S).json()["disconnects"]
                 == 2, 30, "the abandoned non-streamed generation to stop")
    finally:
        assert s.stop() == 0, "".join(s.lines)


# ---------------------------------------------------------------- hostile requests


def error_of(r: httpx.Response, status: int) -> Dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"] and "type" in err
    return err


@pytest.mark.parametrize("body,param", [
    ('{"messages": [', None),
    ("[]", None),
    ('{"messages": "hello"}', "messages"),
    ('{"messages": []}', "messages"),
    ('{"messages": [{"role": "wizard", "content": "x"}]}', "messages[0].role"),
    ('{"messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": "8"}', "max_tokens"),
    ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
    ('{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "temperature"),
    ('{"messages": [{"role": "user", "content": "x"}], "temperature": 9}', "temperature"),
    ('{"messages": [{"role": "user", "content": "x"}], "stop": 5}', "stop"),
    ('{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
    ('{"messages": [{"role": "user", "content": "x"}], "n": 2}', "n"),
    ('{"messages": [{"role": "user", "content": "x"}], "seed": 1.5}', "seed"),
    ('{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-3": 1}}', "logit_bias"),
    ('{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"999999": 1}}',
     "logit_bias"),
    ('{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 500}}', "logit_bias"),
    ("[" * 20000 + "]" * 20000, None),  # deep, and under --max-body
])
def test_bad_requests_are_400(server: Server, body: str, param: Optional[str]) -> None:
    err = error_of(post(server, "/v1/chat/completions", body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param


def test_invalid_utf8_and_bad_prompt(server: Server) -> None:
    raw = b'{"messages": [{"role": "user", "content": "\xff\xfe bad"}]}'
    error_of(post(server, "/v1/chat/completions", raw), 400)
    error_of(post(server, "/v1/completions", {"prompt": [1, 2, 3]}), 400)
    error_of(post(server, "/v1/completions", {"prompt": ""}), 400)


def test_prompt_over_the_context(server: Server) -> None:
    words = " ".join(["word"] * 2000)  # > 512 tokens
    err = error_of(post(server, "/v1/chat/completions",
                        greedy([{"role": "user", "content": words}])), 400)
    assert err["code"] == "context_length_exceeded"
    err = error_of(post(server, "/v1/completions", {"prompt": words, "max_tokens": 2}), 400)
    assert err["code"] == "context_length_exceeded"


def test_huge_body_and_unknown_route(server: Server) -> None:
    huge = json.dumps(greedy([{"role": "user", "content": "x" * 200000}]))  # > --max-body
    error_of(post(server, "/v1/chat/completions", huge), 413)

    def chunks():  # no Content-Length: chunked transfer encoding, held to --max-body as well
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(64):
            yield b"x" * 4096
        yield b'"}]}'

    error_of(post(server, "/v1/chat/completions", chunks()), 413)
    error_of(httpx.get(server.url + "/v1/nothing", timeout=TIMEOUT_S), 404)


def test_slow_and_broken_clients(server: Server) -> None:
    """A client that sends half a request and stalls is cut off after --timeout (2 s) while
    others are served; garbage on the socket gets 400; the server is fine afterwards."""
    host, port = server.url[len("http://"):].split(":")
    slow = []
    for _ in range(3):
        sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"messa")
        slow.append(sock)
    assert httpx.get(server.url + "/health", timeout=TIMEOUT_S).status_code == 200
    for sock in slow:
        sock.settimeout(TIMEOUT_S)
        start_s = time.monotonic()
        data = b""
        while time.monotonic() - start_s < TIMEOUT_S:  # bounded: until closed
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        sock.close()
        assert not data or data.startswith(b"HTTP/1.1 4"), data[:100]
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"\x00\x01garbage \xff\xfe\r\n\r\n")
        reply = sock.recv(4096)
        assert not reply or reply.startswith(b"HTTP/1.1 400"), reply[:100]
    r = post(server, "/v1/chat/completions", greedy([{"role": "user", "content": "ok?"}], 2))
    assert r.status_code == 200
