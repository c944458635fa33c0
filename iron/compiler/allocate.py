"""Allocation: the host-visible tensors packed word by word into the runtime-sequence buffers,
and the Plan fitted within its tiles' memory, lowering FIFO depths where a tile is tight."""
from __future__ import annotations

from dataclasses import replace

from iron.compiler.words import word_leads, word_rows
from iron.ir import MemoryKind, Op, Program
from iron.plan.invariants import objects_taken
from iron.plan.memory import does_not_fit, fifo_homes, over_budget
from iron.plan.plan import (
    FLAG_WORDS,
    Emit,
    HostBuffer,
    HostRole,
    Placement,
    PlacementKind,
    Plan,
    Port,
)


def host_placements(program: Program, padded: dict | None = None) -> tuple[Placement, ...]:
    """Every host-visible tensor, packed per buffer in argument order, in the shape `pad_to_block`
    (`padded`: tensor -> shape) or `pad_rows_to_words` gives it, after its `pad_lead_to_words`."""
    padded = padded or {}
    rows = word_rows(program, padded)
    leads = word_leads(program, padded, rows)
    by_name = {n.arg.name: shape for n, shape in padded.items() if n.op in (Op.INPUT, Op.MEMORY)}
    by_name |= {f"out{i}": padded[n] for i, n in enumerate(program.outputs) if n in padded}
    declared = [(PlacementKind(d.kind.value), d.name, d.shape, d.dtype) for d in program.declarations
                if d.kind is not MemoryKind.THROUGH]
    wanted = [(HostRole.CONSTS, *d) for d in declared if d[0] is not PlacementKind.STATE]
    wanted += [(HostRole.STATES, *d) for d in declared if d[0] is PlacementKind.STATE]
    wanted += [(HostRole.INPUTS, PlacementKind.INPUT, n.arg.name, n.shape, n.dtype) for n in program.inputs]
    wanted += [(HostRole.OUTPUTS, PlacementKind.OUTPUT, f"out{i}", n.shape, n.dtype)
               for i, n in enumerate(program.outputs)]
    wanted += [(HostRole.OUTPUTS, PlacementKind.CARRY, f"carry.{name}", v.src[0].shape, v.src[0].dtype)
               for name, v in program.carry if v.op == Op.ELEM]
    wanted += [(HostRole.OUTPUTS, PlacementKind.CUT, d.name, d.shape, d.dtype) for d in program.declarations
               if d.kind is MemoryKind.THROUGH]   # the compiler's own DDR buffers, after the outputs as a cut's are
    placements, used = [], dict.fromkeys(HostRole, 0)
    for role, kind, name, shape, dtype in wanted:
        placement = Placement(name, kind, role.value, used[role], tuple(shape), dtype,
                              padded=by_name.get(name) or rows.get(name), word_rows=name in rows,
                              lead=leads.get(name, 0))
        used[role] += placement.nwords
        placements.append(placement)
    return tuple(placements)


def state_sink(placements: tuple[Placement, ...], full_elf: bool) -> tuple[int, int]:
    """(first word, words) of the states' sink on a full-ELF device ((end, 0) elsewhere), where a
    flagged run writes what it would write into a state (`emit.sink_writes`), so every state
    stays as the completed runs wrote it. It holds the largest state (no write is larger than
    its state) and depends on the states alone, so every version lays the buffer out alike."""
    states = [p for p in placements if p.kind is PlacementKind.STATE]
    end = max((p.offset + p.nwords for p in states), default=0)
    return end, max((p.nwords for p in states), default=0) if full_elf else 0


def host_buffers(placements: tuple[Placement, ...], words: int, emit: Emit | None,
                 full_elf: bool) -> tuple[HostBuffer, ...]:
    """The runtime-sequence arguments, each at least one word: the states with their sink; with
    an Emit, the scratchpad's flag words after the `words` and the feedback buffer."""
    size = dict.fromkeys((HostRole.CONSTS, HostRole.STATES, HostRole.INPUTS, HostRole.OUTPUTS), 0)
    for p in placements:
        role = HostRole(p.buffer)
        size[role] = max(size[role], p.offset + p.nwords)
    size[HostRole.STATES] = sum(state_sink(placements, full_elf))
    size[HostRole.WORDS] = words + (0 if emit is None else FLAG_WORDS)
    if emit is not None:
        size[HostRole.FEEDBACK] = emit.nwords
    return tuple(HostBuffer(role.value, role, max(1, n)) for role, n in size.items())


def fit(plan: Plan) -> Plan:
    """`plan` with FIFO depths lowered to 1 where a tile is tight (DoesNotFit if still over),
    first of the FIFO the core takes the fewest objects of per launch, the largest first: a
    second object overlaps the DMA with the core, which for an object taken once (a MatVec's
    vector or result) overlaps nothing, while for a streamed matrix's blocks it is the overlap."""
    while (over := over_budget(plan)) is not None:
        tile = over[0]
        homes, taken = fifo_homes(plan), objects_taken(plan)
        deep = [f for f in plan.fifos if f.depth > 1 and tile in dict(homes[f.name])]
        if not deep:
            raise does_not_fit(plan, *over)
        lowered = min(deep, key=lambda f: (sum(taken.get((f.name, tile, port), 0) for port in Port),
                                           -f.nbytes, str(f.name)))
        plan = replace(plan, fifos=tuple(replace(f, depth=1) if f is lowered else f for f in plan.fifos))
    return plan

