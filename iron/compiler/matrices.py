"""Where a matrix call's operand goes when its group does not spread over the array: streamed
through a mem tile in blocks of rows (`stream_large_matrix`, `share_streamed_matrix`), or split
by rows over tiles and shim channels (`split_matrix_over_tiles`, `stream_over_shim_channels`),
as the cost model estimates fastest. A memory-bound MatVec reads its rows at DDR's pace only
through several shim channels: one streams 4 (npu1) or 8 (npu2) bytes per cycle, DDR about five
times that on npu2 (docs/platform.md section 11). `sites`: place.py's Sites placed so far."""
from __future__ import annotations

import math
from collections.abc import Callable
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
    """A matrix operand streamed through mem tile `mem`: `blocks` objects of `rows` rows per part
    per launch, split over `parts` tiles. `matrix` as host memory holds it: with `expand`
    (`dequant_before_matvec`), the blocks it expands on the tile into the matrix the leading call
    reads. `owner`: the earlier group whose stream this group's core reads (`share_streamed_matrix`)."""

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
    def fifo(self) -> FifoId | None:   # the owner's blocks, when another group streams them
        return None if self.owner is None else fifo_id(self.owner, Stem.W)

    @property
    def lane_mems(self) -> tuple[Tile, ...]:   # the mem tile each lane's rows enter by
        return self.lanes or (self.mem,)

    @property
    def per_lane(self) -> int:   # the parts each lane's rows are split between
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
    """`dequant_before_matvec`'s decision: what moves and what each tile expands, in bytes;
    `cols`: the columns of a k-block (`expansion_k_blocks`), else whole rows."""
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


def stream_large_matrix(group: Group, tiles, split: Split, channels, device) -> Stream | None:
    """The stream of a group's host matrix when it is split or (with the blocks it is expanded
    from) larger than a quarter of a compute tile, in blocks of `stream_rows`."""
    first, parts = leading_call(group.calls), split.parts
    matrix, expand = host_matrix(group), expansion(group.calls)
    if matrix is None:
        return None
    held = nbytes(first.src[0]) + (nbytes(matrix) if expand is not None else 0)   # with the blocks expanded
    if parts == 1 and held <= device.compute.data_memory_bytes // 4:
        return None
    rows_per_part = matrix.shape[0] // parts
    rows = stream_rows(group, rows_per_part)
    if rows is None:
        return None
    mem, lanes = take_split(channels, tiles[0].col, parts, split.lanes)
    return Stream(matrix, rows, rows_per_part // rows, parts, mem, expand, lanes=lanes, choice=split.choice)


def take_split(channels: MemChannels, col: int, parts: int, lanes: int) -> tuple[Tile, tuple[Tile, ...]]:
    """The mem tiles (the join's, the lanes') a stream split `parts` ways through `lanes` shim
    channels takes nearest column `col`: one lane splits and joins on one; several join on one
    and each lane splits on its own, in the nearest columns in turn, so their shim channels are
    their columns' own."""
    if lanes == 1:
        links = (1, 1) if parts == 1 else (parts + 1, parts + 1)
        return channels.take(col, *links), ()
    join = channels.take(col, parts, 1)
    order = sorted(range(channels.device.n_cols), key=lambda c: (abs(c - col), c))
    return join, tuple(channels.take(order[k % len(order)], 1, parts // lanes) for k in range(lanes))


def stream_rows(group: Group, rows_per_part: int) -> int | None:
    """The rows of one streamed block of a part: the most that divide it, hold whole words and
    take at most STREAM_OBJECT_BYTES (with an expansion, its two objects of blocks and the
    Buffer they expand into at most two such objects); when a single row takes more, one row, as
    long as its two objects hold no more than the part does whole. None: no block streams."""
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
    """`share_streamed_matrix`: an unsplit group reading the matrix an earlier unsplit group
    streams (one KV cache, several heads) takes the same blocks from that group's mem-tile
    broadcast, so the host moves them once; only when every group whose result it reads comes
    before that earlier group, so neither core waits for the other while both take the blocks."""
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
    """`split_matrix_over_tiles` and `stream_over_shim_channels`: of the (parts, lanes) that fit
    (`split_stops`, `lane_stops`, within its `Left.share` of tiles and shim channels), the one of
    the least estimated time (`split_work`); among equals the fewest lanes, as shim channels are
    scarcer than tiles, then the most parts, whose larger objects let a lane stream further
    ahead. `fewer` says why no more parts."""
    if not splittable(group, outside):
        return Split()
    matrix, device = stored_matrix(group.calls), channels.device
    big_m = matrix.shape[0]
    shim_in = left.shim_in - (host_channels(group) - 1)   # less its own `_in`
    most_lanes = left.share(beyond_ahead(group, device), lambda m: m.nbytes, shim_in)
    spare = min(spare, left.share(split_work(group, 1, 1, device).core_cycles, lambda m: m.cycles, spare))
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
    """A later group of the configuration reading a host matrix: its `beyond_ahead` bytes, its
    split's cycles on one tile, and its `stage`: 0 when it runs alongside the group placed now
    (neither reads the other's result: a layer's gate and up projections), else the count of
    runs of such groups before it."""

    nbytes: int
    cycles: float
    stage: int


@dataclass(frozen=True)
class Left:
    """What the other groups leave a group to split into: `shim_in` shim MM2S channels, and the
    later groups reading a host matrix, each needing a mem-tile channel each way."""

    shim_in: int
    later: tuple[Later, ...]

    @property
    def streams(self) -> int:
        return len(self.later)

    def share(self, mine: float, theirs: Callable[[Later], float], left: int) -> int:
        """The share of `left` channels (or tiles) a matrix whose figure is `mine` may take beside
        the later matrices (their figures `theirs`, each already counted one of `left`), at least
        one: of the shim channels by the bytes beyond what its FIFOs take ahead, of the tiles by
        its split's cycles on one tile. A matrix of B bytes its FIFOs cannot take ahead streams in
        about B / n through n channels, and the sum over a chain is least with n in proportion to
        sqrt(B) (Lagrange), where a first matrix taking all it could would leave the larger ones
        after it one channel each; runs of matrices alongside one another (`Later.stage`) take as
        long as their sum, so the runs share by the square roots of their sums, and a run's
        matrices its share by their own."""
        sums = {0: mine}
        for m in self.later:
            sums[m.stage] = sums.get(m.stage, 0) + theirs(m)
        roots = sum(math.sqrt(v) for v in sums.values())
        fraction = math.sqrt(sums[0]) / roots * mine / sums[0] if roots and mine else float(not roots)
        return max(1, round((left + len(self.later)) * fraction))


def channels_left(groups: tuple[Group, ...], number: int, sites: list, device, with_emit: bool) -> Left:
    """What group `number` may take: the shim MM2S channels the groups placed so far, the later
    groups unsplit and the Emit's words leave; and the later groups reading a host matrix."""
    total = device.n_cols * device.shim.dma_out_channels - with_emit
    placed = sum(1 if s.grid or s.flow else host_channels(s.group) + len(s.stream.lanes) - bool(s.stream.lanes)
                 if s.stream is not None else host_channels(s.group) for s in sites)
    later = groups[number + 1:]
    return Left(total - placed - sum(host_channels(g) for g in later), later_matrices(groups, number, device))


def later_matrices(groups: tuple[Group, ...], number: int, device) -> tuple[Later, ...]:
    """The groups after group `number` reading a host matrix, the stage growing where one reads
    (through other groups) the result of a matrix of the stage before."""
    made: dict[str, set[str]] = {}   # the groups whose results each later group reads, through others too
    stage, members, found = 0, {groups[number].name}, []
    for g in groups[number:]:
        sending = set(senders(groups, g))
        made[g.name] = sending.union(*(made.get(s, ()) for s in sending))
        if g is groups[number] or host_matrix(g) is None:
            continue
        if made[g.name] & members:
            stage, members = stage + 1, set()
        members.add(g.name)
        found.append(Later(*_later_figures(g, device), stage))
    return tuple(found)


@lru_cache(maxsize=MOST_KEPT)
def _later_figures(group: Group, device) -> tuple[int, float]:
    """Kept: each group placed before it asks."""
    splits = may_split(group) and stream_rows(group, stored_matrix(group.calls).shape[0])
    return beyond_ahead(group, device), split_work(group, 1, 1, device).core_cycles if splits else 0.0


def beyond_ahead(group: Group, device) -> int:
    """The bytes of a group's host matrix beyond what its FIFOs take ahead while the calls before
    it run: two objects of blocks on each part's tile and two on its lane's mem tile, split into
    the most parts dividing its rows that one mem tile joins."""
    matrix = stored_matrix(group.calls)
    big_m = matrix.shape[0]
    parts = max(p for p in range(1, device.mem.dma_in_channels + 1) if big_m % p == 0)
    rows = stream_rows(group, big_m // parts) or big_m // parts
    return max(0, nbytes(matrix) - 4 * parts * rows * row_bytes(matrix))


def host_matrix(group: Group) -> Node | None:
    """The host matrix (or the blocks of one its fused expansion reads) a group's leading matrix
    call reads, if any."""
    matrix = stored_matrix(group.calls) if role(leading_call(group.calls)) is Role.MATRIX else None
    return matrix if matrix is not None and is_host_tensor(matrix) else None


def host_channels(group: Group) -> int:
    """The shim MM2S channels an unsplit group's core takes: one for its host matrix, one for its
    other host tensors and per-call attributes (an `_in`); at most, as an earlier group may
    forward them (`forward_shared_input`)."""
    matrix = host_matrix(group)
    loads = any(is_host_tensor(n) and n is not matrix for n in external_inputs(group.calls))
    return int(matrix is not None) + int(loads or any(c.arg.scalar_attrs for c in group.calls))


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
    """What keeps a split into `parts` from `lanes` lanes ("" when nothing): a lane's parts lie one
    part's rows apart, within a buffer descriptor's stride (docs/platform.md section 5); several
    lanes each move their blocks in no more Dma ops than a channel's share of its shim tile's
    buffer descriptors, or the runtime sequence waits for one lane before issuing the next
    (`finish_sequence`); the mem tiles have the channels `take_split` takes, and one each way
    for each of the later streams (`near`: the column, the later streams)."""
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
    trial = channels.copy()
    try:
        take_split(trial, near[0], parts, lanes)
        fits = min(trial.free()) >= near[1]
    except PlacementError:
        fits = False
    if not fits:
        return (f"{parts} would take more DMA channels than the mem tiles have left to split and join them "
                f"(a mem tile has {device.mem.dma_in_channels} each way) and to stream the {near[1]} later "
                "groups' matrices")
    return ""


def split_work(group: Group, parts: int, lanes: int, device) -> cost.Work:
    """What a split does, for the cost model: each part's core runs the leading call (and its
    expansion) on each block of its rows, then its epilogue on its share; the busiest channel is
    a lane's (its share of the matrix) or the joined result's; DDR moves the matrix once (the
    vector and the result, a row's and a column's worth, are left out)."""
    gen, calls, first = cost.generation(device), group.calls, leading_call(group.calls)
    matrix, expand, a = stored_matrix(calls), expansion(calls), first.src[0]
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
    """What `splittable` asks of a group's matrix call: a MatVec over a host matrix larger than
    SPLIT_PART_BYTES whose rows are whole words along the memory's last axis."""
    matrix = host_matrix(group)
    if matrix is None or len(leading_call(group.calls).shape) != 1:
        return False
    if nbytes(matrix) <= SPLIT_PART_BYTES or row_bytes(matrix) % 4:
        return False
    return matrix.op != Op.VIEW or matrix.arg[-1].keeps_axis


def splittable(group: Group, outside: dict[Node, tuple[str | Reader, ...]]) -> bool:
    """A MatVec that `may_split`, then only elementwise calls writing no state, with the last
    call's result its one use outside the group."""
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
