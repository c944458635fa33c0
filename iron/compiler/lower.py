"""Lowering a placed and routed Program to its FIFOs, Buffers, Functions, cores and moves, group
by group in program order (a group reads the objects of earlier ones), then the Emit. Host ends
stay on the placeholder HOST tile until shims.py connects them."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from iron.compiler.allocate import host_placements
from iron.compiler.cores import core_of, one_core_per_tile
from iron.compiler.emit import carry_sources, lower_emit, sink_writes
from iron.compiler.flow import lower_flow
from iron.compiler.grid import lower_grid
from iron.compiler.objects import I32, Context, Part, join_link, joined, pack
from iron.compiler.place import Layout, Site
from iron.compiler.route import Routes
from iron.compiler.sequence import group_moves, with_state_waits
from iron.compiler.unfold import Unfolding
from iron.compiler.words import WordTable
from iron.ir import Program, call_label, describe
from iron.plan.fifos import EMIT_IN, FEEDBACK, FifoId, Stem, fifo_id
from iron.plan.plan import Buffer, Core, Emit, Fifo, Function, Link, Plan, WordDef
from iron.plan.rules import Decision

DEPTH = 2


@dataclass(frozen=True)
class Lowered:
    """A design before its host FIFOs meet shim tiles: `sequence` holds Moves and Waits;
    `waiting_inputs` the `_in`s of groups waiting on an earlier state write."""

    fifos: tuple[Fifo, ...]
    links: tuple[Link, ...]
    buffers: tuple[Buffer, ...]
    functions: tuple[Function, ...]
    cores: tuple[Core, ...]
    sequence: tuple
    words: tuple[WordDef, ...]
    placements: tuple
    emit: Emit | None
    carry: tuple
    holds: dict
    waiting_inputs: frozenset[FifoId]
    rules: tuple[Decision, ...] = ()
    loops: dict = field(default_factory=dict)   # FIFO -> objects per launch of a looping core's (repeat.py)


def lower(program: Program, device, layout: Layout, routes: Routes, feeds: Plan | None = None,
          table: WordTable | None = None, placements: tuple | None = None,
          unfolding: Unfolding | None = None) -> Lowered:
    """A segment passes the whole design's `table` and host `placements`; a block run over time
    its `unfolding`: its cores loop and its moves are made once per iteration."""
    ctx = Context(program, device, layout, routes, table or WordTable(program),
                  host_placements(program) if placements is None else placements)
    sizes, links, buffers, functions, cores, moves, holds = {}, [], [], [], [], [], {}
    for site in layout.sites:
        if site.grid is not None or site.flow is not None:
            made = lower_grid(ctx, site) if site.grid is not None else lower_flow(ctx, site)
            sizes |= made.sizes
            links += made.links
            buffers += made.buffers
            functions += made.functions
            cores += made.cores
            moves.append(list(made.moves))
            holds |= {b.name: "a block's intermediate" for b in made.buffers}
            continue
        parts = pack(ctx, site)
        sizes |= object_sizes(ctx, site, parts)
        links += site_links(ctx, site, parts, sizes)
        for part in parts:
            made, core = core_of(ctx, part)
            functions += made
            cores.append(core)
            buffers += part.buffers
            holds |= part.holds
        moves.append(group_moves(ctx, site, parts))
    sites, cores, looping = layout.sites, one_core_per_tile(cores), {}
    if unfolding is not None:
        sites, moves = unfolding.sites_and_moves(sites, moves, ctx.device)
        unlooped, cores = cores, unfolding.looped(cores)
        looping = {c.tile: unfolding.loops(c.group) for c, d in zip(unlooped, cores) if c is not d}
    sequence, waiting_inputs = with_state_waits(sites, sink_writes(ctx, moves))
    emit_values, carry = carry_sources(ctx)
    emit = None
    if layout.emit is not None:
        made = lower_emit(ctx, emit_values, feeds.words if feeds is not None else ctx.table.defs())
        emit = made.emit
        functions.append(made.function)
        cores.append(made.core)
        sequence += made.moves
        sizes[EMIT_IN] = (made.sizes[EMIT_IN], I32, "this call's words")
        sizes[FEEDBACK] = (made.sizes[FEEDBACK], I32, "the next call's words")
    fifos = tuple(Fifo(r.fifo, r.producer, r.consumers, DEPTH, sizes[r.fifo][0], np.dtype(sizes[r.fifo][1]),
                       r.shared_memory) for r in routes.fifos)
    loops = {f.name: max(looping.get(t, 1) for t in (f.producer, *f.consumers)) for f in fifos}
    holds |= {name: what for name, (_, _, what) in sizes.items()}
    return Lowered(fifos, tuple(links), tuple(buffers), tuple(functions), tuple(cores), tuple(sequence),
                   ctx.table.defs(), ctx.placements, emit, carry, holds, waiting_inputs, tuple(ctx.rules),
                   {f: n for f, n in loops.items() if n > 1})


def object_sizes(ctx: Context, site: Site, parts: list[Part]) -> dict[str, tuple[int, np.dtype, str]]:
    """FIFO -> (object bytes, element type, what it holds) for a group's routed FIFOs."""
    g = site.group.name
    sizes = {parts[0].in_fifo: _packed(parts[0].ins)}
    for part in parts:
        sizes[part.fifo(Stem.HOST)] = _packed(part.host)
        sizes[part.fifo(Stem.OUT)] = _packed(part.out)
    if site.stream is not None and site.stream.owner is None:   # a shared stream's FIFOs are its owner's
        s = site.stream
        block = s.rows * (s.matrix.size // s.matrix.shape[0]) * s.matrix.dtype.itemsize
        what = f"rows of {describe(s.matrix)}"
        sizes |= {s.lane_fifo(g, k): (block * s.per_lane, s.matrix.dtype, what) for k in range(len(s.lane_mems))}
        sizes |= {p.w_fifo: (block, s.matrix.dtype, what) for p in parts}
    if parts[0].split:
        last = site.group.calls[-1]
        size, label = parts[0].count * last.dtype.itemsize, call_label(ctx.program, last)
        sizes |= {fifo_id(g, Stem.PART, p.number): (size, last.dtype, label) for p in parts}
        sizes[joined(ctx, g)] = (size * len(parts), last.dtype, label)
    return {f: size for f, size in sizes.items() if ctx.routes.has(f)}


def _packed(packing) -> tuple[int, np.dtype, str]:
    return packing.nbytes, packing.dtype, ", ".join(packing.what)


def site_links(ctx: Context, site: Site, parts: list[Part], sizes: dict) -> list[Link]:
    """A streamed matrix's forward (or split) links and a split group's join (none for a stream
    another group's link carries)."""
    if site.stream is None or site.stream.owner is not None:
        return []
    g, s = site.group.name, site.stream
    names = tuple(p.w_fifo for p in parts)
    split = tuple(p * sizes[names[0]][0] for p in range(s.per_lane)) if s.per_lane > 1 else ()   # one part a lane: a forward
    lanes = [Link(lane, (s.lane_fifo(g, k),), names[k * s.per_lane:(k + 1) * s.per_lane], destination_offsets=split)
             for k, lane in enumerate(s.lane_mems)]
    if not parts[0].split:
        return lanes
    size = sizes[fifo_id(g, Stem.PART, 0)][0]
    return [*lanes, join_link(s.mem, [fifo_id(g, Stem.PART, p.number) for p in parts], joined(ctx, g), size)]
