"""Placement: fused groups onto the device's compute tiles in `snake_order`. A large MatMul or
MatVec spreads over whole columns of cores as a grid (tiling.py), calls over large tensors as a
stream (streaming.py); any other group takes one tile or, split by rows, several, its matrix
streamed through a mem tile (matrices.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from iron.compiler.channels import MemChannels
from iron.compiler.dma_inputs import unsplit_beside_producer
from iron.compiler.fuse import (
    SIZE_LIMIT,
    Group,
    expansion,
    held_bytes,
    leading_call,
    role,
)
from iron.compiler.layout import lies_of, stream_length
from iron.compiler.matrices import (
    Split,
    Stream,
    channels_left,
    expansion_rule,
    share_streamed_matrix,
    split_parts,
    stream_large_matrix,
    stream_rules,
)
from iron.compiler.readers import Reader
from iron.compiler.sides import best_sides, grid_or_split, sides_as_lying, tiled, whole_device_grid
from iron.compiler.streaming import (
    Flow,
    choose_flow,
    expansion_unit,
    joined_pieces,
    row_streamable,
    rows_do_not_stream,
    streamable,
    streamed_inputs,
    streamed_rows,
    unstreamable,
)
from iron.compiler.tiling import (
    MAX_BLOCK,
    Grid,
    call_sides,
    choose_grid,
    core_room,
    divisors,
    large,
    result_users,
    stored,
)
from iron.errors import DoesNotFit, PlacementError
from iron.ir import (
    Node,
    Op,
    Program,
    call_label,
    destination,
    dynamic_attrs,
    external_inputs,
    is_host_tensor,
    nbytes,
    storage,
    tensor_inputs,
)
from iron.kernels.base import Role
from iron.plan.plan import Choice, Tile, TileKind
from iron.plan.rules import Decision, NoGrid, NotPadded, NoWholeWords, Rule


@dataclass(frozen=True)
class Site:
    """Where a group runs: one tile, or one tile per row part of a split matrix."""

    group: Group
    tiles: tuple[Tile, ...]
    stream: Stream | None = None
    grid: Grid | None = None
    flow: Flow | None = None
    decided: Choice | None = None   # a grid or a split, chosen by estimated time (`grid_or_split`)

    @property
    def choices(self) -> tuple[Choice, ...]:
        spread = self.grid or self.flow or self.stream
        return tuple(filter(None, (self.decided, spread and spread.choice)))


@dataclass(frozen=True)
class Layout:
    """Every group's Site in program order, the Emit's tile (full-ELF designs with carried values),
    who uses each call's result outside its group (`users`), and the rules' decisions."""

    sites: tuple[Site, ...]
    emit: Tile | None
    rules: tuple[Decision, ...]
    users: dict[Node, tuple[str | Reader, ...]]

    def site(self, group: str) -> Site:
        return next(s for s in self.sites if s.group.name == group)


@dataclass(frozen=True)
class Room:
    """What a group may spread over (whole columns of `free`): the tiles and shim MM2S channels the
    other groups leave, the rows of cores at most, the mem tiles' channels; who reads each result
    outside its group (`outside`), the padded tensors' shapes (`padded`)."""

    program: Program
    device: object
    free: list[Tile]
    spare: int
    shim_in: int
    rows: int
    channels: MemChannels
    outside: dict
    padded: dict

    @property
    def columns(self) -> list[int]:
        return free_columns(self.free, self.device)


def snake_order(device) -> list[Tile]:
    """Every compute tile, column by column, rows up in even columns and down in odd ones."""
    return [Tile(col, row, TileKind.COMPUTE) for col in range(device.n_cols)
            for row in (device.compute_rows if col % 2 == 0 else reversed(device.compute_rows))]


def place(program: Program, groups: tuple[Group, ...], device, placements: tuple = (),
          shared: dict[str, str] | None = None, most_rows: int | None = None) -> Layout:
    """Tiles for every group, and for the Emit on a full-ELF device when values are carried;
    `shared`: groups of a looped iteration on the tile of an earlier one (repeat.py); `most_rows`:
    the rows of cores each grid and stream takes at most, all when None."""
    padded = {n: lie.shape for n, lie in lies_of(program, placements).items()}
    with_emit = bool(device.full_elf and program.carry)   # a segment but the last has no carry
    outside = outside_users(program, groups, with_emit)
    free = snake_order(device)
    names = {g.name for g in groups}
    shared = {g: on for g, on in (shared or {}).items() if g in names and on in names}
    owning = [g for g in groups if g.name not in shared]   # the groups taking tiles of their own
    large = {g.name for g in owning if held_bytes(list(g.calls)) > core_room(device)}   # spread or fail
    needed = len(owning) + with_emit
    if needed > len(free):
        raise PlacementError(f"{program.name} needs {needed} compute tiles but {device.name} has {len(free)}: compile "
                             "for a device with more columns, or make the graph's work fit fewer fused groups.")
    check_rows_fit(program, groups, device)
    channels = MemChannels(device)
    sites, rules = [], []
    for number, group in enumerate(groups):
        if group.name in shared:   # `share_core_in_iteration`: on the tile of an earlier group, alone on it
            tiles = next(s for s in sites if s.group.name == shared[group.name]).tiles[-1:]
            site = Site(group, tiles, stream_large_matrix(group, tiles, Split(), channels, device))
            sites.append(site)
            rules.append((Rule.SHARE_CORE_IN_ITERATION, f"{group.name} on {site.tiles[0].name} after "
                                                        f"{shared[group.name]}, its core running them in turn"))
            rules += stream_rules(group, site.stream)
            continue
        later = [g.name for g in groups[number + 1:] if g.name in large]
        room = Room(program, device, left_for_spreading(free, len(later), device),
                    len(free) - (len(owning) - owning.index(group) - 1) - with_emit,   # a tile per other group, the Emit's
                    device.n_cols * device.shim.dma_out_channels - (len(groups) - 1) - with_emit,
                    most_rows or len(device.compute_rows), channels, outside, padded)
        if on_device := read_on_device(group, outside, device):
            rules.append((Rule.TILE_MATMUL_OVER_ARRAY, f"{group.name}: {on_device}"))
        rule, spread = next(((rule, s) for rule, spreading in SPREADS if (s := spreading(group, room)) is not None),
                            (None, None))
        if spread is not None:
            grid = spread if isinstance(spread, Grid) else None
            sites.append(Site(group, spread.tiles, grid=grid, flow=None if grid else spread,
                              decided=grid_or_split_choice(group, room)))
            rules.append((rule, f"{group.name}: {spread.text()}"))
            if later:
                columns = len(free_columns(free, device))
                rules.append((Rule.COLUMNS_FOR_LATER_GROUPS, f"{group.name}: at most {max(0, columns - len(later))} of "
                                                             f"the {columns} free whole columns, one left to each later "
                                                             f"group larger than a tile ({', '.join(later)})"))
            if grid is not None and grid.expand is not None:
                rules.append(expansion_rule(group, grid.expand, grid.matrix, grid.m, grid.k))
            free = [t for t in free if t not in spread.tiles]
            continue
        check_whole_words(program, group.calls, device)
        if group.name in large and not any(role(c) in (Role.MATRIX, Role.EXPANSION, Role.ROW_REDUCTION) for c in group.calls):
            why = not_streamed(program, group.calls, outside, device) or \
                "no block of whole 32-bit words dividing each core's share fits a core with the channels left"
            rules.append((Rule.STREAM_ELEMENTWISE, f"{group.name}: not streamed: {why}"))
        crowded = unsplit_beside_producer(groups, number, outside, sites, device)
        left = channels_left(groups, number, sites, device, with_emit)
        split = Split() if crowded else split_parts(group, outside, room.spare, left, channels, free[0])
        parts, why = split.parts, split.fewer
        tiles, free = tuple(free[:parts]), free[parts:]
        stream = share_streamed_matrix(groups, group, parts, sites) or stream_large_matrix(
            group, tiles, split, channels, device)
        sites.append(Site(group, tiles, stream, decided=grid_or_split_choice(group, room)))
        rules.append((Rule.SNAKE_ORDER, f"{group.name} on {', '.join(t.name for t in tiles)}"))
        rules += stream_rules(group, stream)
        if crowded:
            rules.append((Rule.UNSPLIT_BESIDE_PRODUCER, f"{group.name}: {crowded}"))
        if why:
            rules.append((Rule.SPLIT_MATRIX_OVER_TILES, f"{group.name}: on {parts} tile{'s' * (parts > 1)}, not more: {why}"))
    emit = free[0] if with_emit else None
    if emit is not None:
        rules.append((Rule.SNAKE_ORDER, f"emit on {emit.name}"))
    return Layout(tuple(sites), emit, tuple(rules), outside)


def left_for_spreading(free: list[Tile], reserved: int, device) -> list[Tile]:
    """`columns_for_later_groups`: all free tiles but the last `reserved` free whole columns, one for
    each later group too large for a tile, so those spread too rather than a cut loading another
    configuration."""
    if not reserved:
        return free
    kept = free_columns(free, device)[-reserved:]
    return [t for t in free if t.col not in kept]


def outside_users(program: Program, groups: tuple[Group, ...], with_emit: bool) -> dict[Node, tuple[str | Reader, ...]]:
    """Who uses each call's result outside its group: group names, HOST, EMIT."""
    group_of = {c: g.name for g in groups for c in g.calls}
    users: dict[Node, list[str | Reader]] = {}
    for g in groups:
        for call in g.calls:
            for node in tensor_inputs(call):
                if group_of.get(node, g.name) != g.name and g.name not in users.get(node, []):
                    users.setdefault(node, []).append(g.name)
    for node in program.outputs:
        users.setdefault(node, []).append(Reader.HOST)
    for _, value in program.carry:
        if value.op == Op.ELEM:
            users.setdefault(value.src[0], []).extend([Reader.HOST, Reader.EMIT] if with_emit else [Reader.HOST])
    return {k: tuple(v) for k, v in users.items()}


# ---- the tiling rules ------------------------------------------------------------------------------

def check_rows_fit(program: Program, groups: tuple[Group, ...], device):
    """A row reduction reads its whole row before it writes anything, so a row is never cut into
    blocks: DoesNotFit when one row (with what every row shares) does not fit a compute tile, or
    a batch `stream_row_blocks` does not take does not."""
    room = core_room(device)
    stack = f"{room} ({device.compute.data_memory_bytes} less the core's {device.compute.default_stack_bytes}-byte stack)"
    for group, call in ((g, c) for g in groups for c in g.calls if role(c) is Role.ROW_REDUCTION):
        x = call.src[0]
        rows, width = (1, *x.shape) if len(x.shape) == 1 else x.shape
        words = 4 * len(dynamic_attrs(call))   # its per-call attributes travel with its rows
        needed = held_bytes([call]) + words
        per_row = (nbytes(x) + nbytes(call)) // rows
        shared = needed - per_row * rows
        if shared + per_row > room:
            per_element = sum(n.dtype.itemsize for n in call.src[:call.arg.n_inputs])
            per_element += call.dtype.itemsize if call.shape == x.shape else 0
            fixed = words + (0 if call.shape == x.shape else per_row - x.dtype.itemsize * width)
            raise DoesNotFit(
                f"{program.name}: {call_label(program, call)} reduces a row of {width} {x.dtype.name} "
                f"elements, whose inputs and result take {shared + per_row} bytes, but a compute tile has {stack}, "
                f"and a row reduction reads its whole row at once, so it is not cut into blocks: "
                f"make the row at most {(room - fixed) // per_element} elements, or reduce it in pieces."
            )
        if needed > room and (why := rows_do_not_stream(group.calls, lambda c: call_label(program, c))):
            raise DoesNotFit(
                f"{program.name}: {call_label(program, call)} reduces a batch of {rows} rows of {width} "
                f"{x.dtype.name} elements, whose inputs and results take {needed} bytes, but a compute tile has "
                f"{stack}, and the batch does not stream in row-blocks: {why}. Make the batch at most "
                f"{(room - shared) // per_row} rows per call (one call per block of rows)."
            )


def free_columns(free: list[Tile], device) -> list[int]:
    return [col for col in range(device.n_cols)
            if all(Tile(col, row, TileKind.COMPUTE) in free for row in device.compute_rows)]


def stream_elementwise(group: Group, room: Room) -> Flow | None:
    """A group of elementwise calls larger than SIZE_LIMIT whose results only the host reads streams
    in blocks over whole free columns of cores."""
    calls, outside = group.calls, room.outside
    if held_bytes(list(calls)) <= SIZE_LIMIT or not_streamed(room.program, calls, outside, room.device) or \
            outside.get(calls[-1], ()) != _users(calls[-1]) or \
            unstreamed_view((*external_inputs(calls), *filter(None, [destination(calls[-1])])), room.padded):
        return None
    flow = _choose_flow(calls, room, returned=tuple(c for c in calls[:-1] if outside.get(c)))
    return flow and replace(flow, mems=taken(flow, room.channels, len(flow.inputs), len(flow.results)))


def stream_joined(group: Group, room: Room) -> Flow | None:
    """A lone Concat larger than SIZE_LIMIT joining host tensors end to end whose result only the
    host reads streams each piece's blocks in turn, as `stream_elementwise` streams one input."""
    pieces = joined_pieces(group.calls)
    if not pieces or held_bytes(list(group.calls)) <= SIZE_LIMIT or \
            room.outside.get(group.calls[0], ()) != (Reader.HOST,) or any(storage(n) in room.padded for n in pieces):
        return None
    flow = choose_flow(group.calls, room.columns, room.spare, room.device, room.shim_in, most_rows=room.rows)
    return flow and replace(flow, mems=taken(flow, room.channels))


def not_streamed(program: Program, calls, outside, device) -> str:
    """Why elementwise calls do not stream by their structure and readers, naming calls as `program`
    does; "" when nothing is against."""
    join = next((c for c in calls if c.arg.kernel.joins), None)
    if join is not None and not joined_pieces(calls):
        axis = join.arg.attr_dict["axis"] % len(join.shape)
        how = (f"joins along axis {axis}, each row of its result a row of every input" if join.shape[:axis] != (1,) * axis
               else "is fused with other calls or joins tensors that do not lie in host memory as runs of words")
        return f"{call_label(program, join)} {how}: only a lone Concat of host tensors end to end streams (stream_joined)"
    if why := unstreamable(calls, lambda c: call_label(program, c)):
        return why
    if read := [c for c in calls if outside.get(c) and outside[c] != (Reader.HOST,)]:
        return (f"{call_label(program, read[0])}'s result is read by {', '.join(map(str, outside[read[0]]))}, "
                "and a stream's results go to the host alone")
    returned = [c for c in calls[:-1] if outside.get(c)] + [calls[-1]]
    if len(returned) > device.shim.dma_in_channels:
        return (f"it returns {len(returned)} results ({', '.join(call_label(program, c) for c in returned)}) but a "
                f"column's shim tile has {device.shim.dma_in_channels} S2MM channels, one per result "
                "(stream_every_result): return fewer")
    return ""


def stream_row_blocks(group: Group, room: Room) -> Flow | None:
    """A row reduction over a batch of rows larger than SIZE_LIMIT whose result only the host reads
    streams in blocks of whole rows (as wide as they lie), as `stream_elementwise` streams."""
    calls = group.calls
    x = calls[0].src[0]
    if not row_streamable(calls) or held_bytes(list(calls)) <= SIZE_LIMIT or \
            room.outside.get(calls[0], ()) != _users(calls[0]) or unstreamed_view((x,), room.padded):
        return None
    width = expansion_unit(calls[0]) if role(calls[0]) is Role.EXPANSION and x not in room.padded else room.padded.get(x, x.shape)[1]
    flow = _choose_flow(calls, room, width=width)
    return flow and replace(flow, mems=taken(flow, room.channels))


def taken(spread, channels, inputs: int = 1, results: int = 1) -> tuple:
    """The mem-tile channels a stream or a grid of its own rows takes in each of its columns."""
    rows = len(spread.rows)
    return tuple(channels.take(col, inputs + rows * results, inputs * rows + results) for col in spread.cols)


def _users(last: Node) -> tuple[Reader, ...]:
    """Who alone may read a stream's result outside its group: the host, or no one (a state's)."""
    return () if last.arg.writes else (Reader.HOST,)


def unstreamed_view(nodes, padded: dict) -> bool:
    """Whether a view of a padded tensor among `nodes` does not stream by its rows as it lies."""
    return any(n.op == Op.VIEW and storage(n) in padded and streamed_rows(n, padded) is None for n in nodes)



def _choose_flow(calls, room: Room, width: int = 1, returned: tuple[Node, ...] = ()):
    """`choose_flow` over the length the streamed tensors lie in; None when they lie inconsistently.
    A result lying in wider rows (`pad_written_by_producer`) streams in whole rows."""
    inputs, padded = streamed_inputs(calls)[0], room.padded
    if (length := stream_length(calls, inputs, padded)) is None:
        return None
    result = calls[-1]
    wider = width == 1 and length == inputs[0].size and padded.get(result, result.shape)[1:] != result.shape[1:]
    rows = [streamed_rows(n, padded) for n in (*inputs, *filter(None, [destination(result)]))] if width == 1 else []
    row = math.lcm(result.shape[-1] if wider else 1, *filter(None, rows))
    return choose_flow(calls, room.columns, room.spare, room.device, room.shim_in, width=width, row=row,
                       padded=None if length == inputs[0].size else length, returned=returned, most_rows=room.rows)


def tile_matmul_over_array(group: Group, room: Room) -> Grid | None:
    """A group that is one large MatMul or MatVec whose result only the host reads runs over a grid
    of whole free columns of cores, taking mem-tile channels per grid column (B's blocks, or the
    split of its rows, and the C join) and per grid row (A's blocks)."""
    call, expand, outside, channels = leading_call(group.calls), expansion(group.calls), room.outside, room.channels
    if group.calls[-1] is not call or not wants_grid(call, outside.get(call, ()), expand) or \
            not tiled(call, room.device, expand) or expand is not None and outside.get(expand) or (sides := sides_as_lying(call, room.padded)) is None:
        return None
    grid = choose_grid(call, tuple(room.columns), room.spare, room.device, room.shim_in, room.rows, expand,
                       None if sides == call_sides(call) else sides)
    if grid is None:
        check_some_grid(room.program, call, room.device)
        return None
    if grid.own_rows:   # per column: the rows of A split between its cores, their results joined
        return replace(grid, c_mems=taken(grid, channels))
    c_mems = tuple(channels.take(col, 1 + len(grid.rows), 2) for col in grid.cols)
    a_mems = tuple(channels.take(grid.cols[r % len(grid.cols)], 1, 1) for r in range(len(grid.rows)))
    return replace(grid, a_mems=a_mems, c_mems=c_mems)


def wants_grid(call: Node, users: tuple[str | Reader, ...], expand: Node | None = None) -> bool:
    """A matrix call of two whole host tensors whose result only the host reads, which a grid takes
    when `tiled`. Not a call whose matrix is stored packed (QMatVec's blocks), which no k-block may
    cut: it streams by rows."""
    kernel = call.arg.kernel
    if kernel.role is not Role.MATRIX or kernel.packed or call.arg.n_inputs != 2 or users != result_users(call):
        return False
    return all(is_host_tensor(x) and x.op != Op.VIEW for x in (stored(call, expand), call.src[1]))


def grid_or_split_choice(group: Group, room: Room) -> Choice | None:
    """`grid_or_split`'s Choice for a group that is a MatVec the grid may take, when it was priced."""
    call, expand = leading_call(group.calls), expansion(group.calls)
    if len(call.shape) != 1 or group.calls[-1] is not call or large(call, expand) or \
            not wants_grid(call, room.outside.get(call, ()), expand):
        return None
    return grid_or_split(call, expand, room.device, not call.arg.writes)


SPREADS = ((Rule.TILE_MATMUL_OVER_ARRAY, tile_matmul_over_array), (Rule.STREAM_ELEMENTWISE, stream_elementwise),
           (Rule.STREAM_ROW_BLOCKS, stream_row_blocks), (Rule.STREAM_JOINED, stream_joined))   # tried in order


def read_on_device(group: Group, outside, device) -> str:
    """Why a MatMul or MatVec the grid would take is not spread over the array: groups of the same
    configuration read its result, which a grid writes to DDR; "" otherwise."""
    call, expand = leading_call(group.calls), expansion(group.calls)
    readers = [u for u in outside.get(call, ()) if u is not Reader.HOST]
    if group.calls[-1] is not call or not readers or not wants_grid(call, (Reader.HOST,), expand) or not tiled(call, device, expand):
        return ""
    return (f"not over the array: {', '.join(map(str, readers))} read{'s' * (len(readers) == 1)} its result in this "
            "configuration, and a grid's results leave each column for DDR; it runs as split_matrix_over_tiles "
            "says, or over the array when a cut puts its readers in a later configuration")


def check_some_grid(program: Program, call: Node, device) -> None:
    """A MatMul whose B and result do not fit a tile with no grid even on the whole device is
    DoesNotFit here (`NoGrid`), not later as one tile's buffers; compile_segments adds why
    pad_to_block did not pad it (layout.refusal)."""
    room, held = core_room(device), nbytes(call.src[1]) + nbytes(call)
    if len(call.shape) != 2 or held <= room or whole_device_grid(call, device) is not None:
        return
    sides = call_sides(call)
    raise DoesNotFit.of(NoGrid(program.name, call_label(program, call), sides, call.dtype.name, held, room,
                               device.name, MAX_BLOCK, tuple(max(divisors(s, 1)) for s in sides),
                               tuple(-(-s // 32) * 32 for s in sides),
                               NotPadded.NO_PADDED_GRID if best_sides(call, device) is None else NotPadded.ELSEWHERE))


def check_whole_words(program: Program, calls, device) -> None:
    """Elementwise calls too large for a tile whose element count no block of whole 32-bit words
    divides are DoesNotFit here (`NoWholeWords`)."""
    room, held = core_room(device), held_bytes(list(calls))
    size = external_inputs(calls)[0].size
    per_word = max(4 // min(4, n.dtype.itemsize) for n in (*external_inputs(calls), *calls))
    if not streamable(calls) or held <= room or size % per_word == 0:
        return
    raise DoesNotFit.of(NoWholeWords(program.name, tuple(call_label(program, c) for c in calls), size,
                                     calls[-1].dtype.name, held, room, per_word, NotPadded.NO_PADDED_LENGTH))
