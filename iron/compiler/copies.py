"""Copies the compiler inserts into a Program so a design runs as written where the layout it
would need does not exist: each a library Copy call (`copy_kernel`), listed in the Program's
`inserted` so that it is labelled after the body's own calls, which keep their labels; each
insertion a named rule. `copy_view_for_grid` runs before fusion, on the whole Program;
`carry_from_earlier_segment` on the last segment's Program (segment.py)."""
from __future__ import annotations

from dataclasses import replace

from iron.compiler.fuse import Group
from iron.compiler.pad import large
from iron.compiler.readers import Reader
from iron.compiler.rules import Decision, Rule
from iron.compiler.tiling import result_users, word_run
from iron.ir import (
    Call,
    Node,
    Op,
    Program,
    call_label,
    describe,
    is_host_tensor,
    storage,
)
from iron.kernels.base import Role
from iron.kernels.registry import copy_kernel


def copied(node: Node) -> Node:
    """A Copy call of `node` (the compiler's, as `Copy.step(node)` would record it)."""
    return Node(Op.CALL, (node,), node.shape, node.dtype, Call(copy_kernel(), (), 1, False))


def copy_view_for_grid(program: Program) -> Program:
    """The rule: a MatMul large enough to tile over the array (`pad.large`) whose result only the
    host reads, or a state takes, reads each operand that is a view of a host tensor lying in one
    run of whole words (`a[1:]`, `x.reshape(m, k)`) through a Copy inserted before it. The grid
    reads whole host tensors, each lying in DDR as it needs (padded by `pad_to_block` at a prime
    side), and a view cannot be padded without changing its base's row stride; the Copy streams
    the view into a tensor the compiler owns, which crosses to the MatMul's segment in DDR, padded
    as the MatMul reads it (`pad_written_by_producer`)."""
    read = {storage(n) for c in program.calls for n in c.src} | {n for _, v in program.carry for n in v.src}
    calls, inserted, swapped = [], [], {}
    for call in program.calls:
        views = call.src[:call.arg.n_inputs] if _gridded(call, program.outputs, read) else ()
        copies = {n: copied(n) for n in views if _view_of_host(n)}
        if copies:
            swapped[call] = Node(call.op, tuple(copies.get(n, n) for n in call.src), call.shape, call.dtype, call.arg)
        calls += [*copies.values(), swapped.get(call, call)]
        inserted += copies.values()
    if not swapped:
        return program
    return replace(program, calls=tuple(calls), outputs=tuple(swapped.get(n, n) for n in program.outputs),
                   inserted=(*program.inserted, *inserted))


def copy_view_rules(program: Program) -> list[Decision]:
    """What `copy_view_for_grid` inserted into `program`, as rule lines."""
    inserted = set(program.inserted)
    return [(Rule.COPY_VIEW_FOR_GRID, f"{call_label(program, copy)} copies {describe(copy.src[0])} for "
             f"{call_label(program, call)}, which tiles over the array reading whole host tensors")
            for call in program.calls for copy in call.src if copy in inserted]


def _gridded(call: Node, outputs: tuple[Node, ...], read: set[Node]) -> bool:
    """A MatMul of host tensors `large` enough to tile whose result goes where a grid's may
    (`tiling.result_users`: the host alone, or a run of a state)."""
    operands = call.src[:call.arg.n_inputs]
    if call.arg.kernel.role is not Role.MATRIX or len(operands) != 2 or len(call.shape) != 2 \
            or not all(map(is_host_tensor, operands)) or not large(call):
        return False
    return call not in read and (Reader.HOST,) * outputs.count(call) == result_users(call)


def _view_of_host(node: Node) -> bool:
    """A view of a host tensor a Copy streams: one run of whole words (`stream_contiguous_views`)."""
    return node.op == Op.VIEW and is_host_tensor(node) and word_run(node) is not None


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
