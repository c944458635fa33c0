"""Finding repetition in a design's fused groups (the rule `repeat_over_time`, repeat.py): runs of
groups alike group for group, their calls the same kernels over the same shapes and views up to
which host tensor, or which part of one, they read and write."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from iron.compiler.fuse import Group
from iron.ir import Node, Op

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
    """Runs of at least two iterations of alike groups (`_shapes`), and each such run but its
    first or its last iteration, the most groups covered first, then the shortest period (the
    most iterations), then the earliest."""
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
    """Per group a number, equal for groups whose calls are alike node for node up to which host
    tensor, or which part of one, they read and write (`_entry`)."""
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
    """A view's axes with where they start left out: views alike but for where they lie."""
    return tuple(replace(a, index=None if a.index is None else 0, start=0,
                         stop=None if a.stop is None else a.stop - a.start) for a in axes)
