"""``ortstate serve``'s OpenAI API constrains answers to JSON schemas (llama, random weights: the grammar
alone makes them valid): ``response_format`` on both endpoints and a forced ``tool_choice`` on chat,
greedy and sampled, ``n`` choices, streamed; every answer validates and its tokens are a lone
Generator's with the same ``json_schema``; a tool's answer is ``message.tool_calls`` (streamed as
``delta.tool_calls``) finishing ``"tool_calls"``; every bad field a 400 naming it; the grammar compiled
off the event loop; without llguidance, a 400 saying how to install it."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import openai_client
from oracle import REPO

from ortstate.generate import Generator
from ortstate.serve import LlmServeConfig, serve_llm_in_thread
from ortstate.serve.openai.generation import Generation

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="onnxruntime 1.23 (Python 3.10) lacks GroupQueryAttention's causal attribute"
)
LLM = REPO / "models" / "llm"
ORDER = {
    "type": "object",
    "properties": {
        "item": {"enum": ["tea", "cake", "soup"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "notes": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
    },
    "required": ["item", "count"],
    "additionalProperties": False,
}
FORMATS = {
    "json_object": ({"type": "json_object"}, {"type": "object"}),
    "json_schema": ({"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER, "strict": True}}, ORDER),
}
TOOLS = [
    {"type": "function", "function": {"name": "order", "description": "Order food", "parameters": ORDER}},
    {"type": "function", "function": {"name": "ping"}},  # no parameters: {}
]
NAMED = {"type": "function", "function": {"name": "order"}}
MESSAGES = [{"role": "user", "content": "Lunch?"}]
SAMPLED = {"temperature": 0.8, "seed": 7}


@pytest.fixture(scope="module")
def llama() -> Iterator[tuple[Generator, str]]:
    gen = Generator.from_dir(LLM / "llama")
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 16, slots=8)) as running:
        yield gen, running.url


def post(url: str, body: dict[str, Any], chat: bool = True) -> tuple[int, Any]:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ask(url: str, chat: bool = True, **fields: Any) -> dict[str, Any]:
    body = {"model": "llama", "max_tokens": 60, "return_token_ids": True, **fields}
    body.update({"messages": fields.get("messages", MESSAGES)} if chat else {"prompt": "Lunch?"})
    status, got = post(url, body, chat)
    assert status == 200, got
    return got


def lone(gen: Generator, choice: dict[str, Any], schema: dict, fields: dict[str, Any], n: int = 1) -> list[list[int]]:
    """The lone Generator's tokens for the request's prompt, schema and search."""
    search: dict[str, Any] = {"json_schema": schema}
    if fields.get("temperature", 1) > 0:
        search.update(do_sample=True, temperature=fields["temperature"], top_p=1.0, top_k=0, seed=fields["seed"])
    return gen.generate_batch([choice["prompt_token_ids"]], 60, n=n, **search)


@pytest.mark.parametrize("search", [{"temperature": 0}, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_response_format_answers_validate_and_equal_a_lone_generator(llama, name: str, chat: bool, search) -> None:
    gen, url = llama
    response_format, schema = FORMATS[name]
    choice = ask(url, chat, response_format=response_format, **search)["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    jsonschema.validate(json.loads(text), schema)
    assert choice["token_ids"] == lone(gen, choice, schema, search)[0]
    assert choice["finish_reason"] == "stop"


def test_n_choices_whole_and_streamed_each_validate(llama) -> None:
    gen, url = llama
    response_format, schema = FORMATS["json_schema"]
    got = ask(url, response_format=response_format, n=3, **SAMPLED)
    texts = [c["message"]["content"] for c in got["choices"]]
    assert [c["token_ids"] for c in got["choices"]] == lone(gen, got["choices"][0], schema, SAMPLED, n=3)
    client = openai_client(url)
    stream = client.chat.completions.create(
        model="llama", messages=MESSAGES, max_tokens=60, response_format=response_format, n=3, stream=True, **SAMPLED
    )
    pieces = ["", "", ""]
    finishes = {}
    for chunk in stream:
        for c in chunk.choices:
            pieces[c.index] += c.delta.content or ""
            finishes[c.index] = c.finish_reason or finishes.get(c.index)
    assert pieces == texts and finishes == {0: "stop", 1: "stop", 2: "stop"}
    for text in texts:
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("tool_choice", [NAMED, "required"], ids=["named", "required"])
def test_a_forced_tool_answers_as_a_tool_call(llama, tool_choice) -> None:
    gen, url = llama
    tools = TOOLS[:1] if tool_choice == "required" else TOOLS
    got = ask(url, tools=tools, tool_choice=tool_choice, temperature=0)
    choice = got["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None and len(message["tool_calls"]) == 1
    call = message["tool_calls"][0]
    assert call["id"].startswith("call_") and call["type"] == "function" and call["function"]["name"] == "order"
    jsonschema.validate(json.loads(call["function"]["arguments"]), ORDER)
    assert choice["token_ids"] == lone(gen, choice, ORDER, {"temperature": 0})[0]
    # streamed: the first delta names the call, every delta a piece of its arguments
    client = openai_client(url)
    stream = client.chat.completions.create(
        model="llama",
        messages=MESSAGES,
        max_tokens=60,
        tools=tools,
        tool_choice=tool_choice,
        temperature=0,
        stream=True,
    )
    deltas, finish = [], None
    for chunk in stream:
        delta = chunk.choices[0].delta
        deltas += delta.tool_calls or []
        assert not delta.content
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and {d.index for d in deltas} == {0}
    assert deltas[0].id.startswith("call_") and deltas[0].function.name == "order" and deltas[0].type == "function"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert "".join(d.function.arguments for d in deltas) == call["function"]["arguments"]


def test_a_tool_without_parameters_and_n_tool_calls(llama) -> None:
    _, url = llama
    got = ask(url, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "ping"}}, temperature=0)
    assert got["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{}"
    got = ask(url, tools=TOOLS, tool_choice=NAMED, n=2, **SAMPLED)
    calls = [c["message"]["tool_calls"][0] for c in got["choices"]]
    assert [c["finish_reason"] for c in got["choices"]] == ["tool_calls"] * 2 and calls[0]["id"] != calls[1]["id"]
    for call in calls:
        jsonschema.validate(json.loads(call["function"]["arguments"]), ORDER)


def test_tool_choice_none_is_plain_text_and_tools_reach_the_template(llama, tmp_path: Path) -> None:
    """A template that writes the tools, the calls sent back and the tools' results (as transformers
    gives them: arguments as objects) gets them."""
    gen, url = llama
    plain = ask(url, max_tokens=8, temperature=0)["choices"][0]
    none = ask(url, max_tokens=8, temperature=0, tools=TOOLS, tool_choice="none")["choices"][0]
    assert none == plain and none["finish_reason"] != "tool_calls"
    folder = tmp_path / "llama"
    folder.mkdir()
    for path in (LLM / "llama").iterdir():
        (folder / path.name).symlink_to(path)
    config = json.loads((LLM / "llama" / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for t in tools or [] %}{{ t.function.name }};{% endfor %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments.item }}]{% endfor %}"
        "{% if m.tool_call_id %}<{{ m.tool_call_id }}>{% endif %}|{% endfor %}"
    )
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    called = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "order", "arguments": '{"item": "tea", "count": 2}'},
    }
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [called]},
        {"role": "tool", "content": "ok", "tool_call_id": "call_1"},
    ]
    with serve_llm_in_thread(LlmServeConfig(folder, 2, slots=2)) as running:
        got = ask(running.url, max_tokens=8, temperature=0, tools=TOOLS, tool_choice="none", messages=messages)
    expected = "order;ping;user:Lunch?|assistant:[order tea]|tool:ok<call_1>|"
    assert got["choices"][0]["prompt_token_ids"] == gen.tokenizer.encode(expected, add_special_tokens=False)


TOOL = {"tools": TOOLS, "tool_choice": NAMED}
# (fields, endpoint is chat, the param named, a piece of the message)
REFUSED = {
    "a format type": ({"response_format": {"type": "xml"}}, True, "response_format.type", "'text', 'json_object' or"),
    "not an object": ({"response_format": "json"}, True, "response_format", "must be"),
    "an unknown key": ({"response_format": {"type": "text", "x": 1}}, False, "response_format.x", "'x' is not"),
    "no schema": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
        True,
        "response_format.json_schema.schema",
        "is required",
    ),
    "no name": (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": ORDER}}},
        True,
        "response_format.json_schema.name",
        "must be a str",
    ),
    "a schema over a bound": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"enum": [*range(2001)]}}}},
        False,
        "response_format.json_schema.schema",
        "lists more than 2000 enum values",
    ),
    "a keyword llguidance lacks": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"not": {}}}}},
        True,
        "response_format.json_schema.schema",
        'Unimplemented keys: ["not"]',
    ),
    "a bad pattern": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"pattern": "("}}}},
        False,
        "response_format.json_schema.schema",
        "regex parse error",
    ),
    "too few tokens": (
        {"response_format": FORMATS["json_schema"][0], "max_tokens": 3},
        True,
        "max_tokens",
        "max_tokens 3 is too few for the shortest answer response_format.json_schema.schema allows",
    ),
    "tools by default (auto)": ({"tools": TOOLS}, True, "tool_choice", "tool_choice 'auto'"),
    "tool_choice auto": ({"tools": TOOLS, "tool_choice": "auto"}, True, "tool_choice", "is not supported"),
    "required of two": ({"tools": TOOLS, "tool_choice": "required"}, True, "tool_choice", "with one tool"),
    "a name not listed": (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
        True,
        "tool_choice.function.name",
        "is not one of tools",
    ),
    "a choice without tools": ({"tool_choice": NAMED}, True, "tool_choice", "tools lists none"),
    "a tool's bad name": (
        {"tools": [{"type": "function", "function": {"name": "a b"}}], "tool_choice": "none"},
        True,
        "tools[0].function.name",
        "1 to 64 of",
    ),
    "a tool twice": ({"tools": TOOLS[:1] * 2, "tool_choice": "none"}, True, "tools[1].function.name", "a second"),
    "a tool's bad parameters": (
        {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}],
            "tool_choice": "required",
        },
        True,
        "tools[0].function.parameters",
        'Unimplemented keys: ["not"]',
    ),
    "a tool's parameters not an object": (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}], "tool_choice": "none"},
        True,
        "tools[0].function.parameters",
        "must be a JSON object",
    ),
    "a call sent back not JSON": (
        {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}]}]},
        True,
        "messages[0].tool_calls[0].function.arguments",
        "is not JSON text",
    ),
    "a user's tool_calls": (
        {"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
        True,
        "messages[0].tool_calls",
        "on an assistant message",
    ),
    "format and tool": ({"response_format": FORMATS["json_object"][0], **TOOL}, True, "response_format", "send one"),
    "tools on completions": (TOOL, False, "tools", "a chat field"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_every_bad_field_is_a_400_naming_it(llama, case: str) -> None:
    _, url = llama
    fields, chat, param, piece = REFUSED[case]
    body = {"model": "llama", "max_tokens": 60, **fields}
    body.update({"messages": fields.get("messages", MESSAGES)} if chat else {"prompt": "Lunch?"})
    status, got = post(url, body, chat)
    assert status == 400 and got["error"]["param"] == param, got
    message = got["error"]["message"]
    assert piece in message and "\n" not in message and len(message) < 400, message


def test_the_grammar_compiles_off_the_event_loop(llama, monkeypatch) -> None:
    """With a constrained request held while its stream is made (where its grammar compiles), the
    server answers others; the request answers once it lets go."""
    _, url = llama
    entered, release = threading.Event(), threading.Event()
    real = Generation.open

    def held(self: Generation) -> Any:
        if self.sampling.constraint.schema is not None:
            entered.set()
            assert release.wait(60)
        return real(self)

    monkeypatch.setattr(Generation, "open", held)
    done: list[dict] = []
    request = threading.Thread(target=lambda: done.append(ask(url, response_format={"type": "json_object"})))
    request.start()
    try:
        assert entered.wait(60)
        assert ask(url, max_tokens=2, temperature=0)["choices"][0]["finish_reason"] == "length"
    finally:
        release.set()
        request.join(60)
    assert len(done) == 1 and isinstance(json.loads(done[0]["choices"][0]["message"]["content"]), dict)


def test_without_the_structured_extra_a_schema_is_a_400_saying_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)  # import llguidance fails as where it is missing
    with serve_llm_in_thread(LlmServeConfig(LLM / "llama", 2, slots=2)) as running:
        status, got = post(running.url, {"model": "llama", "messages": MESSAGES, **TOOL})
    assert status == 400 and got["error"]["param"] == "tools[0].function.parameters", got
    assert "pip install 'ortstate[structured]'" in got["error"]["message"]
