"""``ortstate serve`` for an LLM folder refuses what it cannot do in OpenAI's error body, with
OpenAI's statuses (400, 401, 404, 405, 413, 503), through the ``openai`` client and raw HTTP; the
command line serves a folder until SIGTERM, and refuses what does not fit in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from conftest import openai_client, openai_error, serving
from oracle import REPO, assert_one_line_error, run_cli

from ortstate.errors import ServeError
from ortstate.generate import Generator
from ortstate.runtime.cpu import usable_cores
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

LLM = REPO / "models" / "llm"
TOKEN = "s3cret"

SESSION_HEADER_VARIABLE = "RAY_SERVE_SESSION_ID_HEADER_KEY"  # what Ray Serve's proxy routes by


error = openai_error


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 3, slots=2, token=TOKEN)) as running:
        yield running


def client(url: str, key: str = TOKEN) -> openai.OpenAI:
    return openai_client(url, key)


def raw(url: str, path: str, body: bytes | None, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url + path, data=body, headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def refused(call: Any, status: int) -> dict:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    assert info.value.status_code == status
    return info.value.response.json()


def test_requests_the_server_cannot_take(server: Any) -> None:
    api = client(server.url)
    long, longer = (len(server.service.tokenizer.encode("x " * n)) for n in (100, 30))
    complete = api.completions.create
    chat = api.chat.completions.create
    cases = [
        (
            lambda: complete(model="gpt-4", prompt="x"),
            404,
            error("the model 'gpt-4' does not exist: this server serves 'llama'", "model", "model_not_found"),
        ),
        (
            lambda: complete(model="llama", prompt="x", max_tokens=-1),
            400,
            error("max_tokens must be an integer >= 1, got -1", "max_tokens"),
        ),
        (
            lambda: complete(model="llama", prompt="x " * 100),
            400,
            error(
                f"this model's maximum context length is 128 tokens; the request asks for {long + 1} ({long} in the "
                "prompt, 1 for the completion)",
                "prompt",
                "context_length_exceeded",
            ),
        ),
        (
            lambda: complete(model="llama", prompt="x " * 30, max_tokens=100),
            400,
            error(
                f"this model's maximum context length is 128 tokens; the request asks for {longer + 100} ({longer} "
                "in the prompt, 100 for the completion)",
                "prompt",
                "context_length_exceeded",
            ),
        ),
        (
            lambda: chat(model="llama", messages=[{"role": "user", "content": "hi"}], n=2, temperature=0),
            400,
            error("n must be 1 when decoding greedily, got 2: n > 1 choices need sampling", "n"),
        ),
        (
            lambda: chat(model="llama", messages=[{"role": "user", "content": "hi"}], logit_bias={"5": 101}),
            400,
            error("logit_bias values must be numbers in [-100, 100], got 101 for token 5", "logit_bias"),
        ),
        (
            lambda: chat(model="llama", messages=[{"role": "tool", "content": "hi"}]),
            400,
            error(
                "tokenizer_config.json: chat template failed: roles are system, user and assistant, got tool",
                "messages",
            ),
        ),
        (
            lambda: chat(model="llama", messages=[], temperature=0),
            400,
            error("messages must be a non-empty list, got []", "messages"),
        ),
        (
            lambda: chat(model="llama", messages=[{"role": "user", "content": "hi"}], temperature=3),
            400,
            error("temperature must be a number >= 0 and <= 2, got 3", "temperature"),
        ),
        (
            lambda: complete(model="llama", prompt="x", stream_options={"include_usage": True}),
            400,
            error("stream_options is only allowed when stream is true", "stream_options"),
        ),
        (
            lambda: complete(model="llama", prompt=["one", "two"]),
            400,
            error("prompt must be one prompt per request, got ['one', 'two']", "prompt"),
        ),
        (
            lambda: complete(model="llama", prompt=[5, 300]),
            400,
            error("token id(s) 300 outside the vocabulary (0..255)", "prompt"),
        ),
        (
            lambda: api.models.retrieve("gpt-4"),
            404,
            error("the model 'gpt-4' does not exist: this server serves 'llama'", "model", "model_not_found"),
        ),
    ]
    for call, status, body in cases:
        assert refused(call, status) == body


def test_raw_http_errors(server: Any) -> None:
    message = (
        "the request body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)"
    )
    assert raw(server.url, "/v1/completions", b"{bad") == (400, error(message))
    assert raw(server.url, "/v1/chat/completions", b"[1]") == (
        400,
        error("the request body must be a JSON object, got list"),
    )
    assert raw(server.url, "/v1/completions", b'{"model": "llama", "prompt": "' + b"x" * (1 << 20) + b'"}') == (
        413,
        error("the request body is over 1048576 bytes"),
    )
    assert raw(server.url, "/v1/nowhere", b"{}") == (404, error("POST /v1/nowhere: Not Found"))
    assert raw(server.url, "/v1/completions", None) == (405, error("GET /v1/completions: Method Not Allowed"))
    unauthorized = error("missing or wrong API key (send Authorization: Bearer TOKEN)", code="invalid_api_key")
    assert raw(server.url, "/v1/models", None, token=None) == (401, unauthorized)
    assert refused(lambda: client(server.url, key="wrong").models.list(), 401) == unauthorized


def test_a_full_server_answers_503_until_a_place_is_free(server: Any) -> None:
    api = client(server.url)
    releases = [server.service.admit() for _ in range(3)]  # the server's 3 places, as 3 requests hold them
    try:
        full = error(
            "server full: it generates for 3 requests (--max-streams 3); try again later",
            kind="server_error",
            code="server_full",
        )
        assert refused(lambda: api.completions.create(model="llama", prompt="x", max_tokens=2), 503) == full
        releases.pop()()
        got = api.completions.create(model="llama", prompt="x", max_tokens=2, temperature=0)
        assert got.choices[0].finish_reason in ("length", "stop") and got.usage.completion_tokens >= 1
    finally:
        for release in releases:
            release()
    assert server.service.in_flight == 0


def test_no_token_means_loopback_only() -> None:
    with pytest.raises(ServeError) as info:
        with serve_llm_in_thread(LlmServeConfig(LLM / "llama", host="0.0.0.0")):
            pass
    assert str(info.value).startswith("refusing to listen on 0.0.0.0 without a token")


def test_the_command_line_serves_a_folder_until_sigterm() -> None:
    gen = Generator.from_dir(LLM / "qwen2")
    messages = [{"role": "user", "content": "Which runtime runs it?"}]
    prompt = gen.tokenizer.apply_chat_template(messages)
    want = gen.tokenizer.decode(gen.generate(gen.tokenizer.encode(prompt, add_special_tokens=False), 5))
    knobs = ("--max-model-len", "100", "--kv-cache-bytes", "64M")  # said at start, with the threads: the cores
    said = rf"\(OpenAI API at /v1, 64 requests generating at once, {usable_cores()} threads, max model len 100, "
    said += r"KV cache 64\.00 MiB = 131,072 positions; SIGTERM or Ctrl-C stops it\)$"  # 64 MiB / 512 B a position
    with serving("--token", TOKEN, "--model-name", "tiny", *knobs, model=LLM / "qwen2", then=said) as (proc, url):
        api = client(url)
        got = api.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0)
        assert got.choices[0].message.content == want
        assert refused(lambda: client(url, key="wrong").models.list(), 401)["error"]["code"] == "invalid_api_key"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.splitlines()[-1] == "ortstate serve: stopped"
    usage = got.usage
    logged = [line.rsplit(" ", 2)[0] for line in err.splitlines()]  # the access log's, its ms left out
    assert logged == [
        f"ortstate serve: POST /v1/chat/completions 200 prompt {usage.prompt_tokens} cached 0 generated 5",
        "ortstate serve: GET /v1/models 401",
    ]


def test_the_docs_curl_example() -> None:
    """docs/serve-llm.md's curl line, run against ``ortstate serve models/llm/llama`` on the port it got."""
    section = (REPO / "docs" / "serve-llm.md").read_text(encoding="utf-8").split("## Call")[1]
    line = next(b for b in section.split("```bash\n")[1:] if b.startswith("curl ")).split("```")[0]
    gen = Generator.from_dir(LLM / "llama")
    prompt = gen.tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}])
    ids = gen.tokenizer.encode(prompt, add_special_tokens=False)
    want = gen.generate(ids, 8)
    with serving(model=LLM / "llama") as (proc, url):
        assert "http://127.0.0.1:8000/" in line
        done = subprocess.run(
            ["bash", "-c", line.replace("http://127.0.0.1:8000", url)], capture_output=True, text=True
        )
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["id"].startswith("chatcmpl-") and isinstance(body.pop("created"), int)
    assert body == {
        "id": body["id"],
        "object": "chat.completion",
        "model": "llama",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": gen.tokenizer.decode(want)},
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": {  # as docs/serve-llm.md says
            "prompt_tokens": 14,
            "completion_tokens": 8,
            "total_tokens": 22,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    assert len(ids) == 14 and len(want) == 8


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ["serve", LLM / "t5"],
            1,
            f"{LLM / 't5'}: has an encoder: ortstate serve takes decoder-only LLMs (token ids in)",
        ),
        (
            ["serve", LLM / "mamba"],
            1,
            f"{LLM / 'mamba' / 'openvino_model.xml'}: cannot pool its streams: the model has no KV cache",
        ),
        (
            ["serve", LLM / "llama", "--ray"],
            2,
            "--ray needs --state-dir: a folder every replica reaches, where conversations move",
        ),
        (
            ["serve", LLM / "llama", "--ray", "--state-dir", "unused", "--host", "0.0.0.0"],
            2,
            "refusing to listen on 0.0.0.0 without a token: anyone who reaches it could use the model; give "
            "--token (or ORTSTATE_SERVE_TOKEN), or listen on 127.0.0.1",
        ),
        (
            ["serve", LLM / "llama", "--ray", "--state-dir", "unused", "--replicas", "0"],
            2,
            "--replicas must be positive, got 0",
        ),
        (["serve", LLM / "llama", "--max-conversations", "0"], 2, "--max-conversations must be positive, got 0"),
        (["serve", LLM / "llama", "--max-batch", "0"], 2, "--max-batch must be positive, got 0"),
        (["serve", LLM / "llama", "--max-message-bytes", "0"], 2, "--max-message-bytes must be positive, got 0"),
        (
            ["serve", LLM / "llama", "--idle-park", "5"],
            2,
            "--idle-park needs --state-dir: parked conversations are written there",
        ),
        (
            ["serve", REPO / "models" / "lstm_1l" / "model.xml", "--model-name", "x"],
            2,
            "--model-name and --max-conversations apply to an LLM folder",
        ),
        (
            ["serve", REPO / "models" / "lstm_1l" / "model.xml", "--no-prefix-cache"],
            2,
            "--no-prefix-cache applies to an LLM folder",
        ),
    ],
    ids=[
        "encoder-decoder",
        "no-kv-cache",
        "ray",
        "ray-exposed",
        "ray-replicas",
        "max-conversations",
        "max-batch",
        "max-message-bytes",
        "idle-park",
        "model-name",
        "no-prefix-cache",
    ],
)
def test_command_line_refusals(capsys: pytest.CaptureFixture[str], argv: list, code: int, message: str) -> None:
    """Each refusal one line, and the process as it was: a refused ``--ray`` leaves no routing
    variable behind for a Ray started later in the same process (a stream server's routes by
    another header)."""
    routing = os.environ.get(SESSION_HEADER_VARIABLE)
    got, out, err = run_cli(capsys, *argv, "--port", "0")
    assert (got, out) == (code, "")
    assert_one_line_error(err, message)
    assert os.environ.get(SESSION_HEADER_VARIABLE) == routing


def test_a_base_model_without_a_chat_template_serves_completions_and_refuses_chat(tmp_path) -> None:
    """No chat template (a base model): completions are served, and a chat request gets a 400 that
    says why, in OpenAI's error body."""
    folder = tmp_path / "llama"
    folder.mkdir()
    for path in (LLM / "llama").iterdir():
        (folder / path.name).symlink_to(path)
    config = json.loads((LLM / "llama" / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with serve_llm_in_thread(LlmServeConfig(folder, 2, slots=2)) as running:
        client = openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0)
        done = client.completions.create(model="llama", prompt=[1, 5, 7], max_tokens=3, temperature=0)
        assert done.choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 400
        assert "no chat_template" in info.value.body["message"] and info.value.body["param"] == "messages"
