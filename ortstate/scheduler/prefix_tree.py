"""Which stream of a pool holds the longest start of a prompt: a radix tree over token ids, as
SGLang's RadixAttention keeps its cache (its nodes split where sequences part, a walk down costs
the prompt's length whatever the number of entries), with lock refs and least-recently-used
eviction.

An *entry* is one stream whose cache's first ``held`` positions hold the first ``held`` of its
``tokens``. Unlike SGLang's pages shared between requests, a pool's streams each own their rows
(a new request gets a *copy* of the rows it matches, :meth:`KvPool.fork
<ortstate.streams.KvPool.fork>`), so an entry is evicted whole (its stream closed, its positions
and its row given back), never a node's part of it; an entry whose tokens start another's, and
which it holds, is *redundant* and goes at once (:meth:`PrefixTree.insert` says which).

*Pinned* entries (lock refs: a request running on the stream, a conversation's stream) are matched
but never evicted; the others are the cache, evicted least recently used first (:meth:`victims`),
and counted (:attr:`cached`, :attr:`cached_positions`) against the pool's rows and KV budget by
:mod:`.requests`. Pure bookkeeping: keys are anything hashable, the caller maps them to streams.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import OrtStateError

__all__ = ["Match", "PrefixTree"]


@dataclass(frozen=True)
class Match:
    """The longest start of a prompt held: ``key``'s stream holds its first ``length`` tokens (None,
    0: none does); ``longest``: how many would be held were every entry's tokens all held (a
    request running whose prompt is still being fed holds more of it each tick)."""

    key: Hashable | None
    length: int
    longest: int


class _Node:
    __slots__ = ("children", "depth", "edge", "ends", "parent", "under")

    def __init__(self, edge: tuple[int, ...], parent: _Node | None, depth: int) -> None:
        self.edge, self.parent, self.depth = edge, parent, depth  # depth: tokens from the root to its end
        self.children: dict[int, _Node] = {}  # by the first token of their edge
        self.under: set[Hashable] = set()  # the entries whose tokens run through its end
        self.ends: set[Hashable] = set()  # those whose tokens end there


class _Entry:
    __slots__ = ("held", "node", "pins", "tokens", "used")

    def __init__(self, tokens: tuple[int, ...], held: int, pins: int, used: int, node: _Node) -> None:
        self.tokens, self.held, self.pins, self.used, self.node = tokens, held, pins, used, node


class PrefixTree:
    """Entries by their token ids (see the module docstring)."""

    def __init__(self) -> None:
        self._root = _Node((), None, 0)
        self._entries: dict[Hashable, _Entry] = {}
        self._clock = itertools.count(1)  # use order: a counter, not the wall clock
        self.cached = 0  # unpinned entries
        self.cached_positions = 0  # and the positions they hold

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def tokens(self, key: Hashable) -> tuple[int, ...]:
        return self._entry(key).tokens

    def held(self, key: Hashable) -> int:
        return self._entry(key).held

    def pinned(self, key: Hashable) -> bool:
        return self._entry(key).pins > 0

    # -- entries ------------------------------------------------------------------------------------
    def insert(
        self, key: Hashable, tokens: Sequence[int], held: int | None = None, pins: int = 0
    ) -> tuple[Hashable, ...]:
        """Add entry ``key``: its stream holds the first ``held`` (default: all) of ``tokens``; ``pins``
        lock refs. Returns the unpinned entries made redundant, removed here (``key`` itself among
        them when a held entry already holds all its tokens, or it holds none).

        Raises:
            OrtStateError: ``key`` is in the tree already, or ``held`` is past its tokens.
        """
        tokens = tuple(tokens)
        held = len(tokens) if held is None else held
        if key in self._entries or not 0 <= held <= len(tokens):
            raise OrtStateError(f"prefix tree: cannot insert {key!r} ({len(tokens)} tokens, {held} held)")
        node = self._root
        node.under.add(key)
        i = 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                child = node.children[tokens[i]] = _Node(tokens[i:], node, len(tokens))
            else:
                common = _common(child.edge, tokens, i)
                if common < len(child.edge):
                    child = self._split(child, common)
            child.under.add(key)
            i, node = child.depth, child
        node.ends.add(key)
        self._entries[key] = _Entry(tokens, held, pins, next(self._clock), node)
        if not pins:
            self.cached, self.cached_positions = self.cached + 1, self.cached_positions + held
        return self._redundant(key)

    def remove(self, key: Hashable) -> None:
        """Forget entry ``key`` (nothing if it is not there); nodes left without entries go, a node
        left with one child and no entry ending at it joins that child."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        if not entry.pins:
            self.cached, self.cached_positions = self.cached - 1, self.cached_positions - entry.held
        node: _Node | None = entry.node
        node.ends.discard(key)
        while node is not None:
            node.under.discard(key)
            parent = node.parent
            if parent is not None and not node.under:
                del parent.children[node.edge[0]]
            elif parent is not None and not node.ends and len(node.children) == 1:
                self._join(node)
            node = parent

    def hold(self, key: Hashable, held: int) -> None:
        """Entry ``key``'s stream holds ``held`` of its tokens now (a running request's prompt fed)."""
        entry = self._entry(key)
        if not 0 <= held <= len(entry.tokens):
            raise OrtStateError(f"prefix tree: {key!r} has {len(entry.tokens)} tokens, cannot hold {held}")
        if not entry.pins:
            self.cached_positions += held - entry.held
        entry.held = held

    def pin(self, key: Hashable) -> None:
        """One lock ref more on ``key``: never evicted while it has one."""
        entry = self._entry(key)
        if not entry.pins:
            self.cached, self.cached_positions = self.cached - 1, self.cached_positions - entry.held
        entry.pins += 1

    def unpin(self, key: Hashable) -> None:
        """One lock ref less on ``key`` (a cache entry again, just used, at none)."""
        entry = self._entry(key)
        if not entry.pins:
            raise OrtStateError(f"prefix tree: {key!r} is not pinned")
        entry.pins -= 1
        if not entry.pins:
            self.cached, self.cached_positions = self.cached + 1, self.cached_positions + entry.held
            entry.used = next(self._clock)

    def victims(self) -> Iterator[Hashable]:
        """The unpinned entries, least recently used first (what eviction takes, in order)."""
        unpinned = [(e.used, key) for key, e in self._entries.items() if not e.pins]
        return (key for _, key in sorted(unpinned, key=lambda pair: pair[0]))

    # -- matching -----------------------------------------------------------------------------------
    def match(self, tokens: Sequence[int]) -> Match:
        """The entry holding the longest start of ``tokens`` (of equals, the most recently used),
        marked used."""
        path = [(self._root, 0)]
        node, i = self._root, 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                break
            common = _common(child.edge, tokens, i)
            i += common
            path.append((child, i))
            if common < len(child.edge):
                break
            node = child
        best: tuple[int, int, Hashable | None] = (0, 0, None)
        for node, depth in reversed(path):
            if best[0] >= depth:  # the nodes above match fewer tokens
                break
            for key in node.under:
                entry = self._entries[key]
                best = max(best, (min(depth, entry.held), entry.used, key), key=lambda b: b[:2])
        length, _, key = best
        if key is not None and length:
            self._entries[key].used = next(self._clock)
        return Match(key if length else None, length, i)

    # -- inside -------------------------------------------------------------------------------------
    def _entry(self, key: Hashable) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            raise OrtStateError(f"prefix tree: no entry {key!r}")
        return entry

    def _redundant(self, key: Hashable) -> tuple[Hashable, ...]:
        """The unpinned entries that hold nothing another holds not: ending on ``key``'s path (held
        whole, as ``key`` holds them), or ``key`` itself when another holds all of it (or it is empty)."""
        entry = self._entries[key]
        if len(entry.tokens) > entry.held:
            return ()
        gone: list[Hashable] = []
        if not entry.pins and (
            not entry.held or any(k != key and self._entries[k].held >= entry.held for k in entry.node.under)
        ):
            gone.append(key)
        else:
            node: _Node | None = entry.node
            while node is not None:
                gone += [k for k in node.ends if k != key and not self._entries[k].pins]
                node = node.parent
        for k in gone:
            self.remove(k)
        return tuple(gone)

    def _split(self, child: _Node, at: int) -> _Node:
        """A node ending ``at`` tokens into ``child``'s edge, between it and its parent."""
        parent = child.parent
        assert parent is not None
        middle = _Node(child.edge[:at], parent, child.depth - len(child.edge) + at)
        middle.under = set(child.under)
        middle.children[child.edge[at]] = child
        parent.children[child.edge[0]] = middle
        child.edge, child.parent = child.edge[at:], middle
        return middle

    def _join(self, node: _Node) -> None:
        """``node`` (no entry ends there, one child) and its child as one node."""
        ((_, child),) = node.children.items()
        parent = node.parent
        assert parent is not None
        child.edge, child.parent = node.edge + child.edge, parent
        parent.children[node.edge[0]] = child


def _common(edge: tuple[int, ...], tokens: Sequence[int], start: int) -> int:
    """How many tokens of ``edge`` ``tokens`` has from ``start`` on."""
    count = min(len(edge), len(tokens) - start)
    if tuple(tokens[start : start + count]) == edge[:count]:
        return count
    return next(k for k in range(count) if edge[k] != tokens[start + k])
