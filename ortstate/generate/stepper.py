"""One decoder fed step by step: its session, the rows of its cache, and what its state allows.

:class:`Stepper` turns "these tokens for these rows, continuing these rows of the cache" into one run
of the model (:class:`~ortstate.decoders.feeds.FeedRules` makes the inputs), and keeps what the model
cannot say about its cache (:class:`~ortstate.generate.rows.CacheRows`): the attention mask, which
prompt each row belongs to (to pick its rows of the encoder output), each row's tokens. It also says
what the decoder's variables allow (:class:`~ortstate.decoders.state_layout.StateLayout`): beam
search through ``beam_idx``, left padding, several tokens in one run after the prefill.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from ..decoders import FeedRules, StateLayout
from ..errors import GenerationError, OrtStateError
from ..runtime import StatefulSession
from .encoder_decoder import TextEmbedder
from .rows import CacheRows

__all__ = ["Stepper"]


class Stepper:
    """Runs a decoder one step at a time (see the module docstring).

    Args:
        session: the decoder's session (either form).
        rules: how to feed it.
        layout: how its variables follow rows and tokens (empty: unknown, so no beams, no padding).
        embedder: a VLM's text embeddings, when the decoder takes ``inputs_embeds``.
    """

    def __init__(
        self,
        session: StatefulSession,
        rules: FeedRules,
        layout: StateLayout,
        embedder: TextEmbedder | None = None,
    ) -> None:
        self.session, self.rules, self.layout, self.embedder = session, rules, layout, embedder
        names = [o.name for o in session.get_outputs()]
        self.logits_name = names[names.index("logits") if "logits" in names else 0]
        self.context: dict[str, np.ndarray] = {}  # per prompt: encoder_hidden_states
        self.rows = CacheRows()

    # -- what the decoder's state allows ------------------------------------------------------------------
    def beam_problem(self) -> str | None:
        """Why beam search cannot run on this decoder, or None."""
        if "beam_idx" not in self.rules.names:
            return "the decoder has no beam_idx input to reorder its cache with"
        return self.layout.beam_problem()

    def padding_problem(self) -> str | None:
        """Why rows cannot be padded (prompts of different lengths), or None."""
        problem = self.layout.padding_problem()
        if problem:
            return problem
        if "attention_mask" not in self.rules.names:
            return "the decoder takes no attention_mask to hide pad tokens with"
        if self.rules.mask != "full":
            return "its attention_mask covers the current tokens only (a mamba-style model)"
        return None

    def check_padding(self, chunks: Sequence[Sequence[int]]) -> None:
        """Refuse rows of different lengths where the pad tokens would reach the state.

        Raises:
            GenerationError: naming the lengths and why.
        """
        lengths = sorted({len(c) for c in chunks})
        if len(lengths) > 1:
            problem = self.padding_problem()
            if problem:
                raise GenerationError(
                    f"prompts of different lengths ({', '.join(map(str, lengths))} tokens) need left padding, "
                    f"which this model cannot hide: {problem}; generate them one at a time"
                )

    @property
    def stepwise(self) -> bool:
        """True when the decoder takes one token per run after the prefill: a recurrent state (SSM,
        convolution) whose decode path reads one token, as transformers' mamba-family models do."""
        return bool(self.layout.recurrent) or self.rules.mask == "current" or self.rules.cache_position == "conv_kernel"

    # -- running ---------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Drop the decoder's variables and the rows' bookkeeping."""
        self.session.reset_state()
        self.rows.clear()

    @contextmanager
    def kept_in_step(self) -> Iterator[None]:
        """A block that runs the decoder and keeps the rows' bookkeeping: an exception that is not
        ortstate's own (those are raised where the state and the rows agree) may have landed between
        a run and its bookkeeping, or between two variables of a cut (Ctrl-C's KeyboardInterrupt,
        a MemoryError), so the rows are marked stale: the next generation starts from a fresh state,
        or re-feeds the history, never goes on from a state the rows do not describe."""
        try:
            yield
        except OrtStateError:
            raise
        except BaseException:
            self.rows.stale = True
            raise

    def cut(self, length: int) -> None:
        """Cut one row's cache to its first ``length`` positions: every variable an attention cache
        (``layout.cut_problem()`` is None), sliced along its positions axis."""
        axes = dict(zip(self.layout.caches, self.layout.cache_axes))
        for state in self.session.query_state():
            axis = axes[state.name]
            value = state.state
            index = [slice(None)] * value.ndim
            index[axis] = slice(0, length)
            state.state = np.ascontiguousarray(value[tuple(index)])
        self.rows.cut(length)

    def start(self, chunks: Sequence[Sequence[int]], prompts: np.ndarray) -> None:
        """Reset for a generation that feeds ``chunks`` (one per row; row ``r`` of prompt ``prompts[r]``) first."""
        self.session.reset_state()
        self.rows.start(chunks, prompts)

    def feed(self, ids: np.ndarray, chunk_mask: np.ndarray, beam_idx: np.ndarray | None = None) -> np.ndarray:
        """Run one step: ``ids`` ``[rows, n]`` (``chunk_mask`` 0 where padded) after the cache's rows
        reordered by ``beam_idx``; the last position's logits ``[rows, vocab]``. Nothing is recorded if
        the run fails. A :attr:`stepwise` decoder continuing its state gets the tokens one run each."""
        if self.rows.past > 0 and ids.shape[1] > 1 and self.stepwise:
            for i in range(ids.shape[1]):
                try:
                    logits = self._run(ids[:, i : i + 1], chunk_mask[:, i : i + 1], beam_idx if i == 0 else None)
                except Exception:
                    if i:  # part of the chunk reached the state: continuing must re-feed the history
                        self.rows.stale = True
                    raise
            return logits
        return self._run(ids, chunk_mask, beam_idx)

    def _run(self, ids: np.ndarray, chunk_mask: np.ndarray, beam_idx: np.ndarray | None) -> np.ndarray:
        rows = self.rows
        mask, prompts = rows.advanced(chunk_mask, beam_idx)
        context: Mapping[str, np.ndarray] = {
            k: (v if np.array_equal(prompts, np.arange(len(v))) else v[prompts]) for k, v in self.context.items()
        }
        if self.embedder is not None and self.rules.uses_embeddings:
            context = {**context, "inputs_embeds": self.embedder(ids)}
        feeds = self.rules.feeds(ids, rows.past, context, mask=mask, beam_idx=beam_idx)
        out = self.session.run([self.logits_name], feeds)[0]
        rows.commit(mask, prompts)
        return out[:, -1, :] if out.ndim == 3 else out
