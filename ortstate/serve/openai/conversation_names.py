"""A conversation's id, and the name its files take in a state directory.

An id (``X-Ortstate-Conversation``) is 1 to 128 of ``A-Z a-z 0-9 . _ ~ -``, not ``.`` or ``..``.
Its files are ``STEM.json`` and ``STEM.npz``, STEM the id itself when it has no capital letter. Ids
that differ only in case would be one file on a case-insensitive filesystem (macOS's, Windows'),
so an id with capitals is written in lower case, then ``^`` (in no id) and the positions of its
capitals (a hex mask): ``Chat-A`` is ``chat-a^21``. Every id has one STEM and every STEM one id, and no STEM holds
a ``/``: with its extension, a STEM names a file of the directory only.
"""

from __future__ import annotations

import re

__all__ = ["ID_PATTERN", "cid_of", "stem"]

# (not "." or "..": URL path segments that clients resolve away, so DELETE could not name them)
ID_PATTERN = re.compile(r"(?!\.\.?$)[A-Za-z0-9._~-]{1,128}")
_STEM = re.compile(r"([a-z0-9._~-]{1,128})(?:\^([0-9a-f]{1,32}))?")


def stem(cid: str) -> str:
    """The name of ``cid``'s files, their extension left out."""
    mask = sum(1 << i for i, c in enumerate(cid) if "A" <= c <= "Z")
    return f"{cid.lower()}^{mask:x}" if mask else cid


def cid_of(name: str) -> str | None:
    """The id whose files are named ``name`` (their extension left out); None: no id's."""
    found = _STEM.fullmatch(name)
    if found is None:
        return None
    low, mask = found.group(1), int(found.group(2) or "0", 16)
    cid = "".join(c.upper() if mask >> i & 1 else c for i, c in enumerate(low))
    return cid if stem(cid) == name else None  # (one name per id: a mask naming no letter is none)
