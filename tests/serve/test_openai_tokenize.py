"""``ortstate serve`` for an LLM folder: vLLM's ``/tokenize`` and ``/detokenize`` (each equal to the
folder's tokenizer and chat template), what the start line and the defaults say (the cores, the
context, the KV budget), and the knobs that set them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from conftest import openai_error
from oracle import REPO

from ortstate.generate import Tokenizer
from ortstate.runtime.cpu import usable_cores
from ortstate.serve import LlmServeConfig, serve_llm_in_thread

LLAMA = REPO / "models" / "llm" / "llama"
TOKEN = "s3cret"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]


def post(url: str, body: Any, token: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def served() -> Any:
    with serve_llm_in_thread(LlmServeConfig(LLAMA, 4, slots=2, max_model_len=96, token=TOKEN)) as running:
        yield running


def test_tokenize_gives_the_folders_tokens_of_a_text_and_of_a_chat(served: Any) -> None:
    tokenizer = Tokenizer.from_dir(LLAMA)
    text = "Once upon a time, there was a tokenizer."
    ids = tokenizer.encode(text)
    status, got = post(served.url + "/tokenize", {"model": "llama", "prompt": text, "return_token_strs": True}, TOKEN)
    strs = [tokenizer.backend.id_to_token(i) for i in ids]
    assert (status, got) == (200, {"count": len(ids), "max_model_len": 96, "tokens": ids, "token_strs": strs})
    status, got = post(served.url + "/tokenize", {"prompt": text, "add_special_tokens": False}, TOKEN)
    assert (status, got["tokens"], got["token_strs"]) == (200, tokenizer.encode(text, add_special_tokens=False), None)
    for generation_prompt in (True, False):
        chat = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=generation_prompt)
        body = {"model": "llama", "messages": MESSAGES, "add_generation_prompt": generation_prompt}
        status, got = post(served.url + "/tokenize", body, TOKEN)
        assert (status, got["tokens"]) == (200, tokenizer.encode(chat, add_special_tokens=False))


def test_detokenize_gives_the_text_of_the_ids(served: Any) -> None:
    tokenizer = Tokenizer.from_dir(LLAMA)
    ids = tokenizer.encode("Hello world, again")
    status, got = post(served.url + "/detokenize", {"model": "llama", "tokens": ids}, TOKEN)
    assert (status, got) == (200, {"prompt": tokenizer.decode(ids, skip_special_tokens=False)})


EITHER = "give either prompt (a text) or messages (a chat)"
NOT_HERE = "field(s) not supported here: "
BOOL = "add_special_tokens must be true or false, got 'yes'"
ROLE = "messages[0] must be an object with a role, got {'content': 'x'}"
NOT_ID = "is not a token id of this model (0 to 255)"
REFUSED = [
    ("/tokenize", {"prompt": "a", "messages": MESSAGES}, EITHER, "prompt"),
    ("/tokenize", {"model": "llama"}, EITHER, "prompt"),
    ("/tokenize", {"prompt": ["a"]}, "prompt must be a string, got ['a']", "prompt"),
    ("/tokenize", {"prompt": "a", "tools": []}, NOT_HERE + "'tools'", "tools"),
    ("/tokenize", {"prompt": "a", "echo": True}, NOT_HERE + "'echo'", "echo"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, BOOL, "add_special_tokens"),
    ("/tokenize", {"messages": [{"content": "x"}]}, ROLE, "messages[0]"),
    ("/detokenize", {"tokens": [1, "2"]}, "tokens must be a list of token ids, got [1, '2']", "tokens"),
    ("/detokenize", {"tokens": [1, 10**9]}, f"tokens: 1000000000 {NOT_ID}", "tokens"),
    ("/detokenize", {"tokens": [-1]}, f"tokens: -1 {NOT_ID}", "tokens"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "message", "param"), REFUSED)
def test_bad_tokenize_requests_are_refused_naming_the_field(
    served: Any, path: str, body: Any, message: str, param: str
) -> None:
    status, got = post(served.url + path, body, TOKEN)
    assert (status, got) == (400, openai_error(message, param))


def test_tokenize_is_behind_the_token_and_names_the_model(served: Any) -> None:
    status, _ = post(served.url + "/tokenize", {"prompt": "a"})
    assert status == 401
    status, got = post(served.url + "/detokenize", {"model": "other", "tokens": [1]}, TOKEN)
    assert status == 404 and got["error"]["param"] == "model"


def test_the_defaults_use_the_machine_and_the_knobs_set_them() -> None:
    """No threads given: the cores this process may use; max_model_len and kv_cache_bytes reach the
    pool (and /v1/models); the model's context bounds max_model_len."""
    with serve_llm_in_thread(LlmServeConfig(LLAMA, 2, slots=2)) as running:
        pool = running.service.batcher.pool
        assert running.service.threads == session_threads(pool) == usable_cores()
        assert running.service.context == pool.max_context
    config = LlmServeConfig(LLAMA, 2, slots=2, threads=1, max_model_len=40, kv_cache_bytes=1 << 20)
    with serve_llm_in_thread(config) as running:
        pool = running.service.batcher.pool
        assert (running.service.threads, session_threads(pool)) == (1, 1)
        assert (pool.max_context, pool.kv_cache_bytes) == (40, 1 << 20)
        with urllib.request.urlopen(running.url + "/v1/models", timeout=30) as reply:
            assert json.loads(reply.read())["data"][0]["max_model_len"] == 40


def session_threads(pool: Any) -> int:
    """The intra-op threads ONNX Runtime's session of ``pool`` was made with."""
    return pool.loaded.session.get_session_options().intra_op_num_threads
