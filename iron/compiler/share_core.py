"""Which groups of a looped iteration larger than the array share a core (the rule
`share_core_in_iteration`)."""
from __future__ import annotations

from iron.compiler.fuse import Group
from iron.compiler.place import place
from iron.compiler.route import crowded_tiles, streams_in_step
from iron.compiler.runs import NotRepeated
from iron.errors import PlacementError
from iron.ir import Program, tensor_inputs


def sharing(program: Program, iteration: tuple[Group, ...], device, placements: tuple) -> tuple[tuple[str, str], ...]:
    """`share_core_in_iteration`: when an iteration has more groups than the array has compute
    tiles (less one, for the Emit), the fewest groups that bring it within them and alone read an
    earlier group's results run on its core after it (pairs before chains, those reading least
    from other groups first); a pair on a tile short of DMA channels (`crowded_tiles`), or taking
    streamed blocks in step with another group's core (`streams_in_step`: the busy core would
    stall the broadcast), is given up for the next. NotRepeated when too few groups can."""
    excess = len(iteration) - (len(device.compute_tiles) - 1)
    if excess <= 0:
        return ()
    candidates, banned = _pairs(iteration), set()
    while True:
        chosen = _choose(candidates, banned, excess)
        if chosen is None:
            raise NotRepeated(f"an iteration is {len(iteration)} groups, more than the {len(device.compute_tiles)} "
                              f"compute tiles, and too few can share a core ({len(candidates)} alone read the one "
                              f"before, {len(banned)} of them on tiles short of DMA channels)")
        try:
            layout = place(program, iteration, device, placements, dict(chosen))
        except PlacementError as why:
            raise NotRepeated(str(why)) from None
        crowded = crowded_tiles(program, layout, device)
        on = {s.group.name for s in layout.sites if crowded & set(s.tiles) or streams_in_step(layout, s)}
        dropped = {g for g, host in chosen if {g, host} & on}
        if not crowded and not dropped:
            return chosen
        alone = [t for t in crowded if not any({g, host} & _on(layout, t) for g, host in chosen)]
        if alone or not dropped:   # a core running one group short of channels: no other pair mends it
            named = sorted(f"{t.name} ({', '.join(sorted(_on(layout, t)))})" for t in alone or crowded)
            raise NotRepeated(f"{', '.join(named)} would take more FIFOs by DMA than a compute tile has channels")
        banned |= dropped


def _on(layout, tile) -> set[str]:
    return {s.group.name for s in layout.sites if tile in s.tiles}


def _pairs(iteration: tuple[Group, ...]) -> list[tuple[int, str, str]]:
    """(position, group, the group before it) where the group alone reads the one before's, fewest readers first."""
    made = {c: g.name for g in iteration for c in g.calls}
    readers: dict[str, set[str]] = {}
    for group in iteration:
        for n in {n for c in group.calls for n in tensor_inputs(c)}:
            if made.get(n, group.name) != group.name:
                readers.setdefault(made[n], set()).add(group.name)
    pairs = [(sum(group.name in r for r in readers.values()), k, group.name, before.name)
             for k, (before, group) in enumerate(zip(iteration, iteration[1:])) if readers.get(before.name) == {group.name}]
    return [(k, g, on) for _, k, g, on in sorted(pairs)]


def _choose(candidates: list[tuple[int, str, str]], banned: set[str], excess: int) -> tuple[tuple[str, str], ...] | None:
    """`excess` of the candidates not banned, pairs first, a core running three groups or more
    only when needed, in iteration order; None when too few."""
    chosen: dict[str, tuple[int, str]] = {}
    for chaining in (False, True):
        for k, g, on in candidates:
            if len(chosen) < excess and g not in chosen and g not in banned and (
                    chaining or not {g, on} & {*chosen, *(h for _, h in chosen.values())}):
                chosen[g] = (k, on)
    if len(chosen) < excess:
        return None
    return tuple((g, on) for g, (_, on) in sorted(chosen.items(), key=lambda item: item[1][0]))


def cores_of(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ...], ...]:
    """The groups each shared core runs, in turn: chains of (group, the group before it)."""
    chains: dict[str, list[str]] = {}
    root: dict[str, str] = {}
    for g, on in pairs:
        root[g] = root.get(on, on)
        chains.setdefault(root[g], [root[g]]).append(g)
    return tuple(tuple(c) for c in chains.values())


