"""Batched replay: the acts of a replayed trace run in waves, and the kernel calls of one wave
that call the same kernel on operands of the same shapes run as ONE numpy call on their operands
stacked along leading axes, when the kernel declares that its compute works on them
(`Kernel.batches`); a large one is cut into one Batch per lane (lanes.py runs them at once).

Why it is exact: an act reads and writes byte ranges of tile buffers and host words it names (a
kernel call its pointers; a Forwarded input reads host words, which no kernel writes), so two
acts conflict when one writes bytes the other reads or writes. An act's wave is one more than
the latest wave of an earlier act it conflicts with (`waves_of`): running the waves in order
runs every pair of conflicting acts in their recorded order, and every buffer ends as it would.
A batched kernel computes each member as its own call would (numpy elementwise ops, and the same
BLAS routine on each member's matrices), and its results are written to each member's output
(by the kernel itself when it `computes_into` one view of them), but to a scratch buffer (`scratch`), which no one reads before writing it again: the steps after
take the result itself. Operands lying a fixed stride apart (tile buffers of one role on every
core: tile.allocate; consecutive blocks of host words) are one strided view, others are copied
into a stacked array.
"""
from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cache, partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from iron.runtime.emulator.acts import Copy, Drain, Fill, Invoked, in_order
from iron.runtime.emulator.replay import Forwarded, host_operand, tile_buffers, where

CALL_COST = 8   # a numpy call of a batch costs about as much as copying 8 members' operands
BATCH_BYTES = 1 << 21   # the most bytes a Batch's members' operands take, so its arrays stay in cache
LANES = os.cpu_count() or 1   # the threads a launch's large Batches are cut over (lanes.py)
LANE_BYTES = 1 << 19   # the fewest bytes of operands that pay for handing a part to a thread


@dataclass(frozen=True, eq=False)
class Batch:
    """Independent kernel acts (Invoked or Forwarded) of one signature: `bind(windows)` runs each
    step of theirs as one call on their stacked operands. `unread`: per step, whether its output
    is a scratch buffer, which only the later steps read: they take the step's result itself,
    and the buffer is not written. `lane`: the thread that runs it (lanes.py; 0: the launch's)."""

    members: tuple
    unread: tuple
    lane: int = 0

    @property
    def ops(self) -> set[int]:
        return {op for act in self.members if type(act) is Forwarded for op in act.ops}

    def bind(self, windows: list):
        """Its steps on this launch's windows: on every member at once, or, when that copies
        operands which the members reading alike parts of their DMA ops (`_moved`: cores at other
        places in their programs) would see as one view each, on those parts one after another
        when that costs less (CALL_COST)."""
        before: list = []
        pointers = [_pointers(act, windows, before) for act in self.members]
        run, copied = self._steps(pointers)
        runs = [run]
        parts: dict = {}
        for act, p in zip(self.members, pointers):
            parts.setdefault(_moved(act), []).append(p)
        if copied and len(parts) > 1:
            split = [self._steps(part) for part in parts.values()]
            if CALL_COST * len(split) + sum(n for _, n in split) < CALL_COST + copied:
                runs = [run for run, _ in split]
        return in_order([*before, *runs])

    def _steps(self, pointers: list) -> tuple:
        """`run()` of the steps on these members' arrays, and how many member operands it copies."""
        steps = _invoked(self.members[0]).steps
        arrays = [[[p[k][j] for p in pointers] for j in (*range(step.call.operands), -1)]
                  for k, step in enumerate(steps)]
        dims = _grid([a for step in arrays for a in step])
        planned, copied = [], 0
        for k, (step, (*inputs, outs)) in enumerate(zip(steps, arrays)):
            operands = []
            for a in inputs:
                earlier = next((i for i in reversed(range(k)) if _overlap(a, arrays[i][-1])), None)
                earlier = earlier if earlier is not None and _same(a, arrays[earlier][-1]) else None
                view = strided(a, dims) if earlier is None else None
                copied += len(a) if earlier is None and view is None else 0
                operands.append(earlier if earlier is not None else a if view is None else view)
            out = None if self.unread[k] else strided(outs, dims)
            copied += len(outs) if out is None and not self.unread[k] else 0
            planned.append(Stacked(step.call.batched(step.attrs), tuple(operands), dims, out, outs, self.unread[k],
                                   out is not None and step.call.computes_into))
        return partial(_run, planned), copied


@dataclass(frozen=True)
class Stacked:
    """One step of a Batch as one call: `compute` on `operands` (each a view, the index of an
    earlier step whose result it takes, or the member arrays to stack now) laid out on the grid
    `dims`; its result written into `out` (one view of the members' outputs), else into each of
    `outs`, unless `unread`. `into`: compute writes its result into `out` itself."""

    compute: object
    operands: tuple
    dims: tuple[int, ...]
    out: np.ndarray | None
    outs: list
    unread: bool
    into: bool


def _invoked(act) -> Invoked:
    return act.invoked if type(act) is Forwarded else act


def _pointers(act, windows: list, before: list) -> list[list]:
    """Per step, the arrays the act's call reads and writes in this launch: a Forwarded input is
    its host words in place, or a copy of them made first (into `before`)."""
    invoked = _invoked(act)
    pointers = [list(step.pointers) for step in invoked.steps]
    if type(act) is Forwarded:
        for (k, j), fill in act.reads.items():
            pointers[k][j] = host_operand(fill, windows, pointers[k][j], invoked.steps[k].call.strided_inputs, before)
    return pointers


def _run(planned: list[Stacked]):
    """A Batch's steps: each one call on its operands (views, the result of an earlier step as
    its output holds it, or member arrays stacked now) on the grid's leading axes, its result written
    to each member's output unless no one reads that."""
    results: list = []
    for step in planned:
        dims, out, outs = step.dims, step.out, step.outs
        operands = [results[a] if type(a) is int else a if type(a) is np.ndarray else _stack(a, dims)
                    for a in step.operands]
        if step.into:
            results.append(step.compute(*operands, out=out))
            continue
        result = step.compute(*operands)
        shape = (*dims, *outs[0].shape)
        if type(result) is not np.ndarray or result.shape != shape or result.dtype != outs[0].dtype:
            held = np.empty(shape, outs[0].dtype)   # what the output buffers hold: cast as they cast
            held[...] = result
            result = held
        results.append(result)
        if step.unread:
            continue
        if out is not None:
            out[...] = result
        else:
            for into, member in zip(outs, result.reshape(len(outs), *outs[0].shape)):
                into[...] = member


def _overlap(arrays: list, others: list) -> bool:
    """Whether any array's bytes meet the other's (their spans, first byte to last)."""
    return any(_address(a) < _address(b) + b.nbytes and _address(b) < _address(a) + a.nbytes
               for a, b in zip(arrays, others))


def _same(arrays: list, others: list) -> bool:
    """Whether each array views just what the other does."""
    return all(_address(a) == _address(b) and a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
               for a, b in zip(arrays, others))


def _stack(arrays: list, dims: tuple[int, ...]) -> np.ndarray:
    stacked = np.empty((*dims, *arrays[0].shape), arrays[0].dtype)
    flat = stacked.reshape(len(arrays), *arrays[0].shape)
    for k, array in enumerate(arrays):
        flat[k] = array
    return stacked


def _grid(operands: list[list]) -> tuple[int, ...]:
    """The grid the Batch lays its members out on (their count as up to three factors, the last
    varying fastest): the one under which the most operands are one strided view each."""
    return max(_factors(len(operands[0])), key=lambda dims: sum(strided(a, dims) is not None for a in operands))


@cache
def _factors(count: int, most: int = 3) -> list[tuple[int, ...]]:
    """`count` as a product of at most `most` factors above 1 (or (1,)), in every order."""
    found = [(count,)]
    if most > 1:
        found += [(n, *rest) for n in range(2, count) if count % n == 0 for rest in _factors(count // n, most - 1)
                  if rest != (1,)]
    return found


def strided(arrays: list, dims: tuple[int, ...]) -> np.ndarray | None:
    """`arrays` (one shape and dtype) as one view of shape (*dims, *shape), when they have one
    layout and lie on that grid: along each of its axes, a fixed number of bytes from one to the
    next; else None. Every element of the view is an element of one of the arrays, which the
    Batch's steps keep alive."""
    first = arrays[0]
    if any(a.strides != first.strides for a in arrays):
        return None
    addresses = (np.array([_address(a) for a in arrays], np.int64) - _address(first)).reshape(dims)
    steps = [int(addresses[tuple(int(d == axis) for d in range(len(dims)))]) if n > 1 else 0
             for axis, n in enumerate(dims)]
    grid = sum(np.arange(n).reshape([n if d == axis else 1 for d in range(len(dims))]) * step
               for axis, (n, step) in enumerate(zip(dims, steps)))
    if not np.array_equal(addresses, np.broadcast_to(grid, dims)):
        return None
    return as_strided(first, (*dims, *first.shape), (*steps, *first.strides))


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def batched(cycle: list[list], host_words: list) -> list[list]:
    """Each trace of the cycle in waves, the kernel acts of one wave and signature in Batches of
    at most BATCH_BYTES of operands (module docstring). `host_words`: per runtime-sequence op,
    the runs of host words its windows may touch (shim.py)."""
    unread = scratch(cycle)
    return [_in_waves(trace, host_words, unread) for trace in cycle]


def _in_waves(trace: list, host_words: list, unread: set) -> list:
    waves: list[dict] = []   # per wave, signature -> its acts
    for act, wave in zip(trace, waves_of(trace, host_words, unread)):
        if wave == len(waves):
            waves.append({})
        signature = signature_of(act) if type(act) in (Invoked, Forwarded) else None
        waves[wave].setdefault(signature if signature is not None else act, []).append(act)
    out = []
    for acts in (acts for wave in waves for acts in wave.values()):
        if len(acts) == 1:
            out += acts
            continue
        acts = sorted(acts, key=_output)
        nbytes = sum(p.nbytes for step in _invoked(acts[0]).steps for p in step.pointers)
        size = max(2, BATCH_BYTES // nbytes)
        for part in (acts[k: k + size] for k in range(0, len(acts), size)):
            out += _cut(part, nbytes, unread_outputs(part, unread)) if len(part) > 1 else part
    return out


def _cut(acts: list, nbytes: int, unread: tuple) -> list:
    """The acts as one Batch, or cut into up to LANES Batches of at least LANE_BYTES of operands,
    one per lane: their members in order, so each one's outputs still lie a fixed stride apart;
    lane 0's last, so the others are handed to their threads before it runs (lanes.py)."""
    lanes = max(1, min(LANES, len(acts) // 2, len(acts) * nbytes // LANE_BYTES))
    cuts = [len(acts) * lane // lanes for lane in range(lanes + 1)]
    cut = [Batch(tuple(acts[start:end]), unread, lane) for lane, (start, end) in enumerate(zip(cuts, cuts[1:]))]
    return cut[1:] + cut[:1]


def _moved(act) -> tuple:
    """Where in their DMA ops' patterns a Forwarded act's inputs lie: acts alike in this read
    blocks a fixed stride apart (one view), where cores at other places in their programs may not."""
    return tuple(sorted((k, j, fill.moved) for (k, j), fill in act.reads.items())) if type(act) is Forwarded else ()


def _output(act) -> int:
    """Where the act's last call writes: a Batch's members in this order write one strided view
    when their outputs are evenly spaced (tile.allocate)."""
    return _address(_invoked(act).steps[-1].pointers[-1])


def unread_outputs(acts: list, unread: set) -> tuple:
    """Per step of the acts' calls, whether its output is a scratch buffer in each of them that
    the later steps read only as just that output (so they may take the result itself)."""
    return tuple(all(_unread_output(_invoked(act), k, unread) for act in acts)
                 for k in range(len(_invoked(acts[0]).steps)))


def _unread_output(invoked: Invoked, k: int, unread: set) -> bool:
    out = invoked.steps[k].pointers[-1]
    later = [p for step in invoked.steps[k + 1:] for p in step.pointers[:step.call.operands]]
    return where(out, invoked.buffers)[0] in unread and all(_same([p], [out]) for p in later if _overlap([p], [out]))


def scratch(cycle: list[list]) -> set:
    """The tile buffers only kernel calls touch, each read only where an earlier step of the same
    call wrote it: what they hold between calls is never read."""
    written, read = set(), set()
    for act in (act for trace in cycle for act in trace):
        if type(act) in (Invoked, Forwarded):
            for place, _, _, writes in _tile_accesses(act):
                (written if writes else read).add(place)
        else:
            read.update(tile_buffers(act))
    return written - read


def waves_of(trace: list, host_words: list, unread: set = frozenset()) -> list[int]:
    """Each act's wave: one more than that of the latest earlier act it conflicts with (scratch
    buffers aside: a call writes what it reads of them)."""
    memory: dict = {}   # tile buffer or host buffer name -> its Painted bytes
    waves = []
    for act in trace:
        touched = [access for access in accesses(act, host_words) if access[0] not in unread]
        wave = max((memory[place].earliest(start, end, writes) for place, start, end, writes in touched
                    if place in memory), default=0)
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
    writes: a DMA act moves words between a tile buffer and its op's host words; a kernel act
    reads its ops' host words (`_tile_accesses` for the rest)."""
    kind = type(act)
    if kind is Copy:
        return [(act.source, 4 * act.at, 4 * (act.at + act.count), False),
                (act.into, 4 * act.start, 4 * (act.start + act.count), True)]
    if kind is Fill:
        return [*((*run, False) for run in host_words[act.op]), (act.into, 4 * act.start, 4 * (act.start + act.count), True)]
    if kind is Drain:
        return [(act.source, 4 * act.at, 4 * (act.at + act.count), False), *((*run, True) for run in host_words[act.op])]
    forwarded = act.reads.values() if kind is Forwarded else ()
    return [*((*run, False) for fill in forwarded for run in host_words[fill.op]), *_tile_accesses(act)]


def _tile_accesses(act) -> list[tuple]:
    """What a kernel act reads and writes of tile buffers: its pointers' bytes (but inputs it
    reads from host words instead), or every byte of its buffers for a step that is not a kernel
    call on fixed pointers. Bytes an earlier step of the act wrote are not read from the buffer."""
    invoked = _invoked(act)
    forwarded = act.reads if type(act) is Forwarded else {}
    found: list[tuple] = []
    for k, step in enumerate(invoked.steps):
        places = [where(pointer, invoked.buffers) for pointer in step.pointers]
        if step.call is None or None in places:
            return [(b, 0, b.data.nbytes, writes) for b in invoked.buffers for writes in (False, True)]
        *inputs, (out, start, nbytes) = places
        for j, (buffer, first, n) in enumerate(inputs):
            wrote = any(w and b is buffer and s <= first and first + n <= e for b, s, e, w in found)
            if (k, j) not in forwarded and not wrote:
                found.append((buffer, first, first + n, False))
        found.append((out, start, start + nbytes, True))
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
