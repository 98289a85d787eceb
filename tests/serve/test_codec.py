"""The step messages' codec (``ortstate/serve/codec.py`` over ``npz.py``): what it writes numpy reads
back exactly, what numpy writes it reads (the fast path or numpy's own reader), and what is not a
plain archive of plain arrays is refused with one line."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from conftest import raw_npy

from ortstate.errors import ServeError
from ortstate.serve.streams import npz
from ortstate.serve.streams.codec import decode_npz, encode_npz

LIMIT = 1 << 20
ARRAYS = {
    "x": np.arange(8, dtype=np.float32).reshape(1, 1, 8),
    "strided": np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2],
    "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "empty": np.zeros((0, 4), np.float16),
    "scalar": np.array(True),
    "big_endian": np.arange(5, dtype=">i2"),
    "complex": np.full(3, 1 + 2j, np.complex64),
    "text": np.array(["ab", "c"]),
}


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array, err_msg=name)


def test_what_it_writes_numpy_reads_and_it_reads_back_fast() -> None:
    data = encode_npz(ARRAYS)
    with np.load(io.BytesIO(data)) as loaded:
        _same({k: loaded[k] for k in loaded.files}, ARRAYS)
    assert npz.read(data) is not None  # the fast path takes its own archives
    got = decode_npz(data, LIMIT)
    _same(got, ARRAYS)
    got["x"][...] = 0  # arrays of their own, writable


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed], ids=["savez", "savez_compressed"])
def test_what_numpy_writes_it_reads(save) -> None:
    out = io.BytesIO()
    save(out, **ARRAYS)
    _same(decode_npz(out.getvalue(), LIMIT), ARRAYS)


def _corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def test_a_damaged_archive_is_refused_not_misread() -> None:
    sent = {"x": np.arange(16, dtype=np.float32)}
    data = encode_npz(sent)
    body = data.index(b"\x93NUMPY")
    # the array's bytes and the .npy header (CRC mismatch): refused; the local header's CRC and the
    # end record's directory offset: not read fast, and what numpy's reader makes of them is the
    # array sent or a refusal, never other values
    for at, refused in ((body + 128 + 4, True), (body + 20, True), (14, False), (len(data) - 5, False)):
        damaged = _corrupt(data, at)
        assert npz.read(damaged) is None, at
        try:
            got = decode_npz(damaged, LIMIT)
        except ServeError as exc:
            assert "\n" not in str(exc)
        else:
            assert not refused, at
            _same(got, sent)


def test_object_arrays_are_refused_both_ways() -> None:
    objects = np.array([{"a": 1}, None], dtype=object)
    with pytest.raises(ServeError, match="holds Python objects"):
        encode_npz({"o": objects})
    out = io.BytesIO()
    np.savez(out, o=objects)  # a pickle inside
    with pytest.raises(ServeError, match="object arrays are refused"):
        decode_npz(out.getvalue(), LIMIT)


def test_sizes_are_bounded_before_anything_is_read() -> None:
    data = encode_npz({"x": np.zeros(1000, np.float32)})
    with pytest.raises(ServeError, match="over the limit"):
        decode_npz(data, len(data) - 1)
    out = io.BytesIO()  # small compressed, large unpacked
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", encode_npz({"x": np.zeros(1 << 18, np.float32)})[:0] + _npy_bytes(1 << 18))
    with pytest.raises(ServeError, match="uncompressed"):
        decode_npz(out.getvalue(), LIMIT)


def _npy_bytes(count: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.zeros(count, np.float32))
    return out.getvalue()


def _stored(npy: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("x.npy", npy)
    return out.getvalue()


def _header(shape: str) -> str:
    return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"


# What the probes got back: Python's own words (MemoryError, OverflowError, a heap address)
HOSTILE_HEADERS = [
    (_header("(1, 1000000000000, 8)"), "has shape [1, 1000000000000, 8], too large for the limit of 65536 bytes"),
    (
        _header("(1, 1180591620717411303424, 8)"),
        "has shape [1, 1180591620717411303424, 8], too large for the limit of 65536 bytes",
    ),
    (
        _header("(0, 1180591620717411303424)"),
        "has shape [0, 1180591620717411303424], too large for the limit of 65536 bytes",
    ),
    (_header("(1, -1, 8)"), "is not a readable .npy array (shape [1, -1, 8] has a negative size)"),
    (_header("__import__('os').getpid()"), "is not a readable .npy array (its header is not a literal dict)"),
    (_header("(1,) + (2,)"), "is not a readable .npy array (its header is not a literal dict)"),
    ("[1, 2]", "is not a readable .npy array (its header is not a literal dict)"),
    (_header("(" + "9" * 5000 + ",)"), "is not a readable .npy array (its header is not a literal dict)"),
    (
        "{'descr': '<f4', 'shape': (1,), }",
        "is not a readable .npy array (its header is not a dict of descr, fortran_order and shape as numpy writes it)",
    ),
]


@pytest.mark.parametrize(("header", "error"), HOSTILE_HEADERS)
def test_hostile_headers_get_our_words_not_pythons(header, error) -> None:
    with pytest.raises(ServeError) as info:
        decode_npz(_stored(raw_npy(header)), 1 << 16)
    assert str(info.value) == f".npz entry 'x.npy' {error}"


def test_npy_versions_and_truncated_entries_are_refused_in_our_words() -> None:
    cases = [
        (raw_npy(_header("(1,)"), b"\x03\x00"), "(.npy version 3.0; 1.0 and 2.0 are read)"),
        (b"\x93NUMPY\x01\x00\xff\x00{'descr'", "(it ends inside its header)"),
        (b"PK not an npy", "(it does not start as an .npy does)"),
        (raw_npy(_header("(4,)")) + b"\0" * 3, "(its data does not match its header)"),
    ]
    for npy, why in cases:
        with pytest.raises(ServeError) as info:
            decode_npz(_stored(npy), 1 << 16)
        assert str(info.value) == f".npz entry 'x.npy' is not a readable .npy array {why}"
