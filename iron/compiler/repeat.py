"""Repetition over time (the rule `repeat_over_time`): a block of groups traced several times
with the same kernels and shapes over other host tensors or parts of one (runs.py) may run as ONE
placed iteration whose cores loop over the iterations while the runtime sequence moves each
iteration's operands at their own DDR offsets (unfold.py), when the cost model estimates that
faster than spreading the iterations in space (`choose_over_time`, a `Choice`); share_core.py
picks which groups of an iteration larger than the array share a core."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from iron.compiler.allocate import host_placements
from iron.compiler.copies import copied
from iron.compiler.fuse import Group, fuse
from iron.compiler.priced import ddr_bytes, plan_ns, priced, reconfigure_ns
from iron.compiler.runs import HOST, NotRepeated, Run, find_runs
from iron.compiler.share_core import cores_of, sharing
from iron.compiler.through_ddr import through_name, write_through
from iron.compiler.unfold import unfolding
from iron.errors import DoesNotFit, PlacementError, PlanError
from iron.ir import Node, Program, call_label, storage, tensor_inputs
from iron.plan import cost
from iron.plan.plan import Choice, Loop, Plan, Repeat
from iron.plan.rules import Decision, Rule

MAX_TRIED = 4   # runs tried, most groups covered first, before the design is left as it is
TIMED = "over time: one iteration placed, its cores looping"
SPACED = "in space: every iteration placed, one configuration"
REFUSED = (NotRepeated, PlanError, DoesNotFit, PlacementError)   # why a loop over time is not compiled


@dataclass(frozen=True)
class Abandoned:
    """The design spread in space, given up (`_enough`): at least `configurations` and `ns`, more than the loop."""

    configurations: int
    ns: float


@dataclass(frozen=True)
class Nested:
    """The rule `repeat_within_iteration`'s fact: the repeated block `inner` (`count` iterations)
    loops inside each iteration of `outer`, which placed whole is `refused`."""

    outer: str
    inner: str
    count: int
    refused: str

    def __str__(self) -> str:
        return (f"{self.count} iterations of {self.inner} loop inside each iteration of {self.outer}: "
                f"placed whole, {self.refused}")


# ---- choosing time or space --------------------------------------------------------------------

def choose_over_time(program: Program, device, groups: tuple[Group, ...], placements: tuple, padded: dict,
                     compile_groups: Callable, whole, spread: Callable) -> tuple[Plan | None, list[Decision]]:
    """The design with its longest repeated run over time when estimated faster than spread in
    space (`whole`: the whole design's Plan or why it did not fit; `spread()`: the segmented
    Plan), else None; and the rule's lines. `compile_groups(program, groups, placements,
    unfolding)` compiles the groups with one iteration placed."""
    lines: list[Decision] = []
    runs = find_runs(groups)[:MAX_TRIED]
    known = priced(whole) if runs and isinstance(whole, Plan) else None
    spaced_ns = plan_ns(whole) if known is not None else 0.0
    for run in runs:
        names = tuple(g.name for g in run.groups(groups, 0))
        label = _label(Repeat(names, run.count, ()))
        if known is not None and (floor := known.floor(names, run.count)) >= spaced_ns:
            choice = Choice(Rule.REPEAT_OVER_TIME, label, SPACED, spaced_ns, f"{TIMED}, at least", floor)
            return (replace(whole, choices=(*whole.choices, (names[0], choice))),
                    [(Rule.REPEAT_OVER_TIME, f"{label} spread in space, estimated faster (choices)")])
        try:
            plan, repeat, crossing = _looped(program, device, groups, run, placements, padded, compile_groups)
        except REFUSED as why:   # the longest run's reason (spread, a design that does not fit raises its own)
            lines = lines or [(Rule.REPEAT_OVER_TIME, f"{label} not run over time: {why}")]
            continue
        chosen, line = _chosen(plan, repeat, whole, spread, groups)
        return chosen, [*lines, *line, *(crossing if chosen.repeat is not None else ())]
    return None, lines


def _looped(program: Program, device, groups: tuple[Group, ...], run: Run, placements: tuple, padded: dict,
            compile_groups: Callable) -> tuple[Plan, Repeat, list[Decision]]:
    """`_over_time`: the iteration placed whole, or, refused so, with the block within it looping inside it."""
    try:
        return _over_time(program, device, groups, run, placements, padded, compile_groups)
    except REFUSED as whole:
        why = whole
    try:
        plan, repeat, lines = _over_time(program, device, groups, run, placements, padded, compile_groups, nested=True)
    except REFUSED:
        raise why from None
    fact = Nested(_names(repeat.groups), _names(repeat.inner.groups), repeat.inner.count, str(why))
    return plan, repeat, [*lines, (Rule.REPEAT_WITHIN_ITERATION, fact)]


def _over_time(program: Program, device, groups: tuple[Group, ...], run: Run, placements: tuple, padded: dict,
               compile_groups: Callable, nested: bool = False) -> tuple[Plan, Repeat, list[Decision]]:
    """The Plan running `run` over time, its Repeat and the lines saying which values cross between
    iterations through DDR, or NotRepeated; `nested`: the block within its iteration looping too."""
    inner = _inner(groups, run) if nested else None
    place = _places(groups, run)
    crossing, carried = _crossing(program, place, run)
    for k in range(run.count if inner else 0):   # within each iteration (the outer crossings are the rest)
        within = _within(run, inner, k)
        among = _places(groups, within, range(run.start + k * run.period, run.start + (k + 1) * run.period))
        more, carries = _crossing(program, among, within)
        crossing, carried = crossing + more, carried or (k == 0 and carries)
    crossing = list(dict.fromkeys(crossing))
    lines = []
    if crossing:
        if padded:
            raise NotRepeated("values cross between its iterations and the design lies padded (pad_to_block)")
        returned = _returned_last(program, place, run)
        lines = [(Rule.REPEAT_OVER_TIME, f"{', '.join(call_label(program, c) for c in crossing + returned)} cross "
                                         f"between iterations through DDR buffers of the compiler's "
                                         f"({', '.join(through_name(program, c) for c in crossing + returned)})"
                                         + ", the last iteration's returned by a Copy of its buffer" * bool(returned))]
        program = _copied_out(write_through(program, crossing + returned), program, returned)
        groups = fuse(program)
        placements = host_placements(program)
        run = next(iter(find_runs(groups)), None)
        if run is None:
            raise NotRepeated("its groups are no longer alike once values cross through DDR")
        inner = _inner(groups, run) if nested else None
    placed = run.groups(groups, 0)
    if inner is not None:
        placed = placed[:inner.start + inner.period] + placed[inner.start + inner.count * inner.period:]
    pairs = sharing(program, placed, device, placements)
    unfold, repeat = unfolding(program, groups, run, placements, padded)
    if inner is not None:
        unfolded = unfolding(program, groups, _within(run, inner, 0), placements, padded)
        unfold, repeat = replace(unfold, inner=unfolded[0]), replace(repeat, inner=unfolded[1])
    kept = groups[:run.start] + placed + groups[run.start + run.count * run.period:]
    unfold, repeat = replace(unfold, shared=pairs), replace(repeat, shared=cores_of(pairs))
    plan = compile_groups(program, kept, placements, unfold)
    if not isinstance(plan, Plan):
        raise NotRepeated(str(plan))
    if not any(c.group in repeat.groups and isinstance(c.program[0], Loop) and c.program[0].count == run.count
               for p in plan.configurations for c in p.cores):
        raise NotRepeated("no configuration holds a whole iteration")
    parts = [p for p in plan.configurations if any(c.group in repeat.groups and isinstance(c.program[0], Loop)
                                                   for c in p.cores)]
    if carried and len(parts) > 1:   # loop fission runs every iteration's first part before any second part
        raise NotRepeated(f"its iteration takes {len(parts)} configurations, each looping its part over every "
                          "iteration, but an iteration reads what the one before makes")
    return plan, repeat, lines


def _places(groups: tuple[Group, ...], run: Run, among: range | None = None) -> dict[Node, int]:
    """Each call's iteration of `run` (-1 before it, `run.count` after), of the groups `among` (or all)."""
    return {c: min(max(-1, (i - run.start) // run.period), run.count)
            for i in among or range(len(groups)) for c in groups[i].calls}


def _inner(groups: tuple[Group, ...], run: Run) -> Run:
    """The repeated block within `run`'s iteration (heads within a layer), or NotRepeated."""
    found = find_runs(run.groups(groups, 0))
    if not found:
        raise NotRepeated("its iteration holds no repeated block to loop within it")
    return found[0]


def _within(run: Run, inner: Run, k: int) -> Run:
    """`inner` within iteration k of `run`, placed in the whole design's groups."""
    return replace(inner, start=run.start + k * run.period + inner.start)


def _crossing(program: Program, place: dict[Node, int], run: Run) -> tuple[list[Node], bool]:
    """The results made before or in the run that another iteration (or after the run) reads, but the
    host's; and whether an iteration reads what an earlier one made (a layer's residual stream)."""
    found: dict[Node, None] = {}
    carries = False
    for reader, at in place.items():
        for node in tensor_inputs(reader):
            made = place.get(node)
            if made is not None and made != at and made < run.count and (made >= 0 or 0 <= at < run.count):
                found[node] = None
                carries = carries or 0 <= made < at < run.count
    return [c for c in found if c not in program.kept], carries


def _returned_last(program: Program, place: dict[Node, int], run: Run) -> list[Node]:
    """The design outputs the run's last iteration makes when no other makes one (a loop over
    layers returning the last one's): written through DDR, so the last iteration is alike the
    others, and returned by a Copy."""
    made = {place[o] for o in program.outputs if 0 <= place.get(o, -1) < run.count}
    if made != {run.count - 1}:
        return []
    return [o for o in dict.fromkeys(program.outputs) if place.get(o) == run.count - 1 and o not in program.carried_calls]


def _copied_out(program: Program, traced: Program, returned: list[Node]) -> Program:
    """`program` (`traced` written through DDR) returning a Copy of each of `returned`'s DDR buffers."""
    if not returned:
        return program
    buffers = {m.arg.name: m for m in program.memories}
    copies = {o: copied(buffers[through_name(traced, o)]) for o in returned}
    outputs = tuple(copies.get(o, n) for o, n in zip(traced.outputs, program.outputs))
    return replace(program, calls=(*program.calls, *copies.values()), outputs=outputs,
                   inserted=(*program.inserted, *copies.values()))


def _chosen(plan: Plan, repeat: Repeat, whole, spread: Callable, groups: tuple[Group, ...]) -> tuple[Plan, list[Decision]]:
    """The Plan of the loop or the spread design (`groups`), whichever is estimated faster (the
    spread one compiled only until it certainly takes longer), and the rule's line."""
    label = _label(repeat)
    timed = (TIMED, plan_ns(plan), plan)
    if isinstance(whole, Plan):
        spaced = (SPACED, plan_ns(whole), whole)
    else:
        least = max(2, -(-len(groups) // len(plan.device.compute_tiles)))   # a group per tile at most
        bound = cost.ddr_ns(cost.generation(plan.device), ddr_bytes(plan)) + reconfigure_ns(plan.device, least)   # the same bytes, and the loads
        spaced = (f"in space: at least {least} configurations", bound, None)
        if bound < timed[1]:
            segmented = spread(_enough(groups, plan.device, bound, timed[1]))
            spaced = (f"in space: at least {segmented.configurations} configurations", segmented.ns, None) \
                if isinstance(segmented, Abandoned) else \
                (f"in space: {len(segmented.configurations)} configurations", plan_ns(segmented), segmented)
    order = [spaced, timed] if isinstance(whole, Plan) else [timed, spaced]   # a tie keeps one configuration
    best, choice = cost.choose(Rule.REPEAT_OVER_TIME, label, order, lambda c: c[1], lambda c: c[0])
    chosen = replace(best[2], choices=(*best[2].choices, (repeat.groups[0], choice)))
    if best is not timed:
        return chosen, [(Rule.REPEAT_OVER_TIME, f"{label} spread in space, estimated faster (choices)")]
    text = (f"{label}: {', '.join(repeat.groups)} placed once, {repeat.count} iterations, each core looping "
            f"{repeat.count} times, the sequence moving each iteration's operands")
    return replace(chosen, repeat=repeat, rules=((Rule.REPEAT_OVER_TIME, text), *plan.rules)), []


def _enough(groups: tuple[Group, ...], device, bound: float, within: float) -> Callable:
    """`compile_segments`' test after each segment: Abandoned once the segments so far, a
    configuration per tiles' worth of groups left and DDR reading what they read (`_least_read`)
    take longer than `within`, the loop's estimate (`bound`: the floor under the spread design)."""
    gen, tiles = cost.generation(device), len(device.compute_tiles)
    done: list[float] = []
    left = _least_read(groups)

    def enough(plans: list[Plan], stop: int) -> Abandoned | None:
        done.extend(plan_ns(p) for p in plans[len(done):])
        least = len(plans) + -(-(len(groups) - stop) // tiles)
        ns = sum(done) + reconfigure_ns(device, least) + cost.ddr_ns(gen, left[stop])
        return Abandoned(least, max(ns, bound)) if ns > within else None
    return enough


def _least_read(groups: tuple[Group, ...]) -> list[int]:
    """By group k, the bytes the groups from k on certainly read from DDR (of each host tensor, its largest view)."""
    read: dict[Node, int] = {}
    total, found = 0, [0]
    for g in reversed(groups):
        for node in (n for c in g.calls for n in tensor_inputs(c) if storage(n).op in HOST):
            whole, size = storage(node), node.size * node.dtype.itemsize
            most = min(whole.size * whole.dtype.itemsize, max(read.get(whole, 0), size))
            total += most - read.get(whole, 0)
            read[whole] = most
        found.append(total)
    return found[::-1]


def _label(repeat: Repeat) -> str:
    within = f" ({_label(repeat.inner)} within each)" if repeat.inner is not None else ""
    return f"{repeat.count} iterations of {_names(repeat.groups)}{within}"


def _names(groups: tuple[str, ...]) -> str:
    return groups[0] if len(groups) == 1 else f"{groups[0]}..{groups[-1]}"
