"""The open files a server needs: one a connection (:mod:`.guard`'s, proven and unproven) and a few
more, the process's limit raised to it where the hard limit allows."""

from __future__ import annotations

import resource

from ..errors import ServeError
from .guard import MAX_UNPROVEN

__all__ = ["raise_open_files"]

_SPARE_FILES = 256  # besides connections: the model, parked states, ONNX Runtime, Python's own


def raise_open_files(connections: int) -> int:
    """Raise this process's limit of open files (the soft limit, up to the hard one) to what
    ``connections`` proven connections, :data:`MAX_UNPROVEN` unproven ones and a few files need;
    the limit now.

    Raises:
        ServeError: the hard limit is below that.
    """
    needed = connections + MAX_UNPROVEN + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):  # a system cap below the hard limit (macOS's OPEN_MAX)
                pass
        if soft < needed:
            raise ServeError(
                f"the open files limit is {soft} (ulimit -n, its hard limit {hard}): this server needs {needed} "
                f"({connections} connections, {MAX_UNPROVEN} not yet authorised, {_SPARE_FILES} files); "
                "raise the hard limit or lower --max-streams"
            )
    return soft
