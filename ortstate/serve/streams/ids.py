"""A stream's public id: 128 random bits, URL-safe (the capability to use the stream), and the
pattern a parked stream's file name or a request's id must match."""

from __future__ import annotations

import re
import secrets

__all__ = ["ID_PATTERN", "new_id"]

ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{22}")  # secrets.token_urlsafe(16): 128 bits


def new_id() -> str:
    return secrets.token_urlsafe(16)
