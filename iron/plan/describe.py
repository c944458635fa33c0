"""`describe(plan)`: a readable, deterministic summary of a Plan for people (IRON_DEBUG, the
guide): which group runs on which tile, each tile's memory against its budget, the FIFOs and
links, the scratchpad words, what fused with what, and every rule's decision."""
from __future__ import annotations

from dataclasses import dataclass

from iron.ir import SCALAR_SYMBOL
from iron.plan.fifos import FEEDBACK
from iron.plan.memory import budget, runs_on, tile_memory
from iron.plan.plan import (
    Choice,
    Const,
    Direction,
    Dma,
    HostRole,
    Load,
    Plan,
    TileKind,
    WordDef,
    WordOp,
    WordRef,
)


def describe(plan: Plan) -> str:
    if plan.segments:
        return _segmented(plan)
    image = "full ELF" if plan.full_elf else "xclbin + instructions"
    sections = [
        [f"{plan.name} on {plan.device.name}: {image} (image '{plan.image}')"],
        _section("tiles", _tiles(plan)),
        _section("memory (used / budget bytes)", _memory(plan)),
        _section("fifos", _fifos(plan)),
        _section("links", _links(plan)),
        *_decided(plan, _section("groups", _groups(plan))),
        _section("emit", _emit(plan)),
        _section("next carried values (host)", [f"{name} <- {_source(plan, src)}" for name, src in plan.carry]),
    ]
    return "\n".join(line for section in sections for line in section) + "\n"


def _decided(plan: Plan, *between: list[str]) -> list[list[str]]:
    """The sections every Plan's description has, segmented or not: its words (then `between`),
    every rule's decision, the choices the cost model made (when it made any), the DDR traffic."""
    choices = [f"{name}: {_choice(c)}" for name, c in plan.choices]
    return [_section("words", _words(plan.words)), *between,
            _section("rules", [f"{rule}: {what}" for rule, what in plan.rules]),
            _section("choices", choices) if choices else [],
            _section("DDR per call", [ddr_traffic(plan).text()])]


def _choice(c: Choice) -> str:
    other = "no other" if c.rejected is None else f"the best rejected, {c.rejected}, {_time(c.rejected_ns)}"
    return f"{c.rule}: {c.what} chosen by estimated time: {c.chosen}, {_time(c.chosen_ns)}; {other}"


def _time(ns: float) -> str:
    return f"{ns / 1000:.1f} us" if ns >= 100 else f"{ns:.1f} ns"


def _segmented(plan: Plan) -> str:
    """The segments and the bytes crossing each cut, the design's words and rules, then each
    segment as a Plan of its own."""
    image = "one full ELF" if plan.full_elf else "one xclbin + instructions per segment"
    rows = []
    for k, segment in enumerate(plan.segments):
        tiles = sorted({c.tile for c in segment.cores}, key=lambda t: (t.col, t.row))
        groups = [name for name, _ in segment.groups]
        crossing = f"then {plan.cuts[k].nbytes} bytes cross" if k < len(plan.cuts) else "last"
        held = f"{groups[0]}..{groups[-1]}" if groups else "the Emit alone"   # emit_own_segment
        rows.append((f"segment {k}", held, f"{len(tiles)} compute tiles",
                     f"{tiles[0].name}..{tiles[-1].name}", crossing))
    sections = [
        [f"{plan.name} on {plan.device.name}: {len(plan.segments)} segments run in order, {image}"],
        _section("segments", _columns(rows)),
        _section("cuts", [f"before {c.before}: {c.nbytes} bytes ({', '.join(c.values) or 'nothing'})"
                          for c in plan.cuts]),
        *_decided(plan),
    ]
    text = "\n".join(line for section in sections for line in section) + "\n"
    for k, segment in enumerate(plan.segments):
        text += f"segment {k}:\n" + "".join(f"  {line}\n" for line in describe(segment).splitlines())
    return text


@dataclass(frozen=True)
class Traffic:
    """The bytes one call's runtime sequences (every segment's) move between DDR and the array:
    `read` (of them `consts` from the weights and params) and `written`."""

    read: int
    consts: int
    written: int

    def text(self) -> str:
        return f"reads {self.read} bytes ({self.consts} of weights and params), writes {self.written} bytes"


def ddr_traffic(plan: Plan) -> Traffic:
    """What one call moves, counted from its Dma ops (a repeated move counts each time)."""
    read = consts = written = 0
    for segment in plan.configurations:
        roles = {b.name: b.role for b in segment.host_buffers}
        for op in (op for op in segment.sequence if isinstance(op, Dma)):
            if op.direction is Direction.S2MM:
                written += 4 * op.nwords
            else:
                read += 4 * op.nwords
                consts += 4 * op.nwords if roles[op.buffer] is HostRole.CONSTS else 0
    return Traffic(read, consts, written)


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"{title}:", *(f"  {line}" for line in lines or ["none"])]


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells, each column padded to its widest cell (the last one left as is)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(r, widths)), r[-1]]).rstrip() for r in rows]


def _tiles(plan: Plan) -> list[str]:
    rows = [(c.tile.name, ", ".join(c.groups), ", ".join(runs_on(plan, c.tile)) or "computes the next call's words")
            for c in sorted(plan.cores, key=lambda c: (c.tile.col, c.tile.row))]
    rows += [(t.name, str(t.kind), "") for t in plan.tiles if t.kind is not TileKind.COMPUTE]
    return _columns(rows)


def _memory(plan: Plan) -> list[str]:
    held = tile_memory(plan)
    rows = []
    for tile in sorted(held, key=lambda t: (t.col, t.row)):
        parts = ", ".join(f"{name} {n}" for name, n in held[tile])
        rows.append((tile.name, f"{sum(n for _, n in held[tile])} / {budget(plan, tile)}", parts))
    return _columns(rows)


def _fifos(plan: Plan) -> list[str]:
    holds = plan.holds
    rows = []
    for f in plan.fifos:
        route = f"{f.producer.name} -> {', '.join(t.name for t in f.consumers)}"
        how = "shared memory" if f.shared_memory else "DMA"
        rows.append((str(f.name), route, f"depth {f.depth}", f"{f.nbytes} bytes", how, holds.get(f.name, "")))
    return _columns(rows)


def _join(items) -> str:
    return ", ".join(map(str, items))


def _links(plan: Plan) -> list[str]:
    lines = []
    for link in plan.links:
        if len(link.sources) > 1:
            kind, offsets = "join", link.source_offsets
        elif len(link.destinations) > 1:
            kind, offsets = "split", link.destination_offsets
        else:
            kind, offsets = "forward", ()
        at = f" at bytes {_join(offsets)}" if offsets else ""
        lines.append(f"{link.tile.name}: {kind} {_join(link.sources)} -> {_join(link.destinations)}{at}")
    return lines


def word_text(w: WordDef) -> str:
    """How a word is computed: `given per call`, `= w1 + 1`, `= min(w0, 4)`."""
    if w.op is None:
        return "given per call"
    a, b = ("" if o is None else str(o) for o in (w.a, w.b))
    if w.op is WordOp.COPY:
        return f"= {a}"
    if w.op.value in SCALAR_SYMBOL:
        return f"= {a} {SCALAR_SYMBOL[w.op.value]} {b}"
    return f"= {w.op}({a}, {b})"


def _words(words) -> list[str]:
    rows = []
    for w in words:
        bound = f"in [{w.bound[0]}, {w.bound[1]}) for {w.what}" if w.bound else ""
        bound = f"{w.sink} in a flagged run (the states' sink)" if w.sink is not None else bound
        rows.append((f"w{w.index}", w.name, str(w.kind), word_text(w), bound))
    return _columns(rows)


def _groups(plan: Plan) -> list[str]:
    closed = plan.closed_by
    return [f"{name}: {', '.join(calls)}" + (f" (closed by {closed[name] or 'end of body'})" if name in closed else "")
            for name, calls in plan.groups]


def _emit(plan: Plan) -> list[str]:
    e = plan.emit
    if e is None:
        return []
    lines = [f"on {e.tile.name}, writing {len(e.target_words)} words through {FEEDBACK}, bounded ones "
             f"clamped into range, and in word {e.flag} how many were not"]
    return lines + [f"next {name} <- {_source(plan, source)}" for name, source in e.next_values]


def _source(plan: Plan, source) -> str:
    """Where a next carried value comes from, in words."""
    if isinstance(source, Load):
        return f"element of {source.source} at byte {source.offset}"
    if isinstance(source, WordRef):
        return f"w{source.index} ({plan.words[source.index].name})"
    if isinstance(source, Const):
        return f"const {source.value}"
    return f"output {source.placement}"
