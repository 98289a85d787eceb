"""The uvicorn internals ortstate overrides (serve/server.py's ``_Server``, serve/guard.py's
``GuardedProtocol``) are still there, with the signatures the overrides assume: the canary that
must be looked at before pyproject.toml's upper bound on uvicorn is raised."""

from __future__ import annotations

import inspect

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

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
        "on_response_complete": ["self"],
        "handle_websocket_upgrade": ["self"],
        "send_400_response": ["self", "msg"],
        "pause_writing": ["self"],
        "resume_writing": ["self"],
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
    headers_complete = inspect.getsource(HttpToolsProtocol.on_headers_complete)
    assert "app = self.app" in headers_complete and "self.limit_concurrency" in headers_complete
    assert "on_response=self.on_response_complete" in headers_complete
    for attribute in ("response_complete", "response_started"):  # what it reads of a cycle
        assert f"self.{attribute} = " in inspect.getsource(RequestResponseCycle.__init__), attribute
    # what GuardedProtocol reads of its base: on_headers_complete takes the app from self.app, each
    # cycle calls self.on_response_complete when its answer ends
    for attribute in ("transport", "cycle", "headers", "loop", "parser", "connections", "app"):
        assert attribute in inspect.getsource(HttpToolsProtocol.__init__), attribute
