"""Tile DMAs as AIE2 has them (docs/platform.md sections 2 and 4): buffer descriptors chained into
a ring, each naming a buffer span, the lock it acquires before the move and the lock it releases
after; the channels that run them forever (MM2S memory to stream, S2MM stream to memory); and
the streams (aie.flow) from an MM2S channel to the S2MM channels it feeds, which hold no words,
so a sender waits for every receiver as backpressure makes it on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iron.plan.plan import Direction
from iron.runtime.emulator.acts import Copy
from iron.runtime.emulator.lock import Lock
from iron.runtime.emulator.scheduler import Board, Signal
from iron.runtime.emulator.tile import Buffer


class Span:
    """The words of a tile buffer a BD moves, from word `offset` on."""

    __slots__ = ("buffer", "offset")

    def __init__(self, buffer: Buffer, offset: int = 0):
        self.buffer, self.offset = buffer, offset

    def view(self, start: int, shape: tuple) -> np.ndarray:
        return self.buffer.shaped(self.offset + start, shape)

    def take(self, start: int, count: int, source, at: int, board: Board):
        """Write words [at, at + count) of `source` (a Span, or a host transfer) here at `start`."""
        if type(source) is Span:
            np.copyto(self.view(start, (count,)), source.view(at, (count,)))
            if board.trace is not None:
                board.trace.append(Copy(self.buffer, self.offset + start, source.buffer, source.offset + at, count))
        else:
            source.read_into(at, count, self, start, board)


@dataclass(eq=False)
class BufferDescriptor:
    """aie.dma_bd with its use_lock ops: acquire `acquire` by 1, move `length` words of `span`,
    release `release` by 1, go on with `next` (the object FIFO lowering's BDs all count 1)."""

    span: Span
    length: int
    acquire: Lock
    release: Lock
    next: BufferDescriptor | None = None


def ring(bds: list[BufferDescriptor]) -> BufferDescriptor:
    """Chain BDs into a ring (each one's next_bd the following one, the last's the first)."""
    for bd, after in zip(bds, bds[1:] + bds[:1]):
        bd.next = after
    return bds[0]


class Stream:
    """A flow from one MM2S channel to `receivers` S2MM channels (a broadcast when several).
    The sender offers `total` words of `source`; receiver k has taken `taken[k]` of them;
    `ddr[k]`: whether the words receiver k takes are read from or written to DDR (a shim
    sender's, counted once for a broadcast, or a shim receiver's)."""

    __slots__ = ("source", "total", "taken", "sent", "arrived", "ddr")

    def __init__(self, receivers: int, board: Board, ddr: tuple[bool, ...] | None = None):
        self.source, self.total, self.taken = None, 0, [0] * receivers
        self.ddr = ddr or (False,) * receivers
        self.sent = Signal(board)     # the sender waits here for its receivers
        self.arrived = Signal(board)  # receivers wait here for words

    def send(self, source, total: int):
        """Offer `total` words of `source`; done once every receiver has taken them all."""
        taken = self.taken
        self.source, self.total = source, total
        taken[:] = [0] * len(taken)
        self.arrived.fire()
        while min(taken) < total:
            yield self.sent.wait
        self.source = None

    def receive(self, channel, k: int, sink, length: int, board: Board):
        """Receiver k writes `length` words into `sink` (progress in `channel.got`)."""
        taken = self.taken
        while channel.got < length:
            while self.source is None or taken[k] == self.total:
                yield self.arrived.wait
            at = taken[k]
            count = min(length - channel.got, self.total - at)
            sink.take(channel.got, count, self.source, at, board)
            if board.clock is not None:
                board.clock.move(board, count, self.ddr[k])
            taken[k] = at + count
            channel.got += count
            if taken[k] == self.total:
                self.sent.fire()
        channel.got = 0

    def state(self) -> tuple:
        return id(self.source), self.total, *self.taken   # an array: which one, not its values


class Channel:
    """A tile DMA channel (aie.dma_start): runs its BD chain from `bd`, forever, into or out of
    `stream` (as receiver `k` when S2MM); `got` counts the words of the current BD received."""

    __slots__ = ("name", "direction", "bd", "stream", "k", "got", "board")

    def __init__(self, name: str, direction: Direction, bd: BufferDescriptor, stream: Stream, k: int, board: Board):
        self.name, self.direction, self.bd = name, direction, bd
        self.stream, self.k, self.got, self.board = stream, k, 0, board

    def task(self):
        stream, sending = self.stream, self.direction is Direction.MM2S
        while True:
            bd = self.bd
            while not bd.acquire.acquire(1):
                yield bd.acquire.wait
            if sending:
                yield from stream.send(bd.span, bd.length)
            else:
                yield from stream.receive(self, self.k, bd.span, bd.length, self.board)
            bd.release.release(1)
            self.bd = bd.next

    def state(self) -> tuple:
        return self.bd, self.got
