"""How the emulated array advances: every core and DMA channel is a task (a generator) resumed in
turn until it must wait, when it yields `(signal, text)` and is parked on that signal (a lock,
a stream, a channel's queue) until it fires; the Board is what all tasks of one Emulator share.
"""
from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from itertools import count


class Board:
    """`ready` (tasks to resume, in order), `windows` (this launch's window of each runtime-sequence
    op on its host buffer, shim.py) and `trace` (the data actions of the launch being recorded, in
    order, replay.py; None when not recording); when timed, `clock` (iron/runtime/timeline.py)
    and `now`, the clock of the task running, in nanoseconds."""

    __slots__ = ("ready", "windows", "trace", "clock", "now")

    def __init__(self):
        self.ready = deque()
        self.windows: list = []
        self.trace: list | None = None
        self.clock = None
        self.now = 0.0

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

    __slots__ = ("name", "resume", "waiting", "done", "time")

    def __init__(self, name: str, generator, time: float = 0.0):
        self.name, self.resume = name, generator.__next__
        self.waiting, self.done = None, False
        self.time = time   # its own clock, when timed


def run_until_quiet(board: Board):
    """Resume ready tasks, in turn, until none is ready."""
    if board.clock is not None:
        return run_timed(board)
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


def run_timed(board: Board):
    """The same, as a discrete-event simulation: each task has its own clock; the task resumed
    next is the one whose clock is earliest; a task made ready by a signal cannot resume before
    the clock of the task that fired it (a core blocked on a FIFO waits for its producer's
    time); kernel calls and DMA transfers advance the running task's clock (Clock)."""
    ready, clock, waiting, order = board.ready, board.clock, [], count()
    board.now = 0.0   # what was made ready from outside keeps its own clock
    while True:
        while ready:
            task = ready.popleft()
            since, task.time = task.time, max(task.time, board.now)
            if task.waiting is not None:
                clock.waited(task, since, task.time)
            heappush(waiting, (task.time, next(order), task))
        if not waiting:
            return
        task = heappop(waiting)[2]
        board.now, clock.current = task.time, task
        try:
            wait = task.resume()
        except StopIteration:
            task.done = True
            task.time = board.now
            continue
        task.time = board.now
        task.waiting = wait
        wait[0].waiters.append(task)
