"""Text generation over a converted stateful LLM: the KV cache / SSM state lives in the model's variables.

:class:`Generator` feeds the decoder step by step (see :mod:`~ortstate.decoders.feeds`) and picks
tokens greedily, by sampling or by beam search (:mod:`~ortstate.generate.decoding`); beam search
reorders the cache through the model's own ``beam_idx`` input. A generation either starts from a
fresh state or continues the state the last one left (``reset=False``: a chat turn after a turn);
``generate()`` of a prompt that starts with what the state holds reuses it (prefix caching, see
:mod:`.prefix_reuse`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..decoders import (
    FeedRules,
    ModelConfig,
    StateLayout,
    cache_position_window,
    find_model_files,
    input_specs,
    read_config,
    state_layout,
)
from ..errors import GenerationError
from ..ir import read_ir
from ..runtime import StatefulSession
from .decoder_source import converted_decoder, thread_options
from .decoding import GenerationRun, beam_search, sample_or_greedy
from .encoder_decoder import Encoder, TextEmbedder
from .job_plan import plan_job
from .options import SearchOptions, file_defaults
from .prefix_reuse import reused
from .prompts import FirstRow, check_one_prompt
from .stepper import Stepper
from .tokenizer import folder_tokenizer

__all__ = ["Generator"]


class Generator:
    """Generation with a stateful decoder converted by ortstate.

    Args:
        session: the decoder's session (either form).
        config: token ids, model type and search defaults (see :func:`~ortstate.decoders.model_dir.read_config`).
        encoder: an encoder-decoder's encoder (its output feeds ``encoder_hidden_states``).
        embedder: a VLM's text embeddings (the decoder takes ``inputs_embeds``).
        rules: how to feed the decoder (default: decided from its inputs and ``config``;
            :meth:`from_dir` also reads the decoder's graph, see :mod:`~ortstate.decoders.ir_inputs`).
        layout: how the decoder's variables follow rows and tokens (read from its graph by
            :meth:`from_dir`); without it, beam search and padding are refused.
        tokenizer: for stop strings (anything with ``decode(ids, skip_special_tokens=...)``);
            without it, ``folder``'s ``tokenizer.json`` is loaded when first needed.
        folder: the export folder the model came from (:meth:`from_dir` gives it).
        prefix_cache: ``generate()`` of a prompt that starts with what the state holds (the last
            call's prompt and answer) feeds only the rest, cutting the state where the prompt parts
            from it if every variable is an attention cache (:mod:`.prefix_reuse`);
            :attr:`cached_tokens` says how many it held.

    Raises:
        GenerationError: the decoder has inputs no rule feeds, needs an embedder that is missing, or
            the config's search defaults are out of range.
    """

    def __init__(
        self,
        session: StatefulSession,
        config: ModelConfig | None = None,
        *,
        encoder: Encoder | None = None,
        embedder: TextEmbedder | None = None,
        rules: FeedRules | None = None,
        layout: StateLayout | None = None,
        tokenizer: Any = None,
        folder: Path | None = None,
        prefix_cache: bool = True,
    ) -> None:
        self.session = session
        self.config = config or ModelConfig()
        self.rules = rules or FeedRules.for_model(input_specs(session.get_inputs()), self.config)
        if self.rules.uses_embeddings and embedder is None:
            raise GenerationError("the decoder takes inputs_embeds: a text-embeddings model is needed")
        self.encoder = encoder
        self.embedder = embedder
        self.layout = layout or StateLayout()
        self.search_defaults = file_defaults(dict(self.config.search_defaults))
        self.stepper = Stepper(session, self.rules, self.layout, embedder)
        logits = next(o for o in session.get_outputs() if o.name == self.stepper.logits_name)
        last = logits.shape[-1] if logits.shape else None
        self.vocab_size: int | None = last if isinstance(last, int) else None
        self._rows = self.stepper.rows
        self._tokenizer = tokenizer
        self._folder = folder  # where the tokenizer is looked for when none is given
        self.last_run: GenerationRun | None = None
        self.prefix_cache = prefix_cache
        self.cached_tokens = 0  # the last generate()'s prompt tokens the state held already

    @classmethod
    def from_dir(
        cls,
        model_dir: str | os.PathLike[str],
        form: str = "auto",
        *,
        tokenizer: Any = None,
        threads: int | None = None,
        int8_activations: bool = False,
    ) -> Generator:
        """Convert the IRs of an optimum-intel export folder (see :mod:`~ortstate.decoders.model_dir`)
        to ``form`` (see :class:`~ortstate.StatefulSession`). ``threads``: the decoder's ONNX Runtime
        intra-op threads (default: ONNX Runtime's, every physical core); ``int8_activations``: the
        decoder's compressed weights compute on int8-quantized activations (faster on CPUs with
        VNNI; logits move ~1e-2, see ``ortstate.convert``).

        Raises:
            GenerationError, and any conversion error (all ``OrtStateError``).
        """
        files = find_model_files(model_dir)
        config = read_config(files.folder)
        file_defaults(dict(config.search_defaults))  # junk in generation_config.json fails before converting
        graph = read_ir(files.decoder)  # what it tells about feeding it (its weights are not read)
        window = cache_position_window(graph)
        layout = state_layout(graph)
        # The session converts the IR itself: the model is its own to rewrite (no copy), and its
        # large weights stay views of the memory-mapped .bin until ONNX Runtime takes them.
        options = thread_options(threads)
        decoder = converted_decoder(files, graph, True, explicit_state=False) if int8_activations else files.decoder
        session = StatefulSession(decoder, sess_options=options, form=form)
        del graph
        rules = FeedRules.for_model(input_specs(session.get_inputs()), config, window=window)
        encoder = Encoder.from_ir(files.encoder, form) if files.encoder else None
        embedder = TextEmbedder.from_ir(files.embeddings, form) if files.embeddings else None
        return cls(
            session,
            config,
            encoder=encoder,
            embedder=embedder,
            rules=rules,
            layout=layout,
            tokenizer=tokenizer,
            folder=files.folder,
        )

    @property
    def tokenizer(self) -> Any:
        """The tokenizer given, else the folder's ``tokenizer.json`` (loaded on first use).

        Raises:
            GenerationError: there is none (naming the file missing, or saying none was given), or
                the folder's cannot be loaded (the ``tokenizers`` package missing, ...).
        """
        if self._tokenizer is None:
            self._tokenizer = folder_tokenizer(self._folder, "Generator")
        return self._tokenizer

    def notes(self, stop_at_eos: bool = True) -> list[str]:
        """What generation assumes, or read from the graph, because the config did not say (one clause
        each; empty when ``config.json`` and ``generation_config.json`` said everything)."""
        notes = list(self.rules.notes)
        if stop_at_eos and not self.config.eos_token_ids:
            notes.append("no eos_token_id in generation_config.json or config.json: generating until max_new_tokens")
        if self.config.requested:
            notes.append(
                f"generation_config.json asks for {' and '.join(self.config.requested)}: "
                "ortstate decodes greedily unless asked (do_sample=True, num_beams=N)"
            )
        return notes

    # -- state --------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop the decoder's variables (the next step re-runs their init); the encoder output stays."""
        self.stepper.reset()

    @property
    def past_tokens(self) -> int:
        """How many positions the decoder's cache holds (padding included)."""
        return self._rows.past

    def drop_pending(self) -> bool:
        """Forget each row's last generated token, picked but not fed yet: the next
        ``generate(..., reset=False)`` goes on right after the tokens the cache holds (a chat turn
        whose template does not write the eos token that ended the reply). Whether there was one."""
        return self._rows.drop_pending()

    @property
    def history(self) -> list[list[int]]:
        """Each row's tokens since the last reset: prompts and generated tokens, the last one not yet fed."""
        return [list(h) for h in self._rows.history]

    @property
    def encoder_output(self) -> np.ndarray | None:
        """The hidden states fed as ``encoder_hidden_states`` (set by :meth:`encode`), or None."""
        return self.stepper.context.get("encoder_hidden_states")

    def encode(self, encoder_input: np.ndarray) -> np.ndarray:
        """Run the encoder; its output feeds the decoder until the next ``encode``. Resets the decoder.

        Raises:
            GenerationError: the model has no encoder, or the input does not fit it.
        """
        if self.encoder is None:
            raise GenerationError("the model has no encoder (encoder input given to a decoder-only model)")
        hidden = self.encoder(encoder_input)
        self.stepper.context = {"encoder_hidden_states": hidden}
        self.reset()
        return hidden

    def search_options(self, **search: Any) -> SearchOptions:
        """The :class:`SearchOptions` a call with these keywords uses (``generation_config.json`` fills
        the values left out), checked against this model.

        Raises:
            GenerationError: an option out of range or unknown, stop strings without a tokenizer, or a
                search this model cannot run (beam search without ``beam_idx`` reordering).
        """
        options = SearchOptions.build(self.search_defaults, **search)
        if options.stop_strings and self._tokenizer is None:
            try:
                _ = self.tokenizer  # loads it, or says what is missing
            except GenerationError as exc:
                raise GenerationError(
                    f"stop strings need the model's tokenizer ({exc}); stop_token_ids need none"
                ) from None
        if options.beam_search:
            problem = self.beam_problem()
            if problem:
                raise GenerationError(f"beam search cannot run on this model: {problem}")
        return options

    def beam_problem(self) -> str | None:
        """Why beam search cannot run on this decoder, or None."""
        return self.stepper.beam_problem()

    def padding_problem(self) -> str | None:
        """Why rows cannot be padded (prompts of different lengths), or None."""
        return self.stepper.padding_problem()

    # -- generation ---------------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: Sequence[int] | str,
        max_new_tokens: int = 16,
        *,
        stream: Callable[[int], None] | None = None,
        encoder_input: np.ndarray | None = None,
        stop_at_eos: bool = True,
        keep_logits: bool = False,
        reset: bool = True,
        **search: Any,
    ) -> list[int] | str:
        """Generate up to ``max_new_tokens`` after ``prompt_ids`` (one prompt): token ids, or text
        (encoded by :attr:`tokenizer`; the answer is then its text, decoded without special tokens,
        as OpenVINO GenAI's ``LLMPipeline.generate`` gives it).

        Args:
            stream: called with each new token as soon as it is picked; its ``end()``, if it has one,
                when the generation ends (a :class:`~ortstate.generate.TextStreamer` prints text).
            encoder_input: for an encoder-decoder, runs :meth:`encode` first (else the last encoding is used).
            stop_at_eos: stop after an eos token of the config (it is returned).
            keep_logits: keep every step's logits in :attr:`last_run`.
            reset: start from a fresh state (default; with :attr:`prefix_cache`, a prompt that
                starts with what the state holds keeps that); False continues the state the last
                call left: ``prompt_ids`` are the next turn's tokens only (may be empty), fed after
                the last token generated (a text is then encoded without the special tokens).
            **search: :class:`~ortstate.generate.SearchOptions` (``do_sample``, ``temperature``,
                ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``, ``presence_penalty``,
                ``frequency_penalty``, ``logit_bias``, ``min_tokens``, ``num_beams``,
                ``length_penalty``, ``early_stopping``, ``seed``, ``stop_token_ids``,
                ``stop_strings``; ``n`` > 1 only through :meth:`generate_batch`).

        Returns:
            the new tokens (beam search: the best beam's; all in ``last_run.beams``); given text,
            their text.

        Raises:
            GenerationError: a bad prompt or option, no encoder output, text without a tokenizer, ...
            RunError: the model failed to run (its variables are left as they were).
        """
        if stream is not None and not callable(stream):
            raise GenerationError(f"stream must be a callable taking each new token, got {type(stream).__name__}")
        if isinstance(prompt_ids, str):  # text in, text out
            kwargs = {"stream": stream, "encoder_input": encoder_input, "keep_logits": keep_logits}
            return self._generate_text(prompt_ids, max_new_tokens, stop_at_eos, reset, kwargs | search)
        check_one_prompt(prompt_ids, search)
        args = (max_new_tokens, None, None, stop_at_eos, keep_logits, True, search)
        self.cached_tokens, prompt = 0, prompt_ids
        if encoder_input is None and reset and self.prefix_cache:  # (an encoder's new output starts afresh)
            with self.stepper.kept_in_step():
                prompt, reset = reused(self, prompt_ids, lambda: plan_job(self, [prompt_ids], *args))
        row_stream = None if stream is None else FirstRow(stream)
        rows = self.generate_batch(
            [prompt],
            max_new_tokens,
            stream=row_stream,
            encoder_input=encoder_input,
            stop_at_eos=stop_at_eos,
            keep_logits=keep_logits,
            reset=reset,
            **search,
        )
        return rows[0]

    def _generate_text(
        self, text: str, max_new_tokens: int, stop_at_eos: bool, reset: bool, kwargs: dict[str, Any]
    ) -> str:
        """:meth:`generate` of a text: its tokens' answer, decoded."""
        # A turn that goes on (reset=False) is no start of a text: no BOS in the middle of one.
        ids = self.tokenizer.encode(text, add_special_tokens=reset)
        new = self.generate(ids, max_new_tokens, stop_at_eos=stop_at_eos, reset=reset, **kwargs)
        return self.tokenizer.decode(new)

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 16,
        *,
        stream: Callable[[list[int]], None] | None = None,
        encoder_input: np.ndarray | None = None,
        stop_at_eos: bool = True,
        keep_logits: bool = False,
        reset: bool = True,
        **search: Any,
    ) -> list[list[int]]:
        """:meth:`generate` for several prompts; ``stream`` gets a token per row each step.

        Prompts of different lengths are padded on the left and masked, as transformers and optimum
        do (refused for a model whose state would take the pad tokens in: see :meth:`padding_problem`).
        A row that stopped is fed the pad token afterwards, masked, and gets no more tokens. With
        ``n`` > 1 (sampling), each prompt gives ``n`` rows: prompt ``p``'s choice ``i`` is row
        ``p * n + i``, sampled with ``seed + i``; the state then holds those rows (a ``reset=False``
        turn gives one prompt per row). A prompt whose tokens and ``max_new_tokens`` pass the model's
        context (``config.json``'s ``max_position_embeddings``, ``n_positions``, ...) is refused.
        """
        job = plan_job(self, prompts, max_new_tokens, stream, encoder_input, stop_at_eos, keep_logits, reset, search)
        self.last_run = job.run
        try:
            with self.stepper.kept_in_step():
                (beam_search if job.options.beam_search else sample_or_greedy)(self.stepper, job)
        finally:
            end = getattr(stream, "end", None)
            if callable(end):
                end()
        return job.run.tokens
