"""Shim and mem-tile DMA channels: which shim tile moves each host FIFO (`assign_shims`), which
host FIFOs share one through a mem-tile split or join when a direction lacks them
(`share_shim_channels`), what each mem tile carries (`MemChannels`), and the Dma ops a move is
cut into (`dma_patterns`, docs/platform.md section 5)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from iron.errors import PlacementError
from iron.ir import Program
from iron.plan.fifos import FifoId, Stem, fifo_id
from iron.plan.plan import Direction, Tile, TileKind
from iron.plan.rules import Rule


class MemChannels:
    """DMA channels used in and out and bytes of FIFO buffers held on each mem tile, by column."""

    def __init__(self, device):
        self.device = device
        self.used: dict[int, tuple[int, int, int]] = dict.fromkeys(range(device.n_cols), (0, 0, 0))

    def copy(self) -> MemChannels:
        """A copy to try takes on."""
        other = MemChannels(self.device)
        other.used = dict(self.used)
        return other

    def free(self) -> tuple[int, int]:
        """The DMA channels left in and out over every mem tile."""
        kind = self.device.mem
        return (sum(kind.dma_in_channels - ins for ins, _, _ in self.used.values()),
                sum(kind.dma_out_channels - outs for _, outs, _ in self.used.values()))

    def take(self, col: int, inputs: int, outputs: int) -> Tile:
        mem = self.take_nearest(col, inputs, outputs, 0)
        if mem is None:
            raise PlacementError(
                f"the streamed matrices need more mem-tile DMA channels than {self.device.name} has "
                f"({self.device.n_cols} mem tiles x {self.device.mem.dma_in_channels} each way): "
                "compile for a device with more columns."
            )
        return mem

    def take_nearest(self, col: int, inputs: int, outputs: int, nbytes: int) -> Tile | None:
        """The mem tile nearest `col` with the channels and `nbytes` of memory free, taken; or None."""
        kind = self.device.mem
        for c in sorted(self.used, key=lambda c: (abs(c - col), c)):
            ins, outs, held = self.used[c]
            if (ins + inputs <= kind.dma_in_channels and outs + outputs <= kind.dma_out_channels
                    and held + nbytes <= kind.data_memory_bytes):
                mem = Tile(c, self.device.mem_row, TileKind.MEM)
                self.take_on(mem, inputs, outputs, nbytes)
                return mem
        return None

    def take_on(self, mem: Tile, inputs: int, outputs: int, nbytes: int = 0):
        ins, outs, held = self.used[mem.col]
        self.used[mem.col] = (ins + inputs, outs + outputs, held + nbytes)


@dataclass(frozen=True)
class ShimRequest:
    """A FIFO needing a shim DMA channel near `col`; `nbytes` per object, and whether
    `share_shim_channels` may route it through a mem tile."""

    fifo: FifoId
    direction: Direction
    col: int
    nbytes: int = 0
    shareable: bool = False
    loops: int = 1   # objects per launch: a looping core's FIFO moves one per iteration
    points: tuple[int, ...] = ()   # per round of its moves, the state Waits of the sequence before them
    waits: bool = False   # whether it reads a state an earlier group of the call writes (a Wait before it)


@dataclass(frozen=True)
class SharedChannel:
    """A `share_shim_channels` decision: the `members` move through one shim channel as `fifo`,
    split into them (MM2S) or joined from them (S2MM) on mem tile `mem`, member i at byte
    offsets[i] of `fifo`'s `nbytes`-byte objects."""

    fifo: FifoId
    direction: Direction
    mem: Tile
    members: tuple[FifoId, ...]
    offsets: tuple[int, ...]
    nbytes: int
    loops: int = 1   # objects of each member per launch, moved round by round


SHARED_STEMS = {Direction.MM2S: Stem.SHARED_IN, Direction.S2MM: Stem.SHARED_HOST}
WHO_SHARES = {
    Direction.MM2S: "only the Emit's words and the groups' inputs can share, one reading a state an earlier group "
                    "of the call writes only with inputs moved after the same Waits",
    Direction.S2MM: "only the outputs no later group of the call waits for can share",
}


def shim_channels_per_tile(device) -> dict[Direction, int]:
    return {Direction.MM2S: device.shim.dma_out_channels, Direction.S2MM: device.shim.dma_in_channels}


def share_shim_channels(program: Program, requests: list[ShimRequest], device, mem: MemChannels,
                        depth: int) -> tuple[list[SharedChannel], tuple]:
    """`share_shim_channels`: while more FIFOs of one direction need a shim channel than the device
    has, merge shareable ones (`_next_share`) on the nearest mem tile with the DMA channels and
    memory (`depth` merged objects, docs/platform.md section 4) free, each merge saving all its
    channels but one. Returns (the merges, rules); PlacementError when merging cannot fit them."""
    shares, rules = [], []
    for direction in Direction:
        wanted = [r for r in requests if r.direction == direction]
        capacity = shim_channels_per_tile(device)[direction] * device.n_cols
        left, found, excess = [r for r in wanted if r.shareable], [], len(wanted) - capacity
        while excess > 0:
            share = _next_share(left, wanted, excess, direction, len(found), mem, depth)
            if share is None:
                _cannot_share(program, wanted, capacity, direction, device, len(wanted) - capacity - excess)
            found.append(share)
            excess -= len(share.members) - 1
            left = [r for r in left if r.fifo not in share.members]
        shares += found
        rules += [(Rule.SHARE_SHIM_CHANNELS, _share_text(s)) for s in found]
        if found:
            after = len(wanted) - sum(len(s.members) - 1 for s in found)
            rules.append((Rule.SHARE_SHIM_CHANNELS, f"{len(wanted)} {direction.name} FIFOs now take "
                                                 f"{after} of the {capacity} shim {direction.name} channels"))
    return shares, tuple(rules)


def _next_share(left, wanted, excess, direction, number, mem, depth) -> SharedChannel | None:
    """The next merge, of members moving as many objects per launch and together (`_together`):
    those moving one first (a looping core's move `loops` times their bytes), then the least
    bytes delayed per channel saved (each member waits for the whole merged object: a position
    word and a norm's weights before two heads' caches), then the column with the most left
    (with the nearest columns' when it has only one), smallest first."""
    by_col: dict[tuple[int, int], list[ShimRequest]] = {}
    for r in left:
        by_col.setdefault((r.loops, r.col), []).append(r)
    candidates = []
    for k, (loops, anchor) in enumerate(sorted(by_col, key=lambda c: (c[0], -len(by_col[c]), c[1]))):
        alike = [r for r in left if r.loops == loops]
        pool = by_col[loops, anchor] if len(by_col[loops, anchor]) > 1 else sorted(alike, key=lambda r: abs(r.col - anchor))
        members = _together(sorted(pool, key=lambda r: r.nbytes), excess + 1)
        if len(members) > 1:
            delayed = (sum(r.nbytes for r in members) - max(r.nbytes for r in members)) / (len(members) - 1)
            candidates.append(((loops, delayed, k), members, anchor))
    for _, members, anchor in sorted(candidates, key=lambda c: c[0]):
        for count in range(len(members), 1, -1):
            share = _merge(sorted(members[:count], key=wanted.index), direction,
                           fifo_id(None, SHARED_STEMS[direction], number), anchor, mem, depth)
            if share is not None:
                return share
    return None


def _together(pool: list[ShimRequest], most: int) -> list[ShimRequest]:
    """Up to `most` of `pool`, in order, that may move as one: a merged round moves where its
    first member's did (`moved_together`), so every member that waits for a state write must
    come after the same Waits as the earliest member, round by round; one that waits for none
    may move earlier."""
    taken: list[ShimRequest] = []
    for r in pool:
        trial = [*taken, r]
        firsts = [min(points) for points in zip(*(m.points for m in trial))]
        if all(m.points == tuple(firsts) for m in trial if m.waits) and len(taken) < most:
            taken = trial
    return taken


def _merge(members, direction, fifo: FifoId, anchor, mem, depth) -> SharedChannel | None:
    """`members` merged on the mem tile nearest `anchor` that has room (taken), or None."""
    offsets = [sum(-(-r.nbytes // 4) * 4 for r in members[:i]) for i in range(len(members) + 1)]
    channels = (1, len(members)) if direction is Direction.MM2S else (len(members), 1)
    tile = mem.take_nearest(anchor, *channels, depth * offsets[-1])   # the link keeps only the merged FIFO's objects
    if tile is None:
        return None
    return SharedChannel(fifo, direction, tile, tuple(r.fifo for r in members), tuple(offsets[:-1]), offsets[-1],
                         members[0].loops)


def _share_text(s: SharedChannel) -> str:
    how = "split into" if s.direction is Direction.MM2S else "joined from"
    return (f"{s.fifo} ({s.direction.name}, {s.nbytes} bytes) on {s.mem.name} {how} "
            f"{', '.join(map(str, s.members))} at bytes {', '.join(map(str, s.offsets))}")


def _cannot_share(program, wanted, capacity, direction, device, saved):
    per_shim = shim_channels_per_tile(device)[direction]
    raise PlacementError(
        f"{program.name} needs {len(wanted)} shim {direction.name} channels but {device.name} has "
        f"{capacity} ({device.n_cols} shim tile{'s' if device.n_cols > 1 else ''} x {per_shim}), and "
        f"sharing them through mem tiles saves only {saved} ({WHO_SHARES[direction]}): compile for a "
        "device with more columns."
    )


def assign_shims(requests: list[ShimRequest], device) -> tuple[dict[str, Tile], tuple]:
    """`shim_channels`: each request gets the nearest shim tile with a free channel of its
    direction; returns (fifo -> shim tile, rules)."""
    per_shim = shim_channels_per_tile(device)
    used = {(col, d): 0 for col in range(device.n_cols) for d in per_shim}
    chosen: dict[str, Tile] = {}
    by_shim: dict[str, list[str]] = {}
    for req in requests:
        col = next(c for c in sorted(range(device.n_cols), key=lambda c: (abs(c - req.col), c))
                   if used[(c, req.direction)] < per_shim[req.direction])
        used[(col, req.direction)] += 1
        chosen[req.fifo] = Tile(col, device.shim_row, TileKind.SHIM)
        by_shim.setdefault(chosen[req.fifo].name, []).append(f"{req.fifo} ({req.direction})")
    return chosen, tuple((Rule.SHIM_CHANNELS, f"{shim}: {', '.join(names)}") for shim, names in sorted(by_shim.items()))


def dma_patterns(offset: int, dims, device) -> list[tuple[int, tuple, tuple]]:
    """(offset, sizes, strides) of the Dmas moving `dims` (outermost first, in words) in order."""
    return [(offset + start, sizes, strides) for start, sizes, strides in _patterns(tuple(dims), device)]


@cache   # the same moves recur at other offsets in every group and segment of a large design
def _patterns(dims: tuple, device) -> tuple[tuple[int, tuple, tuple], ...]:
    """`dma_patterns` at offset 0: four dims, the outermost (the repeat) at most `dma_repeat_max`,
    the others the wrap. Only the repeat may have stride 0 (mlir-aie's `verifyStridesWraps`,
    docs/platform.md section 5): a stride-0 dimension further in is cut by one Dma per index
    outside it."""
    wrap = device.shim.max_bd_wrap
    dims = [d for d in dims if d[0] > 1] or [(1, 1)]
    (size, stride), rest = dims[0], dims[1:]
    if any(st == 0 for _, st in rest):
        return tuple(p for i in range(size) for p in dma_patterns(i * stride, rest, device))
    if len(dims) == 1 and size > wrap and stride == 1:
        return tuple(_long_run(size, device))
    repeat = stride == 0 or len(dims) == 4
    limits = ([device.dma_repeat_max] if repeat else []) + [wrap] * (len(dims) - repeat)
    if len(dims) <= 4 and all(n <= limit for (n, _), limit in zip(dims, limits)):
        padded = dims[:repeat] + [(1, 0)] * (4 - len(dims)) + dims[repeat:]
        return ((0, tuple(s for s, _ in padded), tuple(st for _, st in padded)),)
    limit = limits[0]
    if len(dims) <= 4 and size > limit and all(s <= lim for (s, _), lim in zip(rest, limits[1:])):
        chunks = [(start, min(limit, size - start)) for start in range(0, size, limit)]
        return tuple(p for start, n in chunks for p in dma_patterns(start * stride, [(n, stride), *rest], device))
    return tuple(p for i in range(size) for p in dma_patterns(i * stride, rest, device))


def _long_run(n: int, device) -> list:
    wrap = device.shim.max_bd_wrap
    dims = run_dims(n, device)
    if len(dims) == 2 and dims[1][0] * 4 >= wrap:
        return dma_patterns(0, dims, device)
    piece = wrap * wrap
    if n > piece:
        return [*dma_patterns(0, [(wrap, wrap), (wrap, 1)], device),
                *dma_patterns(piece, [(n - piece, 1)], device)]
    rows, rest = divmod(n, wrap)
    head = dma_patterns(0, [(rows, wrap), (wrap, 1)], device)
    return head + (dma_patterns(rows * wrap, [(rest, 1)], device) if rest else [])


def run_dims(n: int, device) -> tuple[tuple[int, int], ...]:
    """n contiguous words as two dims within a BD dimension's size, when they divide so."""
    wrap = device.shim.max_bd_wrap
    if n <= wrap:
        return ((n, 1),)
    inner = max((d for d in range(1, wrap + 1) if n % d == 0 and n // d <= wrap), default=None)
    return ((n, 1),) if inner is None else ((n // inner, inner), (inner, 1))


def lane_dims(blocks: int, per_lane: int, rows: int, row: int, stride: int) -> tuple:
    """A lane's matrix words in its split link's order: per block, each of its `per_lane` parts'
    `rows` rows of `row` words, `stride` apart; a lane of one part whose rows lie end to end as
    one run of words."""
    part = blocks * rows * stride
    if per_lane == 1 and stride == row:
        return ((part, 1),)
    return ((blocks, rows * stride), (per_lane, part), (rows, stride), (row, 1))


def lane_ops(blocks: int, per_lane: int, rows: int, row: int, device) -> int:
    """The Dma ops a lane of rows lying end to end moves its blocks in."""
    return len(dma_patterns(0, lane_dims(blocks, per_lane, rows, row, row), device))


def bd_share(device) -> int:
    """The buffer descriptors one shim channel may hold at once: its tile's, shared by its
    channels each way (as `grid.rounds_between_waits` counts them)."""
    return device.shim_bd_ids // (device.shim.dma_out_channels + device.shim.dma_in_channels)
