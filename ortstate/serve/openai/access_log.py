"""One line per request to the LLM server, on the logger ``ortstate.serve.access`` (INFO): its
method, path, status, prompt, cached and generated tokens (where it generated) and how long it
took, as a serving log has it (vLLM's and uvicorn's access logs). ``ortstate serve`` prints them
on stderr unless ``--no-access-log``; nothing a client sends is written beyond its path, cut to 200
characters."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["TOKENS", "AccessLog", "access_logger"]

TOKENS = "ortstate_tokens"  # the request's scope state key: (prompt, cached, generated) tokens
_PATH = 200  # characters of a path logged at most

logger = logging.getLogger("ortstate.serve.access")


def access_logger() -> logging.Logger:
    """The logger the lines go to (``ortstate serve`` gives it a handler on stderr)."""
    return logger


class AccessLog:
    """``app`` with a line logged per HTTP request once it is answered (or fails)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not logger.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [0]
        state = scope.setdefault("state", {})

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = scope.get("path", "")[:_PATH].encode("unicode_escape").decode("ascii")
            tokens = state.get(TOKENS)
            counted = "" if tokens is None else " prompt {} cached {} generated {}".format(*tokens)
            ms = (time.perf_counter() - start) * 1e3
            logger.info("%s %s %d%s %.1f ms", scope.get("method", "?"), path, status[0], counted, ms)
