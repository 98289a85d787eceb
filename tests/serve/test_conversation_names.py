"""A conversation id's files are named so that no two ids share a name, even on a case-insensitive
filesystem, and no name leaves the state directory: every id of hostile shape maps to one name and
back, and no other name maps to an id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ortstate.serve.openai.conversation_names import ID_PATTERN, cid_of, stem

IDS = ["x", "X", "Chat", "chat", "cHAT", "...", ".x", "x.", "X.partial", "X.npz", "X.json", "turns-x", ".lock",
       "~", "-", "a" * 128, "A" * 128, "Z" * 127 + "z", "A-b.C_d~9"]  # fmt: skip


def test_every_id_has_a_name_of_its_own_in_any_case(tmp_path: Path) -> None:
    names = [stem(cid) for cid in IDS]
    assert all(ID_PATTERN.fullmatch(cid) for cid in IDS)
    assert len({name.casefold() for name in names}) == len(IDS)  # one file each, case-insensitively
    assert [cid_of(name) for name in names] == IDS
    for name in names:  # with an extension, a file in the directory (and short enough for any filesystem)
        assert (tmp_path / f"{name}.json").resolve().parent == tmp_path.resolve()
        assert len(f"{name}.json.claimed-{'h' * 64}-4194304") <= 255


def test_dot_segments_are_no_ids() -> None:  # (a client resolves them away: DELETE could not name them)
    assert not ID_PATTERN.fullmatch(".") and not ID_PATTERN.fullmatch("..")


@pytest.mark.parametrize("name", ["X", "x^0", "x^2", "x^01", "1^1", "x^", "^1", "a/b", "", "x^1^1", "x" * 129])
def test_a_name_no_id_has_is_none(name: str) -> None:
    assert cid_of(name) is None


def test_files_named_by_the_id_itself_are_renamed_at_the_start(tmp_path: Path) -> None:
    """A state directory of a server that named an id's files by the id (capitals and all) keeps
    its conversations: each is found under its name, not lost; where the id was parked again since
    (a ``.json`` under its name), the earlier files go."""
    from ortstate.serve.openai.conversation_files import ConversationFiles

    def park(name: str, tokens: list[int]) -> None:
        (tmp_path / f"{name}.npz").write_bytes(b"cache")
        (tmp_path / f"{name}.json").write_text(json.dumps({"tokens": tokens, "text": "t", "ids": tokens}))

    park("Chat", [1, 2])
    park("Old", [3])
    park(stem("Old"), [4, 5])  # parked again under its name since: the later state
    park("plain", [6])
    (tmp_path / "Half.json").write_text(json.dumps({"tokens": [], "text": None, "ids": [7]}))
    files = ConversationFiles(tmp_path, "test-1", shared=False)
    try:
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and not p.name.startswith(".")) == sorted(
            [f"{stem(c)}.{e}" for c in ("Chat", "Old", "plain") for e in ("json", "npz")] + [f"{stem('Half')}.json"]
        )
        assert files.count() == 4
        claimed = {cid: files.claim(cid) for cid in ("Chat", "Old", "Half")}
        assert {cid: files.read(meta).tokens for cid, meta in claimed.items() if meta} == {
            "Chat": [1, 2],
            "Old": [4, 5],
            "Half": [],
        }
    finally:
        files.release(remove_log=True)
