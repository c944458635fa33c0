"""Object FIFOs as the emulator runs them: rings of objects guarded by the two locks of each end,
the tile DMAs that move objects between the rings of different tiles, and mem-tile links.

A FIFO end on a compute or mem tile is a `Ring` of `depth` objects. Its producer count (free
objects) and consumer count (filled objects) are the locks of add-one.lowered.mlir: acquiring
Produce takes free objects, releasing them fills them; acquiring Consume takes filled objects,
releasing them frees them. A shared-memory FIFO is one ring both tiles use. A FIFO whose producer
and consumers sit on different tiles gets a mover (the tile DMAs) that passes each filled object
to every consumer ring (one consumer: by exchanging the slots' arrays, no copy; several: a copy
each, in lockstep) and frees it. A shim end has no ring: the shim DMA (dma.py) writes into the
consumer rings or reads the producer ring directly (a shim among several consumers gets a ring,
standing for the stream between the broadcast and its DMA). A Link moves objects between the
mem-tile rings of its FIFOs: forward (exchange), split or join (copies at byte offsets).

Everything here blocks by yielding `(signal, text)`: the scheduler (machine.py) parks the task on
the signal until the ring changes. This module neither runs the shim DMA nor the cores.
"""
from __future__ import annotations

import numpy as np

from iron.errors import PlanError


class Signal:
    """Tasks parked until something they wait for changes; `fire` makes them ready again."""

    __slots__ = ("waiters", "ready")

    def __init__(self, ready):
        self.waiters = []
        self.ready = ready

    def fire(self):
        if self.waiters:
            self.ready.extend(self.waiters)
            self.waiters.clear()


class Ring:
    """One FIFO end's `depth` objects (uint8 arrays, with their uint32 word views for the DMA)
    and its producer / consumer locks."""

    __slots__ = ("depth", "objects", "words", "free", "full", "produce_at", "consume_at",
                 "producer_holds", "consumer_holds", "signal", "wait")

    def __init__(self, depth: int, nbytes: int, ready):
        self.depth = depth
        self.objects = [np.zeros(nbytes, np.uint8) for _ in range(depth)]
        self.words = [o.view(np.uint32) for o in self.objects]
        self.free, self.full = depth, 0
        self.produce_at = self.consume_at = 0
        self.producer_holds = self.consumer_holds = 0
        self.signal = Signal(ready)
        self.wait = (self.signal, None)

    def acquire_produce(self, count: int) -> bool:
        """Hold `count` objects to write (MLIR semantics: only the ones not yet held are taken)."""
        need = count - self.producer_holds
        if need > self.free:
            return False
        if need > 0:
            self.free -= need
            self.producer_holds += need
        return True

    def release_produce(self, count: int):
        self.producer_holds -= count
        self.produce_at = (self.produce_at + count) % self.depth
        self.full += count
        if self.signal.waiters:
            self.signal.fire()

    def acquire_consume(self, count: int) -> bool:
        need = count - self.consumer_holds
        if need > self.full:
            return False
        if need > 0:
            self.full -= need
            self.consumer_holds += need
        return True

    def release_consume(self, count: int):
        self.consumer_holds -= count
        self.consume_at = (self.consume_at + count) % self.depth
        self.free += count
        if self.signal.waiters:
            self.signal.fire()

    def producing(self) -> np.ndarray:
        """The bytes of the first object the producer side holds."""
        return self.objects[self.produce_at]

    def consuming(self) -> np.ndarray:
        """The bytes of the first object the consumer side holds."""
        return self.objects[self.consume_at]

    def producing_words(self) -> np.ndarray:
        return self.words[self.produce_at]

    def consuming_words(self) -> np.ndarray:
        return self.words[self.consume_at]


class FifoEnds:
    """The rings of one FIFO: `producer` (None on a shim) and one per consumer tile (None for a
    shim consumer that is the only consumer: its DMA reads the producer ring)."""

    def __init__(self, fifo, ready):
        self.fifo = fifo
        if fifo.nbytes <= 0 or fifo.nbytes % 4 or fifo.depth < 1:
            raise PlanError(
                f"FIFO @{fifo.name} has depth {fifo.depth} and objects of {fifo.nbytes} bytes: "
                "give it a depth of at least 1 and objects of a positive multiple of 4 bytes."
            )
        shims = [t for t in fifo.consumers if t.kind == "shim"]
        if fifo.shared_memory:
            self._check_shared(fifo)
            ring = Ring(fifo.depth, fifo.nbytes, ready)
            self.producer, self.consumers = ring, {fifo.consumers[0]: ring}
            return
        if fifo.producer.kind == "shim" and shims:
            raise PlanError(
                f"FIFO @{fifo.name} goes from {fifo.producer.name} to a shim tile: "
                "a FIFO needs a compute or mem tile at one end."
            )
        self.producer = None if fifo.producer.kind == "shim" else Ring(fifo.depth, fifo.nbytes, ready)
        alone = len(fifo.consumers) == 1 and shims
        self.consumers = {
            tile: None if alone else Ring(fifo.depth, fifo.nbytes, ready) for tile in fifo.consumers
        }

    @staticmethod
    def _check_shared(fifo):
        if len(fifo.consumers) != 1 or "shim" in (fifo.producer.kind, fifo.consumers[0].kind):
            ends = ", ".join(t.name for t in (fifo.producer, *fifo.consumers))
            raise PlanError(
                f"FIFO @{fifo.name} is marked shared_memory but connects {ends}: shared memory "
                "joins exactly two neighbouring compute or mem tiles; give it a DMA instead."
            )

    def ring(self, tile, port: str) -> Ring:
        """The ring a core on `tile` uses for `port` ("Produce" | "Consume")."""
        if port == "Produce":
            ring = self.producer if tile == self.fifo.producer else None
        else:
            ring = self.consumers.get(tile)
        if ring is None:
            role = "produce into" if port == "Produce" else "consume from"
            raise PlanError(
                f"{tile.name} cannot {role} FIFO @{self.fifo.name}, which goes from "
                f"{self.fifo.producer.name} to {', '.join(t.name for t in self.fifo.consumers)}: "
                "acquire a FIFO only at an end on the core's own tile."
            )
        return ring

    def sinks(self) -> list[Ring]:
        """The consumer rings a mover or an MM2S DMA fills (not the shared ring itself)."""
        return [r for r in self.consumers.values() if r is not None and r is not self.producer]


def move_task(sources: list[Ring], sinks: list[Ring], move):
    """Forever: once every source has a filled object and every sink a free one, `move` the
    data, free the sources' objects and fill the sinks'. Blocks (yields) otherwise."""
    while True:
        for ring in sources:
            while ring.full == 0:
                yield ring.wait
        for ring in sinks:
            while ring.free == 0:
                yield ring.wait
        for ring in sources:
            ring.acquire_consume(1)
        for ring in sinks:
            ring.acquire_produce(1)
        move(sources, sinks)
        for ring in sources:
            ring.release_consume(1)
        for ring in sinks:
            ring.release_produce(1)


def swap(sources: list[Ring], sinks: list[Ring]):
    """Forward one whole object by exchanging the two slots' arrays (no copy)."""
    source, sink = sources[0], sinks[0]
    i, j = source.consume_at, sink.produce_at
    source.objects[i], sink.objects[j] = sink.objects[j], source.objects[i]
    source.words[i], sink.words[j] = sink.words[j], source.words[i]


def broadcast(sources: list[Ring], sinks: list[Ring]):
    data = sources[0].consuming()
    for sink in sinks:
        sink.producing()[...] = data


def split(offsets: tuple[int, ...]):
    """Sink i gets bytes [offsets[i], ...) of every source object."""
    def move(sources, sinks):
        data = sources[0].consuming()
        for start, sink in zip(offsets, sinks):
            out = sink.producing()
            out[...] = data[start: start + out.size]
    return move


def join(offsets: tuple[int, ...]):
    """Source i fills bytes [offsets[i], ...) of every sink object."""
    def move(sources, sinks):
        out = sinks[0].producing()
        for start, source in zip(offsets, sources):
            data = source.consuming()
            out[start: start + data.size] = data
    return move


def fifo_movers(ends: FifoEnds) -> list:
    """The tile DMA task of a FIFO whose producer ring feeds consumer rings on other tiles."""
    sinks = ends.sinks()
    if ends.producer is None or not sinks:
        return []
    return [move_task([ends.producer], sinks, swap if len(sinks) == 1 else broadcast)]


def link_task(link, fifos: dict, ends: dict):
    """The mem-tile task of one Link: forward, split or join (plan.py's Link)."""
    name = f"link on {link.tile.name} ({', '.join(link.sources)} -> {', '.join(link.destinations)})"
    if link.tile.kind != "mem":
        raise PlanError(f"The {name} is not on a mem tile: place links on a mem tile (row 1).")
    for fifo_name in (*link.sources, *link.destinations):
        if fifo_name not in fifos:
            raise PlanError(f"The {name} names FIFO @{fifo_name}, which the plan does not define: add it or fix the link.")
    sources = [ends[n].ring(link.tile, "Consume") for n in link.sources]
    sinks = [ends[n].ring(link.tile, "Produce") for n in link.destinations]
    sizes_in = [fifos[n].nbytes for n in link.sources]
    sizes_out = [fifos[n].nbytes for n in link.destinations]
    if len(sources) == 1 and len(sinks) == 1:
        if sizes_in != sizes_out:
            raise PlanError(f"The {name} forwards {sizes_in[0]}-byte objects into {sizes_out[0]}-byte objects: give both FIFOs one object size.")
        return move_task(sources, sinks, swap)
    if len(sources) == 1:
        return move_task(sources, sinks, split(_offsets(name, link.destination_offsets, sizes_out, sizes_in[0])))
    if len(sinks) == 1:
        return move_task(sources, sinks, join(_offsets(name, link.source_offsets, sizes_in, sizes_out[0])))
    raise PlanError(f"The {name} has several sources and several destinations: a link splits or joins, not both.")


def _offsets(name: str, offsets: tuple[int, ...], parts: list[int], whole: int) -> tuple[int, ...]:
    if len(offsets) != len(parts) or any(o % 4 or o < 0 or o + n > whole for o, n in zip(offsets, parts)):
        raise PlanError(
            f"The {name} places parts of {parts} bytes at byte offsets {list(offsets)} of "
            f"{whole}-byte objects: give one 4-byte aligned offset per part, each part inside the object."
        )
    return offsets
