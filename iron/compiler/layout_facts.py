"""The typed facts of the layout `pad_to_block` chose (layout.py), in program order, for describe()
and the tests (`PaddedGrid`, `PaddedStream`, `KeptZeros`, `PaddedTensor`, `Region`, `Unpadded`),
read from the layout, never re-derived."""
from __future__ import annotations

from iron.compiler.fuse import Group
from iron.compiler.padding import PLAIN, fits_tile, reads_region
from iron.compiler.sides import (
    carried,
    extent_rule,
    lone_product,
    result_of,
    sides_as_lying,
    upstream,
)
from iron.compiler.tiling import call_sides
from iron.ir import (
    Node,
    Op,
    Program,
    call_label,
    describe,
    destination,
    external_inputs,
    state_of,
    state_written_whole,
)
from iron.kernels.base import Role
from iron.plan.rules import (
    Fill,
    KeptZeros,
    Lies,
    PaddedGrid,
    PaddedStream,
    PaddedTensor,
    Region,
    Rule,
    Unpadded,
)


def facts_of(program: Program, groups: tuple[Group, ...], lies: dict[Node, Lies], readers: dict,
             device, refused: dict[Node, str]) -> list:
    """The facts of the layout `lies` in program order, and of the products left unpadded (`refused`)."""
    label = {c: call_label(program, c) for g in groups for c in g.calls}
    group_of = {c: g for g in groups for c in g.calls}
    shapes = {n: lie.shape for n, lie in lies.items()}
    found = []
    for group in groups:
        first = group.calls[0]
        role = first.arg.kernel.role
        if first in refused:
            found.append(Unpadded(group.name, label[first], refused[first]))
        if role is Role.MATRIX and (sides := sides_as_lying(first, shapes)) and sides != call_sides(first):
            fills = tuple(lies[n].fill if n in lies else None for n in first.src[:2])
            found.append(PaddedGrid(group.name, label[first], call_sides(first), sides,
                                    extent_rule(first, sides, device), fills))
        elif role in (Role.ELEMENTWISE, Role.ROW_REDUCTION):
            found += _stream_facts(group, lies, readers, group_of, label)
    for node, lie in lies.items():
        if (writers := _writers(node, lie, program, group_of, label)) is not None:
            found.append(PaddedTensor(describe(node), lie.shape, writers))
        users = [u for u in readers.get(node, []) if isinstance(u, Node)]
        if node.op != Op.CALL and len(set(users)) > 1 and all(u.arg.kernel.role is Role.ELEMENTWISE for u in users):
            found.append(PaddedTensor(describe(node), lie.shape, tuple(label[u] for u in users), Rule.PAD_SHARED_STREAM))
        found += _region_facts(node, lie.shape, users, group_of, label)
    return found


def _stream_facts(group: Group, lies: dict[Node, Lies], readers: dict, group_of: dict, label: dict) -> list:
    """The facts of elementwise calls or a row reduction computing over a padded layout."""
    calls, first = group.calls, group.calls[0]
    result = result_of(calls[-1])
    if result not in lies or lies[result].fill is Fill.WRITTEN:
        return []
    if first.arg.kernel.role is Role.ROW_REDUCTION:
        x = first.src[0]
        if x not in lies:
            return []
        if x.op == Op.CALL:
            how = Rule.PAD_THROUGH_ROW_WIDTH if lies[x].shape[1:] != x.shape[1:] else Rule.PAD_THROUGH_ROWS
        elif any(isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX for u in readers.get(first, [])):
            how = Rule.PAD_UPSTREAM_ROWS
        else:
            how = Rule.PAD_TO_BLOCK
        return [PaddedStream(group.name, label[first], x.shape, lies[x].shape, how)]
    inputs = external_inputs(calls)
    products, passed = upstream(inputs, group_of)
    read = tuple(f"{label[u]} as {'A' if u.src[0] is result else 'B'}" for u in readers.get(result, [])
                 if isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX)
    if len(result.shape) == 1 or not products:   # over its own rows padded (or a padded product's input)
        how = Rule.PAD_UPSTREAM_ZEROS if read and len(result.shape) > 1 else Rule.PAD_TO_BLOCK
    else:   # over a product's layout, or over one elementwise calls passed on
        how = Rule.PAD_PASSED_ON if any(n in lies and n.op == Op.CALL and lone_product(group_of[n]) is None
                                        and carried(n, group_of) for n in inputs) else Rule.PAD_THROUGH_ELEMENTWISE
    found = [PaddedStream(group.name, label[calls[-1]], result.shape, lies[result].shape, how,
                          tuple(label[p] for p in products))]
    if read:
        order = list(group_of)
        makers = sorted({*calls, *(c for g in passed for c in g.calls)}, key=order.index)
        found.append(KeptZeros(group.name, tuple(label[c] for c in makers), describe(result), lies[result].shape, read))
    return found


def _writers(node: Node, lie: Lies, program: Program, group_of: dict, label: dict) -> tuple[str, ...] | None:
    """Who writes `node`'s user's region only where it lies padded: its group (Fill.WRITTEN), or the
    calls writing a state through views; None for a tensor no call writes so."""
    if lie.fill is Fill.WRITTEN and node in group_of:
        return tuple(label[c] for c in group_of[node].calls)
    if node.op == Op.MEMORY and state_of(node) is not None and not any(state_written_whole(c) is node for c in program.calls):
        return tuple(label[c] for c in program.calls if c.arg.writes and destination(c).op == Op.VIEW
                     and destination(c).src[0] is node)
    return None


def _region_facts(node: Node, lies: tuple[int, ...], users: list[Node], group_of: dict, label: dict) -> list:
    """`pad_row_region`, `pad_tile_region`: the readers of `node` that read its user's region only."""
    rowed = [u for u in users if u.arg.kernel.role is Role.ROW_REDUCTION and reads_region(u, node)]
    found = [Region(group_of[u].name, (label[u],), describe(node), lies, Rule.PAD_ROW_REGION) for u in rowed]
    small = [u for u in dict.fromkeys(users) if node.op == Op.CALL and u.arg.kernel.role not in PLAIN
             and u not in rowed and fits_tile(group_of[u], node)]
    return found + [Region(g.name, tuple(label[u] for u in small if u in g.calls), describe(node), lies)
                    for g in dict.fromkeys(group_of[u] for u in small)]
