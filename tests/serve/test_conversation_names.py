"""A conversation id's files are named so that no two ids share a name, even on a case-insensitive
filesystem, and no name leaves the state directory: every id of hostile shape maps to one name and
back, and no other name maps to an id."""

from __future__ import annotations

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
