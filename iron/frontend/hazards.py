"""State hazards in a trace (`check_hazards`): two calls writing one state, or one reading what a
later one overwrites, may touch a common element with nothing ordering them; the trace refuses
them (WriteHazard) before anything is compiled."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from iron.errors import WriteHazard
from iron.ir import Node, destination, overlap, region, state_of, storage


def state_accesses(call: Node) -> tuple[list[Node], list[Node]]:
    """(state tensors read, state tensors written) by one CALL node: whole states or views of them."""
    c = call.arg
    reads = [n for n in call.src[: c.n_inputs] if state_of(n)]
    writes = [n for n in [destination(call)] if n is not None and state_of(n)]
    if c.kernel.accumulates:
        reads += writes
    return reads, writes


def _touches(a: Node, b: Node) -> bool:
    """Whether two state tensors may share an element (`overlap` of the same state)."""
    return state_of(a) == state_of(b) and overlap(a, b)


def check_hazards(calls: tuple[Node, ...], where: str):
    """Refuse two writes to one state, or a read then a later overwrite, that may touch a common
    element (their regions overlap, or a per-call index may make them) with no edge ordering
    them; writes to disjoint regions need no order. A read is ordered after every earlier
    write it may touch. Of several, the first by the later call, its write, the earlier call."""
    index = {c: i for i, c in enumerate(calls)}
    before: list[int] = []   # per call, the calls ordered before it, as the bits of an int (bit i: call i)
    effects = [state_accesses(c) for c in calls]
    writers: dict[str, list[int]] = {}    # per state, the calls writing it (only they can touch a read)
    for i, call in enumerate(calls):
        reads, writes = effects[i]
        preds = {index[s] for s in map(storage, call.src) if s in index}
        preds |= {k for r in reads for k in writers.get(state_of(r), ())
                  if any(_touches(r, w) for w in effects[k][1])}
        ancestors = 0
        for p in preds:
            ancestors |= before[p] | 1 << p
        before.append(ancestors)
        for state in dict.fromkeys(state_of(n) for n in writes):
            writers.setdefault(state, []).append(i)

    def unordered(i: int, j: int) -> bool:
        return not before[j] >> i & 1
    found = [(b.call, b.write, a.call, a.write < 0) for frames in _accesses(effects, writers).values()
             for a, b in _meeting(list(frames.values()), unordered) if b.write >= 0]
    if found:   # a write of the later call after a write (False) or a read (True) of the earlier
        j, k, i, read = min(found)
        _hazard(calls, i, j, state_of(effects[j][1][k]), where, "read then overwrite" if read else "both write")


@dataclass(frozen=True)
class _Access:
    """Call `call`'s read (`write` -1) or its `write`th write of a state, where it may lie."""

    call: int
    write: int
    node: Node
    spans: tuple[tuple[int, int], ...]


def _accesses(effects: list, written: dict) -> dict[str, dict[tuple[int, ...], list[_Access]]]:
    """The accesses of each state `written`, by the frame they index."""
    found: dict[str, dict[tuple[int, ...], list[_Access]]] = {}
    for i, (reads, writes) in enumerate(effects):
        for k, node in (*enumerate(writes), *((-1, r) for r in reads)):
            if state_of(node) in written:
                frame, spans = region(node)
                found.setdefault(state_of(node), {}).setdefault(frame, []).append(_Access(i, k, node, spans))
    return found


def _meeting(frames: list[list[_Access]], unordered: Callable[[int, int], bool]) -> list[tuple[_Access, _Access]]:
    """The pairs (earlier, later) of accesses of one state by two calls nothing orders
    (`unordered(earlier, later)`) whose regions may share an element: within one frame, found by
    sweeping their spans along the first axis, so a state written in many disjoint blocks costs
    no pair of blocks apart; across frames (a reshape), each pair by `overlap`."""
    pairs = [p for same in frames for p in _sweep(same, unordered)]
    pairs += [(a, b) for m, f in enumerate(frames) for g in frames[m + 1:] for a in f for b in g
              if a.call != b.call and unordered(*sorted((a.call, b.call))) and overlap(a.node, b.node)]
    return [(a, b) if a.call < b.call else (b, a) for a, b in pairs]


def _sweep(accesses: list[_Access], unordered: Callable[[int, int], bool]) -> list[tuple[_Access, _Access]]:
    """The pairs of `_meeting` among accesses of one frame: their spans meet on every axis."""
    def first(a: _Access) -> tuple[int, int]:
        return a.spans[0] if a.spans else (0, 1)
    found: list[tuple[_Access, _Access]] = []
    active: list[_Access] = []   # those whose first span reaches past the next's start
    for b in sorted(accesses, key=lambda a: first(a)[0]):
        active = [a for a in active if first(a)[1] > first(b)[0]]
        found += [(a, b) for a in active if a.call != b.call and unordered(*sorted((a.call, b.call)))
                  and all(lo < b_hi and b_lo < hi for (lo, hi), (b_lo, b_hi) in zip(a.spans, b.spans))]
        active.append(b)
    return found


def _hazard(calls, i, j, state, where, kind):
    a, b = calls[i], calls[j]
    na, nb = f"{a.arg.kernel.__name__}#{i}", f"{b.arg.kernel.__name__}#{j}"
    if kind == "both write":
        raise WriteHazard(
            f"{na} and {nb} in {where} both write state '{state}' and nothing orders them: the device may "
            f"run them in either order. Make {nb} use a result of {na}, or write different states."
        )
    raise WriteHazard(
        f"{na} in {where} reads state '{state}' and the later {nb} overwrites it with no data path "
        f"from {na} to {nb}: the device may overwrite it before it is read. Use {na}'s result in {nb}, "
        "or write a different state."
    )
