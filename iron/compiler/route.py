"""Channel routing, decided from the placement before any object is packed: every FIFO's ends
(`route`; shared memory between neighbouring compute tiles), the small host tensors one group
forwards to later readers (`forward_shared_input`), and the relays keeping every compute tile
within its input DMA channels (`fit_compute_channels`)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

from iron.compiler.dma_inputs import forwardable
from iron.compiler.place import Layout, Site
from iron.compiler.readers import Reader
from iron.errors import PlacementError
from iron.ir import Node, Program, describe, is_host_tensor, state_of, tensor_inputs
from iron.plan.fifos import EMIT, FifoId, FifoRole, Stem, fifo_id
from iron.plan.memory import shares_memory
from iron.plan.plan import Tile, TileKind
from iron.plan.rules import Decision, Rule

HOST = Tile(-1, 0, TileKind.SHIM)   # a FIFO end on the shim tile that `assign_shims` picks


@dataclass(frozen=True)
class Route:
    """A FIFO's ends, before what its objects hold is known; `group` (or EMIT) owns it."""

    fifo: FifoId
    group: str
    producer: Tile
    consumers: tuple[Tile, ...]

    @property
    def role(self) -> FifoRole:
        return self.fifo.role

    @cached_property
    def shared_memory(self) -> bool:   # exactly when mlir-aie makes it so
        return shares_memory(self)


@dataclass(frozen=True)
class Relay:
    """A `fit_compute_channels` decision: group `carrier` forwards in its `_out` everything group
    `reader` would take from `fifos`, so `reader`'s cores no longer receive them; `gained`: those
    of `fifos` the carrier starts receiving for it."""

    carrier: str
    reader: str
    fifos: tuple[FifoId, ...]
    gained: tuple[FifoId, ...] = ()


@dataclass(frozen=True)
class Routes:
    """Every FIFO's Route in Plan order, the forwarded host tensors (loader group -> {tensor:
    reader groups}), the relays and the decisions."""

    fifos: tuple[Route, ...]
    forwards: dict[str, dict[Node, tuple[str, ...]]]
    relays: tuple[Relay, ...] = ()
    rules: tuple[Decision, ...] = ()

    def has(self, fifo: FifoId) -> bool:
        return fifo in self._ids

    @cached_property
    def _ids(self) -> frozenset[FifoId]:   # asked for every part of every group as it is lowered
        return frozenset(r.fifo for r in self.fifos)

    def carried_by(self, group: str) -> list[Relay]:
        return [r for r in self.relays if r.carrier == group]


def route(program: Program, layout: Layout) -> Routes:
    """The FIFOs of every group and of the Emit, in the order the Plan lists them."""
    forwards = forwarded_inputs(layout)
    fifos = [r for site in layout.sites for r in group_routes(layout, forwards, site)]
    for site in layout.sites:   # a shared stream's blocks reach the cores of every group reading them
        if site.stream is not None and site.stream.owner is not None:
            fifos = [_with(r, site.tiles) if r.fifo == site.stream.fifo else r for r in fifos]
    if layout.emit is not None:
        fifos += [Route(fifo_id(EMIT, Stem.IN), EMIT, HOST, (layout.emit,)),
                  Route(fifo_id(None, Stem.FEEDBACK), EMIT, layout.emit, (HOST,))]
    rules = tuple((Rule.FORWARD_SHARED_INPUT, f"{g} forwards {describe(node)} to {', '.join(readers)}")
                  for g, nodes in forwards.items() for node, readers in nodes.items())
    return Routes(tuple(fifos), forwards, rules=rules)


def group_routes(layout: Layout, forwards: dict, site: Site) -> list[Route]:
    """A group's FIFOs: its `_in` when it loads anything from the host, per core its `_host` and
    `_out`, a streamed matrix's, a split group's parts and their join."""
    if site.grid is not None:
        return grid_routes(site)
    if site.flow is not None:
        return flow_routes(site)
    g, calls, users = site.group.name, site.group.calls, layout.users
    split = len(site.tiles) > 1
    fifos = []
    if any(c.arg.scalar_attrs for c in calls) or any(not forwarded_to(forwards, g, n) for n in host_reads(site)):
        fifos.append(Route(fifo_id(g, Stem.IN), g, HOST, site.tiles))
    for number, tile in enumerate(site.tiles):
        core = number if split else None
        if any(c.arg.writes for c in calls) or (not split and any(Reader.HOST in users.get(c, ()) for c in calls)):
            fifos.append(Route(fifo_id(g, Stem.HOST, core=core), g, tile, (HOST,)))
        exported = any(not c.arg.writes and any(u is not Reader.HOST for u in users.get(c, ())) for c in calls)
        if not split and (forwards.get(g) or exported):
            fifos.append(Route(fifo_id(g, Stem.OUT, core=core), g, tile, consumer_tiles(layout, forwards, site.group)))
    if site.stream is not None:
        fifos += stream_routes(site)
    if split:   # the parts joined on the stream's mem tile, to the readers (or only the host)
        fifos += [Route(fifo_id(g, Stem.PART, p), g, t, (site.stream.mem,)) for p, t in enumerate(site.tiles)]
        consumers = consumer_tiles(layout, forwards, site.group, Reader.HOST in users.get(calls[-1], ()))
        stem = Stem.OUT if any(t != HOST for t in consumers) else Stem.HOST
        fifos.append(Route(fifo_id(g, stem), g, site.stream.mem, consumers))
    return fifos


def forwarded_to(forwards: dict, group: str, node: Node) -> bool:
    """Whether an earlier group forwards host tensor `node` to `group`."""
    return any(group in nodes.get(node, ()) for nodes in forwards.values())


def host_reads(site: Site) -> list[Node]:
    """The host tensors a group's calls read but its streamed matrix (none for a grid or a flow:
    their operands stream in blocks)."""
    if site.grid is not None or site.flow is not None:
        return []
    streamed = site.stream.matrix if site.stream is not None else None
    return [n for c in site.group.calls for n in tensor_inputs(c) if is_host_tensor(n) and n is not streamed]


def consumer_tiles(layout: Layout, forwards: dict, group, with_host: bool = False) -> tuple[Tile, ...]:
    """The tiles of the groups (and the Emit) reading a group's results or its forwards."""
    names = {u for c in group.calls for u in layout.users.get(c, ()) if u is not Reader.HOST}
    names |= {r for readers in forwards.get(group.name, {}).values() for r in readers}
    tiles = [t for s in layout.sites if s.group.name in names for t in s.tiles]
    if Reader.EMIT in names:
        tiles.append(layout.emit)
    return tuple(tiles + ([HOST] if with_host else []))


def stream_routes(site: Site) -> list[Route]:
    s, g = site.stream, site.group.name
    if s.owner is not None:   # read from the owner's `_w` (`share_streamed_matrix`)
        return []
    fifos = [Route(s.lane_fifo(g, k), g, HOST, (m,)) for k, m in enumerate(s.lane_mems)]
    if len(site.tiles) == 1:
        return [*fifos, Route(fifo_id(g, Stem.W), g, s.mem, site.tiles)]
    return fifos + [Route(fifo_id(g, Stem.W, p), g, s.lane_mems[p // s.per_lane], (t,))
                    for p, t in enumerate(site.tiles)]


def grid_routes(site: Site) -> list[Route]:
    """A grid's FIFOs: A's blocks per row and B's per column through a mem tile to their cores (or,
    cores owning their rows, B's k-blocks to every core and A's rows split per column between
    its cores), each core's part joined on its column's mem tile to the host."""
    g, grid = site.group.name, site.grid
    rows, cols = range(len(grid.rows)), range(len(grid.cols))
    fifos = [Route(fifo_id(g, Stem.B), g, HOST, grid.tiles)] if grid.own_rows else []
    for r, mem in zip(rows, () if grid.own_rows else grid.a_mems):
        fifos += [Route(fifo_id(g, Stem.A, r, mem=True), g, HOST, (mem,)),
                  Route(fifo_id(g, Stem.A, r), g, mem, tuple(grid.tile(r, c) for c in cols))]
    for c, mem in zip(cols, grid.c_mems):
        if grid.own_rows:
            fifos.append(Route(fifo_id(g, Stem.A, c, mem=True), g, HOST, (mem,)))
            fifos += [Route(fifo_id(g, Stem.A, r, c), g, mem, (grid.tile(r, c),)) for r in rows]
        else:
            fifos += [Route(fifo_id(g, Stem.B, c, mem=True), g, HOST, (mem,)),
                      Route(fifo_id(g, Stem.B, c), g, mem, tuple(grid.tile(r, c) for r in rows))]
        fifos += [Route(fifo_id(g, Stem.PART, r, c), g, grid.tile(r, c), (mem,)) for r in rows]
        fifos.append(Route(fifo_id(g, Stem.HOST, c), g, mem, (HOST,)))
    return fifos


def flow_routes(site: Site) -> list[Route]:
    """A Flow's FIFOs: per column each input split on its mem tile between its cores and each
    result's parts joined there; a row every row shares and the per-call words to every core."""
    g, flow = site.group.name, site.flow
    rows = range(len(flow.rows))
    fifos = [Route(fifo_id(g, Stem.W, i), g, HOST, flow.tiles) for i in range(len(flow.shared))]
    if flow.per_call:
        fifos.append(Route(fifo_id(g, Stem.IN), g, HOST, flow.tiles))
    for c, mem in enumerate(flow.mems):
        for i in range(len(flow.inputs)):
            fifos.append(Route(fifo_id(g, Stem.X, i, c, mem=True), g, HOST, (mem,)))
            fifos += [Route(fifo_id(g, Stem.X, i, r, c), g, mem, (flow.tile(r, c),)) for r in rows]
        for k in range(len(flow.results)):
            fifos += [Route(fifo_id(g, Stem.PART, r, c, result=k), g, flow.tile(r, c), (mem,))
                      for r in rows]
            fifos.append(Route(fifo_id(g, Stem.HOST, c, result=k), g, mem, (HOST,)))
    return fifos


def forwarded_inputs(layout: Layout) -> dict[str, dict[Node, tuple[str, ...]]]:
    """`forward_shared_input`: the first unsplit group loading a small host tensor (`forwardable`)
    that later groups read too forwards it in its `_out`, so the host moves it once per launch
    and each reader needs no shim channel for it. Returns loader group -> {tensor: readers}."""
    loader: dict[Node, str] = {}
    found: dict[str, dict[Node, list[str]]] = {}
    for site in layout.sites:
        g = site.group.name
        for node in host_reads(site):
            if loader.get(node, g) != g:
                readers = found[loader[node]][node]
                readers += [] if g in readers else [g]
            elif node not in loader and len(site.tiles) == 1 and forwardable(node) and not shares_tile(layout, site):
                loader[node] = g
                found.setdefault(g, {})[node] = []
    return {g: {n: tuple(r) for n, r in nodes.items() if r} for g, nodes in found.items()}


# ---- compute-tile channels -------------------------------------------------------------------------

def fit_compute_channels(program: Program, routes: Routes, layout: Layout, device) -> Routes:
    """`routes` with the relays `choose_relays` picks: the readers no longer receive the relayed
    FIFOs; a relayed `_in` goes, loaded by the carrier, which gains an `_in` if it had none."""
    relays, rules = choose_relays(program, core_inputs(routes, layout), device)
    fifos = list(routes.fifos)
    moved_in = [r for r in relays if fifo_id(r.reader, Stem.IN) in r.fifos]
    for relay in relays:
        reader, own_in = tiles_of(layout, relay.reader), fifo_id(relay.reader, Stem.IN)
        fifos = [replace(r, consumers=tuple(t for t in r.consumers if t not in reader))
                 if r.fifo in relay.fifos and r.fifo != own_in else r for r in fifos]
        carrier = tiles_of(layout, relay.carrier)
        fifos = [_with(r, carrier) if r.fifo in relay.gained else r for r in fifos]
        if relay in moved_in and not any(r.fifo == fifo_id(relay.carrier, Stem.IN) for r in fifos):
            first = next(i for i, r in enumerate(fifos) if r.group == relay.carrier)
            fifos.insert(first, Route(fifo_id(relay.carrier, Stem.IN), relay.carrier, HOST, carrier))
    loaders = {r.carrier for r in moved_in}
    dropped = {fifo_id(r.reader, Stem.IN) for r in moved_in if r.reader not in loaders}
    fifos = [r for r in fifos if r.fifo not in dropped]
    return replace(routes, fifos=tuple(fifos), relays=tuple(relays), rules=routes.rules + rules)


def _with(route: Route, tiles: tuple[Tile, ...]) -> Route:
    return replace(route, consumers=(*route.consumers, *(t for t in tiles if t not in route.consumers)))


def tiles_of(layout: Layout, group: str) -> tuple[Tile, ...]:
    return (layout.emit,) if group == EMIT else layout.site(group).tiles


def core_inputs(routes: Routes, layout: Layout) -> list[CoreInputs]:
    """What each core receives, groups then the Emit, for `choose_relays`."""
    cores, made = [], []
    for site in layout.sites:
        g = site.group.name
        own_in = fifo_id(g, Stem.IN) if routes.has(fifo_id(g, Stem.IN)) else None
        carrier = fifo_id(g, Stem.OUT) if len(site.tiles) == 1 and routes.has(fifo_id(g, Stem.OUT)) else None
        movable = own_in is not None and all(state_of(n) is None for n in host_reads(site))
        earlier = () if streams_in_step(layout, site) else tuple(made)
        mine = _read_by(layout, routes, site)
        cores += [_receives(routes, g, tile, carrier, own_in, movable, earlier, mine=mine) for tile in site.tiles]
        made += [r.fifo for r in routes.fifos if r.group == g and r.role is FifoRole.OUTPUT]
    if layout.emit is not None:
        cores.append(_receives(routes, EMIT, layout.emit))
    return cores


def streams_in_step(layout: Layout, site: Site) -> bool:
    """Whether a group takes streamed blocks in step with another group's core
    (`share_streamed_matrix`): it must not wait for a result the other core's blocks hold up."""
    g = site.group.name
    return site.stream is not None and (site.stream.owner is not None or any(
        s.stream is not None and s.stream.owner == g for s in layout.sites))


def _receives(routes: Routes, group: str, tile: Tile, *rest, mine: frozenset | None = None) -> CoreInputs:
    """What `group`'s core on `tile` receives (only `mine` when it runs other groups too)."""
    fifos = [r for r in routes.fifos if tile in r.consumers and (mine is None or r.fifo in mine)]
    return CoreInputs(group, tile, tuple(r.fifo for r in fifos if not r.shared_memory),
                      tuple(r.fifo for r in fifos), *rest)


def shares_tile(layout: Layout, site: Site) -> bool:
    """Whether a group's core runs other groups too (`share_core_in_iteration`): its `_out` is
    then shared memory on the tile, so it forwards nothing."""
    return len(site.tiles) == 1 and any(s.tiles == site.tiles and s is not site for s in layout.sites)


def _read_by(layout: Layout, routes: Routes, site: Site) -> frozenset | None:
    """The FIFOs a group takes when its tile runs other groups too: its own, the `_out`s of the
    groups whose results or forwards it reads, a stream it shares; None on a tile of its own."""
    if not shares_tile(layout, site):
        return None
    g = site.group.name
    makers = {s.group.name for s in layout.sites if any(g in layout.users.get(c, ()) for c in s.group.calls)}
    makers |= {loader for loader, nodes in routes.forwards.items() if any(g in r for r in nodes.values())}
    shared = {site.stream.fifo} if site.stream is not None else set()
    return frozenset(r.fifo for r in routes.fifos if r.group == g or r.fifo in shared
                     or (r.group in makers and r.role is FifoRole.OUTPUT))


@dataclass(frozen=True)
class CoreInputs:
    """What one core receives, for `fit_compute_channels`: `dma` by a DMA channel, `received`
    every FIFO it acquires; `carrier` its group's `_out` when on one tile (other groups'
    operands may ride in it), `own_in` its `_in` and `movable_in` whether (holding no state)
    it may come in another group's object; `earlier` the `_out`s of the groups before it,
    which it may start receiving to forward them (they never wait for its own)."""

    group: str
    tile: Tile
    dma: tuple[FifoId, ...]
    received: tuple[FifoId, ...]
    carrier: FifoId | None = None
    own_in: FifoId | None = None
    movable_in: bool = False
    earlier: tuple[FifoId, ...] = ()


def choose_relays(program: Program, cores: list[CoreInputs], device) -> tuple[list[Relay], tuple]:
    """`fit_compute_channels`' choice: for each group whose cores would take more FIFOs by DMA than
    a compute tile has input channels, a carrier forwarding enough of them (`_relay_for`), or
    PlacementError naming the group, its tile and FIFOs. Returns (the relays, rules)."""
    relays, rules, crowded = _relays(cores, device.compute.dma_in_channels)
    if crowded:
        _cannot_fit(program, crowded[0], device.compute.dma_in_channels)
    return relays, rules


def _relays(cores: list[CoreInputs], limit: int) -> tuple[list[Relay], tuple, list[CoreInputs]]:
    """(the relays, rules, the cores whose tiles take more than `limit` FIFOs by DMA even so)."""
    now, relays, rules = list(cores), [], []   # each core as the relays so far leave it
    for core in cores:   # a tile whose core runs several groups in turn counts what they all take
        needed = _tile_inputs(now, core.tile) - limit
        if needed <= 0 or any(r.reader == core.group for r in relays):
            continue
        relay = _relay_for(core, now, limit, needed)
        if relay is not None:   # else another group on its tile may still relay enough
            now = [_relayed(c, relay, core) for c in now]
            relays.append(relay)
            rules.append((Rule.FIT_COMPUTE_CHANNELS, _relay_text(relay, core, limit)))
    return relays, tuple(rules), [c for c in cores if _tile_inputs(now, c.tile) > limit]


def crowded_tiles(program: Program, layout: Layout, device) -> set[Tile]:
    """The compute tiles whose FIFOs by DMA, over every group their core runs, exceed its channels
    either way once `fit_compute_channels` has relayed what it can (share_core.py's probe)."""
    routes = route(program, layout)
    _, _, crowded = _relays(core_inputs(routes, layout), device.compute.dma_in_channels)
    sent = Counter(r.producer for r in routes.fifos if r.producer.kind is TileKind.COMPUTE and not r.shared_memory)
    return {c.tile for c in crowded} | {t for t, n in sent.items() if n > device.compute.dma_out_channels}


def _tile_inputs(cores: list[CoreInputs], tile: Tile) -> int:
    """The FIFOs reaching `tile` by DMA for every group its core runs."""
    return len({f for c in cores if c.tile == tile for f in c.dma})


def _relayed(core: CoreInputs, relay: Relay, reader: CoreInputs) -> CoreInputs:
    """`core` once `relay` is made: the reader's no longer receives the relayed FIFOs, the
    carrier's receives those it gains (and an `_in` it loads the reader's in, when it had none)."""
    if core.group == relay.reader:
        return replace(core, dma=tuple(f for f in core.dma if f not in relay.fifos),
                       received=tuple(f for f in core.received if f not in relay.fifos))
    if core.group != relay.carrier:
        return core
    own_in = fifo_id(core.group, Stem.IN)
    gains = relay.gained + ((own_in,) if reader.own_in in relay.fifos and own_in not in core.received else ())
    return replace(core, dma=core.dma + gains, received=core.received + gains)


def _relay_for(core: CoreInputs, cores: list[CoreInputs], limit: int, needed: int) -> Relay | None:
    """The first carrier forwarding enough of what it receives itself (and the reader's movable
    `_in`, when it has or can take an `_in`); else the first that does when it also starts
    receiving, on the input channels it has left, `_out`s of groups before it (which never wait
    for it, so it may hold its own object until theirs come)."""
    carriers = [c for c in cores if c.carrier in core.received and c.group != core.group]
    for gaining in (False, True):
        for carrier in carriers:
            has = set(carrier.received)
            kept = [f for f in core.dma if f in has and f != carrier.carrier]
            if gaining:
                spare = limit - _tile_inputs(cores, carrier.tile)
                extra = [f for f in core.dma if f in carrier.earlier and f not in has][:max(0, spare)]
            else:
                can_load = fifo_id(carrier.group, Stem.IN) in has or _tile_inputs(cores, carrier.tile) < limit
                extra = [f for f in core.dma if f == core.own_in and core.movable_in and can_load]
            taken = (kept + extra)[:needed]
            if len(taken) >= needed and (extra or not gaining):
                return Relay(carrier.group, core.group, tuple(taken), tuple(f for f in taken if gaining and f in extra))
    return None


def _relay_text(relay: Relay, core: CoreInputs, limit: int) -> str:
    gains = f" (it now receives {_names(relay.gained)})" if relay.gained else ""
    return (f"{core.group} on {core.tile.name} would take {len(core.dma)} FIFOs by DMA ({_names(core.dma)}) "
            f"but a compute tile has {limit} input channels: {relay.carrier} forwards in "
            f"{fifo_id(relay.carrier, Stem.OUT)} what {core.group} would take from {_names(relay.fifos)}{gains}")


def _names(fifos) -> str:
    return ", ".join(f.name for f in fifos)


def _cannot_fit(program: Program, core: CoreInputs, limit: int):
    raise PlacementError(
        f"{program.name}: group {core.group} on {core.tile.name} needs {len(core.dma)} FIFOs by DMA "
        f"({_names(core.dma)}) but a compute tile has {limit} input channels, and no group that sends "
        "it an object receives the others or can load them for it (a state is loaded only by its "
        "reader): combine two of those tensors in an earlier kernel call, or make a state it reads a "
        "param if it does not change."
    )
