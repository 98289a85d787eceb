"""``ortstate serve``: many streams of one stateful model over the network, one WebSocket per stream,
their steps batched by a :class:`~ortstate.streams.StreamPool`; or an LLM folder's generations with
OpenAI's API, on a :class:`~ortstate.generate.ContinuousBatcher` (needs the ``serve`` extra).

:class:`Client` and :class:`AsyncClient` talk to such a server; :func:`create_app` builds the ASGI
app around a :class:`StreamService` for another ASGI server to run; :func:`serve_in_thread`
runs one in this process; :func:`create_llm_app` and :func:`serve_llm_in_thread` do the same for an
:class:`LlmService`; :class:`Deadlines` are each connection's.
"""

from ..extras import require_extra

require_extra("serve", "ortstate.serve")  # a clear error, not the first missing import's

from ..errors import ServeError  # noqa: E402
from .guard import Deadlines  # noqa: E402
from .openai.app import create_llm_app  # noqa: E402
from .openai.service import LlmService  # noqa: E402
from .server import Running, serve_in_thread, serve_llm_in_thread  # noqa: E402
from .streams.app import create_app  # noqa: E402
from .streams.async_client import AsyncClient, AsyncStream  # noqa: E402
from .streams.client import Client, Stream  # noqa: E402
from .streams.service import StreamService  # noqa: E402

__all__ = [
    "AsyncClient",
    "AsyncStream",
    "Client",
    "Deadlines",
    "LlmService",
    "Running",
    "ServeError",
    "Stream",
    "StreamService",
    "create_app",
    "create_llm_app",
    "serve_in_thread",
    "serve_llm_in_thread",
]
