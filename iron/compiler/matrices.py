"""Where a matrix call's operand goes when its group does not spread over the array:
`stream_large_matrix` streams a matrix larger than its share of a compute tile through a mem tile
in blocks of rows, once for every unsplit group reading it (`share_streamed_matrix`);
`split_matrix_over_tiles` splits a MatVec over 128 KiB by rows over as many tiles, its rows read
through as many shim channels (`stream_over_shim_channels`: each lane through its own mem tile,
split there between the lane's parts), as the cost model estimates fastest, the parts joined on
one mem tile (unless dma_inputs.py's `unsplit_beside_producer` keeps it on one tile); and the
describe() lines of these decisions and of `dequant_before_matvec`'s expansion on the tile.
`sites`: place.py's Site of each group placed so far (not imported: place.py imports these
rules). A memory-bound MatVec reads its rows at DDR's pace only through several shim channels:
one streams 4 (npu1) or 8 (npu2) bytes per cycle, DDR about five times that on npu2
(docs/platform.md section 11)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from iron.compiler.channels import MemChannels, bd_share, lane_ops
from iron.compiler.fuse import (
    STREAM_OBJECT_BYTES,
    Group,
    expansion,
    leading_call,
    role,
    stored_matrix,
)
from iron.compiler.memo import MOST_KEPT
from iron.compiler.readers import Reader
from iron.errors import PlacementError
from iron.ir import (
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
from iron.plan import cost
from iron.plan.fifos import FifoId, Stem, fifo_id
from iron.plan.plan import Choice, Tile
from iron.plan.rules import Decision, Rule

SPLIT_PART_BYTES = 128 * 1024   # a MatVec's matrix larger than this may be split over tiles


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
    lanes: tuple[Tile, ...] = ()   # one mem tile per shim channel reading the rows, when several do
    choice: Choice | None = None   # how many parts and lanes, chosen by estimated time

    @property
    def fifo(self) -> FifoId | None:
        """The FIFO an unsplit group's core reads the blocks from when another group streams them."""
        return None if self.owner is None else fifo_id(self.owner, Stem.W)

    @property
    def lane_mems(self) -> tuple[Tile, ...]:
        """The mem tile each lane's rows enter by: the lanes' own, or `mem` for the one lane."""
        return self.lanes or (self.mem,)

    @property
    def per_lane(self) -> int:
        """The parts each lane's rows are split between."""
        return self.parts // len(self.lane_mems)

    def lane_fifo(self, group: str, lane: int) -> FifoId:
        """The FIFO bringing lane `lane`'s rows from the host to its mem tile."""
        return fifo_id(group, Stem.W, lane, mem=True) if self.lanes else fifo_id(group, Stem.W, mem=True)


def stream_rules(group: Group, stream: Stream | None) -> list[Decision]:
    if stream is None:
        return []
    m = stream.matrix
    what = f"{group.name}: {describe(m)} {m.shape} {m.dtype.name} ({nbytes(m)} bytes)"
    if stream.owner is not None:
        return [(Rule.SHARE_STREAMED_MATRIX, f"{what} read from {stream.fifo}, the blocks {stream.owner} streams, "
                                          f"broadcast by {stream.mem.name}")]
    rules = [(Rule.STREAM_LARGE_MATRIX,
              f"{what} streamed as {stream.blocks} blocks of {stream.rows} rows per part via "
              f"{', '.join(dict.fromkeys(t.name for t in stream.lane_mems))}")]
    if stream.expand is not None:
        rules.append(expansion_rule(group, stream.expand, m, stream.rows))
    if stream.parts > 1:
        rules.append((Rule.SPLIT_MATRIX_OVER_TILES, f"{what} split by rows over {stream.parts} tiles"))
    if stream.lanes:
        lanes = ", ".join(f"{stream.lane_fifo(group.name, k)} into {t.name}" for k, t in enumerate(stream.lanes))
        rules.append((Rule.STREAM_OVER_SHIM_CHANNELS,
                      f"{group.name}: its rows read through {len(stream.lanes)} shim MM2S channels, "
                      f"{stream.per_lane} part{'s' * (stream.per_lane > 1)} per lane ({lanes}), joined on {stream.mem.name}"))
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


def stream_large_matrix(group: Group, tiles, split: Split, channels, device) -> Stream | None:
    """Stream the group's leading matrix call's matrix when it (with the blocks it is expanded
    from, when `dequant_before_matvec` fused its expansion) is larger than its L1 share, in
    blocks of the most rows whose object takes at most STREAM_OBJECT_BYTES; with an expansion,
    whose two objects of blocks and the Buffer they are expanded into take at most the two
    objects of a float32 stream. Split, through the mem tiles `take_split` takes."""
    first, parts = leading_call(group.calls), split.parts
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
    mem, lanes = take_split(channels, tiles[0].col, parts, split.lanes)
    return Stream(matrix, rows, rows_per_part // rows, parts, mem, expand, lanes=lanes, choice=split.choice)


def take_split(channels: MemChannels, col: int, parts: int, lanes: int) -> tuple[Tile, tuple[Tile, ...]]:
    """The mem tiles a stream split `parts` ways through `lanes` shim channels takes, nearest
    column `col`: one lane splits and joins on one mem tile (a DMA channel each way per part,
    one for the rows and one for the joined result); several join the parts on one (one in per
    part, one out) and each lane splits its rows on its own mem tile (one in, one out per part
    of the lane), the lanes' tiles in the columns nearest `col` in turn, so their shim channels
    are their columns' own. PlacementError when the mem tiles lack the channels."""
    if lanes == 1:
        links = (1, 1) if parts == 1 else (parts + 1, parts + 1)
        return channels.take(col, *links), ()
    join = channels.take(col, parts, 1)
    order = sorted(range(channels.device.n_cols), key=lambda c: (abs(c - col), c))
    return join, tuple(channels.take(order[k % len(order)], 1, parts // lanes) for k in range(lanes))


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
    factors = {f for d in range(1, math.isqrt(rows_per_part) + 1) if rows_per_part % d == 0 for f in (d, rows_per_part // d)}
    whole = [r for r in sorted(factors) if r * row_bytes(matrix) % 4 == 0]
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


@dataclass(frozen=True)
class Split:
    """`split_matrix_over_tiles`' decision for a group: `parts` tiles, its rows read through
    `lanes` shim channels (`stream_over_shim_channels`), the Choice that priced them (None when
    the group may not split), and why no more parts (`fewer`, "" when nothing stopped more)."""

    parts: int = 1
    lanes: int = 1
    choice: Choice | None = None
    fewer: str = ""


def split_parts(group: Group, outside: dict[Node, tuple[str | Reader, ...]], spare: int, left: Left,
                channels: MemChannels, first: Tile) -> Split:
    """`split_matrix_over_tiles` and `stream_over_shim_channels`: of the splits that fit, by
    rows into `parts` tiles whose rows `lanes` shim MM2S channels read (lanes dividing parts),
    the one of the least estimated time (`split_work`; among equals the fewest lanes, as shim
    channels are scarcer than tiles, then the most parts, whose larger objects let a lane
    stream further ahead of its cores). A count of parts fits when it divides the matrix's
    rows, that many tiles are spare (within its share of them beside the later matrices,
    `Left.tiles`), and each part's result is whole words and streams in blocks (`split_stops`);
    a count of lanes when the other groups leave it the shim MM2S
    channels (`left`) and `lane_stops` finds nothing. The counts of parts one mem tile can join
    that do not fit say why in `fewer`."""
    if not splittable(group, outside):
        return Split()
    matrix, device = stored_matrix(group.calls), channels.device
    big_m = matrix.shape[0]
    shim_in = left.shim_in - (host_channels(group) - 1)   # less its own `_in`
    most_lanes = left.share(beyond_ahead(group, device)).of(shim_in)
    spare = min(spare, left.tiles(split_work(group, 1, 1, device).core_cycles, spare))
    candidates, stopped = [(1, 1)], {}
    for parts in range(2, device.mem.dma_in_channels + 1):
        why = split_stops(group, parts, spare)   # one lane always: the stream takes a shim channel unsplit too
        lanes = [] if why else [k for k in range(1, max(1, min(parts, shim_in, most_lanes)) + 1) if parts % k == 0]
        blocks = 0 if why else big_m // parts // stream_rows(group, big_m // parts)
        stops = {k: lane_stops(matrix, parts, k, channels, (first.col, left.streams), blocks) for k in lanes}
        candidates += [(parts, k) for k, stop in stops.items() if not stop]
        stopped[parts] = why or ("" if not all(stops.values()) else stops[1])
    candidates.sort(key=lambda c: (c[1], -c[0]))   # among equals: the fewest lanes, then the most parts
    (parts, lanes), choice = cost.choose(
        Rule.SPLIT_MATRIX_OVER_TILES, "parts and shim channels", candidates,
        lambda c: split_work(group, *c, device).ns(device),
        lambda c: f"{c[0]} part{'s' * (c[0] > 1)} through {c[1]} shim channel{'s' * (c[1] > 1)}")
    return Split(parts, lanes, choice, "; ".join(why for k, why in stopped.items() if k > parts and why))


@dataclass(frozen=True)
class Later:
    """A later group of the configuration reading a host matrix: the bytes of it beyond what its
    FIFOs take ahead (`beyond_ahead`), its split's cycles on one tile, and its `stage`: 0 when
    it runs alongside the group placed now (neither reads the other's result: a layer's gate
    and up projections), else the count of runs of such groups before it."""

    nbytes: int
    cycles: float
    stage: int


@dataclass(frozen=True)
class Left:
    """What the other groups leave a group to split into: `shim_in` shim MM2S channels, and the
    later groups reading a host matrix (`later`), each needing a mem-tile channel each way."""

    shim_in: int
    later: tuple[Later, ...]

    @property
    def streams(self) -> int:
        return len(self.later)

    def share(self, matrix_bytes: int) -> Share:
        """The share of the shim channels it and the later matrices may take of a matrix with
        `matrix_bytes` beyond what its FIFOs take ahead."""
        return Share(_fraction(matrix_bytes, [(m.nbytes, m.stage) for m in self.later]), len(self.later))

    def tiles(self, cycles: float, spare: int) -> int:
        """`stream_over_shim_channels`' rule for tiles: the share of the `spare` tiles a matrix
        whose split takes `cycles` on one tile may take beside the later matrices (each counted
        as one tile in `spare`): a split into n parts takes about cycles / n, so (`Share`) n in
        proportion to sqrt(cycles), where the first matrix taking all it could would leave the
        larger ones after it a tile or two."""
        return Share(_fraction(cycles, [(m.cycles, m.stage) for m in self.later]), len(self.later)).of(spare)


def _fraction(mine: float, later: list[tuple[float, int]]) -> float:
    """`Share.fraction`: each run of matrices running alongside one another (`Later.stage`)
    takes as long as their sum over the channels (or tiles) they take together, so the runs
    share them by the square roots of their sums, and a run's matrices its share by their own."""
    sums = {0: mine}
    for value, stage in later:
        sums[stage] = sums.get(stage, 0) + value
    roots = sum(math.sqrt(v) for v in sums.values())
    return math.sqrt(sums[0]) / roots * mine / sums[0] if roots and mine else float(not roots)


@dataclass(frozen=True)
class Share:
    """`stream_over_shim_channels`: a matrix's `fraction` of the shim channels left to it and to
    the `later` matrices of its configuration, each of which counts one of them already. The
    matrix calls of a configuration run one after another (each reading what the one before
    made, as a layer's projections do), or alongside (reading the same vector), and a matrix
    whose B bytes its FIFOs cannot take ahead while the calls before it run (`beyond_ahead`)
    streams in about B / n through n channels: the sum over a chain is least with n in
    proportion to sqrt(B) (Lagrange), where a first matrix taking all it could would leave the
    larger ones after it one channel each."""

    fraction: float
    later: int

    def of(self, left: int) -> int:
        """Its share of `left` channels (the later matrices' one each counted back in), at least one."""
        return max(1, round((left + self.later) * self.fraction))


def channels_left(groups: tuple[Group, ...], number: int, sites: list, device, with_emit: bool) -> Left:
    """What group `number` may take: the device's shim MM2S channels less what the groups placed
    so far take (`host_channels`, a split's lanes beyond the one counted; a grid or stream
    one), what each later group takes unsplit, and the Emit's words; and the later groups
    reading a host matrix."""
    total = device.n_cols * device.shim.dma_out_channels - with_emit
    placed = sum(1 if s.grid or s.flow else host_channels(s.group) + len(s.stream.lanes) - bool(s.stream.lanes)
                 if s.stream is not None else host_channels(s.group) for s in sites)
    later = groups[number + 1:]
    return Left(total - placed - sum(host_channels(g) for g in later), later_matrices(groups, number, device))


def later_matrices(groups: tuple[Group, ...], number: int, device) -> tuple[Later, ...]:
    """The groups after group `number` reading a host matrix, each a `Later` whose stage grows
    where it reads (through other groups) the result of a matrix of the stage before."""
    group_of = {c: g.name for g in groups for c in g.calls}
    made: dict[str, set[str]] = {}   # the groups whose results each later group reads, through others too
    stage, members, found = 0, {groups[number].name}, []
    for g in groups[number:]:
        sending = {group_of[n] for c in g.calls for n in tensor_inputs(c) if group_of.get(n, g.name) != g.name}
        made[g.name] = sending.union(*(made.get(s, ()) for s in sending))
        if g is groups[number] or role(leading_call(g.calls)) is not Role.MATRIX or not is_host_tensor(stored_matrix(g.calls)):
            continue
        if made[g.name] & members:
            stage, members = stage + 1, set()
        members.add(g.name)
        found.append(Later(*_later_figures(g, device), stage))
    return tuple(found)


@lru_cache(maxsize=MOST_KEPT)
def _later_figures(group: Group, device) -> tuple[int, float]:
    """A later matrix group's `beyond_ahead` bytes and split cycles on one tile, kept: each group placed before it asks."""
    splits = may_split(group) and stream_rows(group, stored_matrix(group.calls).shape[0])
    return beyond_ahead(group, device), split_work(group, 1, 1, device).core_cycles if splits else 0.0


def beyond_ahead(group: Group, device) -> int:
    """The bytes of a group's host matrix beyond what its FIFOs take ahead of its cores while the
    calls before it run: two objects of blocks on each part's tile and two on its lane's mem
    tile, split into the most parts one mem tile joins that divide its rows."""
    matrix = stored_matrix(group.calls)
    big_m = matrix.shape[0]
    parts = max(p for p in range(1, device.mem.dma_in_channels + 1) if big_m % p == 0)
    rows = stream_rows(group, big_m // parts) or big_m // parts
    return max(0, nbytes(matrix) - 4 * parts * rows * row_bytes(matrix))


def host_channels(group: Group) -> int:
    """The shim MM2S channels an unsplit group's core takes: one for its host matrix (streamed,
    or loaded with its other host tensors), one for its other host tensors and per-call
    attributes (an `_in`); at most, as an earlier group may forward them (`forward_shared_input`)."""
    first = leading_call(group.calls)
    matrix = stored_matrix(group.calls) if role(first) is Role.MATRIX else None
    loads = any(is_host_tensor(n) and n is not matrix for n in external_inputs(group.calls))
    return int(matrix is not None and is_host_tensor(matrix)) + int(loads or any(c.arg.scalar_attrs for c in group.calls))


def split_stops(group: Group, parts: int, spare: int) -> str:
    """What keeps a group from `parts` parts, however many lanes ("" when nothing)."""
    matrix = stored_matrix(group.calls)
    rows, item = matrix.shape[0], group.calls[-1].dtype.itemsize
    if rows % parts:
        return f"{parts} does not divide its {rows} rows"
    if rows // parts * item % 4:
        return f"{parts} parts of {rows // parts} rows give results of {rows // parts * item} bytes, not whole 32-bit words"
    if stream_rows(group, rows // parts) is None:
        return (f"{parts} parts of {rows // parts} rows stream in no block: a row takes {row_bytes(matrix)} bytes, "
                f"more than a streamed block's {STREAM_OBJECT_BYTES}")
    if parts > spare:
        return f"{parts} would leave too few tiles for the other groups ({spare} spare)"
    return ""


def lane_stops(matrix: Node, parts: int, lanes: int, channels: MemChannels, near: tuple[int, int], blocks: int) -> str:
    """What keeps a split into `parts` from `lanes` lanes ("" when nothing): a lane of several
    parts moves them one part's rows apart, within a buffer descriptor's stride
    (docs/platform.md section 5); the mem tiles need the channels `take_split` takes; and each
    of several lanes must move its `blocks` blocks in no more Dma ops than its share of its shim
    tile's buffer descriptors (`lane_ops`), or the runtime sequence waits for a lane's first ops
    before it issues the next lane's (`finish_sequence`) and the lanes stream one after another."""
    device, apart = channels.device, nbytes(matrix) // parts // 4
    if parts > lanes and apart > device.shim.max_bd_stride:
        return (f"{parts} parts lie {apart} words apart, more than a buffer descriptor's largest stride "
                f"({device.shim.max_bd_stride} words)")
    rows = matrix.shape[0] // parts // max(1, blocks)
    ops, share = lane_ops(blocks, parts // lanes, rows, row_bytes(matrix) // 4, device), bd_share(device)
    if lanes > 1 and ops > share:
        return (f"each of {lanes} lanes of {parts // lanes} parts moves its {blocks} blocks in {ops} Dma ops, more "
                f"than its share of a shim tile's buffer descriptors ({share}): the runtime sequence would wait "
                "for one lane before issuing the next")
    if not fits_mem_tiles(channels, *near, parts, lanes):
        return (f"{parts} would take more DMA channels than the mem tiles have left to split and join them "
                f"(a mem tile has {device.mem.dma_in_channels} each way) and to stream the {near[1]} later "
                "groups' matrices")
    return ""


def fits_mem_tiles(channels: MemChannels, col: int, later: int, parts: int, lanes: int) -> bool:
    """Whether `take_split` finds the mem-tile channels for the split (tried on a copy), leaving
    a channel each way for each of the `later` streams."""
    trial = channels.copy()
    try:
        take_split(trial, col, parts, lanes)
    except PlacementError:
        return False
    return min(trial.free()) >= later


def split_work(group: Group, parts: int, lanes: int, device) -> cost.Work:
    """What a split does, for the cost model: each part's core runs the leading call (and its
    fused expansion) on each streamed block of its rows, then its epilogue on its share of the
    result; the busiest channel is a lane's shim channel (its share of the matrix), a part's
    (its share) or the joined result's; DDR moves the matrix once (the vector and the result,
    a row's and a column's worth, are left out)."""
    gen, calls, first = cost.generation(device), group.calls, leading_call(group.calls)
    matrix, expand, a = stored_matrix(calls), expansion(calls), leading_call(calls).src[0]
    big_m, big_k = a.shape
    rows = stream_rows(group, big_m // parts) or big_m // parts
    x = first.src[1].shape[-1]   # big_k but for a matrix stored packed (QMatVec: big_k is its rows' bytes)
    per_block = cost.kernel_cycles(gen, Role.MATRIX, a.dtype, [(rows, big_k), (x,)], (rows,), first.dtype,
                                   packed=bool(first.arg.kernel.packed))
    if expand is not None:
        per_block += cost.kernel_cycles(gen, Role.EXPANSION, matrix.dtype, [(rows * row_bytes(matrix) // matrix.dtype.itemsize,)],
                                        (rows, big_k), a.dtype)
    share = big_m // parts
    epilogue = sum(cost.kernel_cycles(gen, role(c), c.src[0].dtype, [(share,)] * c.arg.n_inputs, (share,), c.dtype)
                   for c in calls[calls.index(first) + 1:])
    return cost.Work(share // rows * per_block + epilogue, max(nbytes(matrix) // lanes, big_m * calls[-1].dtype.itemsize),
                     nbytes(matrix))


def senders(groups: tuple[Group, ...], group: Group) -> tuple[str, ...]:
    """The other groups whose results `group`'s calls read, in program order."""
    group_of = {c: g.name for g in groups for c in g.calls}
    names = {group_of[n] for c in group.calls for n in tensor_inputs(c) if group_of.get(n, group.name) != group.name}
    return tuple(g.name for g in groups if g.name in names)


def may_split(group: Group) -> bool:
    """What `splittable` asks of a group's matrix call: a matrix-vector call over a host matrix
    (or the blocks of one its fused expansion reads) > 128 KiB whose rows are whole words along
    the memory's last axis."""
    first, matrix = leading_call(group.calls), stored_matrix(group.calls)
    if role(first) is not Role.MATRIX or len(first.shape) != 1 or not is_host_tensor(matrix):
        return False
    if nbytes(matrix) <= SPLIT_PART_BYTES or row_bytes(matrix) % 4:
        return False
    return matrix.op != Op.VIEW or matrix.arg[-1].keeps_axis


def splittable(group: Group, outside: dict[Node, tuple[str | Reader, ...]]) -> bool:
    """A matrix-vector call (a matrix call with a vector result, MatVec) over a host matrix
    (or the blocks of one its fused expansion reads) > 128 KiB whose rows are whole words along
    the memory's last axis, then only elementwise calls writing no state, with the last call's
    result its one use outside the group."""
    first, last = leading_call(group.calls), group.calls[-1]
    if not may_split(group):
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
