"""PyTorch eager runners for the LSTMs of the suite (optional: skipped when torch is missing).

The suite's LSTM IRs are what ``torch nn.LSTM`` + ``MakeStateful`` produce, so the same network in
eager PyTorch (random weights: only the time matters) is their natural "came from torch" baseline.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

__all__ = ["available", "demo_runner", "lstm_runner"]


def available() -> str | None:
    """None if torch imports, else why the PyTorch rows are skipped."""
    return None if importlib.util.find_spec("torch") else "torch is not installed"


class _TorchStep:
    """Carries ``(h, c)`` between calls like the stateful IR does; ``reset`` zeroes them."""

    name = "torch"

    def __init__(self, net: Any, state_shape: tuple[int, ...], threads: int, embed: bool) -> None:
        import torch

        torch.set_num_threads(threads)
        self._torch, self._net, self._shape, self._embed = torch, net.eval(), state_shape, embed
        self.reset()

    def reset(self) -> None:
        zeros = self._torch.zeros(self._shape)
        self._state = (zeros, zeros.clone())

    def step(self, feeds: dict[str, np.ndarray]) -> object:
        (value,) = feeds.values()
        with self._torch.inference_mode():
            x = self._torch.from_numpy(value)
            out, self._state = self._net(x, self._state)
        return out.numpy()


def lstm_runner(hidden: int, layers: int, batch: int, input_size: int, threads: int) -> _TorchStep:
    """``nn.LSTM(input_size, hidden, layers, batch_first=True)`` stepped one time step at a time."""
    import torch

    lstm = torch.nn.LSTM(input_size, hidden, layers, batch_first=True)
    return _TorchStep(lstm, (layers, batch, hidden), threads, embed=False)


def demo_runner(vocab: int, embed: int, hidden: int, layers: int, threads: int) -> _TorchStep:
    """The demo's ``Embedding -> LSTM -> Linear`` (see ``models/train_char_lstm.py``)."""
    import torch

    class CharStep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, embed)
            self.lstm = torch.nn.LSTM(embed, hidden, layers, batch_first=True)
            self.head = torch.nn.Linear(hidden, vocab)

        def forward(self, x: Any, state: Any) -> Any:
            y, state = self.lstm(self.embed(x), state)
            return self.head(y[:, -1]), state

    return _TorchStep(CharStep(), (layers, 1, hidden), threads, embed=True)
