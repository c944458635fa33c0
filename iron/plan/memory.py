"""Tile memory (docs/platform.md section 4): every compute and mem tile's buffers of a Plan
counted where mlir-aie allocates them (`fifo_homes`), and the refusal of a tile whose buffers
exceed its memory, with the fix that applies to the design.
"""
from __future__ import annotations

from iron.errors import DoesNotFit
from iron.plan.plan import Acquire, Fifo, PlacementKind, Plan, Tile, TileKind, launch_steps
from iron.plan.rules import Rule


def reaches(core: Tile, memory: Tile) -> bool:
    """Whether the core of compute tile `core` addresses `memory`'s data memory directly (AIE2 and
    AIE2P): its own tile's and its west, north and south neighbours' (south not when that is a
    mem tile)."""
    step = (memory.col - core.col, memory.row - core.row)
    return step in ((0, 0), (-1, 0), (0, 1)) or (step == (0, -1) and memory.kind is TileKind.COMPUTE)


def shares_memory(fifo: Fifo) -> bool:
    """Whether mlir-aie gives `fifo` no DMA but one set of objects both cores use: one consumer,
    and producer and consumer neighbouring compute tiles, one of which reaches the other's memory."""
    if len(fifo.consumers) != 1 or {fifo.producer.kind, fifo.consumers[0].kind} != {TileKind.COMPUTE}:
        return False
    return reaches(fifo.producer, fifo.consumers[0]) or reaches(fifo.consumers[0], fifo.producer)


def fifo_homes(plan: Plan) -> dict[str, tuple[tuple[Tile, int], ...]]:
    """Per FIFO, (tile, objects) for every tile holding some of its objects, as mlir-aie allocates
    them: a shared-memory FIFO's once, on the producer's tile unless the consumer's core cannot
    reach it (then on the consumer's); a DMA FIFO's at each compute and mem end, except that a
    mem-tile link keeps the objects of only one of its FIFOs (`link_holder`)."""
    acquired = _most_acquired(plan)
    unkept = {(link.tile, name) for link in plan.links for name in (*link.sources, *link.destinations)
              if name != link_holder(plan, link)}
    homes = {}
    for f in plan.fifos:
        if f.shared_memory:
            (consumer,) = f.consumers
            homes[f.name] = ((f.producer if reaches(consumer, f.producer) else consumer, f.depth),)
        else:
            homes[f.name] = tuple((t, _objects(f, acquired.get((t, f.name), 0))) for t in (f.producer, *f.consumers)
                                  if t.kind is not TileKind.SHIM and (t, f.name) not in unkept)
    return homes


def link_holder(plan: Plan, link) -> str:
    """The FIFO whose objects a mem-tile link keeps: the joined one, the one split, or the larger
    of a forward's two (its source when they are equal)."""
    if len(link.sources) > 1:
        return link.destinations[0]
    if len(link.destinations) > 1:
        return link.sources[0]
    source, destination = (plan.fifo(n) for n in (link.sources[0], link.destinations[0]))
    return destination.name if destination.nbytes > source.nbytes else source.name


def _objects(fifo: Fifo, most: int) -> int:
    """How many objects a DMA end holds whose core acquires at most `most` at once: one more than
    that (one for a depth-1 FIFO taken one at a time); the depth where no core acquires it (a
    mem tile)."""
    if most == 0:
        return fifo.depth
    return 1 if most == fifo.depth == 1 else most + 1


def _most_acquired(plan: Plan) -> dict[tuple[Tile, str], int]:
    """(tile, FIFO) -> the most objects of the FIFO the tile's core acquires at once."""
    most: dict[tuple[Tile, str], int] = {}
    for core in plan.cores:
        for step, _ in launch_steps(core.program):
            if isinstance(step, Acquire):
                most[core.tile, step.fifo] = max(most.get((core.tile, step.fifo), 0), step.count)
    return most


def tile_memory(plan: Plan) -> dict[Tile, list[tuple[str, int]]]:
    """What each compute or mem tile holds, (name, bytes): FIFO objects where `fifo_homes` puts
    them (named FIFO@tile unless the FIFO is shared memory), Buffers, and each core's stack."""
    held: dict[Tile, list[tuple[str, int]]] = {}
    homes = fifo_homes(plan)
    for f in plan.fifos:
        for tile, objects in homes[f.name]:
            name = str(f.name) if f.shared_memory else f"{f.name}@{tile.name}"
            held.setdefault(tile, []).append((name, objects * f.nbytes))
    for b in plan.buffers:
        held.setdefault(b.tile, []).append((b.name, b.nbytes))
    for c in plan.cores:
        held.setdefault(c.tile, []).append((f"stack@{c.tile.name}", c.stack_bytes))
    return held


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


def check_tile_memory(plan: Plan):
    """Raise DoesNotFit for the first tile whose buffers exceed its memory."""
    over = over_budget(plan)
    if over is not None:
        raise does_not_fit(plan, *over)


def does_not_fit(plan: Plan, tile: Tile, held: list[tuple[str, int]]) -> DoesNotFit:
    """The refusal for a tile whose buffers exceed its memory: the kernel calls it runs, its
    buffers largest first, and a fix that applies to the design (`fix_for_tile`)."""
    holds = {str(key): what for key, what in plan.holds.items()}
    items = []
    for name, n in sorted(held, key=lambda item: (-item[1], item[0])):
        what = holds.get(name.split("@")[0])
        items.append(f"{name} {n} bytes" + (f" ({what})" if what else ""))
    calls = runs_on(plan, tile)
    where = f", where {' and '.join(calls)} run{'s' * (len(calls) == 1)}" if calls else ""
    groups = {f"{core.group}: not streamed: " for core in plan.cores if core.tile == tile}
    why = "".join(f" ({rule}: {what})" for rule, what in plan.rules
                  if rule is Rule.STREAM_ELEMENTWISE and any(map(what.startswith, groups)))
    return DoesNotFit(
        f"{plan.name} does not fit {tile.name}{where}: its buffers take {sum(n for _, n in held)} bytes "
        f"but a {tile.kind} tile has {budget(plan, tile)}: {', '.join(items)}{why}. "
        f"{fix_for_tile(plan, tile, held)}"
    )


def runs_on(plan: Plan, tile: Tile) -> list[str]:
    """The kernel calls (`Add#0`) of the groups whose cores run on `tile`."""
    groups = dict(plan.groups)
    return [call for core in plan.cores if core.tile == tile for g in core.groups for call in groups.get(g, ())]


def fix_for_tile(plan: Plan, tile: Tile, held: list[tuple[str, int]]) -> str:
    """`fix_for_tile`: what makes a tile's buffers fit, as the design allows: its kernel calls cut
    into at least as many calls over parts of their tensors as the tile's room less the stack
    divides their bytes into; smaller states only when the design has any."""
    calls = runs_on(plan, tile)
    if not calls:
        return "Split the work over more kernel calls, or compile for a device with more tiles."
    stack = sum(c.stack_bytes for c in plan.cores if c.tile == tile)
    room = budget(plan, tile) - stack
    need = -(-(sum(n for _, n in held) - stack) // room)
    states = any(p.kind is PlacementKind.STATE for p in plan.placements)
    return (f"Split {' and '.join(calls)} into at least {need} calls over parts of the tensors, each call's "
            f"buffers at most {room} bytes" + (", or use smaller states" if states else "") + ".")
