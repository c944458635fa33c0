"""The Emulator: a Plan loaded on an emulated NPU, and the host's side of it. Loading builds the
array the Plan describes (tiles, FIFOs lowered onto them, the shim DMA, Buffers, cores) and
starts every core and DMA channel once, so core state, FIFO contents and Buffers persist across
launches; runs follow XRT (`run`, `start` with at most the device's 4 in flight, `wait` in
order), and a launch that cannot finish raises DeviceHang naming the blocked cores, the waiting
sequence op and the unfinished DMA ops. The Plan is taken as `check_plan` left it; the Emulator
checks only what a launch alone knows (bounded scratchpad words, patched DMA offsets).
"""
from __future__ import annotations

from collections import deque
from functools import partial

import numpy as np

from iron.errors import ArgumentError, DeviceHang, IndexOutOfRange, PlanError
from iron.plan.plan import HostRole, TileKind
from iron.runtime.emulator.batch import batched
from iron.runtime.emulator.core import CoreProgram, compile_function
from iron.runtime.emulator.kernels import kernel_calls, kernel_mode
from iron.runtime.emulator.lanes import laned, settle
from iron.runtime.emulator.objectfifo import ObjectFifos
from iron.runtime.emulator.replay import Replay
from iron.runtime.emulator.scheduler import Board, Task, run_until_quiet
from iron.runtime.emulator.shim import RuntimeSequence
from iron.runtime.emulator.tile import Tile, allocate
from iron.runtime.timeline import DEVICE, Clock, SpanKind


class Run:
    """A held run: the host buffers its launches use (`buffers`, name -> uint32 words: the
    Emulator's own, replaced by the run's bindings) and whether its last launch completed."""

    def __init__(self, number: int, buffers: dict):
        self.number, self.buffers = number, buffers
        self.completed = False
        self.queued = False
        self.issued = self.submitted = self.ended = 0.0   # on the timeline, when timed: the host
        # began submitting it, the device had it, the device finished it


def _arranged(cycle: list[list], host_words: list) -> list[list]:
    """The cycle's traces with their kernel calls in Batches, those of lanes other than 0 run
    on their lanes' threads."""
    return laned(batched(cycle, host_words), host_words)


class Emulator:
    """A Plan loaded on the emulated NPU. See the module docstring."""

    def __init__(self, plan, kernels: str | None = "numpy", replay: bool = True, batch: bool = True):
        """`kernels`: "numpy" | "native" (None: $IRON_EMULATOR_KERNELS, else "numpy");
        `replay=False` runs every launch task by task (replay.py); `batch=False` replays each
        kernel call on its own (batch.py)."""
        make_call = kernel_calls(kernel_mode(kernels), plan)
        self.plan, self.launches = plan, 0
        self._buffers = {b.name: np.zeros(b.nwords, np.uint32) for b in plan.host_buffers}
        self._words = next((b.name for b in plan.host_buffers if b.role is HostRole.WORDS), None)
        self._bounds = [(w.index, w.bound, w.what or w.name, w.name, w.tensor) for w in plan.words if w.bound is not None]
        self._queue: deque = deque()
        self._runs = 0
        self._broken: str | None = None
        self._board = Board()
        self._build(plan, make_call)
        run_until_quiet(self._board)
        relays = {b for at, tile in self.tiles.items() if at.kind is TileKind.MEM for b in tile.buffers.values()}
        hosts = [getattr(op, "buffer", None) for op in plan.sequence]
        arrange = partial(_arranged, host_words=self.sequence.host_words()) if batch else list
        self._replay = Replay(self._state(), self._board, relays, hosts, arrange) if replay else None

    def _build(self, plan, make_call):
        """The array the Plan describes, with every core and DMA channel ready to start."""
        board = self._board
        self.tiles = {at: Tile(at, plan.device, board) for at in plan.tiles}
        for b in plan.buffers:
            self.tiles[b.tile].buffer(b.name, b.nbytes)
        self.fifos = ObjectFifos(plan, self.tiles, board)
        self.sequence = RuntimeSequence(plan, self.fifos, self.tiles, board)
        functions = {fn.name: (fn, compile_function(fn, make_call)) for fn in plan.functions}
        self.cores = [CoreProgram(c, self.tiles[c.tile], self.fifos, functions, board) for c in plan.cores]
        self._core_tasks = [Task(c.name, c.task()) for c in self.cores]
        board.ready.extend(self._core_tasks)
        board.ready.extend(Task(c.name, c.task()) for c in self.fifos.channels)
        board.ready.extend(Task(name, task) for name, task in self.sequence.tasks())
        self._locks = [lock for tile in self.tiles.values() for lock in tile.locks.values()]
        self._tile_buffers = [b for tile in self.tiles.values() for b in tile.buffers.values()]
        allocate(list(self.tiles.values()))
        self._streams = list(self.fifos.streams.values())
        self._signals = [*self._locks, *(s for stream in self._streams for s in (stream.sent, stream.arrived)),
                         *(c.signal for c in self.sequence.channels.values())]

    def timed(self, timeline, name: str | None = None):
        """Run every later launch on the cost model's clock as a discrete-event simulation
        (scheduler.run_timed), adding its spans to `timeline` under `name` (the plan's by
        default); launches are no longer replayed."""
        if self._board.clock is None:
            self._board.clock = Clock(self.plan, timeline, name or self.plan.name)
            self._replay = None

    @property
    def timeline(self):
        return None if self._board.clock is None else self._board.clock.timeline

    @property
    def timeline_name(self) -> str:
        """What its tracks are named by on the timeline, when timed."""
        return self._board.clock.prefix

    @property
    def replayed(self) -> int:
        """How many launches were replayed (replay.py)."""
        return 0 if self._replay is None else self._replay.replayed

    def clear_tile_memory(self):
        """Zero what the tiles hold, as loading the configuration again does; while launches
        replay, only the buffers the replayed actions touch: no other is read before a launch
        runs task by task again (and that clears them all first)."""
        replaying = self._replay is not None and self._replay.cycle is not None
        for buffer in self._replay.touched if replaying else self._tile_buffers:
            buffer.data.fill(0)

    # ---- host buffers and runs -----------------------------------------------------------------
    def buffer(self, name: str) -> np.ndarray:
        """The Emulator's host buffer `name` (uint32 words), used by every run not binding it."""
        if name not in self._buffers:
            raise ArgumentError(
                f"Plan '{self.plan.name}' has no host buffer '{name}'; its host buffers are "
                f"{', '.join(self._buffers)}. Use one of those names."
            )
        return self._buffers[name]

    def run(self, **bindings) -> Run:
        """A held run; each binding `name=array` replaces host buffer `name` for this run."""
        buffers = dict(self._buffers)
        for name, array in bindings.items():
            buffers[name] = self._bound(name, array)
        self._runs += 1
        return Run(self._runs, buffers)

    def _bound(self, name: str, array) -> np.ndarray:
        nwords = self.buffer(name).size
        ok = isinstance(array, np.ndarray) and array.dtype.itemsize == 4 and array.ndim == 1
        if not (ok and array.size == nwords and array.flags.c_contiguous and array.flags.writeable):
            shown = f"{array.dtype} of shape {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
            raise ArgumentError(
                f"run({name}=...) of plan '{self.plan.name}' got {shown}, but host buffer '{name}' "
                f"holds {nwords} words. Bind a writable, contiguous 1-D uint32 array of {nwords} words."
            )
        # the array itself when it is already words: windows (shim.py) are kept by the host array's id
        return array if array.dtype == np.uint32 else array.view(np.uint32)

    def start(self, run: Run, issued: float | None = None):
        """Queue a launch of `run`; with 4 (the device's max_in_flight) launches queued, the
        oldest executes first. When timed, the host began submitting it at `issued`."""
        if self._broken is not None:
            raise PlanError(self._broken)
        if run.queued:
            raise PlanError(
                f"bad command state: run {run.number} of plan '{self.plan.name}' was started again "
                "before its launch completed. Wait for the run before starting it again."
            )
        if len(self._queue) >= self.plan.device.max_in_flight:
            self._launch(self._queue[0])
        run.completed, run.queued = False, True
        if self._board.clock is not None:
            run.submitted = self._board.clock.timeline.host
            run.issued = run.submitted if issued is None else issued
        self._queue.append(run)

    def wait(self, run: Run):
        """Execute the queued launches in order up to `run` (nothing if it is not queued)."""
        while run.queued:
            self._launch(self._queue[0])
        if self._board.clock is not None:
            timeline = self._board.clock.timeline
            timeline.host_waits(run.ended)
            # in flight, as XRT counts it: from the host starting to submit it until its wait returns
            timeline.span(f"{self._board.clock.prefix}: run {run.number} in flight", "in flight", run.issued,
                          timeline.host - run.issued, SpanKind.RUN)

    # ---- one launch ----------------------------------------------------------------------------
    def _launch(self, run: Run):
        if self._broken is not None:
            raise PlanError(self._broken)
        words = run.buffers[self._words] if self._words is not None else None
        try:
            self._check_words(words)
            self._board.windows = self.sequence.windows(run.buffers, words)
        finally:
            self._queue.popleft()
            run.queued = False
        try:
            if self._replay is not None and self._replay.cycle is not None:
                self._replay.replay()
            else:
                self._execute(run)
        except DeviceHang:
            self._fail(f"plan '{self.plan.name}' hung in an earlier launch; its cores cannot continue. "
                       "Load the plan again (a new Emulator) after fixing it.")
            raise
        except BaseException as exc:   # Ctrl-C in a kernel leaves the launch as unfinished as a failure
            settle()
            self._fail(f"an earlier launch of plan '{self.plan.name}' failed ({exc}); the device is "
                       "left mid-launch. Load the plan again (a new Emulator).")
            raise
        self.launches += 1
        run.completed = True

    def _execute(self, run: Run):
        """Run the launch task by task; while looking for a cycle, record it."""
        board, replay = self._board, self._replay
        recording = replay is not None and replay.recording
        sequence = Task("sequence", self.sequence.task(board.windows), self._begins(run))
        if board.clock is not None:
            board.clock.ddr.restart(sequence.time)
        board.ready.append(sequence)
        board.trace = [] if recording else None
        try:
            run_until_quiet(board)
        finally:
            trace, board.trace = board.trace, None
        if not sequence.done:
            raise self._hang(sequence, run)
        if board.clock is not None:
            self._ends(run, sequence.time)
        if recording:
            replay.learn(trace, self._state())

    def _begins(self, run: Run) -> float:
        """When the launch starts on the timeline: when it was submitted, or after the run
        before it with the device's gap between queued runs (docs/platform.md section 11)."""
        clock = self._board.clock
        if clock is None:
            return 0.0
        return clock.timeline.run_starts(run.submitted, clock.gen.queued_run_ns)

    def _ends(self, run: Run, end: float):
        timeline, start = self._board.clock.timeline, self._begins(run)
        timeline.span(DEVICE, f"{self._board.clock.prefix} run {run.number}", start, end - start, SpanKind.RUN)
        timeline.device_end = run.ended = end

    def _state(self) -> tuple | None:
        """Everything that decides what the next launch does, for a quiet machine: every lock,
        every tile channel's BD and stream, every core's place in its program, every shim
        channel's waits, and which task waits on which signal, in order (replay.py). None while
        a shim channel still holds a task."""
        if self.sequence.busy():
            return None
        return (
            *(lock.value for lock in self._locks),
            *(channel.state() for channel in self.fifos.channels),
            *(stream.state() for stream in self._streams),
            *(core.state() for core in self.cores),
            *(channel.issued for channel in self.sequence.channels.values()),
            *(tuple(signal.waiters) for signal in self._signals),
        )

    def _fail(self, why: str):
        self._broken = why
        for queued in self._queue:
            queued.queued = False
        self._queue.clear()

    def _check_words(self, words):
        if not self._bounds:
            return
        values = words.view(np.int32)
        for index, (lo, hi), what, name, tensor in self._bounds:
            value = int(values[index])
            if not lo <= value < hi:
                raise IndexOutOfRange.at(what, name, value, lo, hi, tensor)

    def _hang(self, sequence: Task, run: Run) -> DeviceHang:
        lines = [
            f"Plan '{self.plan.name}' hangs in launch {self.launches + 1} (run {run.number}): nothing can "
            f"move, and the runtime sequence waits at {sequence.waiting[1]}.",
            *(f"  {core.name} {core.waiting[1]}" for core in self._core_tasks),
            *(f"  dma {text}" for text in self.sequence.blocked()),
            "Per launch, what the runtime sequence moves into and out of each FIFO must equal what the "
            "cores acquire (objects x object size): make the DMA sizes and the acquire counts agree.",
        ]
        return DeviceHang("\n".join(lines))
