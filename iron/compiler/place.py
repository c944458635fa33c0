"""Placement: fused groups onto the device's tiles, by named rules.

What it does:
- `snake_order`: groups take compute tiles in snake order, (0,2),(0,3),(0,4),(0,5),(1,5),(1,4),
  ...,(1,2),(2,2),..., so consecutive groups are neighbours; the Emit takes the next tile.
- `stream_large_matrix`: a MatVec/MatMul matrix larger than its L1 share (a quarter of a
  compute tile) is streamed in blocks of `rows` rows (rows divides M, a block <= 16 KiB) from
  the shim through a mem tile (a forward link).
- `split_matrix_over_tiles`: a MatVec whose matrix exceeds 128 KiB, with only elementwise
  calls after it and one result, is split by rows over k = 2, 4 or 8 tiles (the smallest that
  makes each part <= 128 KiB and fits the device: enough free tiles, and a mem tile with k + 1
  DMA channels each way for the split and join links).
- `share_shim_channels`: only when more FIFOs of one direction need a shim channel than the
  device has (2 MM2S and 2 S2MM per shim tile), the `_in` FIFOs of several groups become one
  shim -> mem tile FIFO split to each (or their `_host` FIFOs one join into a mem -> shim FIFO),
  same column first, within the mem tiles' DMA channels and memory.
- `shim_channels` (`assign_shims`): FIFOs to/from the host go to the shim tile nearest their
  core with a free channel of their direction.
- `fit_compute_channels`: only when a core would take more FIFOs by DMA than its tile has input
  channels (2 S2MM; a shared-memory FIFO takes none), a group that already sends it an object
  forwards, inside that object, what the core would read from the other FIFOs: objects that
  group receives itself, or the core's whole `_in` (when it holds no state), which that group then
  loads too. A core's outputs never exceed its channels: at most `_host` and `_out` (a split
  part only its `_part`).
Too many tiles or channels (even shared) -> PlacementError.

What it does not: make FIFOs, Functions or the sequence (lower.py; it also decides which FIFOs
may share a channel or be forwarded, and applies the merges and forwards) or check memory
(allocate.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from iron.compiler.fuse import ELEMENTWISE, MATRIX_OPS, STREAM_OBJECT_BYTES, Group, nbytes
from iron.compiler.plan import Direction, Tile, TileKind
from iron.errors import PlacementError
from iron.ir import Node, Op, Program, describe
from iron.kernels.library import MatVec

SPLIT_PART_BYTES = 128 * 1024
SPLIT_COUNTS = (2, 4, 8)


@dataclass(frozen=True)
class Stream:
    """A matrix operand streamed through mem tile `mem`: `blocks` objects of `rows` rows each
    per part per launch, split over `parts` tiles (1: a forward link)."""

    matrix: Node
    rows: int
    blocks: int
    parts: int
    mem: Tile


@dataclass(frozen=True)
class Site:
    """Where a group runs: one tile, or one tile per row part of a split matrix."""

    group: Group
    tiles: tuple[Tile, ...]
    stream: Stream | None = None


@dataclass(frozen=True)
class Layout:
    sites: tuple[Site, ...]
    emit: Tile | None
    rules: tuple[tuple[str, str], ...]


def snake_order(device) -> list[Tile]:
    """Every compute tile, column by column, rows up in even columns and down in odd ones."""
    tiles = []
    for col in range(device.n_cols):
        rows = device.compute_rows if col % 2 == 0 else tuple(reversed(device.compute_rows))
        tiles += [Tile(col, row, TileKind.COMPUTE) for row in rows]
    return tiles


def place(program: Program, groups: tuple[Group, ...], device, with_emit: bool,
          outside: dict[Node, tuple[str, ...]]) -> Layout:
    """Tiles for every group (and the Emit). `outside[call]` lists the users of a call's
    result outside its group: group names, "host" per output or carried element, "emit"."""
    free = snake_order(device)
    needed = len(groups) + with_emit
    if needed > len(free):
        _too_many_tiles(program, device, needed, len(free))
    channels = MemChannels(device)
    sites, rules = [], []
    for number, group in enumerate(groups):
        spare = len(free) - (len(groups) - number - 1) - with_emit
        parts = split_parts(group, outside, spare, channels, free[0])
        tiles, free = tuple(free[:parts]), free[parts:]
        stream = stream_large_matrix(group, tiles, parts, channels, device)
        sites.append(Site(group, tiles, stream))
        rules.append(("snake_order", f"{group.name} on {', '.join(t.name for t in tiles)}"))
        rules += _stream_rules(group, stream)
    emit = free[0] if with_emit else None
    if emit is not None:
        rules.append(("snake_order", f"emit on {emit.name}"))
    return Layout(tuple(sites), emit, tuple(rules))


def _too_many_tiles(program: Program, device, needed: int, have: int):
    raise PlacementError(
        f"{program.name} needs {needed} compute tiles but {device.name} has {have}: compile for a "
        "device with more columns, or make the graph's work fit fewer fused groups."
    )


def _stream_rules(group: Group, stream: Stream | None) -> list[tuple[str, str]]:
    if stream is None:
        return []
    m = stream.matrix
    what = f"{group.name}: {describe(m)} {m.shape} {m.dtype.name} ({nbytes(m)} bytes)"
    rules = [("stream_large_matrix",
              f"{what} streamed as {stream.blocks} blocks of {stream.rows} rows per part via {stream.mem.name}")]
    if stream.parts > 1:
        rules.append(("split_matrix_over_tiles", f"{what} split by rows over {stream.parts} tiles"))
    return rules


# ---- the matrix rules ----------------------------------------------------------------------------

def l1_share(device) -> int:
    """The most of a compute tile a matrix operand may hold whole: a quarter of its memory."""
    return device.compute.data_memory_bytes // 4


def stream_large_matrix(group: Group, tiles, parts: int, channels, device) -> Stream | None:
    """Stream the group's leading MatVec/MatMul matrix when it is larger than its L1 share."""
    first = group.calls[0]
    if not issubclass(first.arg.kernel, MATRIX_OPS):
        return None
    matrix = first.src[0]
    if not is_host_tensor(matrix) or (parts == 1 and nbytes(matrix) <= l1_share(device)):
        return None
    rows_per_part = matrix.shape[0] // parts
    row_bytes = nbytes(matrix) // matrix.shape[0]
    rows = max((r for r in range(1, rows_per_part + 1) if rows_per_part % r == 0
                and r * row_bytes <= STREAM_OBJECT_BYTES and r * row_bytes % 4 == 0), default=None)
    if rows is None:
        return None
    links = (1, 1) if parts == 1 else (parts + 1, parts + 1)
    mem = channels.take(tiles[0].col, *links)
    return Stream(matrix, rows, rows_per_part // rows, parts, mem)


def split_parts(group: Group, outside: dict[Node, tuple[str, ...]], spare: int, channels, first: Tile) -> int:
    """How many tiles a group takes: k from SPLIT_COUNTS when `split_matrix_over_tiles` applies."""
    if not splittable(group, outside):
        return 1
    matrix = group.calls[0].src[0]
    for k in SPLIT_COUNTS:
        if matrix.shape[0] % k or nbytes(matrix) // k > SPLIT_PART_BYTES:
            continue
        if k <= spare and channels.can_take(first.col, inputs=k + 1, outputs=k + 1):
            return k
        return 1
    return 1


def splittable(group: Group, outside: dict[Node, tuple[str, ...]]) -> bool:
    """A MatVec over a host matrix > 128 KiB whose rows are whole words along the memory's last
    axis, then only elementwise calls writing no state, with the last call's result its one use
    outside the group."""
    first, last = group.calls[0], group.calls[-1]
    matrix = first.src[0]
    if not issubclass(first.arg.kernel, MatVec) or not is_host_tensor(matrix):
        return False
    if nbytes(matrix) <= SPLIT_PART_BYTES or (nbytes(matrix) // matrix.shape[0]) % 4:
        return False
    if matrix.op == Op.VIEW and not matrix.arg[-1].keeps_axis:
        return False
    epilogue = group.calls[1:]
    if any(not issubclass(c.arg.kernel, ELEMENTWISE) or c.arg.writes for c in epilogue):
        return False
    if any(outside.get(c) for c in group.calls[:-1]):
        return False
    users = outside.get(last, ())
    return bool(users) and users.count("host") <= 1 and "emit" not in users


def is_host_tensor(node: Node) -> bool:
    return node.op in (Op.INPUT, Op.MEMORY, Op.VIEW)


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


# ---- shim channels -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShimRequest:
    """A FIFO that needs a shim DMA channel: MM2S (host to device) or S2MM, near `col`;
    `nbytes` per object, and whether `share_shim_channels` may route it through a mem tile."""

    fifo: str
    direction: Direction
    col: int
    nbytes: int = 0
    shareable: bool = False


@dataclass(frozen=True)
class SharedChannel:
    """A `share_shim_channels` decision: the FIFOs `members` (one object each per launch) move
    through one shim channel as the FIFO `name` between a shim tile and mem tile `mem`, member i
    at bytes [offsets[i], offsets[i] + its size) of `name`'s `nbytes`-byte objects: a mem-tile
    split of `name` into the members (MM2S), or a join of the members into `name` (S2MM)."""

    name: str
    direction: Direction
    mem: Tile
    members: tuple[str, ...]
    offsets: tuple[int, ...]
    nbytes: int


SHARED_NAMES = {Direction.MM2S: "shared_in", Direction.S2MM: "shared_host"}
WHO_SHARES = {
    Direction.MM2S: "only the inputs of groups that read no state an earlier group of the call writes can share",
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
        rules += [("share_shim_channels", _share_text(s)) for s in found]
        if found:
            after = len(wanted) - sum(len(s.members) - 1 for s in found)
            rules.append(("share_shim_channels", f"{len(wanted)} {direction.name} FIFOs now take "
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
    by_col: dict[int, list[ShimRequest]] = {}
    for r in left:
        by_col.setdefault(r.col, []).append(r)
    for anchor in sorted(by_col, key=lambda c: (-len(by_col[c]), c)):
        pool = by_col[anchor] if len(by_col[anchor]) > 1 else sorted(left, key=lambda r: abs(r.col - anchor))
        for count in range(min(excess + 1, len(pool)), 1, -1):
            members = sorted(pool[:count], key=wanted.index)
            share = _merge(members, direction, f"{SHARED_NAMES[direction]}{number}", anchor, mem, depth)
            if share is not None:
                return share
    return None


def _merge(members, direction, name, anchor, mem, depth) -> SharedChannel | None:
    """`members` merged on the mem tile nearest `anchor` that has room (taken), or None."""
    offsets = [sum(-(-r.nbytes // 4) * 4 for r in members[:i]) for i in range(len(members) + 1)]
    channels = (1, len(members)) if direction is Direction.MM2S else (len(members), 1)
    tile = mem.take_nearest(anchor, *channels, depth * offsets[-1])   # the link keeps only the merged FIFO's objects
    if tile is None:
        return None
    return SharedChannel(name, direction, tile, tuple(r.fifo for r in members), tuple(offsets[:-1]), offsets[-1])


def _share_text(s: SharedChannel) -> str:
    how = "split into" if s.direction is Direction.MM2S else "joined from"
    return (f"{s.name} ({s.direction.name}, {s.nbytes} bytes) on {s.mem.name} {how} "
            f"{', '.join(s.members)} at bytes {', '.join(map(str, s.offsets))}")


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
    return tuple(("shim_channels", f"{shim}: {', '.join(names)}") for shim, names in sorted(by_shim.items()))


# ---- compute-tile channels -------------------------------------------------------------------------

@dataclass(frozen=True)
class CoreInputs:
    """What one core receives, for `fit_compute_channels`: `dma` the FIFOs reaching its tile
    through a DMA channel, `received` every FIFO it acquires (shared memory too), `carrier` its
    group's `_out` when that group runs on one tile (so other groups' operands may be added to
    its object), `own_in` its group's `_in` and `movable_in` whether everything in it (no state)
    may come in another group's object instead."""

    group: str
    tile: Tile
    dma: tuple[str, ...]
    received: tuple[str, ...]
    carrier: str | None = None
    own_in: str | None = None
    movable_in: bool = False


@dataclass(frozen=True)
class Relay:
    """A `fit_compute_channels` decision: group `carrier` forwards in its `_out` everything group
    `reader` would take from `fifos`, so `reader`'s cores no longer receive them."""

    carrier: str
    reader: str
    fifos: tuple[str, ...]


def fit_compute_channels(program: Program, cores: list[CoreInputs], device) -> tuple[list[Relay], tuple]:
    """`fit_compute_channels`: for each group (in order) whose cores would take more FIFOs by DMA
    than a compute tile has input channels, the first group sending it an `_out` (a carrier, on
    one tile) that can forward enough of the others: FIFOs the carrier still receives itself, or
    the group's movable `_in` (the carrier loads it in its own `_in`, which it must have or have
    a channel left for). Designs that fit are left alone. Returns (the relays, rules);
    PlacementError naming the group, its tile and FIFOs when no carrier can."""
    limit = device.compute.dma_in_channels
    state = ChannelState({c.group: c for c in cores})
    relays, rules = [], []
    for core in cores:
        if len(core.dma) <= limit or core.group in state.readers:
            continue
        relay = _relay_for(core, cores, state, limit)
        if relay is None:
            _cannot_fit(program, core, limit)
        state.take(relay, core)
        relays.append(relay)
        rules.append(("fit_compute_channels", _relay_text(relay, core, limit)))
    return relays, tuple(rules)


class ChannelState:
    """The decisions so far: FIFOs each reader no longer receives, groups that gained an `_in`."""

    def __init__(self, by_group: dict[str, CoreInputs]):
        self.by_group = by_group
        self.readers: dict[str, tuple[str, ...]] = {}
        self.gained_in: set[str] = set()

    def receives(self, group: str) -> set[str]:
        core = self.by_group[group]
        return (set(core.received) - set(self.readers.get(group, ()))) | (
            {f"{group}_in"} if group in self.gained_in else set())

    def dma_inputs(self, group: str) -> int:
        core = self.by_group[group]
        return len(core.dma) - len(self.readers.get(group, ())) + (group in self.gained_in)

    def take(self, relay: Relay, reader: CoreInputs):
        self.readers[relay.reader] = relay.fifos
        if reader.own_in in relay.fifos and f"{relay.carrier}_in" not in self.receives(relay.carrier):
            self.gained_in.add(relay.carrier)


def _relay_for(core: CoreInputs, cores: list[CoreInputs], state: ChannelState, limit: int) -> Relay | None:
    needed = len(core.dma) - limit
    carriers = [c for c in cores if c.carrier in core.received and c.group != core.group]
    for carrier in carriers:
        has = state.receives(carrier.group)
        can_load = f"{carrier.group}_in" in has or state.dma_inputs(carrier.group) < limit
        movable = [f for f in core.dma if f == core.own_in and core.movable_in and can_load]
        forwardable = [f for f in core.dma if f in has and f != carrier.carrier] + movable
        if len(forwardable) >= needed:
            return Relay(carrier.group, core.group, tuple(forwardable[:needed]))
    return None


def _relay_text(relay: Relay, core: CoreInputs, limit: int) -> str:
    return (f"{core.group} on {core.tile.name} would take {len(core.dma)} FIFOs by DMA ({', '.join(core.dma)}) "
            f"but a compute tile has {limit} input channels: {relay.carrier} forwards in {relay.carrier}_out "
            f"what {core.group} would take from {', '.join(relay.fifos)}")


def _cannot_fit(program: Program, core: CoreInputs, limit: int):
    raise PlacementError(
        f"{program.name}: group {core.group} on {core.tile.name} needs {len(core.dma)} FIFOs by DMA "
        f"({', '.join(core.dma)}) but a compute tile has {limit} input channels, and no group that sends "
        "it an object receives the others or can load them for it (a state is loaded only by its "
        "reader): combine two of those tensors in an earlier kernel call, or make a state it reads a "
        "param if it does not change."
    )
