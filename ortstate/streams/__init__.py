"""Many independent streams of one stateful model, batched into one run per step: :class:`StreamPool`."""

from ..errors import PoolFullError
from .kv_pool import KvPool
from .layout import Layout
from .pool import StreamPool
from .stats import PoolStats

__all__ = ["KvPool", "Layout", "PoolFullError", "PoolStats", "StreamPool"]
