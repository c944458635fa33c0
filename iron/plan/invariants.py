"""`check_plan(plan)`: the device rules every Plan keeps, checked once before it is printed or
run (PlanError, or DoesNotFit for tile memory): tiles within the device, FIFOs and links
well-formed and on the right tiles, DMA channels and locks per tile, cores and Functions (core_checks.py),
words computed from earlier words, Dma ops within the shim's limits and their host buffers,
buffer descriptor ids reused only after a covering Wait, every Wait met by a completion token,
every FIFO given per launch exactly the objects its consumers take, and the Emit exactly on
full-ELF plans (docs/platform.md). The printers (mlir.py, sources.py) print a checked Plan and
check nothing again."""
from __future__ import annotations

import re
from itertools import accumulate

from iron.names import C_IDENTIFIER, source_file
from iron.plan.core_checks import check_cores, check_functions, check_unique, fail
from iron.plan.fifos import FEEDBACK
from iron.plan.memory import check_tile_memory, fifo_homes, link_holder, shares_memory
from iron.plan.plan import (
    FLAG_WORDS,
    Acquire,
    Const,
    Direction,
    Dma,
    HostRole,
    KernelStep,
    Moved,
    Output,
    PlacementKind,
    Plan,
    Port,
    Tile,
    TileKind,
    Wait,
    WordDef,
    WordKind,
    WordOp,
    WordRef,
    dma_runs,
    launch_steps,
)
from iron.plan.sources import HEADER

SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")   # an MLIR symbol name


def check_plan(plan: Plan) -> None:
    """Raise PlanError for the first device rule `plan` breaks (DoesNotFit for tile memory)."""
    _check_device(plan)
    _check_names(plan)
    _check_fifos(plan)
    _check_links(plan)
    _check_dma_channels(plan)
    _check_locks(plan)
    check_functions(plan)
    check_cores(plan)
    _check_words(plan)
    _check_sequence(plan)
    _check_balance(plan)
    _check_emit(plan)
    check_tile_memory(plan)


# ---- device and tiles -------------------------------------------------------------------------------

def _check_device(plan: Plan):
    d = plan.device
    if plan.full_elf != d.full_elf or plan.image != ("elf" if d.full_elf else "xclbin"):
        fail(plan, f"full_elf={plan.full_elf} and image '{plan.image}' do not match the device "
                    f"(full ELF {'yes' if d.full_elf else 'no'})")
    rows = {TileKind.SHIM: (d.shim_row,), TileKind.MEM: (d.mem_row,), TileKind.COMPUTE: d.compute_rows}
    for t in plan.tiles:
        if not 0 <= t.col < d.n_cols or t.row not in rows.get(t.kind, ()):
            fail(plan, f"tile {t.name} ({t.kind}) is not a {t.kind} tile of {d.name} "
                        f"({d.n_cols} columns, rows {rows.get(t.kind, ())})")
    tiles = set(plan.tiles)
    for t, what in _referenced_tiles(plan):
        if t not in tiles:
            fail(plan, f"{f'a Dma on {what.fifo}' if isinstance(what, Dma) else what} uses {t.name}, which is not "
                       "among the plan's tiles")


def _referenced_tiles(plan: Plan):
    """Each tile the plan refers to, with what refers to it (a Dma named only when it fails: a
    long looped sequence has many)."""
    for f in plan.fifos:
        yield from ((t, f"FIFO {f.name}") for t in (f.producer, *f.consumers))
    yield from ((link.tile, "a link") for link in plan.links)
    yield from ((b.tile, f"buffer {b.name}") for b in plan.buffers)
    yield from ((c.tile, f"the core of {c.group}") for c in plan.cores)
    shim = None
    for op in plan.sequence:
        if isinstance(op, Dma) and op.shim is not shim:   # a move's Dmas share theirs
            shim = op.shim
            yield shim, op
    if plan.emit is not None:
        yield plan.emit.tile, "the Emit"


def _check_names(plan: Plan):
    """FIFOs, Buffers and Functions named as MLIR symbols; a Function's glue file `<name>.cc`
    named as a C identifier and not as a kernel source it would overwrite."""
    named = [("FIFO", f.name) for f in plan.fifos] + [("Buffer", b.name) for b in plan.buffers]
    for what, name in [*named, *(("function", f.name) for f in plan.functions)]:
        if not SYMBOL.fullmatch(str(name)):
            fail(plan, f"the {what} name {name!r} is not an MLIR symbol (letters, digits, '_', '$' and '.', "
                       "starting with a letter or '_')")
    sources = {HEADER, *(s.kernel.source_name() for f in plan.functions for s in f.steps
                         if isinstance(s, KernelStep))}
    for f in plan.functions:
        if not C_IDENTIFIER.fullmatch(f.name) or source_file(f.name) in sources:
            fail(plan, f"function '{f.name}' cannot be written to {source_file(f.name)}: its name must be a C "
                       "identifier and no kernel source's")


# ---- FIFOs and links --------------------------------------------------------------------------------

def _check_fifos(plan: Plan):
    check_unique(plan, "FIFO", [f.name for f in plan.fifos])
    for f in plan.fifos:
        if f.nbytes <= 0 or f.nbytes % 4 or f.nbytes % f.dtype.itemsize or f.depth < 1 or not f.consumers:
            fail(plan, f"FIFO {f.name} has objects of {f.nbytes} bytes of {f.dtype}, depth {f.depth}, "
                        f"{len(f.consumers)} consumer(s): objects must be whole 4-byte words and whole "
                        "elements, depth at least 1, one consumer or more")
        shim_to_shim = f.producer.kind is TileKind.SHIM and any(t.kind is TileKind.SHIM for t in f.consumers)
        one_core = f.consumers == (f.producer,) and f.shared_memory   # groups one core runs in turn
        if shim_to_shim or (f.producer in f.consumers and not one_core):
            fail(plan, f"FIFO {f.name} goes from {f.producer.name} to {', '.join(t.name for t in f.consumers)}: "
                        "a tile sits at one end of a FIFO (but a shared-memory FIFO between groups one core runs "
                        "in turn), and a shim tile's FIFO has a compute or mem tile at its other end")
        if f.shared_memory != shares_memory(f):
            route = f"{f.producer.name} -> {', '.join(t.name for t in f.consumers)}"
            fail(plan, f"FIFO {f.name} is shared memory but {route} is not one neighbouring compute tile"
                 if f.shared_memory else f"FIFO {f.name} goes by DMA but mlir-aie makes {route} "
                 "(one neighbouring compute tile) shared memory")
    for b in plan.buffers:
        if b.nbytes <= 0 or b.nbytes % b.dtype.itemsize:
            fail(plan, f"Buffer {b.name} on {b.tile.name} holds {b.nbytes} bytes, not whole {b.dtype} elements")


def _check_links(plan: Plan):
    fifos = {f.name: f for f in plan.fifos}
    for link in plan.links:
        if link.tile.kind is not TileKind.MEM:
            fail(plan, f"a link sits on {link.tile.name}, not on a mem tile")
        for name in (*link.sources, *link.destinations):
            if name not in fifos:
                fail(plan, f"a link on {link.tile.name} names FIFO {name}, which the plan does not have")
        if any(link.tile not in fifos[s].consumers for s in link.sources) or any(
                fifos[d].producer != link.tile for d in link.destinations):
            fail(plan, f"the link {link.sources} -> {link.destinations} on {link.tile.name} is not the "
                        "consumer of its sources and the producer of its destinations")
        _check_link_offsets(plan, link, fifos)


def _check_link_offsets(plan: Plan, link, fifos):
    """A split's or join's parts lie back to back in link order and fill the object, as mlir-aie
    moves part i: the bytes from its offset up to the next part's, the last up to the object's
    end (docs/platform.md section 4); a forward joins objects of one size."""
    if len(link.sources) == len(link.destinations) == 1:
        if fifos[link.sources[0]].nbytes != fifos[link.destinations[0]].nbytes:
            fail(plan, f"the forward link {link.sources[0]} -> {link.destinations[0]} joins objects of "
                        "different sizes")
        return
    if len(link.sources) > 1 and len(link.destinations) > 1:
        fail(plan, f"the link {link.sources} -> {link.destinations} has several sources and several "
                    "destinations; a link is a split (one source), a join (one destination) or a forward")
    if len(link.sources) > 1:
        kind, (whole,), parts, offsets = "join", link.destinations, link.sources, link.source_offsets
        shown = f"{link.sources} -> {whole}"
    else:
        kind, (whole,), parts, offsets = "split", link.sources, link.destinations, link.destination_offsets
        shown = f"{whole} -> {link.destinations}"
    ends = list(accumulate((fifos[p].nbytes for p in parts), initial=0))
    if list(offsets) != ends[:-1] or ends[-1] != fifos[whole].nbytes:
        fail(plan, f"the {kind} {shown} puts parts of {[fifos[p].nbytes for p in parts]} bytes at "
                    f"byte offsets {list(offsets)} of {fifos[whole].nbytes}-byte objects, but mlir-aie moves each "
                    "part from its offset up to the next one's (the last up to the object's end): lay the parts "
                    "back to back in link order, filling the object")
    if len({fifos[name].dtype.itemsize for name in (whole, *parts)}) > 1:   # so each offset is whole elements
        fail(plan, f"the {kind} {shown} links FIFOs of elements of different sizes, but mlir-aie counts its "
                   f"offsets in elements of {whole}")


def dma_channels(fifos) -> dict[Tile, tuple[list[str], list[str]]]:
    """Per compute or mem tile, the FIFOs it takes in and sends out through a DMA channel each
    (a broadcast uses one channel of its producer; a shared-memory FIFO uses none)."""
    used: dict[Tile, tuple[list[str], list[str]]] = {}
    for f in fifos:
        if f.shared_memory:
            continue
        if f.producer.kind is not TileKind.SHIM:
            used.setdefault(f.producer, ([], []))[1].append(f.name)
        for tile in dict.fromkeys(f.consumers):
            if tile.kind is not TileKind.SHIM:
                used.setdefault(tile, ([], []))[0].append(f.name)
    return used


def _check_dma_channels(plan: Plan):
    for tile, (ins, outs) in sorted(dma_channels(plan.fifos).items(), key=lambda item: (item[0].col, item[0].row)):
        kind = plan.device.compute if tile.kind is TileKind.COMPUTE else plan.device.mem
        for names, have, what in ((ins, kind.dma_in_channels, "in (S2MM)"), (outs, kind.dma_out_channels, "out (MM2S)")):
            if len(names) > have:
                fail(plan, f"{tile.name} moves {len(names)} FIFOs {what} by DMA ({', '.join(map(str, names))}) but a "
                            f"{tile.kind} tile has {have} such channels",
                      "Route several operands through one FIFO (one packed object, or a mem-tile join), or "
                      "make FIFOs between neighbouring compute tiles shared memory.")


def tile_locks(plan: Plan) -> dict[Tile, list[tuple[str, int]]]:
    """Per compute or mem tile, (FIFO, locks) as the object FIFO lowering spends them: a producer
    and a consumer lock wherever a FIFO's objects live (`fifo_homes`), one such pair per part of
    a mem-tile split or join (docs/platform.md section 4)."""
    parts = {(link.tile, link_holder(plan, link)): max(len(link.sources), len(link.destinations))
             for link in plan.links}
    used: dict[Tile, list[tuple[str, int]]] = {}
    for name, homes in fifo_homes(plan).items():
        for tile, _ in homes:
            used.setdefault(tile, []).append((name, 2 * parts.get((tile, name), 1)))
    return used


def _check_locks(plan: Plan):
    """Each tile within its locks (docs/platform.md section 2). A shim tile's ends take at most
    a pair per DMA channel, within its 16, so they are not counted."""
    for tile, locks in sorted(tile_locks(plan).items(), key=lambda item: (item[0].col, item[0].row)):
        have = (plan.device.compute if tile.kind is TileKind.COMPUTE else plan.device.mem).locks
        if sum(n for _, n in locks) > have:
            fail(plan, f"{tile.name} needs {sum(n for _, n in locks)} locks "
                        f"({', '.join(f'{name} {n}' for name, n in locks)}) but a {tile.kind} tile has {have}",
                 "Put fewer FIFO ends (or fewer parts of mem-tile splits and joins) on this tile: place the "
                 "groups on more tiles.")


# ---- words ----------------------------------------------------------------------------------------------

def _check_words(plan: Plan):
    values = True
    for i, w in enumerate(plan.words):
        if w.index != i or not isinstance(w.kind, WordKind):
            fail(plan, f"word {i} ('{w.name}') has index {w.index} and kind '{w.kind}'")
        if (w.op is None) != w.kind.given or (w.op is None and not values):
            fail(plan, f"word {i} ('{w.name}') of kind {w.kind}: per-call values come first, derived words after")
        values = w.op is None
        if w.op is not None:
            _check_derived(plan, w)
        if w.kind is WordKind.CARRIED and w.bound is not None:
            fail(plan, f"word {i} ('{w.name}') is a carried value with a bound: the Emit clamps bounded words in "
                       "place, which would change the value the next call carries; bound a copy of it")
    expect = len(plan.words) + (0 if plan.emit is None else FLAG_WORDS)   # a fed version's flag words
    if plan.host_buffer(HostRole.WORDS).nwords != max(1, expect):
        fail(plan, f"the words buffer holds {plan.host_buffer(HostRole.WORDS).nwords} words for {expect}")
    _check_carry(plan)


def _check_derived(plan: Plan, w: WordDef):
    operands = [o for o in (w.a, w.b) if o is not None]
    bad = not isinstance(w.op, WordOp) or (w.b is None) != (w.op is WordOp.COPY) or any(
        not isinstance(o, (WordRef, Const)) or (isinstance(o, WordRef) and not 0 <= o.index < w.index)
        for o in operands)
    if bad or (w.bound is not None and w.bound[0] >= w.bound[1]):
        fail(plan, f"word {w.index} ('{w.name}') computes {w.op}({w.a}, {w.b}) bound {w.bound}: derived words "
                    "apply an op to earlier words or constants")


def _check_carry(plan: Plan):
    carried = [w.name for w in plan.words if w.kind is WordKind.CARRIED]
    if [name for name, _ in plan.carry] != carried and (plan.carry or plan.emit):   # a segment but the
        # last (segment.py) leaves the carried values to the last
        fail(plan, f"Plan.carry names {[n for n, _ in plan.carry]} but the carried words are {carried}")
    for name, source in plan.carry:
        ok = (isinstance(source, WordRef) and 0 <= source.index < len(plan.words)) or (
            isinstance(source, Output) and any(p.name == source.placement and p.kind is PlacementKind.CARRY
                                               for p in plan.placements))
        if not ok:
            fail(plan, f"the next value of '{name}' comes from {source}, which the plan does not have")


def word_ranges(words) -> list[tuple[int, int] | None]:
    """The [lo, hi] range each word can take, from the bounds (None: unknown)."""
    ranges: list[tuple[int, int] | None] = []

    def of(operand):
        if operand is None:
            return None
        return (operand.value, operand.value) if isinstance(operand, Const) else ranges[operand.index]

    for w in words:
        if w.bound is not None:
            ranges.append((w.bound[0], w.bound[1] - 1))
            continue
        a, b = of(w.a), of(w.b)
        if w.op is WordOp.COPY and w.sink is not None and a is not None:   # a flagged run's Emit writes w.sink
            ranges.append((min(a[0], w.sink), max(a[1], w.sink)))
        elif w.op is WordOp.COPY:
            ranges.append(a)
        elif w.op in (WordOp.ADD, WordOp.MUL) and a is not None and b is not None:
            ends = [w.op.fn(x, y) for x in a for y in b]
            ranges.append((min(ends), max(ends)))
        else:
            ranges.append(None)
    return ranges


# ---- the sequence -------------------------------------------------------------------------------------

def _check_sequence(plan: Plan):
    fifos = {f.name: f for f in plan.fifos}
    buffers = {b.name: b for b in plan.host_buffers}
    ranges = word_ranges(plan.words)
    held: dict[Tile, dict[int, int]] = {}   # shim -> BD id -> the op holding it
    holding: dict = {}   # FIFO -> shim -> the BDs its ops hold: what a Wait on it may free
    spans: dict = {}   # (sizes, strides) within the shim's limits -> the words past a Dma's first it reaches
    tokened: set[str] = set()   # FIFOs with a completion token to come since their last Wait
    bd_ids = plan.device.shim_bd_ids
    move = None   # the fields the Dmas of one move share, checked once for all of them
    for index, op in enumerate(plan.sequence):
        if isinstance(op, Dma):
            if move != (op.fifo, op.direction, op.shim, op.buffer, op.patch_word):
                move = (op.fifo, op.direction, op.shim, op.buffer, op.patch_word)
                low, high, nwords = _check_move(plan, index, op, fifos, buffers, ranges)
                bds, mine = held.setdefault(op.shim, {}), holding.setdefault(op.fifo, {}).setdefault(op.shim, set())
                if op.direction is Direction.S2MM:
                    tokened.add(op.fifo)
            span = spans.get((op.sizes, op.strides))
            if span is None or not 0 <= op.bd_id < bd_ids:
                span = spans[op.sizes, op.strides] = _check_pattern(plan, index, op)
            if op.offset + low < 0 or op.offset + span + high >= nwords:
                fail(plan, f"sequence op {index} (Dma on {op.fifo}) reaches words {op.offset + low}.."
                            f"{op.offset + span + high} of '{op.buffer}', which holds {nwords}")
            if op.bd_id in bds:
                fail(plan, f"sequence op {index} (Dma on {op.fifo}) reuses BD {op.bd_id} of {op.shim.name}, "
                            f"held by op {bds[op.bd_id]} (Dma on {plan.sequence[bds[op.bd_id]].fifo}) "
                            "with no Wait covering it in between")
            bds[op.bd_id] = index
            mine.add(op.bd_id)
            if op.issue_token:
                tokened.add(op.fifo)
        elif isinstance(op, Wait):
            move = None
            _check_wait(plan, index, op, fifos, tokened)
            for shim, mine in holding.get(op.fifo, {}).items():
                bds = held[shim]
                freed = {bd for bd in mine if plan.sequence[bds[bd]].issue_token
                         or plan.sequence[bds[bd]].direction is Direction.S2MM}
                for bd in freed:
                    del bds[bd]
                mine -= freed
        else:
            fail(plan, f"sequence op {index} is a {type(op).__name__}, not a Dma or a Wait")


def _check_wait(plan: Plan, index: int, op: Wait, fifos: dict, tokened: set):
    fifo = fifos.get(op.fifo)
    if fifo is None:
        fail(plan, f"sequence op {index} waits on {op.fifo}, which the plan does not have")
    if all(t.kind is not TileKind.SHIM for t in (fifo.producer, *fifo.consumers)):
        fail(plan, f"sequence op {index} waits on {op.fifo}, which has no shim end (no Dma moves it)")
    if op.fifo not in tokened:
        fail(plan, f"sequence op {index} waits on {op.fifo}, but no Dma on {op.fifo} since its last Wait "
                    "issues a completion token, so the device would wait forever",
              "Wait after an S2MM Dma, or give the MM2S Dma issue_token.")
    tokened.discard(op.fifo)


def _check_move(plan: Plan, index: int, op: Dma, fifos: dict, buffers: dict, ranges) -> tuple[int, int, int]:
    """A Dma's FIFO end, host buffer and patch word (the same for every Dma of one move): the
    least and most its patch word adds to its offset, and its buffer's words."""
    f = fifos.get(op.fifo)
    end = f is not None and (f.producer == op.shim if op.direction is Direction.MM2S else op.shim in f.consumers)
    buffer = buffers.get(op.buffer)
    if not isinstance(op.direction, Direction) or not end or op.shim.kind is not TileKind.SHIM or buffer is None:
        fail(plan, f"sequence op {index} moves {op.direction} between buffer '{op.buffer}' and {op.fifo} on "
                    f"{op.shim.name}, which is not that FIFO's shim end or not a host buffer")
    if op.patch_word is None:
        return 0, 0, buffer.nwords
    if not 0 <= op.patch_word < len(plan.words):
        fail(plan, f"sequence op {index} (Dma on {op.fifo}) is patched by word {op.patch_word}, which does not exist")
    return (*(ranges[op.patch_word] or (0, 0)), buffer.nwords)


def _check_pattern(plan: Plan, index: int, op: Dma) -> int:
    """A Dma's sizes, strides and BD id within the shim's limits: the words past its first it reaches."""
    d = plan.device
    limits = (d.dma_repeat_max, *(d.shim.max_bd_wrap,) * 3)
    if (len(op.sizes) != 4 or len(op.strides) != 4 or any(not 1 <= s <= lim for s, lim in zip(op.sizes, limits))
            or not _strides_keep_verifier(op, d.shim.max_bd_stride) or not 0 <= op.bd_id < d.shim_bd_ids):
        fail(plan, f"sequence op {index} (Dma on {op.fifo}) has sizes {op.sizes}, strides {op.strides}, BD {op.bd_id}: "
                    f"sizes[0] must be 1..{d.dma_repeat_max}, the others 1..{d.shim.max_bd_wrap}, strides "
                    f"0..{d.shim.max_bd_stride}, only sizes[0]'s 0 where its size exceeds 1, "
                    f"BD ids 0..{d.shim_bd_ids - 1}")
    return sum((s - 1) * st for s, st in zip(op.sizes, op.strides))


def _strides_keep_verifier(op: Dma, most: int) -> bool:
    """mlir-aie's `verifyStridesWraps` (docs/platform.md section 5): every stride 0..`most` words,
    and of the four dimensions only the outermost (the repeat) may have stride 0 where its size
    exceeds 1."""
    inner = zip(op.sizes[1:], op.strides[1:])
    return all(0 <= st <= most for st in op.strides) and all(st >= 1 for s, st in inner if s > 1)


# ---- what moves per launch ----------------------------------------------------------------------------

def _check_balance(plan: Plan):
    moved = _objects_moved(plan)
    taken = objects_taken(plan)
    fifos = {f.name: f for f in plan.fifos}
    for f in plan.fifos:
        given = _produced(plan, f, fifos, moved, taken)
        for c in f.consumers:
            if c.kind is TileKind.MEM:
                continue
            got = (moved.get((f.name, Direction.S2MM), 0) if c.kind is TileKind.SHIM
                   else taken.get((f.name, c, Port.CONSUME), 0))
            if got != given:
                fail(plan, f"FIFO {f.name} gets {given} object(s) per launch from {f.producer.name} but "
                            f"{c.name} takes {got}: the launch would hang",
                      "Make the sequence move exactly the objects the cores acquire.")


def _objects_moved(plan: Plan) -> dict[tuple[str, Direction], float]:
    words: dict[tuple[str, Direction], int] = {}
    for run in dma_runs(plan.sequence):
        if isinstance(run, Moved):
            words[run.fifo, run.direction] = words.get((run.fifo, run.direction), 0) + run.nwords
    sizes = {f.name: f.nbytes // 4 for f in plan.fifos}
    return {key: n / sizes[key[0]] if key[0] in sizes else 0 for key, n in words.items()}


def objects_taken(plan: Plan) -> dict[tuple[str, Tile, Port], int]:
    """(FIFO, tile, port) -> the objects the tile's core acquires of it per launch."""
    taken: dict[tuple[str, Tile, Port], int] = {}
    for core in plan.cores:
        for step, times in launch_steps(core.program):
            if isinstance(step, Acquire):
                key = (step.fifo, core.tile, step.port)
                taken[key] = taken.get(key, 0) + step.count * times
    return taken


def _produced(plan: Plan, f, fifos, moved, taken, depth: int = 0):
    if f.producer.kind is TileKind.SHIM:
        return moved.get((f.name, Direction.MM2S), 0)
    if f.producer.kind is TileKind.COMPUTE:
        return taken.get((f.name, f.producer, Port.PRODUCE), 0)
    link = next((link for link in plan.links if f.name in link.destinations), None)
    if link is None or depth > len(plan.fifos):
        fail(plan, f"FIFO {f.name} starts on {f.producer.name} but no link there fills it")
    counts = {_produced(plan, fifos[s], fifos, moved, taken, depth + 1) for s in link.sources}
    if len(counts) != 1:
        fail(plan, f"the join into {f.name} gets different numbers of objects from {link.sources}",
              "Make the sequence move exactly the objects the cores acquire.")
    return counts.pop()


# ---- the Emit ---------------------------------------------------------------------------------------------

def _check_emit(plan: Plan):
    has_feedback = any(b.role is HostRole.FEEDBACK for b in plan.host_buffers)
    if plan.emit is None:
        if has_feedback:
            fail(plan, "it has a feedback buffer but no Emit")
        return
    e = plan.emit
    if not plan.full_elf or not has_feedback:
        fail(plan, f"it has an Emit but {'no feedback buffer' if plan.full_elf else 'the device runs no full ELF'}",
              "Only full-ELF plans have an Emit and a feedback buffer.")
    carried = [w.name for w in plan.words if w.kind is WordKind.CARRIED]
    feedback = next((f for f in plan.fifos if f.name == FEEDBACK), None)
    core = next((c for c in plan.cores if c.tile == e.tile), None)
    if [n for n, _ in e.next_values] != carried or feedback is None or feedback.producer != e.tile or core is None:
        fail(plan, f"the Emit on {e.tile.name} gives next values for {[n for n, _ in e.next_values]} (carried: "
                    f"{carried}) through '{FEEDBACK}' without a core and FIFO of its own")
    if plan.host_buffer(HostRole.FEEDBACK).nwords != e.nwords:
        fail(plan, f"the feedback buffer holds {plan.host_buffer(HostRole.FEEDBACK).nwords} words for the "
                    f"{len(e.target_words)} target words and {FLAG_WORDS} flag words")
