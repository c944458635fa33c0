"""Lowering the tiling rules' Sites (iron/compiler/tiling.py). A tiled MatMul or MatVec (a Grid):
its FIFO objects and mem-tile links, each core's Functions and program (per output block: the
first k-block's product into the block, every further one's product added to it by one
MatMulAccumulate call, a bfloat16 result rounded once from its float32 sum) and the moves
streaming A and B in block order and reading C back, step by step (a round of output blocks,
or part of one), with Waits every few steps so no shim runs out of buffer descriptors
(docs/platform.md section 5). Streamed elementwise calls (a Flow): each core's block
Function over its inputs' blocks, each column's splits and join, and the moves."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from itertools import accumulate

import numpy as np

from iron.compiler.fifos import Stem, fifo
from iron.compiler.objects import Context, attr_word, copy_step
from iron.compiler.place import Site
from iron.compiler.plan import (
    Acquire,
    Buffer,
    Core,
    Direction,
    Function,
    Imm,
    Invoke,
    KernelStep,
    Link,
    Load,
    Loop,
    Placement,
    Port,
    Ptr,
    Release,
    Wait,
)
from iron.compiler.route import host_fifo, part_fifo
from iron.compiler.sequence import Move, dma_patterns
from iron.compiler.tiling import Grid, word_run
from iron.compiler.words import Access, Rows, view_rows
from iron.ir import Node, Op, call_label, describe, destination, input_dtypes, nbytes, storage
from iron.kernels.registry import accumulate_kernel, convert_kernel, is_library


@dataclass(frozen=True)
class GridLowered:
    """A tiled MatMul's share of the Lowered design; `sizes`: FIFO -> (bytes, dtype, what)."""

    sizes: dict
    links: tuple[Link, ...]
    buffers: tuple[Buffer, ...]
    functions: tuple[Function, ...]
    cores: tuple[Core, ...]
    moves: tuple


def lower_grid(ctx: Context, site: Site) -> GridLowered:
    g, grid = site.group.name, site.grid
    functions, buffers, cores = [], [], []
    for c in range(len(grid.cols)):
        for r in range(len(grid.rows)):
            made, held, core = _core(ctx, g, grid, r, c)
            functions += made
            buffers += held
            cores.append(core)
    moves = _own_rows_moves(ctx, g, grid) if grid.own_rows else _moves(ctx, g, grid)
    return GridLowered(_sizes(ctx, g, grid), _links(g, grid), tuple(buffers), tuple(functions), tuple(cores),
                       tuple(moves))


def _sizes(ctx: Context, g: str, grid: Grid) -> dict:
    a, b = grid.call.src[:2]
    out, label = grid.call.dtype, call_label(ctx.program, grid.call)
    m, k, n = grid.m, grid.k, grid.n
    sizes = {}
    if grid.own_rows:
        rows, block, a = len(grid.rows), grid.a_block_bytes, grid.matrix
        sizes[fifo(g, Stem.B)] = (k * n * b.dtype.itemsize, b.dtype, f"blocks of {describe(b)}")
        for c in range(len(grid.cols)):
            sizes[fifo(g, Stem.A, c, mem=True)] = (rows * block, a.dtype, f"rows of {describe(a)}")
            sizes |= {fifo(g, Stem.A, r, c): (block, a.dtype, f"rows of {describe(a)}") for r in range(rows)}
            sizes |= {fifo(g, Stem.PART, r, c): (m * n * out.itemsize, out, label) for r in range(rows)}
            sizes[fifo(g, Stem.HOST, c)] = (rows * m * n * out.itemsize, out, label)
        return sizes
    for r in range(len(grid.rows)):
        sizes[fifo(g, Stem.A, r, mem=True)] = sizes[fifo(g, Stem.A, r)] = (m * k * a.dtype.itemsize, a.dtype, f"blocks of {describe(a)}")
    for c in range(len(grid.cols)):
        sizes[fifo(g, Stem.B, c, mem=True)] = sizes[fifo(g, Stem.B, c)] = (k * n * b.dtype.itemsize, b.dtype, f"blocks of {describe(b)}")
        sizes |= {fifo(g, Stem.PART, r, c): (m * n * out.itemsize, out, label) for r in range(len(grid.rows))}
        sizes[fifo(g, Stem.HOST, c)] = (len(grid.rows) * m * n * out.itemsize, out, label)
    return sizes


def _links(g: str, grid: Grid) -> tuple[Link, ...]:
    """A's and B's blocks forwarded by their mem tiles; each column's C blocks joined, grid row r
    at r blocks in (so the joined object is len(rows) * m consecutive rows of C)."""
    part = grid.m * grid.n * grid.call.dtype.itemsize
    rows = range(len(grid.rows))
    if grid.own_rows:
        block = grid.a_block_bytes
        return tuple(link for c, mem in enumerate(grid.c_mems) for link in (
            Link(mem, (fifo(g, Stem.A, c, mem=True),), tuple(fifo(g, Stem.A, r, c) for r in rows),
                 destination_offsets=tuple(r * block for r in rows)),
            Link(mem, tuple(fifo(g, Stem.PART, r, c) for r in rows), (fifo(g, Stem.HOST, c),),
                 source_offsets=tuple(r * part for r in rows))))
    links = [Link(mem, (fifo(g, Stem.A, r, mem=True),), (fifo(g, Stem.A, r),)) for r, mem in enumerate(grid.a_mems)]
    for c, mem in enumerate(grid.c_mems):
        links += [Link(mem, (fifo(g, Stem.B, c, mem=True),), (fifo(g, Stem.B, c),)),
                  Link(mem, tuple(fifo(g, Stem.PART, r, c) for r in rows), (fifo(g, Stem.HOST, c),),
                       source_offsets=tuple(r * part for r in rows))]
    return tuple(links)


def _core(ctx: Context, g: str, grid: Grid, r: int, c: int):
    """Core (r, c)'s Functions, Buffers and program: a Loop over its output blocks, each summing
    its k-blocks."""
    call, tile, prefix = grid.call, grid.tile(r, c), f"{g}_r{r}c{c}"
    a, b, part = fifo(g, Stem.A, r), fifo(g, Stem.B, c), fifo(g, Stem.PART, r, c)
    m, k, n = grid.m, grid.k, grid.n
    kernel, in_dtype = call.arg.kernel, call.src[0].dtype
    shapes = [(m, k), (k, n)], (m, n)
    if grid.own_rows:
        a, b = fifo(g, Stem.A, r, c), fifo(g, Stem.B)
    if grid.vector:
        shapes = [(m, k), (k,)], (m,)
    sizes = tuple(Imm(int(s)) for s in kernel.sizes(*shapes))
    wide = grid.acc != call.dtype
    total = part
    buffers = []
    if wide:
        total = f"{prefix}_sum"
        buffers.append(Buffer(total, tile, m * n * grid.acc.itemsize, grid.acc))
    matrix, expanded = a, ()
    if grid.expand is not None:   # `dequant_before_matvec`: A's block expanded into a Buffer first
        buffers.append(Buffer(f"{prefix}_expanded", tile, m * k * in_dtype.itemsize, in_dtype))
        matrix = buffers[-1].name
        expanded = (_expansion_step(grid, a, matrix),)
    params = (a, b, *((matrix,) if expanded else ()), total)
    product = KernelStep.of(kernel, input_dtypes(call), (Ptr(matrix), Ptr(b), Ptr(total), *sizes), grid.acc)
    first = Function(f"{prefix}_first", params, (*expanded, product), blocked=True)
    functions = [first]
    take = (Acquire(a, Port.CONSUME), Acquire(b, Port.CONSUME))
    give = (Release(a, Port.CONSUME), Release(b, Port.CONSUME))
    body = [Acquire(part, Port.PRODUCE), *take, Invoke(first.name, first.params), *give]
    if grid.k_blocks > 1:
        more, held = _more(prefix, grid, tile, params, expanded, product)
        functions.append(more)
        buffers += held
        body.append(Loop(grid.k_blocks - 1, (*take, Invoke(more.name, more.params), *give)))
    if wide:
        cast = KernelStep.of(convert_kernel(), grid.acc, (Ptr(total), Ptr(part), Imm(m * n)), call.dtype)
        functions.append(Function(f"{prefix}_round", (total, part), (cast,), blocked=True))
        body.append(Invoke(f"{prefix}_round", (total, part)))
    body.append(Release(part, Port.PRODUCE))
    program = (Loop(grid.rounds * grid.per_round, tuple(body)),)
    return functions, buffers, Core(tile, g, program, ctx.device.compute.default_stack_bytes)


def _more(prefix: str, grid: Grid, tile, params: tuple[str, ...], expanded: tuple, first: KernelStep) -> tuple[Function, list]:
    """The Function (`<prefix>_more`) adding a further k-block's product to the block's sum (the destination of
    `first`, the first k-block's product step): after the block's expansion, one call of the kernel
    that sums the call's kernel (MatMulAccumulate: a MatVec's x as B of one column), else the
    product into a Buffer of its own and an Accumulate of it."""
    kernel, (matrix, b, total) = first.kernel, (p.source for p in first.args[:3])
    m, k, n = grid.m, grid.k, grid.n
    summed_by = kernel.summed_by if is_library(kernel) else None
    if summed_by is not None:
        dims = (Imm(m), Imm(k), Imm(1 if grid.vector else n))
        step = KernelStep.of(summed_by, first.ins or first.dtype, (Ptr(matrix), Ptr(b), Ptr(total), *dims), grid.acc)
        return Function(f"{prefix}_more", params, (*expanded, step), blocked=True), []
    product = Buffer(f"{prefix}_product", tile, m * n * grid.acc.itemsize, grid.acc)
    into_product = KernelStep.of(kernel, first.ins or first.dtype, (*first.args[:2], Ptr(product.name), *first.args[3:]), grid.acc)
    add = KernelStep.of(accumulate_kernel(), grid.acc, (Ptr(product.name), Ptr(total), Imm(m * n)))
    return Function(f"{prefix}_more", (*params[:-1], product.name, total), (*expanded, into_product, add), blocked=True), [product]


def _expansion_step(grid: Grid, blocks: str, dest: str) -> KernelStep:
    """The fused expansion of one core's block of A (m rows of the blocks as stored) into `dest`."""
    expand, stored = grid.expand, grid.matrix
    kernel, m = expand.arg.kernel, grid.m
    sizes = kernel.sizes([(m, grid.a_block_bytes // m)], (m, grid.k))
    attrs = expand.arg.attr_dict
    return KernelStep.of(kernel, stored.dtype, (Ptr(blocks), Ptr(dest), *(Imm(int(s)) for s in sizes),
                                                *(Imm(int(attrs[name]), ctype) for name, ctype in kernel.c_attrs)),
                         expand.dtype)


# ---- the moves ------------------------------------------------------------------------------------

def _own_rows_moves(ctx: Context, g: str, grid: Grid) -> list:
    """Round by round (a round: m rows of every core), each column's rows of A (per k-block,
    its cores' m rows each), the whole of B (the vector) in k-blocks, and each column's joined
    rows of C."""
    call = grid.call
    a, b = grid.matrix, call.src[1]
    big_k, rows, cols, m, n = grid.sides[1], len(grid.rows), len(grid.cols), grid.m, grid.n
    wa = nbytes(a) / call.src[0].size / 4   # bytes per element of A as moved (its blocks, when expanded), in words
    wc = call.dtype.itemsize / 4
    a_buf, a_at = stored_access(ctx, a)
    p = c_placement(ctx, call)
    moves = []
    for t in range(grid.rounds):
        here = [Move(Direction.MM2S, fifo(g, Stem.B), *stored_access(ctx, b))]
        for c in range(cols):
            first = (t * cols + c) * rows * m
            dims = ((grid.k_blocks, grid.k), (rows * m, big_k), (grid.k, 1))
            here.append(Move(Direction.MM2S, fifo(g, Stem.A, c, mem=True), a_buf, in_words(a_at, first * big_k, dims, wa)))
            here.append(Move(Direction.S2MM, fifo(g, Stem.HOST, c), p.buffer, in_words(p, first * n, ((rows * m * n, 1),), wc)))
        moves += _with_waits(ctx, grid.rounds, t, here)
    return moves


def c_placement(ctx: Context, call: Node) -> Placement:
    """Where a grid's C blocks go: its output's placement, or the state's it writes (out=) from
    the first word of the run it writes."""
    return replace(result_placement(ctx, call), offset=result_access(ctx, call)[1].offset)


def stored_access(ctx: Context, node) -> tuple[str, Access]:
    """(host buffer, Access) of every word a host tensor lies in, its padding (`pad_to_block`) too."""
    p = ctx.placement(node.arg.name)
    return p.buffer, Access(p.offset, ((p.nwords, 1),))


def result_placement(ctx: Context, result: Node) -> Placement:
    """The placement a streamed result lies in: its output's, or the state it writes."""
    if result.arg.writes:
        return ctx.placement(storage(destination(result)).arg.name)
    return ctx.placement(next(f"out{i}" for i, o in enumerate(ctx.program.outputs) if o is result))


def result_access(ctx: Context, result: Node) -> tuple[str, Access]:
    """(host buffer, Access) of the first word a streamed result goes to: its output's, or those
    of the run of a state it writes (`stream_into_state`)."""
    if result.arg.writes:
        return run_access(ctx, destination(result))
    p = result_placement(ctx, result)
    return p.buffer, Access(p.offset, ())


def run_access(ctx: Context, node) -> tuple[str, Access]:
    """(host buffer, Access) of the words a streamed input lies in: a whole host tensor's, or
    those of the one run a view picks (`stream_contiguous_views`), from its first word."""
    if node.op != Op.VIEW:
        return stored_access(ctx, node)
    buffer, at = stored_access(ctx, node.src[0])
    if word_run(node) is None:   # `stream_view_rows`: from its first row's first word
        return buffer, Access(at.offset + _rows(ctx, node).first // 4, ())
    return buffer, Access(at.offset + word_run(node) * node.dtype.itemsize // 4, ((nbytes(node) // 4, 1),))


def _rows(ctx: Context, view: Node) -> Rows:
    """How a streamed view's rows lie as its base lies (`stream_view_rows`)."""
    p = ctx.placement(view.src[0].arg.name)
    return view_rows(view, p.padded, p.word_rows, p.lead)


def _with_waits(ctx: Context, steps: int, t: int, here: list[Move]) -> list:
    """Step `t`'s moves (a round, or a run of rounds), then a Wait on each of their FIFOs every
    `rounds_between_waits` steps."""
    if (t + 1) % rounds_between_waits(ctx.device, here) == 0 and t + 1 < steps:
        return [*here, *(Wait(mv.fifo) for mv in here)]
    return here


def _moves(ctx: Context, g: str, grid: Grid) -> list:
    """Step by step (a step: each core's next output blocks of one block row, a whole round when
    its Dma ops fit the shims' BDs, `blocks_per_step`), every grid row's A blocks, every
    column's B blocks, every column's joined C blocks; a Wait on all of them after every
    `rounds_between_waits` steps."""
    call = grid.call
    a, b = call.src[:2]
    _, big_k, big_n = grid.sides   # padded (`pad_to_block`): the strides of A, B and C as they lie
    rows, cols = len(grid.rows), len(grid.cols)
    wa, wb, wc = (x.dtype.itemsize / 4 for x in (a, b, call))
    a_buf, a_at = stored_access(ctx, a)
    b_buf, b_at = stored_access(ctx, b)
    p = c_placement(ctx, call)
    m, k, n = grid.m, grid.k, grid.n

    def step(t: int, j: int, q: int) -> list[Move]:
        """Round t's output blocks j .. j + q - 1 of every core."""
        row0, here = t * rows * m, []
        for r in range(rows):
            dims = ((q, 0), (grid.k_blocks, k), (m, big_k), (k, 1))
            here.append(Move(Direction.MM2S, fifo(g, Stem.A, r, mem=True), a_buf, in_words(a_at, (row0 + r * m) * big_k, dims, wa)))
        for c in range(cols):
            dims = ((q, cols * n), (grid.k_blocks, k * big_n), (k, big_n), (n, 1))
            here.append(Move(Direction.MM2S, fifo(g, Stem.B, c, mem=True), b_buf, in_words(b_at, (j * cols + c) * n, dims, wb)))
        for c in range(cols):
            dims = ((q, cols * n), (rows * m, big_n), (n, 1))
            first = row0 * big_n + (j * cols + c) * n
            here.append(Move(Direction.S2MM, fifo(g, Stem.HOST, c), p.buffer, in_words(p, first, dims, wc)))
        return here

    q = blocks_per_step(ctx.device, grid.per_round, lambda q: step(0, 0, q))
    steps = [step(t, j, min(q, grid.per_round - j)) for t in range(grid.rounds) for j in range(0, grid.per_round, q)]
    return [mv for s, here in enumerate(steps) for mv in _with_waits(ctx, len(steps), s, here)]


def blocks_per_step(device, per_round: int, step) -> int:
    """The most output blocks of a round one step moves: the whole round, or as many as keep
    every shim's Dma ops of the step within its BD ids (a Wait inside a step would wait on A
    before B is issued, and the cores, needing both, would never drain A)."""
    return next((q for q in range(per_round, 1, -1) if _steps_within_bds(device, step(q))), 1)


def in_words(at, first: int, dims: tuple[tuple[int, int], ...], words_per_element: float) -> Access:
    """The words of elements `first` + `dims` (in elements) past `at`. Where a side is not whole
    words (`whole_rows_when_not_words`), its contiguous dims are joined into one run and the
    dims of size 1 dropped first, so every size and stride is whole words."""
    def words(x):
        return x * words_per_element

    if any(not float(words(s)).is_integer() for _, s in dims) or not float(words(dims[-1][0])).is_integer():
        dims = _contiguous(dims)
    inner = dims[-1][0]
    return Access(at.offset + int(words(first)),
                  (*((size, int(words(stride))) for size, stride in dims[:-1]), (int(words(inner)), 1)))


def _contiguous(dims: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """`dims` with size-1 dims dropped and each dim whose stride spans the dim inside it
    joined to it."""
    joined = [(1, 1)]
    for size, stride in reversed([d for d in dims if d[0] > 1] or [dims[-1]]):
        inner_size, inner_stride = joined[-1]
        if stride == inner_size * inner_stride and inner_stride == 1:
            joined[-1] = (size * inner_size, 1)
        else:
            joined.append((size, stride))
    return tuple(reversed(joined))


def rounds_between_waits(device, moves: list[Move]) -> int:
    """How many rounds may be issued before waiting (at least one)."""
    return max(1, _steps_within_bds(device, moves))


def _steps_within_bds(device, moves: list[Move]) -> int:
    """How many steps of `moves` a shim's BD ids hold: a shim tile moves at most its channels'
    FIFOs (2 each way), each taking the Dma ops its step cuts into."""
    ops = max(len(dma_patterns(mv.access.offset, mv.access.dims, device)) for mv in moves)
    per_shim = device.shim.dma_out_channels + device.shim.dma_in_channels
    return device.shim_bd_ids // (per_shim * ops)


# ---- streamed elementwise calls -------------------------------------------------------------------

def lower_flow(ctx: Context, site: Site) -> GridLowered:
    """A streamed elementwise group (`stream_elementwise`): its objects, each column's splits
    and join, each core's block Function and Loop over its blocks, and the moves, round by
    round (a round: one block per core)."""
    g, flow = site.group.name, site.flow
    rows, b = len(flow.rows), flow.block
    sizes, links, functions, buffers, cores = {}, [], [], [], []
    sizes |= {fifo(g, Stem.W, i): (flow.width * node.dtype.itemsize, node.dtype, describe(node))   # as wide as a row
              for i, node in enumerate(flow.shared)}
    if flow.per_call:
        words = [ctx.table.words[w].name for w in _flow_words(ctx, flow)]
        sizes[fifo(g, Stem.IN)] = (4 * len(words), np.dtype(np.int32), ", ".join(words))
    for c, mem in enumerate(flow.mems):
        for i, node in enumerate(flow.inputs):
            size = b * node.dtype.itemsize
            sizes[fifo(g, Stem.X, i, c, mem=True)] = (rows * size, node.dtype, f"blocks of {describe(node)}")
            sizes |= {fifo(g, Stem.X, i, r, c): (size, node.dtype, f"blocks of {describe(node)}") for r in range(rows)}
            links.append(Link(mem, (fifo(g, Stem.X, i, c, mem=True),), tuple(fifo(g, Stem.X, i, r, c) for r in range(rows)),
                              destination_offsets=tuple(r * size for r in range(rows))))
        for k, result in enumerate(flow.results):
            size, label = flow.result_block * result.dtype.itemsize, call_label(ctx.program, result)
            sizes |= {part_fifo(g, k, r, c): (size, result.dtype, label) for r in range(rows)}
            sizes[host_fifo(g, k, c)] = (rows * size, result.dtype, label)
            links.append(Link(mem, tuple(part_fifo(g, k, r, c) for r in range(rows)), (host_fifo(g, k, c),),
                              source_offsets=tuple(r * size for r in range(rows))))
        for r in range(rows):
            function, held, core = _flow_core(ctx, g, flow, r, c)
            functions.append(function)
            buffers += held
            cores.append(core)
    return GridLowered(sizes, tuple(links), tuple(buffers), tuple(functions), tuple(cores),
                       tuple(_flow_moves(ctx, g, flow)))


def _flow_words(ctx: Context, flow) -> list[int]:
    """The words of the Flow's per-call attributes (`flow.per_call`), bounded as their kernels
    declare, in the order `<g>_in` holds them."""
    return [attr_word(ctx, call, name, value) for call, name, value in flow.per_call]


def _flow_core(ctx: Context, g: str, flow, r: int, c: int):
    """Core (r, c): per block, every call on its inputs' blocks, intermediates in Buffers, the
    last call's into the part it sends; the shared rows and the per-call words acquired once,
    around the Loop."""
    tile, prefix, b = flow.tile(r, c), f"{g}_r{r}c{c}", flow.block
    ins = [fifo(g, Stem.X, i, r, c) for i in range(len(flow.inputs))]
    shared = [fifo(g, Stem.W, i) for i in range(len(flow.shared))] + [fifo(g, Stem.IN)] * bool(flow.per_call)
    loads = {(call, name): Load(fifo(g, Stem.IN), 4 * j) for j, (call, name, _) in enumerate(flow.per_call)}
    parts = [part_fifo(g, k, r, c) for k in range(len(flow.results))]
    where = dict(zip((*flow.inputs, *flow.shared), (*ins, *shared))) | dict(zip(flow.results, parts))
    buffers, steps = [], []
    for j, call in enumerate(() if flow.pieces else flow.calls):
        if call not in where:
            buffers.append(Buffer(f"{prefix}_t{j}", tile, -(-b * call.dtype.itemsize // 4) * 4, call.dtype))
            where[call] = buffers[-1].name
        if call.arg.writes and call.arg.kernel.accumulates:   # the state's block, summed into in place
            steps.append(copy_step(call.dtype, b, Ptr(where[destination(call)]), Ptr(where[call])))
        kernel = call.arg.kernel
        arity = call.arg.n_inputs
        sizes = kernel.sizes(*flow.shapes())
        # a row's length left None is the user's whole row, also where it lies padded wider
        # (pad_through_row_width): the kernel reduces that much of each row
        values = {name: call.src[0].shape[-1] if v is None else v for name, v in call.arg.attr_dict.items()}
        attrs = [loads.get((call, name)) or Imm(float(values[name]) if ctype == "f32" else int(values[name]), ctype)
                 for name, ctype in kernel.c_attrs]
        ptrs = [Ptr(where[n]) for n in call.src[:arity]] + [Ptr(where[call])]
        steps.append(KernelStep.of(kernel, input_dtypes(call), (*ptrs, *(Imm(int(s)) for s in sizes), *attrs),
                                   call.dtype))
    if flow.pieces:   # `stream_joined`: a block of the result is a block of one piece
        steps.append(copy_step(flow.calls[0].dtype, b, Ptr(ins[0]), Ptr(parts[0])))
    params = (*ins, *shared, *(buf.name for buf in buffers), *parts)
    function = Function(f"{prefix}_block", params, tuple(steps), blocked=True)
    body = (*(Acquire(f, Port.CONSUME) for f in ins), *(Acquire(p, Port.PRODUCE) for p in parts),
            Invoke(function.name, params),
            *(Release(f, Port.CONSUME) for f in ins), *(Release(p, Port.PRODUCE) for p in parts))
    program = (*(Acquire(f, Port.CONSUME) for f in shared), Loop(flow.rounds, body),
               *(Release(f, Port.CONSUME) for f in shared))
    return function, buffers, Core(tile, g, program, ctx.device.compute.default_stack_bytes)


def _flow_moves(ctx: Context, g: str, flow) -> list:
    """Per run of at most `rounds_per_op` rounds, each column's blocks of every input and of the
    result, one Dma op each (`run` strides over the column's rows x block elements); a Wait on
    them every `rounds_between_waits` runs."""
    rows, cols = len(flow.rows), len(flow.cols)
    result = flow.calls[-1]
    p = result_placement(ctx, result)
    ends = [(partial(_column_leg, g, i), Direction.MM2S, node, *run_access(ctx, node))
            for i, node in enumerate(flow.inputs)]
    ends += [(partial(host_fifo, g, k), Direction.S2MM, node, *result_access(ctx, node))
             for k, node in enumerate(flow.results)]

    def words(node) -> int:
        """One core's block of `node` in words (a fraction for a narrow dtype's offsets)."""
        return (flow.result_block if node is result else flow.block) * node.dtype.itemsize / 4

    def column(node) -> tuple[float, tuple]:
        """(the words a column's joined blocks of `node` span in DDR, their dims there): contiguous,
        or, for a result lying in wider rows the flow does not stream over (`pad_written_by_producer`),
        row by row at their stride, or, for a view lying in rows one stride apart (`stream_view_rows`),
        its rows by their access pattern."""
        view = destination(node) if node.op == Op.CALL and node.arg.writes else node
        if view.op == Op.VIEW and word_run(view) is None:
            lie = _rows(ctx, view)
            count = int(len(flow.rows) * words(node)) * 4 // (view.shape[-1] * view.dtype.itemsize)
            return count * lie.stride, ((count, lie.stride), *lie.row)
        if node is result and flow.padded is None and p.stored[1:] != p.shape[1:]:
            row, stride = (result.shape[1] * result.dtype.itemsize // 4, p.stored[1] * result.dtype.itemsize // 4)
            count = int(rows * words(node)) // row
            return count * stride, ((count, stride), (row, 1))
        return rows * words(node), _words(int(rows * words(node)), ctx.device)

    def dims(node, run: int) -> tuple:
        span, inner = column(node)
        return ((run, int(cols * span)), *inner)

    most = min(rounds_per_op(ctx.device, dims(node, flow.rounds)) for _, _, node, _, _ in ends)
    even = -(-flow.rounds // -(-flow.rounds // most))   # runs of even length, as few as `most` allows
    runs = [(t, min(even, flow.rounds - t)) for t in range(0, flow.rounds, even)]
    moves = []
    once = [Move(Direction.MM2S, fifo(g, Stem.W, i), *stored_access(ctx, node)) for i, node in enumerate(flow.shared)]
    once += [Move(Direction.MM2S, fifo(g, Stem.IN), "words", Access(w, ((1, 1),))) for w in _flow_words(ctx, flow)]
    runs = _joined_runs(flow, runs) if flow.pieces else runs
    for number, (t, run) in enumerate(runs):
        here = [] if t else list(once)
        for c in range(cols):
            for named, direction, node, buffer, at in ends:
                if flow.pieces and node is flow.inputs[0]:
                    buffer, at, blocks = _in_piece(ctx, flow, t * cols + c)
                else:
                    blocks = t * cols + c
                here.append(Move(direction, named(c=c), buffer,
                                 Access(at.offset + int(blocks * column(node)[0]), dims(node, run))))
        moves += _with_waits(ctx, len(runs), number, here)
    return moves


def _column_leg(g: str, i: int, c: int) -> str:
    """Column c's leg of a Flow's input i from the host into its mem tile."""
    return fifo(g, Stem.X, i, c, mem=True)


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
    """(host buffer, Access, column blocks before it in that piece) of the piece a join's column
    block `blocks` (a column's rows of blocks, in stream order) reads from (`stream_joined`)."""
    *earlier, last = flow.pieces
    for piece in earlier:
        count = piece.size // (flow.block * len(flow.rows))
        if blocks < count:
            return (*run_access(ctx, piece), blocks)
        blocks -= count
    return (*run_access(ctx, last), blocks)


def rounds_per_op(device, dims: tuple) -> int:
    """The most rounds (the outermost of `dims`) one Dma op moves: as many as its outermost
    dimension holds, or 1 when one round alone takes more than one op."""
    (rounds, stride), block = dims[0], dims[1:]
    for run in (device.shim.max_bd_wrap, device.dma_repeat_max):
        if len(dma_patterns(0, ((min(run, rounds), stride), *block), device)) == 1:
            return min(run, rounds)
    return 1


def _words(n: int, device) -> tuple[tuple[int, int], ...]:
    """n contiguous words as at most two dims within a BD dimension's size, when they divide so."""
    wrap = device.shim.max_bd_wrap
    if n <= wrap:
        return ((n, 1),)
    inner = max((d for d in range(1, wrap + 1) if n % d == 0 and n // d <= wrap), default=None)
    return ((n, 1),) if inner is None else ((n // inner, inner), (inner, 1))
