"""The data actions the emulator's hardware model records in `board.trace` while a launch runs:
a Copy between tile buffers, a Fill from or a Drain into a runtime-sequence op's host window, a
core's Invoked call. The model only records them; replay.py and batch.py observe them (replaying a
cycle of launches, batching kernel calls) and the model imports neither.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

WINDOWS_KEPT = 16  # windows kept per op (shim.py): the host buffers and offsets of recent launches


def copy(into: np.ndarray, source: np.ndarray):
    """`into[...] = source` as a callable (a bound __setitem__ runs faster than np.copyto)."""
    return partial(into.__setitem__, Ellipsis, source)


@dataclass(frozen=True, eq=False)
class Copy:
    """Words [at, at + count) of tile buffer `source` into words [start, ...) of tile buffer `into`."""

    into: object
    start: int
    source: object
    at: int
    count: int

    def compile(self):
        return copy(self.into.shaped(self.start, (self.count,)), self.source.shaped(self.at, (self.count,)))


@dataclass(frozen=True, eq=False)
class Fill:
    """Pattern words [moved, moved + count) of runtime-sequence op `op` (its window in the launch)
    into words [start, ...) of tile buffer `into`."""

    op: int
    moved: int
    count: int
    into: object
    start: int

    def bind(self, windows: list, into: np.ndarray | None = None):
        """The copy out of the op's window in a launch, views made once; into the words `into`
        instead of the tile buffer when given (batch.py)."""
        window = windows[self.op]
        piece = window.piece(self.moved, self.count)
        if piece is not None:
            return copy(self.into.shaped(self.start, piece.shape) if into is None else into.reshape(piece.shape), piece)
        host, indices = window.host, window.indices(self.moved, self.count)
        into = self.into.shaped(self.start, (self.count,)) if into is None else into
        return partial(np.take, host, indices, out=into)


@dataclass(frozen=True, eq=False)
class Drain:
    """Words [at, at + count) of tile buffer `source` into pattern words [moved, ...) of op `op`."""

    op: int
    moved: int
    count: int
    source: object
    at: int

    def bind(self, windows: list):
        """The copy into the op's window in a launch, views made once."""
        window = windows[self.op]
        piece = window.piece(self.moved, self.count)
        if piece is not None:
            return copy(piece, self.source.shaped(self.at, piece.shape))
        indices, words = window.indices(self.moved, self.count), self.source.shaped(self.at, (self.count,))
        return partial(np.put, window.host, indices, words)


@dataclass(frozen=True, eq=False)
class Invoked:
    """A core's call of a Function bound to its params' tile `buffers`: `run()`, and its bound
    `steps` (core.Step); `core` names the core (its tile)."""

    run: object
    steps: tuple
    buffers: tuple
    core: str = ""


def in_order(calls: list):
    """One callable running `calls` in order."""
    if len(calls) == 1:
        return calls[0]

    def run():
        for call in calls:
            call()
    return run
