"""Groups alike: runs of groups alike up to which host tensor, or part of one, they read and write
(`find_runs`, for `repeat_over_time`), and groups alike up to names, reading alike from where
they lie (`group_structures`, for `same_structure_same_fit`)."""
from __future__ import annotations

from dataclasses import dataclass

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
    """Per group a number, equal for groups whose calls are alike node for node (`_entry`)."""
    numbers: dict[tuple, int] = {}
    found = []
    for i, group in enumerate(groups):
        memo: dict[Node, int] = {}
        entries: list = []
        for call in group.calls:
            _entry(call, set(group.calls), memo, entries)
        try:
            found.append(numbers.setdefault(tuple(entries), len(numbers)))
        except TypeError:   # an attr that does not hash: alike no other
            found.append(-1 - i)
    return found


def _entry(node: Node, mine: set, memo: dict, entries: list) -> int:
    if node in memo:
        return memo[node]
    if (node.op == Op.CALL and node not in mine) or node.op in HOST:   # made before, or a host tensor:
        entry = ("outside", node.shape, node.dtype)                    # alike once passed through DDR
    elif node.is_scalar:
        entry = ("scalar",)
    else:
        arg = placeless(node.arg) if node.op == Op.VIEW else node.arg
        entry = (node.op, node.shape, node.dtype, arg, tuple(_entry(s, mine, memo, entries) for s in node.src))
    memo[node] = len(entries)
    entries.append(entry)
    return memo[node]


def placeless(axes) -> tuple:
    """A view's axes with where they start left out (an index as whether there is one, a slice as its length)."""
    return tuple((a.index is None, a.dynamic, None if a.stop is None else a.stop - a.start, a.length, a.extent,
                  a.step, a.order) for a in axes)


def group_structures(groups: tuple[Group, ...], where: dict[Node, tuple[int, int]]) -> tuple[int, ...]:
    """Per group, a number equal for two groups whose calls are alike node for node and read
    alike: a result of another group by its shape and place (`Made`), a weight, param or state by
    its kind, shape and the last group touching it before (`Memory`), so that two runs of groups
    with equal numbers are the same segment up to names."""
    numbers: dict[tuple, int] = {}
    touched: dict[Node, tuple[int, int]] = {}
    found = []
    for i, group in enumerate(groups):
        entries, memories = _group_entries(i, group, where, touched)
        touched.update((m, (i, k)) for k, m in enumerate(memories))
        try:
            found.append(numbers.setdefault((group.closed_by, entries), len(numbers)))
        except TypeError:   # an attr that does not hash: a structure of its own
            found.append(-1 - i)
    return tuple(found)


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


def _group_entries(i: int, group: Group, where: dict[Node, tuple[int, int]],
                   touched: dict[Node, tuple[int, int]]) -> tuple[tuple, list[Node]]:
    """Group `i`'s nodes as entries naming their sources by position, and the memories it touches."""
    entries: list[tuple] = []
    seen: dict[Node, int] = {}
    memories: list[Node] = []

    def visit(node: Node) -> int:
        if node in seen:
            return seen[node]
        if node.op == Op.CALL and where[node][0] != i:
            j, k = where[node]
            entry = Made(i - j, k, node.shape, node.dtype)
        elif node.op == Op.MEMORY:
            last = touched.get(node)
            entry = Memory(node.arg.kind, node.shape, node.dtype, last and (i - last[0], last[1]))
            memories.append(node)
        else:
            entry = (node.op, node.shape, node.dtype, node.arg, tuple(visit(s) for s in node.src))
        seen[node] = len(entries)
        entries.append(entry)
        return seen[node]

    for call in group.calls:
        visit(call)
    return tuple(entries), memories
