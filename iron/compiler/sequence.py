"""The runtime sequence: per group, Waits on the `_host` FIFOs of earlier groups that wrote a
state it touches, Moves filling its inputs and draining its outputs; then `finish_sequence` cuts
each Move into Dma ops within the shim's limits, recycles buffer descriptor ids only after a
Wait covering the op that held them, and ends with a Wait on every S2MM FIFO (docs/platform.md);
the Dma patterns themselves are `channels.dma_patterns`."""
from __future__ import annotations

from dataclasses import dataclass, replace

from iron.compiler.channels import dma_patterns
from iron.compiler.objects import Context, Part, host_access, joined
from iron.compiler.place import Site
from iron.compiler.readers import Reader
from iron.compiler.words import Access, placement_access
from iron.ir import destination, state_of, tensor_inputs
from iron.plan.fifos import FifoId, Stem, fifo_id
from iron.plan.plan import Direction, Dma, Fifo, Tile, TileKind, Wait


@dataclass(frozen=True)
class Move:
    """A lowered move of the runtime sequence: `access`'s words between host `buffer` and
    `fifo`; `finish_sequence` cuts it into Dma ops within the shim's limits."""

    direction: Direction
    fifo: FifoId
    buffer: str
    access: Access


def group_moves(ctx: Context, site: Site, parts: list[Part]) -> list[Move]:
    """A group's moves: its `_in` regions, its streamed matrix, each part's `_host` regions, a
    joined result the host reads."""
    moves = [Move(Direction.MM2S, parts[0].in_fifo, *m) for m in parts[0].ins.moves]
    if site.stream is not None and site.stream.owner is None:
        s, (buffer, access) = site.stream, host_access(ctx, site.stream.matrix)
        moves += [Move(Direction.MM2S, s.lane_fifo(site.group.name, k), buffer, lane)
                  for k, lane in enumerate(_lanes(s, access) if s.parts > 1 else [access])]
    for part in parts:
        moves += [Move(Direction.S2MM, part.fifo(Stem.HOST), *m) for m in part.host.moves]
    last = site.group.calls[-1]
    if parts[0].split and Reader.HOST in ctx.layout.users.get(last, ()):
        index = next(i for i, n in enumerate(ctx.program.outputs) if n is last)
        p = ctx.placement(f"out{index}")
        moves.append(Move(Direction.S2MM, joined(ctx, site.group.name), p.buffer, placement_access(p)))
    return moves


def _lanes(s, access: Access) -> list[Access]:
    """Each lane's matrix words in its split link's order: per block, each of the lane's parts'
    rows of that block (one lane: every part's); a lane of one part whose rows lie end to end,
    one run of words, which moves in the fewest Dma ops however long its rows."""
    m = s.matrix.shape[0]
    row = access.nwords // m
    stride = access.dims[0][1] if len(access.dims) > 1 else row
    part = (m // s.parts) * stride
    dims = ((s.blocks, s.rows * stride), (s.per_lane, part), (s.rows, stride), (row, 1))
    if s.per_lane == 1 and stride == row:
        dims = ((part, 1),)
    return [replace(access, offset=access.offset + k * s.per_lane * part, dims=dims) for k in range(len(s.lane_mems))]


def with_state_waits(sites, moves: list[list[Move]]) -> tuple[list, frozenset[FifoId]]:
    """The groups' moves in order, each group's after Waits on the `_host` FIFOs (`written_fifos`)
    of earlier groups that wrote a state it touches (once per write: every writer, as disjoint parts of a
    state may be written by several groups); also the `_in` FIFOs of the groups that wait so."""
    writers: dict[str, set[FifoId]] = {}
    waited: set[FifoId] = set()
    after: set[FifoId] = set()
    entries: list = []
    for site, mine in zip(sites, moves):
        calls = site.group.calls
        touched = {state_of(n) for c in calls for n in (*tensor_inputs(c), *c.src[: c.arg.n_inputs + c.arg.writes])}
        fifos = {f for s in touched for f in writers.get(s, ())}
        if fifos:
            after.add(fifo_id(site.group.name, Stem.IN))
        entries += [Wait(f) for f in sorted(fifos, key=str) if f not in waited]
        waited |= fifos
        entries += mine
        for call in calls:
            if call.arg.writes:
                writers.setdefault(state_of(destination(call)), set()).update(written_fifos(site))
                waited -= written_fifos(site)
    return entries, frozenset(after)


def written_fifos(site: Site) -> set[FifoId]:
    """The FIFOs a group's state write reaches host memory through: its `_host`, or each column's
    join of a streamed group (`stream_into_state`) or of a grid's C blocks (a matrix call writing
    a run of a state)."""
    g, on = site.group.name, site.flow or site.grid
    if on is None:
        return {fifo_id(g, Stem.HOST)}
    return {fifo_id(g, Stem.HOST, c) for c in range(len(on.cols))}


def finish_sequence(entries: list, fifos: dict[FifoId, Fifo], device) -> tuple:
    """Dma and Wait ops from the lowered moves: each move split into Dmas within the device's
    limits, BD ids per shim tile reused only after a Wait covering the op that held them (MM2S
    ops made waitable with issue_token), and a final Wait on every S2MM FIFO not yet waited."""
    ops = _Ops(device)
    for entry in entries:
        if isinstance(entry, Wait):
            ops.wait(entry.fifo)
            continue
        fifo, access = fifos[entry.fifo], entry.access
        shim = fifo.producer if entry.direction is Direction.MM2S else next(
            t for t in fifo.consumers if t.kind is TileKind.SHIM)
        for offset, sizes, strides in dma_patterns(access.offset, access.dims, device):
            ops.dma(Dma(entry.direction, fifo.name, entry.buffer, offset, sizes, strides, ops.free_bd(shim), shim,
                        access.patch_word))
    for name in list(ops.unwaited):
        ops.wait(name)
    return tuple(ops.ops)


def _waitable(op: Dma) -> Dma:
    """`op` issuing a completion token (a Wait covers it): built directly, as a long looped
    sequence makes most of its ops waitable."""
    return Dma(op.direction, op.fifo, op.buffer, op.offset, op.sizes, op.strides, op.bd_id, op.shim, op.patch_word,
               issue_token=True)


class _Ops:
    """The ops so far, the BD ids each shim tile's ops hold until a Wait covers them (by shim,
    and by FIFO: a long looped sequence waits often), and the S2MM FIFOs not yet waited on."""

    def __init__(self, device):
        self.device, self.ops = device, []
        self.held: dict[Tile, dict[int, int]] = {}    # shim -> bd -> op index
        self.holding: dict[FifoId, set[tuple[Tile, int]]] = {}
        self.unwaited: dict[FifoId, None] = {}

    def dma(self, op: Dma):
        self.ops.append(op)
        self.held.setdefault(op.shim, {})[op.bd_id] = len(self.ops) - 1
        self.holding.setdefault(op.fifo, set()).add((op.shim, op.bd_id))
        if op.direction is Direction.S2MM:
            self.unwaited.setdefault(op.fifo)

    def free_bd(self, shim: Tile) -> int:
        """The lowest BD id of `shim` no op holds, after waiting on the oldest op's FIFO while
        every one is held."""
        mine = self.held.setdefault(shim, {})
        while len(mine) >= self.device.shim_bd_ids:
            self.wait(self.ops[min(mine.values())].fifo)
        for bd in range(self.device.shim_bd_ids):
            if bd not in mine:
                return bd

    def wait(self, fifo: FifoId):
        """Append Wait(fifo), making its held MM2S ops waitable, and free the BDs it covers;
        nothing when no op on `fifo` is outstanding (an earlier Wait, freeing a BD, covered them all)."""
        covered = self.holding.pop(fifo, set())
        if fifo not in self.unwaited and not covered:
            return
        for shim, bd in covered:
            index = self.held[shim].pop(bd)
            if self.ops[index].direction is Direction.MM2S:
                self.ops[index] = _waitable(self.ops[index])
        self.ops.append(Wait(fifo))
        self.unwaited.pop(fifo, None)
