"""Many independent streams of one stateful model, batched into one run per step: ``StreamPool(model)``
opens the :class:`Pool` the model needs (:class:`SlotPool` or :class:`KvPool`)."""

from ..errors import PoolFullError
from .kv.pool import KvPool
from .layout import Layout
from .pool import Pool, StreamPool
from .slot_pool import SlotPool
from .stats import PoolStats

__all__ = ["KvPool", "Layout", "Pool", "PoolFullError", "PoolStats", "SlotPool", "StreamPool"]
