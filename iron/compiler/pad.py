"""`pad_to_block`: a large MatMul or MatVec whose sides have no good whole blocks, elementwise
calls streamed over a length with none, or a row reduction over a batch of rows (its rows only)
compute on sides padded with zeros, so the tiling rules (tiling.py) find a grid of many cores and
whole blocks; a padded tensor's Placement lies in the larger shape, the user's region in its
first rows and columns, the padding the zeros the buffer is made with (K's must be zeros in both
operands: 0 times anything else could be NaN). Deciding the layouts is one agreement problem,
solved once per design before placement so every segment sees the same layout: which (call,
side) pairs must lie alike (`tied_sides`, `agree`; streams reading one input,
`pad_shared_stream`); which tensors may lie padded, because every reader computes over the
padded layout or sees only the user's region (`unpaddable`, `layout_unshared`, `shown`; a
product whose readers may not keeps its result's shape, padded in K only, `pad_k_only`); which
padding must be zeros and who keeps it (`pad_through_zeros`, `pad_upstream_zeros`,
`pad_written_by_producer`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from iron.compiler.fuse import SIZE_LIMIT, Group, held_bytes
from iron.compiler.readers import Reader
from iron.compiler.rules import Decision, Rule
from iron.compiler.tiling import (
    MAX_FLOW_INPUTS,
    TILED_BYTES,
    call_sides,
    choose_flow,
    choose_grid,
    flow_bytes,
    row_streamable,
    streamable,
    vector_tiles,
)
from iron.ir import (
    MemoryKind,
    Node,
    Op,
    Program,
    call_label,
    describe,
    destination,
    external_inputs,
    frame,
    is_host_tensor,
    nbytes,
    state_written_whole,
    tensor_inputs,
)
from iron.kernels.base import Role

ROW_QUANTUM = 8     # each core's share of M (or of a stream) is padded to a multiple of this many
K_QUANTUM = 32      # K is padded to a multiple of this many elements
FLOW_QUANTUM = 64   # a streamed length is padded to a multiple of this many per core: whole words of int8
PLAIN = (Role.OTHER, Role.EXPANSION)   # roles of calls that neither tile nor stream (an expansion streams
                                       # only alone, over whole host tensors: `stream_expansion_units`)
FEW_CALLS = 64      # kernel calls per core a grid's own sides may take before fewer are worth padding for


@dataclass(frozen=True)
class Padding:
    """`pad_to_block`'s layout of a design: the shape each padded tensor lies in, and the
    describe() lines of the rules deciding it for the whole design: `pad_shared_input`'s, shown
    before the plan's own lines, `pad_passed_on`'s, `pad_through_zeros`', `pad_shared_stream`'s,
    `pad_row_region`'s and `pad_tile_region`'s after them."""
    shapes: dict[Node, tuple[int, ...]]
    shared: tuple[Decision, ...] = ()
    passed: tuple[Decision, ...] = ()


def pad_to_block(program: Program, groups: tuple[Group, ...], device) -> Padding:
    """The shape each tensor `pad_to_block` pads lies in: for each group that is one MatMul or
    MatVec (`pad_matrix`), elementwise calls that stream (`pad_stream`) or a row reduction over a
    batch of rows that streams (`pad_rows`: only the number of rows), the padding whose grid or
    stream on the whole device is `better` than its own sides'; for elementwise calls or a row
    reduction reading a padded MatMul's result, that result's padded layout (`pad_through`). A padded
    tensor is read by its group alone (`unpaddable`), so no two groups pad one tensor."""
    readers = readers_of(program, groups)
    group_of = {call: group for group in groups for call in group.calls}
    shared = shared_layouts(program, groups, device, readers, group_of)
    layouts = [s for s in shared if not s.why]
    agreed = {call: sides for s in layouts for call, sides in zip(s.calls, s.sides)}
    free = answered(readers, layouts)
    padded: dict[Node, tuple[int, ...]] = {}
    for group in groups:
        # pad_through first: a MatMul reading a result already padded takes its layout, not sides of its own
        padded |= pad_through(group, padded, free, group_of, device) or \
            pad_matrix(group, free, group_of, device, agreed) or \
            pad_stream(group, free, group_of, device) or pad_rows(group, free, device)
    return Padding(padded, tuple((Rule.PAD_SHARED_INPUT, s.text(program)) for s in shared),
                   (*passed_rules(program, groups, padded, group_of),
                    *zeros_rules(program, groups, padded, readers, group_of),
                    *region_rules(program, groups, padded, readers, group_of)))


def readers_of(program: Program, groups: tuple[Group, ...]) -> dict[Node, list[Node | Reader]]:
    """Who reads each tensor: calls, VIEW (a view of it is read), HOST (an output), CARRY."""
    found: dict[Node, list] = {}
    for group in groups:
        for call in group.calls:
            for node in call.src:
                if node.op == Op.VIEW:
                    found.setdefault(node.src[0], []).append(Reader.VIEW)
                found.setdefault(node, []).append(call)
    for node in program.outputs:
        found.setdefault(node, []).append(Reader.HOST)
    for _, value in program.carry:
        for node in value.src:
            found.setdefault(node, []).append(Reader.CARRY)
    return found


# ---- pad_shared_input: a tensor several padded products read --------------------------------------

@dataclass(frozen=True)
class SharedLayout:
    """`pad_shared_input`'s decision for products linked by the tensors they share (and by
    `pad_joined` or by a MatMul reading two of them): each call's sides (M, K, N), in `calls`'
    order, or why they stay their own."""
    tensors: tuple[Node, ...]   # the tensors several of `calls` read
    calls: tuple[Node, ...]     # in program order
    sides: tuple[tuple[int, int, int], ...]
    why: str = ""               # "" when they lie padded to `sides`
    pairs: tuple[Node, ...] = ()   # the MatMuls reading two of `calls` as A and B

    def text(self, program: Program) -> str:
        """The describe() line of this decision."""
        labels = ", ".join(call_label(program, c) for c in self.calls)
        if self.tensors:
            head = f"{', '.join(describe(t) for t in self.tensors)} read by {labels}"
        else:
            head = f"{labels}, read as A and B by {', '.join(call_label(program, c) for c in self.pairs)} (its K " \
                   "is A's N and B's M),"
        if self.why:
            return f"{head} stay unpadded: {self.why}"
        lies = "; ".join(f"{call_label(program, c)} on (M, K, N) = {s}" for c, s in zip(self.calls, self.sides))
        how = "padded once" if self.tensors else "lie padded alike"
        return f"{head} {how}, to the largest sides they ask for, each with a grid on them: {lies}"


def shared_layouts(program: Program, groups: tuple[Group, ...], device, readers: dict,
                   group_of: dict) -> list[SharedLayout]:
    """The rule `pad_shared_input`: a tensor several MatMuls or MatVecs read (each alone in its
    group, once, as A or B) that may be padded for them all (`unpaddable`) lies padded once for
    them all. The sides its readers share (and those `pad_joined` joins, M and N of products one
    elementwise group reads) are unified; each takes the largest of the sides its calls ask for on
    their own (`best_sides`, or their own); every call must then pad on them (`pad_matrix`: its
    grid exists there, its readers share its layout), else none does and the tensors stay unpadded."""
    tensors = [t for t, users in readers.items() if len(users) > 1 and all(
        isinstance(u, Node) and lone_product(group_of[u]) is u and large(u) and u.src[:2].count(t) == 1
        for u in users)
        and not unpaddable(t, tuple(users), readers, group_of)]
    ties = tied_sides(tensors, readers, group_of)
    same, family_of = classes(ties), classes([(a[0], b[0]) for a, b in ties])
    families: dict[Node, list[Node]] = {}
    for call in family_of:   # families in the order of their first tie, calls in program order
        families.setdefault(family_of[call], [])
    for call in group_of:
        if call in family_of:
            families[family_of[call]].append(call)
    found = []
    for calls in families.values():
        mine = tuple(t for t in tensors if readers[t][0] in calls)
        layout = agree(program, mine, tuple(calls), same, readers, group_of, device)
        if layout.sides != tuple(map(call_sides, layout.calls)):   # none asks for padding: nothing to share
            found.append(layout)
    return found


Side = tuple[Node, int]   # a product's side: the call, and 0, 1, 2 for its M, K, N


def tied_sides(tensors: list[Node], readers: dict, group_of: dict) -> list[tuple[Side, Side]]:
    """The sides of products that must lie alike: those each of the `tensors` gives its readers
    (A's M and K, B's K and N, a vector's K), the N of a MatMul's A and the M of its B when both
    are products (`pair`: its K), and the M and N of the products `pad_joined` joins with those."""
    ties = []
    for t in tensors:
        for same in zip(*([(call, i) for i in side_indices(call, t)] for call in readers[t])):
            ties += [(same[0], key) for key in same[1:]]
    ties += [((a, 2), (b, 0)) for a, b in filter(None, (pair(call, group_of) for call in group_of))]
    for call in dict.fromkeys(key[0] for tie in ties for key in tie):
        ties += [((call, i), (other, i)) for other in joined_with(call, readers, group_of) for i in (0, 2)]
    return ties


def classes(ties: list[tuple]) -> dict:
    """Each tied item's representative, one per class of items tied directly or through others."""
    root: dict = {}

    def find(item):
        while root.get(item, item) != item:
            item = root[item]
        return item

    for a, b in ties:
        root[find(b)] = find(a)
    return {item: find(item) for tie in ties for item in tie}


def agree(program: Program, tensors: tuple[Node, ...], calls: tuple[Node, ...], same: dict[Side, Side],
          readers: dict, group_of: dict, device) -> SharedLayout:
    """One family's `SharedLayout`: each side tied to others (`same`: its class) the largest its calls ask for."""
    largest: dict[Side, int] = {}
    for call in calls:
        asks = best_sides(call, device, {2: call.shape[-1]} if keeps_n(call, readers) else None) or call_sides(call)
        for i, side in enumerate(asks):
            key = same.get((call, i), (call, i))
            largest[key] = max(side, largest.get(key, 0))
    sides = tuple(tuple(largest[same.get((call, i), (call, i))] for i in range(3)) for call in calls)
    free = answered(readers, [SharedLayout(tensors, calls, sides)])
    agreed = dict(zip(calls, sides))
    why = next((f"{call_label(program, c)} {why}" for c in calls
                if (why := shared_unpadded(c, agreed, free, group_of, device))), "")
    pairs = tuple(u for u in group_of if (p := pair(u, group_of)) and p[0] in calls)
    return SharedLayout(tensors, calls, sides, why, pairs)


def side_indices(call: Node, tensor: Node) -> tuple[int, ...]:
    """Which of a product's sides (M, K, N) `tensor`'s dimensions are: A's (M, K), B's (K, N), a vector's K."""
    if call.src[0] is tensor:
        return 0, 1
    return (1,) if len(tensor.shape) == 1 else (1, 2)


def shared_unpadded(call: Node, agreed: dict, readers: dict, group_of: dict, device) -> str:
    """Why a product of a `pad_shared_input` family may not pad on the `agreed` sides, "" when it may."""
    sides = agreed[call]
    why = matrix_unpadded(call, readers, group_of)
    if why:
        return f"is not padded: {why}"
    if keeps_n(call, readers) and sides[2] != call.shape[-1]:
        return f"keeps its N of {call.shape[-1]} (pad_through_row_width), not {sides[2]}"
    if whole_device_grid(call, device, sides) is None:
        return f"has no grid on (M, K, N) = {sides}"
    if not pad_matrix(group_of[call], readers, group_of, device, agreed):
        return f"may not be padded to (M, K, N) = {sides} (a MatMul reading its result has no grid on them)"
    return ""


def answered(readers: dict, layouts: list[SharedLayout]) -> dict:
    """The readers a padding answers to: a tensor `pad_shared_input` lays out for all its
    readers answers to none of them alone."""
    return readers | {t: [] for s in layouts for t in s.tensors}


def unpaddable(node: Node, calls: tuple[Node, ...], readers: dict, group_of: dict | None = None) -> str:
    """Why `pad_to_block` may not pad a tensor `calls` read, "" when it may: an input, a weight
    or a param only they read; a state only they read but through views that write or read its
    user's region (`state_unpadded`); another group's result only they read, when that group
    writes it row by row at the padded stride (`producer_unpadded`, given `group_of`: each
    call's group; a segment sees a cut value with no group, decided for the whole design)."""
    what = describe(node)
    if node.op == Op.VIEW:
        return f"{what} is a view"
    if node.op == Op.MEMORY and node.arg.kind is MemoryKind.STATE:
        return state_unpadded(node, calls, readers)
    others = [r for r in readers.get(node, []) if r not in calls]
    if others:
        return f"{what} is read {'through a view' if Reader.VIEW in others else 'elsewhere'} too"
    if node.op == Op.CALL and group_of is not None:
        why = producer_unpadded(node, group_of[node].calls)
        return why and f"{what} is another group's result, {why}"
    if node.op == Op.CALL or is_cut_value(node):
        return f"{what} is another group's result"
    return ""


def state_unpadded(state: Node, calls: tuple[Node, ...], readers: dict) -> str:
    """The rule `pad_written_by_producer` for a state: why it may not lie padded for `calls`,
    "" when it may: every other call reads or writes it through views indexing it in its own
    shape (words.view_access strides them over the padded rows: the user's region only, so the
    padding stays the zeros the buffer is made with, as the host writes its region only), or
    writes it whole row by row (words.placement_access); nothing else reads it (a call reading
    it whole would take it in blocks that know no padding, the Emit a word of it unpadded)."""
    what = describe(state)
    for user in readers.get(state, []):
        if user in calls or user is Reader.VIEW:
            continue
        if not (isinstance(user, Node) and destination(user) is state):
            return f"{what} is a state read {'elsewhere' if isinstance(user, Reader) else f'whole by {describe(user)}'} too"
        if len(state.shape) == 2 and state.shape[1] * state.dtype.itemsize % 4:
            return f"{what} is a state {describe(user)} writes whole, in rows that are not whole 32-bit words"
    reshaped = [v for v in readers if v.op == Op.VIEW and v.src[0] is state and frame(v) != state.shape]
    return f"{what} is a state {describe(reshaped[0])} indexes in another shape, whose strides know no padding" \
        if reshaped else ""


def producer_unpadded(node: Node, calls: tuple[Node, ...]) -> str:
    """The rule `pad_written_by_producer`: why the group making `node` (its `calls`) may not
    write it where it lies padded, "" when it may: its result goes to DDR across a cut (a grid
    or stream reads host tensors only), written row by row at the padded row's stride (a
    call that neither tiles nor streams: words.placement_access; a row reduction streamed in
    row-blocks: grid.py), so the padding is never written and stays the zeros the buffer is
    made with; elementwise calls streamed (`stream_elementwise`) take blocks of whole rows then,
    one row's block taking at most SIZE_LIMIT. A MatMul's grid writes its blocks at its own row
    stride (a padded product's result is `pad_through`'s); a row at a padded stride starts on a
    32-bit word."""
    if any(c.arg.kernel.role is Role.MATRIX for c in calls):
        return "made by a MatMul or MatVec, whose grid writes its blocks at its own row stride"
    if len(node.shape) == 1:
        return ""
    if streamable(calls) and held_bytes(list(calls)) > SIZE_LIMIT and flow_bytes(calls, node.shape[1], 1) > SIZE_LIMIT:
        return (f"streamed by elementwise calls in blocks of whole rows when it lies padded, and a block of one row of "
                f"{node.shape[1]} elements takes {flow_bytes(calls, node.shape[1], 1)} bytes, more than {SIZE_LIMIT}")
    if node.shape[1] * node.dtype.itemsize % 4:
        return f"whose rows of {node.shape[1]} {node.dtype.name} elements are not whole 32-bit words, so no DMA " \
               "writes them at a padded row's stride"
    return ""


def written_by_producer(padded: dict, groups: tuple[Group, ...]) -> set[Node]:
    """The computed tensors `pad_written_by_producer` padded: those whose group reads no padded
    tensor (a padded grid or stream reads its padded operands and computes its result's padding),
    so it computes on its own sides and writes the user's region only."""
    group_of = {call: group for group in groups for call in group.calls}
    return {n for n in padded if n.op == Op.CALL
            and not any(i in padded for i in external_inputs(group_of[n].calls))}


def zeros_made(padded: dict, groups: tuple[Group, ...]) -> dict[Node, str]:
    """The computed tensors made over a padded layout, not written row by row, that a MatMul
    may read padded, and the rule computing their padding's zeros: elementwise calls' (over a
    product's layout or their inputs padded: `pad_through_zeros`), a row reduction's over its
    rows padded (`pad_upstream_rows`)."""
    written = written_by_producer(padded, groups)
    rules = {Role.ELEMENTWISE: Rule.PAD_THROUGH_ZEROS, Role.ROW_REDUCTION: Rule.PAD_UPSTREAM_ROWS}
    return {g.calls[-1]: rules[g.calls[0].arg.kernel.role] for g in groups
            if g.calls[-1] in padded and g.calls[-1] not in written and g.calls[0].arg.kernel.role in rules}


def is_cut_value(node: Node) -> bool:
    """Whether a segment's input is a value an earlier segment computed (segment.py numbers it -1)."""
    return node.op == Op.INPUT and node.arg.position == -1


def matrix_unpadded(call: Node, readers: dict, group_of: dict | None = None) -> str:
    """Why `pad_matrix` may not pad a MatMul's or MatVec's tensors, "" when it may (`group_of`:
    each call's group, when the design's, to find the elementwise readers that share the layout)."""
    joined = joined_with(call, readers, group_of) if group_of else (call,)
    return operands_unpadded(call, joined, readers, group_of) or readers_unshared(call, readers, group_of)


def operands_unpadded(call: Node, joined: tuple[Node, ...], readers: dict, group_of: dict | None) -> str:
    """Why a MatMul's or MatVec's operands may not be padded (`unpaddable`; the products `joined`
    with it, `pad_joined`, itself among them, may read them too, padded alike), "" when they may:
    also when elementwise calls that keep zeros make one over the padded layout (`zeros_upstream`)."""
    for node in call.src[:2]:
        why = unpaddable(node, joined, readers, group_of)
        if why and not (node.op == Op.CALL and group_of is not None and zeros_upstream(node, call, readers, group_of)):
            return why
    return ""


def zeros_upstream(node: Node, call: Node, readers: dict, group_of: dict) -> bool:
    """The rule `pad_upstream_zeros` (taken before `pad_written_by_producer`, whose rows at the
    padded stride stream on the group's own length): whether the elementwise group making `node`,
    which the padded MatMul or MatVec `call` alone reads, streams over the padded layout itself,
    its inputs padded with zeros: every call keeps zeros (`Kernel.keeps_zeros_in`), so the padding
    of `node` is zeros, as K's padding must be; it writes no state and reads paddable tensors all
    of `node`'s shape (2-D, `unstreamed`), its other results read within the group."""
    calls = group_of[node].calls
    return calls[-1] is node and len(node.shape) == 2 and all(c.arg.kernel.keeps_zeros_in(c.arg.attr_dict) for c in calls) \
        and readers.get(node) == [call] and all(r in calls for c in calls[:-1] for r in readers.get(c, [])) \
        and not unstreamed(calls, node.shape) \
        and not any(unpaddable(n, calls, readers, group_of) for n in external_inputs(calls))


def rows_upstream(node: Node, call: Node, readers: dict, group_of: dict) -> bool:
    """The rule `pad_upstream_rows` (taken before `pad_written_by_producer`, whose rows at the
    padded stride stream on the reduction's own rows): whether the row reduction making `node`,
    the padded MatMul `call`'s A and read by it alone, streams over its batch of rows padded with
    zeros to A's layout itself: alone in its group, writing no state, streamed, reducing each
    row's first `length` elements and writing 0 past them (`width_unshared`), so the padded
    columns are K's zeros (a padded row of zeros reduces to a finite row of M's padding), over a
    paddable batch of rows as wide as it makes."""
    return group_of[node].calls == (node,) and node.arg.kernel.role is Role.ROW_REDUCTION \
        and not node.arg.writes and len(node.shape) == 2 and node.src[0].shape == node.shape \
        and readers.get(node) == [call] and held_bytes([node]) > SIZE_LIMIT and not width_unshared(node, readers) \
        and not unpaddable(node.src[0], (node,), readers, group_of)


def readers_unshared(call: Node, readers: dict, group_of: dict | None, small: bool = False) -> str:
    """Why the readers of a padded product's result may not read it as it lies, "" when they
    may: it is `shown` (`small`: groups fitting a tile read its region too, `pad_tile_region`),
    or every reader is a call whose group shares its layout (`layout_unshared`) or the host, once
    (it reads the user's region of the output, which a later segment reads whole:
    segment.Flow.placements)."""
    users = readers.get(call, [])
    if call.arg.writes:   # a grid writes a whole state read by no one else (tiling.result_users)
        state = state_written_whole(call)
        if state is None or users:
            return "it writes part of a state" if state is None else "its result is read besides the state it writes"
        return state_unpadded(state, (call,), readers)
    if shown(call, readers, group_of if small else None):
        return ""
    if group_of and users.count(Reader.HOST) <= 1 and all(u is Reader.HOST or isinstance(u, Node) for u in users):
        why = calls_unshared(call, readers, group_of)
        return why and f"its result is {why}"
    return "its result is read by more than the host, views and calls that neither tile nor stream"


def design_unpadded(program: Program, groups: tuple[Group, ...], group: Group, device) -> str:
    """Why `pad_to_block` did not pad the MatMul or MatVec `group` is, or the elementwise calls it
    streams, as the whole design reads it ("" for other groups or when it may): a segment sees
    its cut values as host tensors. A call of a `pad_shared_input` family that may not share its
    tensors says why, naming them all; so does a group of a `pad_shared_stream` family."""
    if streamable(group.calls):
        return family_unpadded(program, groups, group)
    (call,) = group.calls if len(group.calls) == 1 else (None,)
    if call is None or call.arg.kernel.role is not Role.MATRIX:
        return ""
    readers, group_of = readers_of(program, groups), {c: g for g in groups for c in g.calls}
    refused = next((s for s in shared_layouts(program, groups, device, readers, group_of) if s.why and call in s.calls),
                   None)
    if refused:
        return f"{call_label(program, call)} is not padded: {Rule.PAD_SHARED_INPUT}: {refused.text(program)}"
    why = matrix_unpadded(call, readers, group_of)
    if not why and keeps_n(call, readers) and best_sides(call, device, {2: call.shape[-1]}) is None:
        row, whole = next((u, why) for u in readers[call] if (why := width_unshared(u, readers)))
        why = (f"{call_label(program, row)} {whole}, so N keeps its {call.shape[-1]} (pad_through_row_width), and "
               "no padding of M and K alone takes a better grid")
    return why and f"{call_label(program, call)} is not padded: {why}"


def layout_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict) -> str:
    """Why `calls` may not read `result` (a padded MatMul's, or elementwise calls' over its
    layout) in its padded layout, "" when they may: elementwise calls by `pad_through_elementwise`
    (other products with it by `pad_joined`), a row reduction by `pad_through_rows`, a MatMul
    reading it as its A or B by `pad_through_matmul`, `pad_through_matmul_b`. No other reader
    may: the padding of a function of a product need not be zeros (Exp(0) = 1)."""
    if calls[0].arg.kernel.role is Role.ROW_REDUCTION:
        return rows_unshared(calls, result, readers)
    if calls[0].arg.kernel.role is Role.MATRIX:
        return matmul_unshared(calls, result, readers, group_of)
    why = stream_unshared(calls, result, readers, group_of)
    if why:
        return why
    if not shown(calls[-1], readers):
        why = zeros_unkept(calls, readers, group_of)
        if why:
            return why
    elif readers[calls[-1]] != [Reader.HOST] and result.shape[-1] * calls[-1].dtype.itemsize % 4:
        return f"makes {describe(calls[-1])}, whose rows other calls read are not whole 32-bit words"
    return join_unshared(joined(calls, result, group_of), calls, readers, group_of)


def stream_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict) -> str:
    """Why elementwise `calls` may not stream over the padded layout `result` lies in, "" when
    they may: elementwise, writing no state, over tensors of its shape, streamed, reading other
    tensors that may be padded (those lying in a padded product's layout too: `join_unshared`)."""
    why = unstreamed(calls, result.shape)
    if why:
        return why
    why = next((why for n in external_inputs(calls) if not carried(n, group_of)
                and (why := unpaddable(n, calls, readers, group_of))), "")
    return why and f"also reads a tensor that may not be padded: {why}"


def unstreamed(calls: tuple[Node, ...], shape: tuple[int, ...]) -> str:
    """Why `calls` may not stream over a padded layout of `shape`, "" when they may: elementwise,
    writing no state, over tensors all of `shape`, too large for a tile, reading few enough."""
    if any(c.arg.kernel.role is not Role.ELEMENTWISE or c.arg.writes or c.arg.scalar_attrs for c in calls):
        return "is neither elementwise, a row reduction nor a MatMul, and would read the padding as data"
    if any(n.shape != shape for c in calls for n in (c, *tensor_inputs(c))):
        return f"reads or makes tensors of other shapes than {shape}, which cannot lie in its padding"
    if len(external_inputs(calls)) > MAX_FLOW_INPUTS or held_bytes(list(calls)) <= SIZE_LIMIT:
        return f"does not stream (its group fits a tile or reads more than {MAX_FLOW_INPUTS} tensors)"
    return ""


def zeros_unkept(calls: tuple[Node, ...], readers: dict, group_of: dict) -> str:
    """Why the readers of the last result of elementwise `calls` over a padded product's layout
    may not read it as it lies, "" when they may: the host at most once, elementwise calls
    sharing the layout (`pad_through_elementwise` passed on), and, by the rule `pad_through_zeros`,
    a MatMul as its padded A or B when every call keeps zeros (`Kernel.keeps_zeros_in`), these and
    those making the tensors they read over the layout (`upstream`), so the padding they compute
    from padding (the product's is zeros, `pad_through_matmul`; their other inputs' too) is
    zeros, as K's padding must be."""
    last = calls[-1]
    users = readers.get(last, [])
    summed = any(isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX for u in users)
    made = (*calls, *(c for g in upstream(external_inputs(calls), group_of)[1] for c in g.calls))
    unkept = next((c for c in made if not c.arg.kernel.keeps_zeros_in(c.arg.attr_dict)), None) if summed else None
    if unkept is not None or users.count(Reader.HOST) > 1 or any(u is not Reader.HOST and not (
            isinstance(u, Node) and u.arg.kernel.role in (Role.MATRIX, Role.ELEMENTWISE)) for u in users):
        why = f" ({describe(unkept)} maps zeros to other values)" if unkept is not None else ""
        return f"makes {describe(last)}, read by more than the host, views and calls that neither tile nor stream{why}"
    why = calls_unshared(last, readers, group_of)
    return why and f"makes {describe(last)}, {why}"


def calls_unshared(node: Node, readers: dict, group_of: dict) -> str:
    """Why the first call reading `node` that may not read it as it lies padded may not
    (`layout_unshared`), "" when every call may."""
    return next((f"read by {describe(u)}, which {why}" for u in readers.get(node, []) if isinstance(u, Node)
                 and (why := layout_unshared(group_of[u].calls, node, readers, group_of))), "")


def matrix_readers(call: Node, readers: dict, group_of: dict) -> list[tuple[Node, Node]]:
    """(MatMul, the tensor it reads) for each MatMul reading `call`'s result, directly or as
    the last result of elementwise groups reading it one after another (`pad_through_zeros`)."""
    found = []
    for user in (u for u in readers.get(call, []) if isinstance(u, Node)):
        if user.arg.kernel.role is Role.MATRIX:
            found.append((user, call))
        elif user.arg.kernel.role is Role.ELEMENTWISE:
            found += matrix_readers(group_of[user].calls[-1], readers, group_of)
    return found


def join_unshared(products: tuple[Node, ...], calls: tuple[Node, ...], readers: dict, group_of: dict) -> str:
    """The rule `pad_joined`: why the products whose layouts elementwise `calls` read may not lie
    padded alike (`joined_sides`), "" when they may: each tensor `calls` read in those layouts read
    by `calls` alone, a product over paddable operands, the result of elementwise calls that
    may stream over the layouts they read (checked back to the products)."""
    for other in external_inputs(calls) if len(products) > 1 else ():
        if not carried(other, group_of):
            continue
        why = "it is read elsewhere too" if any(r not in calls for r in readers[other]) \
            else source_unshared(other, products, readers, group_of)
        if why:
            return f"also reads {describe(other)}, which must lie padded alike (pad_joined), but {why}"
    return ""


def source_unshared(node: Node, products: tuple[Node, ...], readers: dict, group_of: dict) -> str:
    """Why `node`, lying in the layout of one of the joined `products`, may not lie so, "" when it
    may: a product over paddable operands, or elementwise calls' result they may stream over."""
    calls = group_of[node].calls
    if lone_product(group_of[node]) is node:
        return operands_unpadded(node, products, readers, group_of)
    return stream_unshared(calls, node, readers, group_of) or join_unshared(products, calls, readers, group_of)


def rows_unshared(calls: tuple[Node, ...], result: Node, readers: dict) -> str:
    """The rule `pad_through_rows`: why a row reduction may not reduce the rows of `result` as
    they lie padded, "" when it may: alone in its group, over `result` as its batch of rows, large
    enough to stream, writing no state, reading no other computed tensor or view, its result only
    the host's. Its rows may lie padded wider too only when `width_unshared` finds nothing
    against it (else `pad_matrix` keeps N: N's padding in a row reduced whole would change it)."""
    call = calls[0]
    if len(calls) != 1 or call.src[0] is not result or call.arg.writes or held_bytes(list(calls)) <= SIZE_LIMIT \
            or len(result.shape) != 2:
        return f"does not stream the rows of {describe(result)} alone in its group"
    if readers.get(call) != [Reader.HOST]:
        return f"makes {describe(call)}, read by more than the host"
    shared = call.src[1:call.arg.n_inputs]
    return next((f"also reads {describe(n)}, which another call makes" for n in shared if not is_host_tensor(n)
                 or n.op == Op.VIEW), "")


def width_unshared(reader, readers: dict) -> str:
    """The rule `pad_through_row_width`: why a row reduction reading a padded MatMul's result
    may not reduce its rows as they lie padded wider (N padded), "" when it may (and for any
    other reader): its kernel reduces each row's first `length` elements only (`length_axes`:
    Softmax, RMSNorm, Argmax; the compiler passes the user's width when the call gives no
    length), so the padding is never reduced, and the row every row shares (RMSNorm's w) may be
    padded with zeros as wide."""
    if not isinstance(reader, Node) or reader.arg.kernel.role is not Role.ROW_REDUCTION:
        return ""
    kernel = reader.arg.kernel
    if not kernel.traits.row_length:
        return "reduces each row whole (its kernel takes no length)"
    why = next((why for n in reader.src[1:reader.arg.n_inputs] if (why := unpaddable(n, (reader,), readers))), "")
    return why and f"also reads a row that may not be padded: {why}"


def matmul_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict) -> str:
    """The rules `pad_through_matmul` (`result` read as A) and `pad_through_matmul_b` (as B): why a
    MatMul may not read `result` as it lies padded, "" when it may: alone in its group, reading it
    once, as A or as B, its other operand paddable, its result's readers sharing its layout
    (`readers_unshared`). Then the side of `result` the MatMul sums over (A's N, B's M) has its K
    padding, which must be zeros in both operands: it is, the sum of A's zero rows or B's zero
    columns times the other (finite) operand."""
    call = calls[0]
    if len(calls) != 1 or call.arg.writes or len(call.shape) != 2 or result not in call.src[:2]:
        return f"reads {describe(result)} other than as the A or the B of a MatMul alone in its group"
    other = call.src[1] if call.src[0] is result else call.src[0]
    why = "" if other is result else paired_unshared(result, other, call, readers, group_of) \
        if pair(call, group_of) else unpaddable(other, calls, readers, group_of)
    if why:
        return f"also reads a tensor that may not be padded: {why}"
    why = readers_unshared(call, readers, group_of)
    return why and f"makes {describe(call)}: {why}"


def pair(call: Node, group_of: dict) -> tuple[Node, Node] | None:
    """A and B of a MatMul reading two products (MatMuls alone in their groups), None for any other call."""
    if call.arg.kernel.role is not Role.MATRIX or len(call.shape) != 2:
        return None
    a, b = call.src[:2]
    products = [n for n in (a, b) if n.op == Op.CALL and lone_product(group_of[n]) is n]
    return (a, b) if a is not b and len(products) == 2 else None


def paired_unshared(result: Node, other: Node, call: Node, readers: dict, group_of: dict) -> str:
    """The rule `pad_through_matmul` of both operands: why a MatMul may not read the product
    `other` padded beside `result`, "" when it may: read by the MatMul alone, over paddable
    operands; `pad_shared_input` lays both out at once (`agree`: A's N is B's M, the MatMul's K),
    else neither is padded (`pad_matrix`)."""
    if readers[other] != [call]:
        return f"{describe(other)} is a padded product read elsewhere too"
    return operands_unpadded(other, (other,), readers, group_of)


def shown(call: Node, readers: dict, group_of: dict | None = None) -> bool:
    """Whether a padded result is read only as the user's region, so the padding its kernel
    writes is never read: by the host at most once, and otherwise (in DDR only across a segment
    cut) through views (words.view_access: no grid or stream takes a view) or by calls that
    neither tile nor stream (`reads_region`; an elementwise, matrix or row-reduction reader
    might take it in blocks that know no padding)."""
    users = readers.get(call, [])
    return bool(users) and users.count(Reader.HOST) <= 1 and all(
        u in (Reader.HOST, Reader.VIEW) or (isinstance(u, Node) and reads_region(u, call, group_of)) for u in users)


def reads_region(user: Node, node: Node, group_of: dict | None = None) -> bool:
    """Whether a call reads only the user's region of `node` where it lies padded (words.placement_access):
    one that neither tiles nor streams (`fits_tile`, given `group_of`), or a row reduction of
    `node` as its one row (a vector: it never streams, and its kernel reduces the row's first
    `length` elements, the user's width when the call gives none), so no padding it might read
    wins an Argmax."""
    role = user.arg.kernel.role
    return role in PLAIN or group_of is not None and fits_tile(group_of[user], node) \
        or role is Role.ROW_REDUCTION and user.src[0] is node and len(node.shape) == 1 and node not in user.src[1:]


def fits_tile(group: Group, node: Node) -> bool:
    """The rule `pad_tile_region`: a group of elementwise calls or a row reduction that fits a
    tile (`held_bytes`: it neither streams nor tiles) runs on one core, which reads a padded
    product's result across the segment cut (a grid's result goes to DDR, `result_users`) in
    its own shape: the DMA moves each row's first elements at the padded row's stride
    (words.placement_access), so its kernels never see the padding. Rows of whole 32-bit
    words only: no DMA moves less. A MatMul reading it follows `pad_through_matmul`."""
    roles = {c.arg.kernel.role for c in group.calls}
    return held_bytes(list(group.calls)) <= SIZE_LIMIT and Role.MATRIX not in roles \
        and node.shape[-1] * node.dtype.itemsize % 4 == 0


def pad_matrix(group: Group, readers: dict, group_of: dict, device,
               agreed: dict | None = None) -> dict[Node, tuple[int, ...]]:
    """A MatMul or MatVec alone in its group, large enough to tile, over paddable operands, whose
    result is `shown` or read by calls that share its layout (`layout_unshared`): its sides
    padded (`padded_sides`), when some of them padded (`best_sides`; N its own for a row
    reduction that `keeps_n`; M and N agreed with the products an elementwise group reads with it,
    `joined_sides`; with a grid for a MatMul reading it, `chained`) gives a better grid; A, B and
    the result padded to them. While a view or a plain call reads the result (across a cut) the
    call may run off the grid, reading its operands row by row (words.placement_access): then
    their rows must be whole words. `agreed`: the sides `pad_shared_input` agreed for the products
    sharing a tensor, taken instead. A result whose readers may not read it padded keeps its
    shape: then only K is padded (`pad_k_only`); else, when groups fitting a tile read it
    (`pad_tile_region`, after `pad_k_only`), it is padded for them to read its region."""
    call = lone_product(group)
    if call is None:
        return {}
    if not readers_unshared(call, readers, group_of):
        return padded_product(call, readers, group_of, device, agreed)
    return padded_product(call, readers, group_of, device, agreed, k_only=True) or (
        {} if readers_unshared(call, readers, group_of, small=True)
        else padded_product(call, readers, group_of, device, agreed, small=True))


def padded_product(call: Node, readers: dict, group_of: dict, device, agreed: dict | None,
                   k_only: bool = False, small: bool = False) -> dict[Node, tuple[int, ...]]:
    """`pad_matrix` of `call`, its result kept in its shape (`k_only`), or read by groups
    fitting a tile too (`small`)."""
    members = (call,) if k_only else joined_with(call, readers, group_of)
    if operands_unpadded(call, members, readers, group_of):
        return {}
    if call not in (agreed or {}) and any(isinstance(u, Node) and call in (pair(u, group_of) or ())
                                          for u in readers.get(call, [])):
        return {}   # read beside another product whose layout `pad_shared_input` did not agree with its own
    a, b = call.src[:2]
    plain_reader = any(u is Reader.VIEW or isinstance(u, Node) and reads_region(u, call, group_of if small else None)
                       for u in readers.get(call, []))
    if plain_reader and any(n.shape[-1] * n.dtype.itemsize % 4 for n in (a, b)):
        return {}
    if not all(map(large, members)):
        return {}
    own_m, _, own_n = call_sides(call)
    if k_only:
        sides = best_sides(call, device, {0: own_m, 2: own_n})
    elif call in (agreed or {}):
        sides = agreed[call]
    elif len(members) > 1:
        sides = (joined_sides(members, device) or {}).get(call)
    else:
        sides = best_sides(call, device, {2: call.shape[-1]} if keeps_n(call, readers) else None)
    sides = sides and squared(call, sides, readers, group_of, device)
    if sides is None or k_only and sides[::2] != (own_m, own_n) or not k_only and any(
            chained(u, {read: sides[::2]} | beside(u, read, agreed), device) is None
            for u, read in matrix_readers(call, readers, group_of)):
        return {}
    found = on_sides(call, sides)
    if k_only:   # `pad_k_only`: the result lies in its own shape, whoever reads it
        del found[result_of(call)]
    for operand in (a, b):   # made over the padded layout: `zeros_upstream`, `rows_upstream`
        if operand.op != Op.CALL:
            continue
        if zeros_upstream(operand, call, readers, group_of):
            found |= {n: found[operand] for n in external_inputs(group_of[operand].calls)}
        elif operand is a and rows_upstream(operand, call, readers, group_of):
            found |= {operand.src[0]: found[a]} | rows_through(operand, found[a])
    return found


def on_sides(call: Node, sides: tuple[int, int, int]) -> dict[Node, tuple[int, ...]]:
    """The shapes a product's A, B and result lie in on `sides` (M, K, N): (M, K), (K, N) and
    (M, N); a MatVec's B and result are vectors, (K,) and (M,)."""
    (a, b), (m, k, n) = call.src[:2], sides
    return {a: (m, k), b: (k, n)[:len(b.shape)], result_of(call): (m, n)[:len(call.shape)]}


def squared(call: Node, sides: tuple[int, int, int], readers: dict, group_of: dict, device):
    """The rule `pad_square`: `sides` with those one tensor read as both operands makes one (A @ A:
    M, K and N; a result C that a MatMul reads as both, C @ C: its M and N) each the largest of
    them, so that tensor lies in one padded layout for both; None when no grid takes them (or N
    must stay its own, `keeps_n`)."""
    tied = {0, 1, 2} if call.src[0] is call.src[1] else set()
    if any(u.src[0] is u.src[1] for u, _ in matrix_readers(call, readers, group_of)):
        tied |= {0, 2}
    if not tied:
        return sides
    side = max(sides[i] for i in tied)
    square = tuple(side if i in tied else s for i, s in enumerate(sides))
    if square == sides:
        return sides
    if (keeps_n(call, readers) and square[2] != call.shape[-1]) or whole_device_grid(call, device, square) is None:
        return None
    return square


def beside(call: Node, read: Node, agreed: dict | None) -> dict[Node, tuple[int, int]]:
    """The other operand of a MatMul reading `read` and the layout `pad_shared_input` agreed for it, if it did."""
    other = call.src[1] if call.src[0] is read else call.src[0]
    return {other: agreed[other][::2]} if other in (agreed or {}) else {}


def lone_product(group: Group) -> Node | None:
    """The MatMul or MatVec of two operands, writing no state or a whole one, that `group` is
    alone, if it is one."""
    (call,) = group.calls if len(group.calls) == 1 else (None,)
    if call is None or call.arg.kernel.role is not Role.MATRIX or call.arg.n_inputs != 2:
        return None
    if call.arg.writes and state_written_whole(call) is None:
        return None
    return call


def large(call: Node) -> bool:
    """Whether a MatMul's or MatVec's tensors are too large for one tile, so it tiles."""
    a, b = call.src[:2]
    return vector_tiles(a, a) if len(call.shape) == 1 else \
        nbytes(a) + nbytes(b) + nbytes(call) > TILED_BYTES


def upstream(nodes, group_of: dict) -> tuple[tuple[Node, ...], tuple[Group, ...]]:
    """The padded products whose layout `nodes` lie in when read over it, in the order they are
    read, and the elementwise groups between them: a MatMul alone in its group lies in its own;
    the last result of elementwise calls reading such a layout in theirs (`pad_through_elementwise`,
    passed on to the next reader)."""
    products, groups, seen, todo = [], [], set(), list(reversed(nodes))
    while todo:
        node = todo.pop()
        if node in seen or node.op != Op.CALL or len(node.shape) != 2:
            continue
        seen.add(node)
        group = group_of[node]
        if lone_product(group) is node:
            products.append(node)
        elif group.calls[-1] is node and group.calls[0].arg.kernel.role is Role.ELEMENTWISE:
            groups.append(group)
            todo.extend(reversed(external_inputs(group.calls)))
    return tuple(products), tuple(groups)


def carried(node: Node, group_of: dict) -> bool:
    """Whether `node` lies in a padded product's layout when read over it (`upstream`)."""
    return bool(upstream((node,), group_of)[0])


def joined(calls: tuple[Node, ...], result: Node, group_of: dict) -> tuple[Node, ...]:
    """The products whose layout elementwise `calls` read (`upstream`: directly or through
    elementwise calls over it), `result` lying in one of them, in the order they read them
    (`pad_joined` pads them alike); () when `result` lies in none."""
    products = upstream(external_inputs(calls), group_of)[0]
    return products if set(upstream((result,), group_of)[0]) & set(products) else ()


def joined_with(call: Node, readers: dict, group_of: dict) -> tuple[Node, ...]:
    """The products `pad_joined` pads alike with `call` (itself among them): those the last of
    the elementwise groups reading its layout, one after another, reads (`layout_unshared` lets
    only one group read each of them)."""
    node, found = call, (call,)
    while users := [u for u in readers.get(node, []) if isinstance(u, Node) and u.arg.kernel.role is Role.ELEMENTWISE]:
        calls = group_of[users[0]].calls
        if not (products := joined(calls, node, group_of)):
            break
        node, found = calls[-1], products
    return found if call in found else (call,)


def joined_sides(products: tuple[Node, ...], device) -> dict[Node, tuple[int, int, int] | None] | None:
    """The rule `pad_joined`: each of the products one elementwise group reads, on the M and N
    `best_sides` picks for the first (or its own), so that their results lie alike, and on its
    own K or a padded one (`best_sides`; None: its own sides), the first's K too when two of
    them read one operand, which lies padded once; None when some product has no grid so."""
    first = products[0]
    big_m, big_k, big_n = best_sides(first, device) or call_sides(first)
    shared = len({n for p in products for n in p.src[:2]}) < 2 * len(products)   # an operand lies padded alike too
    sides = {p: best_sides(p, device, {0: big_m, 1: big_k, 2: big_n} if shared else {0: big_m, 2: big_n})
             for p in products}
    if any(s is None and p.shape != (big_m, big_n) for p, s in sides.items()):
        return None
    return sides


def pad_through(group: Group, padded: dict, readers: dict, group_of: dict, device) -> dict[Node, tuple[int, ...]]:
    """Calls reading a padded MatMul's result whole (`pad_matrix` pads it only when they may,
    `layout_unshared`): elementwise calls' other inputs and last result padded to its layout
    (`pad_through_elementwise`), so they stream over it, each element of the padding computed
    from padding; a row reduction's result padded to as many rows (`pad_through_rows`), and as
    wide with its shared row when N is padded (`pad_through_row_width`, `rows_through`); a
    MatMul reading it as A computes on its padded M and K (`pad_through_matmul`), as B on its
    padded K and N (`pad_through_matmul_b`), its other side as `chained` picks, its other
    operand and its result padded to them."""
    calls = group.calls
    fed = [n for n in external_inputs(calls) if n.op == Op.CALL and n in padded]
    if not fed or any(layout_unshared(calls, n, readers, group_of) for n in fed):
        return {}
    if calls[0].arg.kernel.role is Role.ROW_REDUCTION:
        return rows_through(calls[0], padded[fed[0]])
    if calls[0].arg.kernel.role is Role.MATRIX:
        sides = chained(calls[0], {n: padded[n] for n in fed}, device)
        if sides is None:   # a product read by a product read by a product: `pad_matrix` checked the first only
            return {}
        return {n: shape for n, shape in on_sides(calls[0], sides).items() if n not in fed}
    return {n: padded[fed[0]] for n in (*external_inputs(calls), calls[-1]) if n not in fed}


def rows_through(call: Node, lies: tuple[int, int]) -> dict[Node, tuple[int, ...]]:
    """A row reduction over rows that lie padded to `lies`: its result padded to as many rows
    (`pad_through_rows`) and, where they lie wider, as wide (one element per row for Argmax),
    the row every row shares (RMSNorm's w) padded with zeros as wide (`pad_through_row_width`)."""
    found = {call: lies[:len(call.shape)]}
    if lies[1] != call.src[0].shape[1]:
        found |= {n: lies[1:] for n in call.src[1:call.arg.n_inputs]}
    return found


def whole_device_grid(call: Node, device, padded=None):
    """The grid `choose_grid` gives `call` (on `padded` sides) with the whole device to itself."""
    return choose_grid(call, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                       device.n_cols * device.shim.dma_out_channels, padded=padded)


def keeps_n(call: Node, readers: dict) -> bool:
    """Whether a row reduction reads the call's result that may not reduce its rows padded wider
    (`pad_through_row_width`), so N stays its own."""
    return any(width_unshared(u, readers) for u in readers.get(call, []))


def chained(call: Node, lies: dict[Node, tuple[int, int]], device) -> tuple[int, int, int] | None:
    """The sides (M, K, N) of a MatMul reading tensors that lie padded (`lies`: tensor -> shape)
    as its A (M, K) or its B (K, N): its other side its own or padded, whichever grid
    `best_sides` puts first; None when none has a grid (or A's and B's K differ)."""
    fixed: dict[int, int] = {}
    for node, shape in lies.items():
        for at in [at for at, n in zip(((0, 1), (1, 2)), call.src[:2]) if n is node]:   # as A, as B, or both
            for i, side in zip(at, shape):
                if fixed.setdefault(i, side) != side:
                    return None
    return best_sides(call, device, fixed, any_grid=True)


def _ranked(call: Node, device, tried, mine=None) -> list[tuple[tuple, tuple[int, int, int]]]:
    """(rank, sides) of each of the `tried` sides with a grid `better` than `mine` (the call's own
    sides' score; None: any grid): the fewest kernel calls per core, the least work per core,
    the fewest elements moved."""
    scored = []
    for sides in tried:
        score = _grid_score(whole_device_grid(call, device, sides))
        if score is not None and better(score, mine):
            (work, calls), (a, k, b) = score, sides
            scored.append(((calls, work, a * k + k * b + a * b), sides))
    return scored


def best_sides(call: Node, device, fixed: dict[int, int] | None = None,
               any_grid: bool = False) -> tuple[int, int, int] | None:
    """Of the sides (M, K, N) tried, each its own or padded to its quantum (`padded_sides`; when
    none of those has a grid, to the wider quantum of `pad_wider`) but those `fixed` gives
    (index: size), the ones whose grid is `better` than the call's own sides' (`any_grid`, or a
    fixed side not its own: any grid, its own sides too), of the fewest kernel calls per core,
    then the least work per core, then the fewest elements moved; None when none is."""
    own, fixed = call_sides(call), fixed or {}
    near = (word_rows(call), *own[1:])
    for up in (padded_sides(call, device), padded_sides(call, device, wider=True)):
        tried = set(product(*({fixed[i]} if i in fixed else {side, n, u}
                              for i, (side, n, u) in enumerate(zip(own, near, up)))))
        if any_grid or any(own[i] != side for i, side in fixed.items()):
            scored = _ranked(call, device, tried)
        else:
            scored = _ranked(call, device, tried - {own}, _grid_score(whole_device_grid(call, device))) \
                if tried != {own} else []
        if scored:
            return min(scored)[1]
    return None


def word_rows(call: Node) -> int:
    """The rule `pad_m_to_words`: a MatVec's M padded to the fewest rows whose results are whole
    32-bit words (a 1-row bfloat16 MatVec: 2 rows, not a multiple of ROW_QUANTUM per core), tried
    beside `padded_sides`; a MatMul's own M."""
    per_word = 4 // min(4, call.dtype.itemsize) if len(call.shape) == 1 else 1
    return -(-call_sides(call)[0] // per_word) * per_word


def padded_sides(call: Node, device, wider: bool = False) -> tuple[int, int, int]:
    """The call's sides padded to a multiple of ROW_QUANTUM per row of cores (M; a MatVec's: per
    core), of K_QUANTUM (K) and of ROW_QUANTUM per column (N); `wider` (the rule `pad_wider`),
    each quantum but a MatVec's N rounded up to a multiple of K_QUANTUM, for the sides a narrow
    quantum leaves with no dividing block (on one column N = 2053 pads to 2056 = 8 x 257, whose
    blocks of at most 8 take more rounds than a Dma op repeats; 2080 = 32 x 65 has blocks)."""
    rows, cols = len(device.compute_rows), device.n_cols
    vector = len(call.shape) == 1
    quanta = (ROW_QUANTUM * (rows * cols if vector else rows), K_QUANTUM, 1 if vector else ROW_QUANTUM * cols)
    if wider:
        quanta = tuple(q if q == 1 else math.lcm(q, K_QUANTUM) for q in quanta)
    return tuple(-(-side // q) * q for side, q in zip(call_sides(call), quanta))


def better(padded: tuple[float, int], mine: tuple[float, int] | None) -> bool:
    """Whether a padded grid or stream scoring `padded` (elements of work per core, padding
    included; kernel calls per core) is worth it over the call's own sides, `mine`: they have
    none, or more work per core (the padded one takes more cores than its padding costs), or
    more than FEW_CALLS kernel calls per core, at least twice the padded one's."""
    return mine is None or padded[0] < mine[0] or FEW_CALLS < mine[1] >= 2 * padded[1]


def _grid_score(grid) -> tuple[float, int] | None:
    if grid is None:
        return None
    return math.prod(grid.sides) / grid.cores, grid.fewest_calls


def pad_stream(group: Group, readers: dict, group_of: dict, device) -> dict[Node, tuple[int, ...]]:
    """Elementwise calls that stream (`stream_elementwise`) over one-dimensional paddable
    tensors, whose last result is read only as the user's region (`shown`): their length padded
    (`streamed_count`). An input other streamed groups read too is
    padded once for them all (`pad_shared_stream`)."""
    family = stream_family(group, readers, group_of)
    every = tuple(c for g in family for c in g.calls)
    padded = [stream_padding(g, readers, device, every) for g in family]
    if not all(padded) or len({p[result_of(g.calls[-1])] for p, g in zip(padded, family)}) != 1:
        return {}
    return {n: shape for p in padded for n, shape in p.items()}


def stream_family(group: Group, readers: dict, group_of: dict) -> list[Group]:
    """The rule `pad_shared_stream`: `group` and the groups reading an input of it, and theirs in
    turn; they stream over one padded length, or none is padded (a tensor lies in one layout)."""
    family, todo = [], [group]
    while todo:
        g = todo.pop()
        if g in family:
            continue
        family.append(g)
        todo += [group_of[u] for n in external_inputs(g.calls) for u in readers.get(n, []) if isinstance(u, Node)]
    return family


def family_unpadded(program: Program, groups: tuple[Group, ...], group: Group) -> str:
    """Why `pad_stream` did not pad the streamed `group`, as the whole design reads it: why
    a group of its `pad_shared_stream` family may not pad, "" when each may or it has none (its
    own refusal says why)."""
    readers, group_of = readers_of(program, groups), {c: g for g in groups for c in g.calls}
    family = stream_family(group, readers, group_of)
    if len(family) == 1:
        return ""
    every = tuple(c for g in family for c in g.calls)
    for g in family:
        labels = ", ".join(call_label(program, c) for c in g.calls)
        if not streamable(g.calls):
            return (f"{labels} reads an input of {group.name} too and does not stream, and {Rule.PAD_SHARED_STREAM} pads "
                    "an input for every group reading it or for none")
        if why := stream_unpadded(g.calls, readers, every):
            return f"{labels} is not padded: {why}"
    return ""


def stream_padding(group: Group, readers: dict, device, also: tuple[Node, ...] = ()) -> dict[Node, tuple[int, ...]]:
    """`pad_stream` of one group, `also` (the calls of its family) reading its inputs padded too."""
    calls = group.calls
    if not streamable(calls) or held_bytes(list(calls)) <= SIZE_LIMIT or stream_unpadded(calls, readers, also):
        return {}
    length = streamed_count(calls, device, calls[-1].size, FLOW_QUANTUM)
    return {n: (length,) for n in (*external_inputs(calls), result_of(calls[-1]))} if length else {}


def stream_unpadded(calls, readers: dict, also: tuple[Node, ...] = ()) -> str:
    """Why `pad_stream` may not pad elementwise calls' tensors, "" when it may (`also`: other
    calls that read their inputs padded alike, `pad_shared_stream`)."""
    last = calls[-1]
    if len(last.shape) != 1:
        return "their tensors are not one-dimensional"
    if last.arg.writes and (readers.get(last) or destination(last).op == Op.VIEW):
        return f"{describe(last)} is read, or written into a view of {describe(destination(last))}"
    if not last.arg.writes and not shown(last, readers):
        return f"{describe(last)} is read by more than the host, views and calls that read its user's region"
    if returned := [c for c in calls[:-1] if Reader.HOST in readers.get(c, [])]:
        return f"{describe(returned[0])} is returned too, in its own length"
    return next((why for n in external_inputs(calls) if (why := unpaddable(n, (*calls, *also), readers))), "")


def pad_rows(group: Group, readers: dict, device) -> dict[Node, tuple[int, ...]]:
    """A row reduction (RMSNorm, Softmax, Argmax) over a batch of rows (rows, n) that streams in
    row-blocks (`stream_row_blocks`), over a paddable batch, whose result only the host reads:
    its number of rows padded (`streamed_count`); never a row's width (a row is reduced whole:
    padding it would change the result), nor the row every row shares (RMSNorm's w)."""
    calls = group.calls
    if not row_streamable(calls) or held_bytes(list(calls)) <= SIZE_LIMIT or readers.get(calls[0]) != [Reader.HOST]:
        return {}
    if calls[0].arg.kernel.role is Role.EXPANSION:   # streams in units of a row (`stream_expansion_units`)
        return {}
    (call,), x = calls, calls[0].src[0]
    if unpaddable(x, calls, readers):
        return {}
    rows, width = x.shape
    padded_rows = streamed_count(calls, device, rows, ROW_QUANTUM, width)
    return {x: (padded_rows, width), call: (padded_rows, *call.shape[1:])} if padded_rows else {}


def streamed_count(calls, device, count: int, quantum: int, width: int = 1) -> int | None:
    """`pad_stream`'s length or `pad_rows`' rows: `count` (elements, or rows of `width`) padded to
    a multiple of `quantum` per core of the device, when calls streaming it so score `better`
    (blocks count as kernel calls) than over their own; None when they do not."""
    step = quantum * device.n_cols * len(device.compute_rows)
    padded = -(-count // step) * step
    score = _flow_score(calls, device, padded * width, width)
    return padded if padded != count and score and better(score, _flow_score(calls, device, None, width)) else None


def _flow_score(calls, device, padded, width: int = 1) -> tuple[float, int] | None:
    flow = choose_flow(calls, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                       device.n_cols * device.shim.dma_out_channels, width=width, padded=padded)
    return None if flow is None else (flow.size / len(flow.tiles), flow.rounds)


def zeros_rules(program: Program, groups: tuple[Group, ...], padded: dict, readers: dict,
                group_of: dict) -> list[Decision]:
    """`pad_through_zeros` as describe() shows it, once for the design: each elementwise group
    over a padded layout whose result a MatMul reads padded, its padding zeros its kernels kept
    (and those of the elementwise calls that passed the layout on to it, `upstream`)."""
    written = written_by_producer(padded, groups)
    order = {call: i for i, call in enumerate(group_of)}
    lines = []
    for group in groups:
        last = group.calls[-1]
        users = [u for u in readers.get(last, []) if isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX]
        if last not in padded or last in written or not users or group.calls[0].arg.kernel.role is not Role.ELEMENTWISE:
            continue
        sums = ", ".join(f"{call_label(program, u)} reads it as its padded {'A' if u.src[0] is last else 'B'}"
                         for u in users)
        made = (*(c for g in upstream(external_inputs(group.calls), group_of)[1] for c in g.calls), *group.calls)
        labels = ", ".join(call_label(program, c) for c in sorted(made, key=order.get))
        lines.append((Rule.PAD_THROUGH_ZEROS, f"{group.name}: {labels} keeps zeros, so the padding of "
                      f"{describe(last)} as it lies padded to {padded[last]} is zeros, computed from zeros: "
                      f"{sums}"))
    return lines


def passed_rules(program: Program, groups: tuple[Group, ...], padded: dict, group_of: dict) -> list[Decision]:
    """`pad_passed_on` as describe() shows it, once for the design: each elementwise group that
    streams over the result of elementwise calls which streamed over a padded product's layout
    (`pad_through_elementwise`), so it lies in that layout too, and the products it is theirs."""
    lines = []
    for group in groups:
        calls = group.calls
        passed = [n for n in external_inputs(calls) if n in padded and n.op == Op.CALL
                  and lone_product(group_of[n]) is None and carried(n, group_of)]
        if not passed or calls[0].arg.kernel.role is not Role.ELEMENTWISE:
            continue
        labels = ", ".join(call_label(program, c) for c in calls)
        makers = ", ".join(call_label(program, c) for n in passed for c in group_of[n].calls)
        products = upstream(external_inputs(calls), group_of)[0]
        joined_text = " (pad_joined: they lie alike)" * (len(products) > 1)
        lines.append((Rule.PAD_PASSED_ON, f"{group.name}: {labels} streams over {', '.join(map(describe, passed))} as "
                      f"{makers} left it, padded to {padded[passed[0]]} in the layout of "
                      f"{', '.join(call_label(program, p) for p in products)}{joined_text}: the padded layout "
                      "passes on from elementwise calls to the next, each element of the padding computed from "
                      "padding"))
    return lines


def region_rules(program: Program, groups: tuple[Group, ...], padded: dict, readers: dict,
                 group_of: dict) -> list[Decision]:
    """`pad_shared_stream`, `pad_row_region` and `pad_tile_region` as describe() shows them, once
    for the design: each input several streamed groups read lying padded once for them, each row
    reduction reading a padded vector's user's region only (`reads_region`), and each group that
    fits a tile reading a padded result's (`fits_tile`)."""
    lines = []
    for node, shape in padded.items():
        users = [u for u in readers.get(node, []) if isinstance(u, Node)]
        if node.op != Op.CALL and len(set(users)) > 1 and all(u.arg.kernel.role is Role.ELEMENTWISE for u in users):
            labels = ", ".join(call_label(program, u) for u in users)
            lines.append((Rule.PAD_SHARED_STREAM, f"{describe(node)} lies padded once to {shape} for {labels}, each group "
                          "streaming over it padded alike"))
        rowed = [u for u in users if u.arg.kernel.role is Role.ROW_REDUCTION and reads_region(u, node)]
        for u in rowed:
            lines.append((Rule.PAD_ROW_REGION, f"{call_label(program, u)} reads {describe(node)} where it lies padded "
                          f"to {shape}, its user's region only: the first {node.size} elements, the kernel told "
                          f"length={u.arg.attr_dict.get('length') or node.size}, so the padding is never reduced"))
        small = [u for u in dict.fromkeys(users) if node.op == Op.CALL and u.arg.kernel.role not in PLAIN
                 and u not in rowed and fits_tile(group_of[u], node)]
        for g in dict.fromkeys(group_of[u] for u in small):
            labels = ", ".join(call_label(program, u) for u in small if u in g.calls)
            lines.append((Rule.PAD_TILE_REGION, f"{g.name}: {labels} read {describe(node)} where it lies padded to {shape}, "
                          f"its user's region only: the group fits a tile, so a DMA moves the first {node.shape[-1]} "
                          "elements of each padded row and its kernels never see the padding"))
    return lines


# ---- what placement reads back --------------------------------------------------------------------

def padded_nodes(program: Program, placements) -> dict[Node, tuple[int, ...]]:
    """The padded shape of each of `program`'s host tensors and outputs whose placement is padded
    (a segment's Program sees the design's placements: its cut values are inputs)."""
    by_name = {p.name: p.padded for p in placements if p.padded is not None}
    if not by_name:   # most designs: nothing to look up in each probe's calls
        return {}
    found = {n: by_name[f"out{i}"] for i, n in enumerate(program.outputs) if f"out{i}" in by_name}
    for call in program.calls:
        for node in (s.src[0] if s.op == Op.VIEW else s for s in call.src):
            name = node.arg.name if node.op in (Op.INPUT, Op.MEMORY) else None
            if name in by_name:
                found[node] = by_name[name]
    return found


def producer_written_nodes(program: Program, placements) -> frozenset[Node]:
    """The values crossing into `program` (a segment's) or out of it whose producer writes them
    where they lie padded (`pad_written_by_producer`, Placement.producer_writes)."""
    return frozenset(placed(program, {p.name for p in placements if p.producer_writes}))


def zeros_made_nodes(program: Program, placements) -> dict[Node, str]:
    """The values crossing into or out of `program` (a segment's) that calls made over a padded
    layout, and the rule computing their padding's zeros (Placement.zeros_rule)."""
    rules = {p.name: p.zeros_rule for p in placements if p.zeros_rule}
    return {n: rules[name] for n, name in placed(program, set(rules)).items()}


def placed(program: Program, names: set[str]) -> dict[Node, str]:
    """`program`'s outputs and inputs placed under `names`, with their placement's name."""
    if not names:
        return {}
    found = {n: f"out{i}" for i, n in enumerate(program.outputs) if f"out{i}" in names}
    return found | {n: n.arg.name for n in program.inputs if n.arg.name in names}


def result_of(call: Node) -> Node:
    """Where a matrix call's result lies: the state it writes whole (out=), or itself."""
    return state_written_whole(call) or call


def grid_sides(call: Node, padded: dict) -> tuple[int, int, int] | None:
    """(M, K, N) of a matrix call as its operands and result lie (N = 1 for a MatVec), None when
    they lie inconsistently (one padded for another rule): then it takes no grid."""
    result = result_of(call)   # a state written whole: its elements, in the call's shape unless padded
    lies = {n: padded.get(n, n.shape) for n in call.src[:2]} | {result: padded.get(result, call.shape)}
    sides = (*lies[call.src[0]], lies[call.src[1]][-1] if len(call.shape) == 2 else 1)
    return sides if all(lies[n] == shape for n, shape in on_sides(call, sides).items()) else None


def stream_length(calls, inputs, padded: dict) -> int | None:
    """The elements the streamed inputs of elementwise calls or a row reduction lie in: padded
    (all of them and the result, to as many rows), or their own (the result may lie padded
    alone: `pad_written_by_producer`); None when they lie otherwise."""
    tensors = (*inputs, result_of(calls[-1]))
    if not any(n in padded for n in inputs):
        return inputs[0].size
    if not all(n in padded for n in tensors) or len({padded[n][0] for n in tensors}) != 1:
        return None
    return math.prod(padded[inputs[0]])
