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

from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from iron.runtime.emulator.replay import Forwarded, Invoked, in_order, in_place, where


@dataclass(frozen=True, eq=False)
class Batch:
    """Independent kernel acts (Invoked or Forwarded) of one signature: `bind(windows)` runs each
    step of theirs as one call on their stacked operands."""

    members: tuple

    @property
    def ops(self) -> set[int]:
        return {op for act in self.members if type(act) is Forwarded for op in act.ops}

    def bind(self, windows: list):
        before: list = []
        pointers = [_pointers(act, windows, before) for act in self.members]
        steps = []
        for k, step in enumerate(_invoked(self.members[0]).steps):
            arrays = [[p[k][j] for p in pointers] for j in (*range(step.call.operands), -1)]
            rows = _rows(arrays)
            *operands, out = [strided(a, rows) for a in arrays]
            operands = [a if view is None else view for a, view in zip(arrays, operands)]
            steps.append(partial(_run, step.call.batched(step.attrs), operands, rows, out, arrays))
        return in_order([*before, *steps])


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


def batched(trace: list) -> list:
    """The trace with each run of consecutive kernel acts in waves, and the acts of one wave and
    signature a Batch (module docstring)."""
    out, run = [], []
    for act in [*trace, None]:
        if type(act) in (Invoked, Forwarded):
            run.append(act)
            continue
        if run:
            out += _in_waves(run)
            run = []
        if act is not None:
            out.append(act)
    return out


def _in_waves(run: list) -> list:
    waves: list[dict] = []   # per wave, signature -> its acts
    for act, wave, signature in zip(run, waves_of(run), map(signature_of, run)):
        if wave == len(waves):
            waves.append({})
        waves[wave].setdefault((signature, _moved(act)) if signature is not None else act, []).append(act)
    return [Batch(tuple(sorted(acts, key=_output))) if len(acts) > 1 else acts[0]
            for wave in waves for acts in wave.values()]


def _moved(act) -> tuple:
    """Where in their DMA ops' patterns a Forwarded act's inputs lie: acts alike in this read
    blocks a fixed stride apart (one view), where cores at other places in their programs do not."""
    return tuple(sorted((k, j, fill.moved) for (k, j), fill in act.reads.items())) if type(act) is Forwarded else ()


def _output(act) -> int:
    """Where the act's last call writes: a Batch's members in this order write one strided view
    when their outputs are evenly spaced (tile.allocate)."""
    return _address(_invoked(act).steps[-1].pointers[-1])


def waves_of(run: list) -> list[int]:
    """Each act's wave: one more than that of the latest earlier act it conflicts with, or of the
    core's call before it (so wave k holds the k-th call of each core running the same program:
    calls at the same place in it, whose operands lie alike)."""
    seen: dict = {}   # tile buffer -> [(start, end, wave, writes)]
    last: dict = {}   # core -> the wave of its latest call
    waves = []
    for act in run:
        touched, core = accesses(act), _invoked(act).core
        wave = max((w + 1 for buffer, start, end, writes in touched for s, e, w, wrote in seen.get(buffer, ())
                    if s < end and start < e and (writes or wrote)), default=0)
        wave = max(wave, last.get(core, -1) + 1)
        for buffer, start, end, writes in touched:
            seen.setdefault(buffer, []).append((start, end, wave, writes))
        waves.append(wave)
        last[core] = wave
    return waves


def accesses(act) -> list[tuple]:
    """(tile buffer, first byte, end byte, writes) of what a kernel act reads and writes: its
    pointers' bytes (a Forwarded input as written too: its copy goes there when the host words
    are no view), or every byte of its buffers for a step that is not a kernel call on fixed
    pointers."""
    invoked = _invoked(act)
    forwarded = act.reads if type(act) is Forwarded else {}
    found = []
    for k, step in enumerate(invoked.steps):
        if step.call is None:
            return [(b, 0, b.data.nbytes, True) for b in invoked.buffers]
        for j, pointer in enumerate(step.pointers):
            place = where(pointer, invoked.buffers)
            if place is None:
                return [(b, 0, b.data.nbytes, True) for b in invoked.buffers]
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
