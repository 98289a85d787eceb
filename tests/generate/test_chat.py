"""``Chat`` continues a conversation from the cache, as ``ortstate serve``'s conversations do: a turn's
prompt is the last turn's tokens (its prompt's, its reply's as generated) and then only the tokens of
the text the chat template adds; only those (and the reply's last token) are fed.

- Every ``models/llm`` folder with a chat template, in both forms: three turns, none re-fed, each
  prompt's cached part as long as the last turn's tokens; the last reply's tokens are a fresh prefill's
  of the same ids (greedy), its logits OpenVINO's for the same feeds within 1e-4, and a fresh
  prefill's within 1e-4 (within OpenVINO's own prefill-vs-decode difference where that is larger:
  falcon_mamba and zamba2 compute a prompt otherwise than token by token).
- A reply ended by an eos token the template does not write after it: that token is dropped unfed
  (not re-fed), and the reply is again a fresh prefill's.
- A template that rewrites the conversation's start: the whole conversation is fed again, and the
  command line's summary line says so.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tokenizers
from oracle import REPO, linked_copy, run_cli
from ov_search import ov_model
from text_tokenizers import CHAT_TEMPLATE, write_word_tokenizer

from ortstate.generate import Chat, Generator
from ortstate.generate.turns import continued_ids, turn_ids

LLM = REPO / "models" / "llm"
CHAT_FOLDERS = sorted(
    p.parent.name for p in LLM.glob("*/tokenizer_config.json") if "chat_template" in json.loads(p.read_text())
)
FORMS = ("custom-op", "explicit")
ATOL = 1e-4
TURNS = ("Hello there", "And then, what did the converter do?", "Thanks!")
NEW = 6


def _openvino(family: str, chunks: list[list[int]], steps: int) -> np.ndarray:
    """OpenVINO's last-position logits after each of the last ``steps`` chunks, fed in turn."""
    stream = ov_model(family).stream(np.arange(1))
    logits = [stream.step(np.array([c]), np.ones((1, len(c)), np.int64)) for c in chunks]
    return np.stack(logits[-steps:])


def _fresh_equals_continued(generator: Generator, chat: Chat, family: str | None, first: list[int]) -> None:
    """The last turn's reply is what a fresh prefill of its prompt ids gives (greedy), logits within
    1e-4; or, for a model whose prefill and decode paths differ by more in OpenVINO too, within that
    difference. With ``family``, the logits are also OpenVINO's for the same feeds (the first turn's
    prompt, then one token a run) within 1e-4."""
    continued = generator.last_run
    assert continued is not None and continued.logits is not None
    generator.reset()  # from an empty cache (generate() would reuse the state: it holds the prompt's start)
    tokens = generator.generate(chat.prompt_ids, NEW, keep_logits=True)
    fresh = generator.last_run
    assert fresh is not None and fresh.logits is not None and fresh.prompt_tokens == len(chat.prompt_ids)
    assert tokens == continued.tokens[0]
    gap = 0.0
    if family is not None:
        fed = [*chat.prompt_ids, *tokens[:-1]]
        steps = len(tokens)
        stepped = _openvino(family, [first, *([t] for t in fed[len(first) :])], steps)
        whole = _openvino(family, [chat.prompt_ids, *([t] for t in tokens[:-1])], steps)
        np.testing.assert_allclose(continued.logits, stepped, atol=ATOL, rtol=0)
        np.testing.assert_allclose(fresh.logits, whole, atol=ATOL, rtol=0)
        gap = float(np.abs(stepped - whole).max())  # the model's own: falcon_mamba 4e-3, zamba2 1e-3
    np.testing.assert_allclose(continued.logits, fresh.logits, atol=ATOL + gap, rtol=0)


def test_every_chat_template_folder_is_here() -> None:
    assert len(CHAT_FOLDERS) == 24 and "llama" in CHAT_FOLDERS and "t5" not in CHAT_FOLDERS


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("folder", CHAT_FOLDERS)
def test_chat_continues_from_the_cache(folder: str, form: str) -> None:
    generator = Generator.from_dir(LLM / folder, form=form)
    chat = Chat(generator, system="You are terse.")
    last: list[int] = []
    first: list[int] = []
    for text in TURNS:
        chat.say(text, NEW, keep_logits=True)
        assert generator.last_run is not None
        # the last turn's prompt and reply as generated (the template writes an eos that ended it again):
        # the cache holds them but the reply's last token, fed now with the new tokens
        assert chat.refed == 0 and chat.prompt_ids[: len(last)] == last
        assert (chat.cached, chat.fed) == (max(len(last) - 1, 0), len(chat.prompt_ids) - max(len(last) - 1, 0))
        first = first or chat.prompt_ids
        last = chat.prompt_ids + generator.last_run.tokens[0]
    _fresh_equals_continued(generator, chat, folder, first)


def test_an_eos_the_template_does_not_write_is_dropped_unfed(tmp_path: Path) -> None:
    """The word-level template writes nothing after a reply: an eos token that ended it is not the
    next turn's start, so the generator drops it (picked, never fed) and feeds the next turn's
    tokens right after the cache, as the server does, instead of feeding the conversation again."""
    folder = write_word_tokenizer(linked_copy(LLM / "llama", tmp_path / "probe"))
    probe = Chat(Generator.from_dir(folder))
    probe.say("t5 t6", NEW, stop_at_eos=False)
    tokens = probe.generator.history[0][len(probe.prompt_ids) :]
    eos = next(t for i, t in enumerate(tokens) if i >= 2 and t not in tokens[:i])  # ends the reply at step i
    folder = write_word_tokenizer(linked_copy(LLM / "llama", tmp_path / "eos", skip=("generation_config.json",)))
    settings = json.loads((LLM / "llama" / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**settings, "eos_token_id": eos}))
    word = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    word.add_special_tokens([f"t{eos}"])  # a special token: the reply's text leaves it out, as a model's eos
    word.save(str(folder / "tokenizer.json"))
    generator = Generator.from_dir(folder)
    chat = Chat(generator)
    chat.say("t5 t6", NEW)
    assert generator.last_run is not None and generator.last_run.stop_reason == "eos"
    first = chat.prompt_ids + generator.last_run.tokens[0]
    assert turn_ids(chat.prompt_ids, generator.last_run.tokens[0], [eos]) == first[:-1]
    chat.say("t7", NEW, keep_logits=True)
    assert chat.refed == 0 and chat.prompt_ids[: len(first) - 1] == first[:-1]
    assert chat.prompt_ids[len(first) - 1] != eos and chat.cached == len(first) - 1
    assert chat.fed == len(chat.prompt_ids) - chat.cached  # the eos was not fed
    _fresh_equals_continued(generator, chat, None, [])


def test_a_template_that_rewrites_the_start_feeds_it_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    template = "t{{ messages|length }} " + CHAT_TEMPLATE  # the turn count first: every turn a new start
    folder = write_word_tokenizer(linked_copy(LLM / "llama", tmp_path / "llama"), template=template)
    chat = Chat(Generator.from_dir(folder))
    chat.say("t5 t6", 4, stop_at_eos=False)
    first_fed = chat.fed
    chat.say("t7", 4, stop_at_eos=False)
    assert (chat.refed, chat.cached, chat.fed) == (1, 0, len(chat.prompt_ids))
    monkeypatch.setattr(sys, "stdin", io.StringIO("t5 t6\nt7\n"))
    code, _, err = run_cli(capsys, "generate", folder, "--chat", "-n", 4, "--ignore-eos")
    assert code == 0
    first, second = (line.rpartition("; ")[2] for line in err.splitlines())
    assert first == f"chat: 0 prompt tokens from the cache, {first_fed} fed"
    assert second == (
        f"chat: 0 prompt tokens from the cache, all {chat.fed} fed again (the conversation's tokens no longer "
        "start with the cache's)"
    )


def test_a_refused_turn_is_dropped_and_the_conversation_goes_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line past the context is one error line; the next turn continues from the cache as if the
    refused one had never been said (the same tokens as that conversation alone), and the exit code is 1."""
    folder = LLM / "qwen2"
    chat = Chat(Generator.from_dir(folder))
    want = [chat.say(text, 3) for text in ("Hi", "again")]
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi\n" + "word " * 500 + "\nagain\n"))
    code, out, err = run_cli(capsys, "generate", folder, "--chat", "-n", 3)
    assert (code, out.splitlines()) == (1, want)
    lines = err.splitlines()
    assert len(lines) == 3 and lines[1].startswith("ortstate: error: a prompt of ")
    assert lines[1].endswith("> 128) (turn dropped; the conversation goes on)")
    assert lines[2].endswith(f"chat: {chat.cached} prompt tokens from the cache, {chat.fed} fed") and chat.cached


class _Chars:
    """A tokenizer whose tokens are the characters' code points."""

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]


@pytest.mark.parametrize(
    ("last_text", "text", "want"),
    [
        ("ab", "abcd", [1, 2, ord("c"), ord("d")]),  # the last ids, then what follows
        ("ab", "ab", None),  # nothing follows
        ("ab", "xabc", None),  # rewritten
        (None, "abc", None),  # no last text (token ids, or a reply cut at a stop string)
    ],
)
def test_continued_ids(last_text: str | None, text: str, want: list[int] | None) -> None:
    assert continued_ids(last_text, [1, 2], text, _Chars()) == want


def test_turn_ids_leave_out_an_ending_eos() -> None:
    assert turn_ids([1, 2], [5, 9], {9}) == [1, 2, 5]
    assert turn_ids([1, 2], [9, 5], {9}) == [1, 2, 9, 5]
    assert turn_ids([1, 2], [], {9}) == [1, 2]
