"""The shim DMA and the runtime sequence as the emulator runs them.

At load, every `Dma` of the Plan's sequence is checked against the device (repeat count, wrap
sizes, BD ids, the access pattern inside its host buffer, a BD id not reused before a `Wait`
covers the op holding it, a `Wait` that some op's completion token can satisfy) and compiled
into the word indices it touches. Each FIFO with a shim end gets a `Channel`: the transfers
issued on it, moved one after another by its task (MM2S appends host words into the consumer
rings, an object completing at `nbytes`; S2MM drains filled objects into host memory). A launch
resolves the run's host buffers and patched offsets (`Sequence.transfers`) and runs the sequence
task, which issues the DMAs in order and blocks at each `Wait` until every S2MM op, and every
MM2S op with `issue_token`, issued so far on that FIFO has completed.

It does not run cores or mem-tile links (core.py, fifo.py), nor schedule tasks (machine.py).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from iron.compiler.plan import Dma, Wait
from iron.errors import PlanError
from iron.runtime.emulator.fifo import Signal


class DmaOp:
    """One checked Dma of the sequence: the word indices (relative to its offset) it touches, in
    order, or pattern None when they are simply 0 .. nwords-1."""

    __slots__ = ("dma", "text", "nwords", "pattern", "low", "high", "token", "shape", "strides", "pieces")

    def __init__(self, index: int, dma: Dma):
        self.dma = dma
        self.text = f"op {index} ({dma.direction} @{dma.fifo}, bd {dma.bd_id} on {dma.shim.name})"
        self.nwords = dma.nwords
        self.token = dma.direction == "s2mm" or dma.issue_token
        axes = [np.arange(size, dtype=np.int64) * stride for size, stride in zip(dma.sizes, dma.strides)]
        pattern = (axes[0][:, None, None, None] + axes[1][None, :, None, None]
                   + axes[2][None, None, :, None] + axes[3][None, None, None, :]).reshape(-1)
        self.low, self.high = int(pattern.min()), int(pattern.max())
        self.pattern = None if np.array_equal(pattern, np.arange(self.nwords)) else pattern
        self.shape, self.strides = tuple(dma.sizes), tuple(4 * s for s in dma.strides)
        self.pieces: dict[tuple[int, int], tuple | None] = {}

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


class Transfer:
    """One issued DMA op in one launch: its host buffer, patched offset and words moved so far.

    Strided words move as pieces of the op's 4-D window on the host buffer (one strided copy
    each), or, when a chunk does not fall on whole rows, word by word through the pattern."""

    __slots__ = ("op", "host", "base", "moved", "window")

    def __init__(self, op: DmaOp, host: np.ndarray, base: int):
        self.op, self.host, self.base, self.moved = op, host, base, 0
        self.window = None

    def _piece(self, count: int) -> np.ndarray | None:
        piece = self.op.piece(self.moved, count)
        if piece is None:
            return None
        if self.window is None:
            self.window = np.lib.stride_tricks.as_strided(self.host[self.base:], self.op.shape, self.op.strides)
        return self.window[piece]

    def read(self, count: int) -> np.ndarray:
        """The next `count` words (an array of any shape holding them in order)."""
        if self.op.pattern is None:
            start = self.base + self.moved
            return self.host[start: start + count]
        piece = self._piece(count)
        return piece if piece is not None else self.host[self.base + self.op.pattern[self.moved: self.moved + count]]

    def write(self, words: np.ndarray):
        if self.op.pattern is None:
            start = self.base + self.moved
            self.host[start: start + words.size] = words
            return
        piece = self._piece(words.size)
        if piece is not None:
            piece[...] = words.reshape(piece.shape)
        else:
            self.host[self.base + self.op.pattern[self.moved: self.moved + words.size]] = words


class Channel:
    """One FIFO's shim DMA channel: its issued transfers, moved in issue order."""

    __slots__ = ("queue", "tokens", "signal", "idle")

    def __init__(self, ready):
        self.queue = deque()
        self.tokens = 0
        self.signal = Signal(ready)
        self.idle = (self.signal, None)

    def issue(self, transfer: Transfer):
        self.queue.append(transfer)
        self.tokens += transfer.op.token
        self.signal.fire()

    def finish(self):
        self.tokens -= self.queue.popleft().op.token
        self.signal.fire()


def mm2s_task(channel: Channel, sinks: list, object_words: int):
    """Append the words of each transfer to the consumer rings, one object at a time."""
    filled = 0
    while True:
        while not channel.queue:
            yield channel.idle
        transfer = channel.queue[0]
        total = transfer.op.nwords
        while transfer.moved < total:
            if filled == 0:
                for ring in sinks:
                    while ring.free == 0:
                        yield ring.wait
                for ring in sinks:
                    ring.acquire_produce(1)
            count = min(object_words - filled, total - transfer.moved)
            words = transfer.read(count)
            for ring in sinks:
                ring.producing_words()[filled: filled + count].reshape(words.shape)[...] = words
            filled += count
            transfer.moved += count
            if filled == object_words:
                for ring in sinks:
                    ring.release_produce(1)
                filled = 0
        channel.finish()


def s2mm_task(channel: Channel, source, object_words: int):
    """Drain filled objects of the producer ring into each transfer's host words."""
    drained = 0
    while True:
        while not channel.queue:
            yield channel.idle
        transfer = channel.queue[0]
        total = transfer.op.nwords
        while transfer.moved < total:
            if drained == 0:
                while not source.acquire_consume(1):
                    yield source.wait
            count = min(object_words - drained, total - transfer.moved)
            transfer.write(source.consuming_words()[drained: drained + count])
            drained += count
            transfer.moved += count
            if drained == object_words:
                source.release_consume(1)
                drained = 0
        channel.finish()


class Sequence:
    """The runtime sequence of a Plan, checked and compiled at load, and the shim channels."""

    def __init__(self, plan, ends: dict, ready):
        self.plan = plan
        self.sizes = {b.name: b.nwords for b in plan.host_buffers}
        self.words = next((b.name for b in plan.host_buffers if b.role == "words"), None)
        self.channels: dict[str, Channel] = {}
        self.tasks = []
        for fifo in plan.fifos:
            self._add_channel(fifo, ends[fifo.name], ready)
        self.steps = [self._compile(index, op) for index, op in enumerate(plan.sequence)]
        self._check_bd_reuse()

    def _add_channel(self, fifo, ends, ready):
        shims = [t for t in (fifo.producer, *fifo.consumers) if t.kind == "shim"]
        if not shims:
            return
        if len(shims) > 1:
            raise PlanError(
                f"FIFO @{fifo.name} has {len(shims)} shim ends ({', '.join(t.name for t in shims)}): "
                "give each shim transfer its own FIFO."
            )
        channel = self.channels[fifo.name] = Channel(ready)
        words = fifo.nbytes // 4
        if fifo.producer.kind == "shim":
            self.tasks.append((f"mm2s @{fifo.name}", mm2s_task(channel, ends.sinks(), words)))
        else:
            source = ends.consumers[shims[0]] or ends.producer
            self.tasks.append((f"s2mm @{fifo.name}", s2mm_task(channel, source, words)))

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
        if fifo is None or op.buffer not in self.sizes or op.direction not in ("mm2s", "s2mm"):
            raise self._fail(dma.text, f"moves {op.direction!r} between FIFO @{op.fifo} and host buffer '{op.buffer}': name a FIFO and a host buffer of the plan, and direction 'mm2s' or 's2mm'.")
        end = fifo.producer if op.direction == "mm2s" else next((t for t in fifo.consumers if t.kind == "shim"), None)
        if end != op.shim:
            role = "produce" if op.direction == "mm2s" else "consume"
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
    def transfers(self, buffers: dict, words: np.ndarray | None) -> list:
        """This launch's transfers (None for a Wait), with the run's host buffers and patches."""
        out = []
        for op, dma, _ in self.steps:
            if dma is None:
                out.append(None)
                continue
            base, host = op.offset, buffers[op.buffer]
            if op.patch_word is not None:
                base += int(words.view(np.int32)[op.patch_word])
                self._check_access(dma, base, host.size)
            out.append(Transfer(dma, host, base))
        return out

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
