"""The runtime sequence: per group, Waits on the `_host` FIFOs of earlier groups that wrote a
state it touches, Moves filling its inputs and draining its outputs; then `finish_sequence` cuts
each Move into Dma ops (`channels.dma_patterns`) with buffer descriptor ids (docs/platform.md)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from iron.compiler.channels import dma_patterns, lane_dims
from iron.compiler.objects import Context, Part, host_access, joined
from iron.compiler.place import Site
from iron.compiler.readers import Reader
from iron.compiler.words import Access, placement_access
from iron.ir import destination, state_of, tensor_inputs
from iron.plan.fifos import FifoId, Stem, fifo_id
from iron.plan.plan import Direction, Dma, Fifo, Tile, TileKind, Wait


@dataclass(frozen=True)
class Move:
    """A lowered move of the runtime sequence: `access`'s words between host `buffer` and `fifo`."""

    direction: Direction
    fifo: FifoId
    buffer: str
    access: Access


def group_moves(ctx: Context, site: Site, parts: list[Part]) -> list[Move]:
    """A group's moves: its `_in` regions, streamed matrix, each part's `_host` regions, a joined result."""
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
    """Each lane's matrix words (`lane_dims`), its parts' rows as they lie in host memory."""
    row = access.nwords // s.matrix.shape[0]
    stride = access.dims[0][1] if len(access.dims) > 1 else row
    part = s.blocks * s.rows * stride
    dims = lane_dims(s.blocks, s.per_lane, s.rows, row, stride)
    return [replace(access, offset=access.offset + k * s.per_lane * part, dims=dims) for k in range(len(s.lane_mems))]


def with_state_waits(sites, moves: list[list[Move]]) -> tuple[list, frozenset[FifoId]]:
    """The groups' moves in order, each group's after Waits on the FIFOs (`written_fifos`) of every
    earlier group that wrote a state it touches, once per write; also the `_in` FIFOs of the
    groups that wait so."""
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
    join of a streamed group (`stream_into_state`) or of a grid's C blocks."""
    g, on = site.group.name, site.flow or site.grid
    if on is None:
        return {fifo_id(g, Stem.HOST)}
    return {fifo_id(g, Stem.HOST, c) for c in range(len(on.cols))}


def finish_sequence(entries: list, fifos: dict[FifoId, Fifo], device) -> tuple:
    """Dma and Wait ops from the lowered moves: each move cut into Dmas, BD ids per shim tile reused
    only after a Wait covering the op that held them, and a final Wait on every S2MM FIFO."""
    ops = _Ops(device.shim_bd_ids)
    for entry in entries:
        if isinstance(entry, Wait):
            ops.wait(entry.fifo)
        else:
            ops.move(entry, fifos[entry.fifo], dma_patterns(entry.access.offset, entry.access.dims, device))
    for name in list(ops.unwaited):
        ops.wait(name)
    return ops.finished()


class _Ops:
    """The ops so far (a Dma's fields until `finished`: a later Wait may make it waitable), the BD
    ids each shim tile's ops hold until a Wait covers them (by shim, and by FIFO: all of a
    FIFO's ops are on its one shim tile), and the S2MM FIFOs not yet waited on."""

    def __init__(self, bd_ids: int):
        self.bd_ids, self.ops = bd_ids, []
        self.tokens: set[int] = set()                  # the MM2S ops a Wait covers
        self.held: dict[Tile, dict[int, int]] = {}     # shim -> bd -> op index
        self.holding: dict[FifoId, tuple[Tile, list[int]]] = {}
        self.unwaited: dict[FifoId, None] = {}

    def move(self, move: Move, fifo: Fifo, patterns: list):
        """The Dmas of one move, each on its shim's lowest free BD id, waiting on the oldest op's FIFO while none is."""
        inputs = move.direction is Direction.MM2S
        shim = fifo.producer if inputs else next(t for t in fifo.consumers if t.kind is TileKind.SHIM)
        held, holding = self.held.setdefault(shim, {}), self.holding.setdefault(move.fifo, (shim, []))[1]
        fields = (move.direction, move.fifo, move.buffer)
        for offset, sizes, strides in patterns:
            while len(held) == self.bd_ids:
                self.wait(self.ops[min(held.values())][1])
            bd = min(b for b in range(self.bd_ids) if b not in held)
            held[bd] = len(self.ops)
            self.ops.append((*fields, offset, sizes, strides, bd, shim, move.access.patch_word))
            holding.append(bd)
        if not inputs:
            self.unwaited[move.fifo] = None

    def wait(self, fifo: FifoId):
        """Append Wait(fifo), making its held MM2S ops waitable, and free the BDs it covers;
        nothing when no op on `fifo` is outstanding (an earlier Wait, freeing a BD, covered them all)."""
        shim, covered = self.holding.get(fifo, (None, []))
        if not covered and fifo not in self.unwaited:
            return
        indices = [self.held[shim].pop(bd) for bd in covered]
        self.tokens.update(i for i in indices if self.ops[i][0] is Direction.MM2S)
        covered.clear()
        self.ops.append(Wait(fifo))
        self.unwaited.pop(fifo, None)

    def finished(self) -> tuple:
        return tuple(op if isinstance(op, Wait) else Dma(*op, issue_token=i in self.tokens)
                     for i, op in enumerate(self.ops))
