"""The WebSocket stream server of ``ortstate serve MODEL``: many streams of one stateful model, one
WebSocket per stream, their steps batched by a :class:`~ortstate.streams.StreamPool`; and its clients."""
