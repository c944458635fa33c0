"""Object FIFOs as the emulator runs them: rings of objects guarded by the two locks of each end,
the tile DMAs that move objects between the rings of different tiles, and mem-tile links.

A FIFO end on a compute or mem tile is a `Ring` of `depth` objects. Its producer count (free
objects) and consumer count (filled objects) are the locks of add-one.lowered.mlir: acquiring
Produce takes free objects, releasing them fills them; acquiring Consume takes filled objects,
releasing them frees them. A shared-memory FIFO is one ring both tiles use. A FIFO from one tile
to one other compute or mem tile is also one ring, of 2 x depth objects, with each end still
acquiring at most `depth`: its tile DMA moves every filled object on as soon as the consumer end
has room, so whenever nothing else can move, both rings hold exactly what one ring of both
capacities holds. A FIFO broadcast to several tiles gets a mover (the tile DMAs) that copies
each filled object into every consumer ring, in lockstep, and frees it. A shim end has no ring:
the shim DMA (dma.py) writes into the consumer rings or reads the producer ring directly (a shim
among several consumers gets a ring, standing for the stream between the broadcast and its DMA).

A Link moves objects between the mem-tile rings of its FIFOs: forward (exchanges the slots'
objects), join (copies at byte offsets) or split. A split whose FIFOs no other link touches,
whose parts do not overlap and whose destination rings are all one size hands out parts without
copying: slot j of every destination ring holds a part of one whole object, and a move exchanges
the source object with that whole, so each destination gets its part of the source object as a
view. Any other split copies.

Objects are `Obj`s: bytes (np.uint8) with a uint32 view, kept in ring slots and reused, so what
is computed from an object (typed views, bound kernel calls) is computed once. Every task shares
a `Board`: the queue of tasks ready to resume and, while the machine records a launch, its trace
of data actions (the copies here and in dma.py, the kernel calls of core.py). Everything here
blocks by yielding `(signal, text)`: the scheduler (machine.py) parks the task on the signal
until the ring changes. This module neither runs the shim DMA nor the cores.
"""
from __future__ import annotations

from collections import deque
from functools import partial

import numpy as np

from iron.compiler.plan import Port, TileKind
from iron.errors import PlanError


class Board:
    """What every task of one Emulator shares: `ready` (tasks to resume, in order), `windows`
    (the current launch's window of each DMA op on its host buffer, dma.py) and `trace` (the data
    actions of the launch being recorded, in order, each a call without arguments; None when
    not recording)."""

    __slots__ = ("ready", "windows", "trace")

    def __init__(self):
        self.ready = deque()
        self.windows: list = []
        self.trace: list | None = None

    def act(self, act, *args):
        """Run a data action, `act(*args)`, and record it."""
        act(*args)
        if self.trace is not None:
            self.trace.append(partial(act, *args))


class Signal:
    """Tasks parked until something they wait for changes; `fire` makes them ready again."""

    __slots__ = ("waiters", "ready")

    def __init__(self, board: Board):
        self.waiters = []
        self.ready = board.ready

    def fire(self):
        if self.waiters:
            self.ready.extend(self.waiters)
            self.waiters.clear()


class Obj:
    """One object: `data` (uint8) and its uint32 `words`; `parts`, when a split hands it out, its
    parts as Objs viewing its bytes, each knowing its `whole`."""

    __slots__ = ("data", "words", "parts", "whole", "views")

    def __init__(self, data: np.ndarray, whole: Obj | None = None):
        self.data, self.words = data, data.view(np.uint32)
        self.parts: list[Obj] | None = None
        self.whole = whole
        self.views: dict = {}

    def shaped(self, start: int, shape: tuple) -> np.ndarray:
        """Words [start, start + size) as an array of `shape` (a view, kept for reuse)."""
        key = (start, shape)
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = self.words[start: start + int(np.prod(shape, dtype=np.int64))].reshape(shape)
        return view

    def split(self, spans: list[tuple[int, int]]) -> list[Obj]:
        """Its parts at (byte offset, size) `spans`, made once."""
        if self.parts is None:
            self.parts = [Obj(self.data[start: start + size], self) for start, size in spans]
        return self.parts


def owned(nbytes: int) -> Obj:
    return Obj(np.zeros(nbytes, np.uint8))


class Ring:
    """One FIFO end's objects (`depth` of them, or `slots` for the ring of a tile-to-tile FIFO)
    and its producer / consumer locks; each end acquires at most `depth`.

    `acquire_*(count, wait)` return None once the objects are held, else `wait` (what the caller
    blocks on); every change fires the ring's signal."""

    __slots__ = ("depth", "size", "objects", "free", "full", "produce_at", "consume_at",
                 "producer_holds", "consumer_holds", "signal", "waiters", "wait")

    def __init__(self, depth: int, nbytes: int, board: Board, slots: int | None = None):
        self.depth = depth
        self.size = slots or depth
        self.objects = [owned(nbytes) for _ in range(self.size)]
        self.free, self.full = self.size, 0
        self.produce_at = self.consume_at = 0
        self.producer_holds = self.consumer_holds = 0
        self.signal = Signal(board)
        self.waiters = self.signal.waiters
        self.wait = (self.signal, None)

    def acquire_produce(self, count: int, wait):
        """Hold `count` objects to write (MLIR semantics: only the ones not yet held are taken)."""
        need = count - self.producer_holds
        if need > self.free:
            return wait
        if need > 0:
            self.free -= need
            self.producer_holds += need
        return None

    def release_produce(self, count: int):
        self.producer_holds -= count
        self.produce_at = (self.produce_at + count) % self.size
        self.full += count
        if self.waiters:
            self.signal.fire()

    def acquire_consume(self, count: int, wait):
        need = count - self.consumer_holds
        if need > self.full:
            return wait
        if need > 0:
            self.full -= need
            self.consumer_holds += need
        return None

    def release_consume(self, count: int):
        self.consumer_holds -= count
        self.consume_at = (self.consume_at + count) % self.size
        self.free += count
        if self.waiters:
            self.signal.fire()

    def producing(self) -> Obj:
        """The first object the producer side holds."""
        return self.objects[self.produce_at]

    def consuming(self) -> Obj:
        """The first object the consumer side holds."""
        return self.objects[self.consume_at]

    def pop(self):
        """A mover consumed the next filled object: free it (acquire and release in one)."""
        self.full -= 1
        self.free += 1
        self.consume_at = (self.consume_at + 1) % self.size
        if self.waiters:
            self.signal.fire()

    def push(self):
        """A mover filled the next free object: fill it (acquire and release in one)."""
        self.free -= 1
        self.full += 1
        self.produce_at = (self.produce_at + 1) % self.size
        if self.waiters:
            self.signal.fire()

    def state(self) -> tuple:
        """Its locks, positions and which object is in which slot (machine.py compares these)."""
        return (self.free, self.full, self.produce_at, self.consume_at, self.producer_holds,
                self.consumer_holds, *map(id, self.objects))


class FifoEnds:
    """The rings of one FIFO: `producer` (None on a shim) and one per consumer tile (None for a
    shim consumer that is the only consumer: its DMA reads the producer ring)."""

    def __init__(self, fifo, board: Board):
        self.fifo = fifo
        if fifo.nbytes <= 0 or fifo.nbytes % 4 or fifo.depth < 1:
            raise PlanError(
                f"FIFO @{fifo.name} has depth {fifo.depth} and objects of {fifo.nbytes} bytes: "
                "give it a depth of at least 1 and objects of a positive multiple of 4 bytes."
            )
        shims = [t for t in fifo.consumers if t.kind is TileKind.SHIM]
        if fifo.shared_memory:
            self._check_shared(fifo)
            ring = Ring(fifo.depth, fifo.nbytes, board)
            self.producer, self.consumers = ring, {fifo.consumers[0]: ring}
            return
        if fifo.producer.kind is TileKind.SHIM and shims:
            raise PlanError(
                f"FIFO @{fifo.name} goes from {fifo.producer.name} to a shim tile: "
                "a FIFO needs a compute or mem tile at one end."
            )
        if fifo.producer.kind is not TileKind.SHIM and len(fifo.consumers) == 1 and not shims:
            ring = Ring(fifo.depth, fifo.nbytes, board, slots=2 * fifo.depth)
            self.producer, self.consumers = ring, {fifo.consumers[0]: ring}
            return
        self.producer = None if fifo.producer.kind is TileKind.SHIM else Ring(fifo.depth, fifo.nbytes, board)
        alone = len(fifo.consumers) == 1 and shims
        self.consumers = {
            tile: None if alone else Ring(fifo.depth, fifo.nbytes, board) for tile in fifo.consumers
        }

    @staticmethod
    def _check_shared(fifo):
        if len(fifo.consumers) != 1 or TileKind.SHIM in (fifo.producer.kind, fifo.consumers[0].kind):
            ends = ", ".join(t.name for t in (fifo.producer, *fifo.consumers))
            raise PlanError(
                f"FIFO @{fifo.name} is marked shared_memory but connects {ends}: shared memory "
                "joins exactly two neighbouring compute or mem tiles; give it a DMA instead."
            )

    def ring(self, tile, port: Port) -> Ring:
        """The ring a core on `tile` uses for `port`."""
        if port is Port.PRODUCE:
            ring = self.producer if tile == self.fifo.producer else None
        else:
            ring = self.consumers.get(tile)
        if ring is None:
            role = "produce into" if port is Port.PRODUCE else "consume from"
            raise PlanError(
                f"{tile.name} cannot {role} FIFO @{self.fifo.name}, which goes from "
                f"{self.fifo.producer.name} to {', '.join(t.name for t in self.fifo.consumers)}: "
                "acquire a FIFO only at an end on the core's own tile."
            )
        return ring

    def rings(self) -> list[Ring]:
        """Every ring of the FIFO, once."""
        return ([] if self.producer is None else [self.producer]) + self.sinks()

    def sinks(self) -> list[Ring]:
        """The consumer rings a mover or an MM2S DMA fills (not the producer's own ring)."""
        return [r for r in self.consumers.values() if r is not None and r is not self.producer]


def move_task(sources: list[Ring], sinks: list[Ring], move):
    """Forever: once every source has a filled object and every sink a free one, `move` the
    data, free the sources' objects and fill the sinks'. Blocks (yields) otherwise."""
    while True:
        for ring in sources:
            while not ring.full:
                yield ring.wait
        for ring in sinks:
            while not ring.free:
                yield ring.wait
        move(sources, sinks)
        for ring in sources:
            ring.pop()
        for ring in sinks:
            ring.push()


def copy(source: np.ndarray, sinks: tuple):
    """A data action: `source` bytes into each of `sinks` (arrays of its size)."""
    for sink in sinks:
        sink[...] = source


def swap(sources: list[Ring], sinks: list[Ring]):
    """Forward one whole object by exchanging the two slots' objects (no copy)."""
    source, sink = sources[0], sinks[0]
    i, j = source.consume_at, sink.produce_at
    source.objects[i], sink.objects[j] = sink.objects[j], source.objects[i]


def broadcast(board: Board):
    """Every sink gets a copy of the source object."""
    def move(sources, sinks):
        source = sources[0]
        board.act(copy, source.objects[source.consume_at].data, tuple(s.objects[s.produce_at].data for s in sinks))
    return move


def split(board: Board, spans: list[tuple[int, int]], sinks: list[Ring], whole_nbytes: int, exclusive: bool):
    """Sink i gets bytes [start, start + size) of every source object, (start, size) = spans[i]:
    as views without copying (module docstring) when `exclusive` (no other link touches the
    FIFOs) and the spans and sink sizes allow, else as copies."""
    ordered = sorted(spans)
    overlap = any(start + size > after for (start, size), (after, _) in zip(ordered, ordered[1:]))
    if not exclusive or overlap or len({sink.size for sink in sinks}) != 1:
        def move(sources, sinks):
            data = sources[0].consuming().data
            for (start, size), sink in zip(spans, sinks):
                board.act(copy, data[start: start + size], (sink.objects[sink.produce_at].data,))
        return move
    for j in range(sinks[0].size):
        for sink, part in zip(sinks, owned(whole_nbytes).split(spans)):
            sink.objects[j] = part

    def hand_out(sources, sinks):
        source = sources[0]
        i, j = source.consume_at, sinks[0].produce_at
        whole, source.objects[i] = source.objects[i], sinks[0].objects[j].whole
        for sink, part in zip(sinks, whole.split(spans)):
            sink.objects[j] = part
    return hand_out


def join(board: Board, offsets: tuple[int, ...]):
    """Source i fills bytes [offsets[i], ...) of every sink object."""
    def move(sources, sinks):
        out = sinks[0].producing().data
        for start, source in zip(offsets, sources):
            data = source.consuming().data
            board.act(copy, data, (out[start: start + data.size],))
    return move


def fifo_movers(ends: FifoEnds, board: Board) -> list:
    """The tile DMA task of a FIFO whose producer ring is broadcast to consumer rings."""
    sinks = ends.sinks()
    if ends.producer is None or not sinks:
        return []
    return [move_task([ends.producer], sinks, broadcast(board))]


def link_task(link, fifos: dict, ends: dict, board: Board, exclusive: bool):
    """The mem-tile task of one Link: forward, split or join (plan.py's Link). `exclusive`: no
    other link touches its FIFOs."""
    name = f"link on {link.tile.name} ({', '.join(link.sources)} -> {', '.join(link.destinations)})"
    if link.tile.kind is not TileKind.MEM:
        raise PlanError(f"The {name} is not on a mem tile: place links on a mem tile (row 1).")
    for fifo_name in (*link.sources, *link.destinations):
        if fifo_name not in fifos:
            raise PlanError(f"The {name} names FIFO @{fifo_name}, which the plan does not define: add it or fix the link.")
    sources = [ends[n].ring(link.tile, Port.CONSUME) for n in link.sources]
    sinks = [ends[n].ring(link.tile, Port.PRODUCE) for n in link.destinations]
    sizes_in = [fifos[n].nbytes for n in link.sources]
    sizes_out = [fifos[n].nbytes for n in link.destinations]
    if len(sources) == 1 and len(sinks) == 1:
        if sizes_in != sizes_out:
            raise PlanError(f"The {name} forwards {sizes_in[0]}-byte objects into {sizes_out[0]}-byte objects: give both FIFOs one object size.")
        return move_task(sources, sinks, swap)
    if len(sources) == 1:
        offsets = _offsets(name, link.destination_offsets, sizes_out, sizes_in[0])
        return move_task(sources, sinks, split(board, list(zip(offsets, sizes_out)), sinks, sizes_in[0], exclusive))
    if len(sinks) == 1:
        return move_task(sources, sinks, join(board, _offsets(name, link.source_offsets, sizes_in, sizes_out[0])))
    raise PlanError(f"The {name} has several sources and several destinations: a link splits or joins, not both.")


def _offsets(name: str, offsets: tuple[int, ...], parts: list[int], whole: int) -> tuple[int, ...]:
    if len(offsets) != len(parts) or any(o % 4 or o < 0 or o + n > whole for o, n in zip(offsets, parts)):
        raise PlanError(
            f"The {name} places parts of {parts} bytes at byte offsets {list(offsets)} of "
            f"{whole}-byte objects: give one 4-byte aligned offset per part, each part inside the object."
        )
    return offsets
