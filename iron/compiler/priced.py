"""What a Plan's configurations are estimated to take (`plan_ns`), as the choice between running
a repeated block over time and spreading it in space reads them (repeat.py): per configuration
the slowest of its busiest core, its busiest FIFO and DDR (`cost.Work`), a looping core's work
counted as many times as it loops, plus each reconfiguration; `serial_ns`, with each
configuration's groups one after another (compile.py's `fewer_rows`)."""
from __future__ import annotations

from dataclasses import dataclass

from iron.compiler import cost
from iron.plan.plan import Dma, Imm, Invoke, KernelStep, Loop, Plan


def plan_ns(plan: Plan) -> float:
    """A Plan's estimated device time per call: per configuration the slowest of its busiest
    core, its busiest FIFO's moves and DDR (`cost.Work`), plus loading each configuration after
    the first."""
    configurations = plan.configurations
    gen = cost.generation(plan.device)
    return sum(Priced.of(c).work().ns(plan.device) for c in configurations) + gen.reconfigure_ns * (len(configurations) - 1)


def serial_ns(plan: Plan) -> float:
    """A Plan's estimated time with the groups of each configuration running one after another
    (each its busiest core, its busiest FIFO and its DDR bytes: `cost.Work`), as groups passing
    values through DDR buffers do, the sequence waiting on each write; plus loading each
    configuration after the first."""
    gen = cost.generation(plan.device)
    total = gen.reconfigure_ns * (len(plan.configurations) - 1)
    for configuration in plan.configurations:
        priced = Priced.of(configuration)
        for group in dict.fromkeys(c.group for c in configuration.cores):
            cycles = max(priced.cycles[c.tile] for c in configuration.cores if c.group == group)
            moved = [n for name, n in priced.moved.items() if name.group == group]
            total += cost.Work(cycles, max(moved, default=0), sum(moved)).ns(plan.device)
    return total


@dataclass(frozen=True)
class Priced:
    """What the estimate of one configuration reads: each core's cycles per launch (its
    Functions' cycles, `cost.function_cycles`, times its Loops' counts) and the bytes each FIFO
    moves per launch."""

    plan: Plan
    cycles: dict
    moved: dict

    @classmethod
    def of(cls, plan: Plan) -> Priced:
        gen = cost.generation(plan.device)
        functions = {f.name: sum(_step_cycles(gen, step) for step in f.steps) for f in plan.functions}
        cycles = {c.tile: _program_cycles(c.program, functions) for c in plan.cores}
        moved: dict[str, int] = {}
        for op in plan.sequence:
            if isinstance(op, Dma):
                moved[op.fifo] = moved.get(op.fifo, 0) + op.nwords * 4
        return cls(plan, cycles, moved)

    def work(self) -> cost.Work:
        return cost.Work(max(self.cycles.values(), default=0.0), max(self.moved.values(), default=0),
                         sum(self.moved.values()))

    def floor(self, groups: tuple[str, ...], count: int) -> float:
        """A floor under the estimate of this design with `groups` placed once and looping `count`
        times, read off this one (so a design whose estimate in space is below it is not
        compiled twice): those groups' cores doing `count` times their work, the FIFOs feeding
        or draining them (directly or through a mem tile's link) moving `count` times their
        bytes, and DDR moving what this design moves."""
        tiles = {c.tile for c in self.plan.cores if c.group in groups}
        near = {f.name for f in self.plan.fifos if tiles & {f.producer, *f.consumers}}
        for link in self.plan.links:
            if near & {*link.sources, *link.destinations}:
                near |= {*link.sources, *link.destinations}
        busiest = max((n for name, n in self.moved.items() if name in near), default=0)
        cycles = max((n for tile, n in self.cycles.items() if tile in tiles), default=0.0)
        return cost.Work(count * cycles, count * busiest, self.work().ddr_bytes).ns(self.plan.device)


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
    return sum(Priced.of(c).work().ddr_bytes for c in plan.configurations)
