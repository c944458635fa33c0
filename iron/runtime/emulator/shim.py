"""The shim tiles' DMA and the runtime sequence (docs/platform.md sections 5 and 6): each FIFO end
on a shim tile is a shim DMA channel; a launch writes each dma_memcpy_nd op into a BD of its
shim tile (sizes and strides over a host buffer), pushes it onto the channel's task queue, and
at each dma_wait blocks until the channel's tokened tasks are done (forever when none was pushed
since the last wait, as on the device). Host words move as views of the host buffers (windows
kept across launches).
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from iron.errors import PlanError
from iron.plan.invariants import word_ranges
from iron.plan.plan import Direction, Dma, TileKind
from iron.runtime.emulator.acts import WINDOWS_KEPT, Drain, Fill
from iron.runtime.emulator.dma import Span, Stream
from iron.runtime.emulator.scheduler import Board, Signal

EVERY = 1 << 62  # words: beyond either end of any host buffer


class DmaOp:
    """One Dma of the runtime sequence (a dma_memcpy_nd): the word indices (relative to its
    offset) it touches, in order, or pattern None when they are simply 0 .. nwords-1; and its
    windows on host buffers."""

    __slots__ = ("index", "dma", "text", "nwords", "pattern", "low", "high", "token", "shape", "strides",
                 "pieces", "windows")

    def __init__(self, index: int, dma: Dma):
        self.index, self.dma = index, dma
        self.text = f"op {index} ({dma.direction} @{dma.fifo}, bd {dma.bd_id} on {dma.shim.name})"
        self.nwords = dma.nwords
        self.token = dma.direction is Direction.S2MM or dma.issue_token
        axes = [np.arange(size, dtype=np.int64) * stride for size, stride in zip(dma.sizes, dma.strides)]
        pattern = (axes[0][:, None, None, None] + axes[1][None, :, None, None]
                   + axes[2][None, None, :, None] + axes[3][None, None, None, :]).reshape(-1)
        self.low, self.high = int(pattern.min()), int(pattern.max())
        self.pattern = None if np.array_equal(pattern, np.arange(self.nwords)) else pattern
        self.shape, self.strides = tuple(dma.sizes), tuple(4 * s for s in dma.strides)
        self.pieces: dict[tuple[int, int], tuple | None] = {}
        self.windows: dict[tuple[int, int], Window] = {}

    def window(self, host: np.ndarray, base: int) -> Window:
        """The op's window on `host` from word `base` (kept for the next launches; a window holds
        its host array, so the key's id stays that array's)."""
        key = (id(host), base)
        window = self.windows.get(key)
        if window is None:
            if len(self.windows) >= WINDOWS_KEPT:
                del self.windows[next(iter(self.windows))]
            window = self.windows[key] = Window(self, host, base)
        return window

    def piece(self, start: int, count: int) -> tuple | None:
        """The index into the op's 4-D strided window that holds pattern words [start, start +
        count), when they are whole rows of its inner dimensions under one outer index; else None."""
        key = (start, count)
        if key not in self.pieces:
            self.pieces[key] = self._piece(start, count)
        return self.pieces[key]

    def _piece(self, start: int, count: int) -> tuple | None:
        shape = self.shape
        for k in (1, 2, 3):
            row = int(np.prod(shape[k:]))
            first, last = start // row, (start + count) // row
            if start % row or count % row or first // shape[k - 1] != (last - 1) // shape[k - 1]:
                continue
            outer = tuple(int(i) for i in np.unravel_index(first // shape[k - 1], shape[: k - 1])) if k > 1 else ()
            return (*outer, slice(first % shape[k - 1], first % shape[k - 1] + last - first))
        return None


class Window:
    """The words one DmaOp touches in one host buffer from one base: pieces of them as views
    (a slice, or a piece of the op's 4-D strided window), kept for reuse."""

    __slots__ = ("op", "host", "base", "strided", "pieces")

    def __init__(self, op: DmaOp, host: np.ndarray, base: int):
        self.op, self.host, self.base = op, host, base
        self.strided = None
        self.pieces: dict[tuple[int, int], np.ndarray | None] = {}

    def piece(self, start: int, count: int) -> np.ndarray | None:
        """Pattern words [start, start + count) as a view, or None when no view holds them."""
        key = (start, count)
        if key not in self.pieces:
            self.pieces[key] = self._piece(start, count)
        return self.pieces[key]

    def _piece(self, start: int, count: int) -> np.ndarray | None:
        op = self.op
        if op.pattern is None:
            return self.host[self.base + start: self.base + start + count]
        index = op.piece(start, count)
        if index is None:
            return None
        if self.strided is None:
            self.strided = np.lib.stride_tricks.as_strided(self.host[self.base:], op.shape, op.strides)
        return self.strided[index]

    def indices(self, start: int, count: int) -> np.ndarray:
        """The host word indices of pattern words [start, start + count), for a gather or scatter."""
        return self.base + self.op.pattern[start: start + count]

    def read(self, moved: int, count: int) -> np.ndarray:
        """Pattern words [moved, moved + count) (an array of any shape holding them in order):
        a piece, or, when no piece holds them, gathered word by word through the pattern."""
        piece = self.piece(moved, count)
        return self.host[self.indices(moved, count)] if piece is None else piece

    def write(self, moved: int, buffer, start: int, count: int):
        """Words [start, start + count) of tile `buffer` as pattern words [moved, moved + count)."""
        piece = self.piece(moved, count)
        if piece is None:
            self.host[self.indices(moved, count)] = buffer.shaped(start, (count,))
        else:
            piece[...] = buffer.shaped(start, piece.shape)


class Transfer:
    """One pushed DMA op in one launch: its window on the run's host buffer and its `index` in the
    launch's ops; the end of a stream, as the words it reads (MM2S) or writes (S2MM)."""

    __slots__ = ("op", "window", "index")

    def __init__(self, op: DmaOp, window: Window, index: int):
        self.op, self.window, self.index = op, window, index

    def read_into(self, at: int, count: int, span: Span, start: int, board: Board):
        """Pattern words [at, at + count) into words [start, ...) of `span`."""
        words = self.window.read(at, count)
        span.view(start, words.shape)[...] = words
        board.record(Fill(self.index, at, count, span.buffer, span.offset + start))

    def take(self, start: int, count: int, source: Span, at: int, board: Board):
        """Words [at, at + count) of `source` as pattern words [start, ...)."""
        self.window.write(start, source.buffer, source.offset + at, count)
        board.record(Drain(self.index, start, count, source.buffer, source.offset + at))


class ShimChannel:
    """A shim DMA channel of one FIFO: the tasks the runtime sequence pushed (BD ids, read from
    the shim tile's BD registers as each starts), run in order into or out of the FIFO's stream
    (as receiver `k` when S2MM); `tokens` counts queued tasks that issue a completion token and
    `issued` those pushed since the last dma_wait; `got` the words the current S2MM task took;
    when timed, `ended`: when its last task completed."""

    __slots__ = ("name", "fifo", "direction", "bds", "stream", "k", "queue", "tokens", "issued", "got",
                 "signal", "board", "ended")

    def __init__(self, name: str, fifo: str, direction: Direction, bds: list, stream: Stream, k: int, board: Board):
        self.name, self.fifo, self.direction, self.bds = name, fifo, direction, bds
        self.stream, self.k, self.board = stream, k, board
        self.queue: deque = deque()
        self.tokens = self.issued = self.got = 0
        self.ended = 0.0
        self.signal = Signal(board)

    def push(self, bd_id: int, token: bool):
        self.queue.append((bd_id, token))
        self.tokens += token
        self.issued += token
        self.signal.fire()

    def task(self):
        queue, stream = self.queue, self.stream
        while True:
            while not queue:
                yield self.signal.wait
            bd_id, token = queue[0]
            transfer = self.bds[bd_id]
            if self.direction is Direction.MM2S:
                yield from stream.send(transfer, transfer.op.nwords)
            else:
                yield from stream.receive(self, self.k, transfer, transfer.op.nwords, self.board)
            queue.popleft()
            self.tokens -= token
            self.ended = self.board.now
            self.signal.fire()

    def moved(self) -> int:
        """Words the current task has moved."""
        if self.direction is Direction.S2MM:
            return self.got
        return min(self.stream.taken) if self.stream.source is not None else 0


class RuntimeSequence:
    """The Plan's runtime sequence over the shim channels: `channels` by (FIFO, shim tile)."""

    def __init__(self, plan, fifos, tiles: dict, board: Board):
        self.plan, self.board = plan, board
        registers = {at: [None] * plan.device.shim_bd_ids for at in tiles if at.kind is TileKind.SHIM}
        self.registers = registers
        self.channels: dict[tuple, ShimChannel] = {}
        for (fifo, at), (direction, k) in fifos.shim_ends.items():
            index = tiles[at].channel(direction, f"@{fifo}")
            self.channels[(fifo, at)] = ShimChannel(
                f"{direction} {index} of {at.name} (@{fifo})", fifo, direction, registers[at], fifos.streams[fifo], k, board)
        self.steps = [self._step(index, op) for index, op in enumerate(plan.sequence)]

    def _step(self, index: int, op):
        """(op, DmaOp or None, its channel or the channels a Wait waits on, the Wait's text)."""
        if isinstance(op, Dma):
            return op, DmaOp(index, op), self.channels[(op.fifo, op.shim)], None
        channels = [c for (fifo, _), c in self.channels.items() if fifo == op.fifo]
        return op, None, channels, f"op {index} (dma_wait @{op.fifo})"

    def host_words(self) -> list[tuple | None]:
        """Per op, the (host buffer, first word, end word) runs its windows may touch in any
        launch (None for a Wait). A patched op's are those of the values its patch word can take
        (`word_ranges`: its indices' bounds, which the host checks and the Emit clamps to), plus
        the run in the states' sink where a flagged run sends a state write; all of the buffer
        when they are not known."""
        words = self.plan.words
        ranges = word_ranges([replace(w, sink=None) for w in words])

        def runs(op, dma) -> tuple:
            if op.patch_word is None:
                shifts = [(0, 0)]
            elif ranges[op.patch_word] is None:
                return ((op.buffer, -EVERY, EVERY),)
            else:
                sink = words[op.patch_word].sink
                shifts = [ranges[op.patch_word], *([] if sink is None else [(sink, sink)])]
            return tuple((op.buffer, op.offset + lo + dma.low, op.offset + hi + dma.high + 1) for lo, hi in shifts)

        return [None if dma is None else runs(op, dma) for op, dma, _, _ in self.steps]

    def tasks(self) -> list[tuple[str, object]]:
        return [(channel.name, channel.task()) for channel in self.channels.values()]

    # ---- one launch ----------------------------------------------------------------------------
    def windows(self, buffers: dict, words: np.ndarray | None) -> list:
        """This launch's window of each op (None for a Wait), on the run's host buffers from its
        patched offsets; a patched offset that takes the op out of its host buffer is refused."""
        out = []
        for op, dma, _, _ in self.steps:
            if dma is None:
                out.append(None)
                continue
            base, host = op.offset, buffers[op.buffer]
            if op.patch_word is not None:
                base += int(words.view(np.int32)[op.patch_word])
                if base + dma.low < 0 or base + dma.high >= host.size:
                    raise PlanError(
                        f"Plan '{self.plan.name}': runtime sequence {dma.text} touches words {base + dma.low}.."
                        f"{base + dma.high} of host buffer '{op.buffer}', which holds {host.size} words: keep "
                        "the access pattern inside the buffer.")
            out.append(dma.window(host, base))
        return out

    def task(self, windows: list):
        """The sequence of one launch: each op's BD written and pushed, each dma_wait blocking."""
        registers = self.registers
        for (op, dma, channel, text), window in zip(self.steps, windows):
            if dma is not None:
                registers[op.shim][op.bd_id] = Transfer(dma, window, dma.index)
                channel.push(op.bd_id, dma.token)
                continue
            for waited in channel:
                while waited.tokens or not waited.issued:
                    yield waited.signal, text
                waited.issued = 0
                if self.board.clock is not None:   # its tasks may have completed later than this
                    self.board.now = max(self.board.now, waited.ended)   # task resumed: it waits for them

    def busy(self) -> bool:
        """Whether a shim channel still holds a task (its actions name an earlier launch's ops)."""
        return any(channel.queue for channel in self.channels.values())

    def blocked(self) -> list[str]:
        """Every pushed DMA op not yet completed, with how far it got."""
        lines = []
        for channel in self.channels.values():
            for n, (bd_id, _) in enumerate(channel.queue):
                op = channel.bds[bd_id].op
                lines.append(f"{op.text}: moved {channel.moved() if n == 0 else 0} of {op.nwords} words")
        return lines


