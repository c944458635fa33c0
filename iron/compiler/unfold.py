"""How iteration 0's moves become every iteration's (`Unfolding`, for the rule `repeat_over_time`,
repeat.py): each iteration's calls paired with iteration 0's node for node, its host operands'
words located (`Shift`), and lowering's sites and moves repeated per iteration at those offsets,
or NotRepeated saying why the iterations cannot share one placed iteration."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cache, cached_property, partial
from typing import Callable

from iron.compiler.channels import bd_share, dma_patterns
from iron.compiler.fuse import Group
from iron.compiler.runs import HOST, NotRepeated, Run, placeless
from iron.compiler.sequence import Move
from iron.compiler.words import Access, placement_access, view_words
from iron.ir import Node, Op, Program, call_label, describe, storage, tensor_inputs
from iron.plan.fifos import FifoRole
from iron.plan.plan import HostRole, Loop, Repeat, Wait


@dataclass(frozen=True)
class Shift:
    """Where iteration 0's moves of a host operand lie (`buffer` words [first, first + span)) and iteration k's."""

    buffer: str
    first: int
    span: int
    to_buffer: str
    to_first: int


@dataclass(frozen=True)
class Unfolding:
    """What lowering needs to run a Run over time: iteration 0's group names, the count, per
    iteration its groups' calls (for the sequence's waits) and Shifts; `inner`: a block within
    iteration 0 looping in turn inside each iteration (heads inside the loop over layers)."""

    groups: tuple[str, ...]
    count: int
    calls: tuple[tuple[tuple[Node, ...], ...], ...]
    shifts: tuple[tuple[Shift, ...], ...]
    shared: tuple[tuple[str, str], ...] = ()   # (group, the earlier group whose core runs it too)
    inner: Unfolding | None = None

    def sites_and_moves(self, sites, moves: list[list], device) -> tuple[list, list[list]]:
        """The sites and their moves in sequence order: iteration 0's sites once per iteration,
        each with that iteration's calls and moves (an inner block's unfolded first, within
        iteration 0). A segment holding part of the iteration loops that part over every
        iteration before the next segment loops the rest (loop fission: what one part makes the
        next reads from DDR buffers of each iteration's own, or `moved` refuses it)."""
        if self.inner is not None:
            sites, moves = self.inner.sites_and_moves(sites, moves, device)
        at = [i for i, s in enumerate(sites) if s.group.name in self.groups]
        if not at:   # a segment without the iteration
            return list(sites), moves
        a, b = at[0], at[-1] + 1
        index = {calls[0]: j for j, calls in enumerate(self.calls[0])}   # an inner iteration's sites by their calls
        # after iteration 0, a Wait on each FIFO a site's moves of the iteration before took (but an
        # inner iteration's, there already): each shim's buffer descriptors are freed an iteration
        # at a time (unrolled, a descriptor running out mid-step would wait on moves that cannot
        # finish before the step's other moves are queued), the other sites' moves still running
        waits = {i: [w for w in map(Wait, dict.fromkeys(m.fifo for m in moves[i] if isinstance(m, Move)))
                     if w not in moves[i]] for i in range(a, b)}
        ahead = prefetched(moves[a:b], device)
        out_sites, out_moves = list(sites[:a]), list(moves[:a])
        for k in range(self.count):
            mine = [(waits[i] if k else []) + [self.moved(k, m) for m in moves[i]] for i in range(a, b)]
            if k:   # the prefetched sites' Waits and moves at the end of iteration k - 1's
                out_moves[-1] = out_moves[-1] + [m for j, ms in enumerate(mine) if j in ahead for m in ms]
                mine = [[] if j in ahead else ms for j, ms in enumerate(mine)]
            for i, ms in zip(range(a, b), mine):
                calls = self.calls[k][index[sites[i].group.calls[0]]]
                out_sites.append(replace(sites[i], group=replace(sites[i].group, calls=calls)))
                out_moves.append(ms)
        return out_sites + list(sites[b:]), out_moves + list(moves[b:])

    def moved(self, k: int, move):
        """Iteration k's counterpart of iteration 0's `move`: the same words of its own operand."""
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
        """Each iteration's Shifts by buffer (a long iteration has many)."""
        found: list[dict[str, list[Shift]]] = [{} for _ in self.shifts]
        for shifts, by in zip(self.shifts, found):
            for s in shifts:
                by.setdefault(s.buffer, []).append(s)
        return tuple(found)

    def looped(self, cores: list) -> list:
        """The cores, each of the iteration's looping `count` times over its program."""
        cores = cores if self.inner is None else self.inner.looped(cores)
        return [replace(c, program=(Loop(self.count, c.program),)) if c.group in self.groups else c for c in cores]

    def loops(self, group: str) -> int:
        """How many times the core of `group` runs its program per launch."""
        inner = self.inner.loops(group) if self.inner is not None else 1
        return self.count * inner if group in self.groups else inner


def prefetched(moves: list[list], device) -> set[int]:
    """The sites (indices in one iteration's `moves`) whose Waits and moves each later iteration
    issues at the end of the one before, every move of that one then issued, so their blocks fill
    their FIFOs while it runs: those moving only a matrix's blocks of the weights (an `_in` may
    share a shim channel with inputs that wait, `share_shim_channels`), each FIFO in at most its
    share of a shim tile's BDs, so issuing them never waits on a Dma of their own iteration."""
    def fits(mine: list) -> bool:
        if not mine or not all(isinstance(m, Move) and m.fifo.role is FifoRole.WEIGHTS
                               and m.buffer == HostRole.CONSTS.value for m in mine):
            return False
        ops = Counter(m.fifo for m in mine for _ in dma_patterns(m.access.offset, m.access.dims, device))
        return max(ops.values()) <= bd_share(device)
    return {i for i, mine in enumerate(moves) if fits(mine)}


def unfolding(program: Program, groups: tuple[Group, ...], run: Run, placements: tuple,
              padded: dict) -> tuple[Unfolding, Repeat]:
    """The Unfolding and Repeat of `run`, or NotRepeated: every iteration reads and writes only
    host tensors (and its own results), alike iteration 0's in shape and access pattern, none padded."""
    first = _calls(run.groups(groups, 0))
    _check_reads(program, groups, run)
    extent = cache(partial(_extents, program, {p.name: p for p in placements}))   # iteration 0's asked every iteration
    at_first = {c: i for i, c in enumerate(first)}
    calls, shifts, operands = [], [], []
    for k in range(run.count):
        mine = run.groups(groups, k)
        pairs: dict[Node, Node] = {}
        positions = (at_first, {c: i for i, c in enumerate(_calls(mine))})
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
    if any(c in iteration for c in program.carried_calls):
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
    """Where the moves of operand `a` of iteration 0 lie, and those of `b`, its counterpart."""
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
