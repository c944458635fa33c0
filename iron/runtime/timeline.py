"""The timeline of the timed emulator: the host's clock, the device's, and the spans every core,
DMA channel and the host record on the cost model's clock (iron/runtime/cost.py), written as a
Chrome trace-event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open. One Timeline
serves the process, as one host drives the NPU: every timed Emulator adds to it (`Clock`), and
the sessions advance its host clock by the launch costs of the calls and restarts they make.
An Emulator is timed once `timed(session)` is asked for it (IRON_TRACE, a `trace=` argument,
`estimate()`), and stays timed; untimed ones run as before. A path a trace cannot be written to
is a TraceError before anything runs (`writable`).
"""
from __future__ import annotations

import atexit
import json
import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from iron.errors import TraceError
from iron.runtime import cost

HOST, DEVICE = "host", "device: runs"


class SpanKind(Enum):
    KERNEL = "kernel"          # a core's Function call
    WAIT = "wait"              # a core blocked on a FIFO, or the host on a run
    DMA = "dma"                # a DMA channel moving words
    RUN = "run"                # a launch on the device, or a run in flight
    RECONFIGURE = "reconfigure"
    HOST = "host"              # the host's launch costs: submit, restart, complete, a whole call


@dataclass(frozen=True)
class Span:
    """Something of `kind` on `track` from `start` for `duration` nanoseconds; `tile` names the
    tile of a kernel call."""

    track: str
    name: str
    start: float
    duration: float
    kind: SpanKind
    tile: str = ""

    @property
    def end(self) -> float:
        return self.start + self.duration


class Timeline:
    """`host`: the host's clock; `device_end`: when the device finished its last run; `spans`."""

    def __init__(self):
        self.host = 0.0
        self.device_end = 0.0
        self.spans: list[Span] = []

    def span(self, track: str, name: str, start: float, duration: float, kind: SpanKind, tile: str = ""):
        self.spans.append(Span(track, name, start, max(duration, 0.0), kind, tile))

    def host_work(self, name: str, duration: float):
        """The host busy for `duration` (a launch's submit, a restart, reading results)."""
        self.span(HOST, name, self.host, duration, SpanKind.HOST)
        self.host += duration

    def host_waits(self, until: float):
        if until > self.host:
            self.span(HOST, "wait", self.host, until - self.host, SpanKind.WAIT)
            self.host = until

    def run_starts(self, submitted: float, gap: float) -> float:
        """When the device starts a run submitted at `submitted`: then, or, when it was queued
        behind a run still executing, `gap` after that run ends."""
        return submitted if submitted >= self.device_end else self.device_end + gap

    def mark(self) -> int:
        return len(self.spans)

    def since(self, mark: int) -> list[Span]:
        return self.spans[mark:]


TIMELINE = Timeline()


class Clock:
    """What one timed Emulator's board holds: the Timeline, the generation's figures, the task
    running now (its track) and each Function's cycles, priced once."""

    __slots__ = ("timeline", "device", "gen", "prefix", "current", "cycles")

    def __init__(self, plan, timeline: Timeline, prefix: str):
        self.timeline, self.device, self.gen = timeline, plan.device, cost.generation(plan.device)
        self.prefix = prefix   # what its tracks and runs are named by
        self.current = None
        self.cycles: dict[str, float] = {}

    def track(self, task_name: str) -> str:
        return f"{self.prefix}: {task_name}"

    def compute(self, board, function, tile: str):
        """The running core (of `tile`) invoked `function`: its time on the core's clock, and its span."""
        cycles = self.cycles.get(function.name)
        if cycles is None:
            cycles = self.cycles[function.name] = cost.function_cycles(self.gen, function)
        duration = cost.ns(self.device, cycles)
        self.timeline.span(self.track(self.current.name), function.name, board.now, duration, SpanKind.KERNEL, tile)
        board.now += duration

    def move(self, board, words: int):
        """The running DMA channel received `words` from its stream."""
        duration = cost.ns(self.device, cost.dma_cycles(self.gen, 4 * words))
        self.timeline.span(self.track(self.current.name), f"{4 * words} bytes", board.now, duration, SpanKind.DMA)
        board.now += duration

    def waited(self, task, since: float, until: float):
        """A core resumed at `until` after blocking from `since`: a FIFO wait on its track."""
        if until > since and task.name.startswith("core "):
            what = task.waiting[1] if task.waiting and task.waiting[1] else "waits"
            self.timeline.span(self.track(task.name), what, since, until - since, SpanKind.WAIT)


@dataclass(frozen=True)
class Estimate:
    """One call's estimated time: `call_ns` as the host sees it (launch costs included),
    `device_ns` on the device, and the `busiest` tile's kernel time as a `share` of that."""

    call_ns: float
    device_ns: float
    busiest: str
    share: float

    def __str__(self) -> str:
        return (f"estimated {self.call_ns / 1000:.1f} us per call ({self.device_ns / 1000:.1f} us on the device; "
                f"busiest tile {self.busiest}, busy {100 * self.share:.0f}% of the run)")


def estimate(spans: list[Span], call_ns: float, runs: int = 1) -> Estimate:
    """The Estimate of one call (of `runs` calls, per call) whose spans these are."""
    device = sum(s.duration for s in spans if s.kind in (SpanKind.RUN, SpanKind.RECONFIGURE) and s.track == DEVICE)
    busy: dict[str, float] = {}
    for s in spans:
        if s.kind is SpanKind.KERNEL:
            busy[s.tile] = busy.get(s.tile, 0.0) + s.duration
    busiest = max(sorted(busy), key=busy.get, default="")
    return Estimate(call_ns, device / runs, busiest, busy.get(busiest, 0.0) / device if device else 0.0)


def write(spans: list[Span], path, what: str = "trace") -> None:
    """Chrome trace-event JSON: one process, one thread per track (host first, then the device's
    runs, then every core and DMA channel by name), complete ("X") events in microseconds;
    TraceError naming `what` (`trace`, `IRON_TRACE`) if `path` cannot be written."""
    tracks = sorted({s.track for s in spans}, key=lambda t: (t != HOST, t != DEVICE, t))
    tid = {track: k + 1 for k, track in enumerate(tracks)}
    events = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "NPU (estimated by iron's cost model)"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid[t], "args": {"name": t}} for t in tracks]
    events += [{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid[t], "args": {"sort_index": tid[t]}}
               for t in tracks]
    for s in sorted(spans, key=lambda s: (tid[s.track], s.start, -s.duration)):
        events.append({"name": s.name, "cat": s.track.split(":")[0], "ph": "X", "pid": 1, "tid": tid[s.track],
                       "ts": s.start / 1000, "dur": s.duration / 1000})
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)
    except OSError as exc:   # it changed since `writable` checked it
        raise TraceError(_unwritable(path, what, exc.strerror)) from None


def writable(path, what: str = "trace"):
    """`path` if a trace can be written there (`what`: `trace` or `IRON_TRACE`), else TraceError
    naming it and the fix; nothing is written."""
    if not isinstance(path, (str, os.PathLike)):
        raise TraceError(f"{what}={path!r} is not a path: give the file to write the timeline to, e.g. 'trace.json'.")
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        why = "it is a directory"
    elif target.exists() or target.is_symlink():
        why = None if os.access(target, os.W_OK) else "it is not writable by you"
    elif not folder.is_dir():
        why = f"its directory {folder} does not exist"
    else:
        why = None if os.access(folder, os.W_OK | os.X_OK) else f"its directory {folder} is not writable by you"
    if why is not None:
        raise TraceError(_unwritable(path, what, why))
    return path


def _unwritable(path, what: str, why: str) -> str:
    return (f"{what}={str(path)!r} cannot be written: {why}. Give the path of a file you can write, "
            "e.g. 'trace.json' in the current directory.")


def traced() -> str | None:
    """IRON_TRACE, checked (`writable`): where the process's whole timeline is written when it exits."""
    path = os.environ.get("IRON_TRACE") or None
    return writable(path, "IRON_TRACE") if path else None


def _write_at_exit():
    """The process's timeline into IRON_TRACE; one line, no traceback, if that fails now."""
    path = os.environ.get("IRON_TRACE")
    if not (path and TIMELINE.spans):
        return
    try:
        write(TIMELINE.spans, writable(path, "IRON_TRACE"), "IRON_TRACE")
    except TraceError as error:
        print(f"iron: TraceError: {error}", file=sys.stderr, flush=True)


atexit.register(_write_at_exit)
