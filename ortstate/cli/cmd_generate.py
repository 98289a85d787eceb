"""``ortstate generate``: generation (greedy, sampling, beams, chat) with a converted optimum-intel LLM folder."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RunError, UsageError
from ..extras import missing_extra
from ..generate import (
    Chat,
    GenerationError,
    Generator,
    TextStreamer,
    Tokenizer,
    find_model_files,
    read_config,
)
from ..generate.prompts import FirstRow, check_context, check_prompts
from ..generate.structured import check_schema, schema_text
from ..generate.tokenizer import TOKENIZER_FILE
from .args import add_form_option, add_verbose_option, load_npy
from .command import EXIT_FAILURE, EXIT_OK, Command
from .generate_output import IdPrinter, latency_summary, write_out
from .generate_search import add_search_options, search_options
from .report import progress

DESCRIPTION = """\
Convert the OpenVINO IRs of an optimum-intel export folder (a stateful decoder, plus its encoder or
text-embeddings model when it has one) and generate from a prompt. The KV cache / SSM state stays in
the model's variables; each step feeds only the new token, with the attention mask, positions and
beam_idx the model's inputs call for. New tokens (or text, with a tokenizer) stream to stdout as they
come; the latency summary (prefill, decode median/p90 per token) goes to stderr.

Search: greedy by default; --do-sample samples (--temperature, --top-k, --top-p, --min-p; --seed
repeats a run; --choices N gives N samples of one prompt, one line each, choice i seeded with
seed + i); --num-beams N runs beam search through the model's own beam_idx input (the best beam is
printed at the end); --repetition-penalty applies to all three. The parameters mean what they mean
in transformers' generate(), with its defaults (top-k 50); generation_config.json's values are the
defaults where it gives them. vLLM's/OpenAI's --presence-penalty, --frequency-penalty, --logit-bias
ID=BIAS and --min-tokens N apply to greedy decoding and sampling (not beam search). Order: min-tokens
and logit bias, then the penalties (what greedy takes the best of), then temperature, min-p, top-k,
top-p. --stop TEXT and --stop-id N end generation early (repeatable). A prompt whose tokens and -n
pass the model's context (config.json's max_position_embeddings, n_positions, ...) is refused.
--json-schema FILE makes the answer JSON valid against the JSON schema in FILE (written compactly, as
json.dumps writes it), whatever the weights: it stops when the JSON is complete and is closed in time
within -n tokens; a schema the engine refuses, or -n below its shortest answer, is an error before
anything runs. It needs tokenizer.json and the structured extra (llguidance); not with --num-beams.

--prompt TEXT, --stop and --chat need the folder's tokenizer.json and the text extra (pip install
'ortstate[text]'); --chat also needs a chat template (tokenizer_config.json's chat_template, or
chat_template.jinja): it wraps --prompt in the template as a user turn, or, without --prompt, reads one user
turn per line from standard input and answers each, continuing from the cache: a turn's prompt is
the last one's tokens, the reply's as generated, then only the tokens of the text the template
adds, so only those are fed (a template that rewrites earlier turns makes the whole conversation
fed again); each turn's summary line says how many prompt tokens came from the cache and how many
were fed. A turn refused (past the context, say) is one error line and is dropped: the conversation
goes on with the next line as it was, and the exit code is 1 at the end.
Encoder-decoders (Whisper, T5) take --encoder-input FILE.npy (default: the folder's
encoder_input.npy) and start from the decoder start token unless --prompt-ids says otherwise.

examples:
  ortstate generate models/llm/llama --prompt-ids 18,152,24,240,209
  ortstate generate models/llm/llama --prompt-ids 18,152,24 -n 32 --do-sample --temperature 0.8 --top-p 0.9 --seed 7
  ortstate generate models/llm/llama --prompt-ids 18,152,24 --num-beams 4 --stop-id 77
  ortstate generate models/llm/llama --prompt-ids 18,152,24 --do-sample --choices 3 --min-p 0.05 --seed 1
  ortstate generate models/llm/llama --prompt-ids 18,152,24 --presence-penalty 1.5 --logit-bias 77=-100
  ortstate generate models/llm/mamba --prompt-ids 163,36,172 --max-new-tokens 32 --form custom-op
  ortstate generate models/llm/whisper --encoder-input features.npy
  ortstate generate path/to/export --prompt "Once upon a time" --stop "The end"
  ortstate generate path/to/export --prompt "A person as JSON:" -n 200 --json-schema person.schema.json
  ortstate generate path/to/export --chat --system "You are terse."      # one user turn per line on stdin"""

ENCODER_INPUT_FILE = "encoder_input.npy"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="an optimum-intel export folder (IRs + config.json)")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-ids", metavar="IDS", help="the prompt's token ids, comma-separated: 1,2,3")
    prompt.add_argument("--prompt", metavar="TEXT", help="the prompt as text (needs MODEL_DIR/tokenizer.json)")
    p.add_argument(
        "--max-new-tokens", "-n", type=int, default=16, metavar="N", help="at most N new tokens (default 16)"
    )
    add_form_option(
        p,
        "how the KV caches and other variables are kept: auto (default) = the explicit form, the fastest "
        "(caches as graph inputs and outputs, appended in place where the attention allows); custom-op = "
        "the Python state ops; explicit = like auto, but refuse a model that can't be rewritten",
    )
    p.add_argument("--encoder-input", metavar="FILE.npy", help="the encoder's input (Whisper/T5)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at the end-of-sequence token")
    p.add_argument(
        "--threads",
        type=int,
        metavar="T",
        help="ONNX Runtime intra-op threads of the decoder (default: ONNX Runtime's, every physical core)",
    )
    p.add_argument(
        "--int8-activations",
        action="store_true",
        help="compressed (int4/int8) weights compute on int8-quantized activations: faster on CPUs with VNNI, "
        "logits move ~1e-2 (default: exact f32 activations)",
    )
    add_search_options(p)
    chat = p.add_argument_group("chat")
    chat.add_argument("--chat", action="store_true", help="apply the folder's chat template (see above)")
    chat.add_argument("--system", metavar="TEXT", help="with --chat: a system message opening the conversation")
    add_verbose_option(p)


def _parse_ids(text: str) -> list[int]:
    """ASCII integers between single commas: int() alone would also take '1_0', '+1', Arabic-Indic
    digits, and an empty item ('1,,2') silently."""
    items = text.replace(" ", "").split(",")
    try:
        if not all(re.fullmatch(r"-?[0-9]+", t) for t in items):
            raise ValueError(text)
        return [int(t) for t in items]
    except ValueError:  # also an integer past Python's 4,300 digits
        shown = repr(text) if len(text) <= 60 else repr(text[:57]) + "..."
        raise UsageError(
            f"--prompt-ids expects comma-separated integers, e.g. --prompt-ids 1,2,3; got {shown}"
        ) from None


def load_tokenizer(model_dir: Path, why: str = "--prompt") -> Tokenizer:
    """The folder's ``tokenizer.json`` (and chat template) through the ``tokenizers`` package, imported only now."""
    path = model_dir / TOKENIZER_FILE
    if not path.is_file():
        instead = {"--prompt": "use --prompt-ids instead", "--stop": "use --stop-id for token ids"}.get(why)
        more = f"; {instead}" if instead else ""
        raise UsageError(f"{path}: no such file ({why} needs the model's tokenizer{more})")
    missing = missing_extra("text", why)
    if missing:
        alternative = "; or use --prompt-ids" if why == "--prompt" else ""
        raise UsageError(missing + alternative)
    try:
        return Tokenizer.from_dir(model_dir)
    except GenerationError as exc:
        raise UsageError(str(exc)) from None


def _encoder_input(args: argparse.Namespace, model_dir: Path, generator: Generator) -> np.ndarray | None:
    if generator.encoder is None:
        if args.encoder_input:
            raise UsageError("--encoder-input applies to encoder-decoder models only (Whisper, T5)")
        return None
    path = Path(args.encoder_input) if args.encoder_input else model_dir / ENCODER_INPUT_FILE
    if not args.encoder_input:
        if not path.is_file():
            raise UsageError(f"{model_dir} is an encoder-decoder: give its input with --encoder-input FILE.npy")
        print(f"ortstate: note: encoder input from {path} (--encoder-input to choose)", file=sys.stderr)
    value = load_npy(path, generator.encoder.main.name)
    want = generator.encoder.main.rank
    if want is not None and value.ndim != want:
        raise UsageError(
            f"{path}: encoder input '{generator.encoder.main.name}' has rank {want}, the file holds {list(value.shape)}"
        )
    return value


def _prompt(args: argparse.Namespace, generator: Generator, tokenizer: Any) -> list[int]:
    if tokenizer is not None and args.prompt is not None:
        ids = tokenizer.encode(args.prompt)
        if not ids:
            raise UsageError("--prompt: the tokenizer made no tokens of that text")
    elif args.prompt_ids is not None:
        ids = _parse_ids(args.prompt_ids)
    elif generator.encoder is not None and generator.config.decoder_start_token_id is not None:
        ids = [generator.config.decoder_start_token_id]
    elif generator.encoder is not None:
        raise UsageError(
            "no decoder_start_token_id in generation_config.json or config.json: "
            "give the decoder's first token(s) with --prompt-ids"
        )
    else:
        raise UsageError("give the prompt with --prompt-ids 1,2,3 (or --prompt TEXT with a tokenizer.json)")
    try:
        check_prompts([ids], args.max_new_tokens, vocab_size=generator.vocab_size)
    except GenerationError as exc:
        raise UsageError(f"prompt {exc}" if exc.field == "prompts" else str(exc)) from None
    return ids


def _checked(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    """The command line's search options, once every argument is checked against the others and
    the folder (before anything is converted)."""
    if not model_dir.exists():
        raise UsageError(f"{model_dir}: no such directory")
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    if args.prompt_ids is not None:
        _parse_ids(args.prompt_ids)  # a typo fails before the conversion
    if args.chat and args.prompt_ids is not None:
        raise UsageError("--chat takes text (--prompt, or turns on standard input), not --prompt-ids")
    if args.system is not None and not args.chat:
        raise UsageError("--system applies to --chat only")
    search = search_options(args)
    if args.chat and search.get("n", 1) > 1:
        raise UsageError("--choices applies to one prompt, not --chat (a conversation continues one answer)")
    try:
        find_model_files(model_dir)
    except GenerationError as exc:
        raise UsageError(str(exc)) from None
    if args.prompt_ids is not None:  # past the model's context: said before converting it
        context = read_config(model_dir).max_context
        check_context(len(_parse_ids(args.prompt_ids)), args.max_new_tokens, context, "the model's context")
    return search


def _checked_tokenizer(args: argparse.Namespace, model_dir: Path, search: dict[str, Any]) -> Any:
    """The folder's tokenizer where an option needs one (None otherwise), with the schema and the
    chat template it will serve checked."""
    why = "--chat" if args.chat else "--prompt" if args.prompt is not None else "--stop" if args.stop else None
    why = why or ("--json-schema" if args.json_schema else None)
    tokenizer = load_tokenizer(model_dir, why) if why else None
    if search.get("json_schema") is not None:  # its grammar checked before the model is converted
        try:
            check_schema(schema_text(search["json_schema"]))
        except GenerationError as exc:
            raise UsageError(f"--json-schema {args.json_schema}: {exc}") from None
    if args.chat:
        assert tokenizer is not None
        try:
            tokenizer.check_chat_template()
        except GenerationError as exc:
            raise UsageError(f"--chat: {exc}") from None
    return tokenizer


def run(args: argparse.Namespace) -> int:
    model_dir = Path(args.model_dir)
    search = _checked(args, model_dir)
    tokenizer = _checked_tokenizer(args, model_dir, search)
    progress(f"converting {model_dir}")
    generator = Generator.from_dir(
        model_dir, form=args.form, tokenizer=tokenizer, threads=args.threads, int8_activations=args.int8_activations
    )
    problem = generator.beam_problem() if search.get("num_beams", 1) > 1 else None
    if problem:
        raise UsageError(f"--num-beams: beam search cannot run on this model: {problem}")
    if args.chat:
        return _chat(args, generator, tokenizer, search)
    encoder_input = _encoder_input(args, model_dir, generator)
    prompt = _prompt(args, generator, tokenizer if args.prompt is not None else None)
    _notes(args, generator, model_dir)
    at_end = search.get("num_beams", 1) > 1 or search.get("n", 1) > 1  # known once generation ends
    stream: Any = None
    if not at_end:
        stream = TextStreamer(tokenizer, on_text=write_out) if args.prompt is not None else IdPrinter()
    with _remedied(generator):
        rows = generator.generate_batch(
            [prompt],
            args.max_new_tokens,
            stream=None if stream is None else FirstRow(stream),
            encoder_input=encoder_input,
            stop_at_eos=not args.ignore_eos,
            **search,
        )
    if at_end:
        text = [tokenizer.decode(r) if args.prompt is not None else " ".join(map(str, r)) for r in rows]
        write_out("\n".join(text))
    print(flush=True)
    assert generator.last_run is not None
    print(latency_summary(generator.last_run, generator.session.form), file=sys.stderr)
    return EXIT_OK


@contextmanager
def _remedied(generator: Generator) -> Iterator[None]:
    """A failed run says what would help when the feeding rules had to guess (see FeedRules.remedy)."""
    try:
        yield
    except RunError as exc:
        if not generator.rules.remedy:
            raise
        raise RunError(f"{exc}; {generator.rules.remedy}") from None


def _notes(args: argparse.Namespace, generator: Generator, model_dir: Path) -> None:
    notes = generator.notes(stop_at_eos=not args.ignore_eos)
    if notes:
        print(f"ortstate: note: {model_dir}: {'; '.join(notes)}", file=sys.stderr)


def _chat(args: argparse.Namespace, generator: Generator, tokenizer: Any, search: dict[str, Any]) -> int:
    """One turn (--prompt), or one per line of standard input, each continuing from the cache."""
    if generator.encoder is not None:
        raise UsageError("--chat applies to decoder-only models (this one has an encoder)")
    _notes(args, generator, model_dir=Path(args.model_dir))
    chat = Chat(generator, tokenizer, system=args.system)
    turns = [args.prompt] if args.prompt is not None else _stdin_turns()
    beams = search.get("num_beams", 1) > 1
    refused, answered = False, 0
    for turn in turns:
        stream = None if beams else TextStreamer(tokenizer, on_text=write_out)
        try:
            with _remedied(generator):
                reply = chat.say(turn, args.max_new_tokens, stream=stream, stop_at_eos=not args.ignore_eos, **search)
        except GenerationError as exc:
            if args.prompt is not None:
                raise
            # the turn is refused (e.g. past the context) and the conversation is as it was: it goes on
            print(f"ortstate: error: {exc} (turn dropped; the conversation goes on)", file=sys.stderr, flush=True)
            refused = True
            continue
        if beams:
            write_out(reply)
        print(flush=True)
        assert generator.last_run is not None
        summary = latency_summary(generator.last_run, generator.session.form)
        print(f"{summary}; {_cache_use(chat, first=answered == 0)}", file=sys.stderr)
        answered += 1
    return EXIT_FAILURE if refused else EXIT_OK


def _cache_use(chat: Chat, first: bool) -> str:
    """How many of the turn's prompt tokens the cache held, and how many were fed."""
    if first or chat.cached:
        return f"chat: {chat.cached} prompt tokens from the cache, {chat.fed} fed"
    why = "the conversation's tokens no longer start with the cache's"
    return f"chat: 0 prompt tokens from the cache, all {chat.fed} fed again ({why})"


def _stdin_turns() -> Iterator[str]:
    """User turns from standard input, one per line (blank lines skipped), a prompt shown on a terminal."""
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            yield line.rstrip("\n")


COMMAND = Command(
    "generate",
    "generate text (greedy, sampling, beams, chat) with a converted optimum-intel LLM folder",
    DESCRIPTION,
    configure,
    run,
)
