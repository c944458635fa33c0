"""A tile of the emulated array (docs/platform.md section 2): its data memory holding named
buffers, its locks, and its DMA channels, as many per direction as the device gives its kind.
"""
from __future__ import annotations

import numpy as np

from iron.errors import PlanError
from iron.plan.plan import Direction, TileKind
from iron.runtime.emulator.lock import Lock
from iron.runtime.emulator.scheduler import Board

ALIGN = 64  # bytes: where each buffer starts in its arena, as a vector register is wide


class Buffer:
    """One buffer in a tile's memory (aie.buffer): `data` (bytes) and its 32-bit `words` (its own
    array, or its place in an arena once `allocate` moved it there before the array starts);
    typed and shaped views of it are made once (`shaped`) and kept, as the buffer lives as long
    as the Emulator."""

    __slots__ = ("name", "nbytes", "data", "words", "views")

    def __init__(self, name: str, nbytes: int):
        self.name, self.nbytes = name, nbytes
        self.views: dict = {}
        self.place(np.zeros(nbytes, np.uint8))

    def place(self, data: np.ndarray):
        self.data = data
        self.words = data[: self.nbytes - self.nbytes % 4].view(np.uint32)

    def shaped(self, start: int, shape: tuple) -> np.ndarray:
        """Words [start, start + size) as an array of `shape` (a view, kept for reuse)."""
        key = (start, shape)
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = self.words[start: start + int(np.prod(shape, dtype=np.int64))].reshape(shape)
        return view


def allocate(tiles: list[Tile]):
    """Give every buffer its bytes: the buffers of one size on tiles of one kind in one array, tile
    after tile, each at a multiple of ALIGN. Every core of a grid holds the same buffers, so the
    buffer of one role lies a fixed stride from the next core's: a batch of their kernel calls
    (batch.py) reads and writes them as one strided view instead of copying."""
    sizes: dict[tuple, list[Buffer]] = {}
    for tile in tiles:
        for buffer in tile.buffers.values():
            sizes.setdefault((tile.at.kind, buffer.nbytes), []).append(buffer)
    for (_, nbytes), same in sizes.items():
        step = -(-nbytes // ALIGN) * ALIGN
        arena = np.zeros(step * len(same), np.uint8)
        for k, buffer in enumerate(same):
            buffer.place(arena[k * step: k * step + nbytes])


class Tile:
    """A shim, mem or compute tile: `buffers` and `locks` by name, and its DMA channels handed out
    in order (`channel`), at most the device's count per direction."""

    def __init__(self, at, device, board: Board):
        self.at, self.name, self.board = at, at.name, board
        kind = {TileKind.SHIM: device.shim, TileKind.MEM: device.mem, TileKind.COMPUTE: device.compute}[at.kind]
        self.channels = {Direction.MM2S: kind.dma_out_channels, Direction.S2MM: kind.dma_in_channels}
        self.used = dict.fromkeys(Direction, 0)
        self.buffers: dict[str, Buffer] = {}
        self.locks: dict[str, Lock] = {}

    def buffer(self, name: str, nbytes: int) -> Buffer:
        buffer = self.buffers[name] = Buffer(name, nbytes)
        return buffer

    def lock(self, name: str, value: int) -> Lock:
        lock = self.locks[name] = Lock(name, value, self.board)
        return lock

    def channel(self, direction: Direction, what: str) -> int:
        """The index of the next free `direction` channel, now used for `what`."""
        index = self.used[direction]
        if index == self.channels[direction]:
            raise PlanError(f"{self.name} has no {direction} DMA channel left for {what}: a {self.at.kind} "
                            f"tile has {self.channels[direction]}. Route the plan through check_plan.")
        self.used[direction] += 1
        return index
