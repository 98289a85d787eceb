"""``ortstate.generate`` and ``ortstate generate``: feeding rules, the Generator API, the CLI and its errors.

The CLI runs in-process on two committed models: ``mamba`` (decoder-only, ``cache_position`` and a
current-token mask) and ``t5`` (encoder-decoder, ``encoder_attention_mask``). Their reference tokens
come from ``reference.json`` (OpenVINO greedy decoding).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from oracle import REPO, SUMMARY, assert_one_line_error, ids_arg, linked_copy, run_cli

from ortstate.generate import GenerationError, Generator, ModelConfig

LLM = REPO / "models" / "llm"
MAMBA, T5 = LLM / "mamba", LLM / "t5"
I64, I32, F32 = np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float32)


def reference(folder: Path) -> dict:
    return json.loads((folder / "reference.json").read_text())


# -- the Generator API ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mamba() -> Generator:
    return Generator.from_dir(MAMBA)


def test_generate_streams_and_times(mamba: Generator) -> None:
    ref = reference(MAMBA)
    streamed: list[int] = []
    tokens = mamba.generate(ref["prompt_ids"][0], 8, stream=streamed.append, stop_at_eos=False)
    assert tokens == streamed == ref["new_tokens"][0]
    run = mamba.last_run
    assert run is not None and len(run.step_seconds) == 8 and len(run.decode_seconds) == 7
    assert run.prompt_tokens == 5 and run.stop_reason == "max_new_tokens" and run.logits is None
    assert mamba.past_tokens == 5 + 7


def test_generate_stops_at_eos(mamba: Generator) -> None:
    ref = reference(MAMBA)
    third = ref["new_tokens"][0][2]
    stopping = Generator(mamba.session, ModelConfig(model_type="mamba", conv_kernel=4, eos_token_ids=(third,)))
    assert stopping.generate(ref["prompt_ids"][0], 8) == ref["new_tokens"][0][:3]
    assert stopping.last_run is not None and stopping.last_run.stop_reason == "eos"


def test_generate_batch_rows_match_single_runs(mamba: Generator) -> None:
    prompts = [reference(MAMBA)["prompt_ids"][0], [9, 8, 7, 6, 5]]
    singles = [mamba.generate(p, 6, stop_at_eos=False) for p in prompts]
    rows: list[list[int]] = []
    assert mamba.generate_batch(prompts, 6, stream=rows.append, stop_at_eos=False) == singles
    assert [list(r) for r in zip(*rows)] == singles


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        ([[]], "the prompt is empty: give at least one token id"),
        ([[1, 2.5]], "token ids must be integers, got 2.5 (float)"),
        ([[1, "3"]], "token ids must be integers, got '3' (str)"),
        (
            [[1, 2], [3]],
            "prompts of different lengths (1, 2 tokens) need left padding, which this model cannot hide: "
            "its variable(s) cache_params.past.conv.0cache_params.present.conv.0, cache_params.past.conv.1cache_params."
            "present.conv.1, cache_params.past.ssm.0cache_params.present.ssm.0 and 1 more are recurrent states (not "
            "attention caches) that would take in the pad tokens; generate them one at a time",
        ),
        ([[1, 256, -1]], "token id(s) -1, 256 outside the vocabulary (0..255)"),
    ],
)
def test_generate_refuses_bad_prompts(mamba: Generator, prompts: list[list[int]], message: str) -> None:
    with pytest.raises(GenerationError) as info:
        mamba.generate_batch(prompts, 2)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.generate(None), "the prompt is a text or a list of token ids, got NoneType"),
        (lambda g: g.generate({1: 2}), "the prompt is a text or a list of token ids, got dict"),
        (lambda g: g.generate(5), "the prompt is a text or a list of token ids, got int"),
        (lambda g: g.generate([1, 2.5]), "token ids must be integers, got 2.5 (float)"),
        (lambda g: g.generate([1, True]), "token ids must be integers, got True (bool)"),
        (lambda g: g.generate([1, "3"]), "token ids must be integers, got '3' (str)"),
        (lambda g: g.generate([1, 2**70]), f"token id(s) {2**70} outside the vocabulary (0..255)"),
        (lambda g: g.generate([1, 2], 2.5), "max_new_tokens must be an integer >= 1, got 2.5"),
        (lambda g: g.generate([1, 2], "3"), "max_new_tokens must be an integer >= 1, got '3'"),
        (lambda g: g.generate([1, 2], None), "max_new_tokens must be an integer >= 1, got None"),
        (lambda g: g.generate([1, 2], True), "max_new_tokens must be an integer >= 1, got True"),
        (lambda g: g.generate([1, 2], 0), "max_new_tokens must be an integer >= 1, got 0"),
        (lambda g: g.generate([1, 2], stream=5), "stream must be a callable taking each new token, got int"),
        (lambda g: g.generate_batch(None), "prompts must be a list of token id lists, got NoneType"),
        (lambda g: g.generate_batch([None]), "a prompt is a list of token ids, got NoneType"),
        (lambda g: g.generate_batch([[1]], stream="x"), "stream must be a callable taking the new tokens, got str"),
    ],
)
def test_generate_refuses_bad_arguments(mamba: Generator, call: Callable[[Generator], object], message: str) -> None:
    with pytest.raises(GenerationError) as info:
        call(mamba)
    assert str(info.value) == message
    assert (
        mamba.generate(np.array(reference(MAMBA)["prompt_ids"][0]), 2, stop_at_eos=False)
        == reference(MAMBA)["new_tokens"][0][:2]
    )  # numpy prompts are fine, and nothing was left behind


def test_junk_config_is_a_one_line_cli_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = linked_copy(MAMBA, tmp_path / "m", skip=("config.json",))
    config = json.loads((MAMBA / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "conv_kernel": "four"}))
    code, out, err = run_cli(capsys, "generate", folder, "--prompt-ids", "1,2")
    assert code == 1 and out == ""
    message = "conv_kernel: expected an integer >= 1, got 'four'"
    assert_one_line_error(err, f"{folder}: config.json or generation_config.json: {message}")


def test_encoder_input_that_is_no_array_of_numbers() -> None:
    generator = Generator.from_dir(T5)
    with pytest.raises(GenerationError, match=r"^encoder input 'input_ids': not an array of numbers"):
        generator.generate([0], 2, encoder_input=[["a", "b"]])


def test_encoder_decoder_needs_encoder_input() -> None:
    generator = Generator.from_dir(T5)
    with pytest.raises(GenerationError, match=r"^an encoder-decoder needs an encoder input \(encoder_input=\.\.\.\)$"):
        generator.generate([0], 2)


# -- the CLI --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["auto", "custom-op", "explicit"])
def test_cli_streams_reference_tokens(capsys: pytest.CaptureFixture[str], form: str) -> None:
    ref = reference(MAMBA)
    flags = ["--form", form]
    code, out, err = run_cli(
        capsys, "generate", MAMBA, "--prompt-ids", ids_arg(ref["prompt_ids"][0]), "-n", 8, "--ignore-eos", *flags
    )
    assert code == 0, err
    assert out == " ".join(map(str, ref["new_tokens"][0])) + "\n"
    match = SUMMARY.fullmatch(err)
    assert match, err
    runs = "custom-op" if form == "custom-op" else "explicit"
    assert match.group(2, 3, 4, 5) == ("5", "7", runs, "max new tokens reached")


def test_cli_stops_at_eos(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ref = reference(MAMBA)
    folder = linked_copy(MAMBA, tmp_path / "m", skip=("generation_config.json",))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": ref["new_tokens"][0][1]}))
    code, out, err = run_cli(capsys, "generate", folder, "--prompt-ids", ids_arg(ref["prompt_ids"][0]))
    assert code == 0, err
    assert out == " ".join(map(str, ref["new_tokens"][0][:2])) + "\n"
    assert err.endswith(", stopped at eos)\n")


def test_cli_encoder_decoder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ref = reference(T5)
    prompt = ids_arg(ref["prompt_ids"][0])
    code, out, err = run_cli(capsys, "generate", T5, "--prompt-ids", prompt, "-n", 8, "--ignore-eos")
    assert code == 0, err
    assert out == " ".join(map(str, ref["new_tokens"][0])) + "\n"
    note, summary = err.splitlines(keepends=True)
    assert note == f"ortstate: note: encoder input from {T5 / 'encoder_input.npy'} (--encoder-input to choose)\n"
    assert SUMMARY.fullmatch(summary) and summary.startswith("ortstate: encoder ")
    features = tmp_path / "features.npy"
    np.save(features, np.load(T5 / "encoder_input.npy"))
    code, out2, err = run_cli(capsys, "generate", T5, "--prompt-ids", prompt, "-n", 8, "--encoder-input", features)
    assert code == 0 and out2 == out and "note" not in err
    code, out3, err = run_cli(capsys, "generate", T5, "-n", 3)  # starts from the decoder start token
    assert code == 0, err
    assert len(out3.split()) == 3 and "(1 prompt token)" in err


# -- the CLI's one-line errors ----------------------------------------------------------------------------
def test_cli_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bare = linked_copy(MAMBA, tmp_path / "bare", skip=("tokenizer.json", "tokenizer_config.json"))
    cases = [
        (["generate", tmp_path / "nope", "--prompt-ids", "1"], 2, f"{tmp_path / 'nope'}: no such directory"),
        (
            ["generate", tmp_path, "--prompt-ids", "1"],
            2,
            f"{tmp_path}: no OpenVINO IR to generate with (expected openvino_model.xml, openvino_language_model.xml,"
            " or openvino_encoder_model.xml with openvino_decoder_model.xml)",
        ),
        (
            ["generate", MAMBA, "--prompt-ids", "1,x"],
            2,
            "--prompt-ids expects comma-separated integers, e.g. --prompt-ids 1,2,3; got '1,x'",
        ),
        *[
            (
                ["generate", MAMBA, "--prompt-ids", ids],
                2,
                f"--prompt-ids expects comma-separated integers, e.g. --prompt-ids 1,2,3; got {shown}",
            )
            for ids, shown in [
                ("1,,2", "'1,,2'"),
                ("1,2,", "'1,2,'"),
                ("1_0", "'1_0'"),
                ("\u0661", "'\u0661'"),
                ("9" * 5000, repr("9" * 57) + "..."),
            ]
        ],  # fmt: skip
        (["generate", MAMBA, "--prompt-ids", "1", "-n", "0"], 2, "--max-new-tokens must be at least 1, got 0"),
        (["generate", MAMBA, "--prompt-ids", "1,300"], 2, "prompt token id(s) 300 outside the vocabulary (0..255)"),
        (
            ["generate", MAMBA],
            2,
            "give the prompt with --prompt-ids 1,2,3 (or --prompt TEXT with a tokenizer.json)",
        ),
        (
            ["generate", MAMBA, "--prompt-ids", "1", "--encoder-input", "x.npy"],
            2,
            "--encoder-input applies to encoder-decoder models only (Whisper, T5)",
        ),
        (
            ["generate", bare, "--prompt", "hello"],
            2,
            f"{bare / 'tokenizer.json'}: no such file (--prompt needs the model's tokenizer; use --prompt-ids instead)",
        ),
        (
            ["generate", MAMBA, "--prompt", "hello", "--prompt-ids", "1"],
            2,
            "argument --prompt-ids: not allowed with argument --prompt (see 'ortstate generate --help')",
        ),
    ]
    for argv, code, message in cases:
        got, out, err = run_cli(capsys, *argv)
        assert (got, out) == (code, ""), (argv, err)
        assert_one_line_error(err, message)


def test_cli_encoder_input_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = linked_copy(T5, tmp_path / "t5", skip=("encoder_input.npy",))
    code, _, err = run_cli(capsys, "generate", folder)
    assert code == 2
    assert_one_line_error(err, f"{folder} is an encoder-decoder: give its input with --encoder-input FILE.npy")
    flat = tmp_path / "flat.npy"
    np.save(flat, np.arange(4))
    code, _, err = run_cli(capsys, "generate", folder, "--encoder-input", flat)
    assert code == 2
    assert_one_line_error(err, f"{flat}: encoder input 'input_ids' has rank 2, the file holds [4]")


def test_cli_prompt_without_tokenizers_package(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = linked_copy(MAMBA, tmp_path / "m", skip=("tokenizer.json", "tokenizer_config.json"))
    (folder / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    code, out, err = run_cli(capsys, "generate", folder, "--prompt", "hello")
    assert (code, out) == (2, "")
    assert_one_line_error(
        err,
        "--prompt needs the text extra (tokenizers missing): pip install 'ortstate[text]' ('.[text]' in a checkout); "
        "or use --prompt-ids",
    )


def test_cli_prompt_text_with_a_tokenizer(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A word-level tokenizer whose word ``tN`` is token N: the text round-trips to the reference ids."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    tokenizer = tokenizers.Tokenizer(models.WordLevel({f"t{i}": i for i in range(256)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    folder = linked_copy(MAMBA, tmp_path / "m", skip=("tokenizer.json", "tokenizer_config.json"))
    tokenizer.save(str(folder / "tokenizer.json"))
    ref = reference(MAMBA)
    text = " ".join(f"t{i}" for i in ref["prompt_ids"][0])
    code, out, err = run_cli(capsys, "generate", folder, "--prompt", text, "-n", 8, "--ignore-eos")
    assert code == 0, err
    assert out == " ".join(f"t{i}" for i in ref["new_tokens"][0]) + "\n"


def test_mamba_without_config_generates_the_reference_and_says_what_it_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ref = reference(MAMBA)
    folder = linked_copy(MAMBA, tmp_path / "m", skip=("config.json", "generation_config.json"))
    generator = Generator.from_dir(folder)
    assert generator.generate(ref["prompt_ids"][0], 8) == ref["new_tokens"][0]
    assert generator.notes()[-1] == (
        "no eos_token_id in generation_config.json or config.json: generating until max_new_tokens"
    )
    code, out, err = run_cli(capsys, "generate", folder, "--prompt-ids", ids_arg(ref["prompt_ids"][0]), "-n", 8)
    assert code == 0, err
    assert out == " ".join(map(str, ref["new_tokens"][0])) + "\n"
    note, summary = err.splitlines()
    assert note == (
        f"ortstate: note: {folder}: cache_position indexes a 4-wide convolution state in the graph (config.json "
        "gives none); model type unknown: attention_mask covers the current tokens, as mamba models take it; "
        "no eos_token_id in generation_config.json or config.json: generating until max_new_tokens"
    )
    assert SUMMARY.fullmatch(summary + "\n")


def test_zamba2_without_config_says_what_it_assumed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Nothing in zamba2's graph tells its mask apart from a transformer's: say what was assumed."""
    folder = linked_copy(LLM / "zamba2", tmp_path / "z", skip=("config.json", "generation_config.json"))
    code, out, err = run_cli(capsys, "generate", folder, "--prompt-ids", "8,79,106", "-n", 4, "--ignore-eos")
    note = err.splitlines()[0]
    assert note.startswith(f"ortstate: note: {folder}: model type unknown: attention_mask assumed to cover past and")
    assert "need config.json's model_type" in note and "eos" not in note  # --ignore-eos: no eos needed
    assert code == 1 and err.splitlines()[-1].startswith("ortstate: error: run failed, no variable was changed: ")


def test_encoder_decoder_without_a_start_token(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = linked_copy(T5, tmp_path / "t5", skip=("config.json", "generation_config.json"))
    (folder / "config.json").write_text(json.dumps({"model_type": "t5", "eos_token_id": 1}))
    code, out, err = run_cli(capsys, "generate", folder, "-n", 2)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "ortstate: error: no decoder_start_token_id in generation_config.json or config.json: "
        "give the decoder's first token(s) with --prompt-ids"
    )


def test_generate_points_several_prompts_to_generate_batch(mamba: Generator) -> None:
    with pytest.raises(
        GenerationError,
        match=r"^generate\(\) takes one prompt \(a list of token ids\); for several, use generate_batch\(\)$",
    ):
        mamba.generate([[5, 17, 42], [1, 2, 3]])
    with pytest.raises(GenerationError, match=r"for several, use generate_batch"):
        mamba.generate(np.array([[5, 17, 42]]))
