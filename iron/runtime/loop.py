"""`CarriedLoop`: a carried graph as a device loop on a full-ELF device (npu2). `start` runs `first`
once with the host's values; each `steps(n)` runs `body` n more times, each run starting from the
scratchpad the previous run's Emit wrote, with `depth` runs held in a ring so the host only
restarts runs and counts completions. Whatever stops the host's side early (leaving the
iterator, reading `carry`, a host call, read or write of the graph's states) first waits out the
runs in flight, so what the loop reports is exactly what ran. After each run the host reads the
flag its Emit wrote beside the next run's words (docs/architecture.md, "Device-side bounds"): a
next index out of range, clamped on the device, stops the loop with IndexOutOfRange, as a failed
run stops it with its error; the runs in flight are drained and not counted, so `transitions` and
`carry` describe the runs before the failure.
"""
from __future__ import annotations

from collections import deque

from iron.compiler.plan import WordKind
from iron.errors import IndexOutOfRange, LoopError, PlanError, TraceError
from iron.frontend.handles import Carry
from iron.ir import describe
from iron.runtime.compiled import CompiledGraph
from iron.runtime.timeline import Estimate, estimate, writable
from iron.runtime.timeline import write as write_trace
from iron.runtime.words import WordProgram


class CarriedLoop:
    """`CarriedLoop(first, body, depth=2)`: `start(*tensors, **values)` runs first; `steps(n)`
    yields the index of each of n more body steps as it completes (counting on from the last
    `steps`); `run(n, *tensors, **values)` is start then steps(n). `transitions` (first and every
    body step run since start) and `carry` (the carried values after the last) wait out the runs in
    flight before they answer."""

    def __init__(self, first: CompiledGraph, body: CompiledGraph, depth: int = 2):
        check_loop(first, body, depth)
        self.first, self.body, self.depth = first, body, depth
        self._ring: list | None = None        # body's held runs; transition t > 0 runs ring[t % depth]
        self._head = None                      # first's held run, whose Emit writes ring[1 % depth]
        self._in_flight: deque = deque()       # (transition, session, run), oldest first
        self._launched = self._completed = 0   # transitions since start: first is transition 0
        self._done: deque = deque()            # body steps completed and not yet yielded
        self._epoch = 0                        # which start/steps the live iterator belongs to
        self._timeline = None                  # when timed: the Timeline, and the host's clock
        self._completions: list[float] = []    # at each completion since start
        self._end = 0                          # transitions the current start or steps asks for
        self._stopped: str | None = None       # why the loop stopped (a failed or flagged run)
        self._words = WordProgram(body.plan.words)
        self._flag = len(body.plan.words)      # where the Emit feeding body counts indices out of range

    @property
    def transitions(self) -> int:
        """How many runs completed since start: first, then each body step."""
        self.settle()
        return self._completed

    @property
    def carry(self) -> Carry | None:
        """The carried values after the last run completed (None before start)."""
        self.settle()
        if not self._completed:
            return None
        signed = self.body.session.words_of(self._ring[self._completed % self.depth]).view("int32")
        return Carry({w.name: int(signed[w.index]) for w in self.body.plan.words if w.kind is WordKind.CARRIED})

    def run(self, steps: int, /, *tensors, trace=None, **values):
        """start(*tensors, **values), then steps(steps): yields 0..steps-1. `trace=path` writes
        the runs' timeline there when the iteration ends (iron/runtime/timeline.py)."""
        check_steps("run", steps)
        if trace is None:
            return self.start(*tensors, **values).steps(steps)
        writable(trace)   # before anything runs
        timeline = self.timed()
        mark = timeline.mark()
        return _written(self.start(*tensors, **values).steps(steps), timeline, mark, trace)

    def timed(self):
        """Run first and body on the cost model's clock from now on; the process's Timeline."""
        self.first.timed()
        self._timeline = self.body.timed()
        return self._timeline

    def estimate(self, steps: int, /, *tensors, **values) -> Estimate:
        """Run start(...) and `steps` body steps (as run would: states change) on the timed
        emulator; the estimated time per body step on the NPU at this loop's depth, from the
        first run's completion to the last's, with the busiest tile."""
        check_steps("estimate", steps)
        if not steps:
            raise LoopError("CarriedLoop.estimate(steps=0): estimate over at least one body step.")
        timeline = self.timed()
        mark = timeline.mark()
        for _ in self.run(steps, *tensors, **values):
            pass
        per_step = (self._completions[-1] - self._completions[0]) / steps
        return estimate(timeline.since(mark), per_step, runs=steps + 1)

    def start(self, *tensors, **values) -> CarriedLoop:
        """Run first with these tensors and values (checked before anything runs); returns the loop."""
        inputs, words = self.first.bind(tensors, values)
        self._leave()
        first = self.first.session
        for placement, a in inputs:
            first.write(placement, a)
        if self._ring is None:
            self._ring = self.body.session.make_ring(self.depth)
            self._head = self._ring[0] if self.first is self.body else first.feeding_run(self.body.session, self._ring[1 % self.depth])
        self._launched = self._completed = 0
        self._completions.clear()
        self._end, self._stopped = 1, None
        self._launch(first, self._head, words)
        return self

    def steps(self, n: int):
        """Run n more body steps from the device's last carry; yields each one's index as it
        completes. Leaving the iterator early waits out the runs it has in flight."""
        check_steps("steps", n)
        if self._ring is None:
            raise LoopError("CarriedLoop.steps(n) continues a started loop: call loop.start(...) (or loop.run(...)) first.")
        if self._stopped is not None:
            raise LoopError(f"CarriedLoop.steps(n) cannot continue a loop that stopped ({self._stopped}): "
                            "call loop.start(...) again.")
        self._leave()
        return self._iterate(self._launched + n, self._epoch)

    def _iterate(self, end: int, epoch: int):
        self._end = end
        self._check_flag(self._launched - 1)   # the last run's Emit wrote the words the next starts from
        try:
            while self._epoch == epoch:
                if self._done:   # while the host handles it, depth - 1 runs are in flight (depth 1: lockstep)
                    yield self._done.popleft()
                    continue
                while self._launched < end and len(self._in_flight) < self.depth:
                    self._launch(self.body.session, self._ring[self._launched % self.depth])
                if not self._in_flight:
                    return
                self._wait_oldest()
        finally:
            if self._epoch == epoch:
                self._end = self._launched   # left early: a step never launched is not asked for
                self.settle()

    def settle(self):
        """Wait out the runs in flight (a host call, read or write of the graph does this first)."""
        while self._in_flight:
            self._wait_oldest()

    def _leave(self):
        """End what the last start or steps left running: its runs complete, its iterator stops."""
        self.settle()
        self._epoch += 1
        self._done.clear()

    def _launch(self, session, run, words=None):
        session.start(run, words=words)
        if not self._in_flight:
            self._register(True)
        self._in_flight.append((self._launched, session, run))
        self._launched += 1

    def _wait_oldest(self):
        t, session, run = self._in_flight.popleft()
        if not self._in_flight:
            self._register(False)
        try:
            session.wait(run)
        except Exception as error:
            self._stop(f"step {t - 1} failed: {type(error).__name__}" if t else f"first failed: {type(error).__name__}")
            raise
        self._completed += 1
        if self._timeline is not None:
            self._completions.append(self._timeline.host)
        if t:
            self._done.append(t - 1)
        self._check_flag(t)

    def _check_flag(self, t: int):
        """Raise IndexOutOfRange if run t's Emit flagged an index of body step t (the next run),
        once that step is asked for."""
        if t + 1 >= self._end:
            return
        words = self.body.session.words_of(self._ring[(t + 1) % self.depth]).view("int32")
        if not words[self._flag]:
            return
        carried = {w.name: int(words[w.index]) for w in self.body.plan.words if w.kind is WordKind.CARRIED}
        wrong = self._words.violation(carried)
        drained = len(self._in_flight)
        self._stop(f"step {t} indexed out of range")
        if wrong is None:
            values = ", ".join(f"{name} = {value}" for name, value in carried.items())
            raise PlanError(
                f"CarriedLoop step {t}: the device's Emit flagged an index of {self.body.plan.name} out of range, "
                f"but with {values} the host finds every index in range: the Emit and the Plan's words "
                "disagree, so the loop stopped. Report it with the Plan (IRON_DEBUG=1 prints it)."
            )
        raise IndexOutOfRange.in_loop(t, drained, *wrong)

    def _stop(self, why: str):
        """Stop the loop: the runs in flight complete (they cannot be called back) but are not
        counted, and steps() refuses until the next start."""
        self._stopped = why
        while self._in_flight:
            _, session, run = self._in_flight.popleft()
            try:
                session.wait(run)
            except Exception:   # the first failure is the one the loop raises
                pass
        self._register(False)
        self._epoch += 1
        self._done.clear()

    def _register(self, in_flight: bool):
        """Be (or stop being) one of the loops the graph's host calls wait out."""
        for states in {id(s): s for s in (self.first.session.device_states, self.body.session.device_states)}.values():
            (states.loops.add if in_flight else states.loops.discard)(self)


def _written(iterator, timeline, mark: int, path):
    """`iterator`, then the timeline's spans since `mark` written to `path` (also when left early,
    or stopped by an error, which a failed write never hides: it becomes a note of it)."""
    failed = None
    try:
        yield from iterator
    except Exception as error:
        failed = error
        raise
    finally:
        try:
            write_trace(timeline.since(mark), path)
        except TraceError as unwritten:
            if failed is None:
                raise
            failed.add_note(str(unwritten))


def check_steps(method: str, steps):
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise LoopError(f"CarriedLoop.{method}(steps={steps!r}): steps is how many body runs follow, an int >= 0.")


def check_loop(first, body, depth):
    """Refuse a loop the device cannot run, with the reason and the fix."""
    for role, c in (("first", first), ("body", body)):
        if not isinstance(c, CompiledGraph):
            raise LoopError(f"CarriedLoop's {role} must be a CompiledGraph (graph.compile(...)), not {type(c).__name__}.")
    limit = body.device.max_in_flight   # commands in flight per hardware context (docs/platform.md section 9)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= limit:
        raise LoopError(
            f"CarriedLoop depth={depth!r}: depth is how many runs are kept in flight, an int from 1 to {limit}: "
            f"{body.device.name}'s driver holds at most {limit} runs in flight per hardware context, so a deeper "
            "ring would only wait."
        )
    name = body.plan.name
    if not body.plan.full_elf:
        raise LoopError(
            f"{name} is compiled for {body.device.name}, which has no full ELF: a carried graph has no device "
            "loop there. Only the host-driven path applies: call it and feed the returned Carry back."
        )
    if not body.program.carried_names:
        raise LoopError(f"{name} has no Carried parameters: a device loop needs at least one carried value.")
    if body.program.inputs:
        raise LoopError(
            f"the body of a CarriedLoop takes no tensor, but {name} takes "
            f"{', '.join(n.arg[0] for n in body.program.inputs)}: nothing could write it between steps. "
            "Compile a version that takes the tensor as first (feeds=body) and a body without it."
        )
    if body.program.scratchpad_names:
        raise LoopError(
            f"the body of a CarriedLoop cannot read Scratchpad values ({', '.join(body.program.scratchpad_names)}): "
            "the host gives them per call, and between device steps there is no host call. Make them Carried, "
            "or read them only in first (compiled with feeds=body)."
        )
    for role, c in (("first", first), ("body", body)):
        if c.program.outputs:
            raise LoopError(
                f"the {role} of a CarriedLoop returns {', '.join(describe(n) for n in c.program.outputs)}, but no "
                "host call reads outputs between device steps: write what each step makes into a state "
                "(Copy.step(y, out=self.log[steps])) and read the state after the loop (body.read(...))."
            )
    if first is not body and first.feeds is not body:
        raise LoopError(
            f"{first.plan.name}'s first version was not compiled with feeds= this body, so its Emit does not write "
            "the body's scratchpad: compile it as graph.compile(..., feeds=body)."
        )
    if first.device != body.device:
        raise LoopError(f"first is compiled for {first.device.name} and body for {body.device.name}: compile both for one device.")
