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
WINDOWS_KEPT = 16  # windows kept per op (shim.py) and per Fill: the host buffers and offsets of recent launches


@dataclass(frozen=True, eq=False)
class Copy:
    """Words [at, at + count) of tile buffer `source` into words [start, ...) of tile buffer `into`."""

    into: object
    start: int
    source: object
    at: int
    count: int

    def compile(self, board):
        return partial(np.copyto, self.into.shaped(self.start, (self.count,)), self.source.shaped(self.at, (self.count,)))


@dataclass(frozen=True, eq=False)
class Fill:
    """Pattern words [moved, moved + count) of runtime-sequence op `op` (its window in the launch)
    into words [start, ...) of tile buffer `into`."""

    op: int
    moved: int
    count: int
    into: object
    start: int

    def compile(self, board):
        """The copy, with its views made once per window of the op (host buffer and offset)."""
        made: dict = {}
        op, moved, count, into, start = self.op, self.moved, self.count, self.into, self.start

        def act():
            window = board.windows[op]
            views = made.get(window)
            if views is None:
                if len(made) == WINDOWS_KEPT:
                    made.clear()
                piece = window.piece(moved, count)
                views = made[window] = piece, into.shaped(start, (count,) if piece is None else piece.shape)
            piece, destination = views
            destination[...] = window.host[window.indices(moved, count)] if piece is None else piece
        return act


@dataclass(frozen=True, eq=False)
class Drain:
    """Words [at, at + count) of tile buffer `source` into pattern words [moved, ...) of op `op`."""

    op: int
    moved: int
    count: int
    source: object
    at: int

    def compile(self, board):
        op, moved, count, source, at = self.op, self.moved, self.count, self.source, self.at
        return lambda: board.windows[op].write(moved, source, at, count)


MOVES = (Copy, Fill, Drain)


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
            self.cycle = [[act.compile(self.board) if isinstance(act, MOVES) else act for act in t] for t in cycle]
        kept = sum(len(trace) for _, trace in recorded)
        if first is not None or len(recorded) == RECORDED or kept > RECORDED_ACTIONS:
            self.recorded = self.start = None

    def replay(self):
        """Run the data actions of the launch the cycle is at (on this launch's windows)."""
        trace = self.cycle[self.turn]
        self.turn = (self.turn + 1) % len(self.cycle)
        for act in trace:
            act()
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
