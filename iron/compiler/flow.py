"""Lowering a Flow (streaming.py: elementwise calls, a row reduction, an expansion or a Concat
streamed in blocks): each core's block Function and Loop, each column's splits and join on its
mem tile, and the moves in runs of as many rounds as one Dma op takes, with Waits every few runs
so no shim runs out of buffer descriptors."""
from __future__ import annotations

from functools import partial
from itertools import accumulate

import numpy as np

from iron.compiler.channels import dma_patterns, run_dims
from iron.compiler.grid import (
    GridLowered,
    result_access,
    result_placement,
    run_access,
    stored_access,
    view_rows_of,
    with_waits,
)
from iron.compiler.objects import (
    Context,
    attr_word,
    call_step,
    copy_step,
    holding,
    join_link,
    split_link,
)
from iron.compiler.place import Site
from iron.compiler.sequence import Move
from iron.compiler.words import Access
from iron.ir import Op, call_label, describe, destination
from iron.plan.fifos import Stem, fifo_id
from iron.plan.plan import (
    Buffer,
    Core,
    Direction,
    Function,
    Invoke,
    Load,
    Loop,
    Ptr,
)


def lower_flow(ctx: Context, site: Site) -> GridLowered:
    """A streamed group's objects, links, cores and moves (a round: one block per core)."""
    g, flow = site.group.name, site.flow
    rows, b = len(flow.rows), flow.block
    links, made = [], []
    sizes = {fifo_id(g, Stem.W, i): (-(-flow.width * node.dtype.itemsize // 4) * 4, node.dtype, describe(node))   # a row, whole words
             for i, node in enumerate(flow.shared)}
    if flow.per_call:
        words = [ctx.table.words[w].name for w in _flow_words(ctx, flow)]
        sizes[fifo_id(g, Stem.IN)] = (4 * len(words), np.dtype(np.int32), ", ".join(words))
    for c, mem in enumerate(flow.mems):
        for i, node in enumerate(flow.inputs):
            size, what = b * node.dtype.itemsize, f"blocks of {describe(node)}"
            whole, each = fifo_id(g, Stem.X, i, c, mem=True), [fifo_id(g, Stem.X, i, r, c) for r in range(rows)]
            sizes |= {whole: (rows * size, node.dtype, what)} | {f: (size, node.dtype, what) for f in each}
            links.append(split_link(mem, whole, each, size))
        for k, result in enumerate(flow.results):
            size, label = flow.result_block * result.dtype.itemsize, call_label(ctx.program, result)
            parts, host = [fifo_id(g, Stem.PART, r, c, result=k) for r in range(rows)], fifo_id(g, Stem.HOST, c, result=k)
            sizes |= {part: (size, result.dtype, label) for part in parts} | {host: (rows * size, result.dtype, label)}
            links.append(join_link(mem, parts, host, size))
        made += [_flow_core(ctx, g, flow, r, c) for r in range(rows)]
    functions, buffers, cores = zip(*made)
    return GridLowered(sizes, tuple(links), tuple(buf for held in buffers for buf in held), functions, cores,
                       tuple(_flow_moves(ctx, g, flow)))


def _flow_words(ctx: Context, flow) -> list[int]:
    """The words of the Flow's per-call attributes, in the order its `_in` holds them."""
    return [attr_word(ctx, call, name, value) for call, name, value in flow.per_call]


def _flow_core(ctx: Context, g: str, flow, r: int, c: int):
    """Core (r, c): per block, every call on its inputs' blocks, intermediates in Buffers; the
    shared rows and per-call words acquired once, around the Loop."""
    tile, prefix, b = flow.tile(r, c), f"{g}_r{r}c{c}", flow.block
    ins = [fifo_id(g, Stem.X, i, r, c) for i in range(len(flow.inputs))]
    shared = [fifo_id(g, Stem.W, i) for i in range(len(flow.shared))] + [fifo_id(g, Stem.IN)] * bool(flow.per_call)
    loads = {(call, name): Load(fifo_id(g, Stem.IN), 4 * j) for j, (call, name, _) in enumerate(flow.per_call)}
    parts = [fifo_id(g, Stem.PART, r, c, result=k) for k in range(len(flow.results))]
    where = dict(zip((*flow.inputs, *flow.shared), (*ins, *shared))) | dict(zip(flow.results, parts))
    buffers, steps = [], []
    for j, call in enumerate(() if flow.pieces else flow.calls):
        if call not in where:
            buffers.append(Buffer(f"{prefix}_t{j}", tile, -(-b * call.dtype.itemsize // 4) * 4, call.dtype))
            where[call] = buffers[-1].name
        if call.arg.writes and call.arg.kernel.accumulates:   # the state's block, summed into in place
            steps.append(copy_step(call.dtype, b, Ptr(where[destination(call)]), Ptr(where[call])))
        ptrs = [Ptr(where[n]) for n in call.src[:call.arg.n_inputs]] + [Ptr(where[call])]
        steps.append(call_step(call, ptrs, *flow.shapes(), {name: load for (c, name), load in loads.items() if c is call}))
    if flow.pieces:   # `stream_joined`: a block of the result is a block of one piece
        steps.append(copy_step(flow.calls[0].dtype, b, Ptr(ins[0]), Ptr(parts[0])))
    params = (*ins, *shared, *(buf.name for buf in buffers), *parts)
    function = Function(f"{prefix}_block", params, tuple(steps), blocked=True)
    program = holding(shared, (), (Loop(flow.rounds, holding(ins, parts, (Invoke(function.name, params),))),))
    return function, buffers, Core(tile, g, program, ctx.device.compute.default_stack_bytes)


def _flow_moves(ctx: Context, g: str, flow) -> list:
    """Per run of at most `rounds_per_op` rounds, each column's blocks of every input and result,
    one Dma op each; a Wait on them every `rounds_between_waits` runs."""
    rows, cols = len(flow.rows), len(flow.cols)
    result = flow.calls[-1]
    p = result_placement(ctx, result)
    ends = [(partial(fifo_id, g, Stem.X, i, mem=True), Direction.MM2S, node, *run_access(ctx, node))
            for i, node in enumerate(flow.inputs)]   # column c's leg into its mem tile
    ends += [(partial(fifo_id, g, Stem.HOST, result=k), Direction.S2MM, node, *result_access(ctx, node))
             for k, node in enumerate(flow.results)]

    def words(node) -> int:   # one core's block, a fraction for a narrow dtype's offsets
        return (flow.result_block if node is result else flow.block) * node.dtype.itemsize / 4

    def column(node) -> tuple[float, tuple]:
        """(the words a column's blocks of `node` span in DDR, their dims there): contiguous, row by
        row for a result lying in wider rows (`pad_written_by_producer`), or a view's rows by
        their access pattern (`stream_view_rows`)."""
        view = destination(node) if node.op == Op.CALL and node.arg.writes else node
        lie = view_rows_of(ctx, view) if view.op == Op.VIEW else None
        if lie is not None:
            count = int(len(flow.rows) * words(node)) // int(np.prod([n for n, _ in lie.row]))
            return count * lie.stride, ((count, lie.stride), *lie.row)
        if node is result and flow.padded is None and p.stored[1:] != p.shape[1:]:
            row, stride = (result.shape[1] * result.dtype.itemsize // 4, p.stored[1] * result.dtype.itemsize // 4)
            count = int(rows * words(node)) // row
            return count * stride, ((count, stride), (row, 1))
        return rows * words(node), run_dims(int(rows * words(node)), ctx.device)

    def dims(node, run: int) -> tuple:
        span, inner = column(node)
        return ((run, int(cols * span)), *inner)

    most = min(rounds_per_op(ctx.device, dims(node, flow.rounds)) for _, _, node, _, _ in ends)
    even = -(-flow.rounds // -(-flow.rounds // most))   # runs of even length, as few as `most` allows
    runs = [(t, min(even, flow.rounds - t)) for t in range(0, flow.rounds, even)]
    moves = []
    once = [Move(Direction.MM2S, fifo_id(g, Stem.W, i), *stored_access(ctx, node)) for i, node in enumerate(flow.shared)]
    once += [Move(Direction.MM2S, fifo_id(g, Stem.IN), "words", Access(w, ((1, 1),))) for w in _flow_words(ctx, flow)]
    runs = _joined_runs(flow, runs) if flow.pieces else runs
    for number, (t, run) in enumerate(runs):
        here = [] if t else list(once)
        for c in range(cols):
            for named, direction, node, buffer, at in ends:
                if flow.pieces and node is flow.inputs[0]:
                    buffer, at, blocks = _in_piece(ctx, flow, t * cols + c)
                else:
                    blocks = t * cols + c
                here.append(Move(direction, named(c), buffer,
                                 Access(at.offset + int(blocks * column(node)[0]), dims(node, run))))
        moves += with_waits(ctx, len(runs), number, here)
    return moves


def _joined_runs(flow, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`stream_joined`: the runs of rounds cut where one piece ends, so one Dma op reads one piece."""
    ends = list(accumulate(n.size // (flow.block * len(flow.tiles)) for n in flow.pieces))[:-1]
    cut = []
    for t, run in runs:
        for end in (e for e in ends if t < e < t + run):
            cut.append((t, end - t))
            run, t = run - (end - t), end
        cut.append((t, run))
    return cut


def _in_piece(ctx: Context, flow, blocks: int) -> tuple[str, Access, int]:
    """(host buffer, Access, column blocks before it in that piece) of the piece column block
    `blocks` of a `stream_joined` Concat reads from."""
    *earlier, last = flow.pieces
    for piece in earlier:
        count = piece.size // (flow.block * len(flow.rows))
        if blocks < count:
            return (*run_access(ctx, piece), blocks)
        blocks -= count
    return (*run_access(ctx, last), blocks)


def rounds_per_op(device, dims: tuple) -> int:
    """The most rounds (the outermost of `dims`) one Dma op moves (1 when one round takes more)."""
    (rounds, stride), block = dims[0], dims[1:]
    for run in (device.shim.max_bd_wrap, device.dma_repeat_max):
        if len(dma_patterns(0, ((min(run, rounds), stride), *block), device)) == 1:
            return min(run, rounds)
    return 1
