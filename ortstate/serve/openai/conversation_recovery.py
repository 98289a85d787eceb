"""A dead server's log of turns made parked conversations (in the state directory of
:mod:`.conversation_files`): a park it wrote (published, even one stopped between its two moves), a
parked conversation it took (given back), or, where its log holds a later turn, that turn's
``.json`` without a cache. A conversation that cannot be recovered (a full disk) fails the
recovery: the log stays, the only place that holds it, for the next start.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from ...errors import OrtStateError, ServeError
from ...output_files import write_text
from ..log import replay, sync_dir
from ..log_format import HEADER, LIVE, Record
from .conversation_log import TURNS_PREFIX, Parked, read_turn
from .conversation_names import ID_PATTERN, cid_of, stem

__all__ = ["recover"]

logger = logging.getLogger("ortstate.serve")


def recover(state_dir: Path, folder: Path) -> list[str]:
    """Make the conversations of a dead server's log ``folder`` parked ones (see the module
    docstring); their ids.

    Raises:
        ServeError: one could not be (its log is to stay); the others are.
        OSError: the directory cannot be read or synced.
    """
    name = folder.name.removeprefix(TURNS_PREFIX)
    latest = replay(folder)
    done, failed = [], []
    for cid in sorted(set(latest) | {cid_of(p.stem) or "" for p in folder.glob("*.json")}):
        try:
            if ID_PATTERN.fullmatch(cid) and _recover_one(state_dir, folder, name, cid, latest.get(cid)):
                done.append(cid)
        except (OSError, OrtStateError) as exc:  # the others are recovered all the same
            logger.warning("ortstate serve: conversation %s cannot be recovered from %s: %s", cid, folder, exc)
            failed.append(f"{cid} ({getattr(exc, 'strerror', None) or exc})")
    if failed:  # the log stays (it alone holds them): recovered at the next start
        raise ServeError(
            f"--state-dir: {len(failed)} conversations of a server that stopped cannot be recovered from its log "
            f"{folder.name}, which is kept: {', '.join(failed[:3])}"
        )
    for left in state_dir.glob(f"*.json.claimed-{glob.escape(name)}"):  # taken, nothing logged since
        cid = cid_of(left.name.removesuffix(f".json.claimed-{name}"))
        if cid is not None:
            os.replace(left, state_dir / f"{stem(cid)}.json")
            done.append(cid)
    sync_dir(state_dir)
    if done:
        logger.info("ortstate serve: %d conversations recovered from the log of a server that stopped", len(done))
    return done


def _recover_one(state_dir: Path, folder: Path, name: str, cid: str, record: bytes | None) -> bool:
    """Files for ``cid``: a park the dead server wrote (in ``folder``) or a parked conversation it
    took (``.claimed-NAME``), if one is as new as the log's last record of it; else, that record
    LIVE, a ``.json`` of its ids without a cache. Whether ``cid`` is parked now."""
    live = record is not None and Record.decode(memoryview(record)[HEADER.size :]).kind == LIVE
    held = read_turn(record) if live and record is not None else Parked([], None, [])
    called = stem(cid)
    meta = state_dir / f"{called}.json"
    private, claimed = folder / f"{called}.json", state_dir / f"{called}.json.claimed-{name}"
    if _turns_of(private) >= held.turns:
        if (folder / f"{called}.npz").exists():  # (not there: the park was stopped between its two moves)
            os.replace(folder / f"{called}.npz", state_dir / f"{called}.npz")
        os.replace(private, meta)
        claimed.unlink(missing_ok=True)
        return True
    if _turns_of(claimed) >= held.turns:
        os.replace(claimed, meta)
        return True
    if not live:
        return False
    write_text(private, json.dumps(asdict(held)))
    (state_dir / f"{called}.npz").unlink(missing_ok=True)  # an older cache than those ids
    claimed.unlink(missing_ok=True)
    os.replace(private, meta)
    return True


def _turns_of(meta: Path) -> int:
    """The turns a ``.json`` says it holds (-1: none there, or unreadable)."""
    try:
        return int(json.loads(meta.read_text()).get("turns", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return -1
