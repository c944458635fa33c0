"""The Plan's object FIFOs and mem-tile links lowered onto tiles as mlir-aie lowers them
(docs/platform.md section 4): each compute or mem end is buffers with a producer and a consumer
lock and a channel running a BD ring over them, one stream per FIFO joins the ends (a broadcast
for several consumers), a shim end is a shim DMA channel (shim.py), a shared-memory FIFO is one
end both cores use, and a link keeps one set of buffers its channels write and read by parts.
"""
from __future__ import annotations

from iron.plan.memory import fifo_homes
from iron.plan.plan import Direction, Port, TileKind
from iron.runtime.emulator.dma import BufferDescriptor, Channel, Span, Stream, ring
from iron.runtime.emulator.scheduler import Board


class FifoEnd:
    """One FIFO end on a tile: `buffers` <name>_buff_i (a consumer's end is named <fifo>_cons) and
    `locks`, per part of an object, a producer lock (free buffers) and a consumer lock (filled
    ones); an object has one part unless a link splits or joins it."""

    def __init__(self, tile, name: str, depth: int, nbytes: int, parts: int = 1):
        self.buffers = [tile.buffer(f"{name}_buff_{i}", nbytes) for i in range(depth)]
        self.locks = [(tile.lock(f"{name}_prod_lock_{i}", depth), tile.lock(f"{name}_cons_lock_{i}", 0))
                      for i in range(parts)]

    def bds(self, direction: Direction, pieces: list[tuple[int, int, int]]) -> BufferDescriptor:
        """The ring of BDs a channel runs, for each buffer one per piece (part, byte offset,
        bytes) with that part's locks: an S2MM one fills the piece of a free buffer, an MM2S one
        drains the piece of a filled buffer."""
        bds = []
        for buffer in self.buffers:
            for part, offset, nbytes in pieces:
                free, filled = self.locks[part]
                take, give = (free, filled) if direction is Direction.S2MM else (filled, free)
                bds.append(BufferDescriptor(Span(buffer, offset // 4), nbytes // 4, take, give))
        return ring(bds)


class CorePort:
    """A core's use of a FIFO end on one port, as the lowered core program does it: an acquire of
    n objects takes only those not yet held from the lock; a release gives them to the other
    side's lock; `index` is the first held buffer."""

    __slots__ = ("buffers", "size", "take", "give", "held", "index")

    def __init__(self, end: FifoEnd, port: Port):
        self.buffers, self.size = end.buffers, len(end.buffers)
        ((free, filled),) = end.locks
        self.take, self.give = (free, filled) if port is Port.PRODUCE else (filled, free)
        self.held = self.index = 0

    def acquire(self, count: int, wait):
        """None once `count` objects are held, else `wait` (what the core blocks on)."""
        need = count - self.held
        if need > 0:
            if not self.take.acquire(need):
                return wait
            self.held += need
        return None

    def release(self, count: int):
        self.held -= count
        self.index = (self.index + count) % self.size
        self.give.release(count)

    def state(self) -> tuple:
        return self.held, self.index


class ObjectFifos:
    """Every FIFO of a Plan lowered onto `tiles` (plan tile -> Tile): `ends` ((fifo, plan tile)
    -> FifoEnd), the tile DMA `channels`, the `streams` by FIFO, and `shim_ends` ((fifo, plan tile)
    -> (direction, receiver index)) the shim DMA attaches to."""

    def __init__(self, plan, tiles: dict, board: Board):
        self.board, self.tiles = board, tiles
        self.ends: dict[tuple, FifoEnd] = {}
        self.channels: list[Channel] = []
        self.streams: dict[str, Stream] = {}
        self.shim_ends: dict[tuple, tuple[Direction, int]] = {}
        fifos = {f.name: f for f in plan.fifos}
        self.homes = fifo_homes(plan)
        linked = {(name, link.tile) for link in plan.links for name in (*link.sources, *link.destinations)}
        for fifo in plan.fifos:
            self._lower(fifo, linked)
        for link in plan.links:
            self._link(link, fifos)

    def _lower(self, fifo, linked):
        if fifo.shared_memory:
            ((home, _),) = self.homes[fifo.name]
            end = FifoEnd(self.tiles[home], fifo.name, fifo.depth, fifo.nbytes)
            self.ends[(fifo.name, fifo.producer)] = self.ends[(fifo.name, fifo.consumers[0])] = end
            return
        from_ddr = fifo.producer.kind is TileKind.SHIM
        ddr = tuple((from_ddr and k == 0) or tile.kind is TileKind.SHIM for k, tile in enumerate(fifo.consumers))
        stream = self.streams[fifo.name] = Stream(len(fifo.consumers), self.board, ddr)
        ends = [(fifo.producer, Direction.MM2S, fifo.name, 0)]
        ends += [(tile, Direction.S2MM, f"{fifo.name}_cons", k) for k, tile in enumerate(fifo.consumers)]
        for at, direction, name, k in ends:
            if at.kind is TileKind.SHIM:
                self.shim_ends[(fifo.name, at)] = (direction, k)
            elif (fifo.name, at) not in linked:
                end = self.ends[(fifo.name, at)] = FifoEnd(self.tiles[at], name, fifo.depth, fifo.nbytes)
                self._channel(at, direction, fifo.name, end.bds(direction, [(0, 0, fifo.nbytes)]), stream, k)

    def _link(self, link, fifos):
        """One set of buffers on the mem tile, of the member FIFO mlir-aie keeps there (the
        holder); a split or join has a lock pair per part, the holder's channel a BD per part of
        each buffer, in link order, and each other member's channel a BD per buffer over its part
        (check_plan keeps the parts back to back, as mlir-aie moves them)."""
        members = [fifos[name] for name in (*link.sources, *link.destinations)]
        holder = next(f for f in members if link.tile in dict(self.homes[f.name]))
        parted = [f for f in members if f is not holder]
        offsets = link.source_offsets or link.destination_offsets or (0,)   # (0,): a forward
        pieces = {f.name: (i, offset, f.nbytes) for i, (f, offset) in enumerate(zip(parted, offsets))}
        whole = [pieces[f.name] for f in parted] if len(parted) > 1 else [(0, 0, holder.nbytes)]
        name = f"{holder.name}_cons" if holder.name in link.sources else holder.name
        end = FifoEnd(self.tiles[link.tile], name, holder.depth, holder.nbytes, len(parted))
        for fifo in members:
            direction = Direction.S2MM if fifo.name in link.sources else Direction.MM2S
            bds = end.bds(direction, whole if fifo is holder else [pieces[fifo.name]])
            k = fifo.consumers.index(link.tile) if direction is Direction.S2MM else 0
            self._channel(link.tile, direction, fifo.name, bds, self.streams[fifo.name], k)

    def _channel(self, at, direction: Direction, fifo: str, bds: BufferDescriptor, stream: Stream, k: int):
        index = self.tiles[at].channel(direction, f"@{fifo}")
        self.channels.append(Channel(f"{direction} {index} of {at.name} (@{fifo})", direction, bds, stream, k, self.board))

    def port(self, fifo: str, at, port: Port) -> CorePort:
        return CorePort(self.ends[(fifo, at)], port)
