"""Shim and mem-tile DMA channels: which shim tile moves each host FIFO (`assign_shims`), and,
only when a design needs more shim channels of one direction than the device has, which host
FIFOs share one through a mem-tile split or join (`share_shim_channels`). `MemChannels` counts
what each mem tile's DMA channels and memory already carry (docs/platform.md)."""
from __future__ import annotations

from dataclasses import dataclass

from iron.errors import PlacementError
from iron.ir import Program
from iron.plan.fifos import FifoId, Stem, fifo_id
from iron.plan.plan import Direction, Tile, TileKind
from iron.plan.rules import Rule


class MemChannels:
    """DMA channels (6 in, 6 out) and bytes of FIFO buffers used on each mem tile, for links."""

    def __init__(self, device):
        self.device = device
        self.used: dict[int, list[int]] = {col: [0, 0] for col in range(device.n_cols)}
        self.held: dict[int, int] = dict.fromkeys(range(device.n_cols), 0)

    def _nearest(self, col: int, inputs: int, outputs: int, nbytes: int = 0) -> int | None:
        kind = self.device.mem
        for c in sorted(self.used, key=lambda c: (abs(c - col), c)):
            ins, outs = self.used[c]
            if (ins + inputs <= kind.dma_in_channels and outs + outputs <= kind.dma_out_channels
                    and self.held[c] + nbytes <= kind.data_memory_bytes):
                return c
        return None

    def copy(self) -> MemChannels:
        """Another count from what this one holds, to try takes on."""
        other = MemChannels(self.device)
        other.used = {c: list(u) for c, u in self.used.items()}
        other.held = dict(self.held)
        return other

    def free(self) -> tuple[int, int]:
        """The DMA channels left in and out over every mem tile."""
        kind = self.device.mem
        return (sum(kind.dma_in_channels - ins for ins, _ in self.used.values()),
                sum(kind.dma_out_channels - outs for _, outs in self.used.values()))

    def can_take(self, col: int, inputs: int, outputs: int) -> bool:
        return self._nearest(col, inputs, outputs) is not None

    def take(self, col: int, inputs: int, outputs: int) -> Tile:
        found = self._nearest(col, inputs, outputs)
        if found is None:
            raise PlacementError(
                f"the streamed matrices need more mem-tile DMA channels than {self.device.name} has "
                f"({self.device.n_cols} mem tiles x {self.device.mem.dma_in_channels} each way): "
                "compile for a device with more columns."
            )
        self.take_on(Tile(found, self.device.mem_row, TileKind.MEM), inputs, outputs)
        return Tile(found, self.device.mem_row, TileKind.MEM)

    def take_nearest(self, col: int, inputs: int, outputs: int, nbytes: int) -> Tile | None:
        """The mem tile nearest `col` with the channels and `nbytes` of memory free, taken; or None."""
        found = self._nearest(col, inputs, outputs, nbytes)
        if found is None:
            return None
        mem = Tile(found, self.device.mem_row, TileKind.MEM)
        self.take_on(mem, inputs, outputs, nbytes)
        return mem

    def take_on(self, mem: Tile, inputs: int, outputs: int, nbytes: int = 0):
        self.used[mem.col][0] += inputs
        self.used[mem.col][1] += outputs
        self.held[mem.col] += nbytes


@dataclass(frozen=True)
class ShimRequest:
    """A FIFO that needs a shim DMA channel: MM2S (host to device) or S2MM, near `col`;
    `nbytes` per object, and whether `share_shim_channels` may route it through a mem tile."""

    fifo: FifoId
    direction: Direction
    col: int
    nbytes: int = 0
    shareable: bool = False
    loops: int = 1   # objects per launch: a looping core's FIFO moves one per iteration


@dataclass(frozen=True)
class SharedChannel:
    """A `share_shim_channels` decision: the FIFOs `members` (one object each per launch) move
    through one shim channel as the FIFO `fifo` between a shim tile and mem tile `mem`, member i
    at bytes [offsets[i], offsets[i] + its size) of `fifo`'s `nbytes`-byte objects: a mem-tile
    split of `fifo` into the members (MM2S), or a join of the members into `fifo` (S2MM)."""

    fifo: FifoId
    direction: Direction
    mem: Tile
    members: tuple[FifoId, ...]
    offsets: tuple[int, ...]
    nbytes: int
    loops: int = 1   # objects of each member per launch, moved round by round


SHARED_STEMS = {Direction.MM2S: Stem.SHARED_IN, Direction.S2MM: Stem.SHARED_HOST}
WHO_SHARES = {
    Direction.MM2S: "only the Emit's words and the inputs of groups that read no state an earlier group of the "
                    "call writes can share",
    Direction.S2MM: "only the outputs no later group of the call waits for can share",
}


def shim_channels_per_tile(device) -> dict[Direction, int]:
    return {Direction.MM2S: device.shim.dma_out_channels, Direction.S2MM: device.shim.dma_in_channels}


def share_shim_channels(program: Program, requests: list[ShimRequest], device, mem: MemChannels,
                        depth: int) -> tuple[list[SharedChannel], tuple]:
    """`share_shim_channels`: when more FIFOs of one direction need a shim channel than the
    device has, merge shareable ones of several groups into one FIFO through a mem tile (a split
    for inputs, a join for outputs), each merge saving all its channels but one, until they fit.
    A merge takes the column with the most shareable FIFOs left, its FIFOs in request order (the
    nearest columns' when it has only one), as many as still need saving, on the nearest mem tile
    with the DMA channels (1 + one per member) and the memory (`depth` objects of the merged FIFO,
    docs/platform.md section 4) free; fewer when none has. Designs that fit are left alone.
    Returns (the merges, rules); PlacementError when merging cannot make them fit."""
    shares, rules = [], []
    for direction in Direction:
        wanted = [r for r in requests if r.direction == direction]
        capacity = shim_channels_per_tile(device)[direction] * device.n_cols
        found = _shares_of(program, wanted, capacity, direction, device, mem, depth)
        shares += found
        rules += [(Rule.SHARE_SHIM_CHANNELS, _share_text(s)) for s in found]
        if found:
            after = len(wanted) - sum(len(s.members) - 1 for s in found)
            rules.append((Rule.SHARE_SHIM_CHANNELS, f"{len(wanted)} {direction.name} FIFOs now take "
                                                 f"{after} of the {capacity} shim {direction.name} channels"))
    return shares, tuple(rules)


def _shares_of(program, wanted, capacity, direction, device, mem, depth) -> list[SharedChannel]:
    left = [r for r in wanted if r.shareable]
    shares: list[SharedChannel] = []
    excess = len(wanted) - capacity
    while excess > 0:
        share = _next_share(left, wanted, excess, direction, len(shares), mem, depth)
        if share is None:
            _cannot_share(program, wanted, capacity, direction, device, len(wanted) - capacity - excess)
        shares.append(share)
        excess -= len(share.members) - 1
        left = [r for r in left if r.fifo not in share.members]
    return shares


def _next_share(left, wanted, excess, direction, number, mem, depth) -> SharedChannel | None:
    """The next merge: of FIFOs moving as many objects per launch (`loops`), those moving one
    first (a looping core's moves `loops` times their bytes through the channel), then those of
    the column with the most left."""
    by_col: dict[tuple[int, int], list[ShimRequest]] = {}
    for r in left:
        by_col.setdefault((r.loops, r.col), []).append(r)
    for loops, anchor in sorted(by_col, key=lambda c: (c[0], -len(by_col[c]), c[1])):
        alike = [r for r in left if r.loops == loops]
        pool = by_col[loops, anchor] if len(by_col[loops, anchor]) > 1 else sorted(alike, key=lambda r: abs(r.col - anchor))
        for count in range(min(excess + 1, len(pool)), 1, -1):
            members = sorted(pool[:count], key=wanted.index)
            share = _merge(members, direction, fifo_id(None, SHARED_STEMS[direction], number), anchor, mem, depth)
            if share is not None:
                return share
    return None


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
    direction (there are enough: `share_shim_channels` made sure); returns (fifo -> shim tile,
    rules)."""
    per_shim = shim_channels_per_tile(device)
    used = {(col, d): 0 for col in range(device.n_cols) for d in per_shim}
    chosen: dict[str, Tile] = {}
    for req in requests:
        col = next(c for c in sorted(range(device.n_cols), key=lambda c: (abs(c - req.col), c))
                   if used[(c, req.direction)] < per_shim[req.direction])
        used[(col, req.direction)] += 1
        chosen[req.fifo] = Tile(col, device.shim_row, TileKind.SHIM)
    return chosen, _shim_rules(requests, chosen)


def _shim_rules(requests, chosen) -> tuple:
    by_shim: dict[str, list[str]] = {}
    for req in requests:
        by_shim.setdefault(chosen[req.fifo].name, []).append(f"{req.fifo} ({req.direction})")
    return tuple((Rule.SHIM_CHANNELS, f"{shim}: {', '.join(names)}") for shim, names in sorted(by_shim.items()))


