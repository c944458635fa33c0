"""Lowering: a traced Program to a Plan (iron/compiler/plan.py), through fuse, place, allocate.

What it does: `lower_program(program, device, feeds=None)` fuses the calls into groups, places
them, then builds per group (per row part of a split group):
- `<g>_in`: one packed object from the host (input tensors, weight/param/state views, gathers
  with patched offsets, the per-call words its kernels read; broadcast to every row part of a
  split group), `<g>_w` / `<g>_w<p>` streamed matrix blocks through a mem tile, `<g>_out`
  (results other groups or the Emit read, broadcast; plus small inputs and constants a later
  group also reads, forwarded so the host sends them once: `forward_shared_input`),
  `<g>_host` (outputs, state writes, carried elements, to the host); a split group's parts
  send `<g>_part<p>` to a mem-tile join whose object goes on as `<g>_out` or `<g>_host`;
- one Function per group (plus `<g>_block` for a streamed matrix), kernel calls following each
  kernel's C ABI, intermediates in Buffers, and the core program acquiring, looping over matrix
  blocks, invoking and releasing;
- the runtime sequence: per group, waits on earlier writers of the states it touches, MM2S Dmas
  filling its inputs, S2MM Dmas draining its outputs, then waits on every S2MM FIFO; DMA sizes
  within the shim's limits and BD ids recycled only after a covering wait;
- only when a core would take more FIFOs by DMA than its tile has input channels, the forwards
  `fit_compute_channels` (place.py) chooses: a carrier group copies into its `_out` what the
  core would read from other FIFOs (objects it receives, or the core's whole `_in`, which it then
  loads itself); the Program is lowered once to see the channels and again with the forwards;
- only when the shim channels run out, the merges `share_shim_channels` (place.py) chooses:
  shareable `_in` FIFOs of several groups fed by one `shared_in<k>` FIFO through a mem-tile
  split (their moves issued together where the first one was), `_host` FIFOs drained through a
  mem-tile join into one `shared_host<k>` (their moves where the last one was);
- on a full-ELF device with carried values, the Emit core computing the next call's words into
  `feedback`.
Every Plan it returns has passed `invariants.check_plan`.

What it does not: print MLIR or C++, build, or run anything; it never imports the runtime.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from iron.compiler.allocate import fit, host_buffers, host_placements
from iron.compiler.fuse import Group, call_label, fuse, tensor_inputs
from iron.compiler.invariants import check_plan, dma_channels
from iron.compiler.place import (
    CoreInputs,
    MemChannels,
    Relay,
    SharedChannel,
    ShimRequest,
    Site,
    assign_shims,
    fit_compute_channels,
    is_host_tensor,
    place,
    share_shim_channels,
)
from iron.compiler.plan import (
    Acquire,
    Buffer,
    Const,
    Core,
    Direction,
    Dma,
    Element,
    Emit,
    Fifo,
    FifoRole,
    Function,
    Imm,
    Invoke,
    KernelStep,
    Link,
    Load,
    Loop,
    Output,
    Plan,
    Port,
    Ptr,
    Release,
    ScalarStep,
    Tile,
    TileKind,
    Wait,
    WordKind,
    WordRef,
)
from iron.compiler.words import Access, WordTable, base_name, view_access, whole_access
from iron.errors import LoopError
from iron.ir import Node, Op, Program, describe
from iron.kernels.library import Copy, Softmax

HOST = Tile(-1, 0, TileKind.SHIM)   # a FIFO end on the shim tile that `assign_shims` picks
DEPTH = 2
FORWARD_BYTES = 4096
I32 = np.dtype(np.int32)


def lower_program(program: Program, device, feeds: Plan | None = None) -> Plan:
    """The Plan of `program` on `device`; `feeds`: the Plan whose scratchpad the Emit writes."""
    check_feeds(program, device, feeds)
    with_emit = bool(device.full_elf and program.carried_names)
    groups = fuse(program)
    users = outside_users(program, groups, with_emit)
    layout = place(program, groups, device, with_emit, users)
    lowering = Lowering(program, device, users, layout, feeds).lower_cores()
    relays, channel_rules = fit_compute_channels(program, lowering.core_inputs(), device)
    if relays:
        lowering = Lowering(program, device, users, layout, feeds, relays).lower_cores()
    plan = lowering.finish(groups, channel_rules)
    check_plan(plan)
    return plan


def check_feeds(program: Program, device, feeds: Plan | None):
    """Refuse a `feeds` Plan built for another device or carrying other values."""
    if feeds is None:
        return
    if feeds.device != device:
        raise LoopError(
            f"{program.name} is compiled for {device.name} but feeds {feeds.name}, compiled for "
            f"{feeds.device.name}: compile both versions for the same device."
        )
    theirs = tuple(w.name for w in feeds.words if w.kind is WordKind.CARRIED)
    if theirs != program.carried_names:
        raise LoopError(
            f"{program.name} carries ({', '.join(program.carried_names)}) but feeds {feeds.name}, "
            f"which carries ({', '.join(theirs)}): give both bodies the same Carried parameters."
        )
    mine = {v.arg[0] for v in program.scalars}
    missing = [w.name for w in feeds.words if w.kind is WordKind.SCRATCHPAD and w.name not in mine]
    if missing:
        raise LoopError(
            f"{feeds.name} takes Scratchpad value(s) {', '.join(missing)} that {program.name} does "
            f"not have, so {program.name}'s Emit cannot write them: make them Carried, or give "
            f"{program.name} the same Scratchpad values."
        )


def outside_users(program: Program, groups: tuple[Group, ...], with_emit: bool) -> dict[Node, tuple[str, ...]]:
    """Who uses each call's result outside its group: group names, "host" per output or carried
    element, "emit"."""
    group_of = {c: g.name for g in groups for c in g.calls}
    users: dict[Node, list[str]] = {}
    for g in groups:
        for call in g.calls:
            for node in tensor_inputs(call):
                if group_of.get(node, g.name) != g.name and g.name not in users.get(node, []):
                    users.setdefault(node, []).append(g.name)
    for node in program.outputs:
        users.setdefault(node, []).append("host")
    for _, value in program.carry:
        if value.op == Op.ELEM:
            users.setdefault(value.src[0], []).extend(["host", "emit"] if with_emit else ["host"])
    return {k: tuple(v) for k, v in users.items()}


def forwarded_inputs(layout) -> dict[str, dict[Node, tuple[str, ...]]]:
    """Small host tensors (at most FORWARD_BYTES: inputs, weights, params and views of them,
    not states) that several groups read: the first unsplit group loading one forwards it in
    its `_out` to the later readers, so the host moves it once per launch and each reader needs
    no shim channel for it. Returns loader group -> {node: reader groups}."""
    loader: dict[Node, str] = {}
    found: dict[str, dict[Node, list[str]]] = {}
    for site in layout.sites:
        g = site.group.name
        for node in _host_reads(site):
            if loader.get(node, g) != g:
                readers = found[loader[node]][node]
                readers += [] if g in readers else [g]
            elif node not in loader and len(site.tiles) == 1 and _forwardable(node):
                loader[node] = g
                found.setdefault(g, {})[node] = []
    return {g: {n: tuple(r) for n, r in nodes.items() if r} for g, nodes in found.items()}


def forwarded_to(forwards) -> set[tuple[str, Node]]:
    """(reader group, node) of every host tensor an earlier group forwards to a reader."""
    return {(r, node) for nodes in forwards.values() for node, readers in nodes.items() for r in readers}


def _host_reads(site: Site) -> list[Node]:
    streamed = site.stream.matrix if site.stream is not None else None
    return [n for c in site.group.calls for n in tensor_inputs(c) if is_host_tensor(n) and n is not streamed]


def _forwardable(node: Node) -> bool:
    base = node.src[0] if node.op == Op.VIEW else node
    constant = base.op == Op.INPUT or base.arg[0] in ("weight", "param")
    return constant and node.size * node.dtype.itemsize <= FORWARD_BYTES


# ---- objects ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StateWrite:
    """The key of the `_host` region where a call writes a state (out=)."""

    call: Node


@dataclass(frozen=True)
class Move:
    """A lowered move of the runtime sequence: `access`'s words between host `buffer` and
    `fifo`; `finish_sequence` cuts it into Dma ops within the shim's limits."""

    direction: Direction
    fifo: str
    buffer: str
    access: Access

@dataclass
class Packing:
    """One FIFO object's regions: key -> byte offset, each a whole number of 4-byte words, with
    where the host side of each region lies (buffer, Access) when the sequence moves it."""

    offsets: dict = field(default_factory=dict)
    moves: list = field(default_factory=list)     # (buffer, Access) per region, in object order
    kinds: set = field(default_factory=set)
    what: list = field(default_factory=list)
    nbytes: int = 0

    def add(self, key, size: int, dtype, what: str, move=None) -> int:
        if key not in self.offsets:
            self.offsets[key] = self.nbytes
            self.nbytes += -(-size // 4) * 4
            self.kinds.add(np.dtype(dtype))
            self.what.append(what)
            if move is not None:
                self.moves.append(move)
        return self.offsets[key]

    @property
    def dtype(self) -> np.dtype:
        if len(self.kinds) == 1:
            only = next(iter(self.kinds))
            if self.nbytes % only.itemsize == 0:
                return only
        return I32


@dataclass
class Part:
    """One core's share of a group: all of it, or `count` result rows from `start` (a split)."""

    prefix: str
    site: Site
    tile: Tile
    number: int
    start: int = 0
    count: int | None = None
    ins: Packing = field(default_factory=Packing)
    host: Packing = field(default_factory=Packing)
    out: Packing = field(default_factory=Packing)
    homes: dict = field(default_factory=dict)       # node -> (source, byte offset)
    buffers: list = field(default_factory=list)
    consumed: list = field(default_factory=list)    # FIFOs of other groups it reads
    copies: list = field(default_factory=list)      # KernelSteps exporting results

    @property
    def split(self) -> bool:
        return self.count is not None

    @property
    def stream(self):
        return self.site.stream

    @property
    def in_fifo(self) -> str:
        """The group's `_in` FIFO: every row part gets the same object (a broadcast)."""
        return f"{self.site.group.name}_in"


def neighbours(a: Tile, b: Tile) -> bool:
    return abs(a.col - b.col) + abs(a.row - b.row) == 1


def copy_step(dtype, count: int, source: Ptr, dest: Ptr) -> KernelStep:
    return KernelStep(Copy.symbol(dtype), (source, dest, Imm(max(1, count))))


class Lowering:
    """The pieces of a Plan while a Program is lowered, group by group."""

    def __init__(self, program: Program, device, users, layout, feeds: Plan | None = None,
                 relays: list[Relay] | tuple = ()):
        self.program, self.device, self.users, self.layout, self.feeds = program, device, users, layout, feeds
        self.table = WordTable(program)
        self.placements = host_placements(program)
        self.results: dict[Node, tuple[str, int]] = {}   # node -> (FIFO, offset) other groups read
        self.fifos: list[Fifo] = []
        self.links: list[Link] = []
        self.buffers: list[Buffer] = []
        self.functions: list[Function] = []
        self.cores: list[Core] = []
        self.sequence: list[Move | Wait] = []
        self.holds: dict[str, str] = {}
        self.state_writer: dict[str, str] = {}
        self.waited: set[str] = set()
        self.after_writes: set[str] = set()   # groups touching a state an earlier group writes
        self.forwards = forwarded_inputs(layout)
        self.forwarded_to = forwarded_to(self.forwards)
        self.relays = {r.reader: r for r in relays}    # reader group -> its `fit_compute_channels` Relay
        self.relayed: dict[tuple[str, object], tuple[str, int]] = {}   # (reader, key) -> (carrier's _out, offset)
        self.emit: Emit | None = None
        self.host_values: tuple = ()

    # ---- host tensors ---------------------------------------------------------------------------
    def placement(self, name: str):
        return next(p for p in self.placements if p.name == name)

    def host_access(self, node: Node) -> tuple[str, Access]:
        """(host buffer, Access) of an input, a declared memory or a view of one."""
        base = node.src[0] if node.op == Op.VIEW else node
        p = self.placement(base_name(base)[1])
        access = view_access(node, self.table) if node.op == Op.VIEW else whole_access(node)
        return p.buffer, replace(access, offset=p.offset + access.offset)

    def fifo(self, name, role, producer, consumers, nbytes, dtype, what, shared=False):
        self.fifos.append(Fifo(name, producer, tuple(consumers), DEPTH, nbytes, np.dtype(dtype), shared, role))
        self.holds[name] = what

    # ---- the cores ----------------------------------------------------------------------------------
    def lower_cores(self) -> Lowering:
        """Every group's FIFOs, Functions, cores and moves, then the Emit's."""
        for site in self.layout.sites:
            self.lower_site(site)
        emit_values, self.host_values = self.carry_sources()
        if self.layout.emit is not None:
            target = self.feeds.words if self.feeds is not None else self.table.defs()
            self.emit = self.lower_emit(self.layout.emit, emit_values, target)
        return self

    def core_inputs(self) -> list[CoreInputs]:
        """What each core receives, in core order, for `fit_compute_channels`."""
        by_dma = {tile: ins for tile, (ins, _) in dma_channels(self.fifos).items()}
        sites = {s.group.name: s for s in self.layout.sites}
        cores = []
        for core in self.cores:
            site = sites.get(core.group)
            out, own_in = f"{core.group}_out", f"{core.group}_in"
            carries = site is not None and len(site.tiles) == 1 and self._has_fifo(out)
            loads = site is not None and self._has_fifo(own_in)
            movable = loads and all(self._state(n) is None for n in _host_reads(site))
            cores.append(CoreInputs(core.group, core.tile, tuple(by_dma.get(core.tile, ())),
                                    tuple(f.name for f in self.fifos if core.tile in f.consumers),
                                    out if carries else None, own_in if loads else None, movable))
        return cores

    # ---- a group ----------------------------------------------------------------------------------
    def lower_site(self, site: Site):
        self.sequence += self._state_waits(site.group)
        parts = self._parts(site)
        for part in parts:
            self._layout_inputs(part)
            self._layout_results(part)
        self._group_fifos(site, parts)
        for part in parts:
            self._program(part)
        self._group_sequence(site, parts)

    def _parts(self, site: Site) -> list[Part]:
        g = site.group
        if len(site.tiles) == 1:
            return [Part(g.name, site, site.tiles[0], 0)]
        count = g.calls[0].shape[0] // len(site.tiles)
        return [Part(f"{g.name}_p{p}", site, tile, p, p * count, count) for p, tile in enumerate(site.tiles)]

    def _layout_inputs(self, part: Part):
        """The `_in` regions: the group's host items (but those a carrier forwards to it), then
        those of the groups whose `_in` it carries."""
        g = part.site.group.name
        for key, size, dtype, what, move in self._host_items(part.site):
            if (g, key) not in self.relayed:
                part.ins.add(key, size, dtype, what, move)
        for relay in self._carried_by(g):
            if f"{relay.reader}_in" in relay.fifos:
                for item in self._host_items(self._site(relay.reader)):
                    part.ins.add(*item)

    def _host_items(self, site: Site) -> list[tuple]:
        """(key, bytes, dtype, what, move) of what a group loads from the host: the host tensors
        it reads (but a streamed matrix and those an earlier group forwards to it), then per-call
        words, in first-use order."""
        g, items = site.group.name, []
        for call in site.group.calls:
            for node in tensor_inputs(call):
                streamed = site.stream is not None and node is site.stream.matrix
                if is_host_tensor(node) and not streamed and (g, node) not in self.forwarded_to:
                    move = self.host_access(node)
                    items.append((node, move[1].nwords * 4, node.dtype, describe(node), move))
            for name, expr in self._dynamic_attrs(call):
                word = self._attr_word(call, name, expr)
                items.append((WordRef(word), 4, I32, self.table.words[word].name, ("words", Access(word, ((1, 1),)))))
        return items

    def _site(self, group: str) -> Site:
        return next(s for s in self.layout.sites if s.group.name == group)

    def _carried_by(self, group: str) -> list[Relay]:
        return [r for r in self.relays.values() if r.carrier == group]

    def _dynamic_attrs(self, call: Node) -> list[tuple[str, Node]]:
        c = call.arg
        return list(zip(c.scalar_attrs, call.src[c.n_inputs + c.writes:]))

    def _attr_word(self, call: Node, name: str, expr: Node) -> int:
        if issubclass(call.arg.kernel, Softmax) and name == "length":
            n = call.src[0].shape[0]
            what = f"{call.arg.kernel.__name__} {name}={describe(expr)}"
            return self.table.bounded(expr, 1, n + 1, what, WordKind.CORE)
        return self.table.word(expr, WordKind.CORE)

    def _layout_results(self, part: Part):
        """Where each call's result lives (its home) and where it is exported to, and the `_out`
        regions of the host tensors this group forwards."""
        for node in self.forwards.get(part.site.group.name, {}):
            out = part.out.add(node, node.size * node.dtype.itemsize, node.dtype, describe(node))
            self.results[node] = (f"{part.prefix}_out", out)
            part.copies.append(copy_step(node.dtype, node.size, self._read(part, node, False),
                                         Ptr(f"{part.prefix}_out", out)))
        for call in part.site.group.calls:
            if call.arg.writes:
                buffer, access = self.host_access(call.src[call.arg.n_inputs])
                part.host.add(StateWrite(call), access.nwords * 4, call.dtype,
                              describe(call.src[call.arg.n_inputs]), (buffer, access))
            elif part.split:
                self._split_home(part, call)
            else:
                self._home(part, call)
        for relay in self._carried_by(part.site.group.name):
            self._relay_out(part, relay)

    def _relay_out(self, part: Part, relay: Relay):
        """`fit_compute_channels`: copy into this carrier's `_out` what `relay.reader` would take
        from `relay.fifos`, and note where the reader finds each."""
        out = f"{part.prefix}_out"
        for key, size, dtype, what, source in self._relay_items(part, relay):
            fresh = key not in part.out.offsets
            offset = part.out.add(key, size, dtype, what)
            self.relayed[(relay.reader, key)] = (out, offset)
            if fresh:
                part.copies.append(copy_step(dtype, size // np.dtype(dtype).itemsize, source, Ptr(out, offset)))

    def _relay_items(self, part: Part, relay: Relay) -> list[tuple]:
        """(key, bytes, dtype, what, where the carrier has it) of what the reader would take from
        the relayed FIFOs: its `_in`'s host items (loaded into the carrier's `_in`), and the
        tensors it reads from FIFOs the carrier receives."""
        items = []
        if f"{relay.reader}_in" in relay.fifos:
            items += [(key, size, dtype, what, Ptr(part.in_fifo, part.ins.offsets[key]))
                      for key, size, dtype, what, _ in self._host_items(self._site(relay.reader))]
        for node in self._reads(relay.reader):
            if self.results.get(node, ("",))[0] in relay.fifos:
                what = call_label(self.program, node) if node.op == Op.CALL else describe(node)
                items.append((node, node.size * node.dtype.itemsize, node.dtype, what,
                              self._read(part, node, False)))
        return items

    def _reads(self, reader: str) -> list[Node]:
        """The tensors a group (or the Emit) reads that it does not compute, in first-use order."""
        if reader == "emit":
            return [v.src[0] for _, v in self.program.carry if v.op == Op.ELEM]
        calls = self._site(reader).group.calls
        return list(dict.fromkeys(n for c in calls for n in tensor_inputs(c) if n not in calls))

    def _source(self, group: str, node: Node) -> tuple[str, int] | None:
        """(FIFO, offset) where `group` finds a tensor another group sends: a carrier's `_out`
        when `fit_compute_channels` relays it, else where it was put."""
        return self.relayed.get((group, node)) or self.results.get(node)

    def _split_home(self, part: Part, call: Node):
        size = part.count * call.dtype.itemsize
        if call is part.site.group.calls[-1]:
            part.homes[call] = (f"{part.site.group.name}_part{part.number}", 0)
        else:
            part.homes[call] = (self._buffer(part, call, size), 0)

    def _home(self, part: Part, call: Node):
        places = [(f"{part.prefix}_host", part.host.add(key, *self._region(call, name)))
                  for key, name in self._host_uses(call)]
        if any(u != "host" for u in self.users.get(call, ())):
            out = part.out.add(call, call.size * call.dtype.itemsize, call.dtype,
                               call_label(self.program, call))
            places.append((f"{part.prefix}_out", out))
            self.results[call] = (f"{part.prefix}_out", out)
        if not places:
            places = [(self._buffer(part, call, call.size * call.dtype.itemsize), 0)]
        part.homes[call] = places[0]
        for source, offset in places[1:]:
            part.copies.append(copy_step(call.dtype, call.size, Ptr(*places[0]), Ptr(source, offset)))

    def _host_uses(self, call: Node) -> list[tuple[Output, str]]:
        names = [f"out{i}" for i, n in enumerate(self.program.outputs) if n is call]
        names += [f"carry.{name}" for name, v in self.program.carry if v.op == Op.ELEM and v.src[0] is call]
        return [(Output(name), name) for name in names]

    def _region(self, call: Node, placement_name: str):
        p = self.placement(placement_name)
        move = (p.buffer, Access(p.offset, ((p.nwords, 1),)))
        return p.nwords * 4, call.dtype, placement_name, move

    def _buffer(self, part: Part, call: Node, size: int) -> str:
        name = f"{part.prefix}_buf{len(part.buffers)}"
        buffer = Buffer(name, part.tile, -(-size // 4) * 4, call.dtype)
        part.buffers.append(buffer)
        self.buffers.append(buffer)
        self.holds[name] = call_label(self.program, call)
        return name

    # ---- FIFOs of a group -------------------------------------------------------------------------
    def _group_fifos(self, site: Site, parts: list[Part]):
        ins = parts[0].ins
        if ins.nbytes:
            self.fifo(parts[0].in_fifo, FifoRole.INPUT, HOST, [p.tile for p in parts], ins.nbytes, ins.dtype, ", ".join(ins.what))
        for part in parts:
            part.consumed = self._consumed(part)
            if part.host.nbytes:
                self.fifo(f"{part.prefix}_host", FifoRole.HOST, part.tile, [HOST], part.host.nbytes, part.host.dtype,
                          ", ".join(part.host.what))
            if part.out.nbytes:
                self._out_fifo(f"{part.prefix}_out", part.tile, site, part.out)
        if site.stream is not None:
            self._stream_fifos(site, parts)
        if parts[0].split:
            self._join_fifos(site, parts)

    def _consumer_tiles(self, group: Group, with_host: bool) -> list[Tile]:
        names = {u for c in group.calls for u in self.users.get(c, ()) if u != "host"}
        names |= {r for readers in self.forwards.get(group.name, {}).values() for r in readers}
        names = {n for n in names if n not in self.relays or f"{group.name}_out" not in self.relays[n].fifos}
        tiles = [t for s in self.layout.sites if s.group.name in names for t in s.tiles]
        if "emit" in names:
            tiles.append(self.layout.emit)
        return tiles + ([HOST] if with_host else [])

    def _out_fifo(self, name: str, tile: Tile, site: Site, out: Packing):
        consumers = self._consumer_tiles(site.group, with_host=False)
        shared = len(consumers) == 1 and neighbours(tile, consumers[0])
        self.fifo(name, FifoRole.OUTPUT, tile, consumers, out.nbytes, out.dtype, ", ".join(out.what), shared)

    def _consumed(self, part: Part) -> list[str]:
        g = part.site.group.name
        return list(dict.fromkeys(
            self._source(g, n)[0] for c in part.site.group.calls for n in tensor_inputs(c)
            if self._source(g, n) is not None and n not in part.homes and n not in part.ins.offsets))

    def _stream_fifos(self, site: Site, parts: list[Part]):
        s, g = site.stream, site.group.name
        block = s.rows * (s.matrix.size // s.matrix.shape[0]) * s.matrix.dtype.itemsize
        what = f"rows of {describe(s.matrix)}"
        self.fifo(f"{g}_w_mem", FifoRole.WEIGHTS, HOST, [s.mem], block * s.parts, s.matrix.dtype, what)
        if not parts[0].split:
            self.fifo(f"{g}_w", FifoRole.WEIGHTS, s.mem, [parts[0].tile], block, s.matrix.dtype, what)
            self.links.append(Link(s.mem, (f"{g}_w_mem",), (f"{g}_w",)))
            return
        names = tuple(f"{g}_w{p.number}" for p in parts)
        for name, part in zip(names, parts):
            self.fifo(name, FifoRole.WEIGHTS, s.mem, [part.tile], block, s.matrix.dtype, what)
        self.links.append(Link(s.mem, (f"{g}_w_mem",), names,
                               destination_offsets=tuple(p.number * block for p in parts)))

    def _join_fifos(self, site: Site, parts: list[Part]):
        g, last = site.group.name, site.group.calls[-1]
        size = parts[0].count * last.dtype.itemsize
        names = tuple(f"{g}_part{p.number}" for p in parts)
        for name, part in zip(names, parts):
            self.fifo(name, FifoRole.PART, part.tile, [site.stream.mem], size, last.dtype, call_label(self.program, last))
        host = "host" in self.users.get(last, ())
        consumers = self._consumer_tiles(site.group, with_host=host)
        role = FifoRole.OUTPUT if any(t != HOST for t in consumers) else FifoRole.HOST
        joined = f"{g}_{role.value}"
        self.fifo(joined, role, site.stream.mem, consumers, size * len(parts), last.dtype, call_label(self.program, last))
        self.links.append(Link(site.stream.mem, names, (joined,), source_offsets=tuple(p.number * size for p in parts)))
        self.results[last] = (joined, 0)

    # ---- a core's program ---------------------------------------------------------------------------
    def _program(self, part: Part):
        main = self._main_steps(part)
        block = self._block_function(part)
        ins = ([part.in_fifo] if part.ins.nbytes else []) + part.consumed
        outs = [f for f in (f"{part.prefix}_host", f"{part.prefix}_out") if self._has_fifo(f)]
        if part.split:
            outs.append(f"{part.site.group.name}_part{part.number}")
        objects = [*ins, *outs, *(b.name for b in part.buffers)]
        program = [*(Acquire(f, Port.CONSUME) for f in ins), *(Acquire(f, Port.PRODUCE) for f in outs)]
        if block is not None:
            w = self._w_name(part)
            params = self._params(block.steps, [*objects, w])
            self.functions.append(replace(block, params=params))
            program.append(Loop(part.stream.blocks, (Acquire(w, Port.CONSUME), Invoke(block.name, params),
                                                     Release(w, Port.CONSUME))))
        if main:
            params = self._params(main, objects)
            self.functions.append(Function(part.prefix, params, tuple(main)))
            program.append(Invoke(part.prefix, params))
        program += [*(Release(f, Port.CONSUME) for f in ins), *(Release(f, Port.PRODUCE) for f in outs)]
        self.cores.append(Core(part.tile, part.site.group.name, tuple(program), self.device.compute.default_stack_bytes))

    def _has_fifo(self, name: str) -> bool:
        return any(f.name == name for f in self.fifos)

    def _w_name(self, part: Part) -> str:
        g = part.site.group.name
        return f"{g}_w{part.number}" if part.split else f"{g}_w"

    @staticmethod
    def _params(steps, objects: list[str]) -> tuple[str, ...]:
        used = set()
        for step in steps:
            for arg in (*step.args,) if isinstance(step, KernelStep) else (step.dest, step.a, step.b):
                if isinstance(arg, (Ptr, Load)):
                    used.add(arg.source)
        return tuple(o for o in objects if o in used)

    def _main_steps(self, part: Part) -> list:
        steps = []
        for call in part.site.group.calls:
            if not (part.stream is not None and call is part.site.group.calls[0]):
                steps += self._call_steps(part, call)
        return steps + part.copies

    def _read(self, part: Part, node: Node, sliced: bool) -> Ptr:
        shift = part.start * node.dtype.itemsize if sliced else 0
        if node in part.homes:
            return Ptr(*part.homes[node])
        if node in part.ins.offsets:
            return Ptr(part.in_fifo, part.ins.offsets[node] + shift)
        fifo, offset = self._source(part.site.group.name, node)
        return Ptr(fifo, offset + shift)

    def _call_steps(self, part: Part, call: Node) -> list:
        c, steps = call.arg, []
        sliced = part.split
        ins = [self._read(part, n, sliced) for n in call.src[: c.n_inputs]]
        shapes = [(part.count,) if sliced else n.shape for n in call.src[: c.n_inputs]]
        out_shape = (part.count,) if sliced else call.shape
        if c.writes:
            dest_view = call.src[c.n_inputs]
            dest = Ptr(f"{part.prefix}_host", part.host.offsets[StateWrite(call)])
            if c.kernel.accumulates:
                steps.append(copy_step(dest_view.dtype, dest_view.size, self._read(part, dest_view, False), dest))
        else:
            dest = Ptr(*part.homes[call])
        return [*steps, self._kernel_step(part, call, [*ins, dest], shapes, out_shape)]

    def _kernel_step(self, part: Part, call: Node, ptrs, shapes, out_shape) -> KernelStep:
        kernel = call.arg.kernel
        sizes = kernel.sizes([tuple(s) for s in shapes], tuple(out_shape))
        attrs = self._attr_args(part, call)
        return KernelStep(kernel.symbol(call.src[0].dtype, call.dtype), (*ptrs, *(Imm(int(s)) for s in sizes), *attrs))

    def _attr_args(self, part: Part, call: Node) -> list:
        dynamic = dict(self._dynamic_attrs(call))
        values = call.arg.attr_dict
        args = []
        for name, ctype in call.arg.kernel.c_attrs:
            if name in dynamic:
                key = WordRef(self._attr_word(call, name, dynamic[name]))
                where = self.relayed.get((part.site.group.name, key))
                args.append(Load(*where) if where else Load(part.in_fifo, part.ins.offsets[key]))
            elif values.get(name) is None:
                args.append(Imm(int(call.src[0].shape[0]), ctype))
            else:
                args.append(Imm(float(values[name]) if ctype == "f32" else int(values[name]), ctype))
        return args

    def _block_function(self, part: Part) -> Function | None:
        """`<part>_block`: the leading matrix call on one streamed block of rows."""
        if part.stream is None:
            return None
        s, call = part.stream, part.site.group.calls[0]
        x = call.src[1]
        row_out = int(np.prod(call.shape[1:], dtype=np.int64)) * call.dtype.itemsize
        home = part.homes[call]
        ptrs = [Ptr(self._w_name(part), 0), self._read(part, x, False),
                Ptr(home[0], home[1], block_stride=s.rows * row_out)]
        shapes = [(s.rows, *s.matrix.shape[1:]), x.shape]
        step = self._kernel_step(part, call, ptrs, shapes, (s.rows, *call.shape[1:]))
        return Function(f"{part.prefix}_block", (), (step,), blocked=True)

    # ---- the runtime sequence of a group ------------------------------------------------------------
    def _state_waits(self, group: Group) -> list[Wait]:
        touched = {self._state(n) for c in group.calls for n in (*tensor_inputs(c), *c.src[: c.arg.n_inputs + c.arg.writes])}
        fifos = {self.state_writer[s] for s in touched if s in self.state_writer}
        if fifos:
            self.after_writes.add(group.name)
        waits = [Wait(f) for f in sorted(fifos) if f not in self.waited]
        self.waited |= fifos
        return waits

    @staticmethod
    def _state(node: Node) -> str | None:
        memory = node.src[0] if node.op == Op.VIEW else node
        return memory.arg[1] if memory.op == Op.MEMORY and memory.arg[0] == "state" else None

    def _group_sequence(self, site: Site, parts: list[Part]):
        self.sequence += [Move(Direction.MM2S, parts[0].in_fifo, *m) for m in parts[0].ins.moves]
        if site.stream is not None:
            self.sequence += self._stream_moves(site)
        for part in parts:
            self.sequence += [Move(Direction.S2MM, f"{part.prefix}_host", *m) for m in part.host.moves]
        if parts[0].split and "host" in self.users.get(site.group.calls[-1], ()):
            self.sequence += self._join_drain(site)
        for call in site.group.calls:
            if call.arg.writes:
                self.state_writer[self._state(call.src[call.arg.n_inputs])] = f"{site.group.name}_host"
                self.waited.discard(f"{site.group.name}_host")

    def _stream_moves(self, site: Site) -> list[Move]:
        s = site.stream
        buffer, access = self.host_access(s.matrix)
        if s.parts > 1:
            access = self._split_order(s, access)
        return [Move(Direction.MM2S, f"{site.group.name}_w_mem", buffer, access)]

    @staticmethod
    def _split_order(s, access: Access) -> Access:
        """The matrix words in split-link order: per block, each part's rows of that block."""
        m = s.matrix.shape[0]
        row = access.nwords // m
        stride = access.dims[0][1] if len(access.dims) > 1 else row
        dims = ((s.blocks, s.rows * stride), (s.parts, (m // s.parts) * stride), (s.rows, stride), (row, 1))
        return replace(access, dims=dims)

    def _join_drain(self, site: Site) -> list[Move]:
        last = site.group.calls[-1]
        index = next(i for i, n in enumerate(self.program.outputs) if n is last)
        p = self.placement(f"out{index}")
        return [Move(Direction.S2MM, self.results[last][0], p.buffer, Access(p.offset, ((p.nwords, 1),)))]

    # ---- the Emit ---------------------------------------------------------------------------------------
    def carry_sources(self) -> tuple[tuple, tuple]:
        """(for the Emit, for Plan.carry): where each next carried value comes from: a word of
        this call (a value word or a "next" word), or an element a group computed (its `_out`
        region for the Emit, its "carry.<name>" output placement for the host)."""
        emit, host = [], []
        for name, value in self.program.carry:
            if value.op == Op.ELEM:
                fifo, offset = self._source("emit", value.src[0]) or ("", 0)
                emit.append((name, Element(fifo, offset)))
                host.append((name, Output(f"carry.{name}")))
            else:
                source = WordRef(self.table.next_value(value))
                emit.append((name, source))
                host.append((name, source))
        return tuple(emit), tuple(host)

    def lower_emit(self, tile: Tile, next_values, target) -> Emit:
        words = len(self.table.words)
        self.fifo("emit_in", FifoRole.EMIT_IN, HOST, [tile], 4 * words, I32, "this call's words")
        self.fifo("feedback", FifoRole.FEEDBACK, tile, [HOST], 4 * len(target), I32, "the next call's words")
        elements = list(dict.fromkeys(src.fifo for _, src in next_values if isinstance(src, Element)))
        steps = self._emit_steps(dict(next_values), target)
        objects = ("emit_in", *elements, "feedback")
        self.functions.append(Function("emit", objects, steps))
        program = (*(Acquire(f, Port.CONSUME) for f in objects[:-1]), Acquire("feedback", Port.PRODUCE),
                   Invoke("emit", objects),
                   *(Release(f, Port.CONSUME) for f in objects[:-1]), Release("feedback", Port.PRODUCE))
        self.cores.append(Core(tile, "emit", program, self.device.compute.default_stack_bytes))
        self.sequence += [Move(Direction.MM2S, "emit_in", "words", Access(0, ((words, 1),))),
                          Move(Direction.S2MM, "feedback", "feedback", Access(0, ((len(target), 1),)))]
        return Emit(tile, tuple(next_values), tuple(target), "feedback")

    def _emit_steps(self, next_values: dict, target) -> tuple:
        mine = {w.name: w.index for w in self.table.words if w.kind.given}

        def load(source):
            if source is None:
                return None
            if isinstance(source, Const):
                return Imm(int(source.value))
            if isinstance(source, Element):
                return Load(source.fifo, source.offset)
            return Load("emit_in", 4 * source.index)

        def target_load(operand):
            if not isinstance(operand, WordRef):
                return load(operand)
            return Load("feedback", 4 * operand.index)

        steps = []
        for w in target:
            dest = Ptr("feedback", 4 * w.index)
            if w.kind is WordKind.CARRIED:
                steps.append(ScalarStep(dest, "copy", load(next_values[w.name])))
            elif w.kind is WordKind.SCRATCHPAD:
                steps.append(ScalarStep(dest, "copy", load(WordRef(mine[w.name]))))
            else:
                steps.append(ScalarStep(dest, w.op, target_load(w.a), target_load(w.b)))
        return tuple(steps)

    # ---- the Plan ----------------------------------------------------------------------------------------
    def finish(self, groups: tuple[Group, ...], channel_rules: tuple = ()) -> Plan:
        emit = self.emit
        share_rules = self._share_shim_channels()
        shims, shim_rules = assign_shims(self._shim_requests(), self.device)
        fifos = tuple(self._resolved(f, shims) for f in self.fifos)
        sequence = finish_sequence(self.sequence, {f.name: f for f in fifos}, self.device)
        words = self.table.defs()
        plan = Plan(
            device=self.device, name=self.program.name, full_elf=self.device.full_elf,
            image="elf" if self.device.full_elf else "xclbin",
            tiles=self._tiles(fifos), host_buffers=host_buffers(
                self.placements, len(words), None if emit is None else len(emit.target_words)),
            placements=self.placements, fifos=fifos, links=tuple(self.links), buffers=tuple(self.buffers),
            functions=tuple(self.functions),
            cores=tuple(self.cores), sequence=sequence, words=words, emit=emit,
            groups=tuple((g.name, tuple(call_label(self.program, c) for c in g.calls)) for g in groups),
            rules=(*self._fuse_rules(groups), *self.layout.rules, *self._forward_rules(), *channel_rules,
                   *share_rules, *shim_rules),
            carry=self.host_values,
            notes={"holds": dict(self.holds), "closed_by": {g.name: g.closed_by for g in groups}},
        )
        return fit(plan)

    def _fuse_rules(self, groups) -> list[tuple[str, str]]:
        rules = []
        for g, nxt in zip(groups, groups[1:]):
            rules.append((g.closed_by, f"{g.name} closed before {call_label(self.program, nxt.calls[0])}"))
        return rules

    def _forward_rules(self) -> list[tuple[str, str]]:
        return [("forward_shared_input", f"{g} forwards {describe(node)} to {', '.join(readers)}")
                for g, nodes in self.forwards.items() for node, readers in nodes.items()]

    # ---- shim channels ---------------------------------------------------------------------------------
    def _shim_requests(self) -> list[ShimRequest]:
        requests = []
        for f in self.fifos:
            if f.producer == HOST:
                requests.append(ShimRequest(f.name, Direction.MM2S, f.consumers[0].col, f.nbytes, self._input_shares(f)))
            elif HOST in f.consumers:
                requests.append(ShimRequest(f.name, Direction.S2MM, f.producer.col, f.nbytes, self._output_shares(f)))
        return requests

    def _input_shares(self, f: Fifo) -> bool:
        """A group's `_in` whose group touches no state an earlier group of the call writes: its
        Dmas need no Wait, so they may be issued with the other groups' inputs of a shared FIFO."""
        group = next((s.group.name for s in self.layout.sites if f.name == f"{s.group.name}_in"), None)
        return f.role is FifoRole.INPUT and group not in self.after_writes

    def _output_shares(self, f: Fifo) -> bool:
        """A core's `_host` that no Wait of the sequence needs before its end."""
        waited = {entry.fifo for entry in self.sequence if isinstance(entry, Wait)}
        return f.producer.kind is TileKind.COMPUTE and f.role is FifoRole.HOST and f.name not in waited

    def _share_shim_channels(self) -> tuple:
        """Apply `share_shim_channels`: its merged FIFOs, links and moves; returns its rules."""
        mem = MemChannels(self.device)
        for link in self.links:
            mem.take_on(link.tile, len(link.sources), len(link.destinations))
        for f in self.fifos:
            for tile in {f.producer, *f.consumers}:
                if tile.kind is TileKind.MEM:
                    mem.take_on(tile, 0, 0, f.depth * f.nbytes)
        shares, rules = share_shim_channels(self.program, self._shim_requests(), self.device, mem, DEPTH)
        for share in shares:
            self._share(share)
        return rules

    def _share(self, share: SharedChannel):
        members = {f.name: f for f in self.fifos if f.name in share.members}
        retype = len({f.dtype.itemsize for f in members.values()}) > 1
        dtype = I32 if retype else members[share.members[0]].dtype
        inputs = share.direction is Direction.MM2S
        ends = (HOST, (share.mem,)) if inputs else (share.mem, (HOST,))
        first = min(i for i, f in enumerate(self.fifos) if f.name in members)
        role = FifoRole.SHARED_IN if inputs else FifoRole.SHARED_HOST
        self.fifos.insert(first, Fifo(share.name, ends[0], ends[1], DEPTH, share.nbytes, dtype, role=role))
        self.fifos = [self._shared_end(f, share.mem, retype) if f.name in members else f for f in self.fifos]
        if inputs:
            self.links.append(Link(share.mem, (share.name,), share.members, destination_offsets=share.offsets))
        else:
            self.links.append(Link(share.mem, share.members, (share.name,), source_offsets=share.offsets))
        self.holds[share.name] = ", ".join(share.members)
        self.sequence = moved_together(self.sequence, share)

    @staticmethod
    def _shared_end(f: Fifo, mem: Tile, retype: bool) -> Fifo:
        """A member FIFO with its host end on the mem tile (as int32 when the members' element
        sizes differ: a mem-tile link counts offsets in one element size)."""
        producer = mem if f.producer == HOST else f.producer
        consumers = tuple(mem if t == HOST else t for t in f.consumers)
        return replace(f, producer=producer, consumers=consumers, dtype=I32 if retype else f.dtype)

    @staticmethod
    def _resolved(f: Fifo, shims: dict[str, Tile]) -> Fifo:
        producer = shims[f.name] if f.producer == HOST else f.producer
        consumers = tuple(shims[f.name] if t == HOST else t for t in f.consumers)
        return replace(f, producer=producer, consumers=consumers)

    def _tiles(self, fifos) -> tuple[Tile, ...]:
        tiles = {c.tile for c in self.cores} | {link.tile for link in self.links}
        tiles |= {t for f in fifos for t in (f.producer, *f.consumers)}
        return tuple(sorted(tiles, key=lambda t: (t.col, t.row)))



# ---- DMA ops within the shim's limits ------------------------------------------------------------

def moved_together(entries: list, share: SharedChannel) -> list:
    """The lowered moves with the members' moves made moves of the shared FIFO, in member
    order, all at the first member move (inputs: issued before any member needs its object) or
    at the last (outputs: issued once every member has had its inputs)."""
    at = [i for i, e in enumerate(entries) if isinstance(e, Move) and e.fifo in share.members]
    moves = [replace(entries[i], fifo=share.name) for member in share.members for i in at if entries[i].fifo == member]
    spot = at[0] if share.direction is Direction.MM2S else at[-1]
    taken = set(at)
    together = []
    for i, entry in enumerate(entries):
        if i == spot:
            together += moves
        elif i not in taken:
            together.append(entry)
    return together


def finish_sequence(entries: list, fifos: dict[str, Fifo], device) -> tuple:
    """Dma and Wait ops from the lowered moves: each move split into Dmas within the device's
    limits, BD ids per shim tile reused only after a Wait covering the op that held them (MM2S
    ops made waitable with issue_token), and a final Wait on every S2MM FIFO not yet waited."""
    ops: list = []
    held: dict[Tile, dict[int, int]] = {}
    unwaited: list[str] = []
    for entry in entries:
        if isinstance(entry, Wait):
            _wait(ops, held, unwaited, entry.fifo)
            continue
        fifo, access = fifos[entry.fifo], entry.access
        shim = fifo.producer if entry.direction is Direction.MM2S else next(
            t for t in fifo.consumers if t.kind is TileKind.SHIM)
        for offset, sizes, strides in dma_patterns(access.offset, access.dims, device):
            bd = _free_bd(ops, held, unwaited, shim, device)
            ops.append(Dma(entry.direction, fifo.name, entry.buffer, offset, sizes, strides, bd, shim, access.patch_word))
            held.setdefault(shim, {})[bd] = len(ops) - 1
            if entry.direction is Direction.S2MM and fifo.name not in unwaited:
                unwaited.append(fifo.name)
    for name in list(unwaited):
        _wait(ops, held, unwaited, name)
    return tuple(ops)


def _free_bd(ops, held, unwaited, shim: Tile, device) -> int:
    mine = held.setdefault(shim, {})
    free = [bd for bd in range(device.shim_bd_ids) if bd not in mine]
    if free:
        return free[0]
    oldest = ops[min(mine.values())]
    _wait(ops, held, unwaited, oldest.fifo)
    return _free_bd(ops, held, unwaited, shim, device)


def _wait(ops: list, held, unwaited: list[str], fifo: str):
    """Append Wait(fifo), making its held MM2S ops waitable, and free the BDs it covers."""
    for bds in held.values():
        for bd, index in list(bds.items()):
            if ops[index].fifo == fifo:
                if ops[index].direction is Direction.MM2S:
                    ops[index] = replace(ops[index], issue_token=True)
                del bds[bd]
    ops.append(Wait(fifo))
    if fifo in unwaited:
        unwaited.remove(fifo)


def dma_patterns(offset: int, dims, device) -> list[tuple[int, tuple, tuple]]:
    """(offset, sizes, strides) of Dmas moving `dims` (outermost first, in words) in order:
    at most 4 dims, the outermost (repeat) <= device.dma_repeat_max, the others <= the shim's
    wrap limit."""
    wrap = device.shim.max_bd_wrap
    dims = [d for d in dims if d[0] > 1] or [(1, 1)]
    if len(dims) == 1 and dims[0][0] > wrap and dims[0][1] == 1:
        return _long_run(offset, dims[0][0], device)
    limits = ([device.dma_repeat_max] if len(dims) == 4 else []) + [wrap] * min(len(dims), 3)
    if len(dims) <= 4 and all(size <= limit for (size, _), limit in zip(dims, limits)):
        padded = [(1, 0)] * (4 - len(dims)) + dims
        return [(offset, tuple(s for s, _ in padded), tuple(st for _, st in padded))]
    (size, stride), rest = dims[0], dims[1:]
    limit = limits[0]
    if len(dims) <= 4 and size > limit and all(s <= lim for (s, _), lim in zip(rest, limits[1:])):
        chunks = [(start, min(limit, size - start)) for start in range(0, size, limit)]
        return [p for start, n in chunks for p in dma_patterns(offset + start * stride, [(n, stride), *rest], device)]
    return [p for i in range(size) for p in dma_patterns(offset + i * stride, rest, device)]


def _long_run(offset: int, n: int, device) -> list:
    wrap = device.shim.max_bd_wrap
    inner = max(d for d in range(1, wrap + 1) if n % d == 0)
    if n // inner <= wrap and inner * 4 >= wrap:
        return dma_patterns(offset, [(n // inner, inner), (inner, 1)], device)
    piece = wrap * wrap
    if n > piece:
        return [*dma_patterns(offset, [(wrap, wrap), (wrap, 1)], device),
                *dma_patterns(offset + piece, [(n - piece, 1)], device)]
    rows, rest = divmod(n, wrap)
    head = dma_patterns(offset, [(rows, wrap), (wrap, 1)], device)
    return head + (dma_patterns(offset + rows * wrap, [(rest, 1)], device) if rest else [])
