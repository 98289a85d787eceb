"""State snapshots (``save_state``/``load_state``) against damaged, hostile and foreign files: each is
refused with a StateError naming the file, before anything in it is decompressed or allocated, and
the request's variables stay as they were; saving never destroys the previous snapshot."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from isolated import outcome, run_isolated
from oracle import REPO, REWRITTEN, open_session

import ortstate
from ortstate.generate import Generator
from ortstate.runtime import snapshot

ROOT = REPO
ACC = ROOT / "models/accumulator/model.xml"  # acc f32 [1,?]
LLM = ROOT / "models/llm"
X = np.arange(3, dtype=np.float32).reshape(1, 3)


@pytest.fixture
def session() -> ortstate.StatefulSession:
    s = open_session(ACC)
    s.run(None, {"x": X})
    return s


@pytest.fixture
def good(session: ortstate.StatefulSession, tmp_path: Path) -> Path:
    path = tmp_path / "good.npz"
    session.save_state(path)
    return path


def refused(session: ortstate.StatefulSession, path: Path, message: str) -> None:
    """load_state raises StateError(``<path>: message``) and changes nothing."""
    before = session.query_state()[0].state
    with pytest.raises(ortstate.StateError) as err:
        session.load_state(path)
    assert str(err.value).startswith(f"{path}: "), err.value
    assert message in str(err.value), err.value
    np.testing.assert_array_equal(session.query_state()[0].state, before)


def archive(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def header_of(path: Path) -> dict:
    with np.load(path) as data:
        return json.loads(bytes(data["header"]).decode())


def with_header(path: Path, target: Path, change: Callable[[dict], object], **members: np.ndarray) -> Path:
    """A copy of snapshot ``path`` with its header changed (``change`` edits it, or returns raw
    JSON text) and members replaced."""
    header = header_of(path)
    text = change(header)
    text = text if isinstance(text, str) else json.dumps(header)
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "header"}
    arrays.update(members)
    contents = {f"{k}.npy": npy(v) for k, v in arrays.items()}
    contents["header.npy"] = npy(np.frombuffer(text.encode(), np.uint8))
    return archive(target, contents)


def test_npy_and_other_files_are_refused(session: ortstate.StatefulSession, tmp_path: Path) -> None:
    np.save(tmp_path / "state.npy", X)
    refused(session, tmp_path / "state.npy", "not a readable ortstate state snapshot (BadZipFile)")
    (tmp_path / "text.npz").write_text("hello")
    refused(session, tmp_path / "text.npz", "not a readable ortstate state snapshot (BadZipFile)")
    (tmp_path / "dir.npz").mkdir()
    refused(session, tmp_path / "dir.npz", "not a regular file")
    refused(session, tmp_path / "missing.npz", "no such file")
    refused(session, tmp_path / "no" / "state.npz", "no such file")  # a missing folder
    refused(session, tmp_path / "text.npz" / "state.npz", "cannot read: Not a directory")  # a folder that is a file


def _patch(data: bytes, signature: bytes, field: int, fmt: str, value: int) -> bytes:
    """Every zip record starting with ``signature``: the field at ``field`` set to ``value``."""
    out = bytearray(data)
    at = out.find(signature)
    while at >= 0:
        struct.pack_into(fmt, out, at + field, value)
        at = out.find(signature, at + 4)
    return bytes(out)


CENTRAL, LOCAL = b"PK\x01\x02", b"PK\x03\x04"
# (field, record, offset, format, value, refused): the central directory is what a zip reader
# trusts; damage to a local header that leaves the data readable may load (the CRC still holds).
ZIP_FIELDS = [
    ("central version needed", CENTRAL, 6, "<H", 99, True),
    ("central flags: encrypted", CENTRAL, 8, "<H", 1, True),
    ("central method", CENTRAL, 10, "<H", 99, True),
    ("central method deflate", CENTRAL, 10, "<H", 8, True),
    ("central crc", CENTRAL, 16, "<I", 12345, True),
    ("central sizes", CENTRAL, 20, "<I", 2**31, True),
    ("central name length", CENTRAL, 28, "<H", 60000, True),
    ("local offset", CENTRAL, 42, "<I", 2**31, True),
    ("local version needed", LOCAL, 4, "<H", 99, False),
    ("local flags: encrypted", LOCAL, 6, "<H", 1, False),
    ("local method", LOCAL, 8, "<H", 8, False),
    ("local name length", LOCAL, 26, "<H", 3, True),
]


@pytest.mark.parametrize(
    ("name", "signature", "field", "fmt", "value", "bad"), ZIP_FIELDS, ids=[f[0] for f in ZIP_FIELDS]
)
def test_corrupted_zip_fields_are_refused(
    session: ortstate.StatefulSession, good: Path, tmp_path: Path, name: str, signature: bytes, field: int, fmt: str,
    value: int, bad: bool,
) -> None:  # fmt: skip
    """Each damaged field raises a StateError naming the file and changes nothing, or (a local
    header field nothing reads) loads exactly what was saved."""
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(_patch(good.read_bytes(), signature, field, fmt, value))
    assert damaged.read_bytes() != good.read_bytes()
    fresh = open_session(ACC)
    fresh.run(None, {"x": np.ones((1, 3), np.float32)})
    if bad:
        refused(fresh, damaged, "")
    else:
        fresh.load_state(damaged)
        np.testing.assert_array_equal(fresh.query_state()[0].state, session.query_state()[0].state)


def test_a_corrupted_deflate_stream_is_never_inflated(
    session: ortstate.StatefulSession, good: Path, tmp_path: Path
) -> None:
    """Snapshots are stored as written; a compressed member (here with a garbage stream) is refused
    from its zip record, before zlib sees it."""
    with np.load(good) as data:
        members = {f"{k}.npy": npy(data[k]) for k in data.files}
    deflated = archive(tmp_path / "deflated.npz", members, zipfile.ZIP_DEFLATED)
    data = bytearray(deflated.read_bytes())
    start = data.find(b"v0.npy") + len(b"v0.npy")
    data[start : start + 40] = os.urandom(40)
    deflated.write_bytes(bytes(data))
    refused(session, deflated, "is compressed or encrypted")


def test_malformed_headers_with_the_right_fingerprint(
    session: ortstate.StatefulSession, good: Path, tmp_path: Path
) -> None:
    def set_entries(value: object) -> Callable[[dict], None]:
        return lambda h: h.__setitem__("variables", value)

    cases = [
        (set_entries([5]), "snapshot entry of variable 'acc' is corrupted"),
        (set_entries([]), "snapshot variable list is corrupted"),
        (set_entries("acc"), "snapshot variable list is corrupted"),
        (lambda h: h["variables"][0].__setitem__("initialized", "yes"), "entry of variable 'acc' is corrupted"),
        (lambda h: h["variables"][0].__setitem__("shape", [1, "3"]), "entry of variable 'acc' is corrupted"),
        (lambda h: h["variables"][0].__setitem__("shape", [2, 3]), "has shape [2, 3], which it cannot hold"),
        (lambda h: h["variables"][0].__setitem__("dtype", "float64"), "entry of variable 'acc' is corrupted"),
        (lambda h: json.dumps(h)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (lambda h: "[1, 2]", "not an ortstate state snapshot"),
        (lambda h: b"\xff".decode("latin-1"), "not a readable ortstate state snapshot"),
        (lambda h: h.__setitem__("format", "ortstate-state-1"), "written by an earlier ortstate: its fingerprint"),
        (lambda h: h.__setitem__("fingerprint", "0" * 32), "snapshot is from another model (fingerprint mismatch)"),
    ]
    for index, (change, message) in enumerate(cases):
        refused(session, with_header(good, tmp_path / f"h{index}.npz", change), message)


def test_member_contents_must_match_the_header(session: ortstate.StatefulSession, good: Path, tmp_path: Path) -> None:
    """A 0-d value where the header says [1, 3]; another dtype; a pickled object array."""
    zero_d = with_header(good, tmp_path / "zero_d.npz", lambda h: None, v0=np.float32(1))
    refused(session, zero_d, "member v0.npy holds float32 [], not what its header says")
    other = with_header(good, tmp_path / "other.npz", lambda h: None, v0=np.zeros((1, 3), np.int32))
    refused(session, other, "member v0.npy holds int32 [1, 3], not what its header says")
    objects = archive(
        tmp_path / "objects.npz",
        {"header.npy": npy(np.frombuffer(json.dumps(header_of(good)).encode(), np.uint8)), "v0.npy": b"\x93NUMPY" * 3},
    )
    refused(session, objects, "not a readable ortstate state snapshot")


def test_bfloat16_values_round_trip_and_a_0d_entry_is_refused(tmp_path: Path) -> None:
    import openvino as ov
    import openvino.opset13 as ops
    from openvino import opset6
    from oracle import save_ir, variable

    x = ops.parameter([4], np.float32, name="x")
    var = variable("v", [4], ov.Type.bf16)
    new = ops.add(opset6.read_value(var), ops.convert(x, "bf16"))
    xml = save_ir(ov.Model([ops.result(ops.convert(new, "f32"))], [opset6.assign(new, var)], [x], "bf"), tmp_path)
    for explicit in (False, True):
        session = open_session(xml, explicit)
        session.run(None, {"x": np.array([1.5, 2, 3, 4], np.float32)})
        session.save_state(tmp_path / "bf.npz")
        fresh = open_session(xml, not explicit)
        fresh.load_state(tmp_path / "bf.npz")
        assert fresh.query_state()[0].state.tolist() == [1.5, 2, 3, 4]
        scalar = with_header(
            tmp_path / "bf.npz", tmp_path / "bf0.npz", lambda h: h["variables"][0].__setitem__("shape", []),
            v0=np.float32(1),
        )  # fmt: skip
        refused(fresh, scalar, "has shape [], which it cannot hold")


def test_declared_sizes_are_checked_before_anything_is_read(
    session: ortstate.StatefulSession, good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value declared as 2**40 floats (the variable admits [1, ?]) is refused from its header and
    zip record; a member past the expected ones (a 128 MB zip bomb here) is never opened."""
    huge = with_header(good, tmp_path / "huge.npz", lambda h: h["variables"][0].__setitem__("shape", [1, 2**40]))
    refused(session, huge, "member v0.npy takes 140 bytes, not what its value needs")
    with np.load(good) as data:
        members = {f"{k}.npy": npy(data[k]) for k in data.files}
    bomb = tmp_path / "bomb.npz"
    archive(bomb, members)
    with (
        zipfile.ZipFile(bomb, "a", compression=zipfile.ZIP_DEFLATED) as z,
        z.open("bomb.npy", "w", force_zip64=True) as f,
    ):
        chunk = bytes(1 << 20)
        for _ in range(128):
            f.write(chunk)
    assert bomb.stat().st_size < 2 << 20
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self: zipfile.ZipFile, name: object, *args: object, **kwargs: object) -> object:
        opened.append(name.filename if isinstance(name, zipfile.ZipInfo) else str(name))
        return real_open(self, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    fresh = open_session(ACC)
    fresh.load_state(bomb)
    assert opened == ["header.npy", "v0.npy"]
    np.testing.assert_array_equal(fresh.query_state()[0].state, X)


def test_saving_to_a_directory_or_nowhere_is_an_output_file_error(
    session: ortstate.StatefulSession, tmp_path: Path
) -> None:
    """(Every writer against every way a write fails: tests/test_output_files.py.)"""
    with pytest.raises(ortstate.OutputFileError, match=rf"^{tmp_path}: cannot be written \(Is a directory\)$"):
        session.save_state(tmp_path)
    missing = tmp_path / "no" / "state.npz"
    with pytest.raises(
        ortstate.OutputFileError, match=rf"^{missing}: cannot be written \(No such file or directory\)$"
    ):
        session.save_state(missing)
    with pytest.raises(ortstate.StateError, match="a snapshot path is a str or os.PathLike, not NoneType"):
        session.save_state(None)  # type: ignore[arg-type]


def test_a_save_failing_half_way_keeps_the_previous_snapshot(
    session: ortstate.StatefulSession, good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = good.read_bytes()
    session.run(None, {"x": X})

    def disk_full(f: io.BufferedWriter, **arrays: np.ndarray) -> None:
        f.write(b"PK\x03\x04 half a snapshot")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshot.np, "savez", disk_full)
    with pytest.raises(ortstate.OutputFileError, match=rf"^{good}: cannot be written \(No space left on device\)$"):
        session.save_state(good)
    monkeypatch.undo()
    assert good.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.npz"]  # no temporary file left behind
    fresh = open_session(ACC)
    fresh.load_state(good)
    np.testing.assert_array_equal(fresh.query_state()[0].state, X)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "state.npz")
    code = """
    import sys
    import ortstate
    session = ortstate.StatefulSession("models/accumulator/model.xml")
    try:
        session.load_state(sys.argv[1])
    except ortstate.StateError as exc:
        print(exc)
    """
    proc = run_isolated(code, str(tmp_path / "state.npz"), timeout=60)
    assert proc.stdout.strip() == f"{tmp_path / 'state.npz'}: not a regular file", outcome(proc)


@pytest.mark.parametrize("save_form", [False, True, REWRITTEN], ids=["custom-op", "explicit", REWRITTEN])
def test_a_snapshot_loads_only_into_its_own_model(tmp_path: Path, save_form: bool) -> None:
    """llama and qwen3 (tiny exports) have the same variable ids, types and shapes: llama's snapshot
    loads into llama in every form and is refused by qwen3 in every form."""

    def generator(name: str, form: bool | str) -> Generator:
        gen = Generator.from_dir(LLM / name)
        gen.session = open_session(LLM / name / "openvino_model.xml", form)
        return gen

    llama = generator("llama", save_form)
    llama.generate([18, 152, 24, 240, 209], max_new_tokens=3)
    path = tmp_path / "llama.npz"
    llama.session.save_state(path)
    saved = {v.name: v.state for v in llama.session.query_state()}
    for form in (False, True, REWRITTEN):
        same = open_session(LLM / "llama" / "openvino_model.xml", form)
        same.load_state(path)
        for var in same.query_state():
            np.testing.assert_array_equal(var.state, saved[var.name])
        other = open_session(LLM / "qwen3" / "openvino_model.xml", form)
        assert [v.name for v in other.query_state()] == [v.name for v in same.query_state()]
        refused(other, path, "snapshot is from another model (fingerprint mismatch)")
