"""The timeline of the timed emulator: the host's clock, the device's, and the spans every core,
DMA channel and the host record on the cost model's clock (iron/plan/cost.py), written as a
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
from iron.plan import cost

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
    tile of a kernel call; a kernel call's `written` (its time with iron's kernels, `duration`
    being vectorised) and `peak` (its MACs' time at the core's peak); a DMA move's `ddr_bytes`
    (read from or written to DDR)."""

    track: str
    name: str
    start: float
    duration: float
    kind: SpanKind
    tile: str = ""
    written: float = 0.0
    peak: float = 0.0
    ddr_bytes: int = 0

    @property
    def end(self) -> float:
        return self.start + self.duration


class Timeline:
    """`host`: the host's clock; `device_end`: when the device finished its last run; `spans`."""

    def __init__(self):
        self.host = 0.0
        self.device_end = 0.0
        self.spans: list[Span] = []

    def span(self, track: str, name: str, start: float, duration: float, kind: SpanKind, tile: str = "", **cost):
        self.spans.append(Span(track, name, start, max(duration, 0.0), kind, tile, **cost))

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
    running now (its track), each Function's cycles (vectorised, as iron writes it, its MACs at
    peak), priced once, and DDR's bandwidth as it is taken (`Ddr`)."""

    __slots__ = ("timeline", "device", "gen", "prefix", "current", "cycles", "ddr")

    def __init__(self, plan, timeline: Timeline, prefix: str):
        self.timeline, self.device, self.gen = timeline, plan.device, cost.generation(plan.device)
        self.prefix = prefix   # what its tracks and runs are named by
        self.current = None
        self.cycles: dict[str, tuple[float, float, float]] = {}
        self.ddr = Ddr(self.gen.ddr_bytes_per_ns)

    def track(self, task_name: str) -> str:
        return f"{self.prefix}: {task_name}"

    def compute(self, board, function, tile: str):
        """The running core (of `tile`) invoked `function`: its time on the core's clock, and its span."""
        cycles = self.cycles.get(function.name)
        if cycles is None:
            cycles = self.cycles[function.name] = (
                cost.function_cycles(self.gen, function), cost.function_cycles(self.gen, function, cost.Kernels.IRONS),
                cost.function_peak_cycles(self.gen, function))
        duration, written, peak = (cost.ns(self.device, c) for c in cycles)
        self.timeline.span(self.track(self.current.name), function.name, board.now, duration, SpanKind.KERNEL, tile,
                           written=written, peak=peak)
        board.now += duration

    def move(self, board, words: int, ddr: bool = False):
        """The running DMA channel received `words` from its stream; from or to DDR (`ddr`), at
        most at what DDR's bandwidth has left while it moves them."""
        nbytes = 4 * words
        duration = cost.ns(self.device, cost.dma_cycles(self.gen, nbytes))
        if ddr:
            duration = self.ddr.take(board.now, nbytes, nbytes / duration) - board.now
        self.timeline.span(self.track(self.current.name), f"{nbytes} bytes", board.now, duration, SpanKind.DMA,
                           ddr_bytes=nbytes if ddr else 0)
        board.now += duration

    def waited(self, task, since: float, until: float):
        """A core resumed at `until` after blocking from `since`: a FIFO wait on its track."""
        if until > since and task.name.startswith("core "):
            what = task.waiting[1] if task.waiting and task.waiting[1] else "waits"
            self.timeline.span(self.track(task.name), what, since, until - since, SpanKind.WAIT)


class Ddr:
    """DDR's bandwidth, shared by every shim channel: per slice of time (`SLICE_NS`), the bytes
    the moves overlapping it took. A move takes what its channel streams in each slice it spans,
    at most what the slice has left, so moves running at once share the bandwidth, and a task
    the simulation runs ahead of the others (its clock later) takes only the slices its moves
    span, not those before them."""

    SLICE_NS = 1000.0
    KEPT = 1 << 16   # slices remembered: the oldest are dropped beyond (runs far behind are rare)

    __slots__ = ("per_slice", "taken", "origin")

    def __init__(self, bytes_per_ns: float):
        self.per_slice = bytes_per_ns * self.SLICE_NS
        self.taken: dict[int, float] = {}
        self.origin = 0.0

    def restart(self, at: float):
        """A launch begins at `at`: its slices counted from then, so its estimate does not depend
        on where the clock stood (the runs before it have ended)."""
        self.taken, self.origin = {}, at

    def take(self, start: float, nbytes: float, rate: float) -> float:
        """When a move of `nbytes` starting at `start`, its channel streaming `rate` bytes per
        ns, has moved them all."""
        now, left = start - self.origin, float(nbytes)   # on the launch's clock
        if left <= 0.0:
            return start
        while True:
            k = int(now // self.SLICE_NS)
            end = (k + 1) * self.SLICE_NS
            free = max(0.0, self.per_slice - self.taken.get(k, 0.0))
            pace = min(rate, free / (end - now))
            moved = min(left, pace * (end - now))
            self.taken[k] = self.taken.get(k, 0.0) + moved
            left -= moved
            if left <= 0.0:
                self._forget()
                return self.origin + now + moved / pace
            now = end

    def _forget(self):
        if len(self.taken) > self.KEPT:
            for k in sorted(self.taken)[: len(self.taken) - self.KEPT // 2]:
                del self.taken[k]


@dataclass(frozen=True)
class Estimate:
    """One call's estimated time with vectorised kernels (the roofline): `call_ns` as the host
    sees it (launch costs included), `device_ns` on the device, and the `busiest` tile's kernel
    time as a `share` of that; `written_ns`, the call's time with iron's kernels as written;
    the call's roofline `bound` and the share of it the design reaches (`reached`)."""

    call_ns: float
    device_ns: float
    busiest: str
    share: float
    written_ns: float
    bound: Bound

    @property
    def reached(self) -> float:
        """The roofline bound over the device's time (vectorised): 1 at the bound."""
        return self.bound.ns / self.device_ns if self.device_ns else 0.0

    def __str__(self) -> str:
        return (f"estimated {self.call_ns / 1000:.1f} us per call {cost.Kernels.VECTORISED.value}, "
                f"{self.written_ns / 1000:.1f} us {cost.Kernels.IRONS.value}; on the device "
                f"{self.device_ns / 1000:.1f} us (busiest tile {self.busiest}, busy {100 * self.share:.0f}% of the run); "
                f"{self.bound}: the design reaches {100 * self.reached:.0f}% of it")


@dataclass(frozen=True)
class Bound:
    """The roofline bound of a call: `ddr_bytes` read and written in DDR at its bandwidth
    (`ddr_ns`) or the MACs at the whole array's peak (`mac_ns`), whichever is slower."""

    ddr_bytes: float
    ddr_ns: float
    mac_ns: float

    @property
    def ns(self) -> float:
        return max(self.ddr_ns, self.mac_ns)

    def __str__(self) -> str:
        return (f"roofline bound {self.ns / 1000:.1f} us ({self.ddr_bytes / 1e6:.3f} MB to and from DDR: "
                f"{self.ddr_ns / 1000:.1f} us, MACs at the array's peak: {self.mac_ns / 1000:.1f} us)")


def estimate(spans: list[Span], call_ns: float, device, runs: int = 1) -> Estimate:
    """The Estimate of one call (of `runs` calls, per call) whose spans these are, on `device`.
    With iron's kernels the device's time is taken as the tile whose kernels grow most taking
    that much longer, its waits unchanged (one run of the timed emulator prices both)."""
    device_ns = sum(s.duration for s in spans if s.kind in (SpanKind.RUN, SpanKind.RECONFIGURE) and s.track == DEVICE)
    busy: dict[str, float] = {}
    grows: dict[str, float] = {}
    for s in spans:
        if s.kind is SpanKind.KERNEL:
            busy[s.tile] = busy.get(s.tile, 0.0) + s.duration
            grows[s.tile] = grows.get(s.tile, 0.0) + s.written - s.duration
    busiest = max(sorted(busy), key=busy.get, default="")
    per_run = device_ns / runs
    written = max(grows.values(), default=0.0) / runs
    gen = cost.generation(device)
    ddr_bytes = sum(s.ddr_bytes for s in spans) / runs
    peak = sum(s.peak for s in spans) / runs / len(device.compute_tiles)
    bound = Bound(ddr_bytes, cost.ddr_ns(gen, ddr_bytes), peak)
    return Estimate(call_ns, per_run, busiest, busy.get(busiest, 0.0) / device_ns if device_ns else 0.0,
                    call_ns + written, bound)


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
    """The process's timeline into IRON_TRACE. If that fails now (the path stopped being writable
    after the calls checked it): one line, no traceback, and exit status 1. An atexit handler
    cannot set the status, so it ends the process itself once the standard streams are flushed;
    it runs after the handlers registered after iron was imported, not those registered before."""
    path = os.environ.get("IRON_TRACE")
    if not (path and TIMELINE.spans):
        return
    try:
        write(TIMELINE.spans, writable(path, "IRON_TRACE"), "IRON_TRACE")
    except TraceError as error:
        print(f"iron: TraceError: {error}", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        os._exit(1)


atexit.register(_write_at_exit)
