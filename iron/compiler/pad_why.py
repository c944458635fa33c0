"""Which tensors may lie padded, and why not: `pad_to_block`'s predicates, each returning the reason
("" when it may). A tensor may lie padded when every reader computes over the padded layout or
sees only the user's region (`unpaddable`, `shown`, `reads_region`); a product's result when its
readers share its layout (`readers_unshared`, `layout_unshared`: `pad_through_elementwise`,
`pad_through_rows`, `pad_through_row_width`, `pad_through_matmul`, `pad_through_matmul_b`,
`pad_joined`); padding a MatMul sums over must be zeros, and who keeps it so
(`pad_through_zeros`, `pad_upstream_zeros`, `pad_upstream_rows`, `pad_written_by_producer`)."""
from __future__ import annotations

from iron.compiler.fuse import SIZE_LIMIT, Group, held_bytes
from iron.compiler.layout import (
    Fill,
    carried,
    joined,
    joined_with,
    lone_product,
    upstream,
)
from iron.compiler.readers import Reader
from iron.compiler.streaming import (
    MAX_FLOW_INPUTS,
    flow_bytes,
    streamable,
)
from iron.ir import (
    MemoryKind,
    Node,
    Op,
    Program,
    describe,
    destination,
    external_inputs,
    frame,
    is_host_tensor,
    state_written_whole,
    tensor_inputs,
)
from iron.kernels.base import Role

PLAIN = (Role.OTHER, Role.EXPANSION)   # roles of calls that neither tile nor stream (an expansion streams
                                       # only alone, over whole host tensors: `stream_expansion_units`)


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


def zeros_made(padded: dict, groups: tuple[Group, ...]) -> dict[Node, Fill]:
    """The computed tensors made over a padded layout, not written row by row, that a MatMul
    may read padded, and the zeros their padding holds: elementwise calls' (over a product's
    layout or their inputs padded: `pad_through_zeros`), a row reduction's over its rows padded
    (`pad_upstream_rows`)."""
    written = written_by_producer(padded, groups)
    rules = {Role.ELEMENTWISE: Fill.KEPT, Role.ROW_REDUCTION: Fill.ROWS}
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


def layout_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict) -> str:
    """Why `calls` may not read `result` (a padded MatMul's, or elementwise calls' over its
    layout) in its padded layout, "" when they may: elementwise calls by `pad_through_elementwise`
    (other products with it by `pad_joined`), a row reduction by `pad_through_rows`, a MatMul
    reading it as its A or B by `pad_through_matmul`, `pad_through_matmul_b`. No other reader
    may: the padding of a function of a product need not be zeros (Exp(0) = 1)."""
    if calls[0].arg.kernel.role is Role.ROW_REDUCTION:
        return rows_unshared(calls, result, readers, group_of)
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
            isinstance(u, Node) and u.arg.kernel.role in (Role.MATRIX, Role.ELEMENTWISE, Role.ROW_REDUCTION)) for u in users):
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


def rows_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict) -> str:
    """The rule `pad_through_rows`: why a row reduction may not reduce the rows of `result` as
    they lie padded, "" when it may: alone in its group, over `result` as its batch of rows, large
    enough to stream, writing no state, reading no other computed tensor or view, its result only
    the host's. Its rows may lie padded wider too only when `width_unshared` finds nothing
    against it (else `pad_matrix` keeps N: N's padding in a row reduced whole would change it)."""
    call = calls[0]
    if len(calls) != 1 or call.src[0] is not result or call.arg.writes or held_bytes(list(calls)) <= SIZE_LIMIT \
            or len(result.shape) != 2:
        return f"does not stream the rows of {describe(result)} alone in its group"
    if result.op == Op.CALL and result.arg.kernel.role is not Role.MATRIX and (why := width_unshared(call, readers)):
        return why   # rows an elementwise call makes over a product padded wider (`pad_matrix`'s `keeps_n` sees only the product's readers)
    if readers.get(call) != [Reader.HOST] and (why := readers_unshared(call, readers, group_of)):
        return f"makes {describe(call)}: {why}"   # its result lies padded too: read by the host or calls sharing that layout
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


def keeps_n(call: Node, readers: dict) -> bool:
    """Whether a row reduction reads the call's result that may not reduce its rows padded wider
    (`pad_through_row_width`), so N stays its own."""
    return any(width_unshared(u, readers) for u in readers.get(call, []))


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
