"""Placement: fused groups onto the device's compute tiles, by named rules. `snake_order` gives
consecutive groups neighbouring tiles; `stream_large_matrix` streams a matrix operand larger than
its share of a compute tile through a mem tile in blocks of rows, once for every unsplit group
reading it (`share_streamed_matrix`); `split_matrix_over_tiles` splits a MatVec over 128 KiB by
rows over 2, 4 or 8 tiles (the fewest bringing parts to 128 KiB, else the most that fit), joined
on a mem tile, unless `unsplit_beside_producer` keeps it on one tile beside the group it reads;
`tile_matmul_over_array` spreads a large MatMul or MatVec, and `stream_elementwise` elementwise
calls over large tensors, over whole columns of cores (iron/compiler/tiling.py); `check_rows_fit`
refuses a row reduction wider than a tile. Tile sizes and channel counts are the device's
(docs/platform.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from iron.compiler.channels import MemChannels
from iron.compiler.fifos import Stem, fifo
from iron.compiler.fuse import (
    SIZE_LIMIT,
    STREAM_OBJECT_BYTES,
    Group,
    expansion,
    held_bytes,
    leading_call,
    role,
    stored_matrix,
)
from iron.compiler.pad import (
    K_QUANTUM,
    ROW_QUANTUM,
    best_sides,
    grid_sides,
    is_cut_value,
    matrix_unpadded,
    padded_nodes,
    padded_sides,
    producer_written_nodes,
    readers_of,
    stream_length,
    stream_unpadded,
    word_rows,
    zeros_made_nodes,
)
from iron.compiler.plan import Tile, TileKind
from iron.compiler.readers import Reader
from iron.compiler.rules import Decision, Rule
from iron.compiler.tiling import (
    MAX_BLOCK,
    Flow,
    Grid,
    call_sides,
    choose_flow,
    choose_grid,
    core_room,
    divisors,
    expansion_unit,
    joined_pieces,
    row_streamable,
    rows_do_not_stream,
    streamable,
    streamed_inputs,
    streamed_rows,
    unstreamable,
    wants_grid,
)
from iron.errors import DoesNotFit, PlacementError
from iron.ir import (
    MemoryKind,
    Node,
    Op,
    Program,
    call_label,
    describe,
    destination,
    dynamic_attrs,
    external_inputs,
    is_computed_view,
    is_host_tensor,
    nbytes,
    state_of,
    state_written_whole,
    storage,
    tensor_inputs,
)
from iron.kernels.base import Role

SPLIT_PART_BYTES = 128 * 1024   # a MatVec's matrix larger than this is split over tiles
SPLIT_COUNTS = (2, 4, 8)
FORWARD_BYTES = 4096   # the largest host tensor one group forwards to later readers


@dataclass(frozen=True)
class Stream:
    """A matrix operand streamed through mem tile `mem`: `blocks` objects of `rows` rows each
    per part per launch, split over `parts` tiles (1: a forward link). `matrix` is the tensor as
    host memory holds it: with `expand` (`dequant_before_matvec`), the blocks that call expands
    on the tile, object by object, into the matrix the leading call reads. `owner`: the earlier
    group whose stream of the same matrix this group's core reads too (`share_streamed_matrix`)."""

    matrix: Node
    rows: int
    blocks: int
    parts: int
    mem: Tile
    expand: Node | None = None
    owner: str | None = None

    @property
    def fifo(self) -> str | None:
        """The FIFO an unsplit group's core reads the blocks from when another group streams them."""
        return None if self.owner is None else fifo(self.owner, Stem.W)


@dataclass(frozen=True)
class Site:
    """Where a group runs: one tile, or one tile per row part of a split matrix."""

    group: Group
    tiles: tuple[Tile, ...]
    stream: Stream | None = None
    grid: Grid | None = None
    flow: Flow | None = None

    @property
    def choice(self):
        """The choice the cost model made for its grid or flow, if any."""
        spread = self.grid or self.flow
        return None if spread is None else spread.choice


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


def snake_order(device) -> list[Tile]:
    """Every compute tile, column by column, rows up in even columns and down in odd ones."""
    tiles = []
    for col in range(device.n_cols):
        rows = device.compute_rows if col % 2 == 0 else tuple(reversed(device.compute_rows))
        tiles += [Tile(col, row, TileKind.COMPUTE) for row in rows]
    return tiles


def place(program: Program, groups: tuple[Group, ...], device, placements: tuple = ()) -> Layout:
    """Tiles for every group, and for the Emit on a full-ELF device when values are carried;
    `placements`: the host placements, some padded by `pad_to_block`."""
    padded, readers = padded_nodes(program, placements), readers_of(program, groups)
    written = producer_written_nodes(program, placements)
    zeros = zeros_made_nodes(program, placements)
    with_emit = bool(device.full_elf and program.carry)   # a segment but the last has no carry
    outside = outside_users(program, groups, with_emit)
    free = snake_order(device)
    needed = len(groups) + with_emit
    if needed > len(free):
        _too_many_tiles(program, device, needed, len(free))
    check_rows_fit(program, groups, device)
    channels = MemChannels(device)
    sites, rules = [], []
    for number, group in enumerate(groups):
        spare = len(free) - (len(groups) - number - 1) - with_emit
        # one per other group, and the Emit's words
        shim_in = device.n_cols * device.shim.dma_out_channels - (len(groups) - 1) - with_emit
        grid = tile_matmul_over_array(program, group, outside, free, (spare, shim_in), channels, device,
                                      (padded, readers))
        if grid is not None:
            free = [t for t in free if t not in grid.tiles]
            sites.append(Site(group, grid.tiles, grid=grid))
            rules += grid_padding_rule(program, group, grid, readers, device, written, zeros)
            rules += written_padding_rule(program, group, (grid.call,), padded, written)
            rules.append((Rule.TILE_MATMUL_OVER_ARRAY, f"{group.name}: {grid.text()}"))
            if grid.expand is not None:
                rules.append(expansion_rule(group, grid.expand, grid.matrix, grid.m, grid.k))
            continue
        on_device = read_on_device(group, outside)
        if on_device:
            rules.append((Rule.TILE_MATMUL_OVER_ARRAY, f"{group.name}: {on_device}"))
        rule, flow = next(((rule, flow) for rule, streams in STREAMS
                           if (flow := streams(group, outside, free, (spare, shim_in), channels, device, padded))
                           is not None), (None, None))
        if flow is not None:
            free = [t for t in free if t not in flow.tiles]
            sites.append(Site(group, flow.tiles, flow=flow))
            rules += flow_padding_rule(program, group, flow, padded, zeros)
            rules += written_padding_rule(program, group, flow.calls, padded, written)
            rules.append((rule, f"{group.name}: {flow.text()}"))
            continue
        check_whole_words(program, group.calls, device, readers)
        if why := not_streamed(program, group, outside, device):
            rules.append((Rule.STREAM_ELEMENTWISE, f"{group.name}: not streamed: {why}"))
        crowded = unsplit_beside_producer(groups, number, outside, sites, device)
        parts, why = (1, "") if crowded else split_parts(group, outside, spare, channels, free[0])
        tiles, free = tuple(free[:parts]), free[parts:]
        stream = share_streamed_matrix(groups, group, parts, sites) or stream_large_matrix(
            group, tiles, parts, channels, device)
        sites.append(Site(group, tiles, stream))
        rules.append((Rule.SNAKE_ORDER, f"{group.name} on {', '.join(t.name for t in tiles)}"))
        rules += written_padding_rule(program, group, group.calls, padded, written)
        rules += _stream_rules(group, stream)
        if crowded:
            rules.append((Rule.UNSPLIT_BESIDE_PRODUCER, f"{group.name}: {crowded}"))
        if why:
            rules.append((Rule.SPLIT_MATRIX_OVER_TILES, f"{group.name}: on {parts} tile{'s' * (parts > 1)}, not more: {why}"))
    emit = free[0] if with_emit else None
    if emit is not None:
        rules.append((Rule.SNAKE_ORDER, f"emit on {emit.name}"))
    return Layout(tuple(sites), emit, tuple(rules), outside)


def outside_users(program: Program, groups: tuple[Group, ...], with_emit: bool) -> dict[Node, tuple[str | Reader, ...]]:
    """Who uses each call's result outside its group: group names, HOST per output or carried
    element, EMIT."""
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


def _too_many_tiles(program: Program, device, needed: int, have: int):
    raise PlacementError(
        f"{program.name} needs {needed} compute tiles but {device.name} has {have}: compile for a "
        "device with more columns, or make the graph's work fit fewer fused groups."
    )


def _stream_rules(group: Group, stream: Stream | None) -> list[Decision]:
    if stream is None:
        return []
    m = stream.matrix
    what = f"{group.name}: {describe(m)} {m.shape} {m.dtype.name} ({nbytes(m)} bytes)"
    if stream.owner is not None:
        return [(Rule.SHARE_STREAMED_MATRIX, f"{what} read from {stream.fifo}, the blocks {stream.owner} streams, "
                                          f"broadcast by {stream.mem.name}")]
    rules = [(Rule.STREAM_LARGE_MATRIX,
              f"{what} streamed as {stream.blocks} blocks of {stream.rows} rows per part via {stream.mem.name}")]
    if stream.expand is not None:
        rules.append(expansion_rule(group, stream.expand, m, stream.rows))
    if stream.parts > 1:
        rules.append((Rule.SPLIT_MATRIX_OVER_TILES, f"{what} split by rows over {stream.parts} tiles"))
    return rules


def expansion_rule(group: Group, expand: Node, blocks: Node, rows: int, cols: int | None = None) -> Decision:
    """`dequant_before_matvec`'s decision as `describe()` shows it: what moves and what each
    tile expands, in bytes; `cols`: the columns of a k-block (`expansion_k_blocks`), else whole rows."""
    big_k = expand.shape[1]
    cols = cols or big_k
    of = f" of {cols} columns" * (cols != big_k)
    return (Rule.DEQUANT_BEFORE_MATVEC,
            f"{group.name}: {describe(blocks)} moves as stored, {nbytes(blocks)} bytes; each block of {rows} rows{of} "
            f"({rows * row_bytes(blocks) * cols // big_k} bytes) is expanded on its tile by {expand.arg.kernel.__name__} to "
            f"{rows} x {cols} {expand.dtype.name} ({rows * row_bytes(expand) * cols // big_k} bytes) just before "
            f"{leading_call(group.calls).arg.kernel.__name__}; the {expand.shape} {expand.dtype.name} matrix "
            f"({nbytes(expand)} bytes) is never in DDR")


def row_bytes(matrix: Node) -> int:
    return nbytes(matrix) // matrix.shape[0]


# ---- the tiling rules ------------------------------------------------------------------------------

def check_rows_fit(program: Program, groups: tuple[Group, ...], device):
    """A row reduction (RMSNorm, Softmax, Argmax) reads its whole row before it writes anything,
    so a row cannot be cut into blocks: DoesNotFit, naming the call, when one row's input and
    result and what every row shares (RMSNorm's w) take more than a compute tile's memory less
    the core's stack, or, for a batch of rows (rows, n) that `stream_row_blocks` cannot take,
    when the whole batch does."""
    room = core_room(device)
    stack = f"{room} ({device.compute.data_memory_bytes} less the core's {device.compute.default_stack_bytes}-byte stack)"
    for group in groups:
        _check_rows_fit(program, group, room, stack)


def _check_rows_fit(program: Program, group: Group, room: int, stack: str):
    for call in (c for c in group.calls if role(c) is Role.ROW_REDUCTION):
        x = call.src[0]
        rows, width = (1, *x.shape) if len(x.shape) == 1 else x.shape
        words = 4 * len(dynamic_attrs(call))   # its per-call attributes travel with its rows
        needed = held_bytes([call]) + words
        per_row = (nbytes(x) + nbytes(call)) // rows
        shared = needed - per_row * rows
        if shared + per_row > room:
            # every (n,) operand and a result of x's shape grow with the row; a per-row result does not
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
    """The columns all of whose compute tiles are free."""
    return [col for col in range(device.n_cols)
            if all(Tile(col, row, TileKind.COMPUTE) in free for row in device.compute_rows)]


def stream_elementwise(group: Group, outside, free: list[Tile], limits: tuple[int, int], channels,
                       device, padded: dict) -> Flow | None:
    """A group of elementwise calls larger than SIZE_LIMIT whose last result only the host reads
    (and no other result anyone outside) is streamed in blocks over whole free columns of cores
    (iron/compiler/tiling.py chooses how), taking on each column's mem tile a channel in per
    input and per core and out per input and core, plus the joined result's."""
    calls = group.calls
    if not streamable(calls) or held_bytes(list(calls)) <= SIZE_LIMIT:
        return None
    returned = tuple(c for c in calls[:-1] if outside.get(c))
    if any(outside[c] != (Reader.HOST,) for c in returned) or len(returned) >= device.shim.dma_in_channels:
        return None   # `stream_every_result`: each result the host alone reads, a shim S2MM channel each
    if outside.get(calls[-1], ()) != (() if calls[-1].arg.writes else (Reader.HOST,)):
        return None
    dest = destination(calls[-1])
    if any(n.op == Op.VIEW and storage(n) in padded for n in (*external_inputs(calls), *filter(None, [dest]))):
        return None   # a view's run of words is its own shape's (`stream_contiguous_views`), not a padded one's
    spare, shim_in = limits   # tiles and shim MM2S channels the other groups leave
    flow = _choose_flow(calls, free, spare, device, shim_in, padded, returned=returned)
    if flow is None:
        return None
    rows, inputs, results = len(flow.rows), len(flow.inputs), len(flow.results)
    return replace(flow, mems=tuple(channels.take(col, inputs + rows * results, inputs * rows + results)
                                    for col in flow.cols))


def stream_joined(group: Group, outside, free: list[Tile], limits: tuple[int, int], channels,
                  device, padded: dict) -> Flow | None:
    """A lone Concat larger than SIZE_LIMIT joining host tensors end to end (`joined_pieces`) whose
    result only the host reads is copied in blocks over whole free columns of cores, each piece's
    blocks in turn through one FIFO per core, as `stream_elementwise` streams one input."""
    pieces = joined_pieces(group.calls)
    if not pieces or held_bytes(list(group.calls)) <= SIZE_LIMIT or outside.get(group.calls[0], ()) != (Reader.HOST,):
        return None
    if any(storage(n) in padded for n in pieces):
        return None
    spare, shim_in = limits
    flow = choose_flow(group.calls, free_columns(free, device), spare, device, shim_in)
    if flow is None:
        return None
    return replace(flow, mems=tuple(channels.take(col, 1 + len(flow.rows), len(flow.rows) + 1) for col in flow.cols))


def not_streamed(program: Program, group: Group, outside, device) -> str:
    """Why a group of elementwise or other calls (no matrix call, expansion or row reduction, which
    have their own rules) larger than a compute tile does not stream (`stream_elementwise`), so
    describe() and the refusal say it; "" for any other group."""
    calls = group.calls
    own_rules = (Role.MATRIX, Role.EXPANSION, Role.ROW_REDUCTION)
    if held_bytes(list(calls)) <= core_room(device) or any(role(c) in own_rules for c in calls):
        return ""
    join = next((c for c in calls if c.arg.kernel.joins), None)
    if join is not None and not joined_pieces(calls):
        axis = join.arg.attr_dict["axis"] % len(join.shape)
        how = (f"joins along axis {axis}, each row of its result a row of every input" if join.shape[:axis] != (1,) * axis
               else "is fused with other calls or joins tensors that do not lie in host memory as runs of words")
        return f"{call_label(program, join)} {how}: only a lone Concat of host tensors end to end streams (stream_joined)"
    why = unstreamable(calls, lambda c: call_label(program, c))
    if why is not None:
        return why
    read = [c for c in calls if outside.get(c) and outside[c] != (Reader.HOST,)]
    if read:
        return (f"{call_label(program, read[0])}'s result is read by {', '.join(map(str, outside[read[0]]))}, "
                "and a stream's results go to the host alone")
    returned = [call_label(program, c) for c in calls if outside.get(c)]
    if len(returned) > device.shim.dma_in_channels:
        return (f"it returns {len(returned)} results ({', '.join(returned)}) but a column's shim tile has "
                f"{device.shim.dma_in_channels} S2MM channels, one per result (stream_every_result): return fewer")
    return "no block of whole 32-bit words dividing each core's share fits a core with the channels left"


def stream_row_blocks(group: Group, outside, free: list[Tile], limits: tuple[int, int], channels,
                      device, padded: dict) -> Flow | None:
    """A row reduction over a batch of rows larger than SIZE_LIMIT whose result only the host
    reads is streamed in blocks of whole rows (as wide as they lie: `pad_through_row_width`)
    over whole free columns of cores, as `stream_elementwise` streams elementwise calls
    (iron/compiler/tiling.py chooses how)."""
    calls = group.calls
    if not row_streamable(calls) or held_bytes(list(calls)) <= SIZE_LIMIT or outside.get(calls[0], ()) != (Reader.HOST,):
        return None
    spare, shim_in = limits
    x = calls[0].src[0]
    width = expansion_unit(calls[0]) if role(calls[0]) is Role.EXPANSION else padded.get(x, x.shape)[1]
    flow = _choose_flow(calls, free, spare, device, shim_in, padded, width=width)
    if flow is None:
        return None
    return replace(flow, mems=tuple(channels.take(col, 1 + len(flow.rows), len(flow.rows) + 1) for col in flow.cols))


STREAMS = ((Rule.STREAM_ELEMENTWISE, stream_elementwise), (Rule.STREAM_ROW_BLOCKS, stream_row_blocks),
           (Rule.STREAM_JOINED, stream_joined))   # tried in order

def _choose_flow(calls, free: list[Tile], spare: int, device, shim_in: int, padded: dict, width: int = 1,
                 returned: tuple[Node, ...] = ()):
    """`choose_flow` on the free columns over the length the streamed tensors lie in (padded by
    `pad_to_block`, or their own); None when they lie inconsistently. Elementwise calls over
    their own length whose result lies in wider rows (`pad_written_by_producer`) stream whole rows."""
    inputs = streamed_inputs(calls)[0]
    length = stream_length(calls, inputs, padded)
    if length is None:
        return None
    result = calls[-1]
    wider = width == 1 and length == inputs[0].size and padded.get(result, result.shape)[1:] != result.shape[1:]
    rows = [streamed_rows(n) for n in (*inputs, *filter(None, [destination(result)]))] if width == 1 else []
    row = math.lcm(result.shape[-1] if wider else 1, *filter(None, rows))
    return choose_flow(calls, free_columns(free, device), spare, device, shim_in, width=width,
                       padded=None if length == inputs[0].size else length, row=row, returned=returned)


def tile_matmul_over_array(program: Program, group: Group, outside, free: list[Tile], limits: tuple[int, int],
                           channels, device, padding: tuple[dict, dict]) -> Grid | None:
    """A group that is one large MatMul or MatVec whose result only the host reads runs over a
    grid of whole free columns of cores (iron/compiler/tiling.py chooses it), taking per grid
    column a mem tile's channels for B's blocks (a MatVec: the split of its rows) and the C
    join, and per grid row one for A's blocks. A MatMul whose rows are not whole 32-bit words
    takes blocks of whole rows (`whole_rows_when_not_words`)."""
    call, expand = leading_call(group.calls), expansion(group.calls)
    if group.calls[-1] is not call or not wants_grid(call, outside.get(call, ()), expand):
        return None
    if expand is not None and outside.get(expand):
        return None
    padded, readers = padding   # the padded tensors' shapes (`padded_nodes`), the readers (`readers_of`)
    sides = grid_sides(call, padded)
    if sides is None:
        return None
    spare, shim_in = limits   # tiles and shim MM2S channels the other groups leave
    grid = choose_grid(call, free_columns(free, device), spare, device, shim_in, expand,
                       None if sides == call_sides(call) else sides)
    if grid is None:
        check_some_grid(program, call, device, matrix_unpadded(call, readers))
        return None
    rows = len(grid.rows)
    if grid.own_rows:   # per column: the rows of A split between its cores, their results joined
        return replace(grid, c_mems=tuple(channels.take(col, 1 + rows, rows + 1) for col in grid.cols))
    c_mems = tuple(channels.take(col, 1 + rows, 2) for col in grid.cols)
    a_mems = tuple(channels.take(grid.cols[r % len(grid.cols)], 1, 1) for r in range(rows))
    return replace(grid, a_mems=a_mems, c_mems=c_mems)


def grid_padding_rule(program: Program, group: Group, grid: Grid, readers: dict, device,
                      written: frozenset[Node] = frozenset(), zeros: dict | None = None) -> list[Decision]:
    """`pad_to_block`'s decision for a grid as describe() shows it: the sides it padded, or, for
    a grid short of the free cores whose padded sides would be better, why it may not pad them
    (`written`: the operands whose producer writes them padded, not a padded grid; `zeros`: those
    made over a padded layout, and the rule computing their padding's zeros)."""
    call = grid.call
    if grid.padded is None:
        why = matrix_unpadded(call, readers) if grid.fewer else ""
        sides = best_sides(call, device) if why else None
        if sides is None:
            return []
        return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} is not padded, though padded to "
                                 f"(M, K, N) = {sides} it would take a better grid: {why}")]
    names = ("M", "K") if grid.vector else ("M", "K", "N")
    sides = ", ".join(f"{name} {side} -> {to}" for name, side, to in zip(names, call_sides(call), grid.padded)
                      if side != to)
    k_padded = call_sides(call)[1] != grid.padded[1]
    computed = "".join(f" ({operand}'s computed from zeros: {(zeros or {}).get(n, rule)})"
                       for operand, rule, n in (("A", Rule.PAD_THROUGH_MATMUL, call.src[0]),
                                                ("B", Rule.PAD_THROUGH_MATMUL_B, call.src[1]))
                       if is_cut_value(n) and n not in written)
    result = f"the state {state_of(destination(call))} it writes whole" if call.arg.writes else "the result"
    if grid.padded[::2] == call_sides(call)[::2]:   # `pad_k_only`
        return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} padded with zeros ({sides}) over "
                                 f"{len(grid.tiles)} tiles: A and B lie so in DDR, the host writes the user's region; "
                                 f"K's padding is zeros in both operands{computed}; {result} keeps its own shape "
                                 "(pad_k_only: M and N unpadded, so whoever reads it reads no padding)")]
    return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} padded with zeros ({sides}) over "
                             f"{len(grid.tiles)} tiles: A, B and {result} lie so in DDR, the host writes and reads "
                             "the user's region" + "; K's padding is zeros in both operands" * k_padded
                             + computed * k_padded
                             + "; the result's padding is computed from zeros, never read as the user's region"
                             + word_rows_text(call, grid, device) + wider_text(call, grid, device))]


def wider_text(call: Node, grid: Grid, device) -> str:
    """`pad_wider`'s choice as describe() shows it: a side padded past its own quantum, because
    the sides padded to it had no grid."""
    narrow = padded_sides(call, device)
    near = (word_rows(call), *call_sides(call)[1:])
    if all(side in sides for side, *sides in zip(grid.padded, call_sides(call), near, narrow)):
        return ""
    return (f"; pad_wider: padded to {narrow} it has no grid (no dividing block within a core and a Dma "
            f"op's repeats), so its sides may pad to multiples of {K_QUANTUM}")


def word_rows_text(call: Node, grid: Grid, device) -> str:
    """`pad_m_to_words`' choice as describe() shows it: a MatVec's M padded to the fewest rows of
    whole-word results instead of ROW_QUANTUM per core, and the bytes of A either way."""
    big_m, big_k = grid.padded[:2]
    up = padded_sides(call, device)[0]
    if not grid.vector or big_m != word_rows(call) or big_m in (up, call.shape[0]):
        return ""
    size = call.src[0].dtype.itemsize
    return (f"; pad_m_to_words: M padded to {big_m}, the fewest rows whose {call.dtype.name} results are whole 32-bit "
            f"words, not {up} ({ROW_QUANTUM} rows per core): A takes {big_m * big_k * size} bytes padded, not "
            f"{up * big_k * size}")


def flow_padding_rule(program: Program, group: Group, flow: Flow, padded: dict,
                      zeros: dict | None = None) -> list[Decision]:
    """`pad_to_block`'s decision for a stream as describe() shows it, when it padded the length
    (a row reduction's: the number of rows, and a padded MatMul result's width it reads,
    `pad_through_row_width`, or its rows a padded MatMul reads as A, `pad_upstream_rows`;
    elementwise calls over a matrix: the layout of the padded MatMul result they read, directly
    or passed on, `pad_through_elementwise`; `zeros`: the tensors made over a padded layout)."""
    if flow.padded is None:
        return []
    call, rows = flow.calls[-1], flow.inputs[0].size // flow.width
    if (zeros or {}).get(call) is Rule.PAD_UPSTREAM_ROWS:
        what = upstream_rows_text(call, flow, padded)
    elif flow.width > 1 and flow.width != flow.inputs[0].shape[1]:
        what = row_width_text(call, flow)
    elif flow.width == 1 and len(call.shape) == 2 and not any(n.op == Op.CALL or is_cut_value(n) for n in flow.inputs):
        what = (f"over {call.shape} elements streams over them padded with zeros to {padded[call]} "
                "(pad_upstream_zeros: its kernels keep zeros, so the padding of the result a padded MatMul reads is "
                "zeros; the inputs and the result lie so in DDR)")
    elif flow.width == 1 and len(call.shape) == 2:
        cut = [n for n in flow.inputs if is_cut_value(n)]
        passed = sum(n in (zeros or {}) for n in cut)   # results elementwise calls made over the layout
        read = ("a padded MatMul's result" if len(cut) == 1 else
                f"pad_joined: {len(cut)} padded MatMul results lying alike") if not passed else \
            ("a result passed on in a padded MatMul's layout (pad_passed_on)" if len(cut) == 1 else
             f"pad_joined: {len(cut)} padded results lying alike, {passed} of them passed on (pad_passed_on)")
        what = (f"over {call.shape} elements streams over them as they lie padded to {padded[call]} "
                f"(pad_through_elementwise: {read}, the other inputs padded with zeros and the result lie so in "
                "DDR; only the user's region of the result is read)")
    elif flow.width > 1 and is_cut_value(flow.inputs[0]):
        what = (f"over {rows} rows of {flow.width} elements streams over them as they lie padded to "
                f"{flow.size // flow.width} rows (pad_through_rows: a padded MatMul's result and the result lie so in "
                f"DDR; only the first {rows} rows of the result are read; its rows keep their width)")
    elif flow.width > 1:
        what = (f"over {rows} rows of {flow.width} elements streams padded with zeros to {flow.size // flow.width} "
                f"rows (the rows and the result lie so in DDR, the host writes and reads the first {rows}; a row's "
                "width is never padded)")
    elif call.arg.writes:   # `stream_into_state` over a whole state
        what = (f"over {call.size} elements streams padded with zeros to {flow.size} elements into the state "
                f"{state_of(destination(call))} (the inputs and the state lie so in DDR, the host writes and reads the "
                f"first {call.size}; the state's padding, written only by these calls, is never read as the user's)")
    else:
        what = (f"over {call.size} elements streams padded with zeros to {flow.size} elements (the inputs and the "
                f"result lie so in DDR, the host writes and reads the first {call.size})")
    return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} {what} over {len(flow.tiles)} tiles")]


def written_padding_rule(program: Program, group: Group, calls, padded: dict,
                         written: frozenset[Node]) -> list[Decision]:
    """`pad_written_by_producer` as describe() shows it: where a group writes a result lying
    padded for a later padded call, and where a padded grid or stream reads a tensor another
    call writes (another group's result, or a state) in its user's region only."""
    made = [(n, padded[n]) for i, n in enumerate(program.outputs) if n in calls and n in written]
    whole = {state_written_whole(c) for c in calls}   # a state these calls write whole lies in their own layout
    read = [(n, padded[n]) for n in external_inputs(calls) if n in padded and (n in written or state_of(n))
            and n not in whole]
    lines = [f"{group.name}: {call_label(program, n)} writes its result row by row into the user's region of "
             f"{shape}, the padded layout a later padded call reads it in; the padding, never written, stays the "
             "zeros the buffer is made with" for n, shape in made]
    writers = {True: "a state every call writing it writes", False: "another group's result, which that group writes"}
    lines += [f"{group.name}: {describe(n)} lies padded to {shape} for {', '.join(call_label(program, c) for c in calls)}: "
              f"{writers[bool(state_of(n))]} in its user's region only, so its padding stays the zeros the buffer is "
              "made with" for n, shape in read]
    return [(Rule.PAD_WRITTEN_BY_PRODUCER, line) for line in lines]


def upstream_rows_text(call, flow: Flow, padded: dict) -> str:
    """`pad_upstream_rows`'s decision as describe() shows it: a row reduction a padded MatMul
    reads as its A streams over its rows padded with zeros to A's layout."""
    (rows, width), told = flow.inputs[0].shape, ""
    if flow.width != width:
        told = (f"; the kernel reduces each row's first {width} elements only and writes 0 past them, so K's padding "
                "is zeros")
    shared = "".join(f", {describe(n)} padded with zeros" for n in flow.shared if flow.width != width)
    return (f"over {rows} rows of {width} elements streams over them padded with zeros to {padded[call]} "
            f"(pad_upstream_rows: the rows{shared} and the result lie so in DDR, the layout a padded MatMul reads the "
            f"result in as its A{told}; a padded row of zeros reduces to a finite row of M's padding)")


def row_width_text(call, flow: Flow) -> str:
    """`pad_through_row_width`'s decision as describe() shows it: the rows a row reduction
    streams lie padded wider, and its kernel reduces each row's first (the user's) elements."""
    (rows, width), wide = flow.inputs[0].shape, flow.width
    shared = "".join(f", {describe(n)} padded with zeros" for n in flow.shared)
    given = call.arg.attr_dict.get("length") is not None or "length" in call.arg.scalar_attrs
    told = "the length it was given" if given else f"length={width}, the user's width"
    return (f"over {rows} rows of {width} elements streams over them as they lie padded to {flow.size // wide} rows "
            f"of {wide} elements (pad_through_row_width: a padded MatMul's result{shared} and the result lie so in "
            f"DDR; the kernel reduces each row's first elements only ({told}), never the padding; only the user's "
            "region of the result is read)")


def read_on_device(group: Group, outside) -> str:
    """Why a MatMul or MatVec the grid would take were its result the host's alone is not
    spread over the array: groups of the same configuration read it, and a grid's results leave
    each column for DDR, a column's share at a time (iron/compiler/grid.py); "" otherwise."""
    call, expand = leading_call(group.calls), expansion(group.calls)
    readers = [u for u in outside.get(call, ()) if u is not Reader.HOST]
    if group.calls[-1] is not call or not readers or not wants_grid(call, (Reader.HOST,), expand):
        return ""
    return (f"not over the array: {', '.join(map(str, readers))} read{'s' * (len(readers) == 1)} its result in this "
            "configuration, and a grid's results leave each column for DDR; it runs as split_matrix_over_tiles "
            "says, or over the array when a cut puts its readers in a later configuration")


def check_some_grid(program: Program, call: Node, device, unpadded: str) -> None:
    """A MatMul whose B and result do not fit a tile and for which `tile_matmul_over_array` finds
    no grid even with the whole device to itself is DoesNotFit here, naming the call and why,
    instead of failing later as one tile's buffers: its blocks divide its sides (no padding or
    remainder block), so a side with no divisor but small ones (a prime) has none that moves."""
    room = core_room(device)
    held = nbytes(call.src[1]) + nbytes(call)
    if len(call.shape) != 2 or held <= room:
        return
    columns = list(range(device.n_cols))
    if choose_grid(call, columns, device.n_cols * len(device.compute_rows), device,
                   device.n_cols * device.shim.dma_out_channels) is not None:
        return
    (big_m, big_k), big_n = call.src[0].shape, call.shape[1]
    sides = (("M", big_m), ("K", big_k), ("N", big_n))
    largest = ", ".join(f"{name} = {side}: {max(divisors(side, 1))}" for name, side in sides)
    padded = ", ".join(f"{name} = {-(-side // 32) * 32}" for name, side in sides)
    raise DoesNotFit(
        f"{program.name}: {call_label(program, call)} ({big_m}, {big_k}) x ({big_k}, {big_n}) {call.dtype.name}: B "
        f"and the result take {held} bytes, more than a compute tile's {room}, and tile_matmul_over_array finds "
        f"no grid of cores for it even on the whole {device.name}: its blocks divide their sides (at most "
        f"{MAX_BLOCK} elements, no padding or remainder block) and must fit a core and move in one DMA op "
        f"each, and the largest dividing blocks are {largest}; pad_to_block did not pad it: "
        f"{unpadded or why_no_padded_grid(call, device)}. Pad the "
        f"matrices with zeros to sides with larger divisors ({padded}), or cut the call into several."
    )


def why_no_padded_grid(call: Node, device) -> str:
    """Why a call `pad_to_block` may pad here has no padded grid: none of its padded sides has one,
    or the design reads or makes its tensors elsewhere (the rule decides for the whole design, a
    segment's Program sees its cut values as host tensors)."""
    if best_sides(call, device) is None:
        return "no padded sides have a grid either"
    return "the design reads its result or makes its operands elsewhere (another segment)"


def check_whole_words(program: Program, calls, device, readers: dict) -> None:
    """Elementwise calls too large for a tile whose element count no block of whole 32-bit words
    divides (an odd count of 16-bit elements, say), so `stream_elementwise` has no block for them
    even on the whole device, are DoesNotFit here, naming the call and the padding, instead of
    failing later as one tile's buffers."""
    room = core_room(device)
    size = external_inputs(calls)[0].size
    per_word = max(4 // min(4, n.dtype.itemsize) for n in (*external_inputs(calls), *calls))
    if not streamable(calls) or held_bytes(list(calls)) <= room or size % per_word == 0:
        return
    raise DoesNotFit(
        f"{program.name}: {', '.join(call_label(program, c) for c in calls)} over {size} "
        f"{calls[-1].dtype.name} elements take {held_bytes(list(calls))} bytes, more than a compute tile's {room}, "
        f"and stream_elementwise cuts them into blocks that divide {size} and hold whole 32-bit words ({per_word} "
        f"elements each), of which {size} has none, and pad_to_block did not pad them: "
        f"{stream_unpadded(calls, readers) or 'no padded length streams either'}. Pad the "
        f"tensors to {-(-size // per_word) * per_word} elements, or cut the calls in two."
    )


def l1_share(device) -> int:
    """The most of a compute tile a matrix operand may hold whole: a quarter of its memory."""
    return device.compute.data_memory_bytes // 4


def stream_large_matrix(group: Group, tiles, parts: int, channels, device) -> Stream | None:
    """Stream the group's leading matrix call's matrix when it (with the blocks it is expanded
    from, when `dequant_before_matvec` fused its expansion) is larger than its L1 share, in
    blocks of the most rows whose object takes at most STREAM_OBJECT_BYTES; with an expansion,
    whose two objects of blocks and the Buffer they are expanded into take at most the two
    objects of a float32 stream."""
    first = leading_call(group.calls)
    if role(first) is not Role.MATRIX:
        return None
    matrix, expand = stored_matrix(group.calls), expansion(group.calls)
    held = nbytes(first.src[0]) + (nbytes(matrix) if expand is not None else 0)   # with the blocks expanded
    if not is_host_tensor(matrix) or (parts == 1 and held <= l1_share(device)):
        return None
    rows_per_part = matrix.shape[0] // parts
    rows = stream_rows(group, rows_per_part)
    if rows is None:
        return None
    links = (1, 1) if parts == 1 else (parts + 1, parts + 1)
    mem = channels.take(tiles[0].col, *links)
    return Stream(matrix, rows, rows_per_part // rows, parts, mem, expand)


def stream_rows(group: Group, rows_per_part: int) -> int | None:
    """The rows of one streamed block of a part of `rows_per_part` rows: the most that divide it,
    hold whole 32-bit words and take at most STREAM_OBJECT_BYTES (with an expansion, whose two
    objects of blocks and the Buffer they are expanded into take at most the two objects of a
    float32 stream); when a single row takes more, one row, as long as its two objects hold no
    more than the part does whole (tile memory then decides). None: no block streams."""
    matrix, expand = stored_matrix(group.calls), expansion(group.calls)
    budget, per_row = STREAM_OBJECT_BYTES, row_bytes(matrix)
    if expand is not None:
        budget, per_row = 2 * STREAM_OBJECT_BYTES, 2 * row_bytes(matrix) + row_bytes(expand)
    whole = [r for r in range(1, rows_per_part + 1) if rows_per_part % r == 0 and r * row_bytes(matrix) % 4 == 0]
    if whole and whole[0] * per_row > budget:   # a row wider than a block: one row at a time beats the whole part
        return whole[0] if 2 * whole[0] <= rows_per_part else None
    return max((r for r in whole if r * per_row <= budget), default=None)


def share_streamed_matrix(groups: tuple[Group, ...], group: Group, parts: int, sites: list[Site]) -> Stream | None:
    """`share_streamed_matrix`: an unsplit group whose leading matrix call reads the matrix an
    earlier unsplit group streams (one KV cache read by several attention heads) reads the same
    blocks: the earlier group's mem tile broadcasts them to both cores, so the host moves them
    once and the group takes no shim or mem-tile channel for them. Only when every group whose
    result it reads comes before that earlier group, so neither core waits for the other while
    both take the blocks in step."""
    first = group.calls[0]
    if parts != 1 or role(first) is not Role.MATRIX:
        return None
    order = [g.name for g in groups]
    sending = senders(groups, group)
    for site in sites:
        s = site.stream
        if (s is not None and s.owner is None and s.expand is None and s.parts == 1 and s.matrix is first.src[0]
                and all(order.index(g) < order.index(site.group.name) for g in sending)):
            return replace(s, owner=site.group.name)
    return None


def split_parts(group: Group, outside: dict[Node, tuple[str | Reader, ...]], spare: int, channels,
                first: Tile) -> tuple[int, str]:
    """`split_matrix_over_tiles`: how many tiles a group takes: the fewest of SPLIT_COUNTS that
    bring each part to SPLIT_PART_BYTES or less, or, when that many do not fit, the most that
    do. A count fits when it divides the matrix's rows, that many tiles are spare, and one mem
    tile can split and join the parts (a DMA channel each way per part, one for the stream and
    one for the joined result) and one buffer descriptor's stride spans a part (docs/platform.md
    section 5). Returns (tiles, why not the count wanted; "" when it fits)."""
    if not splittable(group, outside):
        return 1, ""
    matrix = stored_matrix(group.calls)
    wanted = next((k for k in SPLIT_COUNTS if nbytes(matrix) // k <= SPLIT_PART_BYTES), SPLIT_COUNTS[-1])
    why = []
    for k in sorted((k for k in SPLIT_COUNTS if k <= wanted), reverse=True):
        if matrix.shape[0] % k:
            why.append(f"{k} does not divide its {matrix.shape[0]} rows")
        elif nbytes(matrix) // k // 4 > channels.device.shim.max_bd_stride:
            why.append(f"{k} parts lie {nbytes(matrix) // k // 4} words apart, more than a buffer descriptor's "
                       f"largest stride ({channels.device.shim.max_bd_stride} words)")
        elif matrix.shape[0] // k * group.calls[-1].dtype.itemsize % 4:
            why.append(f"{k} parts of {matrix.shape[0] // k} rows give results of "
                       f"{matrix.shape[0] // k * group.calls[-1].dtype.itemsize} bytes, not whole 32-bit words")
        elif stream_rows(group, matrix.shape[0] // k) is None:
            why.append(f"{k} parts of {matrix.shape[0] // k} rows stream in no block: a row takes "
                       f"{row_bytes(matrix)} bytes, more than a streamed block's {STREAM_OBJECT_BYTES}")
        elif k > spare:
            why.append(f"{k} would leave too few tiles for the other groups ({spare} spare)")
        elif not channels.can_take(first.col, inputs=k + 1, outputs=k + 1):
            why.append(f"{k} would take {k + 1} DMA channels each way on one mem tile "
                       f"(a mem tile has {channels.device.mem.dma_in_channels}, less what earlier groups use)")
        else:
            return k, "; ".join(why)
    return 1, "; ".join(why)


def unsplit_beside_producer(groups: tuple[Group, ...], number: int, outside, sites: list[Site], device) -> str:
    """`unsplit_beside_producer`: a part of a split group receives by DMA the result of every
    other group it reads (a FIFO to several tiles is never shared memory), its rows, and its
    other host tensors. So a group `split_matrix_over_tiles` could split stays on one tile when
    its parts would take more FIFOs by DMA than a compute tile has input channels (`takes`); and
    also when the one group reading its result, the next one, would take one FIFO too many: on
    one tile, `snake_order` puts the next group right beside it, and the next group then reads
    its result through shared memory (docs/platform.md section 4). Returns why, or ""."""
    group, limit = groups[number], device.compute.dma_in_channels
    if not splittable(group, outside):
        return ""
    mine = takes(groups, group, sites)
    if len(mine) > limit:
        return (f"not split: each part would take {len(mine)} FIFOs by DMA ({', '.join(mine)}) but a compute "
                f"tile has {limit} input channels; on one tile beside the group before it, it reads that "
                "group's result through shared memory")
    reader = groups[number + 1] if number + 1 < len(groups) else None
    readers = {u for c in group.calls for u in outside.get(c, ())}
    if reader is None or readers != {reader.name}:
        return ""
    theirs = takes(groups, reader, sites)
    if not limit < len(theirs) <= limit + 1:
        return ""
    return (f"not split: {reader.name}, the one group reading its result, would take {len(theirs)} FIFOs by "
            f"DMA ({', '.join(theirs)}) but a compute tile has {limit} input channels; on one tile, with "
            f"{reader.name} beside it, its result goes through shared memory")


def takes(groups: tuple[Group, ...], group: Group, sites: list[Site]) -> list[str]:
    """The FIFOs a core of `group` takes by DMA unless shared memory spares one: each other
    group's result no other of them forwards (`unrelayed`), with the groups on one tile that
    load a small host tensor it reads and forward it (`forward_shared_input`); its rows (a host
    matrix its leading matrix call reads, or the blocks of one its expansion reads); its `_in`
    for any other host tensor."""
    matrix = stored_matrix(group.calls) if role(leading_call(group.calls)) is Role.MATRIX else None
    host = [n for n in external_inputs(group.calls) if is_host_tensor(n) and n is not matrix]
    loaders = [next((s.group.name for s in sites if len(s.tiles) == 1 and forwardable(n)
                     and any(n in tensor_inputs(c) for c in s.group.calls)), None) for n in host]
    sending = unrelayed(groups, group, sites)
    sending += tuple(g for g in dict.fromkeys(loaders) if g is not None and g not in sending)
    return ([f"{g}'s result" for g in sending] + ["its rows"] * (matrix is not None and is_host_tensor(matrix))
            + ["its host tensors"] * (None in loaders))


def forwardable(node: Node) -> bool:
    """A host tensor one group may forward to others: an input, weight or param (or a view of
    one), not a state, of at most FORWARD_BYTES."""
    base = node.src[0] if node.op == Op.VIEW else node
    constant = base.op == Op.INPUT or base.arg.kind in (MemoryKind.WEIGHT, MemoryKind.PARAM)
    return constant and node.size * node.dtype.itemsize <= FORWARD_BYTES


def unrelayed(groups: tuple[Group, ...], group: Group, sites: list[Site]) -> tuple[str, ...]:
    """The other groups whose results `group` reads, less those whose result another of them,
    on one tile, reads too and so can forward (`fit_compute_channels`), in program order."""
    sending = senders(groups, group)
    one_tile = {s.group.name for s in sites if len(s.tiles) == 1}
    by_name = {g.name: g for g in groups}
    relayed = {s for t in sending if t in one_tile for s in senders(groups, by_name[t])}
    return tuple(s for s in sending if s not in relayed)


def senders(groups: tuple[Group, ...], group: Group) -> tuple[str, ...]:
    """The other groups whose results `group`'s calls read, in program order."""
    group_of = {c: g.name for g in groups for c in g.calls}
    names = {group_of[n] for c in group.calls for n in tensor_inputs(c) if group_of.get(n, group.name) != group.name}
    return tuple(g.name for g in groups if g.name in names)


def splittable(group: Group, outside: dict[Node, tuple[str | Reader, ...]]) -> bool:
    """A matrix-vector call (a matrix call with a vector result, MatVec) over a host matrix
    (or the blocks of one its fused expansion reads) > 128 KiB whose rows are whole words along
    the memory's last axis, then only elementwise calls writing no state, with the last call's
    result its one use outside the group."""
    first, last = leading_call(group.calls), group.calls[-1]
    matrix = stored_matrix(group.calls)
    if role(first) is not Role.MATRIX or len(first.shape) != 1 or not is_host_tensor(matrix):
        return False
    if nbytes(matrix) <= SPLIT_PART_BYTES or row_bytes(matrix) % 4:
        return False
    if matrix.op == Op.VIEW and not matrix.arg[-1].keeps_axis:
        return False
    epilogue = group.calls[group.calls.index(first) + 1:]
    if any(role(c) is not Role.ELEMENTWISE or c.arg.writes for c in epilogue):
        return False
    if any(is_computed_view(n) for c in epilogue for n in c.src):   # a view crosses the row parts
        return False
    if any(outside.get(c) for c in group.calls[:-1]):
        return False
    users = outside.get(last, ())
    return bool(users) and users.count(Reader.HOST) <= 1 and Reader.EMIT not in users
