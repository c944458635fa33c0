"""Batched replay: a launch's consecutive kernel calls (a replayed trace's Invoked and Forwarded
acts with no DMA action between them) run in waves, and the calls of one wave that call the same
kernel on operands of the same shapes run as ONE numpy call on their operands stacked along a
leading axis, when the kernel declares that its compute works on one (`Kernel.batches`).

Why it is exact: a call reads only its pointers and writes only its output pointer (byte ranges
of tile buffers; a Forwarded input reads host words, which no kernel writes), so two calls
conflict when one writes bytes the other reads or writes. A call's wave is one more than the
latest wave of an earlier call it conflicts with (`waves`): running the waves in order runs every
pair of conflicting calls in their recorded order, and every buffer ends as it would. A batched
kernel computes each member as its own call would (numpy elementwise ops, and the same BLAS
routine on each member's matrices), and its results are written to each member's output.
Operands lying a fixed stride apart in one allocation (tile buffers of the same role on every
core: tile.allocate) are stacked as one strided view, others are copied into a stacked array.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from iron.runtime.emulator.replay import (
    Copy,
    Drain,
    Fill,
    Forwarded,
    Invoked,
    in_order,
    in_place,
    where,
)


@dataclass(frozen=True, eq=False)
class Batch:
    """Independent kernel acts (Invoked or Forwarded) of one signature: `bind(windows)` runs each
    step of theirs as one call on their stacked operands."""

    members: tuple

    @property
    def ops(self) -> set[int]:
        return {op for act in self.members if type(act) is Forwarded for op in act.ops}

    def bind(self, windows: list):
        """Its steps on this launch's windows: on every member at once, or, when that copies
        operands which the members reading alike parts of their DMA ops (`_moved`: cores at other
        places in their programs) would each see as one view, on those parts one after another."""
        before: list = []
        pointers = [_pointers(act, windows, before) for act in self.members]
        steps, copied = self._steps(pointers)
        parts: dict = {}
        for act, p in zip(self.members, pointers):
            parts.setdefault(_moved(act), []).append(p)
        if copied and len(parts) > 1:
            split = [self._steps(part) for part in parts.values()]
            if sum(n for _, n in split) < copied:
                steps = [step for part, _ in split for step in part]
        return in_order([*before, *steps])

    def _steps(self, pointers: list) -> tuple[list, int]:
        """The steps on these members' arrays, and how many member operands they copy."""
        steps, copied = [], 0
        for k, step in enumerate(_invoked(self.members[0]).steps):
            arrays = [[p[k][j] for p in pointers] for j in (*range(step.call.operands), -1)]
            rows = _rows(arrays)
            views = [strided(a, rows) for a in arrays]
            copied += sum(len(a) for a, view in zip(arrays, views) if view is None)
            operands = [a if view is None else view for a, view in zip(arrays[:-1], views)]
            steps.append(partial(_run, step.call.batched(step.attrs), operands, rows, views[-1], arrays))
        return steps, copied


def _invoked(act) -> Invoked:
    return act.invoked if type(act) is Forwarded else act


def _pointers(act, windows: list, before: list) -> list[list]:
    """Per step, the arrays the act's call reads and writes in this launch: a Forwarded input is
    its host words in place, or a copy of them made first (into `before`)."""
    invoked = _invoked(act)
    pointers = [list(step.pointers) for step in invoked.steps]
    if type(act) is Forwarded:
        for (k, j), fill in act.reads.items():
            pointer = pointers[k][j]
            view = in_place(windows[fill.op].piece(fill.moved, fill.count), pointer, invoked.steps[k].call.strided_inputs)
            if view is None:
                view = np.empty(pointer.shape, pointer.dtype)
                before.append(fill.bind(windows, view.reshape(-1).view(np.uint32)))
            pointers[k][j] = view
    return pointers


def _run(compute, operands: list, rows: int, out: np.ndarray | None, arrays: list):
    """One step of a Batch: its operands (views, or `arrays` stacked now) on two leading axes."""
    result = compute(*[a if type(a) is np.ndarray else _stack(a, rows) for a in operands])
    if out is not None:
        out[...] = result
    else:
        outs = arrays[-1]
        for into, member in zip(outs, result.reshape(len(outs), *result.shape[2:])):
            into[...] = member


def _stack(arrays: list, rows: int) -> np.ndarray:
    stacked = np.empty((len(arrays) // rows, rows, *arrays[0].shape), arrays[0].dtype)
    flat = stacked.reshape(len(arrays), *arrays[0].shape)
    for k, array in enumerate(arrays):
        flat[k] = array
    return stacked


def _rows(operands: list[list]) -> int:
    """How many members make a row of the grid the Batch lays its members out in: the divisor of
    their count under which the most operands are one strided view each."""
    count = len(operands[0])
    divisors = [n for n in range(count, 0, -1) if count % n == 0]
    return max(divisors, key=lambda n: sum(strided(arrays, n) is not None for arrays in operands))


def strided(arrays: list, rows: int) -> np.ndarray | None:
    """`arrays` (one shape and dtype) as one view of shape (len // rows, rows, *shape), when they
    have one layout and lie on a grid: a fixed number of bytes between members of a row, another
    between rows; else None. Every element of the view is an element of one of the arrays, which
    the Batch's steps keep alive."""
    first = arrays[0]
    if any(a.strides != first.strides for a in arrays):
        return None
    addresses = np.array([_address(a) for a in arrays], np.int64).reshape(-1, rows) - _address(first)
    across = int(addresses[0, 1]) if rows > 1 else 0
    down = int(addresses[1, 0]) if len(addresses) > 1 else 0
    grid = np.arange(len(addresses))[:, None] * down + np.arange(rows)[None, :] * across
    if not np.array_equal(addresses, grid):
        return None
    return as_strided(first, (*addresses.shape, *first.shape), (down, across, *first.strides))


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def batched(trace: list, host_words: list) -> list:
    """The trace in waves, the kernel acts of one wave and signature a Batch (module docstring).
    `host_words`: per runtime-sequence op, the host words its windows may touch (shim.py)."""
    waves: list[dict] = []   # per wave, signature -> its acts
    for act, wave in zip(trace, waves_of(trace, host_words)):
        if wave == len(waves):
            waves.append({})
        signature = signature_of(act) if type(act) in (Invoked, Forwarded) else None
        waves[wave].setdefault(signature if signature is not None else act, []).append(act)
    return [Batch(tuple(sorted(acts, key=_output))) if len(acts) > 1 else acts[0]
            for wave in waves for acts in wave.values()]


def _moved(act) -> tuple:
    """Where in their DMA ops' patterns a Forwarded act's inputs lie: acts alike in this read
    blocks a fixed stride apart (one view), where cores at other places in their programs may not."""
    return tuple(sorted((k, j, fill.moved) for (k, j), fill in act.reads.items())) if type(act) is Forwarded else ()


def _output(act) -> int:
    """Where the act's last call writes: a Batch's members in this order write one strided view
    when their outputs are evenly spaced (tile.allocate)."""
    return _address(_invoked(act).steps[-1].pointers[-1])


def waves_of(trace: list, host_words: list) -> list[int]:
    """Each act's wave: one more than that of the latest earlier act it conflicts with, or of the
    core's call before it (so wave k holds the k-th call of each core running the same program:
    calls at the same place in it, whose operands lie alike)."""
    memory: dict = {}   # tile buffer or host buffer name -> its Painted bytes
    last: dict = {}     # core -> the wave of its latest call
    waves = []
    for act in trace:
        touched = accesses(act, host_words)
        core = _invoked(act).core if type(act) in (Invoked, Forwarded) else None
        wave = max((memory[place].earliest(start, end, writes) for place, start, end, writes in touched
                    if place in memory), default=0)
        if core is not None:
            wave = max(wave, last.get(core, -1) + 1)
            last[core] = wave
        for place, start, end, writes in touched:
            memory.setdefault(place, Painted()).record(start, end, wave, writes)
        waves.append(wave)
    return waves


class Painted:
    """The bytes of a tile buffer or host buffer as disjoint runs [points[i], points[i+1]), each
    with (the wave that last wrote it, the latest wave that read it since), or None when nothing
    touched it yet."""

    def __init__(self):
        self.points: list[int] = []
        self.states: list[tuple | None] = []

    def earliest(self, start: int, end: int, writes: bool) -> int:
        """The first wave an access of [start, end) may run in: after the last write of any of
        those bytes and, for a write, after every read of them since."""
        points, states = self.points, self.states
        wave = 0
        for i in range(max(bisect_right(points, start) - 1, 0), bisect_left(points, end)):
            if states[i] is not None:
                wrote, read = states[i]
                wave = max(wave, wrote + 1, read + 1 if writes else 0)
        return wave

    def record(self, start: int, end: int, wave: int, writes: bool):
        first, last = self._split(start), self._split(end)
        if writes:   # one run now
            del self.points[first + 1: last], self.states[first + 1: last]
            self.states[first] = (wave, -1)
            return
        for i in range(first, last):
            wrote, read = self.states[i] or (-1, -1)
            self.states[i] = (wrote, max(read, wave))

    def _split(self, at: int) -> int:
        """The index of the run starting at `at`, splitting the run holding it."""
        i = bisect_left(self.points, at)
        if i == len(self.points) or self.points[i] != at:
            self.points.insert(i, at)
            self.states.insert(i, self.states[i - 1] if i > 0 else None)
        return i


def accesses(act, host_words: list) -> list[tuple]:
    """(tile buffer or host buffer name, first byte, end byte, writes) of what an act reads and
    writes. A DMA act moves words between a tile buffer and its op's host words; a kernel act
    touches its pointers' bytes (a Forwarded input also as written: its copy goes there when the
    host words are no view) and reads its ops' host words, or every byte of its buffers for a
    step that is not a kernel call on fixed pointers."""
    kind = type(act)
    if kind is Copy:
        return [(act.source, 4 * act.at, 4 * (act.at + act.count), False),
                (act.into, 4 * act.start, 4 * (act.start + act.count), True)]
    if kind is Fill:
        return [(*host_words[act.op], False), (act.into, 4 * act.start, 4 * (act.start + act.count), True)]
    if kind is Drain:
        return [(act.source, 4 * act.at, 4 * (act.at + act.count), False), (*host_words[act.op], True)]
    invoked = _invoked(act)
    forwarded = act.reads if kind is Forwarded else {}
    found = [(*host_words[fill.op], False) for fill in forwarded.values()]
    for k, step in enumerate(invoked.steps):
        if step.call is None:
            return [*found, *((b, 0, b.data.nbytes, True) for b in invoked.buffers)]
        for j, pointer in enumerate(step.pointers):
            place = where(pointer, invoked.buffers)
            if place is None:
                return [*found, *((b, 0, b.data.nbytes, True) for b in invoked.buffers)]
            buffer, start, _ = place
            writes = j == len(step.pointers) - 1 or (k, j) in forwarded
            found.append((buffer, start, start + pointer.nbytes, writes))
    return found


def signature_of(act):
    """What acts must share to run as one Batch, or None when the act cannot be batched."""
    key = []
    for step in _invoked(act).steps:
        if step.call is None or step.call.batched(step.attrs) is None:
            return None
        key.append((step.call.step.kernel, step.call.step.dtype, step.call.step.out, step.attrs,
                    *((p.shape, p.dtype) for p in step.pointers)))
    return tuple(key)
