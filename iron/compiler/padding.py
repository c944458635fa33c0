"""Which tensors may lie padded, for the layout pass (layout.py): who reads each tensor, and the
pins, each a reason ("" when none) a reader cannot see a tensor padded: a view, another reader, a
producer that cannot write at the padded stride, a reader that would read the padding as data;
readers that see only the user's region; the zeros a MatMul sums over, from the zero-fill lattice."""
from __future__ import annotations

from iron.compiler.fuse import SIZE_LIMIT, Group, held_bytes
from iron.compiler.readers import Reader
from iron.compiler.sides import (
    Groups,
    carried,
    joined,
    joined_with,
    lone_product,
    summed_unzeroed,
)
from iron.compiler.streaming import MAX_FLOW_INPUTS
from iron.compiler.tiling import call_sides
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

PLAIN = (Role.OTHER, Role.EXPANSION)   # calls that neither tile nor stream (an expansion streams only alone)


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


# ---- pins: why a tensor may not lie padded for its readers ("" when it may) -----------------------

def unpaddable(node: Node, calls: tuple[Node, ...], readers: dict, group_of: Groups | None = None,
               tail: bool = False) -> str:
    """Why `node` may not lie padded for `calls`: a view, a state, read elsewhere, or a result its
    producer cannot write padded (a segment's cut value: the design decided). `tail`: padded after its
    last element only, which leaves every view where it was and a gather writes as it would unpadded."""
    if node.op == Op.VIEW:
        return f"{describe(node)} is a view"
    if node.op == Op.MEMORY and node.arg.kind is MemoryKind.STATE:
        return state_unpadded(node, calls, readers)
    tail = tail or group_of is not None and node in group_of.written   # its writers' views lie as it does
    if others := [r for r in readers.get(node, []) if r not in calls and not (tail and r is Reader.VIEW)]:
        return f"{describe(node)} is read {'through a view' if Reader.VIEW in others else 'elsewhere'} too"
    if node.op == Op.CALL and group_of is not None:   # padded after its last row only, its rows keep their stride
        why = "" if tail else group_of.zeros[node].unwritten
        return why and f"{describe(node)} is another group's result, {why}"
    if node.op == Op.CALL and not (tail and (node in calls or node.arg.kernel.gathers)) or \
            node.op == Op.INPUT and node.arg.position == -1:   # a segment's cut value (segment.py numbers it -1)
        return f"{describe(node)} is another group's result"
    return ""


def state_unpadded(state: Node, calls: tuple[Node, ...], readers: dict) -> str:
    """`pad_written_by_producer` for a state: every other call writes it through views in its own
    shape or whole in rows of whole words; nothing else reads it."""
    for user in readers.get(state, []):
        if user in calls or user is Reader.VIEW:
            continue
        if not (isinstance(user, Node) and destination(user) is state):
            return f"{describe(state)} is a state read {'elsewhere' if isinstance(user, Reader) else f'whole by {describe(user)}'} too"
        if len(state.shape) == 2 and state.shape[1] * state.dtype.itemsize % 4:
            return f"{describe(state)} is a state {describe(user)} writes whole, in rows that are not whole 32-bit words"
    reshaped = [v for v in readers if v.op == Op.VIEW and v.src[0] is state and frame(v) != state.shape]
    return f"{describe(state)} is a state {describe(reshaped[0])} indexes in another shape, whose strides know no padding" \
        if reshaped else ""


def matrix_unpadded(call: Node, readers: dict, group_of: Groups) -> str:
    joined = joined_with(call, readers, group_of)
    return operands_unpadded(call, joined, readers, group_of) or readers_unshared(call, readers, group_of)


def operands_unpadded(call: Node, joined: tuple[Node, ...], readers: dict, group_of: Groups) -> str:
    """Why a product's operands may not lie padded for it and the products `joined` with it."""
    return next((why for node in call.src[:2] if (why := unpaddable(node, joined, readers, group_of))
                 and not made_over(node, call, readers, group_of)), "")


def tail_kept(call: Node, joined: tuple[Node, ...], readers: dict, group_of: dict) -> dict[int, int] | None:
    """The sides a product keeps its own so that operands that may lie padded only after their last
    row do (A's K, B's N), or the width a gather wrote them in (`rows_written`); None when an
    operand may not lie padded at all."""
    kept = {}
    for side, node in zip((1, 2), call.src[:2]):
        if node in group_of.written:
            kept[side] = group_of.written[node][-1]
        elif unpaddable(node, joined, readers, group_of) and not made_over(node, call, readers, group_of):
            if made_over(node, call, readers, group_of, summed=False, tail=node is call.src[0]):   # K summed as it is
                side = 1
            elif unpaddable(node, joined, readers, group_of, tail=True):
                return None
            kept[side] = call_sides(call)[side]
    return kept


def made_over(node: Node, call: Node, readers: dict, group_of: Groups, summed: bool = True, tail: bool = False) -> bool:
    """`pad_upstream_zeros`, `pad_upstream_rows`: whether the group making `node`, read by the product
    `call` alone, computes it over the padded layout from paddable tensors (elementwise calls streaming,
    or a row reduction alone), the padding `call` sums zeros (unless not `summed`; `tail`: A padded
    after its last row only)."""
    if node.op != Op.CALL:
        return False
    calls = group_of[node].calls
    if calls[-1] is not node or len(node.shape) != 2 or readers.get(node) != [call] \
            or summed and summed_unzeroed(node, call, group_of) is not None:
        return False
    if calls[0].arg.kernel.role is Role.ROW_REDUCTION:
        return len(calls) == 1 and not node.arg.writes and node.src[0].shape == node.shape \
            and held_bytes([node]) > SIZE_LIMIT and not width_unshared(node, readers) \
            and not unpaddable(node.src[0], calls, readers, group_of, tail=tail)
    return all(r in calls for c in calls[:-1] for r in readers.get(c, [])) and not unstreamed(calls, node.shape) \
        and not any(unpaddable(n, calls, readers, group_of, tail=tail) for n in external_inputs(calls))


def readers_unshared(call: Node, readers: dict, group_of: dict | None, small: bool = False, wider: bool = True) -> str:
    """Why the readers of a padded product's result may not read it as it lies: it is `shown` (`small`:
    groups fitting a tile read its region too), or read by the host once and calls sharing its layout
    (`wider`: its rows may lie padded too)."""
    users = readers.get(call, [])
    if call.arg.writes:
        state = state_written_whole(call)
        if state is None or users:
            return "it writes part of a state" if state is None else "its result is read besides the state it writes"
        return state_unpadded(state, (call,), readers)
    if shown(call, readers, group_of if small else None):
        return ""
    if group_of and users.count(Reader.HOST) <= 1 and all(u is Reader.HOST or isinstance(u, Node) for u in users):
        why = calls_unshared(call, readers, group_of, wider)
        return why and f"its result is {why}"
    return "its result is read by more than the host, views and calls that neither tile nor stream"


def layout_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict, wider: bool = True) -> str:
    """Why `calls` may not read `result` as it lies padded (`wider`: its rows too): elementwise calls,
    a row reduction, a MatMul may (the `pad_through_*` rules); nothing else (Exp(0) = 1)."""
    if calls[0].arg.kernel.role is Role.ROW_REDUCTION:
        return rows_unshared(calls, result, readers, group_of, wider)
    if calls[0].arg.kernel.role is Role.MATRIX:
        return matmul_unshared(calls, result, readers, group_of)
    if picks_rows(calls[0]):
        return "" if calls == (calls[0],) and calls[0].src[0] is result else f"does not pick rows of {describe(result)} alone"
    if why := stream_unshared(calls, result, readers, group_of, wider):
        return why
    if not shown(calls[-1], readers):
        if why := zeros_unkept(calls, readers, group_of, wider):
            return why
    elif readers[calls[-1]] != [Reader.HOST] and result.shape[-1] * calls[-1].dtype.itemsize % 4:
        return f"makes {describe(calls[-1])}, whose rows other calls read are not whole 32-bit words"
    return join_unshared(joined(calls, result, group_of), calls, readers, group_of)


def stream_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict, wider: bool = True) -> str:
    if why := unstreamed(calls, result.shape):
        return why
    why = next((why for n in external_inputs(calls) if n is not result and not carried(n, group_of)
                and (why := unpaddable(n, calls, readers, group_of, tail=not wider))), "")
    return why and f"also reads a tensor that may not be padded: {why}"


def unstreamed(calls: tuple[Node, ...], shape: tuple[int, ...]) -> str:
    if any(c.arg.kernel.role is not Role.ELEMENTWISE or c.arg.writes or c.arg.scalar_attrs for c in calls):
        return "is neither elementwise, a row reduction nor a MatMul, and would read the padding as data"
    if any(n.shape != shape for c in calls for n in (c, *tensor_inputs(c))):
        return f"reads or makes tensors of other shapes than {shape}, which cannot lie in its padding"
    if len(external_inputs(calls)) > MAX_FLOW_INPUTS or held_bytes(list(calls)) <= SIZE_LIMIT:
        return f"does not stream (its group fits a tile or reads more than {MAX_FLOW_INPUTS} tensors)"
    return ""


def zeros_unkept(calls: tuple[Node, ...], readers: dict, group_of: dict, wider: bool = True) -> str:
    """`pad_through_zeros`: why readers may not read the result of elementwise `calls` over a product's
    layout: the host once, elementwise calls, row reductions, a MatMul summing only zeros."""
    last = calls[-1]
    users = readers.get(last, [])
    unkept = next((z.unkept for u in users if isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX
                   and (z := summed_unzeroed(last, u, group_of)) is not None), None)
    if unkept is not None or users.count(Reader.HOST) > 1 or any(u is not Reader.HOST and not (
            isinstance(u, Node) and u.arg.kernel.role in (Role.MATRIX, Role.ELEMENTWISE, Role.ROW_REDUCTION)) for u in users):
        why = f" ({describe(unkept)} maps zeros to other values)" if unkept is not None else ""
        return f"makes {describe(last)}, read by more than the host, views and calls that neither tile nor stream{why}"
    why = calls_unshared(last, readers, group_of, wider)
    return why and f"makes {describe(last)}, {why}"


def calls_unshared(node: Node, readers: dict, group_of: dict, wider: bool = True) -> str:
    return next((f"read by {describe(u)}, which {why}" for u in readers.get(node, []) if isinstance(u, Node)
                 and (why := layout_unshared(group_of[u].calls, node, readers, group_of, wider))), "")


def matrix_readers(call: Node, readers: dict, group_of: dict) -> list[tuple[Node, Node]]:
    """(MatMul, the tensor it reads) for each MatMul reading `call`'s result, directly or through
    elementwise groups."""
    found = []
    for user in (u for u in readers.get(call, []) if isinstance(u, Node)):
        if user.arg.kernel.role is Role.MATRIX:
            found.append((user, call))
        elif user.arg.kernel.role is Role.ELEMENTWISE:
            found += matrix_readers(group_of[user].calls[-1], readers, group_of)
    return found


def join_unshared(products: tuple[Node, ...], calls: tuple[Node, ...], readers: dict, group_of: dict) -> str:
    """`pad_joined`: why the products whose layouts elementwise `calls` read may not lie padded alike."""
    for other in (n for n in external_inputs(calls) if carried(n, group_of)) if len(products) > 1 else ():
        why = "it is read elsewhere too" if any(r not in calls for r in readers[other]) \
            else source_unshared(other, products, readers, group_of)
        if why:
            return f"also reads {describe(other)}, which must lie padded alike (pad_joined), but {why}"
    return ""


def source_unshared(node: Node, products: tuple[Node, ...], readers: dict, group_of: dict) -> str:
    calls = group_of[node].calls
    if lone_product(group_of[node]) is node:
        return operands_unpadded(node, products, readers, group_of)
    return stream_unshared(calls, node, readers, group_of) or join_unshared(products, calls, readers, group_of)


def rows_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict, wider: bool = True) -> str:
    """`pad_through_rows`: a row reduction alone over `result`, streamed, writing no state, its result
    the host's, reading no other computed tensor."""
    call = calls[0]
    if not wider and held_bytes(list(calls)) <= SIZE_LIMIT:   # its tile holds the rows, one run
        return ""
    if len(calls) != 1 or call.src[0] is not result or call.arg.writes or held_bytes(list(calls)) <= SIZE_LIMIT \
            or len(result.shape) != 2:
        return f"does not stream the rows of {describe(result)} alone in its group"
    if wider and result.op == Op.CALL and result.arg.kernel.role is not Role.MATRIX and (why := width_unshared(call, readers)):
        return why   # `keeps_n` sees only the product's readers, not those of calls over its layout
    if readers.get(call) != [Reader.HOST] and (why := readers_unshared(call, readers, group_of, wider=wider)):
        return f"makes {describe(call)}: {why}"
    shared = call.src[1:call.arg.n_inputs]
    return next((f"also reads {describe(n)}, which another call makes" for n in shared if not is_host_tensor(n)
                 or n.op == Op.VIEW), "")


def picks_rows(call) -> bool:
    """A gather picking each row's elements by its pattern (StridedRows), which never reaches a row's padding."""
    return isinstance(call, Node) and call.arg.kernel.gathers and call.arg.kernel.role is Role.EXPANSION


def width_unshared(reader, readers: dict) -> str:
    """`pad_through_row_width`: rows lie padded wider only for a kernel reducing each row's first
    `length` (`Traits.row_length`), its shared row paddable."""
    if not isinstance(reader, Node) or reader.arg.kernel.role is not Role.ROW_REDUCTION:
        return ""
    if not reader.arg.kernel.traits.row_length:
        return "reduces each row whole (its kernel takes no length)"
    why = next((why for n in reader.src[1:reader.arg.n_inputs] if (why := unpaddable(n, (reader,), readers))), "")
    return why and f"also reads a row that may not be padded: {why}"


def matmul_unshared(calls: tuple[Node, ...], result: Node, readers: dict, group_of: dict) -> str:
    """`pad_through_matmul` (A), `_b` (B): a lone MatMul reading `result` once, its other operand
    paddable, its readers sharing its layout."""
    call = calls[0]
    if len(calls) != 1 or call.arg.writes or len(call.shape) != 2 or result not in call.src[:2]:
        return f"reads {describe(result)} other than as the A or the B of a MatMul alone in its group"
    other = call.src[1] if call.src[0] is result else call.src[0]
    if other is result:
        why = ""
    elif not pair(call, group_of):
        why = unpaddable(other, calls, readers, group_of)
    else:   # `pad_shared_input`: the product `other`, read padded beside `result`
        why = f"{describe(other)} is a padded product read elsewhere too" if readers[other] != [call] \
            else operands_unpadded(other, (other,), readers, group_of)
    if why:
        return f"also reads a tensor that may not be padded: {why}"
    why = readers_unshared(call, readers, group_of)
    return why and f"makes {describe(call)}: {why}"


def pair(call: Node, group_of: dict) -> tuple[Node, Node] | None:
    """A and B of a MatMul reading two products (MatMuls alone in their groups), else None."""
    if call.arg.kernel.role is not Role.MATRIX or len(call.shape) != 2:
        return None
    a, b = call.src[:2]
    products = [n for n in (a, b) if n.op == Op.CALL and lone_product(group_of[n]) is n]
    return (a, b) if a is not b and len(products) == 2 else None


def shown(call: Node, readers: dict, group_of: dict | None = None) -> bool:
    """Whether a padded result is read only as the user's region: by the host at most once, views,
    calls that read the region."""
    users = readers.get(call, [])
    return bool(users) and users.count(Reader.HOST) <= 1 and all(
        u in (Reader.HOST, Reader.VIEW) or (isinstance(u, Node) and reads_region(u, call, group_of)) for u in users)


def reads_region(user: Node, node: Node, group_of: dict | None = None) -> bool:
    """Whether a call reads only `node`'s user's region: one that neither tiles nor streams (given
    `group_of`: `fits_tile`), or a row reduction of `node` as one row told its length."""
    role = user.arg.kernel.role
    return role in PLAIN or group_of is not None and fits_tile(group_of[user], node) \
        or role is Role.ROW_REDUCTION and user.src[0] is node and len(node.shape) == 1 and node not in user.src[1:]


def fits_tile(group: Group, node: Node) -> bool:
    """`pad_tile_region`: a group fitting a tile, not a MatMul's, reads a padded result of whole-word
    rows in its own shape, a DMA moving each padded row's first elements."""
    roles = {c.arg.kernel.role for c in group.calls}
    return held_bytes(list(group.calls)) <= SIZE_LIMIT and Role.MATRIX not in roles \
        and node.shape[-1] * node.dtype.itemsize % 4 == 0


def keeps_n(call: Node, readers: dict) -> bool:
    """Whether a row reduction reading the call's result pins its N (`width_unshared`)."""
    return any(width_unshared(u, readers) for u in readers.get(call, []))


def stream_unpadded(calls, readers: dict, also: tuple[Node, ...] = (), group_of: dict | None = None) -> str:
    """Why `pad_stream` may not pad elementwise calls' tensors (`also`: its `pad_shared_stream`
    family's calls, reading their inputs padded alike)."""
    last = calls[-1]
    if len(last.shape) > 1 and any(n.shape != last.shape for c in calls for n in (c, *tensor_inputs(c))):
        return f"they read or make tensors of other shapes than {last.shape}, which cannot lie in its padding"
    if last.arg.writes and (readers.get(last) or destination(last).op == Op.VIEW):
        return f"{describe(last)} is read, or written into a view of {describe(destination(last))}"
    users = readers.get(last, [])
    if not last.arg.writes and (users.count(Reader.HOST) > 1 or not all(reads_rows(u, last, readers, also, group_of) for u in users)):
        return f"{describe(last)} is read by more than the host, views and calls that read its user's region"
    if returned := [c for c in calls[:-1] if Reader.HOST in readers.get(c, [])]:
        return f"{describe(returned[0])} is returned too, in its own length"
    return next((why for n in external_inputs(calls) if (why := unpaddable(n, (*calls, *also), readers, tail=True))), "")


def rows_unread(call: Node, readers: dict, group_of: dict) -> bool:
    """Whether the readers of a row reduction's result may not read it with its rows padded after the
    last: the host may, calls that may read it so, but none beside a product's layout."""
    users = readers.get(call, [])
    return users != [Reader.HOST] and (not users or bool(readers_unshared(call, readers, group_of, wider=False)) or any(
        carried(n, group_of) for u in users if isinstance(u, Node) for n in external_inputs(group_of[u].calls)))


def reads_rows(user, node: Node, readers: dict, also, group_of: dict | None) -> bool:
    """Whether `user` may read `node` lying with its rows padded after the last: the host, a view, a
    call of the stream's family (`also`), one reading the region or fitting a tile, or a row
    reduction streaming the rows as they lie."""
    if user in (Reader.HOST, Reader.VIEW) or user in also or isinstance(user, Node) and reads_region(user, node):
        return True
    if not isinstance(user, Node) or group_of is None:
        return False
    calls = group_of[user].calls
    return held_bytes(list(calls)) <= SIZE_LIMIT and all(c.arg.kernel.role is not Role.MATRIX for c in calls) or \
        user.arg.kernel.role is Role.ROW_REDUCTION and not rows_unshared(calls, node, readers, group_of, wider=False)
