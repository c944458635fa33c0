"""Repetition over time (the rule `repeat_over_time`): a block of fused groups traced several
times with the same kernels and shapes over other host tensors, or other parts of one (a Python
loop over row blocks, weight matrices, heads), is found in the group sequence (`find_runs`) and
may run as ONE placed iteration whose cores loop over the iterations (a `Loop(count)` around each
core's program) while the runtime sequence moves each iteration's operands at their own DDR
offsets: lowering translates iteration 0's moves (`Unfolding`). Whether it does is decided by
estimated time (priced.py) against spreading the iterations in space (more tiles, or more
configurations), as a `Choice` (`choose_over_time`); runs.py finds the runs, share_core.py
which groups of an iteration larger than the array share a core."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable

from iron.compiler import cost
from iron.compiler.allocate import host_placements
from iron.compiler.copies import copied
from iron.compiler.fuse import Group, fuse
from iron.compiler.priced import Priced, ddr_bytes, plan_ns, reconfigure_ns
from iron.compiler.runs import HOST, NotRepeated, Run, find_runs, placeless
from iron.compiler.sequence import Move
from iron.compiler.share_core import cores_of, sharing
from iron.compiler.through_ddr import through_name, write_through
from iron.compiler.words import Access, placement_access, view_words
from iron.errors import DoesNotFit, PlacementError, PlanError
from iron.ir import Node, Op, Program, call_label, describe, storage, tensor_inputs
from iron.plan.plan import Choice, HostRole, Loop, Plan, Repeat, Wait
from iron.plan.rules import Decision, Rule

MAX_TRIED = 4
TIMED = "over time: one iteration placed, its cores looping"
SPACED = "in space: every iteration placed, one configuration"   # runs tried, most groups covered first, before the design is left as it is
REFUSED = (NotRepeated, PlanError, DoesNotFit, PlacementError)   # why a loop over time is not compiled


@dataclass(frozen=True)
class Abandoned:
    """The design spread in space, its segments given up after the first few (`_enough`): it
    takes at least `configurations` and `ns` of estimated time, more than the loop."""

    configurations: int
    ns: float


@dataclass(frozen=True)
class Nested:
    """The rule `repeat_within_iteration`'s fact: the repeated block within iteration `outer`
    (`inner`, its groups from the first to the last, `count` iterations) loops inside each of
    its iterations, as the iteration placed whole is refused (`refused`: why)."""

    outer: str
    inner: str
    count: int
    refused: str

    def __str__(self) -> str:
        return (f"{self.count} iterations of {self.inner} loop inside each iteration of {self.outer}: "
                f"placed whole, {self.refused}")


@dataclass(frozen=True)
class Shift:
    """Where iteration 0's moves of one host operand lie (`buffer` words [first, first + span))
    and where iteration k's same moves lie (`to_buffer` from `to_first`)."""

    buffer: str
    first: int
    span: int
    to_buffer: str
    to_first: int


@dataclass(frozen=True)
class Unfolding:
    """What lowering needs to run a Run over time: iteration 0's group names, the count, per
    iteration its groups' calls (the states it touches, for the sequence's waits) and Shifts;
    `inner`: a block within iteration 0 run over time in turn inside each iteration (a loop over
    heads inside the loop over layers), its groups placed once and looping within the outer loop."""

    groups: tuple[str, ...]
    count: int
    calls: tuple[tuple[tuple[Node, ...], ...], ...]
    shifts: tuple[tuple[Shift, ...], ...]
    shared: tuple[tuple[str, str], ...] = ()   # (group, the earlier group whose core runs it too)
    inner: Unfolding | None = None

    def sites_and_moves(self, sites, moves: list[list]) -> tuple[list, list[list]]:
        """The sites and their moves in sequence order: iteration 0's sites here once per
        iteration, each with that iteration's calls and moves (a state write's patch word for the
        states' sink is given after, per state: `emit.sink_writes`); an inner block's sites first
        unfolded within iteration 0, then each of them so per iteration. A segment holding part of
        the iteration loops that part over every iteration before the next segment loops the
        rest (loop fission: what one part makes the next reads from DDR buffers of each
        iteration's own, or `moved` refuses it)."""
        if self.inner is not None:
            sites, moves = self.inner.sites_and_moves(sites, moves)
        at = [i for i, s in enumerate(sites) if s.group.name in self.groups]
        if not at:   # a segment without the iteration
            return list(sites), moves
        a, b = at[0], at[-1] + 1
        index = {calls[0]: j for j, calls in enumerate(self.calls[0])}   # an inner iteration's sites by their calls
        out_sites, out_moves = list(sites[:a]), list(moves[:a])
        for k in range(self.count):
            for i in range(a, b):
                calls = self.calls[k][index[sites[i].group.calls[0]]]
                out_sites.append(replace(sites[i], group=replace(sites[i].group, calls=calls)))
                waits = [w for w in _after_last(moves[i], k) if w not in moves[i]]   # an inner iteration's are there
                out_moves.append(waits + [self.moved(k, m) for m in moves[i]])
        return out_sites + list(sites[b:]), out_moves + list(moves[b:])

    def moved(self, k: int, move):
        """Iteration k's counterpart of iteration 0's `move`: the same words of its own operand
        (a Wait a grid puts between its rounds as it is)."""
        if not isinstance(move, Move):
            return move
        access: Access = move.access
        end = access.offset + _span(access.dims)
        hits = {(s.to_buffer, access.offset - s.first + s.to_first) for s in self._by_buffer[k].get(move.buffer, ())
                if s.first <= access.offset and end <= s.first + s.span}
        if len(hits) == 1:
            buffer, offset = hits.pop()
            return replace(move, buffer=buffer, access=replace(access, offset=offset))
        if not hits and move.buffer == HostRole.WORDS.value:
            return move   # per-call words: every iteration reads the same
        raise NotRepeated(f"{move.fifo} moves words {access.offset}.. of {move.buffer}, which "
                          f"{'no operand' if not hits else 'more than one operand'} of the iteration holds")

    @cached_property
    def _by_buffer(self) -> tuple[dict[str, list[Shift]], ...]:
        """Each iteration's Shifts by the buffer iteration 0's moves read (a long iteration has many)."""
        found: list[dict[str, list[Shift]]] = [{} for _ in self.shifts]
        for shifts, by in zip(self.shifts, found):
            for s in shifts:
                by.setdefault(s.buffer, []).append(s)
        return tuple(found)

    def looped(self, cores: list) -> list:
        """The cores, each of the iteration's (of the part of it a segment holds) looping `count`
        times over its program (an inner block's looping its own count within)."""
        cores = cores if self.inner is None else self.inner.looped(cores)
        return [replace(c, program=(Loop(self.count, c.program),)) if c.group in self.groups else c for c in cores]

    def loops(self, group: str) -> int:
        """How many times the core of `group` runs its program per launch."""
        inner = self.inner.loops(group) if self.inner is not None else 1
        return self.count * inner if group in self.groups else inner


def _after_last(moves: list, k: int) -> list[Wait]:
    """Before iteration k's moves of a site, a Wait on each FIFO the site's moves of iteration
    k - 1 took: every move of that iteration is queued by then, so they can finish, and each
    shim's buffer descriptors are freed an iteration at a time (a grid's last step waits on
    none: unrolled, a descriptor running out mid-step would wait on moves that cannot finish
    before the step's other moves are queued), while the other sites' moves of iteration k - 1
    still run beside them."""
    if k == 0:
        return []
    return [Wait(fifo) for fifo in dict.fromkeys(m.fifo for m in moves if isinstance(m, Move))]


# ---- an iteration's operands -------------------------------------------------------------------

def unfolding(program: Program, groups: tuple[Group, ...], run: Run, placements: tuple,
              padded: dict) -> tuple[Unfolding, Repeat]:
    """The Unfolding and Repeat of `run`, or NotRepeated saying why its iterations cannot share
    one placed iteration: every iteration must read and write only host tensors (and its own
    results), its operands alike iteration 0's in shape and access pattern, none padded."""
    first = _calls(run.groups(groups, 0))
    _check_reads(program, groups, run)
    named = {p.name: p for p in placements}
    extents: dict[Node, list] = {}   # iteration 0's, asked once per iteration

    def extent(node: Node) -> list[tuple[str, int, tuple]]:
        if node not in extents:
            extents[node] = _extents(program, named, node)
        return extents[node]
    calls, shifts, operands = [], [], []
    for k in range(run.count):
        mine = run.groups(groups, k)
        pairs: dict[Node, Node] = {}
        positions = ({c: i for i, c in enumerate(first)}, {c: i for i, c in enumerate(_calls(mine))})
        for a, b in zip(first, _calls(mine)):
            _pair(a, b, pairs, positions)
        if any(program.outputs.count(a) != program.outputs.count(b) for a, b in pairs.items() if a.op == Op.CALL):
            raise NotRepeated(f"iteration {k} returns other results than iteration 0")
        leaves = [(a, b) for a, b in pairs.items() if _is_leaf(program, a)]
        if any(a in padded or b in padded for a, b in leaves):
            raise NotRepeated("an operand lies padded (pad_to_block)")
        shifts.append(tuple(s for a, b in leaves for s in _shifts(extent, a, b)))
        operands.append(tuple(_operand_text(program, b) for _, b in leaves))
        calls.append(tuple(g.calls for g in mine))
    names = tuple(g.name for g in run.groups(groups, 0))
    return (Unfolding(names, run.count, tuple(calls), tuple(shifts)),
            Repeat(names, run.count, tuple(operands)))


def _operand_text(program: Program, node: Node) -> str:
    """A host operand as texts name it: a design output by its placement (`out3`), else the user's text."""
    if node.op == Op.CALL:
        return ", ".join(f"out{i}" for i, o in enumerate(program.outputs) if o is node)
    return describe(node)


def _calls(groups: tuple[Group, ...]) -> tuple[Node, ...]:
    return tuple(c for g in groups for c in g.calls)


def _check_reads(program: Program, groups: tuple[Group, ...], run: Run):
    """Every iteration's results are read only within it, by the host or by no one."""
    iteration = {c: k for k in range(run.count) for c in _calls(run.groups(groups, k))}
    for group in groups:
        for call in group.calls:
            for node in tensor_inputs(call):
                if node in iteration and iteration.get(call) != iteration[node]:
                    raise NotRepeated(f"{call_label(program, call)} reads {call_label(program, node)}, made by "
                                      f"iteration {iteration[node]}")
            if call in iteration:
                outside = [n for n in tensor_inputs(call) if n.op == Op.CALL and n not in iteration]
                if outside:
                    raise NotRepeated(f"{call_label(program, call)} reads {call_label(program, outside[0])}, made "
                                      "before the block")
    if any(v.op == Op.ELEM and v.src[0] in iteration for _, v in program.carry):
        raise NotRepeated("an iteration makes a carried element")


def _pair(a: Node, b: Node, pairs: dict, positions: tuple[dict, dict]):
    """Match iteration 0's node `a` with iteration k's `b`, or NotRepeated."""
    if a in pairs:
        if pairs[a] is not b:
            raise NotRepeated(f"{describe(a, 0)} stands for two tensors of a later iteration")
        return
    pairs[a] = b
    if a is b and a.op != Op.CALL:   # the same tensor in both iterations (a call: iteration 0 itself)
        return
    if a.is_scalar and _same_scalar(a, b):   # `pos + 1` traced again in every iteration
        return
    hosts = a.op in HOST and b.op in HOST   # any host tensor: an input, a weight, a DDR buffer
    if (a.op != b.op and not hosts) or a.shape != b.shape or a.dtype != b.dtype or a.is_scalar:
        raise NotRepeated(f"{describe(a, 0)} and {describe(b, 0)} differ")
    if hosts:
        return
    if a.op == Op.CALL:
        if positions[0].get(a) != positions[1].get(b) or not _same(a.arg, b.arg):
            raise NotRepeated(f"{describe(a, 0)} and {describe(b, 0)} differ")
    elif a.op == Op.VIEW:
        if placeless(a.arg) != placeless(b.arg) or not all(map(_same_scalar, a.src[1:], b.src[1:])):
            raise NotRepeated(f"{describe(a)} and {describe(b)} are different views")
        if storage(a).op != Op.CALL:
            return
    for s, t in zip(a.src, b.src):
        _pair(s, t, pairs, positions)


def _same_scalar(a: Node, b: Node) -> bool:
    """Whether two scalar expressions compute the same per-call value: alike op for op down to the
    same per-call values (an element of a tensor only when the same one)."""
    if a is b:
        return True
    if a.op != b.op or a.op in (Op.ELEM, Op.VAR) or not _same(a.arg, b.arg):
        return False
    return all(_same_scalar(x, y) for x, y in zip(a.src, b.src))


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except ValueError:   # an attr holding an array: alike only when the same
        return a is b


def _is_leaf(program: Program, node: Node) -> bool:
    """A host operand a move reads or writes: a host tensor, a view of one, a design output."""
    if node.op == Op.VIEW:
        return storage(node).op in (Op.INPUT, Op.MEMORY)
    return node.op in (Op.INPUT, Op.MEMORY) or (node.op == Op.CALL and node in program.outputs)


def _shifts(extent: Callable, a: Node, b: Node) -> list[Shift]:
    """Where the moves of operand `a` of iteration 0 lie, and those of `b`, its counterpart
    (`extent`: `_extents` of a node)."""
    mine, theirs = extent(a), extent(b)
    if len(mine) != len(theirs) or any(x[2] != y[2] for x, y in zip(mine, theirs)):
        raise NotRepeated(f"{describe(a, 0)} and {describe(b, 0)} are moved by different patterns")
    return [Shift(x[0], x[1], _span(x[2]), y[0], y[1]) for x, y in zip(mine, theirs)]


def _extents(program: Program, named: dict, node: Node) -> list[tuple[str, int, tuple]]:
    """(buffer, first word, word dims) of each host region holding `node`."""
    if node.op == Op.CALL:
        places = [named[f"out{i}"] for i, o in enumerate(program.outputs) if o is node]
        return [(p.buffer, p.offset, placement_access(p).dims) for p in places]
    p = named[storage(node).arg.name]
    if p.padded is not None and p.padded[1:] != p.shape[1:] or p.lead:   # rows padded after the last leave the rest
        raise NotRepeated(f"{p.name} lies padded in host memory")
    if node.op != Op.VIEW:
        return [(p.buffer, p.offset, placement_access(p).dims)]
    static, dims, _ = view_words(node, p.padded, p.word_rows, p.lead)
    if static % 4:
        raise NotRepeated(f"{describe(node)} starts inside a word")
    return [(p.buffer, p.offset + static // 4, tuple(dims))]


def _span(dims) -> int:
    """The words from a pattern's first to just after its last."""
    return 1 + sum((size - 1) * stride for size, stride in dims)


# ---- choosing time or space --------------------------------------------------------------------

def choose_over_time(program: Program, device, groups: tuple[Group, ...], placements: tuple, padded: dict,
                     compile_groups: Callable, whole, spread: Callable) -> tuple[Plan | None, list[Decision]]:
    """The design with its longest repeated run over time when the cost model estimates that
    faster than spreading it in space (`whole`: the whole design's Plan, or why it did not fit
    one configuration; `spread()`: the segmented Plan), else None; and the rule's lines.
    `compile_groups(program, groups, placements, unfolding)` runs the passes on the groups with
    one iteration."""
    lines: list[Decision] = []
    runs = find_runs(groups)[:MAX_TRIED]
    priced = Priced.of(whole) if runs and isinstance(whole, Plan) else None
    spaced_ns = plan_ns(whole) if priced is not None else 0.0
    for run in runs:
        names = tuple(g.name for g in run.groups(groups, 0))
        label = _label(Repeat(names, run.count, ()))
        floor = priced.floor(names, run.count) if priced is not None else 0.0
        if priced is not None and floor >= spaced_ns:
            choice = Choice(Rule.REPEAT_OVER_TIME, label, SPACED, spaced_ns, f"{TIMED}, at least", floor)
            return (replace(whole, choices=(*whole.choices, (names[0], choice))),
                    [(Rule.REPEAT_OVER_TIME, f"{label} spread in space, estimated faster (choices)")])
        try:
            plan, repeat, crossing = _looped(program, device, groups, run, placements, padded, compile_groups)
        except REFUSED as why:   # the longest run's reason; spread
            # in space, a design that does not fit raises its own refusal, not one of the loop's
            lines = lines or [(Rule.REPEAT_OVER_TIME, f"{label} not run over time: {why}")]
            continue
        chosen, line = _chosen(plan, repeat, whole, spread, groups)
        return chosen, [*lines, *line, *(crossing if chosen.repeat is not None else ())]
    return None, lines


def _looped(program: Program, device, groups: tuple[Group, ...], run: Run, placements: tuple, padded: dict,
            compile_groups: Callable) -> tuple[Plan, Repeat, list[Decision]]:
    """`_over_time`: the iteration placed whole, or, when it is refused so (more groups than the
    array holds, even sharing cores), with the repeated block within it looping inside it."""
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
    """The Plan running `run` over time, its Repeat and the lines saying which values cross
    between iterations through DDR (`write_through`, then fused again), or NotRepeated; `nested`:
    the repeated block within its iteration (`_inner`) run over time too, inside each iteration."""
    inner = _inner(groups, run) if nested else None
    carried = _carries(program, _places(groups, run), run) or (
        inner is not None and _carries(program, _places(groups, _within(run, inner, 0)), _within(run, inner, 0)))
    crossing = _crossing(program, _places(groups, run), run)
    for k in range(run.count if inner else 0):   # within each iteration (the outer crossings are the rest)
        within = range(run.start + k * run.period, run.start + (k + 1) * run.period)
        crossing += _crossing(program, _places(groups, _within(run, inner, k), within), _within(run, inner, k))
    crossing = list(dict.fromkeys(crossing))
    lines = []
    if crossing:
        if padded:
            raise NotRepeated("values cross between its iterations and the design lies padded (pad_to_block)")
        returned = _returned_last(program, _places(groups, run), run)
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


def _carries(program: Program, place: dict[Node, int], run: Run) -> bool:
    """Whether an iteration of `run` reads what an earlier one made (a layer's residual stream)."""
    return any(0 <= place.get(n, -1) < at < run.count for reader, at in place.items() for n in tensor_inputs(reader))


def _places(groups: tuple[Group, ...], run: Run, among: range | None = None) -> dict[Node, int]:
    """Each call's iteration of `run` (-1 before the run, `run.count` after it), of the groups
    `among` (all when None)."""
    return {c: min(max(-1, (i - run.start) // run.period), run.count)
            for i in among or range(len(groups)) for c in groups[i].calls}


def _inner(groups: tuple[Group, ...], run: Run) -> Run:
    """The repeated block within `run`'s iteration (a loop over heads within a layer), placed from
    the iteration's first group; NotRepeated when there is none."""
    found = find_runs(run.groups(groups, 0))
    if not found:
        raise NotRepeated("its iteration holds no repeated block to loop within it")
    return found[0]


def _within(run: Run, inner: Run, k: int) -> Run:
    """`inner` within iteration k of `run`, placed in the whole design's groups."""
    return replace(inner, start=run.start + k * run.period + inner.start)


def _crossing(program: Program, place: dict[Node, int], run: Run) -> list[Node]:
    """The results made before or in the run that a call of another iteration (or after the run)
    reads, but those the host reads (outputs, carried elements): they cross through DDR. `place`:
    each call's iteration (-1 before the run, `run.count` after it)."""
    kept = {*program.outputs, *(v.src[0] for _, v in program.carry if v.op == Op.ELEM)}
    found: dict[Node, None] = {}
    for reader, at in place.items():
        for node in tensor_inputs(reader):
            made = place.get(node)
            if made is not None and made != at and made < run.count and (made >= 0 or 0 <= at < run.count):
                found[node] = None
    return [c for c in found if c not in kept]


def _returned_last(program: Program, place: dict[Node, int], run: Run) -> list[Node]:
    """The design outputs the run's last iteration makes when no other iteration makes one (a
    loop over layers returning the last one's result): written through DDR like the values the
    other iterations pass on, so the last iteration is alike them, and returned by a Copy."""
    made = {place[o] for o in program.outputs if 0 <= place.get(o, -1) < run.count}
    carried = {v.src[0] for _, v in program.carry if v.op == Op.ELEM}
    if made != {run.count - 1}:
        return []
    return [o for o in dict.fromkeys(program.outputs) if place.get(o) == run.count - 1 and o not in carried]


def _copied_out(program: Program, traced: Program, returned: list[Node]) -> Program:
    """`program` (`traced` written through DDR) returning a Copy of each of `returned`'s DDR
    buffers in its place, the Copies appended to the calls."""
    if not returned:
        return program
    buffers = {m.arg.name: m for m in program.memories}
    copies = {o: copied(buffers[through_name(traced, o)]) for o in returned}
    outputs = tuple(copies.get(o, n) for o, n in zip(traced.outputs, program.outputs))
    return replace(program, calls=(*program.calls, *copies.values()), outputs=outputs,
                   inserted=(*program.inserted, *copies.values()))


def _chosen(plan: Plan, repeat: Repeat, whole, spread: Callable, groups: tuple[Group, ...]) -> tuple[Plan, list[Decision]]:
    """The Plan of the loop or the spread design, whichever the cost model estimates faster
    (`groups`: those the spread design places; its segments compiled only until they certainly
    take longer than the loop), and the rule's line."""
    gen = cost.generation(plan.device)
    label = _label(repeat)
    timed = (TIMED, plan_ns(plan), plan)
    if isinstance(whole, Plan):
        spaced = (SPACED, plan_ns(whole), whole)
    else:
        least = max(2, -(-len(groups) // len(plan.device.compute_tiles)))   # a group per tile at most
        bound = cost.ddr_ns(gen, ddr_bytes(plan)) + reconfigure_ns(plan.device, least)   # the same bytes, and the loads
        spaced = (f"in space: at least {least} configurations", bound, None)
        if bound < timed[1]:
            segmented = spread(_enough(groups, plan.device, bound, timed[1]))
            spaced = (f"in space: at least {segmented.configurations} configurations", segmented.ns, None) \
                if isinstance(segmented, Abandoned) else \
                (f"in space: {len(segmented.configurations)} configurations", plan_ns(segmented), segmented)
    order = [spaced, timed] if isinstance(whole, Plan) else [timed, spaced]   # a tie keeps one configuration
    best, choice = cost.choose(Rule.REPEAT_OVER_TIME, label, order, lambda c: c[1], lambda c: c[0])
    if best is not timed:
        spaced_plan = best[2]
        return (replace(spaced_plan, choices=(*spaced_plan.choices, (repeat.groups[0], choice))),
                [(Rule.REPEAT_OVER_TIME, f"{label} spread in space, estimated faster (choices)")])
    text = (f"{label}: {', '.join(repeat.groups)} placed once, {repeat.count} iterations, each core looping "
            f"{repeat.count} times, the sequence moving each iteration's operands")
    return replace(plan, repeat=repeat, choices=(*plan.choices, (repeat.groups[0], choice)),
                   rules=((Rule.REPEAT_OVER_TIME, text), *plan.rules)), []


def _enough(groups: tuple[Group, ...], device, bound: float, within: float) -> Callable:
    """`compile_segments`' test after each segment: Abandoned once the segments so far (`plan_ns`,
    the loads between them), a configuration for every 32 groups left (a group per tile at most)
    and DDR reading what the groups left read (`_least_read`) take longer than `within`, the
    loop's estimate (`bound`: the floor under the whole spread design, when higher)."""
    gen, tiles = cost.generation(device), len(device.compute_tiles)
    done: list[float] = []

    def enough(plans: list[Plan], stop: int) -> Abandoned | None:
        done.extend(plan_ns(p) for p in plans[len(done):])
        least = len(plans) + -(-(len(groups) - stop) // tiles)
        ns = sum(done) + reconfigure_ns(device, least) + cost.ddr_ns(gen, _least_read(groups[stop:]))
        return Abandoned(least, max(ns, bound)) if ns > within else None
    return enough


def _least_read(groups: tuple[Group, ...]) -> int:
    """The bytes `groups` certainly read from DDR: of each host tensor they read, all of it or
    its largest view read."""
    read: dict[Node, int] = {}
    for node in (n for g in groups for c in g.calls for n in tensor_inputs(c) if storage(n).op in HOST):
        whole, size = storage(node), node.size * node.dtype.itemsize
        read[whole] = min(whole.size * whole.dtype.itemsize, max(read.get(whole, 0), size))
    return sum(read.values())


def _label(repeat: Repeat) -> str:
    within = f" ({_label(repeat.inner)} within each)" if repeat.inner is not None else ""
    return f"{repeat.count} iterations of {_names(repeat.groups)}{within}"


def _names(groups: tuple[str, ...]) -> str:
    return groups[0] if len(groups) == 1 else f"{groups[0]}..{groups[-1]}"
