"""Error types. Every error ortstate raises derives from :class:`OrtStateError`."""

from __future__ import annotations

__all__ = [
    "ConversionError",
    "IRError",
    "IRFileError",
    "OrtStateError",
    "RunError",
    "StateError",
    "UnsupportedOpsError",
]


class OrtStateError(Exception):
    """Base class of every error ortstate raises."""


class IRError(OrtStateError):
    """The OpenVINO IR is missing, unreadable, malformed or inconsistent."""


class IRFileError(IRError):
    """An IR file (the ``.xml`` or its ``.bin``) is missing or cannot be read: the model itself may be fine."""


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
