"""The Emulator: loads a Plan as the NPU would and runs its launches.

Loading checks the plan (iron.compiler.invariants.check_plan, unless check=False; always the
full-ELF rule and every tile's memory as the allocator bounds it), allocates one uint32 word
array per host buffer, compiles the FIFOs, links, sequence and core programs (fifo.py, dma.py,
core.py) and starts every task once: cores, tile DMAs, links and shim channels are generators
that live as long as the Emulator, so core state, FIFO contents and Buffers persist across
launches.

Runs follow XRT: `run(**bindings)` makes a held run (a binding replaces a host buffer for that
run, like set_arg: e.g. the scratchpad `words` and the Emit's `feedback` of a full-ELF run);
`start` queues a launch (at most the device's 4 started and not executed: a 5th start executes
the oldest); `wait` executes the queued launches in order up to that run. A launch checks the
run's bounded scratchpad words, resolves its DMA ops, then runs the runtime sequence while the
scheduler resumes, in turn, every task that can move (a blocked task waits on the signal of what
it needs), until the sequence has finished and nothing else can move. If nothing can move before
the sequence finishes, it raises DeviceHang naming the blocked cores, the waiting sequence op and
the unfinished DMA ops.

Replay. What a launch does is decided by the machine's state when it starts (every ring's locks,
positions and objects, where each core is in its program, each shim channel's partial object,
which task waits on which signal, in order), never by data: words and host buffers change which
host words a DMA op touches and what kernels compute, not what moves when. So the machine
records its first launches (up to RECORDED, while their traces hold at most RECORDED_ACTIONS
actions): each one's state at start and its trace, the data actions in the order they ran (each
copy into or out of an object, each kernel call, each DMA piece naming its op by index). Once a
launch ends in the state a recorded launch started from (and no transfer was carried from one
launch to the next), the launches from there on repeat, and every later launch replays the next
trace of that cycle on its own DMA windows (its run's host buffers and patched offsets, resolved
and checked as before) instead of resuming the tasks: it moves and computes what they would,
object by object in the same order, and it cannot hang, as the launch it repeats completed. The
tasks stay where that launch left them, which is where each replayed launch leaves the machine.
`replayed` counts the launches replayed; `replay=False` runs every launch task by task.

It does not write inputs or read outputs (the host side does, through `buffer` and
`Run.buffers`), compute the host's scratchpad words, or read a traced Program.
"""
from __future__ import annotations

from collections import Counter, deque

import numpy as np

from iron.compiler.allocate import check_tile_memory
from iron.compiler.invariants import check_plan
from iron.compiler.plan import HostRole
from iron.errors import ArgumentError, DeviceHang, IndexOutOfRange, PlanError
from iron.runtime.emulator.core import CoreProgram, compile_function
from iron.runtime.emulator.dma import Sequence
from iron.runtime.emulator.fifo import Board, FifoEnds, fifo_movers, link_task
from iron.runtime.emulator.kernels import kernel_calls, kernel_mode

RECORDED = 64  # launches recorded while looking for a cycle; after that, none
RECORDED_ACTIONS = 1 << 18  # data actions kept in recorded traces; beyond that, none are recorded


class Task:
    """One generator the scheduler resumes; `waiting` is the (signal, text) it last blocked on."""

    __slots__ = ("name", "resume", "waiting", "done")

    def __init__(self, name: str, generator):
        self.name, self.resume = name, generator.__next__
        self.waiting, self.done = None, False


class Run:
    """A held run: the host buffers its launches use (`buffers`, name -> uint32 words: the
    Emulator's own, replaced by the run's bindings) and whether its last launch completed."""

    def __init__(self, number: int, buffers: dict):
        self.number, self.buffers = number, buffers
        self.completed = False
        self.queued = False


class Emulator:
    """A Plan loaded on the emulated NPU. See the module docstring."""

    def __init__(self, plan, kernels: str | None = "numpy", check: bool = True, replay: bool = True):
        """`kernels`: "numpy" | "native" (None: $IRON_EMULATOR_KERNELS, else "numpy");
        `check=False` skips check_plan, to run a plan it refuses (e.g. to see where it hangs);
        `replay=False` runs every launch task by task (see the module docstring)."""
        mode = kernel_mode(kernels)
        if check:
            check_plan(plan)
        _check_full_elf(plan)
        check_tile_memory(plan)
        self.plan, self.launches, self.replayed = plan, 0, 0
        self._buffers = {b.name: np.zeros(b.nwords, np.uint32) for b in plan.host_buffers}
        self._words = _words_buffer(plan)
        self._bounds = [(w.index, w.bound, w.what or w.name, w.name, w.tensor) for w in plan.words if w.bound is not None]
        self._board = Board()
        self._queue: deque = deque()
        self._runs = 0
        self._broken: str | None = None
        self._load(plan, kernel_calls(mode, plan))
        self._run_until_quiet()
        self._recorded: list | None = [] if replay else None  # (state at start, trace) of launches so far
        self._start = self._state() if replay else None        # the state the next launch starts from
        self._cycle: list | None = None                        # the traces the launches repeat, once found
        self._turn = 0                                         # the one the next launch replays

    def _load(self, plan, make_call):
        board = self._board
        ends = {f.name: FifoEnds(f, board) for f in plan.fifos}
        tasks = [(f"tile dma @{name}", mover) for name, e in ends.items() for mover in fifo_movers(e, board)]
        fifos = {f.name: f for f in plan.fifos}
        linked = Counter(name for link in plan.links for name in (*link.sources, *link.destinations))
        for link in plan.links:
            exclusive = all(linked[name] == 1 for name in (*link.sources, *link.destinations))
            tasks.append((f"link on {link.tile.name}", link_task(link, fifos, ends, board, exclusive)))
        self.sequence = Sequence(plan, ends, board)
        tasks += self.sequence.tasks
        functions = {fn.name: (fn, compile_function(fn, make_call)) for fn in plan.functions}
        buffers = {b.name: (b.tile, np.zeros(b.nbytes, np.uint8)) for b in plan.buffers}
        self._programs = [CoreProgram(core, ends, functions, buffers, board) for core in plan.cores]
        self._cores = [Task(c.name, c.task()) for c in self._programs]
        board.ready.extend(self._cores)
        board.ready.extend(Task(name, generator) for name, generator in tasks)
        self._rings = [ring for e in ends.values() for ring in e.rings()]
        self._signals = [r.signal for r in self._rings] + [c.signal for c in self.sequence.channels.values()]

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
        return array.view(np.uint32)

    def start(self, run: Run):
        """Queue a launch of `run`; with 4 (the device's max_in_flight) launches queued, the
        oldest executes first."""
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
        self._queue.append(run)

    def wait(self, run: Run):
        """Execute the queued launches in order up to `run` (nothing if it is not queued)."""
        while run.queued:
            self._launch(self._queue[0])

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
            if self._cycle is not None:
                self._replay()
            else:
                self._execute(run)
        except DeviceHang:
            self._fail(f"plan '{self.plan.name}' hung in an earlier launch; its cores cannot continue. "
                       "Load the plan again (a new Emulator) after fixing it.")
            raise
        except Exception as exc:
            self._fail(f"an earlier launch of plan '{self.plan.name}' failed ({exc}); the device is "
                       "left mid-launch. Load the plan again (a new Emulator).")
            raise
        self.launches += 1
        run.completed = True

    def _execute(self, run: Run):
        """Run the launch task by task; while looking for a cycle, record it."""
        board, recording = self._board, self._recorded is not None
        sequence = Task("sequence", self.sequence.task(self.sequence.transfers(board.windows)))
        board.ready.append(sequence)
        board.trace = [] if recording else None
        try:
            self._run_until_quiet()
        finally:
            trace, board.trace = board.trace, None
        if not sequence.done:
            raise self._hang(sequence, run)
        if recording:
            self._learn(trace)

    def _learn(self, trace: list):
        """Keep the recorded launch with the state it started from. Once the machine is back in
        the state a recorded launch started from, and no launch since carried a transfer over,
        the launches from there on repeat: replay their traces in turn from then on."""
        recorded = self._recorded
        recorded.append((self._start, trace))
        self._start = end = self._state()
        first = next((k for k, (state, _) in enumerate(recorded) if state is not None and state == end), None)
        if first is not None and all(state is not None for state, _ in recorded[first:]):
            self._cycle = [trace for _, trace in recorded[first:]]
        kept = sum(len(trace) for _, trace in recorded)
        if first is not None or len(recorded) == RECORDED or kept > RECORDED_ACTIONS:
            self._recorded = self._start = None

    def _replay(self):
        """The data actions of the launch the cycle is at (on this launch's windows)."""
        trace = self._cycle[self._turn]
        self._turn = (self._turn + 1) % len(self._cycle)
        for act in trace:
            act()
        self.replayed += 1

    def _state(self) -> tuple | None:
        """Everything that decides what the next launch does, for a quiet machine: every ring's
        locks, positions and objects, every core's place in its program, every channel's partial
        object, and which task waits on which signal, in order. None while a channel still holds
        a transfer (its actions name an earlier launch's transfers)."""
        if any(channel.queue for channel in self.sequence.channels.values()):
            return None
        return (
            *(ring.state() for ring in self._rings),
            *(program.state() for program in self._programs),
            *(channel.partial for channel in self.sequence.channels.values()),
            *(tuple(map(id, signal.waiters)) for signal in self._signals),
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

    def _run_until_quiet(self):
        ready = self._board.ready
        while ready:
            task = ready.popleft()
            try:
                wait = task.resume()
            except StopIteration:
                task.done = True
                continue
            task.waiting = wait
            wait[0].waiters.append(task)

    def _hang(self, sequence: Task, run: Run) -> DeviceHang:
        lines = [
            f"Plan '{self.plan.name}' hangs in launch {self.launches + 1} (run {run.number}): nothing can "
            f"move, and the runtime sequence waits at {sequence.waiting[1]}.",
            *(f"  {core.name} {core.waiting[1]}" for core in self._cores),
            *(f"  dma {text}" for text in self.sequence.blocked()),
            "Per launch, what the runtime sequence moves into and out of each FIFO must equal what the "
            "cores acquire (objects x object size): make the DMA sizes and the acquire counts agree.",
        ]
        return DeviceHang("\n".join(lines))


# ---- load-time checks ----------------------------------------------------------------------------

def _check_full_elf(plan):
    device = plan.device
    needs = [what for what, present in (
        ("an Emit step", plan.emit is not None),
        ("a feedback buffer", any(b.role is HostRole.FEEDBACK for b in plan.host_buffers)),
    ) if present]
    if plan.full_elf and not device.full_elf:
        needs.insert(0, "a full-ELF image")
    if needs and not (plan.full_elf and device.full_elf):
        why = f"{device.name} runs no full ELF" if not device.full_elf else f"the plan is built as an {plan.image}"
        raise PlanError(
            f"Plan '{plan.name}' has {' and '.join(needs)}, but {why}, so no run has a scratchpad "
            "for an Emit to write. Compile it for a full-ELF device (npu2), or without a device loop."
        )



def _words_buffer(plan) -> str | None:
    """The name of the scratchpad host buffer, checked to hold every word of the plan."""
    words = next((b for b in plan.host_buffers if b.role is HostRole.WORDS), None)
    count = 0 if words is None else words.nwords
    if len(plan.words) > count:
        raise PlanError(
            f"Plan '{plan.name}' defines {len(plan.words)} scratchpad word(s) but its words host "
            f"buffer holds {count}: give it a 'words' host buffer of at least {len(plan.words)} word(s)."
        )
    return None if words is None else words.name
