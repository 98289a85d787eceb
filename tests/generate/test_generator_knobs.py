"""``Generator.from_dir``'s knobs (``threads``, ``int8_activations``) reach the decoder's session and
its conversion, and ``Generator.generate`` answers text with text; ``ortstate generate`` takes the
same knobs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from oracle import REPO, assert_one_line_error, run_cli

import ortstate.generate.generator as generator_module
from ortstate.errors import GenerationError
from ortstate.generate import Generator, Tokenizer
from ortstate.passes import walk

LLM = REPO / "models" / "llm"


def test_generate_takes_text_and_answers_text() -> None:
    """Text in: the ids of its tokenizer, and the new ids' text out (special tokens skipped), as
    the ids path gives them; ids in: ids out."""
    generator = Generator.from_dir(LLM / "llama")
    tokenizer = Tokenizer.from_dir(LLM / "llama")
    text = "Once upon a time"
    ids = generator.generate(tokenizer.encode(text), 12, stop_at_eos=False)
    assert generator.generate(text, 12, stop_at_eos=False) == tokenizer.decode(ids)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)


def test_text_that_goes_on_gets_no_special_tokens() -> None:
    """A turn that continues the cache (``reset=False``) is encoded as the middle of a text: no BOS
    (the llama tokenizer adds one at a text's start)."""
    generator = Generator.from_dir(LLM / "llama")
    tokenizer = Tokenizer.from_dir(LLM / "llama")
    assert tokenizer.encode("upon") != tokenizer.encode("upon", add_special_tokens=False)
    generator.generate(tokenizer.encode("Once"), 3, stop_at_eos=False)
    ids = generator.generate(tokenizer.encode(" upon", add_special_tokens=False), 6, stop_at_eos=False, reset=False)
    fed = generator.history
    generator.generate("Once", 3, stop_at_eos=False)
    assert generator.generate(" upon", 6, stop_at_eos=False, reset=False) == tokenizer.decode(ids)
    assert generator.history == fed  # the same tokens in the cache: no BOS before " upon"


def test_text_without_the_text_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = Generator.from_dir(LLM / "llama")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    with pytest.raises(GenerationError) as info:
        generator.generate("hello", 2)
    assert str(info.value) == (
        "text needs the text extra (tokenizers missing): pip install 'ortstate[text]' ('.[text]' in a checkout)"
    )


def test_text_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "llama"
    folder.mkdir()
    for path in (LLM / "llama").iterdir():
        if path.name != "tokenizer.json":
            (folder / path.name).symlink_to(path)
    with pytest.raises(GenerationError, match=r"tokenizer\.json: no such file"):
        Generator.from_dir(folder).generate("hello", 2)


def test_threads_and_int8_activations_reach_the_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder's session gets ``threads`` intra-op threads, and with ``int8_activations`` a
    decoder converted so: its 4-bit MatMuls compute at accuracy level 4 (int8 activations)."""
    made: list[tuple[Any, Any]] = []
    real = generator_module.StatefulSession

    def spy(model: Any, sess_options: Any = None, **kwargs: Any) -> Any:
        made.append((model, sess_options))
        return real(model, sess_options=sess_options, **kwargs)

    monkeypatch.setattr(generator_module, "StatefulSession", spy)
    Generator.from_dir(LLM / "llama_int4", threads=1)
    Generator.from_dir(LLM / "llama_int4", int8_activations=True)
    (exact, options), (fast, _) = made
    assert Path(exact).name == "openvino_model.xml" and options.intra_op_num_threads == 1
    levels = {
        onnx.helper.get_attribute_value(a)
        for n in walk.nodes(fast.model.graph)
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "accuracy_level"
    }
    assert levels == {4}


@pytest.mark.parametrize("threads", [0, -2, 1.5, True])
def test_bad_threads_are_refused(threads: Any) -> None:
    with pytest.raises(GenerationError, match=r"^threads must be a positive integer, got "):
        Generator.from_dir(LLM / "llama", threads=threads)


def test_the_command_line_takes_the_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "generate", LLM / "llama_int4", "--prompt-ids", "1,5,7", "-n", "3", "--threads", "1",
        "--int8-activations",
    )  # fmt: skip
    assert code == 0 and len(out.split()) == 3
    code, out, err = run_cli(capsys, "generate", LLM / "llama", "--prompt-ids", "1", "--threads", "0")
    assert (code, out) == (2, "")
    assert_one_line_error(err, "--threads must be at least 1, got 0")
