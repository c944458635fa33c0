"""`CarriedLoop`: a carried graph as a device loop on a full-ELF device (npu2). `start` runs `first`
once with the host's values; each `steps(n)` runs `body` n more times, each run starting from the
scratchpad the previous run's Emit wrote, with `depth` runs held in a ring (at most the driver's
4 started, the rest queued) so the host only restarts runs and counts completions. Whatever
stops the host's side early (leaving the iterator, reading `carry`, a host call, read or write
of the graph's states, from any thread: each step holds the graph's lock) first waits out the
runs in flight, so what the loop reports is exactly what ran. Before starting a step the host
computes the indices it can from the carried values it knows, and never starts one out of
range; after each run it reads the flag the Emit wrote beside the next run's words
(docs/architecture.md, "Device-side bounds"). Either stops the loop with IndexOutOfRange once
the steps completed before it are yielded; a failed or interrupted run stops it with its own
error and gives the sessions a fresh device. The runs in flight are drained and not counted,
so `transitions` and `carry` describe the runs before the stop.
"""
from __future__ import annotations

from collections import deque

from iron.errors import IndexOutOfRange, LoopError, PlanError, TraceError
from iron.frontend.handles import Carry
from iron.ir import describe
from iron.plan.plan import WordKind, WordRef
from iron.runtime.compiled import CompiledGraph, graph_name
from iron.runtime.timeline import Estimate, estimate, writable
from iron.runtime.timeline import write as write_trace
from iron.runtime.words import WordProgram

MAX_DEPTH = 64   # runs a ring holds; each keeps its own scratchpad (README "Device loops")


class CarriedLoop:
    """`CarriedLoop(first, body, depth=2)`: `start(*tensors, **values)` runs first; `steps(n)`
    yields the index of each of n more body steps as it completes (counting on from the last
    `steps`); `run(n, *tensors, **values)` is start then steps(n). `transitions` (first and every
    body step run since start) and `carry` (the carried values after the last) wait out the runs in
    flight before they answer. Every method holds the graph's lock (`Versions.lock`), so another
    thread's call, read or write of the graph, or of the loop, lands between two steps."""

    def __init__(self, first: CompiledGraph, body: CompiledGraph, depth: int = 2):
        check_loop(first, body, depth)
        self.first, self.body, self.depth = first, body, depth
        self._lock = body.versions.lock
        self._ring: list | None = None        # body's held runs; transition t > 0 runs ring[t % depth]
        self._head = None                      # first's held run, whose Emit writes ring[1 % depth]
        self._sessions = ()                    # the sessions (and their resets) the ring was made on
        self._queued: deque = deque()          # (transition, session, run, words) not started yet
        self._in_flight: deque = deque()       # (transition, session, run) started, oldest first
        self._launched = self._completed = 0   # transitions since start: first is transition 0
        self._done: deque = deque()            # body steps completed and not yet yielded
        self._epoch = 0                        # which start/steps the live iterator belongs to
        self._timeline = None                  # when timed: the Timeline, and the host's clock
        self._completions: list[float] = []    # at each completion since start
        self._end = 0                          # transitions the current start or steps asks for
        self._stopped: str | None = None       # why the loop stopped (a failed or flagged run)
        self._error: BaseException | None = None   # a flagged step's error, raised after the steps before it
        self._ahead: tuple | None = None       # (step, error): an index the host computed out of range
        self._known: dict[str, int] = {}       # the carried values of transition `_launched` the host computes
        self._last: Carry | None = None        # the carry when the loop stopped
        self._words = WordProgram(body.plan.words)
        self._flag = len(body.plan.words)      # where the Emit feeding body counts indices out of range

    @property
    def transitions(self) -> int:
        """How many runs completed since start: first, then each body step."""
        with self._lock:
            self.settle()
            return self._completed

    @property
    def carry(self) -> Carry | None:
        """The carried values after the last run completed (None before start)."""
        with self._lock:
            self.settle()
            return self._last if self._stopped is not None else self._carry_now()

    def _carry_now(self) -> Carry | None:
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
        return estimate(timeline.since(mark), per_step, self.body.plan.device, runs=steps + 1)

    def start(self, *tensors, **values) -> CarriedLoop:
        """Run first with these tensors and values (checked before anything runs); returns the loop."""
        inputs, words = self.first.bind(tensors, values)
        with self._lock:
            self._leave()
            first = self.first.session
            for placement, a in inputs:
                first.write(placement, a)
            sessions = (first, first.resets, self.body.session, self.body.session.resets)
            if self._sessions != sessions:   # a session reset (a failed run) holds new runs
                self._ring = self.body.session.make_ring(self.depth)
                self._head = self._ring[0] if self.first is self.body else first.feeding_run(
                    self.body.session, self._ring[1 % self.depth])
                self._sessions = sessions
            self._launched = self._completed = 0
            self._completions.clear()
            self._end, self._stopped, self._last = 1, None, None
            self._known = {name: int(words[s.index]) for name, s in self.first.plan.carry if isinstance(s, WordRef)}
            self._launch(first, self._head, words)
            return self

    def steps(self, n: int):
        """Run n more body steps from the device's last carry; yields each one's index as it
        completes. Leaving the iterator early waits out the runs it has in flight."""
        check_steps("steps", n)
        with self._lock:
            if self._ring is None:
                raise LoopError("CarriedLoop.steps(n) continues a started loop: call loop.start(...) (or loop.run(...)) first.")
            if self._stopped is not None:
                raise LoopError(f"CarriedLoop.steps(n) cannot continue a loop that stopped ({self._stopped}): "
                                "call loop.start(...) again.")
            self._leave()
            epoch = self._epoch
            self._end = self._launched + n
            self._check_flag(self._launched - 1)   # the last run's Emit wrote the words the next starts from
        return self._iterate(epoch)

    def _iterate(self, epoch: int):
        try:
            while True:
                with self._lock:   # never held across a yield: other threads run between steps
                    step = self._next(epoch)
                if step is None:
                    return
                yield step
        finally:
            with self._lock:
                if self._epoch == epoch:
                    self._end = self._launched   # left early: a step never launched is not asked for
                    self.settle()

    def _next(self, epoch: int) -> int | None:
        """The next completed step of the iterator of `epoch` (None when it has ended), launching
        steps as the ring allows; a flagged step's error once the steps before it are yielded."""
        while self._epoch == epoch:
            if self._done:   # while the host handles it, depth - 1 runs are in flight (depth 1: lockstep)
                return self._done.popleft()
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._stopped is not None:
                return None
            while self._launched < self._end and len(self._queued) + len(self._in_flight) < self.depth:
                if not self._foreseen():
                    break
                self._known = self._words.known(self._known, self.body.plan.carry)[1]
                self._launch(self.body.session, self._ring[self._launched % self.depth])
            if not self._in_flight:
                return self._ended()
            self._wait_oldest()
        return None

    def _foreseen(self) -> bool:
        """Whether transition `_launched` may start: no index of it the host computes from the
        carried values it knows (those the words compute, not those a kernel made) is out of
        range. Else the steps asked for end before it, and its error follows the steps before it."""
        wrong, _ = self._words.known(self._known, self.body.plan.carry)
        if wrong is None:
            return True
        step = self._launched - 1
        self._ahead = (step, IndexOutOfRange.in_loop(step, 0, *wrong, by_host=True))
        self._end = self._launched
        return False

    def _ended(self) -> None:
        """Every run asked for completed: raise the index the host found out of range, if any."""
        if self._ahead is None:
            return None
        (step, error), self._ahead = self._ahead, None
        self._stop(f"step {step} indexed out of range")
        raise error

    def settle(self):
        """Wait out the runs in flight (a host call, read or write of the graph does this first)."""
        with self._lock:
            while self._in_flight:
                self._wait_oldest()

    def _leave(self):
        """End what the last start or steps left running: its runs complete, its iterator stops."""
        self.settle()
        self._epoch += 1
        self._done.clear()
        self._error = self._ahead = None

    def _launch(self, session, run, words=None):
        """Launch transition `_launched`: started at once while fewer than the device's runs in
        flight per hardware context are, else queued until an earlier one completes."""
        self._queued.append((self._launched, session, run, words))
        self._launched += 1
        self._submit()

    def _submit(self):
        while self._queued and len(self._in_flight) < self.body.device.max_in_flight:
            t, session, run, words = self._queued[0]
            try:
                session.start(run, words=words)
            except BaseException as error:
                self._fail(t, error)
                raise
            self._queued.popleft()
            if not self._in_flight:
                self._register(True)
            self._in_flight.append((t, session, run))

    def _wait_oldest(self):
        t, session, run = self._in_flight.popleft()
        try:
            session.wait(run)
        except BaseException as error:   # Ctrl-C too: the loop stops exactly, and it propagates as itself
            self._fail(t, error)
            raise
        if not self._in_flight:
            self._register(False)
        self._completed += 1
        if self._timeline is not None:
            self._completions.append(self._timeline.host)
        if t:
            self._done.append(t - 1)
        try:
            self._check_flag(t)
        except (IndexOutOfRange, PlanError) as error:   # raised after the steps completed before it
            self._error = error
            return
        self._submit()   # no queued run starts once a flag has stopped the loop

    def _check_flag(self, t: int):
        """Raise IndexOutOfRange if run t's Emit flagged an index of body step t (the next run),
        once that step is asked for."""
        if t + 1 >= self._end or t + 1 == self._launched and not self._foreseen():
            return   # not asked for, or not started: the host found it (raised after the steps before it)
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

    def _fail(self, t: int, error: BaseException):
        """Run t failed or was interrupted: stop the loop, and give the sessions a fresh device
        (the next start makes a new ring on it)."""
        self._stop(f"step {t - 1} failed: {type(error).__name__}" if t else f"first failed: {type(error).__name__}")
        for session in dict.fromkeys((self.first.session, self.body.session)):
            session.reset()

    def _stop(self, why: str):
        """Stop the loop: the runs in flight complete (they cannot be called back) but are not
        counted, those queued never start, and steps() refuses until the next start."""
        self._last = self._carry_now()   # before a drained run's Emit can write the scratchpad it is read from
        self._stopped = why
        self._queued.clear()
        while self._in_flight:
            _, session, run = self._in_flight.popleft()
            try:
                session.wait(run)
            except Exception:   # the first failure is the one the loop raises
                pass
        self._register(False)

    def _register(self, in_flight: bool):
        """Be (or stop being) one of the loops the graph's host calls wait out."""
        states = self.body.session.device_states
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
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise LoopError(
            f"CarriedLoop depth={depth!r}: depth is how many runs the ring holds, an int from 1 to {MAX_DEPTH} "
            f"(each holds its own scratchpad); {body.device.name}'s driver keeps {body.device.max_in_flight} of them "
            "in flight per hardware context and the loop queues the rest."
        )
    if first.graph is not body.graph:
        raise LoopError(
            f"CarriedLoop's first is compiled from {graph_name(first.graph)} and its body from "
            f"{graph_name(body.graph)}, two graphs with states of their own: first would write one's and body the "
            "other's. Compile both from one graph: body = g.compile(...), first = g.compile(..., feeds=body)."
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
            f"{', '.join(n.arg.name for n in body.program.inputs)}: nothing could write it between steps. "
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
