"""The layout pass (`pad_to_block`): a large MatMul or MatVec, elementwise calls streamed, or a
row reduction's batch of rows compute on sides padded with zeros where the cost model estimates
that faster. Decided once per design, before placement: one `Lies` per padded tensor and one
typed fact per decision (rules.py), never re-derived. Which sides lie alike and the extents
chosen among are sides.py's; which tensors may lie padded, padding.py's."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from iron.compiler.fuse import SIZE_LIMIT, Group, held_bytes
from iron.compiler.layout_facts import facts_of
from iron.compiler.padding import (
    keeps_n,
    layout_unshared,
    made_over,
    matrix_readers,
    matrix_unpadded,
    pair,
    picks_rows,
    readers_of,
    readers_unshared,
    reads_region,
    rows_unread,
    stream_unpadded,
    tail_kept,
    unpaddable,
    unstreamed,
    width_unshared,
)
from iron.compiler.readers import Reader
from iron.compiler.sides import (
    FLOW_QUANTUM,
    ROW_QUANTUM,
    Classes,
    Groups,
    best_sides,
    chained,
    joined_sides,
    joined_with,
    letters,
    lone_product,
    on_sides,
    padded_sides,
    result_of,
    side,
    sides_choice,
    streamed_count,
    tie,
    tiled,
    whole_device_grid,
)
from iron.compiler.streaming import row_streamable, streamable
from iron.compiler.tiling import call_sides
from iron.errors import DoesNotFit
from iron.ir import Node, Op, Program, call_label, describe, external_inputs
from iron.kernels.base import Role
from iron.plan.rules import Lies, NoGrid, NoWholeWords, Rule, SharedSides, Unpadded, UnpaddedStream


@dataclass(frozen=True)
class Layouts:
    """A design's layout: each padded tensor's `Lies`, the cost model's choices of padded extents
    ((group, Choice)), and the facts of every decision."""

    lies: dict[Node, Lies]
    choices: tuple = ()
    facts: tuple = ()

    @property
    def shapes(self) -> dict[Node, tuple[int, ...]]:
        return {n: lie.shape for n, lie in self.lies.items()}


def lies_of(program: Program, placements) -> dict[Node, Lies]:
    """The Lies of `program`'s host tensors and outputs whose placement is padded."""
    by_name = {p.name: Lies(p.padded, p.fill) for p in placements if p.padded is not None}
    if not by_name:   # most designs: nothing to look up in each probe's calls
        return {}
    found = {n: by_name[f"out{i}"] for i, n in enumerate(program.outputs) if f"out{i}" in by_name}
    for call in program.calls:
        for node in (s.src[0] if s.op == Op.VIEW else s for s in call.src):
            name = node.arg.name if node.op in (Op.INPUT, Op.MEMORY) else None
            if name in by_name:
                found[node] = by_name[name]
    return found


def stream_length(calls, inputs, padded: dict) -> int | None:
    """The elements streamed inputs lie in: padded (all of them and the result alike), or their
    own (those padded after their last row only lie there first); None when they lie otherwise."""
    lying = (*inputs, result_of(calls[-1]))
    if all(n in padded for n in lying) and len({padded[n][0] for n in lying}) == 1:
        return math.prod(padded[inputs[0]])
    tails = [n for n in inputs if n in padded]
    if all(padded[n][1:] == n.shape[1:] for n in tails) and not (tails and lying[-1] in padded):
        return inputs[0].size
    return None


# ---- the pass ------------------------------------------------------------------------------------

def pad_to_block(program: Program, groups: tuple[Group, ...], device) -> Layouts:
    """The design's layout: for each group, in order, `pad_through` (reading a padded result), else
    `pad_matrix`, `pad_stream` or `pad_rows`; no two groups pad one tensor (`unpaddable`)."""
    readers, group_of = readers_of(program, groups), Groups(groups)
    shared = shared_layouts(program, groups, device, readers, group_of)
    layouts = [s for s in shared if not s.why]
    agreed = {call: sides for s in layouts for call, sides in zip(s.calls, s.sides)}
    free = readers | {t: [] for s in layouts for t in s.tensors}   # a tensor laid out for all its readers
    padded: dict[Node, tuple[int, ...]] = dict(group_of.written)   # buffers gathers write padded
    chosen: dict[Node, tuple] = {}
    for group in groups:
        padded |= pad_through(group, padded, free, group_of, device) or \
            pad_matrix(group, free, group_of, device, agreed, chosen) or \
            pad_stream(group, free, group_of, device) or pad_rows(group, free, group_of, device)
    padded |= {n: shape for n, shape in group_of.written.items() if padded[n][-1] != shape[-1]}   # as its gathers write it
    lies = {n: Lies(shape, group_of.fill(n, padded)) for n, shape in padded.items()}
    choices = tuple((group_of[call].name, choice) for call, (node, shape, choice) in chosen.items()
                    if padded.get(node) == shape)   # the choices no later agreement overrode
    refused = unpadded_products(groups, padded, free, group_of, device)
    return Layouts(lies, choices, (*(s.fact(program, group_of) for s in shared), *facts_of(program, groups, lies, readers, device, refused)))


def unpadded_products(groups: tuple[Group, ...], padded: dict, readers: dict, group_of: dict, device) -> dict:
    """The large products left on sides that are not multiples of their quanta, and why."""
    found = {}
    for group in groups:
        call = lone_product(group)
        if call is None or not tiled(call, device) or padded_sides(call, device) == call_sides(call) or \
                any(n in padded for n in (*call.src[:2], result_of(call))):
            continue
        if why := matrix_unpadded(call, readers, group_of):
            found[call] = why
    return found


# ---- pad_shared_input: a tensor several padded products read --------------------------------------

@dataclass(frozen=True)
class SharedLayout:
    """`pad_shared_input`'s decision for products linked by the tensors they share (by `pad_joined`, or read by
    one MatMul as A and B): each call's sides (M, K, N), or why they stay their own."""
    tensors: tuple[Node, ...]   # the tensors several of `calls` read
    calls: tuple[Node, ...]     # in program order
    sides: tuple[tuple[int, int, int], ...]
    why: str = ""               # "" when they lie padded to `sides`

    def fact(self, program: Program, group_of: Groups) -> SharedSides:
        def labels(calls):
            return tuple(call_label(program, c) for c in calls)
        pairs = (u for u in group_of if (p := pair(u, group_of)) and p[0] in self.calls)   # reading two of `calls`
        return SharedSides(tuple(map(describe, self.tensors)), labels(self.calls), self.sides, labels(pairs), self.why)


def shared_layouts(program: Program, groups: tuple[Group, ...], device, readers: dict,
                   group_of: dict) -> list[SharedLayout]:
    """`pad_shared_input`: a tensor several lone large products read once each lies padded once, each
    side the largest any asks for (`agree`); every call pads on them, or none does."""
    tensors = [t for t, users in readers.items() if len(users) > 1 and all(
        isinstance(u, Node) and lone_product(group_of[u]) is u and tiled(u, device) and u.src[:2].count(t) == 1
        for u in users)
        and not unpaddable(t, tuple(users), readers, group_of)]
    sides, families = tied_sides(tensors, readers, group_of)
    found = (agree(program, tuple(t for t in tensors if readers[t][0] in calls), tuple(calls), sides, readers, group_of,
                   device) for calls in families)
    return [s for s in found if s.sides != tuple(map(call_sides, s.calls))]   # else none asks for padding


def tied_sides(tensors: list[Node], readers: dict, group_of: dict) -> tuple[Classes, list[list[Node]]]:
    """The (tensor, axis) sides that lie alike through the calls reading `tensors`, a MatMul reading
    two products (its K) and `pad_joined`; and the families of products so tied, in program order."""
    sides, family, tied = Classes(), Classes(), []
    for t in tensors:
        for call in readers[t]:
            tie(sides, call)
            family.union(readers[t][0], call)
            tied.append(call)
    for call in group_of:
        if (operands := pair(call, group_of)) is not None:
            tie(sides, call, only=letters(call)[1])
            family.union(*operands)
            tied += operands
    for call in dict.fromkeys(tied):
        for other in joined_with(call, readers, group_of):
            for i in (0, 2):
                sides.union(side(sides, call, i), side(sides, other, i))
            family.union(call, other)
            tied.append(other)
    families: dict[Node, list[Node]] = {family.find(c): [] for c in tied}
    for call in group_of:
        if call in tied:
            families[family.find(call)].append(call)
    return sides, list(families.values())


def agree(program: Program, tensors: tuple[Node, ...], calls: tuple[Node, ...], sides: Classes,
          readers: dict, group_of: dict, device) -> SharedLayout:
    """One family's `SharedLayout`: each tied side the largest its calls ask for."""
    largest: dict = {}
    for call in calls:
        asks = best_sides(call, device, {2: call.shape[-1]} if keeps_n(call, readers) else None) or call_sides(call)
        for i, extent in enumerate(asks):
            key = side(sides, call, i)
            largest[key] = max(extent, largest.get(key, 0))
    agreed = {call: tuple(largest[side(sides, call, i)] for i in range(3)) for call in calls}
    free = readers | {t: [] for t in tensors}
    why = next((f"{call_label(program, c)} {why}" for c in calls
                if (why := shared_unpadded(c, agreed, free, group_of, device))), "")
    return SharedLayout(tensors, calls, tuple(agreed.values()), why)


def shared_unpadded(call: Node, agreed: dict, readers: dict, group_of: dict, device) -> str:
    """Why a product of a `pad_shared_input` family may not pad on the `agreed` sides."""
    sides = agreed[call]
    if why := matrix_unpadded(call, readers, group_of):
        return f"is not padded: {why}"
    if keeps_n(call, readers) and sides[2] != call.shape[-1]:
        return f"keeps its N of {call.shape[-1]} (pad_through_row_width), not {sides[2]}"
    if whole_device_grid(call, device, sides) is None:
        return f"has no grid on (M, K, N) = {sides}"
    if not pad_matrix(group_of[call], readers, group_of, device, agreed, {}):
        return f"may not be padded to (M, K, N) = {sides} (a MatMul reading its result has no grid on them)"
    return ""


def refusal(program: Program, groups: tuple[Group, ...], group: Group, device, layouts: Layouts):
    """Why `pad_to_block` left `group` unpadded, as the whole design reads it, for a refusal to quote:
    the layout's fact, else its pin, the row reduction keeping its N, or the first of its
    `pad_shared_stream` family that may not pad; None when none applies."""
    readers = readers_of(program, groups)
    if streamable(group.calls):
        return stream_refusal(program, groups, group, readers)
    (call,) = group.calls if len(group.calls) == 1 else (None,)
    if call is None or call.arg.kernel.role is not Role.MATRIX:
        return None
    label = call_label(program, call)
    if recorded := next((f for f in layouts.facts if isinstance(f, Unpadded) and f.call == label
                         or isinstance(f, SharedSides) and f.why and label in f.calls), None):
        return recorded
    if why := matrix_unpadded(call, readers, Groups(groups)):   # not a lone product (a state's part): no fact
        return Unpadded(group.name, label, why)
    if not keeps_n(call, readers) or best_sides(call, device, {2: call.shape[-1]}) is not None:
        return None
    row, whole = next((u, why) for u in readers[call] if (why := width_unshared(u, readers)))
    return Unpadded(group.name, label, f"{call_label(program, row)} {whole}, so N keeps its {call.shape[-1]} "
                    f"({Rule.PAD_THROUGH_ROW_WIDTH}), and no padding of M and K alone takes a better grid")


def explained(error: Exception, why) -> Exception:
    """A refusal finding no grid or stream quoting pad_to_block's decision `why`; else `error`."""
    if not why or not isinstance(error, DoesNotFit) or not isinstance(error.fact, (NoGrid, NoWholeWords)):
        return error
    return DoesNotFit.of(replace(error.fact, unpadded=why))


def pad_matrix(group: Group, readers: dict, group_of: dict, device, agreed: dict, chosen: dict) -> dict[Node, tuple[int, ...]]:
    """A lone large MatMul or MatVec over paddable operands, its result shown or read by calls sharing
    its layout: on the sides `padded_product` picks; else K alone (`pad_k_only`), else for groups
    fitting a tile to read its region (`pad_tile_region`). `chosen`: call -> (A, its shape, Choice)."""
    call = lone_product(group)
    if call is None:
        return {}
    if not readers_unshared(call, readers, group_of):
        return padded_product(call, readers, group_of, device, agreed, chosen)
    return padded_product(call, readers, group_of, device, agreed, chosen, k_only=True) or (
        {} if readers_unshared(call, readers, group_of, small=True)
        else padded_product(call, readers, group_of, device, agreed, chosen, small=True))


def padded_product(call: Node, readers: dict, group_of: dict, device, agreed: dict, chosen: dict,
                   k_only: bool = False, small: bool = False) -> dict[Node, tuple[int, ...]]:
    """`pad_matrix` of `call` (`k_only`: its result keeps its shape; `small`: groups fitting a tile
    read it): the sides agreed, joined or chosen, squared, with a grid for each MatMul reading it;
    operands made over the layout pad their inputs (`pad_upstream_zeros`, `pad_upstream_rows`)."""
    members = (call,) if k_only else joined_with(call, readers, group_of)
    if not all(tiled(m, device) for m in members) or (kept := tail_kept(call, members, readers, group_of)) is None or \
            kept and (k_only or call in agreed or len(members) > 1):   # kept: {} when both may lie padded
        return {}
    if call not in agreed and any(isinstance(u, Node) and call in (pair(u, group_of) or ())
                                  for u in readers.get(call, [])):
        return {}   # read beside another product `pad_shared_input` did not agree with
    a, b = call.src[:2]
    if call.shape[-1] * call.dtype.itemsize % 4 and any(
            u is Reader.VIEW or isinstance(u, Node) and not picks_rows(u) and reads_region(u, call, group_of if small else None)
            for u in readers.get(call, [])):
        if call in agreed or len(members) > 1:
            return {}
        kept = {**kept, 2: call.shape[-1]}   # a plain reader reads its rows, which no DMA moves padded wider
    own_m, _, own_n = call_sides(call)
    choice = None
    if k_only:
        sides, choice = sides_choice(call, device, {0: own_m, 2: own_n})
    elif call in agreed:
        sides = agreed[call]
    elif len(members) > 1:
        sides = (joined_sides(members, device) or {}).get(call)
    else:
        sides, choice = sides_choice(call, device, {**kept, **({2: call.shape[-1]} if keeps_n(call, readers) else {})} or None)
    if sides and choice:
        chosen[call] = (a, on_sides(call, sides)[a], choice)
    sides = sides and squared(call, sides, readers, group_of, device)
    if sides is None or k_only and sides[::2] != (own_m, own_n) or not k_only and any(
            chained(u, {read: sides[::2]} | beside(u, read, agreed) | group_of.widths(u), device) is None
            for u, read in matrix_readers(call, readers, group_of)):
        return {}
    found = on_sides(call, sides)
    if k_only:
        del found[result_of(call)]
    for operand in (a, b):
        if made_over(operand, call, readers, group_of, summed=1 not in kept, tail=1 in kept and operand is a):
            lies, calls = found[operand], group_of[operand].calls
            rows = calls[0].arg.kernel.role is Role.ROW_REDUCTION
            found |= {operand.src[0]: lies} | rows_through(operand, lies) if rows else \
                {n: lies for n in external_inputs(calls)}
    return found


def squared(call: Node, sides: tuple[int, int, int], readers: dict, group_of: dict, device):
    """`pad_square`: `sides` with the sides one tensor read as both operands joins (A @ A; C @ C of the
    result) each the largest of its class; None when no grid takes them or N stays its own."""
    joined = Classes()
    tie(joined, call)
    for user, read in matrix_readers(call, readers, group_of):
        tie(joined, user)
        for axis in (0, 1):
            joined.union((read, axis), (result_of(call), axis))
    classes = [side(joined, call, i) for i in range(3)]
    square = tuple(max(s for s, c in zip(sides, classes) if c == mine) for mine in classes)
    if square == sides:
        return sides
    if (keeps_n(call, readers) and square[2] != call.shape[-1]) or whole_device_grid(call, device, square) is None:
        return None
    return square


def beside(call: Node, read: Node, agreed: dict) -> dict[Node, tuple[int, int]]:
    """The other operand of a MatMul reading `read`, with the layout `pad_shared_input` agreed for it."""
    other = call.src[1] if call.src[0] is read else call.src[0]
    return {other: agreed[other][::2]} if other in agreed else {}


def pad_through(group: Group, padded: dict, readers: dict, group_of: dict, device) -> dict[Node, tuple[int, ...]]:
    """Calls reading a padded result as it lies, where `layout_unshared` lets them: elementwise calls'
    other inputs and result alike, a row reduction's result (`rows_through`), a MatMul's other
    tensors as `chained` picks."""
    calls = group.calls
    fed = [n for n in external_inputs(calls) if n.op == Op.CALL and n in padded]
    if not fed or any(layout_unshared(calls, n, readers, group_of, padded[n][1:] != n.shape[1:]) for n in fed):
        return {}
    if calls[0].arg.kernel.role is Role.ROW_REDUCTION:
        return rows_through(calls[0], padded[fed[0]])
    if picks_rows(calls[0]):   # as many rows, its own
        return {calls[0]: (padded[fed[0]][0], *calls[0].shape[1:])}
    if calls[0].arg.kernel.role is Role.MATRIX:
        sides = chained(calls[0], {n: padded[n] for n in fed} | group_of.widths(calls[0]), device)   # None: `pad_matrix` checked only a chain's first
        return {} if sides is None else {n: shape for n, shape in on_sides(calls[0], sides).items() if n not in fed}
    return {n: padded[fed[0]] for n in (*external_inputs(calls), calls[-1]) if n not in fed}


def rows_through(call: Node, lies: tuple[int, int]) -> dict[Node, tuple[int, ...]]:
    """A row reduction over rows lying padded to `lies`: its result as many rows and, when wider, its
    shared row as wide (`pad_through_rows`, `pad_through_row_width`)."""
    found = {call: lies[:len(call.shape)]}
    if lies[1] != call.src[0].shape[1]:
        found |= {n: lies[1:] for n in call.src[1:call.arg.n_inputs]}
    return found


def pad_stream(group: Group, readers: dict, group_of: dict, device) -> dict[Node, tuple[int, ...]]:
    """Elementwise calls streaming over paddable tensors: their length (their rows) padded, with their
    `pad_shared_stream` family's, or none."""
    if not streams(group.calls):
        return {}
    family = stream_family(group, readers, group_of)
    also, padded, first = frozenset(c for g in family for c in g.calls), {}, None
    for calls in (g.calls for g in family):
        rows, *rest = calls[-1].shape   # rows padded after the last: every view stays where it was
        length = streams(calls) and not stream_unpadded(calls, readers, also, group_of) and \
            streamed_count(calls, device, rows, FLOW_QUANTUM if not rest else ROW_QUANTUM, math.prod(rest))
        first = first or (length, *rest)
        if not length or (length, *rest) != first:
            return {}
        padded |= {n: first for n in (*external_inputs(calls), result_of(calls[-1]))}
    return padded


def streams(calls) -> bool:
    """Whether elementwise calls stream, as they are or once what they read crosses a cut."""
    return held_bytes(list(calls)) > SIZE_LIMIT and (streamable(calls) or not unstreamed(calls, calls[-1].shape))


def stream_family(group: Group, readers: dict, group_of: Groups) -> list[Group]:
    """`pad_shared_stream`: `group`, then the groups reading its inputs or streaming its result, in
    turn, in program order (each tensor's readers looked at once)."""
    found, seen, todo = {group.name}, set(), [group]   # by name: hashing whole groups is slow
    while todo:
        calls = todo.pop().calls
        for n in (*external_inputs(calls), calls[-1]):
            if n in seen:
                continue
            seen.add(n)
            for g in (group_of[u] for u in readers.get(n, []) if isinstance(u, Node)
                      and (n is not calls[-1] or u.arg.kernel.role is Role.ELEMENTWISE)):
                if g.name not in found:
                    found.add(g.name)
                    todo.append(g)
    return [group, *(g for g in group_of.groups if g.name in found and g.name != group.name)]


def stream_refusal(program: Program, groups: tuple[Group, ...], group: Group, readers: dict) -> UnpaddedStream | None:
    """Why `pad_stream` did not pad `group`: a group of its family (or itself) may not."""
    family = stream_family(group, readers, Groups(groups))
    every = tuple(c for g in family for c in g.calls)
    for g in family:
        labels = tuple(call_label(program, c) for c in g.calls)
        if g is not group and not streams(g.calls):
            return UnpaddedStream(g.name, labels, group.name)
        if why := stream_unpadded(g.calls, readers, every):
            return UnpaddedStream(g.name, labels, group.name, why)
    return None


def pad_rows(group: Group, readers: dict, group_of: dict, device) -> dict[Node, tuple[int, ...]]:
    """A row reduction over a batch of rows streamed in row-blocks, its result the host's or read by
    calls sharing its layout: its rows padded, never a row's width."""
    calls = group.calls
    if not row_streamable(calls) or calls[0].arg.kernel.role is Role.EXPANSION or \
            held_bytes(list(calls)) <= SIZE_LIMIT or rows_unread(calls[0], readers, group_of) or \
            unpaddable(calls[0].src[0], calls, readers, tail=True):
        return {}   # an expansion streams in units of a row
    (call,), x = calls, calls[0].src[0]
    rows, width = x.shape
    padded_rows = streamed_count(calls, device, rows, ROW_QUANTUM, width)
    return {x: (padded_rows, width), call: (padded_rows, *call.shape[1:])} if padded_rows else {}

