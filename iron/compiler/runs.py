"""Groups alike: runs of groups alike up to which host tensor, or part of one, they read and write
(`find_runs`, for `repeat_over_time`), and groups alike up to names, reading alike from where
they lie (`group_structures`, for `same_structure_same_fit`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from iron.compiler.fuse import Group
from iron.ir import MemoryKind, Node, Op

HOST = (Op.INPUT, Op.MEMORY)


@dataclass(frozen=True)
class Run:
    """`count` iterations of `period` groups from group `start`, alike group for group."""

    start: int
    period: int
    count: int

    def groups(self, groups: tuple[Group, ...], k: int) -> tuple[Group, ...]:
        first = self.start + k * self.period
        return groups[first:first + self.period]


class NotRepeated(Exception):
    """Why a run of alike groups does not run over time: its iterations stay spread in space."""


def find_runs(groups: tuple[Group, ...]) -> list[Run]:
    """Runs of at least two iterations of alike groups (and each but its first or last), the most groups first."""
    keys = np.array(_shapes(groups))
    n, runs = len(keys), []
    for period in range(1, n // 2 + 1):
        alike = np.concatenate(([False], keys[:-period] == keys[period:], [False]))
        edges = np.flatnonzero(alike[1:] != alike[:-1])   # each stretch of groups alike the one a period on
        for i, j in zip(edges[::2].tolist(), edges[1::2].tolist()):
            count = (j - i) // period + 1
            if count >= 2:
                runs.append(Run(i, period, count))
            if count >= 3:   # its first or last iteration may be the odd one out (reading the others)
                runs += [Run(i, period, count - 1), Run(i + period, period, count - 1)]
    return sorted(runs, key=lambda r: (-r.count * r.period, r.period, r.start))


def _shapes(groups: tuple[Group, ...]) -> list[int]:
    """Per group a number, equal for groups whose calls are alike node for node; a result made
    before or a host tensor is alike once passed through DDR, a view alike up to where it starts."""
    def outside(mine: set, node: Node):
        if (node.op == Op.CALL and node not in mine) or node.op in HOST:
            return ("outside", node.shape, node.dtype)
        return ("scalar",) if node.is_scalar else None

    return _numbered(_entries(g.calls, partial(outside, set(g.calls)), placeless) for g in groups)


def _numbered(keys) -> list[int]:
    """Per key a number, equal for equal keys; a key holding an attr that does not hash is alike no other."""
    numbers: dict[tuple, int] = {}
    found = []
    for i, key in enumerate(keys):
        try:
            found.append(numbers.setdefault(key, len(numbers)))
        except TypeError:
            found.append(-1 - i)
    return found


def _entries(calls, leaf, view_axes=lambda axes: axes) -> tuple:
    """The calls' nodes as entries naming their sources by position: `leaf(node)` where it gives
    one, else the node's op, shape, dtype, arg (a view's axes by `view_axes`) and sources."""
    entries: list = []
    seen: dict[Node, int] = {}

    def visit(node: Node) -> int:
        if node not in seen:
            entry = leaf(node)
            if entry is None:
                arg = view_axes(node.arg) if node.op == Op.VIEW else node.arg
                entry = (node.op, node.shape, node.dtype, arg, tuple(visit(s) for s in node.src))
            seen[node] = len(entries)
            entries.append(entry)
        return seen[node]

    for call in calls:
        visit(call)
    return tuple(entries)


def placeless(axes) -> tuple:
    """A view's axes with where they start left out (an index as whether there is one, a slice as its length)."""
    return tuple((a.index is None, a.dynamic, None if a.stop is None else a.stop - a.start, a.length, a.extent,
                  a.step, a.order) for a in axes)


def group_structures(groups: tuple[Group, ...], where: dict[Node, tuple[int, int]]) -> tuple[int, ...]:
    """Per group, a number equal for two groups whose calls are alike node for node and read
    alike: a result of another group by its shape and place (`Made`), a weight, param or state by
    its kind, shape and the last group touching it before (`Memory`), so that two runs of groups
    with equal numbers are the same segment up to names."""
    touched: dict[Node, tuple[int, int]] = {}

    def structure(i: int, group: Group) -> tuple:
        memories: list[Node] = []

        def leaf(node: Node):
            if node.op == Op.CALL and where[node][0] != i:
                j, k = where[node]
                return Made(i - j, k, node.shape, node.dtype)
            if node.op == Op.MEMORY:
                last = touched.get(node)
                memories.append(node)
                return Memory(node.arg.kind, node.shape, node.dtype, last and (i - last[0], last[1]))
            return None

        entries = _entries(group.calls, leaf)
        touched.update((m, (i, k)) for k, m in enumerate(memories))
        return group.closed_by, entries

    return tuple(_numbered(structure(i, g) for i, g in enumerate(groups)))


@dataclass(frozen=True)
class Made:
    """An entry for a result another group made: `back` groups before, its `call`th call."""

    back: int
    call: int
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class Memory:
    """An entry for a weight, param or state: `last`, (groups back, which memory) of the last group touching it."""

    kind: MemoryKind
    shape: tuple[int, ...]
    dtype: np.dtype
    last: tuple[int, int] | None
