"""Copies the compiler inserts into a Program so a design runs as written where the layout it
would need does not exist: each a library Copy call (`copy_kernel`), listed in the Program's
`inserted` so that it is labelled after the body's own calls, which keep their labels; each
insertion a named rule (a view no DMA moves is read through the calls gather.py makes instead,
which gather it on cores). `copy_view_for_grid` runs before fusion, on the whole Program;
`carry_from_earlier_segment` on the last segment's Program (segment.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from iron import dtypes
from iron.compiler.fuse import Group
from iron.compiler.gather import Written, copied, gather_view, region, unpadded_stream, written
from iron.compiler.objects import MAX_GATHER_RUNS
from iron.compiler.padding import readers_of, width_unshared
from iron.compiler.sides import padded_sides, whole_device_grid
from iron.compiler.tiling import TILED_BYTES, large
from iron.compiler.words import dma_moves, word_leads, word_rows
from iron.ir import (
    Axis,
    Declaration,
    MemoryKind,
    Node,
    Op,
    Program,
    call_label,
    describe,
    destination,
    element_pattern,
    elements,
    frame,
    is_computed_view,
    is_host_tensor,
    is_strided,
    nbytes,
    state_of,
    storage,
)
from iron.kernels.base import Role
from iron.kernels.registry import copy_kernel, scatter_kernel
from iron.plan.rules import Decision, Rule


def copy_view_for_grid(program: Program, device=None) -> Program:
    """The rule: a MatMul large enough to tile over the array, and an elementwise call or row
    reduction reading its product or a result lying alike (`grid_layouts`), read each operand that
    is a view the DMA moves (`q[h]`, `a[1:]`, `w.T`, `(x @ w)[1:]`) through a Copy: the grid and
    its product's readers read tensors lying as the grid needs (padded at a prime side), and a
    view cannot be padded without changing its base's row stride. Any call reads a view no DMA
    moves in whole words, or one `gather_strided_view` would copy in more than MAX_GATHER_RUNS
    runs, through the calls `gather_view` makes."""
    program = scatter_into_state(program)
    laid = grid_layouts(program)
    copies = {n: copied(n) for call in program.calls if _gridded(call) or _beside_grid(call, laid)
              for n in call.src[:call.arg.n_inputs] if _view_of_host(n) or is_computed_view(n) and len(n.src) == 1 and dma_moves(n)}
    readers = readers_of(program, (Group("", program.calls, None),))
    laid_out = LaidOut(program)
    gathered_views = dict.fromkeys(n for call in program.calls for n in call.src[:call.arg.n_inputs]
                                   if n not in copies and (_gathered_on_core(n, laid_out) or unpadded_stream(n, call)))
    copies |= {n: gather_view(n, f"through.view{i}", device and _asked_width(n, program, device))
               for i, n in enumerate(gathered_views)}
    tails = {n for n in gathered_views if not (isinstance(copies[n], Written) and copies[n].padded)}
    copies |= {call: region(call) for call in program.calls if device and _gridded(call)
               and whole_device_grid(call, device) is None and _read_unpadded(call, program, laid, readers, tails)}
    if not copies:
        return program
    return with_copies(program, copies)


def scatter_into_state(program: Program) -> Program:
    """The rule: a call writing a static view of a state the DMA cannot move in whole words (the
    interior `pad[1:-1, 1:-1]` of bfloat16 starts mid-word) computes its result as a tensor of its
    own, and Scatter calls inserted after it place that result among the fewest whole words of the
    state around the view, read and written back whole: one, or one per band of the view's
    outermost rows when those words and the result take more than SCATTER_BYTES."""
    scattered = {call: _scatter(call) for call in program.calls
                 if call.arg.writes and not call.arg.kernel.accumulates and _scattered(destination(call))}
    if not scattered:
        return program
    calls = tuple(c for call in program.calls for c in scattered.get(call, (call,)))
    return replace(program, calls=calls, inserted=(*program.inserted, *(s for c in scattered.values() for s in c[1:])))


SCATTER_BYTES = TILED_BYTES // 2   # the most bytes of one Scatter's input and words (each FIFO holds two objects)


@dataclass(frozen=True)
class Pattern:
    """A static view's elements in its state seen flat: `first` + sum(i_d * stride_d), i_d < size_d,
    `dims` outermost first; a band of its outermost rows [a, b) is a pattern of its own."""

    first: int
    dims: tuple[tuple[int, int], ...]
    per: int   # elements per 32-bit word

    @property
    def inner(self) -> int:
        return int(np.prod([n for n, _ in self.dims[1:]], dtype=np.int64))

    def span(self, a: int, b: int) -> tuple[int, int]:
        """The whole words [lo, hi), in elements, around rows [a, b) (`hi` not past `size`)."""
        last = self.first + (b - 1) * self.dims[0][1] + sum((n - 1) * st for n, st in self.dims[1:])
        return (self.first + a * self.dims[0][1]) // self.per * self.per, -(-(last + 1) // self.per) * self.per

    def cut_before(self, row: int, itemsize: int) -> bool:
        """Whether bands may meet before `row`: the words of the rows before end where the row's
        begin, and the result's rows from it start on a word."""
        return self.span(0, row)[1] <= self.span(row, row + 1)[0] and row * self.inner * itemsize % 4 == 0


def _scattered(dest: Node) -> bool:
    """A view of a state no DMA pattern moves, of at most four dimensions: static, or at per-call
    indices of whole sub-blocks the DMA moves (`_at_index`)."""
    if dest.op != Op.VIEW or state_of(dest) is None or not _state_mid_word(dest):
        return False
    if len(dest.src) > 1:
        return _at_index(dest) is not None
    return len(element_pattern(dest)[1]) <= 4 and not dma_moves(dest)


def _at_index(dest: Node) -> tuple[Node, Node] | None:
    """(the whole sub-block of its state a view with per-call indices on leading axes picks, the
    view's static rest of at most four dimensions within it), when the DMA moves the sub-block
    (rows padded to whole words if need be: `pad_rows_to_words`); else None."""
    axes = dest.arg
    k = max(i for i, a in enumerate(axes) if a.dynamic is not None)
    if any(a.length is not None for a in axes[:k + 1]):
        return None
    sub = frame(dest)[k + 1:]
    block = Node(Op.VIEW, dest.src, sub, dest.dtype,
                 (*axes[:k + 1], *(replace(a, index=None, start=0, stop=n, step=1, order=None, length=None)
                                   for a, n in zip(axes[k + 1:], sub))))
    within = Node(Op.VIEW, (Node(Op.INPUT, (), sub, dest.dtype),), dest.shape, dest.dtype,
                  tuple(replace(a, extent=None) for a in axes[k + 1:]))
    if not sub or len(element_pattern(within)[1]) > 4 or _state_mid_word(block):
        return None
    return block, within


def _scatter(call: Node) -> tuple[Node, ...]:
    """(`call` computing its own result, the Scatters placing it into the words around its view)."""
    c, dest = call.arg, destination(call)
    result = Node(Op.CALL, (*call.src[:c.n_inputs], *call.src[c.n_inputs + 1:]), call.shape, call.dtype,
                  replace(c, writes=False))
    if len(dest.src) > 1:
        block, within = _at_index(dest)
        return result, written(result, block, *element_pattern(within), scatter_kernel())
    first, dims = element_pattern(dest)
    pattern = Pattern(first, tuple(dims), max(1, 4 // dest.dtype.itemsize))
    cuts = _band_cuts(pattern, dest.src[0].size, dest.dtype.itemsize)
    return (result, *(_placed(result, dest.src[0], pattern, a, b, len(cuts) > 2) for a, b in zip(cuts, cuts[1:])))


def _band_cuts(pattern: Pattern, size: int, itemsize: int) -> list[int]:
    """The rows where the bands begin, and the last row's end: each band the most rows whose
    result and words take at most SCATTER_BYTES, cut where `Pattern.cut_before` allows."""
    rows, cuts = pattern.dims[0][0], [0]

    def fits(a: int, b: int) -> bool:
        lo, hi = pattern.span(a, b)
        return ((b - a) * pattern.inner + min(hi, size) - lo) * itemsize <= SCATTER_BYTES
    while cuts[-1] < rows:
        a, b, cut = cuts[-1], cuts[-1] + 1, rows
        while b < rows and fits(a, b):
            cut = b if pattern.cut_before(b, itemsize) else cut
            b += 1
        cuts.append(rows if b == rows and fits(a, rows) else cut)
    return cuts


def _placed(result: Node, state: Node, pattern: Pattern, a: int, b: int, banded: bool) -> Node:
    """The Scatter placing rows [a, b) of `result` into the words of `state` around them."""
    lo, hi = pattern.span(a, b)
    hi = min(hi, state.size)
    words = Node(Op.VIEW, (state,), (hi - lo,), state.dtype, (Axis(start=lo, stop=hi, extent=state.size),))
    part = result
    if banded:
        part = Node(Op.VIEW, (result,), ((b - a) * pattern.inner,), result.dtype,
                    (Axis(start=a * pattern.inner, stop=b * pattern.inner, extent=result.size),))
    return written(part, words, pattern.first + a * pattern.dims[0][1] - lo,
                    [(b - a, pattern.dims[0][1]), *pattern.dims[1:]], scatter_kernel())


def with_copies(program: Program, copies: dict[Node, Node | Written]) -> Program:
    """`program` with each tensor in `copies` read through what replaces it (a call, a view of one,
    or a `Written` buffer), its calls inserted before the first call reading it, everything after
    rebuilt over them; the buffers declared."""
    new: dict[Node, Node] = {}

    def rebuilt(node: Node) -> Node:
        if node not in new:
            src = tuple(rebuilt(s) for s in node.src)
            new[node] = node if src == node.src else Node(node.op, src, node.shape, node.dtype, node.arg)
        return new[node]
    calls: list[Node] = []
    inserted: dict[Node, Node] = {}   # each copied tensor -> what is read instead, rebuilt
    made: list[Node] = []   # the inserted calls, rebuilt
    for call in program.calls:   # a product read through its region first: its views are rebuilt over that
        for n in dict.fromkeys(m for s in call.src[:call.arg.n_inputs] for m in (storage(s), s)
                               if m in copies and m not in inserted):
            way = copies[n]
            read, writers = (way.read, way.calls) if isinstance(way, Written) else (way, (storage(way),))
            new[n] = inserted[n] = rebuilt(read)   # over the rebuilt tensor it views
            made += map(rebuilt, writers)   # the call, or the one read back in the view's shape
            calls += made[len(made) - len(writers):]
        calls.append(rebuilt(call))
    buffers = list(dict.fromkeys(storage(c.src[c.arg.n_inputs]) for c in made if c.arg.writes))
    declared = tuple(Declaration(MemoryKind.THROUGH, b.arg.name, b.shape, b.dtype) for b in buffers)
    return replace(program, calls=tuple(calls), outputs=tuple(map(rebuilt, program.outputs)),
                   carry=tuple((k, rebuilt(v)) for k, v in program.carry), inserted=(*program.inserted, *made),
                   declarations=program.declarations + declared, memories=program.memories + tuple(buffers))


def copy_view_rules(program: Program) -> list[Decision]:
    """What `copy_view_for_grid` inserted into `program`, as rule lines."""
    readers: dict[Node, list[Node]] = {}
    for call in program.calls:
        for n in dict.fromkeys(call.src[:call.arg.n_inputs]):
            readers.setdefault(n, []).append(call)
    laid = grid_layouts(program)
    lines = [(Rule.COPY_VIEW_FOR_GRID, f"{call_label(program, copy)} copies {describe(copy.src[0])} for "
              f"{', '.join(call_label(program, c) for c in readers[copy])}, {_why(program, readers[copy], copy.src[0], laid)}")
             for copy in program.inserted if copy.arg.kernel is copy_kernel() and copy.src[0].op == Op.VIEW]
    return (lines + [(Rule.COPY_VIEW_FOR_GRID, _gather_text(program, call)) for call in program.inserted
                     if call.arg.kernel.gathers]
            + [(Rule.SCATTER_INTO_STATE if storage(call.src[1]).arg.kind is MemoryKind.STATE else Rule.COPY_VIEW_FOR_GRID, _scatter_text(program, call))
               for call in program.inserted if call.arg.kernel.scatters])


def _pattern(call: Node) -> str:
    a = call.arg.attr_dict
    dims = [(a[f"n{d}"], a[f"s{d}"]) for d in range(4) if a[f"n{d}"] > 1] or [(1, 1)]
    return (f"by its access pattern (from element {a['offset']}, sizes {tuple(n for n, _ in dims)}, strides "
            f"{tuple(st for _, st in dims)} elements)")


def _scatter_text(program: Program, call: Node) -> str:
    return (f"{call_label(program, call)} places {describe(call.src[0])} into {describe(call.src[1])}, whole 32-bit "
            f"words, {_pattern(call)}: the view it writes lies in {dtypes.name(call.dtype)} runs no DMA moves in whole words")


def _gather_text(program: Program, call: Node) -> str:
    a, base, pattern = call.arg.attr_dict, call.src[0], _pattern(call)
    narrow = f"its {dtypes.name(base.dtype)} elements lie in runs narrower than the DMA's 32-bit words"
    if call.arg.kernel.role is Role.EXPANSION:
        large_one = describe(storage(base)) if nbytes(storage(base)) > TILED_BYTES else "its result"
        return (f"{call_label(program, call)} picks each row of its {call.shape} from a row of {describe(base)} {pattern}, "
                f"on the cores those rows stream to in blocks: {narrow}, and {large_one} is larger than a tile")
    why = narrow if is_host_tensor(base) else f"it picks more than {MAX_GATHER_RUNS} separate runs"
    into = f" into {describe(call.src[1])}, a DDR buffer of the compiler's its readers read" if call.arg.writes else ""
    return (f"{call_label(program, call)} gathers {a['shape']} of {describe(base)} on a core {pattern}{into}: {why}, "
            "so no DMA moves it")


def _why(program: Program, readers: list[Node], view: Node, laid: dict[Node, Node]) -> str:
    """Why a view is read through a Copy: the first of its readers needing it, else its size."""
    if any(map(_gridded, readers)):
        return "which tiles over the array reading whole host tensors"
    if view.src[0].op == Op.CALL and _gridded(view.src[0]) and view.shape == view.src[0].shape:
        return "the region of the product its grid may lie padded in: a row reduction reading it may not read its " \
            "rows padded wider"
    if beside := next((r for r in readers if _beside_grid(r, laid)), None):
        read = next(n for n in beside.src[:beside.arg.n_inputs] if n in laid)
        product = call_label(program, laid[read])
        if read is laid[read]:
            return f"which reads {product}'s product as its grid lays it out, its operands alike"
        return (f"which reads {call_label(program, read)}'s result, lying as {product}'s grid lays its product out, "
                "its operands alike")
    if is_host_tensor(view):
        return (f"as {describe(storage(view))} is larger than a tile: it crosses in DDR, where the DMA moves the view "
                "by its access pattern")
    return (f"as it picks more than {MAX_GATHER_RUNS} separate runs of {call_label(program, view.src[0])}'s result, "
            "larger than a tile: the result crosses in DDR, where the DMA moves the view by its access pattern")


def _asked_width(view: Node, program: Program, device) -> int | None:
    """The rows a grid reading `view` as its A or B asks it to lie in, gathered: its K or N padded
    to the quantum (`padded_sides`), when not its own."""
    grid = next((c for c in program.calls if _gridded(c) and view in c.src[:2]), None)
    width = grid and padded_sides(grid, device)[1 + (grid.src[1] is view)]
    return width if width != view.shape[-1] else None


def _gridded(call: Node) -> bool:
    """A MatMul `large` enough to tile over the array."""
    return call.arg.kernel.role is Role.MATRIX and call.arg.n_inputs == 2 and len(call.shape) == 2 and large(call)


def grid_layouts(program: Program) -> dict[Node, Node]:
    """Each tiled MatMul's product, and each result of an elementwise call or row reduction
    reading one of these in turn (lying as the grid lays the product out) -> that MatMul."""
    laid: dict[Node, Node] = {}
    for call in program.calls:
        if _gridded(call):
            laid[call] = call
        elif read := next((n for n in call.src[:call.arg.n_inputs] if n in laid), None):
            if call.arg.kernel.role in (Role.ELEMENTWISE, Role.ROW_REDUCTION):
                laid[call] = laid[read]
    return laid


def _read_unpadded(product: Node, program: Program, laid: dict[Node, Node], readers: dict, gathered: set) -> bool:
    """Whether a call may not read `product` as its grid may lay it out: a view of it no DMA moves
    in whole words; it (or a result lying alike, `grid_layouts`) read by a row reduction reading no
    rows padded wider (`width_unshared`) or beside a view gathered into a tensor that lies padded
    after its last row only."""
    return any(n.op == Op.VIEW and n.src[0] is product and not dma_moves(n) or laid.get(n) is product and (
        width_unshared(c, readers) or any(m in gathered for m in c.src)) for c in program.calls for n in c.src)


def _beside_grid(call: Node, laid: dict[Node, Node]) -> bool:
    """An elementwise call or row reduction reading a tiled MatMul's product or a result lying
    alike (`grid_layouts`): its other operands must lie alike, and a view cannot."""
    return call.arg.kernel.role in (Role.ELEMENTWISE, Role.ROW_REDUCTION) and any(
        n in laid for n in call.src[:call.arg.n_inputs])


def _gathered_on_core(node: Node, laid: LaidOut) -> bool:
    """A static view of at most four dimensions no DMA moves in whole words (of a host tensor, or of
    a computed one larger than a tile, which crosses in DDR) or `gather_strided_view` would copy in
    many runs (of a computed one)."""
    if node.op != Op.VIEW or len(node.src) > 1 or len(element_pattern(node)[1]) > 4:
        return False
    if is_host_tensor(node):   # a slice starting mid-word moves once `pad_lead_to_words` or `pad_rows_to_words` lays it out
        return (is_strided(node) or _state_mid_word(node) or laid.mid_word(node)) and not _view_of_host(node)
    if nbytes(node.src[0]) > TILED_BYTES and not dma_moves(node):
        return True
    flat = elements(node)
    return int(np.count_nonzero(np.diff(flat) != 1)) + 1 > MAX_GATHER_RUNS


def _state_mid_word(view: Node) -> bool:
    """A view of a state starting or ending mid-word even with its rows padded to whole words
    (`pad_rows_to_words`; a state keeps its first word, so no lead moves it)."""
    state = view.src[0]
    if state_of(view) is None:
        return False
    per = max(1, 4 // state.dtype.itemsize)
    return not dma_moves(view, (*state.shape[:-1], -(-state.shape[-1] // per) * per), True)


class LaidOut:
    """How `pad_lead_to_words` and `pad_rows_to_words` would lay `program`'s host tensors out,
    found only when a view asks, so a view they make the DMA move is left to them."""

    def __init__(self, program: Program):
        self.program = program

    @cached_property
    def rows(self) -> dict[str, tuple[int, ...]]:
        return word_rows(self.program, {})

    @cached_property
    def leads(self) -> dict[str, int]:
        return word_leads(self.program, {}, self.rows)

    def mid_word(self, view: Node) -> bool:
        """A view of an input, weight or param no DMA moves as its tensor lies, after the lead
        `pad_lead_to_words` gives it, if any, or with its rows padded to whole words: a column
        slice of rows not whole words (`x[:, 1:]` of int8), `x[1:]` beside `x[:-1]`."""
        name = view.src[0].arg.name
        if state_of(view) is not None or dma_moves(view) or dma_moves(view, lead=self.leads.get(name, 0)):
            return False
        return name not in self.rows or not dma_moves(view, self.rows[name], True)


def _view_of_host(node: Node) -> bool:
    """A view of a host tensor the DMA moves in whole words."""
    return node.op == Op.VIEW and is_host_tensor(node) and dma_moves(node)


def carry_from_earlier_segment(last: Program, groups: tuple[Group, ...], cut: list[Node],
                               name: str) -> tuple[Program, tuple[Group, ...]]:
    """The rule: the next carried values are taken in the last segment, which has an element an
    earlier segment computed only as an input (`cut`, the DDR buffer it crossed in); so a Copy of
    each, appended in a group of its own (`name`), makes it there."""
    if not cut:
        return last, groups
    copies = {n: copied(n) for n in cut}
    carry = tuple((k, Node(Op.ELEM, (copies[v.src[0]],), v.shape, v.dtype)
                   if v.op == Op.ELEM and v.src[0] in copies else v) for k, v in last.carry)
    before = [replace(g, closed_by=Rule.CARRY_FROM_EARLIER_SEGMENT) for g in groups[-1:]]   # none: the Emit's own segment
    added = Group(name, tuple(copies.values()), None)
    program = replace(last, calls=(*last.calls, *copies.values()), carry=carry,
                      inserted=(*last.inserted, *copies.values()))
    return program, (*groups[:-1], *before, added)
