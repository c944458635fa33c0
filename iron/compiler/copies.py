"""Copies the compiler inserts into a Program so a design runs as written where the layout it
would need does not exist: each a library Copy call (`copy_kernel`), listed in the Program's
`inserted` so that it is labelled after the body's own calls, which keep their labels; each
insertion a named rule. `copy_view_for_grid` runs before fusion, on the whole Program;
`carry_from_earlier_segment` on the last segment's Program (segment.py)."""
from __future__ import annotations

from dataclasses import replace

from iron.compiler.fuse import Group
from iron.compiler.pad_sides import large
from iron.compiler.rules import Decision, Rule
from iron.compiler.words import view_words
from iron.errors import PlacementError
from iron.ir import (
    Call,
    Node,
    Op,
    Program,
    call_label,
    describe,
    is_host_tensor,
)
from iron.kernels.base import Role
from iron.kernels.registry import copy_kernel


def copied(node: Node) -> Node:
    """A Copy call of `node` (the compiler's, as `Copy.step(node)` would record it)."""
    return Node(Op.CALL, (node,), node.shape, node.dtype, Call(copy_kernel(), (), 1, False))


def copy_view_for_grid(program: Program) -> Program:
    """The rule: a MatMul large enough to tile over the array (`pad.large`) reads each operand
    that is a view of a host tensor the DMA can move (`q[h]`, `a[1:]`, `x.reshape(m, k)`,
    `x[:, ::2]`, `w.T`) through a Copy inserted before it, whoever reads its result. The grid
    reads whole host tensors, each lying in DDR as it needs (padded by `pad_to_block` at a prime
    side), and a view cannot be padded without changing its base's row stride; the Copy moves
    the view by its access pattern into a tensor the compiler owns, which the grid reads as it
    reads any computed tensor (padded as the MatMul reads it, `pad_written_by_producer`)."""
    copies = {n: copied(n) for call in program.calls if _gridded(call) for n in call.src[:call.arg.n_inputs]
              if _view_of_host(n)}
    if not copies:
        return program
    return with_copies(program, copies)


def with_copies(program: Program, copies: dict[Node, Node]) -> Program:
    """`program` with each tensor in `copies` read through its Copy: each Copy inserted before the
    first call reading it, every call, output and carried value rebuilt over the new calls."""
    new: dict[Node, Node] = {}

    def rebuilt(node: Node) -> Node:
        if node in new:
            return new[node]
        src = tuple(rebuilt(s) for s in node.src)
        new[node] = node if src == node.src else Node(node.op, src, node.shape, node.dtype, node.arg)
        return new[node]
    calls: list[Node] = []
    for call in program.calls:
        reads = [n for n in call.src[:call.arg.n_inputs] if n in copies and copies[n] not in calls]
        calls += [copies[n] for n in dict.fromkeys(reads)]
        new.update({n: copies[n] for n in reads})
        calls.append(rebuilt(call) if not reads else Node(
            call.op, tuple(copies.get(n, rebuilt(n)) if i < call.arg.n_inputs else rebuilt(n)
                           for i, n in enumerate(call.src)), call.shape, call.dtype, call.arg))
        new[call] = calls[-1]
    inserted = [c for c in calls if c in copies.values()]
    return replace(program, calls=tuple(calls), outputs=tuple(map(rebuilt, program.outputs)),
                   carry=tuple((k, rebuilt(v)) for k, v in program.carry), inserted=(*program.inserted, *inserted))


def copy_view_rules(program: Program) -> list[Decision]:
    """What `copy_view_for_grid` inserted into `program`, as rule lines."""
    inserted = set(program.inserted)
    return [(Rule.COPY_VIEW_FOR_GRID, f"{call_label(program, copy)} copies {describe(copy.src[0])} for "
             f"{call_label(program, call)}, which tiles over the array reading whole host tensors")
            for call in program.calls for copy in dict.fromkeys(call.src) if copy in inserted
            and copy.arg.kernel is copy_kernel() and call.arg.kernel.role is Role.MATRIX]


def _gridded(call: Node) -> bool:
    """A MatMul `large` enough to tile over the array."""
    operands = call.src[:call.arg.n_inputs]
    return call.arg.kernel.role is Role.MATRIX and len(operands) == 2 and len(call.shape) == 2 and large(call)


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
