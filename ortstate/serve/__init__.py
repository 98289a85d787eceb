"""``ortstate serve``: two servers (needs the ``serve`` extra).

- :mod:`.streams`: many streams of one stateful model over the network, one WebSocket per stream,
  their steps batched by a :class:`~ortstate.streams.StreamPool`. :class:`Client` and
  :class:`AsyncClient` talk to it; :func:`create_app` builds its ASGI app around a
  :class:`StreamService` for another ASGI server to run; :func:`serve_in_thread` runs one in this
  process as a :class:`ServeConfig` says.
- :mod:`.openai`: an LLM folder's generations with OpenAI's API, on a
  :class:`~ortstate.generate.ContinuousBatcher`: :func:`create_llm_app` around an
  :class:`LlmService`, :func:`serve_llm_in_thread` as an :class:`LlmServeConfig` says.

What both share sits beside them: who may connect (:mod:`.auth`), each connection's
:class:`Deadlines` (:mod:`.guard`), the state directory, the log both make durable with, the
settings' checks (:class:`SettingError`) and the server's lifecycle (:mod:`.server`).
"""

from ..extras import require_extra

require_extra("serve", "ortstate.serve")  # a clear error, not the first missing import's

from ..errors import ServeError  # noqa: E402
from .config import SettingError  # noqa: E402
from .guard import Deadlines  # noqa: E402
from .openai.app import create_llm_app  # noqa: E402
from .openai.config import LlmServeConfig  # noqa: E402
from .openai.server import serve_llm_in_thread  # noqa: E402
from .openai.service import LlmService  # noqa: E402
from .server import Running  # noqa: E402
from .streams.app import create_app  # noqa: E402
from .streams.async_client import AsyncClient, AsyncStream  # noqa: E402
from .streams.client import Client, Stream  # noqa: E402
from .streams.config import ServeConfig  # noqa: E402
from .streams.server import serve_in_thread  # noqa: E402
from .streams.service import StreamService  # noqa: E402

__all__ = [
    "AsyncClient",
    "AsyncStream",
    "Client",
    "Deadlines",
    "LlmServeConfig",
    "LlmService",
    "Running",
    "ServeConfig",
    "ServeError",
    "SettingError",
    "Stream",
    "StreamService",
    "create_app",
    "create_llm_app",
    "serve_in_thread",
    "serve_llm_in_thread",
]
