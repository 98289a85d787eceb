"""Greedy decoding over a converted stateful LLM: the KV cache / SSM state lives in the model's variables."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..convert import convert_graph
from ..ir import read_ir
from ..model_meta import CUSTOM_OP
from ..runtime import StatefulSession
from .encoder_decoder import Encoder, TextEmbedder
from .feeds import FeedRules, input_specs
from .ir_inputs import cache_position_window
from .model_dir import GenerationError, ModelConfig, find_model_files, read_config

__all__ = ["GenerationRun", "Generator"]


@dataclass
class GenerationRun:
    """What one :meth:`Generator.generate` call did.

    Attributes:
        tokens: the new tokens of each row (a row ends with its eos token when it stopped there).
        logits: the last-position logits of every step ``[steps, batch, vocab]`` when asked for, else None.
        step_seconds: wall time of every step, feeds and argmax included; step 0 is the prefill.
        encoder_seconds: the encoder run of this call (0 when none ran).
        stop_reason: ``"eos"`` (every row produced an eos token) or ``"max_new_tokens"``.
    """

    prompt_tokens: int
    tokens: list[list[int]]
    logits: np.ndarray | None = None
    step_seconds: list[float] = field(default_factory=list)
    encoder_seconds: float = 0.0
    stop_reason: str = "max_new_tokens"

    @property
    def prefill_seconds(self) -> float:
        return self.step_seconds[0] if self.step_seconds else 0.0

    @property
    def decode_seconds(self) -> list[float]:
        """Per-token latencies after the prefill."""
        return self.step_seconds[1:]


class Generator:
    """Greedy generation with a stateful decoder converted by ortstate.

    Args:
        session: the decoder's session (either form).
        config: token ids and model type (see :func:`~ortstate.generate.model_dir.read_config`).
        encoder: an encoder-decoder's encoder (its output feeds ``encoder_hidden_states``).
        embedder: a VLM's text embeddings (the decoder takes ``inputs_embeds``).
        rules: how to feed the decoder (default: decided from its inputs and ``config``;
            :meth:`from_dir` also reads the decoder's graph, see :mod:`~ortstate.generate.ir_inputs`).

    Raises:
        GenerationError: the decoder has inputs no rule feeds, or needs an embedder that is missing.
    """

    def __init__(
        self,
        session: StatefulSession,
        config: ModelConfig | None = None,
        *,
        encoder: Encoder | None = None,
        embedder: TextEmbedder | None = None,
        rules: FeedRules | None = None,
    ) -> None:
        self.session = session
        self.config = config or ModelConfig()
        self.rules = rules or FeedRules.for_model(input_specs(session.get_inputs()), self.config)
        if self.rules.uses_embeddings and embedder is None:
            raise GenerationError("the decoder takes inputs_embeds: a text-embeddings model is needed")
        self.encoder = encoder
        self.embedder = embedder
        outputs = session.get_outputs()
        names = [o.name for o in outputs]
        index = names.index("logits") if "logits" in names else 0
        self._logits = names[index]
        last = outputs[index].shape[-1] if outputs[index].shape else None
        self.vocab_size: int | None = last if isinstance(last, int) else None
        self._context: dict[str, np.ndarray] = {}
        self._past = 0
        self.last_run: GenerationRun | None = None

    @classmethod
    def from_dir(cls, model_dir: str | os.PathLike[str], form: str = "auto") -> Generator:
        """Convert the IRs of an optimum-intel export folder (see :mod:`~ortstate.generate.model_dir`)
        to ``form`` (see :class:`~ortstate.StatefulSession`).

        Raises:
            GenerationError, and any conversion error (all ``OrtStateError``).
        """
        files = find_model_files(model_dir)
        config = read_config(files.folder)
        # The graph is read once: for what it tells about feeding it, then converted.
        graph = read_ir(files.decoder)
        window = cache_position_window(graph)
        model = convert_graph(graph, explicit_state=form != CUSTOM_OP)
        del graph  # its weights are in the model now: free them before ONNX Runtime loads it
        session = StatefulSession(model, form=form)
        rules = FeedRules.for_model(input_specs(session.get_inputs()), config, window=window)
        encoder = Encoder.from_ir(files.encoder, form) if files.encoder else None
        embedder = TextEmbedder.from_ir(files.embeddings, form) if files.embeddings else None
        return cls(session, config, encoder=encoder, embedder=embedder, rules=rules)

    def notes(self, stop_at_eos: bool = True) -> list[str]:
        """What generation assumes, or read from the graph, because the config did not say (one clause
        each; empty when ``config.json`` and ``generation_config.json`` said everything)."""
        notes = list(self.rules.notes)
        if stop_at_eos and not self.config.eos_token_ids:
            notes.append("no eos_token_id in generation_config.json or config.json: generating until max_new_tokens")
        return notes

    # -- state --------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop the decoder's variables (the next step re-runs their init); the encoder output stays."""
        self.session.reset_state()
        self._past = 0

    @property
    def past_tokens(self) -> int:
        """How many tokens the decoder's cache holds."""
        return self._past

    @property
    def encoder_output(self) -> np.ndarray | None:
        """The hidden states fed as ``encoder_hidden_states`` (set by :meth:`encode`), or None."""
        return self._context.get("encoder_hidden_states")

    def encode(self, encoder_input: np.ndarray) -> np.ndarray:
        """Run the encoder; its output feeds the decoder until the next ``encode``. Resets the decoder.

        Raises:
            GenerationError: the model has no encoder, or the input does not fit it.
        """
        if self.encoder is None:
            raise GenerationError("the model has no encoder (encoder input given to a decoder-only model)")
        hidden = self.encoder(encoder_input)
        self._context = {"encoder_hidden_states": hidden}
        self.reset()
        return hidden

    # -- generation ---------------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int = 16,
        *,
        stream: Callable[[int], None] | None = None,
        encoder_input: np.ndarray | None = None,
        stop_at_eos: bool = True,
        keep_logits: bool = False,
    ) -> list[int]:
        """Greedy-decode up to ``max_new_tokens`` after ``prompt_ids`` (batch 1), from a fresh state.

        Args:
            stream: called with each new token as soon as it is picked.
            encoder_input: for an encoder-decoder, runs :meth:`encode` first (else the last encoding is used).
            stop_at_eos: stop after an eos token of the config (it is returned).
            keep_logits: keep every step's logits in :attr:`last_run`.

        Raises:
            GenerationError: an empty or out-of-vocabulary prompt, no encoder output, ...
            RunError: the model failed to run (its variables are left as they were).
        """
        if stream is not None and not callable(stream):
            raise GenerationError(f"stream must be a callable taking each new token, got {type(stream).__name__}")
        if not _is_sequence(prompt_ids):
            raise GenerationError(f"the prompt is a list of token ids, got {type(prompt_ids).__name__}")
        if _nested(prompt_ids):
            raise GenerationError(
                "generate() takes one prompt (a list of token ids); for several, use generate_batch()"
            )
        row_stream = None if stream is None else (lambda tokens: stream(tokens[0]))
        rows = self.generate_batch(
            [prompt_ids],
            max_new_tokens,
            stream=row_stream,
            encoder_input=encoder_input,
            stop_at_eos=stop_at_eos,
            keep_logits=keep_logits,
        )
        return rows[0]

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 16,
        *,
        stream: Callable[[list[int]], None] | None = None,
        encoder_input: np.ndarray | None = None,
        stop_at_eos: bool = True,
        keep_logits: bool = False,
    ) -> list[list[int]]:
        """:meth:`generate` for several prompts of one length (no padding); ``stream`` gets a token per row.

        A row that produced an eos token is fed the pad token afterwards and gets no more tokens.
        """
        ids = self._check_prompts(prompts, max_new_tokens)
        if stream is not None and not callable(stream):
            raise GenerationError(f"stream must be a callable taking the new tokens, got {type(stream).__name__}")
        if encoder_input is not None:
            self.encode(encoder_input)
        if self.rules.needs_encoder and "encoder_hidden_states" not in self._context:
            raise GenerationError("an encoder-decoder needs an encoder input (encoder_input=...)")
        hidden = self._context.get("encoder_hidden_states")
        if hidden is not None and hidden.shape[0] != ids.shape[0]:
            raise GenerationError(f"the encoder output has batch {hidden.shape[0]}, the prompts {ids.shape[0]}")
        self.reset()
        eos = np.array(self.config.eos_token_ids if stop_at_eos else (), dtype=np.int64)
        pad = self.config.pad_token_id if self.config.pad_token_id is not None else 0
        run = GenerationRun(
            prompt_tokens=ids.shape[1],
            tokens=[[] for _ in range(ids.shape[0])],
            encoder_seconds=self.encoder.last_seconds if (self.encoder and encoder_input is not None) else 0.0,
        )
        self.last_run = run
        finished = np.zeros(ids.shape[0], dtype=bool)
        kept: list[np.ndarray] = []
        for _ in range(max_new_tokens):
            start = time.perf_counter()
            logits = self._step(ids)
            picked = np.where(finished, pad, np.argmax(logits, axis=-1)).astype(np.int64)
            run.step_seconds.append(time.perf_counter() - start)
            if keep_logits:
                kept.append(np.array(logits, dtype=np.float32))
            for row, token in enumerate(picked.tolist()):
                if not finished[row]:
                    run.tokens[row].append(token)
            if stream is not None:
                stream(picked.tolist())
            finished |= np.isin(picked, eos)
            if finished.all():
                run.stop_reason = "eos"
                break
            ids = picked[:, None]
        run.logits = np.stack(kept) if keep_logits and kept else None
        return run.tokens

    def _step(self, ids: np.ndarray) -> np.ndarray:
        """Run one step on ``ids`` ``[batch, n]``; the last position's logits ``[batch, vocab]``."""
        context: Mapping[str, np.ndarray] = self._context
        if self.embedder is not None and self.rules.uses_embeddings:
            context = {**context, "inputs_embeds": self.embedder(ids)}
        out = self.session.run([self._logits], self.rules.feeds(ids, self._past, context))[0]
        self._past += ids.shape[1]
        return out[:, -1, :] if out.ndim == 3 else out

    def _check_prompts(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> np.ndarray:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
            raise GenerationError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        if not _is_sequence(prompts):
            raise GenerationError(f"prompts must be a list of token id lists, got {type(prompts).__name__}")
        rows: list[list[int]] = []
        for prompt in prompts:
            if not _is_sequence(prompt):
                raise GenerationError(f"a prompt is a list of token ids, got {type(prompt).__name__}")
            row = list(prompt)
            odd = next(
                (t for t in row if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer))), None
            )
            if odd is not None:
                raise GenerationError(f"token ids must be integers, got {odd!r} ({type(odd).__name__})")
            rows.append(row)
        if not rows or not all(rows):
            raise GenerationError("the prompt is empty: give at least one token id")
        if len({len(r) for r in rows}) != 1:
            raise GenerationError(
                f"prompts of one batch must have one length (no padding), got {[len(r) for r in rows]}"
            )
        bad = sorted(
            {int(t) for r in rows for t in r if t < 0 or t > _MAX_ID or (self.vocab_size and t >= self.vocab_size)}
        )
        if bad:
            limit = f"0..{self.vocab_size - 1}" if self.vocab_size is not None else "non-negative"
            raise GenerationError(f"token id(s) {', '.join(map(str, bad))} outside the vocabulary ({limit})")
        return np.array(rows, dtype=np.int64)


_MAX_ID = 2**63 - 1


def _is_sequence(value: object) -> bool:
    """A list, tuple, range or 1-d-or-more array: what a prompt (or a batch of them) may be."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _nested(prompt: object) -> bool:
    """True if ``prompt`` holds sequences (several prompts) rather than token ids."""
    return any(_is_sequence(t) for t in prompt)  # type: ignore[attr-defined]
