"""Each server's one config (``ServeConfig``, ``LlmServeConfig``): every setting checked once, as it is
built, in one line naming the settings at fault, which a caller names its own way (the command
line: ``--max-streams``); a ``serve run`` config's ``args`` coerced to the fields' types; and the
uvicorn settings each builds. No model is loaded: a config is only what a server is built from."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from ortstate.errors import ServeError
from ortstate.runtime.cpu import usable_cores
from ortstate.serve import Deadlines, LlmServeConfig, ServeConfig, SettingError
from ortstate.serve.guard import stream_error_body
from ortstate.serve.openai.errors import error_body

EXPOSED = (
    "refusing to listen on 0.0.0.0 without a token: anyone who reaches it could use the model; give --token "
    "(or ORTSTATE_SERVE_TOKEN), or listen on 127.0.0.1"
)
EMPTY_TOKEN = "the token is empty: give a secret of your own with --token or ORTSTATE_SERVE_TOKEN"
NOT_ORIGIN = (
    "allow_origins takes origins as browsers send them, scheme://host[:port] (http or https, no path, no '*'), got "
)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"max_streams": 0}, "max_streams must be positive, got 0"),
        ({"max_batch": 2.5}, "max_batch must be an integer, got 2.5"),
        ({"max_message_bytes": True}, "max_message_bytes must be an integer, got True"),
        ({"threads": -1}, "threads must be positive, got -1"),
        ({"max_delay": -0.001}, "max_delay must be >= 0, got -0.001"),
        ({"idle_park": float("nan"), "state_dir": "s"}, "idle_park must be a number of seconds, got nan"),
        ({"handoff": 0}, "handoff must be positive, got 0"),
        ({"idle_park": 5}, "idle_park needs state_dir: parked streams are written there"),
        ({"durable": True}, "durable needs state_dir: its log is kept there"),
        ({"shared": True}, "shared needs state_dir: a folder every replica reaches, where streams move between them"),
        ({"port": 70000}, "port must be 0..65535, got 70000"),
        ({"host": ""}, "host must be a host name or address, got ''"),
        ({"host": "0.0.0.0"}, EXPOSED),
        ({"token": ""}, EMPTY_TOKEN),
        ({"allow_origins": ("*",)}, NOT_ORIGIN + "'*'"),
        ({"allow_origins": "http://a:1"}, "allow_origins must be a list of origins, got 'http://a:1'"),
    ],
)
def test_a_stream_servers_setting_is_refused_naming_it(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ServeError) as info:
        ServeConfig("model.xml", **given)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"max_requests": 0}, "max_requests must be positive, got 0"),
        ({"slots": 0}, "slots must be positive, got 0"),
        ({"threads": "2"}, "threads must be an integer, got '2'"),
        ({"kv_cache_bytes": -1}, "kv_cache_bytes must be positive, got -1"),
        ({"max_body_bytes": 0}, "max_body_bytes must be positive, got 0"),
        ({"max_conversations": 0}, "max_conversations must be positive, got 0"),
        ({"conversation_ttl": 0.0}, "conversation_ttl must be positive, got 0.0"),
        ({"idle_park": -1, "state_dir": "s"}, "idle_park must be >= 0, got -1"),
        ({"idle_park": 5}, "idle_park needs state_dir: parked conversations are written there"),
        ({"max_parked_bytes": 1 << 30}, "max_parked_bytes needs state_dir: it bounds what is kept there"),
        ({"shared": True}, "shared needs state_dir: a folder every replica reaches, where conversations move"),
        ({"port": -1}, "port must be 0..65535, got -1"),
        ({"host": "0.0.0.0"}, EXPOSED),
        ({"token": ""}, EMPTY_TOKEN),
        ({"allow_origins": ["http://a:1/ui"]}, NOT_ORIGIN + "'http://a:1/ui'"),
        ({"allow_origins": ["null"]}, NOT_ORIGIN + "'null'"),
        ({"allow_origins": ["ws://a:1"]}, NOT_ORIGIN + "'ws://a:1'"),
        ({"allow_origins": ["http://a:99999"]}, NOT_ORIGIN + "'http://a:99999'"),
    ],
)
def test_an_llm_servers_setting_is_refused_naming_it(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ServeError) as info:
        LlmServeConfig("models/llm/llama", **given)
    assert str(info.value) == message


def test_a_refusal_names_its_settings_as_the_caller_does() -> None:
    """The command line names a config's settings by its options, without reading the message."""
    with pytest.raises(SettingError) as info:
        ServeConfig("model.xml", idle_park=30, max_message_bytes=1 << 16)
    error = info.value
    assert (error.field, error.settings) == ("idle_park", ("idle_park", "state_dir"))
    option = {"idle_park": "--idle-park", "state_dir": "--state-dir"}.get
    assert error.naming(option) == "--idle-park needs --state-dir: parked streams are written there"
    with pytest.raises(SettingError) as info:
        LlmServeConfig("x", port="{80}")  # braces in a value: shown as they are
    assert info.value.naming(lambda f: f.upper()) == "PORT must be 0..65535, got '{80}'"
    again = pickle.loads(pickle.dumps(info.value))  # as Ray hands it back from a replica
    assert (type(again), str(again), again.field) == (SettingError, str(info.value), "port")


def test_an_llm_server_generates_for_64_requests_at_once_or_fewer() -> None:
    assert LlmServeConfig("x").slots == 64
    assert LlmServeConfig("x", max_requests=8).slots == 8
    assert LlmServeConfig("x", max_requests=8, slots=16).slots == 16


def test_a_stream_server_runs_on_the_usable_cores_unless_told() -> None:
    assert ServeConfig("x").session_options().intra_op_num_threads == usable_cores()
    assert ServeConfig("x", threads=3).session_options().intra_op_num_threads == 3
    # its runs are short and the event loop needs the cores between them: ONNX Runtime's threads
    # sleep instead of spinning when a run ends
    assert ServeConfig("x").session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_a_serve_run_configs_args_are_coerced_to_each_fields_type() -> None:
    """Ray Serve's ``serve run`` config gives YAML's values, or strings."""
    args = {"folder": "x", "max_requests": "8", "idle_park": "1.5", "state_dir": "s", "shared": "true"}
    assert LlmServeConfig.from_args(args) == LlmServeConfig("x", 8, idle_park=1.5, state_dir="s", shared=True)
    config = ServeConfig.from_args({"model": "m.xml", "deadlines": {"idle": 2}, "durable": "no"})
    assert (config.deadlines, config.durable) == (Deadlines(idle=2), False)
    for args, message in [
        ({"folder": "x", "bogus": 1}, "unknown settings bogus (known: folder, max_requests, "),
        ({"max_requests": 8}, "the settings need a folder"),
        ({"folder": "x", "max_requests": "many"}, "max_requests: expected int, got 'many'"),
    ]:
        with pytest.raises(ServeError) as info:
            LlmServeConfig.from_args(args)
        assert str(info.value).startswith(message)


def test_allowed_origins_are_kept_as_browsers_send_them() -> None:
    """An Origin header is lower-case, without its scheme's default port: what is matched exactly."""
    given = ["HTTP://LocalHost:80", "https://[::1]:443", "http://127.0.0.1:3000"]
    wanted = ("http://localhost", "https://[::1]", "http://127.0.0.1:3000")
    assert ServeConfig("x", allow_origins=given).allow_origins == wanted
    assert LlmServeConfig("x", allow_origins=tuple(given)).allow_origins == wanted
    args = {"model": "x", "allow_origins": "http://a:1,http://b:2"}  # a serve run config's string
    assert ServeConfig.from_args(args).allow_origins == ("http://a:1", "http://b:2")
    assert LlmServeConfig.from_args({"folder": "x", "allow_origins": ["http://a:1"]}).allow_origins == ("http://a:1",)


def test_a_replica_gets_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert ServeConfig("m.xml", state_dir="s").resolved() == ServeConfig(
        str(tmp_path / "m.xml"), state_dir=str(tmp_path / "s")
    )
    assert LlmServeConfig("llama").resolved() == LlmServeConfig(str(tmp_path / "llama"))


def test_each_config_builds_uvicorns_settings() -> None:
    """Places for 4 × its streams (requests) + 64 connections, its deadlines, and, for the LLM
    server, a full server's 503 in OpenAI's body."""
    deadlines = Deadlines(headers=1, body=2, idle=3)
    streams = ServeConfig("m.xml", max_streams=3, max_message_bytes=1 << 20, deadlines=deadlines)
    settings = streams.uvicorn_config(object())
    guard = settings.http.guard
    assert (guard.limit, guard.deadlines, settings.timeout_keep_alive) == (4 * 3 + 64, deadlines, 3)
    full = "server full: every connection is being answered; try again later"
    assert settings.ws_max_size == 2 << 20 and guard.full_body == stream_error_body(503, full)
    llm = LlmServeConfig("x", max_requests=5, token="t").uvicorn_config(object())
    assert (llm.http.guard.limit, llm.http.guard.full_body) == (4 * 5 + 64, error_body(503, full))
    assert llm.http.guard.expected == b"Bearer t"
