"""Launch replay: what a launch moves and computes, and in which order, is decided by the
machine's state when it starts (locks, BD and stream positions, where each core is, which task
waits on what), never by data, so once a launch ends in a state a recorded launch started from,
later launches replay that cycle's traces of data actions (Copy, Fill, Drain, a core's call) on
their own host windows instead of resuming the tasks; a mem-tile buffer that only relays host
words within a launch is skipped (its reads become Fills), which no host buffer can observe.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

RECORDED = 64  # launches recorded while looking for a cycle; after that, none
RECORDED_ACTIONS = 1 << 18  # data actions kept in recorded traces; beyond that, none are recorded
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

    def bind(self, window):
        """The copy out of `window` (the op's window in a launch), views made once."""
        piece = window.piece(self.moved, self.count)
        if piece is not None:
            return copy(self.into.shaped(self.start, piece.shape), piece)
        host, indices, into = window.host, window.indices(self.moved, self.count), self.into.shaped(self.start, (self.count,))
        return partial(np.take, host, indices, out=into)


@dataclass(frozen=True, eq=False)
class Drain:
    """Words [at, at + count) of tile buffer `source` into pattern words [moved, ...) of op `op`."""

    op: int
    moved: int
    count: int
    source: object
    at: int

    def bind(self, window):
        """The copy into `window` (the op's window in a launch), views made once."""
        piece = window.piece(self.moved, self.count)
        if piece is not None:
            return copy(piece, self.source.shaped(self.at, piece.shape))
        indices, words = window.indices(self.moved, self.count), self.source.shaped(self.at, (self.count,))
        return partial(np.put, window.host, indices, words)


class Compiled:
    """One launch of the cycle as callables, in order: a Copy's and a core's call fixed, a Fill's
    and a Drain's bound to the window of its op in the launch replayed last, and bound again for
    the ops whose window (host buffer, patched offset) the next launch changes."""

    def __init__(self, trace: list):
        self.acts = [act.compile() if type(act) is Copy else act for act in trace]
        self.moves: dict[int, list] = {}   # op -> [(position, Fill or Drain)]
        for position, act in enumerate(trace):
            if type(act) in (Fill, Drain):
                self.moves.setdefault(act.op, []).append((position, act))
        self.bound: dict[int, object] = dict.fromkeys(self.moves)   # op -> its window bound

    def run(self, windows: list):
        acts, bound = self.acts, self.bound
        for op, moves in self.moves.items():
            window = windows[op]
            if bound[op] is not window:
                bound[op] = window
                for position, move in moves:
                    acts[position] = move.bind(window)
        for act in acts:
            act()


class Replay:
    """The launches recorded so far, then, once found, the cycle of compiled traces they repeat.
    `relays` are the buffers the shortcut may skip (mem-tile ones), `hosts` each op's host buffer."""

    def __init__(self, start: tuple | None, board, relays: set, hosts: list[str]):
        self.board, self.relays, self.hosts = board, relays, hosts
        self.recorded: list | None = []  # (state at start, trace) of launches so far
        self.start = start                # the state the next launch starts from
        self.cycle: list | None = None    # the compiled traces the launches repeat, once found
        self.turn = 0                     # the one the next launch replays
        self.replayed = 0

    @property
    def recording(self) -> bool:
        return self.recorded is not None

    def learn(self, trace: list, end: tuple | None):
        """Keep the launch just run with the state it started from; find the cycle once the
        machine is back in a recorded start state with every state since known."""
        recorded = self.recorded
        recorded.append((self.start, trace))
        self.start = end
        first = next((k for k, (state, _) in enumerate(recorded) if state is not None and state == end), None)
        if first is not None and all(state is not None for state, _ in recorded[first:]):
            cycle = relayed([trace for _, trace in recorded[first:]], self.relays, self.hosts)
            self.cycle = [Compiled(trace) for trace in cycle]
        kept = sum(len(trace) for _, trace in recorded)
        if first is not None or len(recorded) == RECORDED or kept > RECORDED_ACTIONS:
            self.recorded = self.start = None

    def replay(self):
        """Run the data actions of the launch the cycle is at (on this launch's windows)."""
        launch = self.cycle[self.turn]
        self.turn = (self.turn + 1) % len(self.cycle)
        launch.run(self.board.windows)
        self.replayed += 1


def relayed(cycle: list[list], relays: set, hosts: list[str]) -> list[list]:
    """The cycle's traces with every relay buffer that only relays host words skipped (module
    docstring): its Fills dropped, each Copy out of it a Fill of the host words it holds."""
    skipped = {b for b in relays if not any(
        (type(act) is Copy and act.into is b) or (type(act) is Drain and act.source is b) for t in cycle for act in t)}
    while skipped:
        traces = [_skip(trace, skipped, hosts) for trace in cycle]
        failed = {b for t in traces if isinstance(t, set) for b in t}
        if not failed:
            return traces
        skipped -= failed
    return cycle


def _skip(trace: list, skipped: set, hosts: list[str]) -> list | set:
    """The trace without the Fills into `skipped` buffers, or the buffers a Copy read without a
    Fill of this launch holding its words."""
    held: dict = {b: [] for b in skipped}  # per buffer, the Fills whose words it holds
    out, failed = [], set()
    for act in trace:
        kind = type(act)
        if kind is Fill and act.into in held:
            end = act.start + act.count
            held[act.into] = [f for f in held[act.into] if f.start + f.count <= act.start or end <= f.start] + [act]
        elif kind is Copy and act.source in held:
            fill = next((f for f in held[act.source]
                         if f.start <= act.at and act.at + act.count <= f.start + f.count), None)
            if fill is None:
                failed.add(act.source)
                continue
            out.append(Fill(fill.op, fill.moved + act.at - fill.start, act.count, act.into, act.start))
        else:
            if kind is Drain:  # the host words Fills read may change from here on
                for b, fills in held.items():
                    held[b] = [f for f in fills if hosts[f.op] != hosts[act.op]]
            out.append(act)
    return failed or out
