"""Every error type ortstate defines. Everything a library call raises derives from
:class:`OrtStateError`; :class:`UsageError` is the command line's own (a bad option or file)."""

from __future__ import annotations

__all__ = [
    "ConversionError",
    "DecoderError",
    "ExportError",
    "GenerationError",
    "IRError",
    "IRFileError",
    "InputError",
    "OpenVINOUnavailable",
    "OrtStateError",
    "OutputFileError",
    "PassError",
    "PoolFullError",
    "RunError",
    "RuntimeTooOldError",
    "ServeError",
    "StateError",
    "UnsupportedOpsError",
    "UsageError",
]


class OrtStateError(Exception):
    """Base class of every error ortstate raises.

    Attributes:
        field: the argument or option the error is about, by its keyword name (``top_k``,
            ``prompts``), when it is about one, else None: a caller (the command line) names it in
            its own terms (``--top-k``) without reading the message.
    """

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class IRError(OrtStateError):
    """The OpenVINO IR is missing, unreadable, malformed or inconsistent."""


class IRFileError(IRError):
    """An IR file (the ``.xml`` or its ``.bin``) is missing or cannot be read: the model itself may be fine."""


class OutputFileError(OrtStateError):
    """A file ortstate was asked to write (a converted model, its external data) cannot be written."""


class ConversionError(OrtStateError):
    """A layer cannot be converted as written (bad attribute, unsupported combination)."""


class UnsupportedOpsError(ConversionError):
    """The model uses op types/versions ortstate has no translator for.

    Args:
        missing: ``{"Type-version": [layer descriptions]}``, all of the model's unsupported ops.
    """

    def __init__(self, missing: dict[str, list[str]], source: str = "") -> None:
        self.missing = dict(sorted(missing.items()))
        parts = []
        for op, layers in self.missing.items():
            shown = ", ".join(layers[:3]) + (f", ... ({len(layers)} layers)" if len(layers) > 3 else "")
            parts.append(f"{op} ({shown})")
        where = f"{source}: " if source else ""
        super().__init__(f"{where}unsupported operations: " + "; ".join(parts))


class StateError(OrtStateError):
    """A variable (ReadValue/Assign pair or its runtime value) is inconsistent."""


class RunError(OrtStateError):
    """An inference run failed; no variable was changed."""


class RuntimeTooOldError(RunError):
    """The installed onnxruntime predates what the model needs (a contrib op's newer attribute, such
    as GroupQueryAttention's ``causal`` on onnxruntime 1.23, Python 3.10's newest wheel)."""


class PassError(OrtStateError):
    """A graph pass does not apply to the model as laid out (see :mod:`ortstate.passes`); the
    model was not changed."""


class GenerationError(OrtStateError):
    """A model folder or a generation request cannot be served (missing IR, unknown input, bad prompt)."""


class DecoderError(GenerationError):
    """What a decoder's folder, config or inputs say cannot be understood or fed (:mod:`ortstate.decoders`):
    no IR in the folder, a malformed ``config.json``, an input no feeding rule feeds. ``generate``,
    ``bench``, ``verify`` and ``export`` all meet it. It is a :class:`GenerationError` because
    generation met these errors first, under that name: code catching ``GenerationError`` around
    ``Generator.from_dir`` still catches a bad folder."""


class ExportError(OrtStateError):
    """A model folder cannot be laid out for another tool (``ortstate export``): a family whose
    state is not a KV cache, a file missing or malformed."""


class InputError(OrtStateError):
    """Inputs or shapes asked for (``verify``) do not fit the model's Parameters."""


class OpenVINOUnavailable(OrtStateError):
    """``openvino`` (the reference runtime ``verify`` compares with) is not installed."""


class PoolFullError(OrtStateError):
    """A stream pool has no free slot for a stream to open, load or resume into (nothing is evicted)."""


class ServeError(OrtStateError):
    """A stream server refused a message or a stream (``ortstate.serve``): the message says why.

    Attributes:
        code: the WebSocket close code or HTTP status the server answered with (0: an error reply,
            the stream open and unchanged).
    """

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class UsageError(Exception):
    """The command line is wrong or names a missing/unreadable file (the CLI's exit code 2)."""
