"""Host FIFOs meet shim tiles: `share` applies the merges `share_shim_channels` decides;
`connect` gives every host end the shim tile `assign_shims` picks and cuts the moves into Dma ops."""
from __future__ import annotations

from dataclasses import dataclass, replace

from iron.compiler.channels import (
    MemChannels,
    SharedChannel,
    ShimRequest,
    assign_shims,
    share_shim_channels,
    shim_channels_per_tile,
)
from iron.compiler.lower import DEPTH, Lowered
from iron.compiler.objects import I32
from iron.compiler.route import HOST, Route, Routes
from iron.compiler.sequence import Move, finish_sequence
from iron.ir import Program
from iron.plan.fifos import EMIT_IN, FifoRole
from iron.plan.plan import Direction, Fifo, Link, Tile, TileKind, Wait
from iron.plan.rules import Decision, Rule


def share(program: Program, lowered: Lowered, device) -> Lowered:
    """`lowered` with the merges `share_shim_channels` chooses: their FIFOs, links and moves."""
    mem = MemChannels(device)
    for link in lowered.links:
        mem.take_on(link.tile, len(link.sources), len(link.destinations))
    for f in lowered.fifos:
        for tile in {f.producer, *f.consumers}:
            if tile.kind is TileKind.MEM:
                mem.take_on(tile, 0, 0, f.depth * f.nbytes)
    shares, rules = share_shim_channels(program, shim_requests(lowered), device, mem, DEPTH)
    for merge in shares:
        lowered = _merged(lowered, merge)
    return replace(lowered, rules=lowered.rules + rules + tuple(_emit_in_rules(shares)))


def _emit_in_rules(shares: list[SharedChannel]) -> list[Decision]:
    """`emit_in_shares`: the Emit's words (known before the call starts, so never waiting) may
    share a shim channel like a group's input. When a grid's inputs take every shim MM2S channel
    of a column, this keeps the design one configuration, where an Emit segment of its own would
    reconfigure the array every call (100 us or more on npu2, 20 ms on npu1: docs/platform.md
    section 10) for a few words."""
    return [(Rule.EMIT_IN_SHARES, f"emit_in shares {s.fifo} with {', '.join(str(m) for m in s.members if m != EMIT_IN)} "
                             "rather than the Emit being cut into a segment of its own")
            for s in shares if EMIT_IN in s.members]


def shim_requests(lowered: Lowered) -> list[ShimRequest]:
    """Every FIFO with a host end, in FIFO order, and whether it may share a shim channel
    (`_may_share`; one waiting for a state write only with inputs moving after the same Waits,
    `ShimRequest.points`; a looping core's only with FIFOs moving as many objects, `loops`)."""
    results = {f.name for f in lowered.fifos if HOST in f.consumers}
    waited, points, count = set(), {}, 0   # per host input, per move, the Waits on a result before it
    for entry in lowered.sequence:   # (a Wait on an input only frees buffer descriptors: no move depends on it)
        if isinstance(entry, Wait):
            waited.add(entry.fifo)
            count += entry.fifo in results
        elif entry.direction is Direction.MM2S:
            points.setdefault(entry.fifo, []).append(count)
    requests = []
    for f in lowered.fifos:
        loops = lowered.loops.get(f.name, 1)
        if f.producer == HOST:
            rounds = tuple(points[f.name][k * len(points[f.name]) // loops] for k in range(loops)) \
                if f.name in points else ()
            requests.append(ShimRequest(f.name, Direction.MM2S, f.consumers[0].col, f.nbytes,
                                        _may_share(f, Direction.MM2S), loops, rounds, f.name in lowered.waiting_inputs))
        elif HOST in f.consumers:
            shares = _may_share(f, Direction.S2MM) and f.name not in waited
            requests.append(ShimRequest(f.name, Direction.S2MM, f.producer.col, f.nbytes, shares, loops))
    return requests


@dataclass(frozen=True)
class ShimShortfall:
    """`shim_channels_bound`'s refusal: `groups`, how many leading groups their own host FIFOs
    leave within the shim channels (likely the most a segment from the same start fits)."""

    groups: int


def shim_shortfall(routes: Routes, device) -> ShimShortfall | None:
    """`shim_channels_bound`: whether the host FIFOs of one direction certainly need more shim
    channels than the device has, from the routes alone: merging saves at most all FIFOs that
    may share but one. The same before `fit_compute_channels`: it only moves `_in` FIFOs, which
    changes neither the other FIFOs nor whether some input is left."""
    capacity = {d: n * device.n_cols for d, n in shim_channels_per_tile(device).items()}
    taken = {d: [0, 0] for d in Direction}   # host FIFOs that may not share, that may
    groups: list[str] = []   # routes come group by group, in program order
    for r in routes.fifos:
        groups += [] if groups and groups[-1] == r.group else [r.group]
        direction = Direction.MM2S if r.producer == HOST else Direction.S2MM if HOST in r.consumers else None
        if direction is None:
            continue
        taken[direction][_may_share(r, direction)] += 1
        fixed, may = taken[direction]
        if fixed + min(may, 1) > capacity[direction]:
            return ShimShortfall(len(groups) - 1)
    return None


def _may_share(fifo: Fifo | Route, direction: Direction) -> bool:
    """Whether a host FIFO's role and producer let it share a channel (an output only when no
    Wait of the lowered sequence needs it before its end: `shim_requests`)."""
    if direction is Direction.MM2S:
        return fifo.role in (FifoRole.INPUT, FifoRole.EMIT_IN)
    return fifo.role is FifoRole.HOST and fifo.producer.kind is TileKind.COMPUTE


def _merged(lowered: Lowered, merge: SharedChannel) -> Lowered:
    members = {f.name: f for f in lowered.fifos if f.name in merge.members}
    retype = len({f.dtype.itemsize for f in members.values()}) > 1
    dtype = I32 if retype else members[merge.members[0]].dtype
    fifos = [replace(_host_end(f, merge.mem), dtype=I32 if retype else f.dtype) if f.name in members else f
             for f in lowered.fifos]
    if merge.direction is Direction.MM2S:   # split on the mem tile, or joined there
        fifo = Fifo(merge.fifo, HOST, (merge.mem,), DEPTH, merge.nbytes, dtype)
        link = Link(merge.mem, (merge.fifo,), merge.members, destination_offsets=merge.offsets)
    else:
        fifo = Fifo(merge.fifo, merge.mem, (HOST,), DEPTH, merge.nbytes, dtype)
        link = Link(merge.mem, merge.members, (merge.fifo,), source_offsets=merge.offsets)
    fifos.insert(min(i for i, f in enumerate(fifos) if f.name in members), fifo)
    return replace(lowered, fifos=tuple(fifos), links=(*lowered.links, link),
                   holds=lowered.holds | {merge.fifo: ", ".join(map(str, merge.members))},
                   sequence=tuple(moved_together(list(lowered.sequence), merge)))


def moved_together(entries: list, share: SharedChannel) -> list:
    """The members' moves made the shared FIFO's, round by round (one object of each member), in
    member order, each round at its first member move (inputs: before any member needs its
    object) or its last (outputs: once every member has had its inputs)."""
    at = [i for i, e in enumerate(entries) if isinstance(e, Move) and e.fifo in share.members]
    per = {m: [i for i in at if entries[i].fifo == m] for m in share.members}
    size = {m: len(per[m]) // share.loops for m in share.members}   # a member's moves of one round
    rounds = [[i for m in share.members for i in per[m][k * size[m]:(k + 1) * size[m]]] for k in range(share.loops)]
    spots = {(min(r) if share.direction is Direction.MM2S else max(r)): r for r in rounds}
    together = []
    for i, entry in enumerate(entries):
        if i in spots:
            together += [replace(entries[j], fifo=share.fifo) for j in spots[i]]
        elif i not in at:
            together.append(entry)
    return together


def connect(lowered: Lowered, device) -> Lowered:
    """Host ends on the shim tiles `assign_shims` picks; the moves cut into Dma ops."""
    shims, rules = assign_shims(shim_requests(lowered), device)
    fifos = tuple(_host_end(f, shims[f.name]) if f.name in shims else f for f in lowered.fifos)
    sequence = finish_sequence(lowered.sequence, {f.name: f for f in fifos}, device)
    return replace(lowered, fifos=fifos, sequence=sequence, rules=lowered.rules + rules)


def _host_end(f: Fifo, tile: Tile) -> Fifo:
    """`f` with its HOST end on `tile`."""
    return replace(f, producer=tile if f.producer == HOST else f.producer,
                   consumers=tuple(tile if t == HOST else t for t in f.consumers))
