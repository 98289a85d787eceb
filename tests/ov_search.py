"""OpenVINO-driven reference searches over the committed LLM folders (``models/llm/*``), for the tests.

Written independently of ``ortstate.generate``: OpenVINO runs the IR, each step fed as optimum-intel
feeds a stateful decoder (``attention_mask`` with zeros where left-padded, ``position_ids`` =
``cumsum(mask) - 1`` with 1 where masked, ``beam_idx`` = the row each new row continues), and the
searches are plain loops over Python lists. Beam search follows transformers' ``_beam_search``
(4.50+): per prompt, the best ``max(2, 1 + stop tokens) * num_beams`` continuations; those among
the top ``num_beams`` that stop join the finished hypotheses (score / length ** length_penalty)
unless no improvement is possible or, with ``early_stopping=True``, ``num_beams`` already finished;
the best ``num_beams`` others run on. It prefills one row per beam (transformers' way), where
ortstate prefills one row per prompt and lets ``beam_idx`` repeat it.

Families with a recurrent state (mamba, the hybrid SSM models) take inputs no attention-only family
has (``cache_position``, a mask over the current tokens only): :class:`OVModel` feeds those through
ortstate's ``FeedRules`` instead, which ``tests/test_llm_models.py`` checks against the inputs their
OpenVINO references were recorded with.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import openvino as ov

LLM = Path(__file__).resolve().parents[1] / "models" / "llm"
_core = ov.Core()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


class OVModel:
    """A folder's decoder (and encoder or text embeddings) compiled by OpenVINO with the reference config."""

    def __init__(self, folder: Path) -> None:
        self.ref = json.loads((folder / "reference.json").read_text())
        config = self.ref["ov_config"]
        self.decoder = _core.compile_model(str(folder / self.ref["decoder_ir"]), "CPU", config)
        self.inputs = {i.get_any_name() for i in self.decoder.inputs}
        self.embed = None
        if self.ref["embeddings_ir"]:
            self.embed = _core.compile_model(str(folder / self.ref["embeddings_ir"]), "CPU", config)
        self.rules = None
        if (
            self.ref["decoding"].get("attention_mask") == "current"
            or "cache_position" in self.inputs
            or ("position_ids" not in self.inputs and not self.ref["encoder"])
        ):
            from ortstate.decoders import FeedRules, cache_position_window, input_specs, read_config
            from ortstate.ir import read_ir

            graph = read_ir(folder / self.ref["decoder_ir"])
            window = cache_position_window(graph)
            self.rules = FeedRules.for_model(input_specs(graph), read_config(folder), window=window)
        self.hidden = None
        if self.ref["encoder"]:
            enc = self.ref["encoder"]
            encoder = _core.compile_model(str(folder / enc["ir"]), "CPU", config)
            value = np.load(folder / enc["input_file"])
            value = value.astype(np.float32) if value.dtype.kind == "f" else value.astype(np.int64)
            feeds = {enc["input_name"]: value, **{name: np.ones(value.shape, np.int64) for name in enc["extra_inputs"]}}
            self.hidden = np.array(encoder(feeds)[0])

    def stream(self, prompts_of_rows: np.ndarray) -> OVStream:
        return OVStream(self, prompts_of_rows)


@cache
def ov_model(family: str) -> OVModel:
    return OVModel(LLM / family)


class OVStream:
    """One generation: a fresh infer request (fresh variables) and the attention mask of its rows."""

    def __init__(self, model: OVModel, prompts_of_rows: np.ndarray) -> None:
        self.model = model
        self.request = model.decoder.create_infer_request()
        self.rows = np.asarray(prompts_of_rows)
        self.mask = np.zeros((len(self.rows), 0), np.int64)

    def step(self, ids: np.ndarray, chunk_mask: np.ndarray, beam_idx: np.ndarray | None = None) -> np.ndarray:
        """Feed ``ids`` ``[rows, n]`` after reordering the rows by ``beam_idx``; the last logits ``[rows, vocab]``."""
        past = self.mask.shape[1]
        if beam_idx is not None:
            self.mask, self.rows = self.mask[beam_idx], self.rows[beam_idx]
        self.mask = np.concatenate([self.mask, chunk_mask.astype(np.int64)], axis=1)
        if self.model.rules is not None:
            feeds = self.model.rules.feeds(ids, past, mask=self.mask, beam_idx=beam_idx)
            return np.array(self.request.infer(feeds)["logits"])[:, -1, :]
        n = ids.shape[1]
        positions = np.cumsum(self.mask, axis=1) - 1
        positions[self.mask == 0] = 1
        feeds = {
            "input_ids": ids.astype(np.int64),
            "attention_mask": self.mask,
            "position_ids": positions[:, -n:],
            "beam_idx": (np.arange(len(ids)) if beam_idx is None else beam_idx).astype(np.int32),
        }
        if self.model.embed is not None:
            feeds["inputs_embeds"] = np.array(self.model.embed({0: ids.astype(np.int64)})[0])
        if self.model.hidden is not None:
            feeds["encoder_hidden_states"] = self.model.hidden[self.rows]
            feeds["encoder_attention_mask"] = np.ones(self.model.hidden[self.rows].shape[:2], np.int64)
        feeds = {k: v for k, v in feeds.items() if k in self.model.inputs}
        logits = np.array(self.request.infer(feeds)["logits"])
        return logits[:, -1, :]


def left_pad(rows: list[list[int]], pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(r) for r in rows)
    ids = np.array([[pad] * (width - len(r)) + r for r in rows], np.int64)
    mask = np.array([[0] * (width - len(r)) + [1] * len(r) for r in rows], np.int64)
    return ids, mask


def ov_greedy(family: str, prompts: list[list[int]], n: int, stops: set[int]) -> tuple[list[list[int]], np.ndarray]:
    """Greedy tokens of every row (left-padded batch; a row that stopped is fed pad tokens, masked) and
    the logits of every step ``[steps, rows, vocab]``."""
    stream = ov_model(family).stream(np.arange(len(prompts)))
    ids, mask = left_pad(prompts)
    tokens: list[list[int]] = [[] for _ in prompts]
    done = np.zeros(len(prompts), bool)
    steps = []
    for _ in range(n):
        logits = stream.step(ids, mask)
        steps.append(logits)
        picked = np.where(done, 0, logits.argmax(-1))
        live = ~done
        for row in np.flatnonzero(live):
            tokens[row].append(int(picked[row]))
            done[row] |= int(picked[row]) in stops
        if done.all():
            break
        ids, mask = picked[:, None], live[:, None].astype(np.int64)
    return tokens, np.stack(steps)


def ov_beam_search(
    family: str,
    prompts: list[list[int]],
    beams: int,
    n: int,
    stops: set[int],
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
) -> list[list[tuple[list[int], float]]]:
    """Each prompt's finished hypotheses (new tokens, score), best first."""
    keep = max(2, 1 + len(stops)) * beams
    stream = ov_model(family).stream(np.repeat(np.arange(len(prompts)), beams))
    ids, mask = left_pad([p for p in prompts for _ in range(beams)])
    logits = stream.step(ids, mask)
    running = [[(0.0 if j == 0 else -1e9, []) for j in range(beams)] for _ in prompts]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in prompts]
    improvable = [True] * len(prompts)
    for step in range(n):
        logp = _log_softmax(logits)
        vocab = logp.shape[1]
        sources, tokens, all_hit = [], [], True
        full_before = [len(f) == beams and early_stopping is True for f in finished]
        for i in range(len(prompts)):
            scores = np.array([s for s, _ in running[i]])[:, None] + logp[i * beams : (i + 1) * beams]
            flat = scores.ravel()
            picks = [(float(flat[c]), int(c) // vocab, int(c) % vocab) for c in np.argsort(-flat, kind="stable")[:keep]]
            hits = [step == n - 1 or v in stops for _, _, v in picks]
            all_hit &= all(hits)
            if improvable[i] and not full_before[i]:
                for rank, ((score, j, v), hit) in enumerate(zip(picks, hits)):
                    if hit and rank < beams:
                        finished[i].append((score / (step + 1) ** length_penalty, running[i][j][1] + [v]))
                finished[i] = sorted(finished[i], key=lambda h: -h[0])[:beams]
            alive = [(score, j, v) for (score, j, v), hit in zip(picks, hits) if not hit][:beams]
            alive += [(-1e18, 0, 0)] * (beams - len(alive))  # no continuation left: dead rows
            running[i] = [(score, running[i][j][1] + [v]) for score, j, v in alive]
            sources += [i * beams + j for _, j, _ in alive]
            tokens += [v for _, _, v in alive]
            length = n if (early_stopping == "never" and length_penalty > 0) else step + 1
            best_possible = running[i][0][0] / length**length_penalty
            if len(finished[i]) == beams and best_possible <= min(s for s, _ in finished[i]):
                improvable[i] = False
        everything_full = all(len(f) == beams for f in finished) and early_stopping is True
        if not any(improvable) or everything_full or all_hit:
            break
        logits = stream.step(np.array(tokens)[:, None], np.ones((len(tokens), 1)), np.array(sources))
    return [[(tokens, score) for score, tokens in f] for f in finished]
