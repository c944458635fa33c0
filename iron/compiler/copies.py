"""Copies the compiler inserts into a Program so a design runs as written where the layout it
would need does not exist: each a library Copy call (`copy_kernel`), listed in the Program's
`inserted` so that it is labelled after the body's own calls, which keep their labels; each
insertion a named rule (a view no DMA moves is read through a Strided call instead, which
gathers it on a core). `copy_view_for_grid` runs before fusion, on the whole Program;
`carry_from_earlier_segment` on the last segment's Program (segment.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from iron import dtypes
from iron.compiler.fuse import Group
from iron.compiler.layout import large
from iron.compiler.objects import MAX_GATHER_RUNS
from iron.compiler.rules import Decision, Rule
from iron.compiler.tiling import TILED_BYTES
from iron.compiler.words import view_words
from iron.errors import PlacementError
from iron.ir import (
    Call,
    Node,
    Op,
    Program,
    call_label,
    describe,
    element_pattern,
    elements,
    is_host_tensor,
    is_strided,
    nbytes,
)
from iron.kernels.base import Role
from iron.kernels.registry import copy_kernel, strided_kernel


def copied(node: Node) -> Node:
    """A Copy call of `node` (the compiler's, as `Copy.step(node)` would record it)."""
    return Node(Op.CALL, (node,), node.shape, node.dtype, Call(copy_kernel(), (), 1, False))


def copy_view_for_grid(program: Program) -> Program:
    """The rule: a MatMul large enough to tile over the array (`pad.large`), and an elementwise
    call reading such a MatMul's product, read each operand that is a view of a host tensor the
    DMA can move (`q[h]`, `a[1:]`, `x.reshape(m, k)`, `x[:, ::2]`, `w.T`) through a Copy
    inserted before them, whoever reads their results. The grid reads whole host tensors, each
    lying in DDR as it needs (padded by `pad_to_block` at a prime side), and its product's
    readers read their operands laid out alike; a view cannot be padded without changing its
    base's row stride. The Copy moves the view by its access pattern into a tensor the compiler
    owns, which lies as its readers need (`pad_written_by_producer`). Any call reads a view no DMA
    moves in whole words (x.T of bfloat16), or one `gather_strided_view` would copy in more than
    MAX_GATHER_RUNS runs, through a Strided call gathering it on a core (`gathered`), or, when
    its tensor is larger than a tile (and so crosses in DDR), through a Copy the DMA feeds."""
    copies = {n: copied(n) for call in program.calls if _gridded(call) or _beside_grid(call)
              for n in call.src[:call.arg.n_inputs] if _view_of_host(n)}
    copies |= {n: gathered(n) if nbytes(n.src[0]) <= TILED_BYTES else copied(n) for call in program.calls
               for n in call.src[:call.arg.n_inputs] if n not in copies and _gathered_on_core(n)}
    if not copies:
        return program
    return with_copies(program, copies)


def gathered(view: Node) -> Node:
    """A Strided call picking static VIEW `view` from its whole tensor by the view's access
    pattern in elements (at most four dimensions)."""
    offset, dims = element_pattern(view)
    dims = [(1, 0)] * (4 - len(dims)) + dims
    attrs = {"shape": view.shape, "offset": offset, **{f"n{d}": n for d, (n, _) in enumerate(dims)},
             **{f"s{d}": st for d, (_, st) in enumerate(dims)}}
    call = Call(strided_kernel(), tuple(sorted(attrs.items())), 1, False)
    return Node(Op.CALL, (view.src[0],), view.shape, view.dtype, call)


def with_copies(program: Program, copies: dict[Node, Node]) -> Program:
    """`program` with each tensor in `copies` read through its call (a Copy or a Strided), inserted
    before the first call reading it: every call, inserted one, output and carried value rebuilt
    over the new calls."""
    new: dict[Node, Node] = {}

    def rebuilt(node: Node) -> Node:
        if node not in new:
            src = tuple(rebuilt(s) for s in node.src)
            new[node] = node if src == node.src else Node(node.op, src, node.shape, node.dtype, node.arg)
        return new[node]
    calls: list[Node] = []
    inserted: dict[Node, Node] = {}   # each copied tensor -> its call, rebuilt
    for call in program.calls:
        for n in dict.fromkeys(n for n in call.src[:call.arg.n_inputs] if n in copies and n not in inserted):
            inserted[n] = rebuilt(copies[n])   # over the rebuilt tensor it views
            calls.append(inserted[n])
        new.update(inserted)
        calls.append(rebuilt(call))
    return replace(program, calls=tuple(calls), outputs=tuple(map(rebuilt, program.outputs)),
                   carry=tuple((k, rebuilt(v)) for k, v in program.carry),
                   inserted=(*program.inserted, *inserted.values()))


def copy_view_rules(program: Program) -> list[Decision]:
    """What `copy_view_for_grid` inserted into `program`, as rule lines."""
    inserted = set(program.inserted)
    lines = [(Rule.COPY_VIEW_FOR_GRID, f"{call_label(program, copy)} copies {describe(copy.src[0])} for "
              f"{call_label(program, call)}, {_why(program, call, copy.src[0])}")
             for call in program.calls for copy in dict.fromkeys(call.src) if copy in inserted
             and copy.arg.kernel is copy_kernel() and copy.src[0].op == Op.VIEW]
    return lines + [(Rule.COPY_VIEW_FOR_GRID, _gather_text(program, call)) for call in program.inserted
                    if call.arg.kernel.gathers]


def _gather_text(program: Program, call: Node) -> str:
    a = call.arg.attr_dict
    dims = [(a[f"n{d}"], a[f"s{d}"]) for d in range(4) if a[f"n{d}"] > 1] or [(1, 1)]
    base = call.src[0]
    why = (f"its {dtypes.name(base.dtype)} elements lie in runs narrower than the DMA's 32-bit words"
           if is_host_tensor(base) else f"it picks more than {MAX_GATHER_RUNS} separate runs")
    return (f"{call_label(program, call)} gathers {a['shape']} of {describe(base)} on a core by its access pattern "
            f"(from element {a['offset']}, sizes {tuple(n for n, _ in dims)}, strides {tuple(st for _, st in dims)} "
            f"elements): {why}, so no DMA moves it")


def _why(program: Program, call: Node, view: Node) -> str:
    if _gridded(call):
        return "which tiles over the array reading whole host tensors"
    if _beside_grid(call):
        product = next(n for n in call.src[:call.arg.n_inputs] if n.op == Op.CALL and _gridded(n))
        return f"which reads {call_label(program, product)}'s product as its grid lays it out, its operands alike"
    return (f"as it picks more than {MAX_GATHER_RUNS} separate runs of {call_label(program, view.src[0])}'s result, "
            "larger than a tile: the result crosses in DDR, where the DMA moves the view by its access pattern")


def _gridded(call: Node) -> bool:
    """A MatMul `large` enough to tile over the array."""
    operands = call.src[:call.arg.n_inputs]
    return call.arg.kernel.role is Role.MATRIX and len(operands) == 2 and len(call.shape) == 2 and large(call)


def _beside_grid(call: Node) -> bool:
    """An elementwise call reading a tiled MatMul's product, which lies padded as the grid
    computes it: its other operands must lie alike, and a view cannot."""
    return call.arg.kernel.role is Role.ELEMENTWISE and any(
        n.op == Op.CALL and _gridded(n) for n in call.src[:call.arg.n_inputs])


def _gathered_on_core(node: Node) -> bool:
    """A static view no DMA moves in whole words (a step slice, transpose or broadcast of a host
    tensor) nor `gather` copies in few runs (of a computed one), whose access pattern has at most
    four dimensions."""
    if node.op != Op.VIEW or len(node.src) > 1 or len(element_pattern(node)[1]) > 4:
        return False
    if is_host_tensor(node):   # a slice starting mid-word moves once `pad_lead_to_words` or `pad_rows_to_words` lays it out
        return is_strided(node) and not _view_of_host(node)
    flat = elements(node)
    return int(np.count_nonzero(np.diff(flat) != 1)) + 1 > MAX_GATHER_RUNS


def _view_of_host(node: Node) -> bool:
    """A view of a host tensor the DMA moves (in whole words, by an access pattern)."""
    if node.op != Op.VIEW or not is_host_tensor(node):
        return False
    try:
        view_words(node)
    except PlacementError:
        return False
    return True


def carry_from_earlier_segment(last: Program, groups: tuple[Group, ...], cut: list[Node],
                               name: str) -> tuple[Program, tuple[Group, ...]]:
    """The rule: the next carried values are taken in the last segment (by its Emit, or by the host
    from its outputs), which has an element an earlier segment computed only as an input, `cut`,
    the DDR buffer it crossed in; so a Copy of each, appended to the body in a group of its own
    (`name`), makes it there."""
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
