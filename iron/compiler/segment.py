"""Segments: a graph too big for the device at once runs as a sequence of configurations within
one call (docs/platform.md section 7). Its groups are cut, in program order, into segments that
each compile by the same passes as a whole design (the rule `fewest_bytes_cut`; a probe alike an
earlier one is answered by it, `same_structure_same_fit`; the search stops once the cut is
settled, `settle_the_cut`). A value crossing a cut goes through a DDR buffer of the compiler's (a
CUT placement after the outputs). Every segment addresses the design's host buffers and one
scratchpad of words; only the last has the Emit (a carried element an earlier segment made is
copied into it: `carry_from_earlier_segment`), or the Emit is a segment of its own (`emit_own_segment`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from iron.compiler.allocate import host_buffers, host_placements
from iron.compiler.copies import carry_from_earlier_segment
from iron.compiler.fuse import Group
from iron.compiler.layout import Layouts, explained, refusal
from iron.compiler.repeat import Abandoned
from iron.compiler.runs import group_structures
from iron.compiler.shims import ShimShortfall
from iron.compiler.words import WordTable
from iron.errors import DoesNotFit
from iron.ir import Input, Node, Op, Program, call_label, nbytes
from iron.plan import cost
from iron.plan.invariants import check_plan
from iron.plan.plan import Choice, Cut, Fill, HostRole, Placement, PlacementKind, Plan
from iron.plan.rules import Decision, Rule, TooLarge

CUT_WINDOW = 4   # a segment may end anywhere in the last 1/CUT_WINDOW of the groups that fit


@dataclass(frozen=True)
class Segment:
    """Groups [start, stop) of the design, run as one configuration; `emit_cut`: without the Emit."""

    start: int
    stop: int
    emit_cut: bool = False


def compile_segments(program: Program, device, groups: tuple[Group, ...], feeds: Plan | None,
                     try_groups: Callable, whole: Exception | ShimShortfall, padding: Layouts,
                     apart: frozenset[int] = frozenset(),
                     enough: Callable[[list[Plan], int], Abandoned | None] | None = None) -> Plan | Abandoned:
    """The design as segments that each compile (`try_groups`: the whole-design passes, a Plan or
    what refuses it); `whole`: what refused the whole design, raised as it is when there is
    nothing to cut. Each segment compiles against the words and DDR buffers of those before it,
    and the one kept is checked as it is. No segment ends before a group in `apart` (an iteration
    looped over time stays whole). `enough(plans, stop)`, asked after each segment but the last,
    gives the search up when the design certainly takes longer than its alternative."""

    flow = Flow(program, groups, padding.lies, apart)

    def refused() -> Exception:   # why the one group does not fit, found again only when shown
        error = whole if isinstance(whole, Exception) else \
            try_groups(program, groups, device, feeds, None, flow.host, bound=False)
        return explained(error, groups and refusal(program, groups, groups[0], device, padding))

    if len(groups) < 2 and not program.carry:
        raise refused()

    def compile_one(segment: Segment, words: WordTable, placements, bound: bool):
        return try_groups(*flow.segment_program(segment), device, feeds, words,
                          flow.segment_placements(segment, placements), bound=bound)

    known: dict[tuple, tuple] = {}   # same_structure_same_fit: a structure's probe outcome and `likely` hint

    def search(alike: dict[tuple, Plan] | None):
        """The segments, their Plans (checked), the words, the crossing values after the last and
        the cuts' Choices; with `alike` (the design only priced), a segment of a structure kept
        before stands in by that one's Plan, unchecked, and the search may be given up."""
        table, crossing, plans, segments = WordTable(program), [], [], []
        choices: dict = {}   # segment start -> its cut's Choice
        while not segments or not flow.last(segments[-1]):
            start = segments[-1].stop if segments else 0
            guess = segments[-1].stop - segments[-1].start if segments else None
            likely = {len(groups): whole.groups} if not segments and isinstance(whole, ShimShortfall) else {}
            found = _next_segment(flow, start, guess, table, crossing, compile_one, known, likely, device, choices,
                                  alike)
            if isinstance(found, Exception):
                raise refused() if start == 0 and len(groups) < 2 else _unfit(flow, start, found, device, padding)
            segment, plan, table, crossing = found
            plans.append(plan)
            segments.append(segment)
            if alike is None:
                check_plan(plan)
            elif not flow.last(segment) and (given_up := enough(plans, segment.stop)) is not None:
                return given_up
        return segments, plans, table, crossing, choices

    found = search(None if enough is None else {})
    if isinstance(found, Abandoned):
        return found
    if len(set(map(id, found[1]))) < len(found[1]):   # the design spread completes: stand-ins compiled for real
        found = search(None)
    elif enough is not None:
        for plan in found[1]:
            check_plan(plan)
    segments, plans, table, crossing, choices = found
    placements, words, emit = flow.placements(crossing), table.defs(), plans[-1].emit
    buffers = host_buffers(placements, len(words), emit, device.full_elf)
    plans = [replace(p, host_buffers=buffers, words=words) for p in plans]
    cuts = tuple(flow.cut(s.stop) for s in segments[:-1])
    return Plan(
        device=device, name=program.name, full_elf=device.full_elf, image=plans[0].image, tiles=(),
        host_buffers=buffers, placements=placements, fifos=(), links=(), buffers=(), functions=(), cores=(),
        sequence=(), words=words, emit=emit, carry=plans[-1].carry,
        groups=tuple(g for p in plans for g in p.groups),
        rules=(*(_cut_rule(flow, s, c, device) for s, c in zip(segments, cuts)),
               *flow.carry_rules(segments[-1]),
               *(r for p in plans for r in p.rules)),
        holds={k: v for p in plans for k, v in p.holds.items()},
        closed_by={k: v for p in plans for k, v in p.closed_by.items()},
        segments=tuple(plans), cuts=cuts,
        choices=tuple((f"cut before {c.before}", choices[s.start]) for s, c in zip(segments, cuts) if choices.get(s.start)),
    )


def _next_segment(flow: Flow, start: int, guess: int | None, table: WordTable, crossing: list[Node],
                  compile_one, known: dict[tuple, tuple], likely: dict[int, int], device, choices: dict,
                  alike: dict[tuple, Plan] | None = None):
    """(the Segment, its Plan, the words and the crossing values after it) `fewest_bytes_cut`
    picks from group `start` (or `emit_own_segment`'s), or why group `start` alone does not
    compile. Each probe compiles against a copy of the words so far, so the one kept is final; a
    probe of a structure probed before (`known`) is answered without compiling; `likely`: by
    refused stop, the stop a `shim_channels_bound` refusal says likely fits; `alike`: the Plan
    kept for each structure, which a segment of the same structure takes uncompiled."""
    tried: dict[Segment, tuple] = {}
    count = len(flow.groups)

    def crossed(segment: Segment) -> list[Node]:
        return crossing + [n for n in flow.crossing(segment.stop) if n not in crossing]

    def attempt(segment: Segment, bound: bool = True):
        words = table.copy()
        values = crossed(segment)
        outcome = compile_one(segment, words, flow.placements(values), bound)
        if isinstance(outcome, Plan):
            tried[segment] = (segment, outcome, words, values)
        elif isinstance(outcome, ShimShortfall):
            likely[segment.stop] = start + outcome.groups
        return outcome

    def fits(stop: int) -> bool:
        if start == 0 and flow.last(Segment(start, stop)):
            return False   # the whole design, refused before it was cut
        key = flow.structure(Segment(start, stop))
        if key is None:
            return isinstance(attempt(Segment(start, stop)), Plan)
        if key not in known:
            outcome = attempt(Segment(start, stop))
            known[key] = isinstance(outcome, Plan), outcome.groups if isinstance(outcome, ShimShortfall) else None
        fit, hint = known[key]
        if hint is not None:
            likely[stop] = start + hint
        return fit

    def kept(segment: Segment):
        key = flow.structure(segment) if alike is not None else None
        if alike is not None and key in alike:
            return segment, alike[key], table, crossed(segment)
        if segment not in tried:   # else a probe of the same structure answered for this one
            outcome = attempt(segment, bound=False)
            if not isinstance(outcome, Plan):
                return outcome
        if key is not None:
            alike[key] = tried[segment][1]
        return tried[segment]

    if start == count:   # the Emit, cut off the segment before
        return kept(Segment(count, count))
    most = max(len(device.compute_tiles), len(flow.apart) + 2)   # or more: a looped iteration's groups sharing cores
    stop, choices[start] = fewest_bytes_cut(flow, start, fits, guess, most, likely, device=device)
    if stop is None and start + 1 == count and flow.program.carry:
        cut_off = Segment(start, count, emit_cut=True)
        if isinstance(attempt(cut_off), Plan):
            return tried[cut_off]
    return kept(Segment(start, start + 1 if stop is None else stop))   # None: the error, as the passes raise it


def _cut_rule(flow: Flow, segment: Segment, cut: Cut, device) -> Decision:
    text = f"cut before {cut.before}: {cut.nbytes} bytes cross ({', '.join(cut.values) or 'nothing'})"
    if not segment.emit_cut:
        return Rule.FEWEST_BYTES_CUT, text
    return Rule.EMIT_OWN_SEGMENT, (f"{flow.groups[segment.start].name} fits {device.name} only without the Emit, "
                                   f"which runs after it in a segment of its own; {text}")


def fewest_bytes_cut(flow: Flow, start: int, fits: Callable[[int], bool], guess: int | None = None,
                     tiles: int | None = None, likely: dict[int, int] | None = None, *,
                     device) -> tuple[int | None, Choice | None]:
    """The rule: the segment from group `start` takes the most groups that compile, then ends
    at the cut among the last 1/CUT_WINDOW of them of the least estimated time (the crossing
    values written to DDR and read back; the latest on a tie), with that Choice; the last segment
    takes all that is left when it fits (no Choice). None when group `start` alone does not fit.
    The search (`settle_the_cut`): a segment shorter than one that fits fits too, so it probes
    only until the cut is the same for every most that may fit, first the stop after the most
    that likely fit (`likely`, or the previous segment's `guess` groups). At most `tiles` fit."""
    count, likely = len(flow.groups), likely if likely is not None else {}
    good, bad = start, count + 1 if tiles is None else min(count + 1, start + tiles + 1)
    gen = cost.generation(device)

    def cut(most: int) -> tuple[int, Choice | None]:
        if most == count:
            return count, None
        window = [c for c in range(most, most - (most - start) // CUT_WINDOW - 1, -1) if c not in flow.apart]
        window = window or [max((c for c in range(start + 1, most) if c not in flow.apart), default=most)]
        return cost.choose(Rule.FEWEST_BYTES_CUT, "cut", window, lambda c: cost.ddr_ns(gen, 2 * flow.crossing_bytes(c)),
                           flow.cut_label)

    def probe(stop: int):
        nonlocal good, bad
        if fits(stop):
            good = stop
        else:
            bad = stop

    if guess is not None and good < start + guess + 1 < bad:
        probe(start + guess + 1)
    while bad - good > 1:
        cuts = [cut(most) for most in range(good, bad)] if good > start else []
        if len({stop for stop, _ in cuts}) == 1:
            return cuts[-1]
        most = likely.get(bad, bad - 1)
        chosen = most + 1 if good < most < bad - 1 else cut(bad - 1)[0]
        probe(chosen if chosen > good else (good + bad) // 2)
    return cut(good) if good > start else (None, None)


def _unfit(flow: Flow, start: int, alone: Exception, device, padding: Layouts) -> Exception:
    """Group `start` alone does not compile: DoesNotFit (`TooLarge`) naming its kernels, its own
    refusal and why pad_to_block did not pad it, or the group's own refusal when that is not
    about size (a misaligned index, say), which no cut mends."""
    if not isinstance(alone, DoesNotFit):
        return alone
    group = flow.groups[start]
    why = refusal(flow.program, flow.groups, group, device, padding)
    told = explained(alone, why)
    return DoesNotFit.of(TooLarge(flow.program.name, device.name, tuple(call_label(flow.program, c) for c in group.calls),
                                  group.name, told.fact or str(told), None if told is not alone else why))


class Flow:
    """Where each call's result is made and read, by group index: what crosses each cut."""

    def __init__(self, program: Program, groups: tuple[Group, ...], lies: dict | None = None,
                 apart: frozenset[int] = frozenset()):
        self.program, self.groups, self.lies, self.apart = program, groups, lies or {}, apart
        self.padded = {n: lie.shape for n, lie in self.lies.items()}
        self.host = host_placements(program, self.padded)
        self.where = {c: (i, k) for i, g in enumerate(groups) for k, c in enumerate(g.calls)}   # made in group i
        self.last_read = {n: i for i, g in enumerate(groups) for call in g.calls for n in _calls_read(call.src)}
        self.last_read |= {n: len(groups) for _, value in program.carry for n in _calls_read((value,))}
        self._crossing = self._sweep()
        self._bytes: dict[int, int] = {}
        self.structures = group_structures(groups, self.where)

    def crossing(self, cut: int) -> list[Node]:
        """Results made before group `cut` and read from it on, in program order."""
        return self._crossing[cut]

    def _sweep(self) -> list[list[Node]]:
        """`crossing` of every cut in one pass: from the cut after a result's group to its last reader's."""
        found: list[list[Node]] = [[] for _ in range(len(self.groups) + 1)]
        for node, (i, _) in self.where.items():   # in program order
            for cut in range(i + 1, self.last_read.get(node, -1) + 1):
                found[cut].append(node)
        return found

    def crossing_bytes(self, cut: int) -> int:
        """The bytes of the DDR buffers of the values crossing a cut: their own, or padded (`pad_to_block`)."""
        if cut not in self._bytes:   # asked for every cut of every window the search weighs
            self._bytes[cut] = sum(nbytes(n) if n not in self.padded else math.prod(self.padded[n]) * n.dtype.itemsize
                                   for n in self.crossing(cut))
        return self._bytes[cut]

    def structure(self, segment: Segment) -> tuple | None:
        """The rule `same_structure_same_fit`: two segments (not the last, which carries) compile
        alike when their groups have the same structures and send out results from the same places."""
        if self.last(segment):
            return None
        places = tuple((self.where[n][0] - segment.start, self.where[n][1]) for _, n in self._sent(segment))
        return self.structures[segment.start:segment.stop], places

    def cut_name(self, node: Node) -> str:
        return f"cut.{call_label(self.program, node)}"

    def placements(self, crossing: list[Node]) -> tuple[Placement, ...]:
        """The design's host placements, then a CUT placement per value in `crossing` (an output's on its bytes)."""
        used = max((p.offset + p.nwords for p in self.host if p.buffer == HostRole.OUTPUTS.value), default=0)
        cuts = []
        for node in crossing:
            if node in self.program.outputs:
                output = next(p for p in self.host if p.name == f"out{self.program.outputs.index(node)}")
                cuts.append(replace(output, name=self.cut_name(node), kind=PlacementKind.CUT))
            else:
                fill = self.lies[node].fill if node in self.lies else Fill.ZEROS
                cuts.append(Placement(self.cut_name(node), PlacementKind.CUT, HostRole.OUTPUTS.value, used, node.shape,
                                      node.dtype, padded=self.padded.get(node), fill=fill))
                used += cuts[-1].nwords
        return (*self.host, *cuts)

    def last(self, segment: Segment) -> bool:
        return segment.stop == len(self.groups) and not segment.emit_cut

    def segment_placements(self, segment: Segment, every: tuple[Placement, ...]) -> tuple[Placement, ...]:
        """What a segment's passes see: host tensors, the CUT placements (read as inputs), what it
        writes (`_sent`) renamed `out<i>`, and the carried elements (last only)."""
        by_name = {p.name: p for p in every}
        kept = [p for p in every if p.kind in (PlacementKind.WEIGHT, PlacementKind.PARAM, PlacementKind.STATE,
                                                PlacementKind.INPUT, PlacementKind.CUT)]
        if self.last(segment):
            kept += [p for p in every if p.kind is PlacementKind.CARRY]
        outputs = [by_name[name] for name, _ in self._sent(segment)]
        kept += [replace(p, name=f"out{i}", kind=PlacementKind.OUTPUT, shown=p.name) for i, p in enumerate(outputs)]
        return tuple(kept)

    def _sent(self, segment: Segment) -> list[tuple[str, Node]]:
        """What a segment writes, by its host placement's name: the design's outputs it makes (the
        last: and those no call makes), then the values a later segment reads and the host does not."""
        mine, last, outputs = self._mine(segment), self.last(segment), self.program.outputs
        made = [(f"out{i}", n) for i, n in enumerate(outputs) if n in mine or (last and n not in self.where)]
        return made + [(self.cut_name(n), n) for n in self.crossing(segment.stop) if n in mine and n not in outputs]

    def _mine(self, segment: Segment) -> set[Node]:
        return {c for g in self.groups[segment.start:segment.stop] for c in g.calls}

    def segment_program(self, segment: Segment) -> tuple[Program, tuple[Group, ...]]:
        """The segment as a Program of its own (values made earlier read as inputs) and its groups."""
        program, mine, last = self.program, self._mine(segment), self.last(segment)
        memo: dict[Node, Node] = {}

        def rebuilt(node: Node) -> Node:
            if node not in memo:
                if node.op == Op.CALL and node not in mine:
                    memo[node] = Node(Op.INPUT, (), node.shape, node.dtype, Input(self.cut_name(node), -1))
                else:
                    src = tuple(rebuilt(s) for s in node.src)   # a node is the same when its sources are
                    memo[node] = node if src == node.src else Node(node.op, src, node.shape, node.dtype, node.arg)
            return memo[node]

        calls = tuple(rebuilt(c) if c in mine else c for c in program.calls)
        outputs = [rebuilt(n) for _, n in self._sent(segment)]
        carry = tuple((name, rebuilt(v)) for name, v in program.carry) if last else ()
        groups = tuple(Group(g.name, tuple(memo[c] for c in g.calls), g.closed_by)
                       for g in self.groups[segment.start:segment.stop])
        inputs = dict.fromkeys(n for n in memo.values() if n.op == Op.INPUT)   # in the order first read
        ordered = [n for n in program.inputs if n in inputs] + [n for n in inputs if n not in program.inputs]
        sub = replace(program, inputs=tuple(ordered), calls=calls, outputs=tuple(outputs), carry=carry)
        if not last:
            return sub, groups
        return carry_from_earlier_segment(sub, groups, [memo[n] for n in self.carried_from_earlier(segment)],
                                          f"g{len(self.groups)}")

    def carried_from_earlier(self, segment: Segment) -> list[Node]:
        """The calls before the last segment `segment` making an element the body carries, once each."""
        mine = self._mine(segment)
        return [c for c in self.program.carried_calls if c not in mine]

    def carry_rules(self, segment: Segment) -> list[Decision]:
        """What `carry_from_earlier_segment` inserted into the last segment `segment`, as rule lines."""
        last, _ = self.segment_program(segment)
        copies = last.inserted[len(self.program.inserted):]
        lines = []
        for copy, made in zip(copies, self.carried_from_earlier(segment)):
            names = ", ".join(name for name, v in self.program.carry if v.op == Op.ELEM and v.src[0] is made)
            lines.append((Rule.CARRY_FROM_EARLIER_SEGMENT,
                          f"{call_label(last, copy)} copies {names}, the element {call_label(self.program, made)} "
                          f"computes before the last segment, from its DDR buffer {self.cut_name(made)} into "
                          f"the last segment, where the next carried values are taken"))
        return lines

    def cut_label(self, before: int) -> str:
        """A cut as a Choice names it: the group after it and the bytes crossing."""
        return f"before {self._before(before)} ({self.crossing_bytes(before)} bytes cross)"

    def cut(self, before: int) -> Cut:
        return Cut(self._before(before), self.crossing_bytes(before),
                   tuple(call_label(self.program, n) for n in self.crossing(before)))

    def _before(self, cut: int) -> str:
        return self.groups[cut].name if cut < len(self.groups) else "the Emit"


def _calls_read(nodes) -> set[Node]:
    """The CALL nodes among `nodes` and those they read (through views, element reads and scalar expressions)."""
    return {c for n in nodes for c in ((n,) if n.op == Op.CALL else _calls_read(n.src))}
