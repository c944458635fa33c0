"""Where a matrix call's operand goes when its group does not spread over the array: `stream_large_matrix`
streams a matrix larger than its share of a compute tile through a mem tile in blocks of rows,
once for every unsplit group reading it (`share_streamed_matrix`); `split_matrix_over_tiles`
splits a MatVec over 128 KiB by rows over 2, 4 or 8 tiles (the fewest bringing parts to 128 KiB,
else the most that fit), joined on a mem tile, unless `unsplit_beside_producer` keeps it on one
tile beside the group it reads; and the describe() lines of these decisions and of
`dequant_before_matvec`'s expansion on the tile. `sites`: place.py's Site of each group placed
so far (not imported: place.py imports these rules)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from iron.compiler.fifos import FifoId, Stem, fifo_id
from iron.compiler.fuse import (
    STREAM_OBJECT_BYTES,
    Group,
    expansion,
    leading_call,
    role,
    stored_matrix,
)
from iron.compiler.plan import Tile
from iron.compiler.readers import Reader
from iron.compiler.rules import Decision, Rule
from iron.ir import (
    MemoryKind,
    Node,
    Op,
    describe,
    external_inputs,
    is_computed_view,
    is_host_tensor,
    nbytes,
    tensor_inputs,
)
from iron.kernels.base import Role

SPLIT_PART_BYTES = 128 * 1024   # a MatVec's matrix larger than this is split over tiles
SPLIT_COUNTS = (2, 4, 8)
FORWARD_BYTES = 4096   # the largest host tensor one group forwards to later readers


@dataclass(frozen=True)
class Stream:
    """A matrix operand streamed through mem tile `mem`: `blocks` objects of `rows` rows each
    per part per launch, split over `parts` tiles (1: a forward link). `matrix` is the tensor as
    host memory holds it: with `expand` (`dequant_before_matvec`), the blocks that call expands
    on the tile, object by object, into the matrix the leading call reads. `owner`: the earlier
    group whose stream of the same matrix this group's core reads too (`share_streamed_matrix`)."""

    matrix: Node
    rows: int
    blocks: int
    parts: int
    mem: Tile
    expand: Node | None = None
    owner: str | None = None

    @property
    def fifo(self) -> FifoId | None:
        """The FIFO an unsplit group's core reads the blocks from when another group streams them."""
        return None if self.owner is None else fifo_id(self.owner, Stem.W)


def stream_rules(group: Group, stream: Stream | None) -> list[Decision]:
    if stream is None:
        return []
    m = stream.matrix
    what = f"{group.name}: {describe(m)} {m.shape} {m.dtype.name} ({nbytes(m)} bytes)"
    if stream.owner is not None:
        return [(Rule.SHARE_STREAMED_MATRIX, f"{what} read from {stream.fifo}, the blocks {stream.owner} streams, "
                                          f"broadcast by {stream.mem.name}")]
    rules = [(Rule.STREAM_LARGE_MATRIX,
              f"{what} streamed as {stream.blocks} blocks of {stream.rows} rows per part via {stream.mem.name}")]
    if stream.expand is not None:
        rules.append(expansion_rule(group, stream.expand, m, stream.rows))
    if stream.parts > 1:
        rules.append((Rule.SPLIT_MATRIX_OVER_TILES, f"{what} split by rows over {stream.parts} tiles"))
    return rules


def expansion_rule(group: Group, expand: Node, blocks: Node, rows: int, cols: int | None = None) -> Decision:
    """`dequant_before_matvec`'s decision as `describe()` shows it: what moves and what each
    tile expands, in bytes; `cols`: the columns of a k-block (`expansion_k_blocks`), else whole rows."""
    big_k = expand.shape[1]
    cols = cols or big_k
    of = f" of {cols} columns" * (cols != big_k)
    return (Rule.DEQUANT_BEFORE_MATVEC,
            f"{group.name}: {describe(blocks)} moves as stored, {nbytes(blocks)} bytes; each block of {rows} rows{of} "
            f"({rows * row_bytes(blocks) * cols // big_k} bytes) is expanded on its tile by {expand.arg.kernel.__name__} to "
            f"{rows} x {cols} {expand.dtype.name} ({rows * row_bytes(expand) * cols // big_k} bytes) just before "
            f"{leading_call(group.calls).arg.kernel.__name__}; the {expand.shape} {expand.dtype.name} matrix "
            f"({nbytes(expand)} bytes) is never in DDR")


def row_bytes(matrix: Node) -> int:
    return nbytes(matrix) // matrix.shape[0]


def l1_share(device) -> int:
    """The most of a compute tile a matrix operand may hold whole: a quarter of its memory."""
    return device.compute.data_memory_bytes // 4


def stream_large_matrix(group: Group, tiles, parts: int, channels, device) -> Stream | None:
    """Stream the group's leading matrix call's matrix when it (with the blocks it is expanded
    from, when `dequant_before_matvec` fused its expansion) is larger than its L1 share, in
    blocks of the most rows whose object takes at most STREAM_OBJECT_BYTES; with an expansion,
    whose two objects of blocks and the Buffer they are expanded into take at most the two
    objects of a float32 stream."""
    first = leading_call(group.calls)
    if role(first) is not Role.MATRIX:
        return None
    matrix, expand = stored_matrix(group.calls), expansion(group.calls)
    held = nbytes(first.src[0]) + (nbytes(matrix) if expand is not None else 0)   # with the blocks expanded
    if not is_host_tensor(matrix) or (parts == 1 and held <= l1_share(device)):
        return None
    rows_per_part = matrix.shape[0] // parts
    rows = stream_rows(group, rows_per_part)
    if rows is None:
        return None
    links = (1, 1) if parts == 1 else (parts + 1, parts + 1)
    mem = channels.take(tiles[0].col, *links)
    return Stream(matrix, rows, rows_per_part // rows, parts, mem, expand)


def stream_rows(group: Group, rows_per_part: int) -> int | None:
    """The rows of one streamed block of a part of `rows_per_part` rows: the most that divide it,
    hold whole 32-bit words and take at most STREAM_OBJECT_BYTES (with an expansion, whose two
    objects of blocks and the Buffer they are expanded into take at most the two objects of a
    float32 stream); when a single row takes more, one row, as long as its two objects hold no
    more than the part does whole (tile memory then decides). None: no block streams."""
    matrix, expand = stored_matrix(group.calls), expansion(group.calls)
    budget, per_row = STREAM_OBJECT_BYTES, row_bytes(matrix)
    if expand is not None:
        budget, per_row = 2 * STREAM_OBJECT_BYTES, 2 * row_bytes(matrix) + row_bytes(expand)
    whole = [r for r in range(1, rows_per_part + 1) if rows_per_part % r == 0 and r * row_bytes(matrix) % 4 == 0]
    if whole and whole[0] * per_row > budget:   # a row wider than a block: one row at a time beats the whole part
        return whole[0] if 2 * whole[0] <= rows_per_part else None
    return max((r for r in whole if r * per_row <= budget), default=None)


def share_streamed_matrix(groups: tuple[Group, ...], group: Group, parts: int, sites: list) -> Stream | None:
    """`share_streamed_matrix`: an unsplit group whose leading matrix call reads the matrix an
    earlier unsplit group streams (one KV cache read by several attention heads) reads the same
    blocks: the earlier group's mem tile broadcasts them to both cores, so the host moves them
    once and the group takes no shim or mem-tile channel for them. Only when every group whose
    result it reads comes before that earlier group, so neither core waits for the other while
    both take the blocks in step."""
    first = group.calls[0]
    if parts != 1 or role(first) is not Role.MATRIX:
        return None
    order = [g.name for g in groups]
    sending = senders(groups, group)
    for site in sites:
        s = site.stream
        if (s is not None and s.owner is None and s.expand is None and s.parts == 1 and s.matrix is first.src[0]
                and all(order.index(g) < order.index(site.group.name) for g in sending)):
            return replace(s, owner=site.group.name)
    return None


def split_parts(group: Group, outside: dict[Node, tuple[str | Reader, ...]], spare: int, channels,
                first: Tile) -> tuple[int, str]:
    """`split_matrix_over_tiles`: how many tiles a group takes: the fewest of SPLIT_COUNTS that
    bring each part to SPLIT_PART_BYTES or less, or, when that many do not fit, the most that
    do. A count fits when it divides the matrix's rows, that many tiles are spare, and one mem
    tile can split and join the parts (a DMA channel each way per part, one for the stream and
    one for the joined result) and one buffer descriptor's stride spans a part (docs/platform.md
    section 5). Returns (tiles, why not the count wanted; "" when it fits)."""
    if not splittable(group, outside):
        return 1, ""
    matrix = stored_matrix(group.calls)
    wanted = next((k for k in SPLIT_COUNTS if nbytes(matrix) // k <= SPLIT_PART_BYTES), SPLIT_COUNTS[-1])
    why = []
    for k in sorted((k for k in SPLIT_COUNTS if k <= wanted), reverse=True):
        if matrix.shape[0] % k:
            why.append(f"{k} does not divide its {matrix.shape[0]} rows")
        elif nbytes(matrix) // k // 4 > channels.device.shim.max_bd_stride:
            why.append(f"{k} parts lie {nbytes(matrix) // k // 4} words apart, more than a buffer descriptor's "
                       f"largest stride ({channels.device.shim.max_bd_stride} words)")
        elif matrix.shape[0] // k * group.calls[-1].dtype.itemsize % 4:
            why.append(f"{k} parts of {matrix.shape[0] // k} rows give results of "
                       f"{matrix.shape[0] // k * group.calls[-1].dtype.itemsize} bytes, not whole 32-bit words")
        elif stream_rows(group, matrix.shape[0] // k) is None:
            why.append(f"{k} parts of {matrix.shape[0] // k} rows stream in no block: a row takes "
                       f"{row_bytes(matrix)} bytes, more than a streamed block's {STREAM_OBJECT_BYTES}")
        elif k > spare:
            why.append(f"{k} would leave too few tiles for the other groups ({spare} spare)")
        elif not channels.can_take(first.col, inputs=k + 1, outputs=k + 1):
            why.append(f"{k} would take {k + 1} DMA channels each way on one mem tile "
                       f"(a mem tile has {channels.device.mem.dma_in_channels}, less what earlier groups use)")
        else:
            return k, "; ".join(why)
    return 1, "; ".join(why)


def unsplit_beside_producer(groups: tuple[Group, ...], number: int, outside, sites: list, device) -> str:
    """`unsplit_beside_producer`: a part of a split group receives by DMA the result of every
    other group it reads (a FIFO to several tiles is never shared memory), its rows, and its
    other host tensors. So a group `split_matrix_over_tiles` could split stays on one tile when
    its parts would take more FIFOs by DMA than a compute tile has input channels (`takes`); and
    also when the one group reading its result, the next one, would take one FIFO too many: on
    one tile, `snake_order` puts the next group right beside it, and the next group then reads
    its result through shared memory (docs/platform.md section 4). Returns why, or ""."""
    group, limit = groups[number], device.compute.dma_in_channels
    if not splittable(group, outside):
        return ""
    mine = takes(groups, group, sites)
    if len(mine) > limit:
        return (f"not split: each part would take {len(mine)} FIFOs by DMA ({', '.join(mine)}) but a compute "
                f"tile has {limit} input channels; on one tile beside the group before it, it reads that "
                "group's result through shared memory")
    reader = groups[number + 1] if number + 1 < len(groups) else None
    readers = {u for c in group.calls for u in outside.get(c, ())}
    if reader is None or readers != {reader.name}:
        return ""
    theirs = takes(groups, reader, sites)
    if not limit < len(theirs) <= limit + 1:
        return ""
    return (f"not split: {reader.name}, the one group reading its result, would take {len(theirs)} FIFOs by "
            f"DMA ({', '.join(theirs)}) but a compute tile has {limit} input channels; on one tile, with "
            f"{reader.name} beside it, its result goes through shared memory")


def takes(groups: tuple[Group, ...], group: Group, sites: list) -> list[str]:
    """The FIFOs a core of `group` takes by DMA unless shared memory spares one: each other
    group's result no other of them forwards (`unrelayed`), with the groups on one tile that
    load a small host tensor it reads and forward it (`forward_shared_input`); its rows (a host
    matrix its leading matrix call reads, or the blocks of one its expansion reads); its `_in`
    for any other host tensor."""
    matrix = stored_matrix(group.calls) if role(leading_call(group.calls)) is Role.MATRIX else None
    host = [n for n in external_inputs(group.calls) if is_host_tensor(n) and n is not matrix]
    loaders = [next((s.group.name for s in sites if len(s.tiles) == 1 and forwardable(n)
                     and any(n in tensor_inputs(c) for c in s.group.calls)), None) for n in host]
    sending = unrelayed(groups, group, sites)
    sending += tuple(g for g in dict.fromkeys(loaders) if g is not None and g not in sending)
    return ([f"{g}'s result" for g in sending] + ["its rows"] * (matrix is not None and is_host_tensor(matrix))
            + ["its host tensors"] * (None in loaders))


def forwardable(node: Node) -> bool:
    """A host tensor one group may forward to others: an input, weight or param (or a view of
    one), not a state, of at most FORWARD_BYTES."""
    base = node.src[0] if node.op == Op.VIEW else node
    constant = base.op == Op.INPUT or base.arg.kind in (MemoryKind.WEIGHT, MemoryKind.PARAM)
    return constant and node.size * node.dtype.itemsize <= FORWARD_BYTES


def unrelayed(groups: tuple[Group, ...], group: Group, sites: list) -> tuple[str, ...]:
    """The other groups whose results `group` reads, less those whose result another of them,
    on one tile, reads too and so can forward (`fit_compute_channels`), in program order."""
    sending = senders(groups, group)
    one_tile = {s.group.name for s in sites if len(s.tiles) == 1}
    by_name = {g.name: g for g in groups}
    relayed = {s for t in sending if t in one_tile for s in senders(groups, by_name[t])}
    return tuple(s for s in sending if s not in relayed)


def senders(groups: tuple[Group, ...], group: Group) -> tuple[str, ...]:
    """The other groups whose results `group`'s calls read, in program order."""
    group_of = {c: g.name for g in groups for c in g.calls}
    names = {group_of[n] for c in group.calls for n in tensor_inputs(c) if group_of.get(n, group.name) != group.name}
    return tuple(g.name for g in groups if g.name in names)


def splittable(group: Group, outside: dict[Node, tuple[str | Reader, ...]]) -> bool:
    """A matrix-vector call (a matrix call with a vector result, MatVec) over a host matrix
    (or the blocks of one its fused expansion reads) > 128 KiB whose rows are whole words along
    the memory's last axis, then only elementwise calls writing no state, with the last call's
    result its one use outside the group."""
    first, last = leading_call(group.calls), group.calls[-1]
    matrix = stored_matrix(group.calls)
    if role(first) is not Role.MATRIX or len(first.shape) != 1 or not is_host_tensor(matrix):
        return False
    if nbytes(matrix) <= SPLIT_PART_BYTES or row_bytes(matrix) % 4:
        return False
    if matrix.op == Op.VIEW and not matrix.arg[-1].keeps_axis:
        return False
    epilogue = group.calls[group.calls.index(first) + 1:]
    if any(role(c) is not Role.ELEMENTWISE or c.arg.writes for c in epilogue):
        return False
    if any(is_computed_view(n) for c in epilogue for n in c.src):   # a view crosses the row parts
        return False
    if any(outside.get(c) for c in group.calls[:-1]):
        return False
    users = outside.get(last, ())
    return bool(users) and users.count(Reader.HOST) <= 1 and Reader.EMIT not in users
