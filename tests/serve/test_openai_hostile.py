"""``ortstate serve`` for an LLM folder against hostile bodies and prompts (issue 37's probes): every
malformed body a 4xx in OpenAI's JSON, never a 500 in plain text; an internal error a JSON 500 that
names a log id, which the server's log line carries with the traceback, and no text of the
exception's; no reply holding a path of the server's; a request tokenized once, off the event loop
(``/health`` answers while it tokenizes); a prompt too long for the context refused before it is
tokenized."""

from __future__ import annotations

import http.client
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import openai_error
from oracle import REPO

from ortstate.errors import RunError
from ortstate.generate import Tokenizer
from ortstate.generate.choice_stream import TokenStream
from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve.openai import app as app_module
from ortstate.serve.openai import choices as choices_module

LLM = (REPO / "models" / "llm").resolve()  # an absolute folder: no reply may name it
TOKEN = "s3cret"
SURROGATE = "holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair)"


error = openai_error


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 4, slots=2, token=TOKEN)) as running:
        yield running


def post(
    url: str, path: str, body: bytes | None, timeout: float = 60, conversation: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A raw request (the bytes as given; None: a GET): status, headers (names lower-cased), body."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        headers = {"content-type": "application/json", "authorization": f"Bearer {TOKEN}"}
        if conversation is not None:
            headers["x-ortstate-conversation"] = conversation
        connection.request("POST" if body is not None else "GET", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def completion(prompt: Any, **more: Any) -> bytes:
    return json.dumps({"model": "llama", "prompt": prompt, "max_tokens": 2, "temperature": 0, **more}).encode()


PLAIN = completion("x")
NOT_UTF8 = b'{"model": "llama", "messages": [{"role": "user", "content": "\xc3\x28"}]}'
HOSTILE = [  # (path, body, status, OpenAI's error body)
    (
        "/v1/completions",
        b'{"model": "llama", "prompt": "\\ud800"}',
        400,
        error(f"prompt {SURROGATE}", "prompt"),
    ),
    (
        "/v1/completions",
        b'{"model": "\\ud800", "prompt": "x"}',
        400,
        error(f"model {SURROGATE}", "model"),
    ),
    (
        "/v1/chat/completions",
        b'{"model": "llama", "messages": [{"role": "user", "content": "hi \\udc00"}]}',
        400,
        error(f"messages {SURROGATE}", "messages"),
    ),
    (
        "/v1/completions",
        b'{"model": "llama", "prompt": "x", "max_tokens": ' + b"9" * 5000 + b"}",
        400,
        error("the request body holds a number of 5000 characters: at most 100"),
    ),
    (
        "/v1/completions",
        b"[" * 100_000 + b"]" * 100_000,
        400,
        error("the request body nests arrays and objects 100000 deep: at most 64"),
    ),
    (
        "/v1/completions",
        b'{"model": "llama", "prompt": "x", "temperature": NaN}',
        400,
        error("the request body holds NaN, which is not a JSON number"),
    ),
    (
        "/v1/chat/completions",
        NOT_UTF8,
        400,
        error(f"the request body is not UTF-8 (byte {NOT_UTF8.index(0xC3)} is 0xc3)"),
    ),
    (  # int() of over 4,300 digits raised ValueError: a 500
        "/v1/completions",
        completion("x", logit_bias={"0" * 5000 + "1": 1}),
        400,
        error(f"logit_bias keys must be token ids (integers >= 0), got '{'0' * 56}...", "logit_bias"),
    ),
    (  # a client's value is shown cut to 60 characters, not echoed whole
        "/v1/completions",
        completion("x", temperature="a" * 100_000),
        400,
        error(f"temperature must be a number >= 0 and <= 2, got '{'a' * 56}...", "temperature"),
    ),
    (  # its length times the tokens was the cost of finding it: bounded
        "/v1/completions",
        completion("x", stop=["a", "b" * 1025]),
        400,
        error("stop strings are 1024 characters at most, got one of 1025", "stop"),
    ),
    (  # one of them was ignored
        "/v1/chat/completions",
        json.dumps(
            {"model": "llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
            | {"max_completion_tokens": 3}
        ).encode(),
        400,
        error("max_completion_tokens and max_tokens differ: send one", "max_tokens"),
    ),
    *(  # true or false, not 1 or 0 (which Python's `in (True, False)` took)
        ("/v1/completions", completion("x", **{key: 1}), 400, error(f"{key} must be true or false, got 1", key))
        for key in ("ignore_eos", "stream", "return_token_ids")
    ),
    (  # vLLM's continuous_usage_stats would change the chunks: refused, not ignored
        "/v1/completions",
        completion("x", stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}),
        400,
        error(
            "stream_options: 'continuous_usage_stats' is not supported (only include_usage)",
            "stream_options.continuous_usage_stats",
        ),
    ),
    (
        "/v1/chat/completions",
        json.dumps({"model": "llama", "messages": [{"role": "user", "content": "x", "refusal": "no"}]}).encode(),
        400,
        error(
            "messages[0]: field 'refusal' is not supported (a message takes content, name, role, tool_call_id, "
            "tool_calls)",
            "messages[0].refusal",
        ),
    ),
    (
        "/v1/chat/completions",
        json.dumps(
            {"model": "llama", "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache": 1}]}]}
        ).encode(),
        400,
        error(
            'messages[0].content[0]: only text parts ({"type": "text", "text": ...}) are supported, got '
            "{'type': 'text', 'text': 'x', 'cache': 1}",
            "messages[0].content",
        ),
    ),
    (
        "/v1/chat/completions",
        json.dumps(
            {"model": "llama", "messages": [{"role": "user", "content": "x"}], "logprobs": 1, "top_logprobs": 2}
        ).encode(),
        400,
        error("logprobs must be true or false, got 1", "logprobs"),
    ),
    (
        "/v1/completions",
        PLAIN + b" x",
        400,
        error(
            f"the request body is not valid JSON: Extra data: line 1 column {len(PLAIN) + 2} (char {len(PLAIN) + 1})"
        ),
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "expected"), HOSTILE, ids=range(len(HOSTILE)))
def test_a_malformed_body_is_a_4xx_in_openais_json(server: Any, path: str, body: bytes, status: int, expected: dict):
    got, headers, reply = post(server.url, path, body)
    assert (got, headers["content-type"], json.loads(reply)) == (status, "application/json", expected)


@pytest.fixture
def tokenizer_spy(server: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[..., Any]], None]:
    """Replace the server's ``Tokenizer.encode`` with ``wrap(real_encode)`` for one test."""
    tokenizer = server.service.tokenizer

    def install(wrap: Callable[..., Any]) -> None:
        monkeypatch.setattr(tokenizer, "encode", wrap(tokenizer.encode))

    return install


@pytest.fixture
def encoded(tokenizer_spy: Callable[[Callable[[Callable[..., Any]], Any]], None]) -> list[str]:
    """Every text the server's tokenizer encodes during one test, in order."""
    texts: list[str] = []

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(text: str, **options: Any) -> list[int]:
            texts.append(text)
            return real(text, **options)

        return recorded

    tokenizer_spy(wrap)
    return texts


def test_an_internal_error_is_a_json_500_naming_a_log_id(server, tokenizer_spy, caplog) -> None:
    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def broken(text: str, **options: Any) -> list[int]:
            raise RuntimeError(f"internals of {LLM}")

        return broken

    tokenizer_spy(wrap)
    with caplog.at_level(logging.ERROR, logger="ortstate.serve"):
        status, headers, reply = post(server.url, "/v1/completions", completion("Hello"))
    body = json.loads(reply)
    message = body["error"]["message"]
    found = re.fullmatch(r"internal error \(log id ([0-9a-f]{12})\): the server's log has the details", message)
    assert (status, headers["content-type"], found is not None) == (500, "application/json", True)
    assert body == error(message, kind="server_error", code="internal_error")
    assert str(LLM).encode() not in reply
    logged = [r for r in caplog.records if found.group(1) in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert isinstance(logged[0].exc_info[1], RuntimeError)  # the traceback is in the log, not the reply


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_generation_that_fails_names_a_log_id_not_its_error(server, monkeypatch, caplog, stream: bool) -> None:
    """The engine's error (a run failing, in its words: a path, ONNX Runtime's text) goes to the
    log under an id; the client gets the id, as a 500 or as the stream's last event."""

    async def failing(started: Any) -> Any:
        raise RunError(f"{LLM}/openvino_model.onnx: ONNX Runtime failed")
        yield 0  # an async generator, as ContinuousBatcher.stream's items are

    monkeypatch.setattr(server.service.batcher, "stream", lambda *args, **kwargs: TokenStream(failing))
    with caplog.at_level(logging.ERROR, logger="ortstate.serve"):
        status, _, reply = post(server.url, "/v1/completions", completion("Hello", stream=stream))
    if stream:
        events = [json.loads(line[6:]) for line in reply.decode().split("\n\n") if line.startswith("data: {")]
        status, body = 500, events[-1]
    else:
        body = json.loads(reply)
    message = body["error"]["message"]
    found = re.fullmatch(r"internal error \(log id ([0-9a-f]{12})\): the server's log has the details", message)
    assert (status, found is not None, body["error"]["code"]) == (500, True, "internal_error")
    assert str(LLM).encode() not in reply
    logged = [r for r in caplog.records if found.group(1) in r.getMessage()]
    assert len(logged) == 1 and isinstance(logged[0].exc_info[1], RunError)


def test_no_reply_names_a_path_of_the_server(server: Any, tmp_path: Path) -> None:
    """The issue's probe (a chat message with role tool) and every other refusal a folder's files are
    in: the template failing, no template (a base model), an internal error's body."""
    base = tmp_path / "llama"  # the same model without a chat template
    base.mkdir()
    for path in (LLM / "llama").iterdir():
        (base / path.name).symlink_to(path)
    config = json.loads((LLM / "llama" / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (base / "tokenizer_config.json").unlink()
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    tool = {"model": "llama", "messages": [{"role": "tool", "content": "hi"}]}
    user = {"model": "llama", "messages": [{"role": "user", "content": "hi"}]}
    replies = [post(server.url, "/v1/chat/completions", json.dumps(tool).encode())]
    replies += [post(server.url, path, body) for path, body, _, _ in HOSTILE]
    with serve_llm_in_thread(LlmServeConfig(base, 2, slots=2, token=TOKEN)) as bare:
        replies.append(post(bare.url, "/v1/chat/completions", json.dumps(user).encode()))
    assert [r[0] for r in replies[:1] + replies[-1:]] == [400, 400]
    assert json.loads(replies[0][2])["error"]["message"] == (
        "tokenizer_config.json: chat template failed: roles are system, user and assistant, got tool"
    )
    assert json.loads(replies[-1][2])["error"]["message"].startswith("tokenizer_config.json: no chat_template")
    for where in (str(LLM), str(tmp_path), str(REPO)):
        assert [r for r in replies if where.encode() in r[2]] == []


def test_a_request_is_tokenized_once(server, encoded) -> None:
    status, _, reply = post(server.url, "/v1/completions", completion("Once upon a time"))
    assert status == 200, reply
    assert encoded == ["Once upon a time"]


def test_a_conversations_turn_is_tokenized_once_what_it_adds(server, encoded) -> None:
    """A turn going on from the last one (X-Ortstate-Conversation) tokenizes only the text it adds."""
    first = "Once upon a time"
    status, _, reply = post(server.url, "/v1/completions", completion(first), conversation="hostile-c1")
    assert status == 200, reply
    second = first + json.loads(reply)["choices"][0]["text"] + " and then"
    status, _, reply = post(server.url, "/v1/completions", completion(second), conversation="hostile-c1")
    assert status == 200, reply
    assert json.loads(reply)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert encoded == [first, " and then"]


def test_health_answers_while_a_request_tokenizes(server, tokenizer_spy) -> None:
    """Tokenizing runs off the event loop: with the tokenizer held in the middle of a request,
    ``/health`` answers; the request answers once the tokenizer lets go."""
    entered, release = threading.Event(), threading.Event()

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def held(text: str, **options: Any) -> list[int]:
            entered.set()
            assert release.wait(60)
            return real(text, **options)

        return held

    tokenizer_spy(wrap)
    done: list[int] = []
    request = threading.Thread(target=lambda: done.append(post(server.url, "/v1/completions", completion("x"))[0]))
    request.start()
    try:
        assert entered.wait(60)
        status, _, reply = post(server.url, "/health", None, timeout=30)  # on the loop: answers at once
        assert (status, json.loads(reply)) == (200, {"ok": True})
    finally:
        release.set()
        request.join(60)
    assert done == [200]


def test_a_prompt_too_long_for_the_context_is_refused_before_it_is_tokenized(server, encoded) -> None:
    """llama's context is 128 tokens, and no token of its vocabulary stands for more than 13 bytes:
    a megabyte of text cannot fit, and is refused without tokenizing it (token_bound.py)."""
    text = "Hello world, ortstate runs stateful models. " * 23_000
    fewest = -(-len(text) // 13)  # ASCII: a byte a character
    status, _, reply = post(server.url, "/v1/completions", completion(text))
    assert (status, json.loads(reply)) == (
        400,
        error(
            f"this model's maximum context length is 128 tokens; the request asks for at least {fewest + 2} (at least "
            f"{fewest} in the prompt, by the length of its text: no token of this model stands for more than 13 "
            "bytes; 2 for the completion)",
            "prompt",
            "context_length_exceeded",
        ),
    )
    chat = {"model": "llama", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
    status, _, reply = post(server.url, "/v1/chat/completions", json.dumps(chat).encode())
    assert (status, json.loads(reply)["error"]["code"]) == (400, "context_length_exceeded")
    assert encoded == []


def test_a_messages_name_reaches_the_chat_template(tmp_path: Path) -> None:
    """vLLM gives a message's ``name`` to the chat template: so does this server (it was dropped,
    accepted and ignored); a template that writes it gives other tokens with it than without."""
    folder = tmp_path / "named"
    folder.mkdir()
    for path in (LLM / "llama").iterdir():
        if path.name != "tokenizer_config.json":
            (folder / path.name).symlink_to(path)
    config = json.loads((LLM / "llama" / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for m in messages %}{{ '<|' + m['role'] + '|>' + (m['name'] ~ ': ' if m['name'] is defined else '') "
        "+ m['content'] + '\\n' }}{% endfor %}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer.from_dir(folder)
    with serve_llm_in_thread(LlmServeConfig(folder, 2, slots=2, token=TOKEN)) as named:
        for name, text in ((None, "<|user|>hi\n"), ("bob", "<|user|>bob: hi\n")):
            message = {"role": "user", "content": "hi", **({"name": name} if name else {})}
            body = {"messages": [message], "add_special_tokens": False}
            status, _, reply = post(named.url, "/tokenize", json.dumps(body).encode())
            assert (status, json.loads(reply)["tokens"]) == (200, tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("text/plain", 415),  # what a web page can make a browser post anywhere without asking (CORS)
        ("application/x-www-form-urlencoded", 415),  # likewise, and curl -d's
        ("multipart/form-data; boundary=x", 415),
        ("application/json; charset=utf-8", 200),
        ("application/vnd.api+json", 200),
        (None, 200),  # read as JSON, as vLLM does (a browser's would carry an Origin: test_origin)
    ],
)
def test_a_body_sent_as_other_than_json_is_refused(server: Any, content_type: str | None, status: int) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"authorization": f"Bearer {TOKEN}", **({"content-type": content_type} if content_type else {})}
    try:
        for path, body in (("/v1/completions", PLAIN), ("/tokenize", b'{"prompt": "x"}')):
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            reply = json.loads(response.read())
            if status == 415:
                expected = error(
                    f"content-type must be application/json, got {content_type!r}",
                    "content-type",
                    "unsupported_media_type",
                )
                assert (response.status, reply) == (415, expected)
            else:
                assert response.status == 200, reply
    finally:
        connection.close()


@pytest.mark.parametrize("n", [1, 2])
def test_health_answers_while_an_answer_renders(server: Any, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """A whole answer (one choice, or ``n``) is shaped and rendered off the event loop: every
    token's top logprobs are megabytes for a long one (n 8, top_logprobs 20 and 110 tokens on
    llama held ``/health`` 148 ms). With its rendering held, ``/health`` answers."""
    entered, release = threading.Event(), threading.Event()
    module, name = (app_module, "completion") if n == 1 else (choices_module, "response")
    real = getattr(module, name)

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, held)
    done: list[int] = []
    body = completion("x", n=n, temperature=1 if n > 1 else 0, logprobs=2)
    request = threading.Thread(target=lambda: done.append(post(server.url, "/v1/completions", body)[0]))
    request.start()
    try:
        assert entered.wait(60)
        status, _, reply = post(server.url, "/health", None, timeout=30)
        assert (status, json.loads(reply)) == (200, {"ok": True})
    finally:
        release.set()
        request.join(60)
    assert done == [200]
