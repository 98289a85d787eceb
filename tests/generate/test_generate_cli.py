"""``ortstate generate``'s search, stop and chat options: the command's output equals the Python API's,
and bad arguments are one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from oracle import REPO, SUMMARY, assert_one_line_error, ids_arg, linked_copy, run_cli
from text_tokenizers import CHAT_TEMPLATE, word_tokenizer, write_word_tokenizer

from ortstate.generate import Chat, Generator, TextStreamer, Tokenizer

LLM = REPO / "models" / "llm"
LLAMA, MAMBA, T5 = LLM / "llama", LLM / "mamba", LLM / "t5"
PROMPT = [18, 152, 24, 240, 209]  # llama's reference prompt


@pytest.fixture(scope="module")
def llama() -> Generator:
    return Generator.from_dir(LLAMA)


@pytest.fixture
def chat_llama(tmp_path: Path) -> Path:
    """llama with a word-level tokenizer (word tN = token N) and a chat template."""
    return write_word_tokenizer(linked_copy(LLAMA, tmp_path / "llama"))


def test_sampling_from_the_command_line(capsys: pytest.CaptureFixture[str], llama: Generator) -> None:
    argv = ["generate", LLAMA, "--prompt-ids", ids_arg(PROMPT), "-n", 10, "--do-sample", "--seed", 5]
    argv += ["--temperature", 1.5, "--top-k", 30, "--top-p", 0.9, "--repetition-penalty", 1.1]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    want = llama.generate(
        PROMPT, 10, do_sample=True, seed=5, temperature=1.5, top_k=30, top_p=0.9, repetition_penalty=1.1
    )
    assert out == " ".join(map(str, want)) + "\n"
    match = SUMMARY.fullmatch(err)
    assert match and match.group(5).startswith("sampled with seed 5, ")
    assert run_cli(capsys, *argv)[1] == out


def test_beam_search_from_the_command_line(capsys: pytest.CaptureFixture[str], llama: Generator) -> None:
    code, out, err = run_cli(capsys, "generate", LLAMA, "--prompt-ids", ids_arg(PROMPT), "-n", 6, "--num-beams", 3)
    assert code == 0, err
    best = llama.generate(PROMPT, 6, num_beams=3)
    assert out == " ".join(map(str, best)) + "\n"
    assert llama.last_run is not None and llama.last_run.beams is not None
    score = llama.last_run.beams[0][0].score
    assert f"3 beams, best score {score:.4f}" in err and SUMMARY.fullmatch(err)


def test_stop_ids_and_strings(capsys: pytest.CaptureFixture[str], chat_llama: Path, llama: Generator) -> None:
    free = llama.generate(PROMPT, 8, stop_at_eos=False)  # 27 69 77 77 150 77 0 0
    code, out, err = run_cli(capsys, "generate", LLAMA, "--prompt-ids", ids_arg(PROMPT), "--stop-id", free[2])
    assert (code, out) == (0, " ".join(map(str, free[:3])) + "\n") and err.endswith(", stopped at a stop token)\n")
    text = " ".join(f"t{t}" for t in PROMPT)
    code, out, err = run_cli(capsys, "generate", chat_llama, "--prompt", text, "--stop", "77 t15", "--stop", "zz")
    assert (code, out) == (0, " ".join(f"t{t}" for t in free[:5]) + "\n"), err  # "t77 t150" ends at token 150
    assert err.endswith(", stopped at a stop string)\n")
    code, out, _ = run_cli(capsys, "generate", chat_llama, "--prompt-ids", ids_arg(PROMPT), "--stop", "t69")
    assert (code, out) == (0, " ".join(map(str, free[:2])) + "\n")  # ids out; the tokenizer only for the stop


def test_chat_one_turn(capsys: pytest.CaptureFixture[str], chat_llama: Path) -> None:
    code, out, err = run_cli(capsys, "generate", chat_llama, "--chat", "--prompt", "t5 t6", "-n", 5, "--system", "t3")
    assert code == 0, err
    chat = Chat(Generator.from_dir(chat_llama), system="t3")
    assert out == chat.say("t5 t6", 5) + "\n"


def test_chat_turns_from_standard_input_continue_the_cache(chat_llama: Path) -> None:
    """The real command, turns piped in: each reply equals the API's, and turn 2 continues the cache."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "ortstate", "generate", str(chat_llama), "--chat", "-n", "4", "--ignore-eos"],
        input="t5 t6\n\nt7 t8 t9\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    chat = Chat(Generator.from_dir(chat_llama))
    replies, uses = [], []
    for turn in ("t5 t6", "t7 t8 t9"):
        replies.append(chat.say(turn, 4, stop_at_eos=False))
        uses.append(f"chat: {chat.cached} prompt tokens from the cache, {chat.fed} fed")
    assert done.stdout == "".join(r + "\n" for r in replies)
    assert chat.refed == 0 and chat.cached == len(chat.prompt_ids) - chat.fed > 0  # only what the template added
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and [line.rpartition("; ")[2] for line in lines] == uses
    assert all(SUMMARY.fullmatch(line.rpartition("; ")[0] + "\n") for line in lines)


def test_search_argument_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    no_template = write_word_tokenizer(linked_copy(LLAMA, tmp_path / "plain"), template=None)
    t5 = write_word_tokenizer(linked_copy(T5, tmp_path / "t5"))
    bare = linked_copy(MAMBA, tmp_path / "bare", skip=("tokenizer.json", "tokenizer_config.json"))
    base = ["generate", bare, "--prompt-ids", "1,2"]
    cases = [
        ([*base, "--do-sample", "--temperature", "-1"], "--temperature: temperature must be a number > 0, got -1.0 "
         "(for greedy decoding, do not sample)"),
        ([*base, "--temperature", "0.5", "--seed", "3"], "--temperature, --seed apply to sampling: add --do-sample"),
        ([*base, "--do-sample", "--top-p", "1.5"], "--top-p: top_p must be in (0, 1], got 1.5"),
        ([*base, "--do-sample", "--top-k", "-2"],
         "--top-k: top_k must be an integer >= 1, or 0 or -1 to keep every token, got -2"),
        ([*base, "--num-beams", "0"], "--num-beams: num_beams must be an integer in [1, 128], got 0"),
        ([*base, "--num-beams", "100000000"], "--num-beams: num_beams must be an integer in [1, 128], got 100000000"),
        ([*base, "--do-sample", "--choices", "1000000000"],
         "--choices: n must be an integer in [1, 128], got 1000000000"),
        ([*base, "--length-penalty", "2"], "--length-penalty applies to beam search: add --num-beams N (N > 1)"),
        ([*base, "--repetition-penalty", "0"], "--repetition-penalty: repetition_penalty must be a number > 0 "
         "(1 = no penalty), got 0.0"),
        ([*base, "--stop", ""], "--stop: stop_strings must be non-empty strings, got ''"),
        ([*base, "--stop", "x"], f"{bare / 'tokenizer.json'}: no such file (--stop needs the model's tokenizer; "
         "use --stop-id for token ids)"),
        (["generate", bare, "--chat"],
         f"{bare / 'tokenizer.json'}: no such file (--chat needs the model's tokenizer)"),
        (["generate", no_template, "--chat", "--prompt", "t1"], f"--chat: {no_template / 'tokenizer_config.json'}: "
         "no chat_template (nor chat_template.jinja beside it): the model has no chat format to apply"),
        ([*base, "--chat"], "--chat takes text (--prompt, or turns on standard input), not --prompt-ids"),
        ([*base, "--system", "be brief"], "--system applies to --chat only"),
        (["generate", t5, "--chat", "--prompt", "t1"],
         "--chat applies to decoder-only models (this one has an encoder)"),
        ([*base, "--top-k", "x"], "argument --top-k: invalid int value: 'x' (see 'ortstate generate --help')"),
    ]  # fmt: skip
    for argv, message in cases:
        code, out, err = run_cli(capsys, *argv)
        assert (code, out) == (2, ""), (argv, err)
        assert_one_line_error(err, message)


@pytest.mark.parametrize("rewrites", [False, True], ids=["continues", "refeeds"])
def test_chat_turn_equals_a_fresh_generation_over_the_conversation(tmp_path: Path, rewrites: bool) -> None:
    """A template that writes the turn count first changes the start of the conversation every turn:
    the cache cannot be continued, and the chat feeds the whole conversation again."""
    template = CHAT_TEMPLATE if not rewrites else "t{{ messages|length }} " + CHAT_TEMPLATE
    folder = write_word_tokenizer(linked_copy(LLAMA, tmp_path / "llama"), template=template)
    generator = Generator.from_dir(folder)
    tokenizer = Tokenizer.from_dir(folder)
    chat = Chat(generator)
    chat.say("t5 t6", 4, stop_at_eos=False)
    second = chat.say("t7", 4, stop_at_eos=False)
    assert chat.refed == int(rewrites)
    rendered = tokenizer.apply_chat_template(chat.messages[:-1])
    fresh = generator.generate(tokenizer.encode(rendered, add_special_tokens=False), 4, stop_at_eos=False)
    assert second == tokenizer.decode(fresh)


def test_generation_config_gives_the_search_defaults(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """transformers' rule: generation_config.json's values fill what a call leaves out; its do_sample and
    num_beams are only noted (ortstate decodes greedily unless asked); junk is refused naming the file."""
    folder = linked_copy(LLAMA, tmp_path / "llama", skip=("generation_config.json",))
    config = {"eos_token_id": 2, "pad_token_id": 0, "do_sample": True, "top_k": 1, "temperature": 3.0}
    (folder / "generation_config.json").write_text(json.dumps(config))
    generator = Generator.from_dir(folder)
    greedy = generator.generate(PROMPT, 8, stop_at_eos=False)
    assert greedy == [27, 69, 77, 77, 150, 77, 0, 0]  # the reference: do_sample in the file is not followed
    assert all(generator.generate(PROMPT, 8, stop_at_eos=False, do_sample=True, seed=s) == greedy for s in range(3))
    assert generator.generate(PROMPT, 8, stop_at_eos=False, do_sample=True, top_k=0, seed=1) != greedy
    code, out, err = run_cli(capsys, "generate", folder, "--prompt-ids", ids_arg(PROMPT), "-n", 3)
    assert code == 0 and out == "27 69 77\n"
    assert err.splitlines()[0] == (
        f"ortstate: note: {folder}: generation_config.json asks for do_sample=true: ortstate decodes greedily "
        "unless asked (do_sample=True, num_beams=N)"
    )
    (folder / "generation_config.json").write_text(json.dumps({"top_p": 7}))
    code, out, err = run_cli(capsys, "generate", folder, "--prompt-ids", "1")
    assert (code, out) == (1, "")
    assert_one_line_error(err, "generation_config.json: top_p must be in (0, 1], got 7")


def test_text_streamer_through_generate(llama: Generator) -> None:
    tokenizer = word_tokenizer()
    pieces: list[str] = []
    tokens = llama.generate(PROMPT, 8, stop_at_eos=False, stream=TextStreamer(tokenizer, on_text=pieces.append))
    assert "".join(pieces) == tokenizer.decode(tokens) == "t27 t69 t77 t77 t150 t77 t0 t0"
    assert len(pieces) == 8  # a piece per token: each word is final once decoded
