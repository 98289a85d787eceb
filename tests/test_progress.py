"""Long work shows a bar with counts and an estimate on a terminal, and nothing elsewhere: the
command line turns it on (``progress.shown``), library code only says what it does."""

from __future__ import annotations

import io

import pytest
from oracle import REPO

import ortstate
from ortstate import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


XML = REPO / "models" / "lstm_2l_dynbatch" / "model.xml"


def test_a_conversion_shows_its_layers_on_a_terminal(tmp_path):
    screen = Terminal()
    with progress.shown(screen, plain=True):
        ortstate.convert(XML, tmp_path / "m.onnx")
    last = screen.getvalue().split("\r")[-1]
    layers = len(ortstate.ir.read_ir(XML).topological())
    assert last.startswith(f"ortstate: translating layers {layers}/{layers} (100%) ") and last.endswith("\033[K\n")


@pytest.mark.parametrize("stream", [io.StringIO(), None], ids=["not a terminal", "no display turned on"])
def test_nothing_is_shown_elsewhere(stream, tmp_path, capsys):
    if stream is None:
        ortstate.convert(XML, tmp_path / "m.onnx")
    else:
        with progress.shown(stream, plain=True):
            ortstate.convert(XML, tmp_path / "m.onnx")
        assert stream.getvalue() == ""
    assert capsys.readouterr() == ("", "")


def test_the_plain_bar_counts_and_estimates(monkeypatch):
    clock = iter([0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 3.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    screen = Terminal()
    with progress.shown(screen, plain=True), progress.task("steps", total=3) as bar:
        bar.update()
        bar.update(2)
    frames = screen.getvalue().split("\r")[1:]
    assert frames == [
        "ortstate: steps 0/3 (0%) 0.0 s\033[K",
        "ortstate: steps 1/3 (33%) 1.0 s, ~2.0 s left\033[K",
        "ortstate: steps 3/3 (100%) 3.0 s\033[K",
        "ortstate: steps 3/3 (100%) 3.0 s\033[K\n",
    ]
