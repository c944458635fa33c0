"""Lanes: the Batches batch.py cut over lanes (`Batch.lane`) run on worker threads while the
launch's thread goes on, as the array's cores run at once (numpy lets go of the GIL in its loops).
Which acts may overlap is decided once per cycle from the bytes each reads and writes
(batch.accesses): an act waits for a lane (`Join`) only when that lane has been handed an act
it conflicts with since it was last joined, and every lane is joined at the end of a launch, so
each pair of conflicting acts still runs in its recorded order.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from dataclasses import dataclass

from iron.runtime.emulator.batch import Batch, accesses


@dataclass(frozen=True, eq=False)
class Laned:
    """A Batch handed to its lane's thread when the launch reaches it."""

    batch: Batch

    @property
    def ops(self) -> set[int]:
        return self.batch.ops

    def bind(self, windows: list):
        return lane_thread(self.batch.lane).hand(self.batch.bind(windows))


@dataclass(frozen=True, eq=False)
class Join:
    """Until every act handed to these lanes has run (LaneThread.join)."""

    lanes: tuple[int, ...]
    ops = frozenset()

    def bind(self, windows: list):
        threads = [lane_thread(lane) for lane in self.lanes]

        def join():
            for thread in threads:
                thread.join()
        return join


def laned(cycle: list[list], host_words: list) -> list[list]:
    """Each trace with its Batches of lanes other than 0 handed to their threads, and a Join
    before each act that conflicts with one handed over since (module docstring)."""
    return [_laned(trace, host_words) for trace in cycle]


def _laned(trace: list, host_words: list) -> list:
    handed: dict[int, dict] = {}   # lane -> place -> (start, end, writes) of what it was handed since joined
    out = []
    for act in trace:
        lane = act.lane if type(act) is Batch else 0
        if lane == 0 and not handed:   # nothing runs meanwhile
            out.append(act)
            continue
        touched = _touched(act, host_words)
        waits = tuple(k for k, places in handed.items() if k != lane and _conflict(touched, places))
        if waits:
            out.append(Join(waits))
            for k in waits:
                del handed[k]
        if lane == 0:
            out.append(act)
            continue
        out.append(Laned(act))
        places = handed.setdefault(lane, {})
        for place, runs in touched.items():
            places.setdefault(place, []).extend(runs)
    if handed:
        out.append(Join(tuple(handed)))
    return out


def _touched(act, host_words: list) -> dict:
    """place -> (start, end, writes) of the bytes the act reads and writes."""
    found: dict = {}
    for member in act.members if type(act) is Batch else (act,):
        for place, start, end, writes in accesses(member, host_words):
            found.setdefault(place, []).append((start, end, writes))
    return found


def _conflict(touched: dict, places: dict) -> bool:
    """Whether any run of one writes bytes the other reads or writes."""
    return any(s < e2 and s2 < e and (w or w2)
               for place, runs in touched.items() if place in places
               for s, e, w in runs for s2, e2, w2 in places[place])


class LaneThread:
    """A daemon thread running the callables handed to it in order, one at a time; `join()`
    runs on the joining thread those it has not started (on a busy machine the lane's thread may
    not have had a CPU yet), waits for the one it is running, and raises the first error one of
    them raised."""

    def __init__(self):
        self.handed: deque = deque()   # append and popleft are atomic under the GIL
        self.count = threading.Semaphore(0)   # one release per callable handed
        self.turn = threading.Lock()   # held by whichever thread runs the lane's callables
        self.error: BaseException | None = None
        threading.Thread(target=self._serve, daemon=True, name="iron-lane").start()

    def hand(self, run):
        """A callable handing `run` to the thread."""
        handed, count = self.handed, self.count

        def hand():
            handed.append(run)
            count.release()
        return hand

    def join(self):
        error = self.wait()
        if error is not None:
            raise error

    def wait(self) -> BaseException | None:
        """Run or wait for what was handed so far; the first error it raised, no longer kept."""
        with self.turn:
            while self.handed:
                self._next()
        error, self.error = self.error, None
        return error

    def _serve(self):
        while True:
            self.count.acquire()
            with self.turn:
                self._next()

    def _next(self):
        """Run the first callable not yet run, if any (the joining thread may have run it)."""
        try:
            run = self.handed.popleft()
        except IndexError:
            return
        try:
            run()
        except BaseException as error:   # noqa: BLE001 - raised again by join()
            self.error = self.error or error


THREADS: dict[tuple[int, int], LaneThread] = {}   # (process id, lane) -> the process's thread of that lane


def lane_thread(lane: int) -> LaneThread:
    """This process's thread of a lane (a forked child starts its own: it has none of its parent's)."""
    key = (os.getpid(), lane)
    if key not in THREADS:
        THREADS[key] = LaneThread()
    return THREADS[key]


def settle():
    """Wait for every lane's thread of this process to finish what it was handed, dropping its
    errors: a launch failed on the launch's thread before joining them, and that error is the
    one raised (the device is left mid-launch)."""
    for (pid, _), thread in list(THREADS.items()):
        if pid == os.getpid():
            thread.wait()
