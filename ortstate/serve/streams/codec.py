"""The messages of the stream protocol: one step's feeds or outputs as ``.npz`` bytes (what
``numpy.savez`` writes), and the text replies (``{"ok": true}``, ``{"error": "..."}``).

Decoding trusts nothing: no pickles, no object arrays, and the archive's arrays, uncompressed, must
fit in the size limit too (a small compressed message cannot unpack into gigabytes).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from ...errors import ServeError
from ..json_body import read_json
from . import npz

__all__ = ["OK", "decode_npz", "encode_npz", "error_text", "parse_op"]

OK = json.dumps({"ok": True})
OPS = ("reset", "close", "last")


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
            arrays[name] = _entry(archive, entry, limit)
    if not arrays:
        raise ServeError("the .npz holds no array")
    return arrays


def _entry(archive: zipfile.ZipFile, entry: zipfile.ZipInfo, limit: int) -> np.ndarray:
    """The array of one ``.npy`` entry, its header read and checked (a literal dict, a shape that
    fits the limit, no objects) before numpy allocates anything."""
    where = f".npz entry '{entry.filename}'"
    try:
        with archive.open(entry) as f:
            shape, dtype = _header(f, where)
        if dtype.hasobject:
            raise ServeError(f"{where} is not a readable .npy array (object arrays are refused)")
        if any(d < 0 for d in shape):
            raise ServeError(f"{where} is not a readable .npy array (shape {_shown(shape)} has a negative size)")
        if math.prod(max(d, 1) for d in shape) * max(dtype.itemsize, 1) > limit:
            raise ServeError(f"{where} has shape {_shown(shape)}, too large for the limit of {limit} bytes")
        with archive.open(entry) as f:
            return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError):
        # the header was read and checked above: what is left is the data (short, or corrupt)
        raise ServeError(f"{where} is not a readable .npy array (its data does not match its header)") from None


def _header(f: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an ``.npy`` header says; numpy's own words about a bad one (which
    quote Python's parser, heap addresses included) are replaced by ours."""
    try:
        version = np.lib.format.read_magic(f)
    except (ValueError, EOFError):
        raise ServeError(f"{where} is not a readable .npy array (it does not start as an .npy does)") from None
    read = _HEADER_READERS.get(version)
    if read is None:
        shown = ".".join(map(str, version))
        raise ServeError(f"{where} is not a readable .npy array (.npy version {shown}; 1.0 and 2.0 are read)")
    try:
        shape, _, dtype = read(f)
    except EOFError:
        raise ServeError(f"{where} is not a readable .npy array (it ends inside its header)") from None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        why = str(exc)
        if why.startswith("EOF"):
            why = "it ends inside its header"
        elif why.startswith("Header info length"):
            why = "its header is too long"
        elif why.startswith(_CHECKED_AFTER_PARSING):
            why = "its header is not a dict of descr, fortran_order and shape as numpy writes it"
        else:  # literal_eval refused it (code, a malformed literal, an int of too many digits)
            why = "its header is not a literal dict"
        raise ServeError(f"{where} is not a readable .npy array ({why})") from None
    return shape, dtype


# numpy's checks of a header that parsed as a literal (their words quote the literal, not Python's)
_CHECKED_AFTER_PARSING = ("Header does not contain", "shape is not valid", "fortran_order is not", "descr is not")
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _shown(shape: tuple[int, ...]) -> str:
    text = "[" + ", ".join(map(str, shape)) + "]"
    return text if len(text) <= 100 else text[:96] + " ...]"


def parse_op(text: str, limit: int) -> str:
    """The op of a text message (``{"op": "reset"}``, ``{"op": "close"}``, ``{"op": "last"}``).

    Raises:
        ServeError: not that: too long, not JSON, not an object with a known ``op``.
    """
    if len(text) > limit:
        raise ServeError(f"message of {len(text)} characters is over the limit of {limit} bytes")
    try:
        message = read_json(text.encode("utf-8", "surrogatepass"), "text message")
    except ServeError as exc:  # its code is an HTTP status: here the error is a reply, the socket stays
        raise ServeError(f'{exc} (ops: {{"op": "reset"}}, {{"op": "close"}})') from None
    op = message.get("op") if isinstance(message, dict) else None
    if op not in OPS:
        shown = json.dumps(op) if isinstance(op, (str, int, float, bool)) else "missing"
        raise ServeError(f'unknown op {shown} (ops: {", ".join(OPS)}, as {{"op": "reset"}})')
    return str(op)


def error_text(message: Any) -> str:
    """The text reply naming what is wrong with a message."""
    return json.dumps({"error": " ".join(str(message).split())})
