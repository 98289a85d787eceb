"""The durable log's records: what one stream is after an acknowledged step or command, framed so
that a record torn by a hard stop is known by its checksum.

A record is ``length (u32) | crc32 (u32) | payload``, little-endian; the payload is ``kind (u8) |
steps (u64) | id length (u8) | id (ASCII) | states | outputs``, states and outputs each a count
and, per array, its name, dtype, shape and bytes (a state left uninitialised is a name and no
array). The id is a stream's (22 characters) or an LLM server's conversation's (1 to 128).
Every record holds the whole of what it describes, never a difference: the last record of a stream
is the stream.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CLOSED", "HEADER", "LIVE", "PARKED", "PEEK_BYTES", "Record", "peek_steps", "read_records"]

LIVE, PARKED, CLOSED = 1, 2, 3  # in the pool (its states follow); parked in its file; gone
HEADER = struct.Struct("<II")
_FIXED = struct.Struct("<BQB")  # kind, steps, id length
_COUNT = struct.Struct("<I")
PEEK_BYTES = HEADER.size + _FIXED.size  # what :func:`peek_steps` needs of a record
_ARRAY = struct.Struct("<H16sB")  # name length, dtype, ndim (255: no array)
_NONE = 255


@dataclass
class Record:
    """One stream as a record says it is: ``states`` (LIVE only, the pool's variables in order, None
    where uninitialised) and the outputs of its last step (None before its first)."""

    kind: int
    stream: str
    steps: int
    states: list[np.ndarray | None] | None = None
    outputs: dict[str, np.ndarray] | None = None

    def encode(self) -> bytes:
        name = self.stream.encode("ascii")
        parts = [_FIXED.pack(self.kind, self.steps, len(name)), name]
        _pack(parts, list(enumerate(self.states or [])))
        _pack(parts, list((self.outputs or {}).items()))
        payload = b"".join(parts)
        return HEADER.pack(len(payload), zlib.crc32(payload)) + payload

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Record:
        kind, steps, length = _FIXED.unpack_from(payload, 0)
        stream = bytes(payload[_FIXED.size : _FIXED.size + length])
        if len(stream) != length:
            raise ValueError("a record cut inside its id")
        at, states = _unpack(payload, _FIXED.size + length)
        at, outputs = _unpack(payload, at)
        return cls(
            kind,
            stream.decode("ascii"),
            steps,
            [a for _, a in states] if kind == LIVE else None,
            {str(n): a for n, a in outputs if a is not None} or None,
        )


def _pack(parts: list[bytes], arrays: Sequence[tuple[object, np.ndarray | None]]) -> None:
    parts.append(_COUNT.pack(len(arrays)))
    for name, array in arrays:
        raw = str(name).encode()
        if array is None:
            parts.append(_ARRAY.pack(len(raw), b"", _NONE) + raw)
            continue
        array = np.ascontiguousarray(array)
        parts.append(_ARRAY.pack(len(raw), array.dtype.str.encode(), array.ndim) + raw)
        parts.append(struct.pack(f"<{array.ndim}Q", *array.shape))
        parts.append(array.tobytes())


def _unpack(payload: bytes | memoryview, at: int) -> tuple[int, list[tuple[str, np.ndarray | None]]]:
    (count,) = _COUNT.unpack_from(payload, at)
    at += _COUNT.size
    arrays: list[tuple[str, np.ndarray | None]] = []
    for _ in range(count):
        length, dtype, ndim = _ARRAY.unpack_from(payload, at)
        at += _ARRAY.size
        name = bytes(payload[at : at + length]).decode()
        at += length
        if ndim == _NONE:
            arrays.append((name, None))
            continue
        shape = struct.unpack_from(f"<{ndim}Q", payload, at)
        at += 8 * ndim
        kind = np.dtype(dtype.rstrip(b"\0").decode())
        size = kind.itemsize * int(np.prod(shape, dtype=np.int64))
        arrays.append((name, np.frombuffer(payload[at : at + size], kind).reshape(shape).copy()))
        at += size
    return at, arrays


def peek_steps(head: bytes) -> int | None:
    """The step count of the record whose first :data:`PEEK_BYTES` bytes are ``head`` (None: too short)."""
    if len(head) < PEEK_BYTES:
        return None
    return int(_FIXED.unpack_from(head, HEADER.size)[1])


def read_records(data: bytes) -> Iterator[tuple[int, int, Record | None]]:
    """The records of a log file's bytes, each with the offsets it starts and ends at; a last
    ``(offset, offset, None)`` where the bytes stop being whole records (a torn tail, or damage)."""
    at, end = 0, len(data)
    view = memoryview(data)
    while at < end:
        if end - at < HEADER.size:
            yield at, at, None
            return
        length, crc = HEADER.unpack_from(view, at)
        payload = view[at + HEADER.size : at + HEADER.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            yield at, at, None
            return
        try:
            record = Record.decode(payload)
        except (struct.error, ValueError, TypeError, UnicodeDecodeError):
            yield at, at, None
            return
        yield at, at + HEADER.size + length, record
        at += HEADER.size + length
