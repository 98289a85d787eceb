"""The messages of the stream protocol: one step's feeds or outputs as ``.npz`` bytes (what
``numpy.savez`` writes), and the text replies (``{"ok": true}``, ``{"error": "..."}``).

Decoding trusts nothing: no pickles, no object arrays, and the archive's arrays, uncompressed, must
fit in the size limit too (a small compressed message cannot unpack into gigabytes).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ServeError
from . import npz

__all__ = ["OK", "decode_npz", "encode_npz", "error_text", "parse_op"]

OK = json.dumps({"ok": True})
OPS = ("reset", "close")


def encode_npz(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as an uncompressed ``.npz`` (what ``numpy.load`` reads; see :mod:`.npz`).

    Raises:
        ServeError: an array holds Python objects (the protocol carries plain arrays only).
    """
    try:
        return npz.write(arrays)
    except ValueError as exc:
        raise ServeError(f"cannot send {exc}") from None


def decode_npz(data: bytes, limit: int) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` message, by name.

    Raises:
        ServeError: the message is over ``limit`` bytes, or its arrays are, uncompressed; it is not
            an ``.npz``; an entry is not a plain ``.npy`` array (pickled objects are refused).
    """
    if len(data) > limit:
        raise ServeError(f"message of {len(data)} bytes is over the limit of {limit} bytes")
    fast = npz.read(data)  # the archives encode_npz writes; anything else is read with every check below
    if fast:
        return fast
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise ServeError("binary message is not an .npz (numpy.savez bytes)") from None
    with archive:
        entries = archive.infolist()
        unpacked = sum(e.file_size for e in entries)
        if unpacked > limit:
            raise ServeError(f"the .npz's arrays take {unpacked} bytes uncompressed, over the limit of {limit} bytes")
        arrays: dict[str, np.ndarray] = {}
        for entry in entries:
            name = entry.filename.removesuffix(".npy")
            if name in arrays:
                raise ServeError(f".npz entry '{name}' appears twice")
            try:
                with archive.open(entry) as f:
                    arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as exc:
                why = "object arrays are refused" if "pickle" in str(exc) else " ".join(str(exc).split())
                raise ServeError(f".npz entry '{entry.filename}' is not a readable .npy array ({why})") from None
    if not arrays:
        raise ServeError("the .npz holds no array")
    return arrays


def parse_op(text: str, limit: int) -> str:
    """The op of a text message (``{"op": "reset"}``, ``{"op": "close"}``).

    Raises:
        ServeError: not that: too long, not JSON, not an object with a known ``op``.
    """
    if len(text) > limit:
        raise ServeError(f"message of {len(text)} characters is over the limit of {limit} bytes")
    try:
        message = json.loads(text)
    except ValueError:
        raise ServeError('text message is not JSON (ops: {"op": "reset"}, {"op": "close"})') from None
    op = message.get("op") if isinstance(message, dict) else None
    if op not in OPS:
        shown = json.dumps(op) if isinstance(op, (str, int, float, bool)) else "missing"
        raise ServeError(f'unknown op {shown} (ops: {", ".join(OPS)}, as {{"op": "reset"}})')
    return str(op)


def error_text(message: Any) -> str:
    """The text reply naming what is wrong with a message."""
    return json.dumps({"error": " ".join(str(message).split())})
