"""Portable state snapshots: an ``.npz`` of the variables' values that loads only into the model it
was saved from (in either form), checked before anything in it is decompressed or allocated.

The file is a zip (numpy's ``.npz`` layout, members stored uncompressed): ``header.npy`` holds a
JSON header (format, fingerprint, and per variable its id, whether it is initialised, its dtype and
shape) and ``v<i>.npy`` the value of the i-th variable. The fingerprint is a hash of the model's
digest (a SHA-256 of the IR files it was converted from, recorded by the converter, so both forms
share it; for a model converted before ortstate recorded one, a hash of its ONNX graph) and of its
variables' ids, element types and shapes.

Loading reads the zip's directory, then the header (bounded), validates it against the session's
variables (ids, dtypes, shapes they admit), checks each value member's declared size against the
shape it must hold and the file's own size, and only then reads those members; nothing else in the
file is read. Saving goes through :mod:`ortstate.output_files` (a temporary file beside the target,
renamed over it).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (np.dtype("bfloat16"))
import numpy as np
import onnx

from ..errors import StateError
from ..meta import MAX_STATE_ELEMENTS, ModelMeta, VariableMeta, shown_id, spanned_elements
from ..output_files import write_file
from .shape_rule import ShapeRule
from .store import StateStore

__all__ = ["fingerprint", "load_state", "model_digest", "model_fingerprint", "save_state"]

_FORMAT = "ortstate-state-2"
_OLD_FORMATS = ("ortstate-state-1",)
# numpy's npz cannot hold ml_dtypes types: such values are stored as their raw bits.
_RAW_BITS = {"bfloat16": np.uint16}
_NPY_HEADER_MAX = 1 << 16  # an .npy header (magic, lengths, the dict) is a few hundred bytes


def fingerprint(variables: tuple[VariableMeta, ...], digest: str) -> str:
    """What a snapshot must carry to load: the model's digest and its variables' ids, element types
    and shapes, hashed (the same for both ONNX forms of one conversion)."""
    key = json.dumps([_FORMAT, digest, [[v.id, v.element_type, v.shape] for v in variables]])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def model_fingerprint(model: onnx.ModelProto, meta: ModelMeta) -> str:
    """:func:`fingerprint` of a model as given: the IR digest its metadata records, else (an older
    conversion) :func:`model_digest` of its graph; a model without variables has no digest."""
    digest = meta.digest or (model_digest(model) if meta.variables else "")
    return fingerprint(meta.variables, digest)


def model_digest(model: onnx.ModelProto) -> str:
    """A SHA-256 of a model's graph (nodes, initializers, inputs and outputs), for models whose
    ortstate metadata records no digest of the IR they came from (converted by an older ortstate)."""
    h = hashlib.sha256()
    graph = model.graph
    for message in [*graph.node, *graph.input, *graph.output]:
        h.update(message.SerializeToString(deterministic=True))
    for tensor in graph.initializer:  # one at a time: the graph as a whole may be past protobuf's 2 GB
        h.update(tensor.SerializeToString(deterministic=True))
    return h.hexdigest()


# -- saving -------------------------------------------------------------------------------------------
def save_state(store: StateStore, variables: tuple[VariableMeta, ...], path: str | os.PathLike[str], fp: str) -> None:
    """Write every initialised variable of ``store`` (uninitialised ones stay so after loading).

    Raises:
        StateError: ``path`` is no str or path.
        OutputFileError: the path is a directory or cannot be written; an existing file there is
            left as it was (see :mod:`ortstate.output_files`).
    """
    target = _path(path)
    arrays: dict[str, np.ndarray] = {}
    entries: list[dict[str, Any]] = []
    for index, v in enumerate(variables):
        if not store.initialized(v.id):
            entries.append({"id": v.id, "initialized": False})
            continue
        value = store.get(v.id)
        raw = _RAW_BITS.get(value.dtype.name)
        arrays[f"v{index}"] = value.view(raw) if raw else value
        entries.append({"id": v.id, "initialized": True, "dtype": value.dtype.name, "shape": list(value.shape)})
    header = {"format": _FORMAT, "fingerprint": fp, "variables": entries}
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    # to a file object: np.savez would append ".npz" to a bare path
    write_file(target, lambda f: np.savez(f, **arrays))


# -- loading ------------------------------------------------------------------------------------------
def load_state(store: StateStore, variables: tuple[VariableMeta, ...], path: str | os.PathLike[str], fp: str) -> None:
    """Replace ``store``'s values with the snapshot's, all or nothing.

    Raises:
        StateError: the file is missing, not a regular file, corrupted, of an older format, or from
            another model; nothing changes.
    """
    where = _path(path)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise StateError(f"{where}: no such file") from None
    except OSError as exc:
        raise StateError(f"{where}: cannot read: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise StateError(f"{where}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            values = _read(f, info.st_size, variables, fp, where)
        except StateError:
            raise
        except Exception as exc:  # noqa: BLE001 - zipfile, zlib and numpy raise many types on damage
            raise StateError(f"{where}: not a readable ortstate state snapshot ({type(exc).__name__})") from None
    staged = StateStore(variables)
    try:
        for var_id, value in values.items():
            staged.set(var_id, value)  # validates dtype and shape against the variable
    except StateError as exc:
        raise StateError(f"{where}: {exc}") from None
    store.replace(staged)


def _read(
    f: io.BufferedReader, size: int, variables: tuple[VariableMeta, ...], fp: str, where: Path
) -> dict[str, np.ndarray]:
    with zipfile.ZipFile(f) as archive:
        header_bytes = (1 << 20) + 1024 * len(variables) + 4 * sum(len(v.id) for v in variables)
        header = _json(_member(archive, "header.npy", np.dtype(np.uint8), None, header_bytes, size, where), where)
        expected = _check_header(header, variables, fp, where)
        values: dict[str, np.ndarray] = {}
        for index, (var_id, dtype, shape) in expected.items():
            raw = np.dtype(_RAW_BITS.get(dtype.name, dtype))
            array = _member(archive, f"v{index}.npy", raw, shape, None, size, where)
            values[var_id] = array.view(dtype) if raw != dtype else array
        return values


def _member(
    archive: zipfile.ZipFile,
    name: str,
    dtype: np.dtype,
    shape: tuple[int, ...] | None,
    limit: int | None,
    file_size: int,
    where: Path,
) -> np.ndarray:
    """One ``.npy`` member of ``dtype`` (and ``shape``, or any 1-d shape of at most ``limit`` bytes),
    its zip record checked before a byte of it is read."""
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise StateError(f"{where}: snapshot has no member {name}") from None
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        raise StateError(f"{where}: member {name} is compressed or encrypted; snapshots are stored as written")
    declared = info.file_size
    if declared != info.compress_size or declared > file_size:
        raise StateError(f"{where}: the zip record of member {name} is corrupted")
    if shape is None:
        fits = declared <= (limit or 0) + _NPY_HEADER_MAX
    else:
        value_bytes = math.prod(shape) * dtype.itemsize
        fits = value_bytes <= declared <= value_bytes + _NPY_HEADER_MAX
    if not fits:
        raise StateError(f"{where}: member {name} takes {declared} bytes, not what its value needs")
    with archive.open(info) as member:
        data = member.read(info.file_size + 1)
    array = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    if (
        array.dtype.newbyteorder("=") != dtype
        or array.ndim != (1 if shape is None else len(shape))
        or (shape is not None and array.shape != shape)
    ):
        raise StateError(f"{where}: member {name} holds {array.dtype} {list(array.shape)}, not what its header says")
    return array


def _json(raw: np.ndarray, where: Path) -> Any:
    try:
        return json.loads(raw.tobytes().decode())
    except RecursionError:
        raise StateError(f"{where}: snapshot header is nested too deeply") from None


def _check_header(
    header: Any, variables: tuple[VariableMeta, ...], fp: str, where: Path
) -> dict[int, tuple[str, np.dtype, tuple[int, ...]]]:
    """``{index: (variable id, dtype, shape)}`` of the values to read, once the header is known to
    describe this model's variables and values they can hold."""
    if not isinstance(header, dict) or not isinstance(header.get("format"), str):
        raise StateError(f"{where}: not an ortstate state snapshot")
    if header["format"] in _OLD_FORMATS:
        raise StateError(
            f"{where}: snapshot of format {header['format']}, written by an earlier ortstate: its fingerprint "
            "does not identify the model, so it cannot be loaded (see README: State snapshots)"
        )
    if header["format"] != _FORMAT:
        raise StateError(f"{where}: not an ortstate state snapshot (format {header['format']!r})")
    if header.get("fingerprint") != fp:
        raise StateError(f"{where}: snapshot is from another model (fingerprint mismatch)")
    entries = header.get("variables")
    if not isinstance(entries, list) or len(entries) != len(variables):
        raise StateError(f"{where}: snapshot variable list is corrupted")
    expected = {}

    def corrupted(var: VariableMeta) -> StateError:  # written only when raised: shown_id reads the whole id
        return StateError(f"{where}: snapshot entry of variable {shown_id(var.id)} is corrupted")

    for index, (entry, var) in enumerate(zip(entries, variables)):
        if not isinstance(entry, dict) or entry.get("id") != var.id or type(entry.get("initialized")) is not bool:
            raise corrupted(var)
        if not entry["initialized"]:
            continue
        shape = entry.get("shape")
        if entry.get("dtype") != var.dtype or not isinstance(shape, list):
            raise corrupted(var)
        if not all(type(d) is int and d >= 0 for d in shape) or spanned_elements(shape) > MAX_STATE_ELEMENTS:
            raise corrupted(var)
        if not ShapeRule(var.shape).admits(tuple(shape)):
            raise StateError(
                f"{where}: snapshot value of variable {shown_id(var.id)} has shape {shape}, which it cannot hold"
            )
        expected[index] = (var.id, np.dtype(var.dtype), tuple(shape))
    return expected


def _path(path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise StateError(f"a snapshot path is a str or os.PathLike, not {type(path).__name__}")
    return Path(path)
