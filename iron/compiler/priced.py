"""What a Plan is estimated to take on the device (`plan_ns`): the one estimate every choice
between whole designs reads (over time or in space, repeat.py; the rows of cores, compile.py),
from the cost model's figures. It follows the serial chain the timed emulator runs: the runtime
sequence issues each group's moves in order (a `Unit`: an iteration of a looping group, or the
part of one up to a Wait), a Wait holding every later move until the moves it waits on are done;
a group's cores start once the groups feeding them on the array are done (a whole value) or have
begun (a stream); a group's cores and channels serve one unit at a time; DDR's bandwidth is one
queue every unit's bytes wait in; plus loading each configuration every call (`reconfigure_ns`)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby

from iron.plan import cost
from iron.plan.plan import (
    Acquire,
    Direction,
    Imm,
    Invoke,
    KernelStep,
    Loop,
    Moved,
    Plan,
    Port,
    TileKind,
    dma_runs,
    launch_steps,
)

_PRICED: dict[int, Priced] = {}   # the latest configurations priced, by identity (choices ask again)
KEPT = 64


def plan_ns(plan: Plan) -> float:
    """A Plan's estimated device time per call: its configurations' serial chains, and loading them."""
    configurations = plan.configurations
    return sum(priced(c).ns for c in configurations) + reconfigure_ns(plan.device, len(configurations))


def priced(configuration: Plan) -> Priced:
    """`Priced.of` a configuration, kept: the estimate, the floor and the DDR bytes all read it."""
    kept = _PRICED.get(id(configuration))
    if kept is None or kept.plan is not configuration:
        if len(_PRICED) >= KEPT:
            _PRICED.pop(next(iter(_PRICED)))
        kept = _PRICED[id(configuration)] = Priced.of(configuration)
    return kept


def reconfigure_ns(device, configurations: int) -> float:
    """Loading a call's configurations: none for one (it stays loaded), else each of them every call."""
    return cost.generation(device).reconfigure_ns * configurations * (configurations > 1)


@dataclass(frozen=True)
class Priced:
    """What the estimate of one configuration reads: each core's cycles and each FIFO's bytes per launch."""

    plan: Plan
    cycles: dict
    moved: dict
    runs: list

    @classmethod
    def of(cls, plan: Plan) -> Priced:
        gen = cost.generation(plan.device)
        functions = {f.name: sum(_step_cycles(gen, step) for step in f.steps) for f in plan.functions}
        cycles = {c.tile: _program_cycles(c.program, functions) for c in plan.cores}
        runs, moved = dma_runs(plan.sequence), Counter()
        for run in (r for r in runs if isinstance(r, Moved)):
            moved[run.fifo] += run.nwords * 4
        return cls(plan, cycles, moved, runs)

    @cached_property
    def ns(self) -> float:
        return Chain(self).ns()

    @property
    def ddr_bytes(self) -> int:
        return sum(self.moved.values())

    def floor(self, groups: tuple[str, ...], count: int) -> float:
        """A floor under the estimate of this design with `groups` placed once and looping `count`
        times (so a design whose estimate in space is below it is not compiled twice): those
        groups' cores doing `count` times their work, the FIFOs near them moving `count` times
        their bytes, and DDR moving what this design moves."""
        tiles = {c.tile for c in self.plan.cores if c.group in groups}
        near = {f.name for f in self.plan.fifos if tiles & {f.producer, *f.consumers}}
        for link in self.plan.links:
            if near & {*link.sources, *link.destinations}:
                near |= {*link.sources, *link.destinations}
        busiest = max((n for name, n in self.moved.items() if name in near), default=0)
        cycles = max((n for tile, n in self.cycles.items() if tile in tiles), default=0.0)
        return cost.Work(count * cycles, count * busiest, self.ddr_bytes).ns(self.plan.device)


@dataclass
class Unit:
    """One group's share of a configuration's work (a stretch of the sequence's moves, or an
    iteration of a group it moves nothing for): when it is issued and, once scheduled, its span."""

    group: str
    at: int                                       # its place among its group's units
    issued: float
    moved: dict = field(default_factory=dict)     # FifoId -> bytes
    results: set = field(default_factory=set)     # the FIFOs of those writing results back to DDR
    start: float = 0.0
    end: float | None = None


class Chain:
    """The serial chain of one configuration (module docstring), scheduled as the sequence reaches its units."""

    def __init__(self, priced: Priced):
        plan = self.plan = priced.plan
        self.device, self.gen, self.priced = plan.device, cost.generation(plan.device), priced
        self.groups_of = {c.tile: c.groups for c in plan.cores}
        self.fifos = {f.name: f for f in plan.fifos}
        self.onward: dict = {}   # FifoId -> what the mem tiles' links pass it on to, link by link
        for link in plan.links:
            for source in link.sources:
                self.onward.setdefault(source, []).append(link.destinations)
        self.fifo_group = {name: self._group_of(name) for name in self.fifos}
        self.feeders = self._feeders()
        self.count = {g: _looped(c.program)[1] for c in plan.cores for g in c.groups}   # iterations per group
        self.sites = Counter(g for g, _ in groupby(priced.runs, self._group_moving) if g is not None)   # units per group
        self.units: dict[tuple[str, int], Unit] = {}
        self.known: dict[tuple, object] = {}   # what the array answers (`_into_cores`, `_held`), once each
        self.busiest: dict[str, float] = {}   # cycles of a group's busiest core (a shared core's whole program, for the first of its groups)
        for c in plan.cores:
            self.busiest[c.group] = max(self.busiest.get(c.group, 0.0), priced.cycles[c.tile])
        self.ddr_free = 0.0

    def ns(self) -> float:
        """When the configuration's last unit ends, every unit scheduled."""
        issued, reached = 0.0, Counter()   # reached: units the sequence issued so far, per group
        last: dict = {}   # FifoId -> the unit that last moved it
        for group, runs in groupby(self.priced.runs, self._group_moving):
            if group is None:   # Waits: every later move waits
                issued = max([issued, *(self._scheduled(last[w.fifo]).end for w in runs if w.fifo in last)])
                continue
            unit = self.units[group, reached[group]] = Unit(group, reached[group], issued)
            reached[group] += 1
            for run in runs:
                unit.moved[run.fifo] = unit.moved.get(run.fifo, 0) + run.nwords * 4
                if run.direction is Direction.S2MM:
                    unit.results.add(run.fifo)
                last[run.fifo] = unit
        ends = [self._at(g, at).end for g in {*self.count, *self.sites} for at in range(self._units(g))]
        return max([issued, *ends])

    def _group_moving(self, run) -> str | None:
        """The group whose unit a run of the sequence moves for (a stretch ends at another group's or a Wait)."""
        return self.fifo_group[run.fifo] if isinstance(run, Moved) else None

    def _units(self, group: str) -> int:
        return self.sites.get(group) or self.count.get(group, 1)

    def _at(self, group: str, at: int) -> Unit | None:
        """A group's unit `at`, scheduled; None when the sequence has not reached it yet."""
        unit = self.units.get((group, at))
        if unit is None:
            if group in self.sites:
                return None
            unit = self.units[group, at] = Unit(group, at, 0.0)   # its cores' work, fed on the array
        return self._scheduled(unit)

    def _scheduled(self, unit: Unit) -> Unit:
        """`unit` with its start and end. Its inputs move once it is issued and its group's unit
        before it is done; its cores start once its feeders' units of the same iteration are done
        or, streaming, begun; its objects flow through its busiest input channel, core and result
        channel, overlapping; its DDR bytes queue behind those of the units scheduled before it."""
        if unit.end is not None:
            return unit
        unit.end = 0.0   # a feeder reached again through a cycle (none in a Plan) bounds nothing
        moving = unit.issued
        if unit.at > 0:
            before = self._at(unit.group, unit.at - 1)
            moving = max(moving, before.end if before is not None else 0.0)
        inputs, core, results, objects, ahead = self._stages(unit)
        start, after = moving + inputs / objects, 0.0
        k = unit.at * self.count.get(unit.group, 1) // self._units(unit.group)
        for feeder, edge in self.feeders.get(unit.group, {}).items():
            first, last = self._feeding(feeder, k)
            if edge.streamed and first is not None:
                start, after = max(start, first.start), max(after, last.end if last is not None else 0.0)
            elif last is not None:   # the whole value, once made, crosses to this group's cores
                start = max(start, last.end + cost.ns(self.device, cost.dma_cycles(self.gen, edge.nbytes)))
        left = inputs - min(start - moving, ahead * inputs)   # what could not move before the cores began
        end = max(start + core + results / objects, start + left + (core + results) / objects,
                  start + results, after)
        if ddr := sum(unit.moved.values()):   # every byte it moves goes to or from DDR
            self.ddr_free = max(moving, self.ddr_free) + cost.ddr_ns(self.gen, ddr)
            end = max(end, self.ddr_free)
        unit.start, unit.end = start, end
        return unit

    def _stages(self, unit: Unit) -> tuple[float, float, float, int, float]:
        """A unit's busiest input channel's, core's and result channel's times, the most objects
        one of its FIFOs moves, and the share of its busiest input held ahead of its cores
        (`_held`). An input reaching its cores through a FIFO of depth 1 moves each object while
        the core waits: that hop's time adds to the core's."""
        stages = [0.0, cost.ns(self.device, self.busiest.get(unit.group, 0.0) / self._units(unit.group)), 0.0]
        objects, ahead, busiest, unbuffered = 1, 1.0, 0, 0.0
        for name, nbytes in unit.moved.items():
            at = 2 if name in unit.results else 0
            stages[at] = max(stages[at], cost.ns(self.device, cost.dma_cycles(self.gen, nbytes)))
            objects = max(objects, round(nbytes / self.fifos[name].nbytes))
            if at == 0 and nbytes > busiest:
                busiest, ahead = nbytes, min(1.0, self._held(name) / nbytes)
            if at == 0:
                last = self._into_cores(name)
                if any(f.depth == 1 for f in last):
                    unbuffered = max(unbuffered, cost.ns(self.device, cost.dma_cycles(self.gen, nbytes / len(last))))
        stages[1] += unbuffered
        return (*stages, objects, ahead)

    def _into_cores(self, name) -> list:
        """The FIFOs a host FIFO's objects reach the cores by: itself, or those the links pass it to."""
        if ("into", name) not in self.known:
            onward = [d for destinations in self.onward.get(name, ()) for d in destinations]
            self.known["into", name] = [f for d in onward for f in self._into_cores(d)] if onward else [self.fifos[name]]
        return self.known["into", name]

    def _held(self, name) -> int:
        """The bytes a FIFO and those its link passes it on to hold: what moves ahead of the cores reading it."""
        if ("held", name) not in self.known:
            fifo = self.fifos[name]
            onward = [d for destinations in self.onward.get(name, ()) for d in destinations[:1]]
            self.known["held", name] = fifo.depth * fifo.nbytes + sum(map(self._held, onward))
        return self.known["held", name]

    def _feeding(self, feeder: str, k: int) -> tuple[Unit | None, Unit | None]:
        """The feeder's first and last units of its iteration k (its last, when it has fewer)."""
        count, units = self.count.get(feeder, 1), self._units(feeder)
        k = min(k, count - 1)
        first, last = -(-k * units // count), -(-(k + 1) * units // count) - 1
        return self._at(feeder, first), self._at(feeder, last)

    # ---- the array: which groups feed which ----

    def _group_of(self, name) -> str:
        """The group a FIFO's moves belong to: its own, or (a shared channel) its first consumer core's."""
        if name.group is not None:
            return name.group
        todo, seen = [name], set()
        while todo:
            fifo = self.fifos[todo.pop()]
            seen.add(fifo.name)
            for tile in fifo.consumers:
                if tile in self.groups_of:
                    return self.groups_of[tile][0]
            todo += [d for destinations in self.onward.get(fifo.name, ()) for d in destinations if d not in seen]
        return str(name)

    def _feeders(self) -> dict[str, dict[str, Edge]]:
        """Per group, the groups whose cores feed its cores on the array, each by the Edge between them."""
        objects: dict = {}   # FifoId -> the objects its producer makes per iteration
        for core in self.plan.cores:
            for step, times in launch_steps(_looped(core.program)[0]):
                if isinstance(step, Acquire) and step.port is Port.PRODUCE:
                    objects[step.fifo] = objects.get(step.fifo, 0) + times * step.count
        makers: dict = {}
        for f in self.plan.fifos:
            if f.producer.kind is TileKind.COMPUTE:
                groups = self.groups_of.get(f.producer, ())
                makers[f.name] = {(g, objects.get(f.name, 1) > 1)
                                  for g in ((f.name.group,) if f.name.group in groups else groups)}
        for _ in range(2):   # a join's destination is made by its sources' makers
            for link in self.plan.links:
                made = {m for s in link.sources for m in makers.get(s, ())}
                for d in link.destinations:
                    makers[d] = makers.get(d, set()) | made
        feeders: dict[str, dict[str, Edge]] = {}
        for name, made in makers.items():
            fifo = self.fifos[name]
            for reader in {r for tile in fifo.consumers for r in self.groups_of.get(tile, ())}:
                for g, streamed in made:
                    if g != reader:
                        edge = feeders.setdefault(reader, {}).get(g, Edge(False, 0))
                        feeders[reader][g] = Edge(edge.streamed or streamed, max(edge.nbytes, fifo.nbytes))
        return feeders


@dataclass(frozen=True)
class Edge:
    """How one group's cores feed another's: a stream of objects (the reader begins with the first), or a whole value."""

    streamed: bool
    nbytes: int


def _looped(program: tuple) -> tuple[tuple, int]:
    """A core's program as one iteration's body and its count (a looping core: `Loop(count)`)."""
    if len(program) == 1 and isinstance(program[0], Loop):
        return program[0].body, program[0].count
    return program, 1


_CYCLES: dict[tuple, float] = {}   # a kernel step's cycles by what they depend on: alike layers price once


def _step_cycles(gen: cost.Generation, step) -> float:
    """`cost.step_cycles` of a Function's step, remembered by its kernel, dtypes and immediates."""
    if not isinstance(step, KernelStep):
        return gen.scalar_cycles
    key = (gen.family, step.kernel, step.dtype, step.out, tuple(a for a in step.args if isinstance(a, Imm)))
    if key not in _CYCLES:
        _CYCLES[key] = cost.step_cycles(gen, step)
    return _CYCLES[key]


def _program_cycles(program: tuple, functions: dict) -> float:
    total = 0.0
    for item in program:
        if isinstance(item, Loop):
            total += item.count * _program_cycles(item.body, functions)
        elif isinstance(item, Invoke):
            total += functions[item.function]
    return total


def ddr_bytes(plan: Plan) -> int:
    return sum(priced(c).ddr_bytes for c in plan.configurations)
