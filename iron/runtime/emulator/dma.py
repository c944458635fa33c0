"""The shim DMA and the runtime sequence as the emulator runs them.

At load, every `Dma` of the Plan's sequence is checked against the device (repeat count, wrap
sizes, BD ids, the access pattern inside its host buffer, a BD id not reused before a `Wait`
covers the op holding it, a `Wait` that some op's completion token can satisfy) and compiled
into the word indices it touches. Each FIFO with a shim end gets a `Channel`: the transfers
issued on it, moved one after another by its task (MM2S appends host words into the consumer
rings, an object completing at `nbytes`; S2MM drains filled objects into host memory), in pieces
that are views of the host buffer (a `Window` of the op on one host buffer from one offset, kept
across launches, so each piece's view is made once); each piece moved is a data action on the
Board's trace, naming its transfer by index in the launch. A launch resolves the run's host
buffers and patched offsets (`Sequence.transfers`) and runs the sequence task, which issues the
DMAs in order and blocks at each `Wait` until every S2MM op, and every MM2S op with
`issue_token`, issued so far on that FIFO has completed.

It does not run cores or mem-tile links (core.py, fifo.py), nor schedule tasks (machine.py).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from iron.compiler.plan import Direction, Dma, HostRole, TileKind, Wait
from iron.errors import PlanError
from iron.runtime.emulator.fifo import Board, Signal


class DmaOp:
    """One checked Dma of the sequence: the word indices (relative to its offset) it touches, in
    order, or pattern None when they are simply 0 .. nwords-1; and its windows on host buffers."""

    __slots__ = ("dma", "text", "nwords", "pattern", "low", "high", "token", "shape", "strides",
                 "pieces", "windows")

    def __init__(self, index: int, dma: Dma):
        self.dma = dma
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


WINDOWS_KEPT = 16  # windows per op: the host buffers and patched offsets of recent launches


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

    def write(self, moved: int, obj, start: int, count: int):
        """Words [start, start + count) of object `obj` as pattern words [moved, moved + count)."""
        piece = self.piece(moved, count)
        if piece is None:
            self.host[self.indices(moved, count)] = obj.words[start: start + count]
        else:
            piece[...] = obj.shaped(start, piece.shape)


class Transfer:
    """One issued DMA op in one launch: its window on the run's host buffer, its `index` in the
    launch's ops, and the words moved so far."""

    __slots__ = ("op", "window", "index", "moved")

    def __init__(self, op: DmaOp, window: Window, index: int):
        self.op, self.window, self.index, self.moved = op, window, index, 0


def fill(window: Window, moved: int, count: int, objects: tuple, start: int):
    """Words [moved, moved + count) of `window` into words [start, ...) of each of `objects`."""
    words = window.read(moved, count)
    for obj in objects:
        obj.shaped(start, words.shape)[...] = words


def filler(board: Board, index: int, moved: int, count: int, objects: tuple, start: int):
    """The data action of a `fill` by transfer `index` of the launch it runs in; the views it
    copies between are made once per window of that transfer (host buffer and offset)."""
    made: dict = {}

    def act():
        window = board.windows[index]
        views = made.get(window)
        if views is None:
            if len(made) == WINDOWS_KEPT:
                made.clear()
            piece = window.piece(moved, count)
            shape = (count,) if piece is None else piece.shape
            views = made[window] = piece, tuple(obj.shaped(start, shape) for obj in objects)
        piece, destinations = views
        words = window.host[window.indices(moved, count)] if piece is None else piece
        for destination in destinations:
            destination[...] = words
    return act


def drainer(board: Board, index: int, moved: int, count: int, obj, start: int):
    """The data action of an S2MM piece: words [start, start + count) of `obj` into pattern
    words [moved, ...) of transfer `index` of the launch it runs in."""
    return lambda: board.windows[index].write(moved, obj, start, count)


class Channel:
    """One FIFO's shim DMA channel: its issued transfers, moved in issue order, and how many
    words of the current object it has moved (`partial`)."""

    __slots__ = ("queue", "tokens", "partial", "signal", "idle")

    def __init__(self, board: Board):
        self.queue = deque()
        self.tokens = 0
        self.partial = 0
        self.signal = Signal(board)
        self.idle = (self.signal, None)

    def issue(self, transfer: Transfer):
        self.queue.append(transfer)
        self.tokens += transfer.op.token
        self.signal.fire()

    def finish(self):
        self.tokens -= self.queue.popleft().op.token
        self.signal.fire()


def mm2s_task(channel: Channel, sinks: list, object_words: int, board: Board):
    """Append the words of each transfer to the consumer rings, one object at a time."""
    queue = channel.queue
    while True:
        while not queue:
            yield channel.idle
        transfer = queue[0]
        total = transfer.op.nwords
        while transfer.moved < total:
            filled = channel.partial
            if filled == 0:
                for ring in sinks:
                    while not ring.free:
                        yield ring.wait
                for ring in sinks:
                    ring.acquire_produce(1, None)
            count = min(object_words - filled, total - transfer.moved)
            args = (transfer.moved, count, tuple(r.objects[r.produce_at] for r in sinks), filled)
            fill(transfer.window, *args)
            if board.trace is not None:
                board.trace.append(filler(board, transfer.index, *args))
            transfer.moved += count
            channel.partial = filled = filled + count
            if filled == object_words:
                channel.partial = 0
                for ring in sinks:
                    ring.release_produce(1)
        channel.finish()


def s2mm_task(channel: Channel, source, object_words: int, board: Board):
    """Drain filled objects of the producer ring into each transfer's host words."""
    queue = channel.queue
    while True:
        while not queue:
            yield channel.idle
        transfer = queue[0]
        total = transfer.op.nwords
        while transfer.moved < total:
            drained = channel.partial
            if drained == 0:
                while (wait := source.acquire_consume(1, source.wait)) is not None:
                    yield wait
            count = min(object_words - drained, total - transfer.moved)
            obj = source.objects[source.consume_at]
            transfer.window.write(transfer.moved, obj, drained, count)
            if board.trace is not None:
                board.trace.append(drainer(board, transfer.index, transfer.moved, count, obj, drained))
            transfer.moved += count
            channel.partial = drained = drained + count
            if drained == object_words:
                channel.partial = 0
                source.release_consume(1)
        channel.finish()


class Sequence:
    """The runtime sequence of a Plan, checked and compiled at load, and the shim channels."""

    def __init__(self, plan, ends: dict, board: Board):
        self.plan = plan
        self.sizes = {b.name: b.nwords for b in plan.host_buffers}
        self.words = next((b.name for b in plan.host_buffers if b.role is HostRole.WORDS), None)
        self.channels: dict[str, Channel] = {}
        self.tasks = []
        for fifo in plan.fifos:
            self._add_channel(fifo, ends[fifo.name], board)
        self.steps = [self._compile(index, op) for index, op in enumerate(plan.sequence)]
        self._check_bd_reuse()

    def _add_channel(self, fifo, ends, board: Board):
        shims = [t for t in (fifo.producer, *fifo.consumers) if t.kind is TileKind.SHIM]
        if not shims:
            return
        if len(shims) > 1:
            raise PlanError(
                f"FIFO @{fifo.name} has {len(shims)} shim ends ({', '.join(t.name for t in shims)}): "
                "give each shim transfer its own FIFO."
            )
        channel = self.channels[fifo.name] = Channel(board)
        words = fifo.nbytes // 4
        if fifo.producer.kind is TileKind.SHIM:
            self.tasks.append((f"mm2s @{fifo.name}", mm2s_task(channel, ends.sinks(), words, board)))
        else:
            source = ends.consumers[shims[0]] or ends.producer
            self.tasks.append((f"s2mm @{fifo.name}", s2mm_task(channel, source, words, board)))

    # ---- load-time checks ----------------------------------------------------------------------
    def _fail(self, text: str, why: str) -> PlanError:
        return PlanError(f"Plan '{self.plan.name}': runtime sequence {text} {why}")

    def _compile(self, index: int, op):
        if isinstance(op, Wait):
            if op.fifo not in self.channels:
                raise self._fail(f"op {index} (dma_wait @{op.fifo})", "waits on a FIFO with no shim end: wait only on FIFOs the sequence moves.")
            return op, None, (self.channels[op.fifo].signal, f"op {index} (dma_wait @{op.fifo})")
        if not isinstance(op, Dma):
            raise self._fail(f"op {index}", f"is a {type(op).__name__}: a sequence holds only Dma and Wait ops.")
        dma = DmaOp(index, op)
        self._check_ends(dma)
        self._check_limits(dma)
        if op.patch_word is None:
            self._check_access(dma, op.offset, self.sizes[op.buffer])
        return op, dma, None

    def _check_ends(self, dma: DmaOp):
        op = dma.dma
        fifo = next((f for f in self.plan.fifos if f.name == op.fifo), None)
        if fifo is None or op.buffer not in self.sizes or not isinstance(op.direction, Direction):
            raise self._fail(dma.text, f"moves {op.direction!r} between FIFO @{op.fifo} and host buffer '{op.buffer}': name a FIFO and a host buffer of the plan, and a Direction.")
        end = fifo.producer if op.direction is Direction.MM2S else next((t for t in fifo.consumers if t.kind is TileKind.SHIM), None)
        if end != op.shim:
            role = "produce" if op.direction is Direction.MM2S else "consume"
            raise self._fail(dma.text, f"runs on {op.shim.name}, but @{op.fifo} goes from {fifo.producer.name} to {', '.join(t.name for t in fifo.consumers)}: an {op.direction} op runs on the shim tile that {role}s the FIFO.")
        if op.patch_word is not None and (self.words is None or not 0 <= op.patch_word < self.sizes[self.words]):
            count = 0 if self.words is None else self.sizes[self.words]
            raise self._fail(dma.text, f"is patched with scratchpad word {op.patch_word}, but the plan has {count} words: patch with one of its words.")

    def _check_limits(self, dma: DmaOp):
        device, op = self.plan.device, dma.dma
        repeat, wrap, bds = device.dma_repeat_max, device.shim.max_bd_wrap, device.shim_bd_ids
        if not (1 <= op.sizes[0] <= repeat and all(1 <= s <= wrap for s in op.sizes[1:])):
            raise self._fail(dma.text, f"has sizes {list(op.sizes)}, but on {device.name} the repeat count sizes[0] must be 1..{repeat} and sizes[1..3] 1..{wrap}: split the transfer into several ops.")
        if min(op.strides) < 0:
            raise self._fail(dma.text, f"has strides {list(op.strides)}: DMA strides count words forward; make them 0 or more.")
        if not 0 <= op.bd_id < bds:
            raise self._fail(dma.text, f"uses bd id {op.bd_id}, but a shim tile of {device.name} has bd ids 0..{bds - 1}: pick an id in that range.")

    def _check_access(self, dma: DmaOp, base: int, nwords: int):
        low, high = base + dma.low, base + dma.high
        if low < 0 or high >= nwords:
            raise self._fail(dma.text, f"touches words {low}..{high} of host buffer '{dma.dma.buffer}', which holds {nwords} words: keep the access pattern inside the buffer.")

    def _check_bd_reuse(self):
        held: dict[tuple, DmaOp] = {}
        awaited: set[str] = set()  # FIFOs with a tokened op issued since their last Wait
        for op, dma, wait in self.steps:
            if dma is None:
                if op.fifo not in awaited:
                    raise self._fail(wait[1], f"waits on @{op.fifo}, but no op on @{op.fifo} since its last wait issues a completion token, so the device would wait forever: wait after an s2mm op, or give the mm2s op issue_token.")
                awaited.discard(op.fifo)
                held = {key: h for key, h in held.items() if not (h.dma.fifo == op.fifo and h.token)}
                continue
            key = (op.shim, op.bd_id)
            if key in held:
                raise self._fail(dma.text, f"reuses bd {op.bd_id} on {op.shim.name} while {held[key].text} still holds it (no dma_wait has covered that op): give it another bd id, or wait on @{held[key].dma.fifo} first (an mm2s op needs issue_token to be waited).")
            held[key] = dma
            if dma.token:
                awaited.add(op.fifo)

    # ---- one launch ----------------------------------------------------------------------------
    def windows(self, buffers: dict, words: np.ndarray | None) -> list:
        """This launch's window of each op (None for a Wait), on the run's host buffers from its
        patched offsets."""
        out = []
        for op, dma, _ in self.steps:
            if dma is None:
                out.append(None)
                continue
            base, host = op.offset, buffers[op.buffer]
            if op.patch_word is not None:
                base += int(words.view(np.int32)[op.patch_word])
                self._check_access(dma, base, host.size)
            out.append(dma.window(host, base))
        return out

    def transfers(self, windows: list) -> list:
        """This launch's transfers on its windows (None for a Wait)."""
        return [None if window is None else Transfer(window.op, window, index) for index, window in enumerate(windows)]

    def task(self, transfers: list):
        """The sequence of one launch: issue each DMA on its channel, block at each Wait."""
        for (op, _, wait), transfer in zip(self.steps, transfers):
            channel = self.channels[op.fifo]
            if transfer is not None:
                channel.issue(transfer)
            else:
                while channel.tokens:
                    yield wait

    def blocked(self) -> list[str]:
        """Every issued DMA op not yet completed, with how far it got."""
        return [f"{t.op.text}: moved {t.moved} of {t.op.nwords} words"
                for channel in self.channels.values() for t in channel.queue]
