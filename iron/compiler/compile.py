"""`compile_program(program, device, feeds=None)`: a traced Program to a checked Plan, as a flat
list of passes, each taking the value the one before made (docs/architecture.md draws them):
copy_view_for_grid, tile_before_state_write, fuse, place, route and fit_compute_channels, lower,
share and connect, assemble and fit, check_plan; a design too big for the array at once is cut
into segments, each compiled by the same passes (segment.py). Plans are kept per Program,
device and fed Plan, so compiling again costs a lookup."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable
from weakref import WeakKeyDictionary

from iron.compiler.allocate import fit, host_buffers, host_placements
from iron.compiler.copies import copy_view_for_grid, copy_view_rules
from iron.compiler.fuse import Group, fuse
from iron.compiler.layout import pad_to_block
from iron.compiler.lower import Lowered, lower
from iron.compiler.place import Layout, place
from iron.compiler.priced import plan_ns
from iron.compiler.repeat import Abandoned, choose_over_time
from iron.compiler.route import Routes, fit_compute_channels, route
from iron.compiler.runs import NotRepeated
from iron.compiler.segment import compile_segments
from iron.compiler.shims import ShimShortfall, connect, share, shim_shortfall
from iron.compiler.through_ddr import through_between_groups, tile_before_state_write
from iron.compiler.unfold import Unfolding
from iron.compiler.words import WordTable, layout_rules
from iron.errors import DoesNotFit, LoopError, PlacementError
from iron.ir import Program, call_label
from iron.plan import cost
from iron.plan.invariants import check_plan
from iron.plan.plan import Plan, Tile, WordKind
from iron.plan.rules import Rule

_PLANS: WeakKeyDictionary = WeakKeyDictionary()   # Program -> {(device, id(feeds)): (feeds, Plan)}


def compile_program(program: Program, device, feeds: Plan | None = None, *, over_time: bool = True) -> Plan:
    """The Plan of `program` on `device`; `feeds`: the Plan whose scratchpad the Emit writes;
    `over_time=False` keeps every repeated block spread in space (`repeat_over_time` not tried)."""
    plans = _PLANS.setdefault(program, {})
    key = (device, id(feeds), over_time)
    kept = plans.get(key)
    if kept is not None and kept[0] is feeds:
        return kept[1]
    check_feeds(program, device, feeds)
    for call in program.calls:
        call.arg.kernel.check_source(call.src[0].dtype, call.dtype, f"{program.name}'s {call_label(program, call)}")
    program = copy_view_for_grid(program, device)
    program, through = tile_before_state_write(program, device)
    copied = program   # the copies' rules name the results they read as traced, not their DDR buffers
    groups = fuse(program)
    padding = pad_to_block(program, groups, device)   # once: every segment sees the same layout
    program, between = through_between_groups(program, device, frozenset(padding.lies), groups)
    if between:   # fused again, and laid out again, the results that pass through DDR now host tensors
        groups = fuse(program)
        padding = pad_to_block(program, groups, device)
    placements = host_placements(program, padding.shapes)
    whole = try_groups(program, groups, device, feeds, None, placements, check=True)

    def spread(enough=None) -> Plan | Abandoned:   # too big for the array at once: segments
        return compile_segments(program, device, groups, feeds, try_groups, whole, padding, enough=enough)

    def folded(program: Program, kept: tuple[Group, ...], placements: tuple, unfolding: Unfolding):
        """The design with one iteration placed: one configuration, or segments around it."""
        looping = partial(try_groups, unfolding=unfolding)
        one = looping(program, kept, device, feeds, None, placements, check=True)
        if isinstance(one, Plan):
            return one
        at = [i for i, g in enumerate(kept) if g.name in unfolding.groups]
        segmented = compile_segments(program, device, kept, feeds, looping, one, padding,
                                     frozenset(range(at[0] + 1, at[-1] + 1)))

        def narrowed(rows: int) -> Plan | None:   # the design in one configuration so, or None
            plan = looping(program, kept, device, feeds, None, placements, check=True, most_rows=rows)
            return plan if isinstance(plan, Plan) else None
        return fewer_rows(segmented, narrowed, device)

    plan, repeated = (choose_over_time(program, device, groups, placements, padding.shapes, folded, whole, spread)
                      if over_time else (None, []))
    if plan is None:
        plan = whole if isinstance(whole, Plan) else spread()
    rules = (*through, *between, *copy_view_rules(copied), *((fact.rule, fact) for fact in padding.facts), *repeated,
             *plan.rules, *layout_rules(placements))
    if len(rules) > len(plan.rules) or padding.choices:   # the design-wide rules: inserted copies, DDR buffers, padding
        plan = replace(plan, rules=rules, choices=(*padding.choices, *plan.choices))
    plans[key] = (feeds, plan)
    return plan


def fewer_rows(segmented: Plan, narrowed: Callable, device) -> Plan:
    """`fewer_rows_for_one_configuration`: a looping design that does not fit one configuration
    (`segmented`) may fit one when its grids and streams take fewer rows of cores each
    (`narrowed(rows)`: the design so, or None); the one of the least estimated time, a Choice."""
    every = len(device.compute_rows)
    options = [(segmented, None), *((plan, every >> k) for k in range(1, every.bit_length())
                                    if (plan := narrowed(every >> k)) is not None)]
    if len(options) == 1:
        return segmented
    (best, rows), choice = cost.choose(Rule.FEWER_ROWS_FOR_ONE_CONFIGURATION, "rows of cores", options,
                                       lambda o: plan_ns(o[0]), lambda o: _rows_label(*o))
    return replace(best, choices=(*best.choices, ("iteration", choice)),
                   rules=(*best.rules, (Rule.FEWER_ROWS_FOR_ONE_CONFIGURATION, _rows_label(best, rows))))


def _rows_label(plan: Plan, rows: int | None) -> str:
    count = len(plan.configurations)
    cores = "every row of cores" if rows is None else f"at most {rows} row{'s' * (rows > 1)} of cores"
    return f"grids and streams on {cores}: {count} configuration{'s' * (count > 1)}"


def try_groups(program: Program, groups: tuple[Group, ...], device, feeds: Plan | None,
               table: WordTable | None, placements: tuple, check: bool = False,
               bound: bool = True, unfolding: Unfolding | None = None,
               most_rows: int | None = None) -> Plan | PlacementError | DoesNotFit | ShimShortfall:
    """The passes from placement on, for a whole design, a segment, or a design whose repeated
    block is placed once (`unfolding`): the Plan, the error refusing it, or the shortfall when
    `shim_channels_bound` (`bound`) refuses it right after routing, before the costly lowering."""
    try:
        layout = place(program, groups, device, placements, dict(unfolding.shared) if unfolding else None,
                       most_rows)
        routes = route(program, layout)
        shortfall = shim_shortfall(routes, device) if bound else None
        if shortfall is not None:
            return shortfall
        routes = fit_compute_channels(program, routes, layout, device)
        lowered = lower(program, device, layout, routes, feeds, table, placements, unfolding)
        lowered = share(program, lowered, device)
        lowered = connect(lowered, device)
        plan = fit(assemble(program, device, groups, layout, routes, lowered))
        if check:
            check_plan(plan)
    except (PlacementError, DoesNotFit, NotRepeated) as refused:
        return refused
    return plan


def check_feeds(program: Program, device, feeds: Plan | None):
    """Refuse a `feeds` Plan built for another device or carrying other values."""
    if feeds is None:
        return
    if feeds.device != device:
        raise LoopError(f"{program.name} is compiled for {device.name} but feeds {feeds.name}, compiled for "
                        f"{feeds.device.name}: compile both versions for the same device.")
    theirs = tuple(w.name for w in feeds.words if w.kind is WordKind.CARRIED)
    if theirs != program.carried_names:
        raise LoopError(f"{program.name} carries ({', '.join(program.carried_names)}) but feeds {feeds.name}, "
                        f"which carries ({', '.join(theirs)}): give both bodies the same Carried parameters.")
    mine = {v.arg.name for v in program.scalars}
    missing = [w.name for w in feeds.words if w.kind is WordKind.SCRATCHPAD and w.name not in mine]
    if missing:
        raise LoopError(f"{feeds.name} takes Scratchpad value(s) {', '.join(missing)} that {program.name} does "
                        f"not have, so {program.name}'s Emit cannot write them: make them Carried, or give "
                        f"{program.name} the same Scratchpad values.")


def assemble(program: Program, device, groups: tuple[Group, ...], layout: Layout, routes: Routes,
             lowered: Lowered) -> Plan:
    """The Plan: the lowered design, its tiles and host buffers, and every rule's decision."""
    emit = lowered.emit
    return Plan(
        device=device, name=program.name, full_elf=device.full_elf, image="elf" if device.full_elf else "xclbin",
        tiles=_tiles(lowered), host_buffers=host_buffers(lowered.placements, len(lowered.words), emit, device.full_elf),
        placements=lowered.placements, fifos=lowered.fifos, links=lowered.links, buffers=lowered.buffers,
        functions=lowered.functions, cores=lowered.cores, sequence=lowered.sequence, words=lowered.words,
        emit=emit, carry=lowered.carry,
        groups=tuple((g.name, tuple(call_label(program, c) for c in g.calls)) for g in groups),
        rules=(*((g.closed_by, f"{g.name} closed before {call_label(program, nxt.calls[0])}")
                 for g, nxt in zip(groups, groups[1:])), *layout.rules, *routes.rules, *lowered.rules),
        holds=dict(lowered.holds), closed_by={g.name: g.closed_by for g in groups},
        choices=tuple((s.group.name, c) for s in layout.sites for c in s.choices),
    )


def _tiles(lowered: Lowered) -> tuple[Tile, ...]:
    tiles = {c.tile for c in lowered.cores} | {link.tile for link in lowered.links}
    tiles |= {t for f in lowered.fifos for t in (f.producer, *f.consumers)}
    return tuple(sorted(tiles, key=lambda t: (t.col, t.row)))
