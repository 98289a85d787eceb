"""``ortstate serve LLM_DIR --ray``: the OpenAI API on Ray Serve (this machine's Ray, 127.0.0.1),
through the official ``openai`` client against Ray's HTTP proxy. Conversations are routed by
``X-Ortstate-Conversation`` (each turn on the replica its id hashes to), streamed answers come
through the proxy, greedy answers are a lone Generator's, and a conversation whose replica is
SIGKILLed between turns continues on another exactly as it goes on a server never stopped."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from typing import Any

import openai
import pytest
from conftest import openai_client as client
from conftest import ray_on_this_machine, serving
from oracle import REPO
from ray import serve

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve.openai.ray_deployment import make_llm_app, route_by_conversation

FOLDER = REPO / "models" / "llm" / "llama"
HEADER = "X-Ortstate-Conversation"
TURNS = ["Hello there", "And then?", "Why so?"]
CONVERSATIONS = 6


@pytest.fixture(scope="module")
def llama() -> Generator:
    return Generator.from_dir(FOLDER)


def turn(api: openai.OpenAI, messages: list[dict[str, str]], cid: str) -> tuple[Any, str]:
    """One streamed greedy chat turn of 6 tokens in conversation ``cid``: (its content, token ids and
    usage as one record, the server that answered); ``messages`` gets the reply appended."""
    raw = api.chat.completions.with_raw_response.create(
        model="llama",
        messages=messages,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={HEADER: cid},
        extra_body={"return_token_ids": True},
    )
    text, ids, used = "", [], None
    for part in raw.parse():
        if part.usage is not None:
            used = part.usage
        for choice in part.choices:
            text += choice.delta.content or ""
            ids += (choice.model_extra or {}).get("token_ids") or []
    messages.append({"role": "assistant", "content": text})
    return {
        "text": text,
        "ids": ids,
        "prompt": used.prompt_tokens,
        "cached": used.prompt_tokens_details.cached_tokens,
    }, (raw.headers["x-ortstate-server"])


def streamed_ids(parts: Any) -> list[int]:
    return [t for part in parts for t in part.choices[0].model_extra.get("token_ids", [])]


def retried(step: Any, deadline: float) -> Any:
    """``step()`` again while the proxy still routes to a replica that is gone (a refused request
    changes no conversation: it is claimed only once a replica takes the request)."""
    while True:
        try:
            return step()
        except (openai.APIConnectionError, openai.InternalServerError, openai.APIStatusError) as exc:
            assert time.monotonic() < deadline, f"no replica took the request: {exc}"
            time.sleep(0.5)


def forbidden(url: str, headers: dict[str, str]) -> bool:
    """``GET /v1/health`` with ``headers`` is refused 403 in OpenAI's body (``code`` ``"forbidden"``)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("GET", "/v1/health", headers=headers)
        response = connection.getresponse()
        return response.status == 403 and json.loads(response.read())["error"]["code"] == "forbidden"
    finally:
        connection.close()


@pytest.fixture(scope="module")
def local_ray():
    """Ray on this machine for the module, its proxy routing by the conversation header."""
    with ray_on_this_machine(route_by_conversation) as url:
        yield url


def test_a_conversation_continues_on_another_replica_after_its_own_is_killed(local_ray, tmp_path, llama):
    """Six conversations or more (until both replicas hold one) over two replicas: every turn of one
    lands on the replica of its first turn; plain requests (no conversation) are a lone Generator's,
    streamed or whole. Then the replica holding the first conversation is SIGKILLed: its next turns
    continue on another replica from the cache parked in the shared directory (``cached_tokens``
    all but one of the last turn's tokens), and every turn of every conversation equals the same
    conversation on a plain server never stopped."""
    serve.run(
        make_llm_app(LlmServeConfig(FOLDER, 16, slots=4, state_dir=tmp_path), replicas=2),
        name="ortstate",
        route_prefix="/",
    )
    api = client(local_ray)
    prompt = [1, 5, 7, 9, 11]
    whole = api.completions.create(model="llama", prompt=prompt, max_tokens=8, temperature=0)
    assert whole.choices[0].text == llama.tokenizer.decode(llama.generate(prompt, 8))
    streamed = api.completions.create(
        model="llama", prompt=prompt, max_tokens=8, temperature=0, stream=True, extra_body={"return_token_ids": True}
    )
    assert streamed_ids(streamed) == llama.generate(prompt, 8)
    # the replicas see the client's Host and Origin through Ray's proxy: a web page is refused there too
    for headers in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}):
        assert forbidden(local_ray, headers)

    histories: list[list[dict[str, str]]] = []
    got: list[list[Any]] = []
    servers: list[list[str]] = []

    def go(k: int, text: str) -> None:
        histories[k].append({"role": "user", "content": text})
        record, server = retried(lambda: turn(api, histories[k], f"conv-{k}"), time.monotonic() + 90)
        got[k].append(record)
        servers[k].append(server)

    # conversations until both replicas hold one: the router hashes ids over replica ids Ray draws
    # afresh each run, so six fixed ids all land on one replica one run in 32
    while len(servers) < CONVERSATIONS or len({s[0] for s in servers}) < 2:
        assert len(servers) < 4 * CONVERSATIONS, f"the conversations did not spread over both replicas: {servers}"
        k = len(servers)
        for kept in (histories, got, servers):
            kept.append([])
        go(k, TURNS[0])
        go(k, TURNS[1])
    assert all(s[0] == s[1] for s in servers), servers
    victim = servers[0][1]
    os.kill(int(victim.rsplit("-", 1)[1]), signal.SIGKILL)
    go(0, TURNS[2])
    assert servers[0][2] != victim
    for k in range(1, len(servers)):
        go(k, TURNS[2])

    with serve_llm_in_thread(LlmServeConfig(FOLDER, 8, slots=4)) as plain:
        for k in range(len(servers)):
            messages: list[dict[str, str]] = []
            for n, text in enumerate(TURNS):
                messages.append({"role": "user", "content": text})
                alone, _ = turn(client(plain.url), messages, f"conv-{k}")
                assert got[k][n] == alone, (k, n)
    for k in range(len(servers)):  # each turn after the first fed only the new text
        for n in (1, 2):
            assert got[k][n]["cached"] == got[k][n - 1]["prompt"] + len(got[k][n - 1]["ids"]) - 1, (k, n)
    # and the greedy tokens are a lone Generator's, for the ids the first turn was tokenized as
    tok = llama.tokenizer
    first = tok.encode(tok.apply_chat_template(histories[0][:1], add_generation_prompt=True), add_special_tokens=False)
    assert got[0][0]["ids"] == llama.generate(first, 6) and got[0][0]["prompt"] == len(first)
    serve.delete("ortstate")


def test_the_command_needs_the_token_and_parks_on_sigterm(tmp_path, llama):
    """``ortstate serve LLM_DIR --ray --token T`` (its own local Ray, one replica): 401 in OpenAI's
    error body without the token; with it, a streamed completion through Ray's proxy is a lone
    Generator's; SIGTERM exits 0 with the conversation parked in the state directory."""
    ray = ("--ray", "--replicas", "1", "--state-dir", str(tmp_path), "--token", "s3cret")
    announced = r"\(OpenAI API at /v1, Ray Serve, 1 replicas"
    with serving(*ray, model=FOLDER, timeout=180, then=announced) as (proc, url):
        with pytest.raises(openai.AuthenticationError) as info:
            client(url, "wrong").models.list()
        assert info.value.body["code"] == "invalid_api_key"
        prompt = [3, 8, 13, 21]
        parts = client(url, "s3cret").completions.create(
            model="llama",
            prompt=prompt,
            max_tokens=6,
            temperature=0,
            stream=True,
            extra_headers={HEADER: "kept"},
            extra_body={"return_token_ids": True},
        )
        assert streamed_ids(parts) == llama.generate(prompt, 6)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == f"ortstate serve: stopped; conversations parked in {tmp_path}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json", "kept.npz"]
