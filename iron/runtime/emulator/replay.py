"""Launch replay: what a launch does is decided by the machine's state when it starts (every lock,
every channel's place in its BD chain and stream, every core's place in its program, which task
waits on which signal), never by data: host buffers and words change which host words a DMA op
touches and what kernels compute, not what moves when. So the machine records its first
launches (at most RECORDED, while their traces hold at most RECORDED_ACTIONS data actions): the
state each starts from and its trace, the data actions in the order they ran (each copy, each
kernel call, each host piece naming its op by index in the launch). Once a launch ends in the
state a recorded launch started from, the launches from there on repeat, and each later launch
replays the next trace of that cycle on its own host windows instead of resuming the tasks: it
moves and computes what they would, in the same order, and it cannot hang, as the launch it
repeats completed. A state is None while a shim channel still holds a task (its actions name an
earlier launch's ops); such launches never start a cycle.
"""
from __future__ import annotations

RECORDED = 64  # launches recorded while looking for a cycle; after that, none
RECORDED_ACTIONS = 1 << 18  # data actions kept in recorded traces; beyond that, none are recorded


class Replay:
    """The launches recorded so far, then, once found, the cycle of traces they repeat."""

    def __init__(self, start: tuple | None):
        self.recorded: list | None = []  # (state at start, trace) of launches so far
        self.start = start                # the state the next launch starts from
        self.cycle: list | None = None    # the traces the launches repeat, once found
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
            self.cycle = [trace for _, trace in recorded[first:]]
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
