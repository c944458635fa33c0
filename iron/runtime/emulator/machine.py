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

It does not write inputs or read outputs (the host side does, through `buffer` and
`Run.buffers`), compute the host's scratchpad words, or read a traced Program.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from iron.compiler.allocate import check_tile_memory
from iron.compiler.invariants import check_plan
from iron.errors import ArgumentError, DeviceHang, IndexOutOfRange, PlanError
from iron.runtime.emulator.core import CoreProgram, compile_function
from iron.runtime.emulator.dma import Sequence
from iron.runtime.emulator.fifo import FifoEnds, fifo_movers, link_task
from iron.runtime.emulator.kernels import kernel_calls, kernel_mode


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

    def __init__(self, plan, kernels: str | None = "numpy", check: bool = True):
        """`kernels`: "numpy" | "native" (None: $IRON_EMULATOR_KERNELS, else "numpy");
        `check=False` skips check_plan, to run a plan it refuses (e.g. to see where it hangs)."""
        mode = kernel_mode(kernels)
        if check:
            check_plan(plan)
        _check_full_elf(plan)
        check_tile_memory(plan)
        self.plan, self.launches = plan, 0
        self._buffers = {b.name: np.zeros(b.nwords, np.uint32) for b in plan.host_buffers}
        self._words = _words_buffer(plan)
        self._bounds = [(w.index, w.bound, w.what or w.name, w.name) for w in plan.words if w.bound is not None]
        self._ready: deque = deque()
        self._queue: deque = deque()
        self._runs = 0
        self._broken: str | None = None
        self._load(plan, kernel_calls(mode, plan))
        self._run_until_quiet()

    def _load(self, plan, make_call):
        ready = self._ready
        ends = {f.name: FifoEnds(f, ready) for f in plan.fifos}
        tasks = [(f"tile dma @{name}", mover) for name, e in ends.items() for mover in fifo_movers(e)]
        fifos = {f.name: f for f in plan.fifos}
        tasks += [(f"link on {link.tile.name}", link_task(link, fifos, ends)) for link in plan.links]
        self.sequence = Sequence(plan, ends, ready)
        tasks += self.sequence.tasks
        functions = {fn.name: (fn, compile_function(fn, make_call)) for fn in plan.functions}
        buffers = {b.name: (b.tile, np.zeros(b.nbytes, np.uint8)) for b in plan.buffers}
        cores = [CoreProgram(core, ends, functions, buffers) for core in plan.cores]
        self._cores = [Task(c.name, c.task()) for c in cores]
        ready.extend(self._cores)
        ready.extend(Task(name, generator) for name, generator in tasks)

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
            transfers = self.sequence.transfers(run.buffers, words)
        finally:
            self._queue.popleft()
            run.queued = False
        sequence = Task("sequence", self.sequence.task(transfers))
        self._ready.append(sequence)
        try:
            self._run_until_quiet()
        except Exception as exc:
            self._fail(f"an earlier launch of plan '{self.plan.name}' failed ({exc}); the device is "
                       "left mid-launch. Load the plan again (a new Emulator).")
            raise
        if not sequence.done:
            hang = self._hang(sequence, run)
            self._fail(f"plan '{self.plan.name}' hung in an earlier launch; its cores cannot continue. "
                       "Load the plan again (a new Emulator) after fixing it.")
            raise hang
        self.launches += 1
        run.completed = True

    def _fail(self, why: str):
        self._broken = why
        for queued in self._queue:
            queued.queued = False
        self._queue.clear()

    def _check_words(self, words):
        if not self._bounds:
            return
        values = words.view(np.int32)
        for index, (lo, hi), what, name in self._bounds:
            value = int(values[index])
            if not lo <= value < hi:
                raise IndexOutOfRange.at(what, name, value, lo, hi)

    def _run_until_quiet(self):
        ready = self._ready
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
        ("a feedback buffer", any(b.role == "feedback" for b in plan.host_buffers)),
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
    words = next((b for b in plan.host_buffers if b.role == "words"), None)
    count = 0 if words is None else words.nwords
    if len(plan.words) > count:
        raise PlanError(
            f"Plan '{plan.name}' defines {len(plan.words)} scratchpad word(s) but its words host "
            f"buffer holds {count}: give it a 'words' host buffer of at least {len(plan.words)} word(s)."
        )
    return None if words is None else words.name
