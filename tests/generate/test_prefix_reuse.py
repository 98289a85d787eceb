"""Generator's prefix reuse: a second ``generate()`` on a prompt that starts with what the state
holds feeds only the rest (the whole last call, or its state cut where the prompt parts from it),
with a fresh generator's logits (1e-4) and tokens, in both forms; a hybrid's state is never cut
(a prompt that parts from it starts afresh), and ``prefix_cache=False`` always does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ortstate.generate import Generator

MODELS = Path(__file__).resolve().parents[2] / "models" / "llm"
PROMPT = [1, 5, 9, 33, 21, 17, 44, 90, 12, 8]
SAMPLED = {"do_sample": True, "seed": 4, "top_k": 20, "repetition_penalty": 1.3}


@pytest.fixture(scope="module")
def generators() -> dict[tuple[str, str], tuple[Generator, Generator]]:
    return {}


def _pair(generators: dict, name: str, form: str) -> tuple[Generator, Generator]:
    """(a generator reusing its state, a fresh one: prefix_cache off)."""
    if (name, form) not in generators:
        fresh = Generator.from_dir(MODELS / name, form)
        fresh.prefix_cache = False
        generators[name, form] = (Generator.from_dir(MODELS / name, form), fresh)
    return generators[name, form]


def _same(warm: Generator, fresh: Generator, prompt: list[int], new: int, **search: object) -> list[int]:
    """``prompt``'s answer from both, asserted equal (tokens, and each step's logits within 1e-4)."""
    got = warm.generate(prompt, new, stop_at_eos=False, keep_logits=True, **search)
    assert got == fresh.generate(prompt, new, stop_at_eos=False, keep_logits=True, **search)
    assert fresh.cached_tokens == 0
    np.testing.assert_allclose(warm.last_run.logits, fresh.last_run.logits, atol=1e-4, rtol=0)
    return got


CASES = [("llama", "custom-op"), ("llama", "explicit"), ("qwen2", "explicit")]


@pytest.mark.parametrize(("name", "form"), CASES)
def test_a_prompt_starting_with_the_state_feeds_only_the_rest(generators: dict, name: str, form: str) -> None:
    warm, fresh = _pair(generators, name, form)
    answer = _same(warm, fresh, PROMPT, 6)
    assert warm.cached_tokens == 0
    turn = PROMPT + answer + [3, 4]  # a chat's next turn: all the state holds, its pending token, more
    _same(warm, fresh, turn, 6, **SAMPLED)
    assert warm.cached_tokens == len(PROMPT) + len(answer) - 1
    _same(warm, fresh, turn, 4)  # the same prompt whole: its last token fed again, for its logits
    assert warm.cached_tokens == len(turn) - 1
    parted = PROMPT[:7] + [60, 61]  # parts from the state after 7 tokens: cut there
    _same(warm, fresh, parted, 5)
    assert warm.cached_tokens == 7
    assert warm.past_tokens == len(parted) + 4  # what it holds: the prompt, the answer but its last


def test_a_hybrids_state_is_continued_never_cut(generators: dict) -> None:
    warm, fresh = _pair(generators, "lfm2", "explicit")
    answer = _same(warm, fresh, PROMPT, 4)
    _same(warm, fresh, PROMPT + answer + [3], 4)
    assert warm.cached_tokens == len(PROMPT) + len(answer) - 1
    _same(warm, fresh, PROMPT[:7] + [60, 61], 4)  # parts from it: its convolution states cannot be cut
    assert warm.cached_tokens == 0


@pytest.mark.parametrize("form", ["custom-op", "explicit"])
def test_an_interrupt_between_a_run_and_its_rows_leaves_nothing_behind(
    generators: dict, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """A KeyboardInterrupt (Ctrl-C) landing after a run changed the state, before its rows are
    committed: the next generation (of the same prompt, then a continued one) is a fresh
    generator's, not one going on from a state its rows do not describe (tests/runtime/
    test_interrupts.py found it by chance: one run in many)."""
    from ortstate.generate.rows import CacheRows

    warm, fresh = _pair(generators, "llama", form)
    warm.generate([7, 7], 2, stop_at_eos=False)  # a state to reuse
    real, raised = CacheRows.commit, []

    def interrupted(self: CacheRows, *args: object) -> None:
        if not raised:  # the run has changed the state: say the signal came here
            raised.append(True)
            raise KeyboardInterrupt
        real(self, *args)

    monkeypatch.setattr(CacheRows, "commit", interrupted)
    prompt = [7] + PROMPT
    with pytest.raises(KeyboardInterrupt):
        warm.generate(prompt, 4, stop_at_eos=False)
    assert raised
    monkeypatch.undo()
    answer = _same(warm, fresh, prompt, 4)
    _same(warm, fresh, prompt + answer + [3], 3)
