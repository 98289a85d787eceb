"""``ortstate serve``: many streams of one stateful model over the network, one WebSocket per stream,
their steps batched by a :class:`~ortstate.streams.StreamPool` (needs the ``serve`` extra).

:class:`Client` and :class:`AsyncClient` talk to such a server; :func:`create_app` builds the ASGI
app around a :class:`StreamService` for another ASGI server to run; :func:`serve_in_thread`
runs one in this process.
"""

from ..errors import ServeError
from .app import create_app
from .client import AsyncClient, AsyncStream, Client, Stream
from .server import Running, serve_in_thread
from .service import StreamService

__all__ = [
    "AsyncClient",
    "AsyncStream",
    "Client",
    "Running",
    "ServeError",
    "Stream",
    "StreamService",
    "create_app",
    "serve_in_thread",
]
