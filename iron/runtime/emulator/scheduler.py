"""How the emulated array advances: every core and DMA channel is a task (a generator) resumed in
turn until it must wait, when it yields `(signal, text)` and is parked on that signal (a lock,
a stream, a channel's queue) until it fires; the Board is what all tasks of one Emulator share.
"""
from __future__ import annotations

from collections import deque


class Board:
    """`ready` (tasks to resume, in order), `windows` (this launch's window of each runtime-sequence
    op on its host buffer, shim.py) and `trace` (the data actions of the launch being recorded, in
    order, replay.py; None when not recording)."""

    __slots__ = ("ready", "windows", "trace")

    def __init__(self):
        self.ready = deque()
        self.windows: list = []
        self.trace: list | None = None

    def record(self, act):
        """Record a data action that has just run (replay.py)."""
        if self.trace is not None:
            self.trace.append(act)


class Signal:
    """Tasks parked until something they wait for changes; `fire` makes them ready again.
    `wait` is what a task yields to park on it without a text of its own."""

    __slots__ = ("waiters", "ready", "wait")

    def __init__(self, board: Board):
        self.waiters = []
        self.ready = board.ready
        self.wait = (self, None)

    def fire(self):
        if self.waiters:
            self.ready.extend(self.waiters)
            self.waiters.clear()


class Task:
    """One generator the scheduler resumes; `waiting` is the (signal, text) it last blocked on."""

    __slots__ = ("name", "resume", "waiting", "done")

    def __init__(self, name: str, generator):
        self.name, self.resume = name, generator.__next__
        self.waiting, self.done = None, False


def run_until_quiet(board: Board):
    """Resume ready tasks, in turn, until none is ready."""
    ready = board.ready
    while ready:
        task = ready.popleft()
        try:
            wait = task.resume()
        except StopIteration:
            task.done = True
            continue
        task.waiting = wait
        wait[0].waiters.append(task)
