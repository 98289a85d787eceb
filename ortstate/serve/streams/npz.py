"""The ``.npz`` archives of the stream protocol, written and read without ``zipfile`` where they are
what ``numpy.savez`` writes: a stored (uncompressed) zip of ``.npy`` entries.

A step message holds a few small arrays, where ``numpy.savez`` and ``numpy.load`` cost ~20 and
~40 µs (zipfile's objects, a header parsed per entry): most of a step's server time. Here one
archive is a few ``struct`` packs or unpacks, and an ``.npy`` header is made or parsed once per
dtype and shape (a stream's steps repeat them), then looked up. :func:`write` writes exactly that subset (version
1.0 ``.npy`` headers, as numpy writes them; ``numpy.load`` reads it); :func:`read` reads that
subset and returns None for anything else (compressed entries, zip64, extra fields, a comment, a
CRC that does not match, a header it does not know), which the caller then reads through
``zipfile`` and numpy with every check.
"""

from __future__ import annotations

import functools
import re
import struct
import zlib
from collections.abc import Mapping

import numpy as np

__all__ = ["read", "write"]

_LOCAL = struct.Struct("<IHHHHHIIIHH")  # local file header, 30 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # central directory header, 46 bytes
_END = struct.Struct("<IHHHHIIH")  # end of central directory, 22 bytes
_LOCAL_SIG, _CENTRAL_SIG, _END_SIG = 0x04034B50, 0x02014B50, 0x06054B50
_MAGIC = b"\x93NUMPY\x01\x00"
_ALIGN = 64  # numpy pads a .npy header so that the data starts on a multiple of 64
_MAX_HEADER = 1024  # a longer .npy header (many dims, say) takes numpy's own reader
# the header dict as numpy writes it (keys sorted, a plain dtype), padded with spaces to the data
_HEADER = re.compile(
    r"\{'descr': '(?P<descr>[<>|=]?[a-zA-Z][a-zA-Z0-9]*)', 'fortran_order': (?P<fortran>True|False), "
    r"'shape': \((?P<shape>(?:\d+, ?)*\d*)\), \} *\n"
)


@functools.lru_cache(maxsize=256)
def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> tuple[bytes, int]:
    """The ``.npy`` header numpy writes for an array of ``dtype`` and ``shape``, and its CRC-32."""
    descr = np.lib.format.dtype_to_descr(dtype)
    text = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
    pad = -(len(_MAGIC) + 2 + len(text) + 1) % _ALIGN
    text = text + " " * pad + "\n"
    header = _MAGIC + struct.pack("<H", len(text)) + text.encode("latin1")
    return header, zlib.crc32(header)


def write(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as an ``.npz`` (``name.npy`` entries, stored). Object arrays are refused."""
    local, central, offset = [], [], 0
    for name, value in arrays.items():
        array = np.asarray(value)  # tobytes() gives C order whatever the layout
        if array.dtype.hasobject:
            raise ValueError(f"array '{name}' holds Python objects")
        entry = (name + ".npy").encode("utf-8")
        header, header_crc = _npy_header(array.dtype, array.shape)
        data = array.tobytes()
        body = header + data
        crc, size = zlib.crc32(data, header_crc), len(body)
        local.append(_LOCAL.pack(_LOCAL_SIG, 20, 0, 0, 0, 0x21, crc, size, size, len(entry), 0) + entry + body)
        central.append(
            _CENTRAL.pack(_CENTRAL_SIG, 20, 20, 0, 0, 0, 0x21, crc, size, size, len(entry), 0, 0, 0, 0, 0, offset)
        )
        central[-1] += entry
        offset += len(local[-1])
    directory = b"".join(central)
    end = _END.pack(_END_SIG, 0, 0, len(central), len(central), len(directory), offset, 0)
    return b"".join(local) + directory + end


def read(data: bytes) -> dict[str, np.ndarray] | None:
    """The arrays of an ``.npz`` in the subset :func:`write` writes, or None where it is anything
    else (see the module doc)."""
    try:
        return _read(memoryview(data))
    except (struct.error, ValueError, SyntaxError, TypeError, KeyError, IndexError, MemoryError, OverflowError):
        return None


def _read(data: memoryview) -> dict[str, np.ndarray] | None:
    if len(data) < _END.size:
        return None
    sig, disk, _, count, total, size, start, comment = _END.unpack_from(data, len(data) - _END.size)
    if sig != _END_SIG or disk or comment or count != total or start + size != len(data) - _END.size:
        return None
    arrays: dict[str, np.ndarray] = {}
    at = start
    for _ in range(count):
        sig, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, _, _, _, offset = _CENTRAL.unpack_from(
            data, at
        )
        if sig != _CENTRAL_SIG or flags & 0x0809 or method or csize != usize or xlen or clen:
            return None
        name = bytes(data[at + _CENTRAL.size : at + _CENTRAL.size + nlen]).decode("utf-8")
        at += _CENTRAL.size + nlen
        local = _LOCAL.unpack_from(data, offset)
        named = bytes(data[offset + _LOCAL.size : offset + _LOCAL.size + nlen]) == name.encode("utf-8")
        if local[0] != _LOCAL_SIG or local[2:4] != (0, 0) or local[6:11] != (crc, csize, usize, nlen, 0) or not named:
            return None
        begin = offset + _LOCAL.size + nlen
        body = data[begin : begin + csize]
        if len(body) != csize or zlib.crc32(body) != crc or not name.endswith(".npy"):
            return None
        array = _npy(body)
        key = name.removesuffix(".npy")
        if array is None or key in arrays:
            return None
        arrays[key] = array
    return arrays


def _npy(body: memoryview) -> np.ndarray | None:
    """A version 1.0 ``.npy`` of a plain dtype, as an array of its own; None otherwise."""
    if len(body) < 10:
        return None
    (length,) = struct.unpack_from("<H", body, 8)
    if length > _MAX_HEADER:
        return None
    layout = _layout(bytes(body[: 10 + length]))
    if layout is None:
        return None
    dtype, shape, count, order = layout
    data = body[10 + length :]
    if len(data) != count * dtype.itemsize:
        return None
    array = np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order=order)
    return array.copy()  # its own memory, writable: the message's bytes are not kept


@functools.lru_cache(maxsize=256)
def _layout(header: bytes) -> tuple[np.dtype, tuple[int, ...], int, str] | None:
    """What an ``.npy`` header (magic to padding) says: dtype, shape, element count and order;
    None unless it is a version 1.0 header, as numpy writes it, of a plain dtype."""
    if header[:8] != _MAGIC:
        return None
    match = _HEADER.fullmatch(header[10:].decode("latin1"))
    if match is None:
        return None
    shape = tuple(int(d) for d in match["shape"].replace(",", " ").split())
    dtype = np.dtype(match["descr"])
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or not dtype.itemsize:
        return None
    count = 1
    for d in shape:
        count *= d
    return dtype, shape, count, "F" if match["fortran"] == "True" else "C"
