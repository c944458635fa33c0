"""`CarriedLoop`: run a carried graph as a device loop, `depth` runs in flight.

`first` runs once with the host's values (and tensors); then `steps` runs of `body` follow, each
starting from the scratchpad the previous run's Emit wrote. Runs are held in a ring of `depth`,
each with its own scratchpad, so after `first` the host only restarts runs and counts
completions. Only full-ELF devices (npu2) have an Emit; elsewhere the loop is refused and the
host-driven path (call, feed the Carry back) applies. This module schedules runs; what a run
does is the Plan's.
"""
from __future__ import annotations

from collections import deque

from iron.compiler.plan import WordKind
from iron.errors import LoopError
from iron.frontend.handles import Carry
from iron.runtime.compiled import CompiledGraph


class CarriedLoop:
    """`CarriedLoop(first, body, depth=2).run(steps, *tensors, **values)` yields 0..steps-1 as
    each body step completes on the device; `carry` is the Carry after the last one."""

    def __init__(self, first: CompiledGraph, body: CompiledGraph, depth: int = 2):
        check_loop(first, body, depth)
        self.first, self.body, self.depth = first, body, depth
        self.carry: Carry | None = None

    def run(self, steps: int, /, *tensors, **values):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise LoopError(f"CarriedLoop.run(steps={steps!r}): steps is how many body runs follow first, an int >= 0.")
        inputs, words = self.first.bind(tensors, values)
        return self._steps(steps, inputs, words)

    def _steps(self, steps, inputs, words):
        first, body = self.first.session, self.body.session
        for placement, a in inputs:
            first.write(placement, a)
        ring = body.make_ring(self.depth)
        same = self.first is self.body
        head = ring[0] if same else first.feeding_run(body, ring[1 % self.depth])
        in_flight: deque = deque()
        next_t = 0
        try:
            while next_t <= steps or in_flight:
                while next_t <= steps and len(in_flight) < self.depth:
                    if next_t == 0:
                        first.start(head, words=words)
                        in_flight.append((0, first, head))
                    else:
                        body.start(ring[next_t % self.depth])
                        in_flight.append((next_t, body, ring[next_t % self.depth]))
                    next_t += 1
                t, session, run = in_flight.popleft()
                session.wait(run)
                if t:
                    yield t - 1
            self.carry = self._carry(body.words_of(ring[(steps + 1) % self.depth]))
        finally:
            while in_flight:
                _, session, run = in_flight.popleft()
                session.wait(run)

    def _carry(self, words) -> Carry:
        signed = words.view("int32")
        return Carry({w.name: int(signed[w.index]) for w in self.body.plan.words if w.kind is WordKind.CARRIED})


def check_loop(first, body, depth):
    """Refuse a loop the device cannot run, with the reason and the fix."""
    for role, c in (("first", first), ("body", body)):
        if not isinstance(c, CompiledGraph):
            raise LoopError(f"CarriedLoop's {role} must be a CompiledGraph (graph.compile(...)), not {type(c).__name__}.")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise LoopError(f"CarriedLoop depth={depth!r}: depth is how many runs are kept in flight, an int >= 1.")
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
            f"the body of a CarriedLoop cannot take Scratchpad values ({', '.join(body.program.scratchpad_names)}): "
            "the host gives them per call, and between device steps there is no host call. Make them Carried."
        )
    if first is not body and first.feeds is not body:
        raise LoopError(
            f"{first.plan.name}'s first version was not compiled with feeds= this body, so its Emit does not write "
            "the body's scratchpad: compile it as graph.compile(..., feeds=body)."
        )
    if first.device != body.device:
        raise LoopError(f"first is compiled for {first.device.name} and body for {body.device.name}: compile both for one device.")
