"""What each FIFO object and tile Buffer of a group holds, packed byte by byte: its `_in` (host
tensors and per-call words), `_host` (outputs, carried elements, state writes), `_out` (results
other groups read, forwarded and relayed operands) and Buffers of intermediates. `pack` lays out
each part of a group and records in the Context where later groups find its results."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from iron.compiler.fuse import leading_call
from iron.compiler.place import Layout, Site
from iron.compiler.readers import Reader
from iron.compiler.route import Relay, Routes, forwarded_to
from iron.compiler.words import Access, WordTable, placement_access, view_access
from iron.errors import PlacementError
from iron.ir import (
    Node,
    Op,
    Program,
    call_label,
    contiguous_span,
    describe,
    destination,
    dynamic_attrs,
    elements,
    external_inputs,
    input_dtypes,
    is_computed_view,
    is_host_tensor,
    nbytes,
    storage,
    tensor_inputs,
)
from iron.kernels.registry import copy_kernel
from iron.plan.fifos import EMIT, FifoId, Stem, fifo_id
from iron.plan.plan import (
    Acquire,
    Buffer,
    Imm,
    KernelStep,
    Link,
    Output,
    Port,
    Ptr,
    Release,
    Tile,
    WordKind,
    WordRef,
)
from iron.plan.rules import Rule

I32 = np.dtype(np.int32)


@dataclass(frozen=True)
class StateWrite:
    """The key of the `_host` region where a call writes a state (out=)."""

    call: Node


@dataclass
class Context:
    """What lowering reads, and where each tensor other groups read lies, filled in program
    order: `results` (node -> (FIFO, byte offset)), `relayed` ((reader group, key) -> (the
    carrier's `_out`, byte offset))."""

    program: Program
    device: object
    layout: Layout
    routes: Routes
    table: WordTable
    placements: tuple
    results: dict = field(default_factory=dict)
    relayed: dict = field(default_factory=dict)
    rules: list = field(default_factory=list)      # (rule, decision) made while packing (`gather_strided_view`)

    def placement(self, name: str):
        return self._named[name]

    @cached_property
    def _named(self) -> dict:   # a large design has hundreds, looked up per tensor; the first of a name
        return {p.name: p for p in reversed(self.placements)}

    def source(self, group: str, node: Node) -> tuple[str, int] | None:
        """(FIFO, offset) where `group` finds a tensor another group sends (or a carrier relays)."""
        return self.relayed.get((group, node)) or self.results.get(node)


@dataclass
class Packing:
    """One FIFO object's regions: key -> byte offset, each whole words, and where the host side
    of each region lies (buffer, Access) when the sequence moves it."""

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
    def dtype(self) -> np.dtype:   # the one kind its regions hold, in whole elements; else words
        only = next(iter(self.kinds)) if len(self.kinds) == 1 else I32
        return only if self.nbytes % only.itemsize == 0 else I32


@dataclass
class Part:
    """One core's share of a group: all of it, or `count` result rows from `start` (a split)."""

    prefix: str
    site: Site
    tile: object
    number: int
    start: int = 0
    count: int | None = None
    ins: Packing = field(default_factory=Packing)
    host: Packing = field(default_factory=Packing)
    out: Packing = field(default_factory=Packing)
    homes: dict = field(default_factory=dict)       # node -> (source, byte offset)
    buffers: list = field(default_factory=list)
    holds: dict = field(default_factory=dict)       # Buffer name -> the call whose result it keeps
    copies: list = field(default_factory=list)      # KernelSteps exporting results

    @property
    def group(self) -> str:
        return self.site.group.name

    @property
    def split(self) -> bool:
        return self.count is not None

    @property
    def stream(self):
        return self.site.stream

    @property
    def in_fifo(self) -> FifoId:   # one for every part: a broadcast
        return fifo_id(self.group, Stem.IN)

    def fifo(self, stem: Stem) -> FifoId:
        """This core's `_host` or `_out`: a split group's part has its own."""
        return fifo_id(self.group, stem, core=self.number if self.split else None)

    @property
    def w_fifo(self) -> FifoId:
        """This core's streamed matrix blocks: its own, or those of the owner it shares them with."""
        return fifo_id(self.group, Stem.W, self.number) if self.split else self.stream.fifo or fifo_id(self.group, Stem.W)


def holding(consumed, produced, steps) -> tuple:
    """`steps` between acquiring an object of each FIFO and releasing them."""
    return (*(Acquire(f, Port.CONSUME) for f in consumed), *(Acquire(f, Port.PRODUCE) for f in produced), *steps,
            *(Release(f, Port.CONSUME) for f in consumed), *(Release(f, Port.PRODUCE) for f in produced))


def split_link(tile: Tile, whole: FifoId, parts, nbytes: int) -> Link:   # parts of `nbytes` back to back
    return Link(tile, (whole,), tuple(parts), destination_offsets=tuple(i * nbytes for i in range(len(parts))))


def join_link(tile: Tile, parts, whole: FifoId, nbytes: int) -> Link:
    return Link(tile, tuple(parts), (whole,), source_offsets=tuple(i * nbytes for i in range(len(parts))))


def copy_step(dtype, count: int, source: Ptr, dest: Ptr) -> KernelStep:
    return KernelStep.of(copy_kernel(), dtype, (source, dest, Imm(max(1, count))))


def pack(ctx: Context, site: Site) -> list[Part]:
    """The parts of a group with their objects laid out, its results recorded in `ctx`."""
    g = site.group
    if len(site.tiles) == 1:
        parts = [Part(g.name, site, site.tiles[0], 0)]
    else:
        count = leading_call(g.calls).shape[0] // len(site.tiles)
        parts = [Part(f"{g.name}_p{p}", site, tile, p, p * count, count) for p, tile in enumerate(site.tiles)]
    for part in parts:
        for key, size, dtype, what, move in host_items(ctx, site):
            if (part.group, key) not in ctx.relayed:   # but what a carrier relays to it
                part.ins.add(key, size, dtype, what, move)
        _pack_results(ctx, part)
    if len(parts) > 1:
        ctx.results[g.calls[-1]] = (joined(ctx, g.name), 0)
    return parts


def joined(ctx: Context, group: str) -> FifoId:
    """A split group's joined result: its `_out` when other groups read it, else its `_host`."""
    out = fifo_id(group, Stem.OUT)
    return out if ctx.routes.has(out) else fifo_id(group, Stem.HOST)


# ---- host tensors and words -----------------------------------------------------------------------

def host_access(ctx: Context, node: Node) -> tuple[str, Access]:
    """(host buffer, Access) of an input, a declared memory or a view of one."""
    p = ctx.placement(storage(node).arg.name)
    return p.buffer, view_access(node, ctx.table, p) if node.op == Op.VIEW else placement_access(p)


def host_items(ctx: Context, site: Site) -> list[tuple]:
    """(key, bytes, dtype, what, move) of what a group loads from the host, in first-use order:
    host tensors (but a streamed matrix and forwarded ones) and per-call words."""
    g, items = site.group.name, []
    for call in site.group.calls:
        for node in tensor_inputs(call):
            streamed = site.stream is not None and node is site.stream.matrix
            if is_host_tensor(node) and not streamed and not forwarded_to(ctx.routes.forwards, g, node):
                move = host_access(ctx, node)
                items.append((node, move[1].nwords * 4, node.dtype, describe(node), move))
        for name, expr in dynamic_attrs(call):
            word = attr_word(ctx, call, name, expr)
            items.append((WordRef(word), 4, I32, ctx.table.words[word].name, ("words", Access(word, ((1, 1),)))))
    return items


def attr_word(ctx: Context, call: Node, name: str, expr: Node) -> int:
    """The core word holding a per-call attribute, bounded as its kernel declares (`bounds`)."""
    kernel = call.arg.kernel
    if name in kernel.bounds:
        lo, hi = kernel.bounds[name].range([n.shape for n in call.src[: call.arg.n_inputs]])
        return ctx.table.bounded(expr, lo, hi, f"{kernel.__name__} {name}={describe(expr)}", WordKind.CORE)
    return ctx.table.word(expr, WordKind.CORE)


def call_step(call: Node, ptrs, shapes, out_shape, loads: dict | None = None) -> KernelStep:
    """`call`'s kernel on `ptrs` by its C ABI: the sizes it derives from the shapes, then its
    attributes, Loaded where `loads` names them (per-call words), else fixed. A row's length left
    None is the user's whole row, also where it lies padded wider (`pad_through_row_width`): the
    kernel reduces that much of each row."""
    kernel, loads, fixed = call.arg.kernel, loads or {}, call.arg.attr_dict
    sizes = kernel.sizes([tuple(s) for s in shapes], tuple(out_shape))
    attrs = [loads.get(name) or Imm.of(call.src[0].shape[-1] if fixed[name] is None else fixed[name], ctype)
             for name, ctype in kernel.c_attrs]
    return KernelStep.of(kernel, input_dtypes(call), (*ptrs, *(Imm(int(s)) for s in sizes), *attrs), call.dtype)


# ---- results ----------------------------------------------------------------------------------------

def _pack_results(ctx: Context, part: Part):
    """Where each call's result lives and is exported to, and the `_out` regions of what the
    group forwards or relays."""
    for node in ctx.routes.forwards.get(part.group, {}):
        out = _export(part, node, nbytes(node), node.dtype, describe(node), read(ctx, part, node, False))
        ctx.results[node] = (part.fifo(Stem.OUT), out)
    for call in part.site.group.calls:
        label = call_label(ctx.program, call)
        if part.stream is not None and call is part.stream.expand:   # one block's rows, expanded
            part.homes[call] = (_buffer(part, part.stream.rows * nbytes(call) // call.shape[0], call.dtype, label), 0)
        elif call.arg.writes:   # its `_host` region of the state it writes (out=)
            buffer, access = host_access(ctx, destination(call))
            at = part.host.add(StateWrite(call), access.nwords * 4, call.dtype, describe(destination(call)), (buffer, access))
            part.homes[call] = (part.fifo(Stem.HOST), at)
        elif part.split and call is part.site.group.calls[-1]:
            part.homes[call] = (fifo_id(part.group, Stem.PART, part.number), 0)
        elif part.split:
            part.homes[call] = (_buffer(part, part.count * call.dtype.itemsize, call.dtype, label), 0)
        else:
            _home(ctx, part, call, label)
    for relay in ctx.routes.carried_by(part.group):   # `fit_compute_channels`: what the reader would take
        for key, size, dtype, what, source in _relay_items(ctx, part, relay):
            ctx.relayed[(relay.reader, key)] = (part.fifo(Stem.OUT), _export(part, key, size, dtype, what, source))


def _export(part: Part, key, size: int, dtype, what: str, source: Ptr) -> int:
    """`key`'s offset in the part's `_out`, copied from `source` once."""
    fresh = key not in part.out.offsets
    offset = part.out.add(key, size, dtype, what)
    if fresh:
        part.copies.append(copy_step(dtype, size // np.dtype(dtype).itemsize, source, Ptr(part.fifo(Stem.OUT), offset)))
    return offset


def _relay_items(ctx: Context, part: Part, relay: Relay) -> list[tuple]:
    """(key, bytes, dtype, what, where the carrier has it) of what the reader would take from
    the relayed FIFOs: its `_in`'s items (loaded into the carrier's `_in`) and other groups' results."""
    items = []
    if fifo_id(relay.reader, Stem.IN) in relay.fifos:   # loaded into the carrier's `_in` after its own
        for key, size, dtype, what, move in host_items(ctx, ctx.layout.site(relay.reader)):
            items.append((key, size, dtype, what, Ptr(part.in_fifo, part.ins.add(key, size, dtype, what, move))))
    reads = ctx.program.carried_calls if relay.reader == EMIT else external_inputs(ctx.layout.site(relay.reader).group.calls)
    for node in reads:
        if ctx.results.get(node, ("",))[0] in relay.fifos:
            what = call_label(ctx.program, node) if node.op == Op.CALL else describe(node)
            items.append((node, nbytes(node), node.dtype, what, read(ctx, part, node, False)))
    return items


def _home(ctx: Context, part: Part, call: Node, label: str):
    """A result's home: the first of its `_host` regions (outputs, carried elements) and `_out`
    region (other groups read it), else a Buffer; copied to the others."""
    places = []
    for key in _host_uses(ctx.program, call):
        p = ctx.placement(key.placement)
        access = placement_access(p)
        places.append((part.fifo(Stem.HOST), part.host.add(key, access.nwords * 4, call.dtype, p.shown or key.placement,
                                                           (p.buffer, access))))
    if any(u is not Reader.HOST for u in ctx.layout.users.get(call, ())):
        ctx.results[call] = (part.fifo(Stem.OUT), part.out.add(call, nbytes(call), call.dtype, label))
        places.append(ctx.results[call])
    if not places:
        places = [(_buffer(part, nbytes(call), call.dtype, label), 0)]
    part.homes[call] = places[0]
    for source, offset in places[1:]:
        part.copies.append(copy_step(call.dtype, call.size, Ptr(*places[0]), Ptr(source, offset)))


def _host_uses(program: Program, call: Node) -> list[Output]:
    names = [f"out{i}" for i, n in enumerate(program.outputs) if n is call]
    names += [f"carry.{name}" for name, v in program.carry if v.op == Op.ELEM and v.src[0] is call]
    return [Output(name) for name in names]


def _buffer(part: Part, size: int, dtype, what: str) -> str:
    """A Buffer of the part's tile holding `what`, in whole words."""
    name = f"{part.prefix}_buf{len(part.buffers)}"
    part.buffers.append(Buffer(name, part.tile, -(-size // 4) * 4, dtype))
    part.holds[name] = what
    return name


# ---- reading a tensor in a core -------------------------------------------------------------------

def read(ctx: Context, part: Part, node: Node, sliced: bool) -> Ptr:
    """Where a part's core finds `node` (from the part's first row when `sliced`); a contiguous
    view of a computed tensor is a pointer into its object (`gather` copies any other first)."""
    shift = part.start * node.dtype.itemsize if sliced else 0
    if node in part.homes:
        return Ptr(*part.homes[node])
    if is_computed_view(node):
        first, _ = contiguous_span(node)
        whole = read(ctx, part, node.src[0], sliced)
        return replace(whole, offset=whole.offset + first * node.dtype.itemsize)
    if node in part.ins.offsets:
        return Ptr(part.in_fifo, part.ins.offsets[node] + shift)
    fifo, offset = ctx.source(part.group, node)
    return Ptr(fifo, offset + shift)


MAX_GATHER_RUNS = 256


def gather(ctx: Context, part: Part, view: Node) -> list[KernelStep]:
    """`gather_strided_view`: the copies, run by run, of a view of a computed tensor that is not
    one contiguous run into a Buffer of the part's tile (none when read in place or gathered)."""
    if view in part.homes or contiguous_span(view) is not None:
        return []
    flat = elements(view)
    runs = np.split(flat, np.flatnonzero(np.diff(flat) != 1) + 1)
    if len(runs) > MAX_GATHER_RUNS:
        raise PlacementError(
            f"{describe(view)} picks {len(runs)} separate runs of {call_label(ctx.program, view.src[0])}'s "
            f"result, and iron copies at most {MAX_GATHER_RUNS} runs into a view: lay the result out so the "
            "view takes longer runs (e.g. transpose it in the kernel), or pick fewer rows."
        )
    name = _buffer(part, nbytes(view), view.dtype, describe(view))
    source, itemsize = read(ctx, part, view.src[0], False), view.dtype.itemsize
    steps, done = [], 0
    for run in runs:
        at = replace(source, offset=source.offset + int(run[0]) * itemsize)
        steps.append(copy_step(view.dtype, len(run), at, Ptr(name, done * itemsize)))
        done += len(run)
    part.homes[view] = (name, 0)
    ctx.rules.append((Rule.GATHER_STRIDED_VIEW, f"{part.prefix} copies {describe(view)} into {name} in {len(runs)} runs"))
    return steps


def consumed(ctx: Context, part: Part) -> list[str]:
    """The FIFOs of other groups a part's core reads, in first-use order, then those it receives
    only to forward (`Relay.gained`)."""
    g = part.group
    reads = [ctx.source(g, n)[0] for c in part.site.group.calls for n in tensor_inputs(c)
             if ctx.source(g, n) is not None and n not in part.homes and n not in part.ins.offsets]
    return list(dict.fromkeys(reads + [f for r in ctx.routes.carried_by(g) for f in r.gained]))
