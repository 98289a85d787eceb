"""A model folder's tokenizer: ``tokenizer.json`` through the ``tokenizers`` package, and the chat template.

Neither package is a dependency of ortstate: token ids need no tokenizer. ``tokenizers`` is imported
when a folder's tokenizer is loaded, ``jinja2`` when a chat template is rendered; each missing one
is a :class:`~ortstate.generate.GenerationError` saying what to install.

The chat template is found where transformers looks: ``tokenizer_config.json``'s ``chat_template``
(a string, or a list of named templates: the one named ``default``), else ``chat_template.jinja``,
else ``chat_template.json``. It is rendered as transformers' ``apply_chat_template`` renders it: a
sandboxed Jinja environment with ``trim_blocks``/``lstrip_blocks`` and loop controls, the
``tojson`` filter, ``raise_exception`` and ``strftime_now``, the special tokens of
``tokenizer_config.json`` (``bos_token``, ``eos_token``, ...), ``messages`` and
``add_generation_prompt``; the text it makes is tokenized without adding special tokens again.

Errors met while loading name files by their path (the folder the caller gave); errors met while
rendering a conversation's messages name the template's file by its name in the model folder only
(a server answers them to its clients), and say the template's own words only for the template's
errors (``raise_exception``, an undefined name, the sandbox), not another exception's internals.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import GenerationError
from ..extras import missing_extra
from .token_bound import TokenBound, token_bound

__all__ = ["TOKENIZER_FILE", "Tokenizer"]

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GenerationError(f"{path}: not a readable JSON file ({' '.join(str(exc).split())})") from None


def _find_template(root: Path, config: Mapping[str, Any]) -> tuple[str | None, str]:
    """The chat template and where it came from."""
    source = root / CONFIG_FILE
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if isinstance(template, str) and template:
        return template, str(source)
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8"), str(jinja)
        except (OSError, UnicodeDecodeError) as exc:
            raise GenerationError(f"{jinja}: not readable ({' '.join(str(exc).split())})") from None
    as_json = root / "chat_template.json"
    if as_json.is_file():
        value = _read_json(as_json)
        text = value.get("chat_template") if isinstance(value, Mapping) else None
        if isinstance(text, str) and text:
            return text, str(as_json)
    return None, str(source)


class Tokenizer:
    """Text <-> token ids for one model, and its chat template.

    Args:
        backend: a ``tokenizers.Tokenizer``.
        chat_template: the Jinja chat template, or None.
        special_tokens: ``bos_token``, ``eos_token``, ... as text (what the template may use).
        source: where it was read (named in errors).
    """

    def __init__(
        self,
        backend: Any,
        *,
        chat_template: str | None = None,
        special_tokens: Mapping[str, str] | None = None,
        source: str = "tokenizer",
        template_source: str = "",
    ) -> None:
        self.backend = backend
        self.chat_template = chat_template
        self.special_tokens = dict(special_tokens or {})
        self.source = source
        self.template_source = template_source or source

    @classmethod
    def from_dir(cls, folder: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer of an export folder (``tokenizer.json``, ``tokenizer_config.json``).

        Raises:
            GenerationError: no ``tokenizer.json``, the ``tokenizers`` package missing, or a file unreadable.
        """
        root = Path(folder)
        path = root / TOKENIZER_FILE
        if not path.is_file():
            raise GenerationError(f"{path}: no such file (the model's tokenizer is needed for text)")
        try:
            import tokenizers
        except ImportError:
            raise GenerationError(missing_extra("text", "text") or "text needs the tokenizers package") from None
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception types
            raise GenerationError(f"{path}: not a readable tokenizer ({' '.join(str(exc).split())})") from None
        config_path = root / CONFIG_FILE
        config = _read_json(config_path) if config_path.is_file() else {}
        if not isinstance(config, Mapping):
            raise GenerationError(f"{config_path}: expected a JSON object")
        template, template_source = _find_template(root, config)
        special = {k: t for k in _SPECIAL if (t := _token_text(config.get(k))) is not None}
        return cls(
            backend, chat_template=template, special_tokens=special, source=str(path), template_source=template_source
        )

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        # A batch of one: ``tokenizers`` lets go of the GIL in its batch call only, so a long text
        # tokenized in a thread does not stop the others (a server's event loop).
        return list(self.backend.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids)

    @functools.cached_property
    def bound(self) -> TokenBound | None:
        """The most bytes of text one token stands for, where a bound is known (:mod:`.token_bound`)."""
        from tokenizers.pre_tokenizers import ByteLevel

        return token_bound(json.loads(self.backend.to_str()), frozenset(ByteLevel.alphabet()))

    def fewest_tokens(self, text: str, beyond: int) -> int:
        """The fewest tokens :meth:`encode` can make of ``text`` (special tokens aside), known from
        its length (:mod:`.token_bound`), when that is more than ``beyond``; else 0 (no more known).
        A normalizer's pass over the text is only made when its raw length is over already."""
        bound = self.bound
        if bound is None:
            return 0
        size = len(text.encode("utf-8", "surrogatepass"))
        if size <= beyond * bound.max_bytes:
            return 0
        if bound.normalizes:
            size = len(self.backend.normalizer.normalize_str(text).encode("utf-8", "surrogatepass"))
        fewest = -(-size // bound.max_bytes)
        return fewest if fewest > beyond else 0

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens))

    def token_id(self, token: str) -> int | None:
        """The id of a token written as text (e.g. ``"<|im_end|>"``), or None."""
        found = self.backend.token_to_id(token)
        return None if found is None else int(found)

    def check_chat_template(self) -> None:
        """Raise what :meth:`apply_chat_template` would for a missing or unparseable template, or no
        jinja2 (naming the template's file by its path)."""
        self._template(self.template_source)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The conversation as the model's chat template writes it (``tools``: the functions the
        model may call, OpenAI's ``{"type": "function", "function": {...}}``, given to the template as
        transformers gives them; a template without tools leaves them out).

        Raises:
            GenerationError: no chat template, ``jinja2`` missing, or the template fails (its
                message, for the template's own errors), naming the template's file by its name.
        """
        where = Path(self.template_source).name  # in the model folder: no path of this machine
        template = self._template(where)  # jinja2 is there once this returns
        import jinja2

        try:
            return str(
                template.render(
                    messages=[dict(m) for m in messages],
                    add_generation_prompt=add_generation_prompt,
                    **({"tools": [dict(t) for t in tools]} if tools else {}),
                    **self.special_tokens,
                )
            )
        except jinja2.exceptions.TemplateError as exc:  # raise_exception, an undefined name, the sandbox
            raise GenerationError(f"{where}: chat template failed: {' '.join(str(exc).split())}") from None
        except Exception as exc:  # noqa: BLE001 - a template may raise anything; its text is Python's own
            raise GenerationError(f"{where}: chat template failed on these messages ({type(exc).__name__})") from None

    def _template(self, where: str) -> Any:
        if not self.chat_template:
            raise GenerationError(
                f"{where}: no chat_template (nor chat_template.jinja beside it): the model has no chat format to apply"
            )
        return _compile(self.chat_template, where)


def folder_tokenizer(folder: str | os.PathLike[str] | None, owner: str) -> Tokenizer:
    """The ``tokenizer.json`` of ``owner``'s (a class's name) model folder, for an ``owner`` given none.

    Raises:
        GenerationError: no folder (saying how to give a tokenizer), or the folder's cannot be
            loaded (naming the file missing, the ``tokenizers`` package missing, ...).
    """
    if folder is None:
        raise GenerationError(
            f"no tokenizer: give {owner}(..., tokenizer=...), or load the model with "
            f"{owner}.from_dir(folder) from a folder holding tokenizer.json"
        )
    return Tokenizer.from_dir(folder)


def _compile(source: str, where: str) -> Any:
    try:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise GenerationError(missing_extra("text", "a chat template") or "a chat template needs jinja2") from None

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateError as exc:
        raise GenerationError(f"{where}: chat template does not parse: {' '.join(str(exc).split())}") from None
