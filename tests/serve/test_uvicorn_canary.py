"""The uvicorn internals ortstate overrides (serve/server.py's ``_Server``, serve/guard.py's
``GuardedProtocol``) are still there, with the signatures the overrides assume: the canary that
must be looked at before pyproject.toml's upper bound on uvicorn is raised."""

from __future__ import annotations

import inspect

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ortstate.serve.guard import GuardedProtocol
from ortstate.serve.server import _Server

OVERRIDDEN = {
    uvicorn.Server: {
        "shutdown": ["self", "sockets"],
        "capture_signals": ["self"],
        "handle_exit": ["self", "sig", "frame"],
    },
    HttpToolsProtocol: {
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"],
        "on_message_begin": ["self"],
        "on_headers_complete": ["self"],
        "on_message_complete": ["self"],
        "handle_websocket_upgrade": ["self"],
    },
}


def test_the_overridden_methods_are_there_with_their_parameters():
    for cls, methods in OVERRIDDEN.items():
        for name, parameters in methods.items():
            method = getattr(cls, name, None)
            assert method is not None, f"uvicorn's {cls.__name__}.{name} is gone"
            assert list(inspect.signature(method).parameters) == parameters, (cls.__name__, name)


def test_the_overrides_cover_what_they_assume():
    assert issubclass(_Server, uvicorn.Server) and issubclass(GuardedProtocol, HttpToolsProtocol)
    for name in OVERRIDDEN[HttpToolsProtocol]:
        assert name in GuardedProtocol.__dict__, name
    for attribute in ("transport", "cycle", "headers", "loop"):  # what GuardedProtocol reads of its base
        assert attribute in inspect.getsource(HttpToolsProtocol.__init__), attribute
