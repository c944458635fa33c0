"""Allocation: host buffers packed word by word, and every tile's buffers within its memory.

What it does: `host_placements` packs the host-visible tensors into the runtime-sequence
buffers (consts: weights and params; states; inputs; outputs: outputs then carried elements),
each at a word-aligned offset; `host_buffers` sizes every buffer (at least one word), adding the
words buffer and, with an Emit, the feedback buffer. `fit` checks each compute and mem tile with
`plan.tile_memory()` against the device's memory (the core's stack included), lowering FIFO
depths from 2 to 1 (largest objects first) where a tile is tight, and raises DoesNotFit naming
the tile, its budget and its buffers when even that is not enough.

What it does not: decide what the buffers are (lower.py) or place tiles (place.py).
"""
from __future__ import annotations

from dataclasses import replace

from iron.compiler.plan import (
    HostBuffer,
    HostRole,
    Placement,
    PlacementKind,
    Plan,
    Tile,
    TileKind,
    tile_memory,
)
from iron.errors import DoesNotFit
from iron.ir import Op, Program


def host_placements(program: Program) -> tuple[Placement, ...]:
    """Every host-visible tensor of `program`, packed per buffer in argument order."""
    declared = [(PlacementKind(d.kind), d.name, d.shape, d.dtype) for d in program.declarations]
    wanted = [(HostRole.CONSTS, *d) for d in declared if d[0] is not PlacementKind.STATE]
    wanted += [(HostRole.STATES, *d) for d in declared if d[0] is PlacementKind.STATE]
    wanted += [(HostRole.INPUTS, PlacementKind.INPUT, n.arg[0], n.shape, n.dtype) for n in program.inputs]
    wanted += [(HostRole.OUTPUTS, PlacementKind.OUTPUT, f"out{i}", n.shape, n.dtype)
               for i, n in enumerate(program.outputs)]
    wanted += [(HostRole.OUTPUTS, PlacementKind.CARRY, f"carry.{name}", v.src[0].shape, v.src[0].dtype)
               for name, v in program.carry if v.op == Op.ELEM]
    placements, used = [], dict.fromkeys(HostRole, 0)
    for role, kind, name, shape, dtype in wanted:
        buffer = role.value
        placement = Placement(name, kind, buffer, used[role], tuple(shape), dtype)
        used[role] += placement.nwords
        placements.append(placement)
    return tuple(placements)


def host_buffers(placements: tuple[Placement, ...], words: int, feedback: int | None) -> tuple[HostBuffer, ...]:
    """The runtime-sequence arguments, in order, each at least one word."""
    size = dict.fromkeys((HostRole.CONSTS, HostRole.STATES, HostRole.INPUTS, HostRole.OUTPUTS), 0)
    for p in placements:
        role = HostRole(p.buffer)
        size[role] = max(size[role], p.offset + p.nwords)
    size[HostRole.WORDS] = words
    if feedback is not None:
        size[HostRole.FEEDBACK] = feedback
    return tuple(HostBuffer(role.value, role, max(1, n)) for role, n in size.items())


# ---- tile memory ---------------------------------------------------------------------------------

def budget(plan: Plan, tile: Tile) -> int:
    kind = plan.device.compute if tile.kind is TileKind.COMPUTE else plan.device.mem
    return kind.data_memory_bytes


def over_budget(plan: Plan) -> tuple[Tile, list[tuple[str, int]]] | None:
    """The first tile (by column, row) whose buffers exceed its memory, with its buffers."""
    held = tile_memory(plan)
    for tile in sorted(held, key=lambda t: (t.col, t.row)):
        if sum(n for _, n in held[tile]) > budget(plan, tile):
            return tile, held[tile]
    return None


def fit(plan: Plan) -> Plan:
    """`plan` with FIFO depths lowered to 1 where a tile is tight; DoesNotFit if still over."""
    while (over := over_budget(plan)) is not None:
        tile = over[0]
        deep = [f for f in plan.fifos if f.depth > 1 and tile in _memory_ends(f)]
        if not deep:
            raise does_not_fit(plan, *over)
        largest = max(deep, key=lambda f: (f.nbytes, f.name))
        plan = replace(plan, fifos=tuple(replace(f, depth=1) if f is largest else f for f in plan.fifos))
    return plan


def check_tile_memory(plan: Plan):
    """Raise DoesNotFit for the first tile whose buffers exceed its memory."""
    over = over_budget(plan)
    if over is not None:
        raise does_not_fit(plan, *over)


def _memory_ends(fifo) -> tuple[Tile, ...]:
    return fifo.consumers if fifo.shared_memory else (fifo.producer, *fifo.consumers)


def does_not_fit(plan: Plan, tile: Tile, held: list[tuple[str, int]]) -> DoesNotFit:
    holds = plan.notes.get("holds", {})
    items = []
    for name, n in sorted(held, key=lambda item: (-item[1], item[0])):
        what = holds.get(name.split("@")[0])
        items.append(f"{name} {n} bytes" + (f" ({what})" if what else ""))
    return DoesNotFit(
        f"{plan.name} does not fit {tile.name}: its buffers take {sum(n for _, n in held)} bytes "
        f"but a {tile.kind} tile has {budget(plan, tile)}: {', '.join(items)}. Use smaller states, "
        "split the work over more kernel calls, or compile for a device with more tiles."
    )
