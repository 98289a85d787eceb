"""The runtimes the real-size benchmark puts side by side, each behind ortstate's own ``Generator``.

An :class:`Engine` says how to run one model: OpenVINO with a CPU config, or ortstate with a
conversion (keyword arguments of ``ortstate.convert``) and a session form. Every engine decodes
through :class:`ortstate.generate.Generator` (OpenVINO through :class:`OpenVINOSession`, a thin
adapter with the session methods the generator calls), so both runtimes get the same feeds, the
same greedy loop, and the same per-step clock.

Engines are written ``NAME`` (a built-in) or ``NAME:key=value,...`` (an ortstate engine of one's own:
``form=...`` picks the session form, any other key is passed to ``ortstate.convert``, its value read
as JSON when it parses, else as a string). That is how a faster option of a later ortstate
(say ``--engine ortstate-fast:accuracy_level=4``) is measured without changing this script.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.concurrency import rss_bytes

__all__ = [
    "CONTEXT_ENGINES",
    "DEFAULT_ENGINES",
    "Engine",
    "OpenVINOSession",
    "greedy",
    "load_engine",
    "parse_engine",
    "peak_rss_mib",
    "prompt_ids",
    "rss_mib",
]

OV_EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
SEED = 20240607


@dataclass(frozen=True)
class Engine:
    """One way to run the model.

    Attributes:
        name: how results name it.
        kind: ``"openvino"`` or ``"ortstate"``.
        ov_config: OpenVINO's CPU config (``INFERENCE_NUM_THREADS`` is added).
        convert: keyword arguments of ``ortstate.convert``.
        form: the ``StatefulSession`` form.
        label: a short description for tables.
    """

    name: str
    kind: str
    label: str
    ov_config: dict[str, str] = field(default_factory=dict)
    convert: dict[str, Any] = field(default_factory=dict)
    form: str = "auto"

    @property
    def conversion_key(self) -> str:
        """Engines with equal keys share one converted model."""
        return json.dumps(self.convert, sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "kind", "label", "ov_config", "convert", "form")}


BUILTIN = {
    "openvino-exact": Engine(
        "openvino-exact",
        "openvino",
        "OpenVINO, exact config (f32 inference and KV cache, no dynamic quantization)",
        OV_EXACT,
    ),
    "openvino-default": Engine("openvino-default", "openvino", "OpenVINO, default CPU config"),
    "ortstate": Engine("ortstate", "ortstate", 'ortstate (default conversion, `form="auto"`)'),
}
DEFAULT_ENGINES = ("openvino-exact", "openvino-default", "ortstate")
CONTEXT_ENGINES = ("openvino-exact", "ortstate")  # issue 19 compares with OpenVINO's exact config only
REFERENCE = "openvino-exact"  # the engine tokens and logits are compared with


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_engine(spec: str) -> Engine:
    """A built-in engine name, or ``NAME:key=value,...`` for an ortstate engine with its own options.

    Raises:
        ValueError: an unknown name without options, or an option not written ``key=value``.
    """
    name, _, options = spec.partition(":")
    if not options:
        if name not in BUILTIN:
            raise ValueError(f"unknown engine {name!r} (built-in: {', '.join(BUILTIN)}; or NAME:key=value,...)")
        return BUILTIN[name]
    kwargs: dict[str, Any] = {}
    for item in options.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"engine {name!r}: option {item!r} is not key=value")
        kwargs[key.strip()] = _value(value.strip())
    form = str(kwargs.pop("form", "auto"))
    shown = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return Engine(
        name, "ortstate", f'ortstate ({shown or "default conversion"}, `form="{form}"`)', convert=kwargs, form=form
    )


def rss_mib() -> float:
    """This process's resident set now, in MiB (2^20 bytes, the unit of the issue's table)."""
    return rss_bytes() / 2**20


def peak_rss_mib() -> float:
    """This process's peak resident set so far (``VmHWM``), in MiB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def prompt_ids(length: int, vocab: int, seed: int = SEED) -> list[int]:
    """A fixed pseudo-random prompt (the model's weights are random too: any ids do)."""
    return np.random.default_rng(seed).integers(3, vocab, size=length).tolist()


_ORT_TYPE = {"float32": "float", "float64": "double", "bool": "bool"}


class _Arg:
    """What ``ortstate.decoders.input_specs`` reads of an input: name, ``tensor(type)``, dims."""

    def __init__(self, port: Any) -> None:
        self.name = port.get_any_name()
        dtype = np.dtype(port.get_element_type().to_dtype()).name
        self.type = f"tensor({_ORT_TYPE.get(dtype, dtype)})"
        self.shape = [d.get_length() if d.is_static else None for d in port.get_partial_shape()]


class OpenVINOSession:
    """An OpenVINO stateful ``InferRequest`` with the session methods ``Generator`` calls.

    Inputs are shared with OpenVINO (its fast path); outputs are copied, as ONNX Runtime's are.
    """

    def __init__(self, xml: Path, config: dict[str, Any]) -> None:
        import openvino as ov

        self._compiled = ov.Core().compile_model(str(xml), "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._inputs = [_Arg(p) for p in self._compiled.inputs]
        self._outputs = [_Arg(p) for p in self._compiled.outputs]

    def get_inputs(self) -> list[_Arg]:
        return list(self._inputs)

    def get_outputs(self) -> list[_Arg]:
        return list(self._outputs)

    def reset_state(self) -> None:
        self._request.reset_state()

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        result = self._request.infer(feeds, share_inputs=True, share_outputs=False)
        names = output_names or [o.name for o in self._outputs]
        return [result[name] for name in names]


def load_engine(engine: Engine, ir_dir: Path, onnx_path: Path | None, threads: int) -> Any:
    """A ``Generator`` for ``engine`` (``onnx_path``: its converted model, for ortstate engines)."""
    from ortstate.generate import Generator, read_config

    config = read_config(ir_dir)
    if engine.kind == "openvino":
        return Generator(
            OpenVINOSession(ir_dir / "openvino_model.xml", {**engine.ov_config, "INFERENCE_NUM_THREADS": threads}),
            config,
        )  # type: ignore[arg-type]
    import onnx

    from ortstate import StatefulSession
    from ortstate.timing import session_options

    assert onnx_path is not None
    # ortstate's own session choices for this model need its metadata only: read without the weights
    options = session_options(threads, onnx.load(str(onnx_path), load_external_data=False))
    return Generator(StatefulSession(onnx_path, options, form=engine.form), config)


def greedy(generator: Any, prompt: list[int], steps: int, keep_logits: bool = False) -> dict[str, Any]:
    """Prefill ``prompt`` and decode ``steps`` tokens: the tokens, prefill and per-token seconds."""
    started = time.perf_counter()
    tokens = generator.generate(prompt, steps + 1, stop_at_eos=False, keep_logits=keep_logits)
    run = generator.last_run
    return {
        "tokens": tokens,
        "prefill_s": run.prefill_seconds,
        "decode_s": list(run.decode_seconds),
        "wall_s": time.perf_counter() - started,
        "logits": run.logits,
    }
