"""Lowering a tiled MatMul or MatVec (a Grid, tiling.py): its FIFO objects and mem-tile links, each
core's Functions and program (per output block: the first k-block's product, each further one's
added by MatMulAccumulate, a bfloat16 result rounded once from its float32 sum), and the moves
of A, B and C step by step with Waits every few steps, so no shim runs out of buffer
descriptors (docs/platform.md section 5)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from iron.compiler.channels import bd_share, dma_patterns
from iron.compiler.objects import Context, call_step, holding, join_link, split_link
from iron.compiler.place import Site
from iron.compiler.sequence import Move
from iron.compiler.tiling import Grid, word_run
from iron.compiler.words import Access, Rows, view_rows
from iron.ir import Node, Op, call_label, describe, destination, input_dtypes, nbytes, storage
from iron.kernels.registry import accumulate_kernel, convert_kernel, is_library
from iron.plan.fifos import Stem, fifo_id
from iron.plan.plan import (
    Buffer,
    Core,
    Direction,
    Function,
    Imm,
    Invoke,
    KernelStep,
    Link,
    Loop,
    Placement,
    Ptr,
    Wait,
)


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
    made = [_core(ctx, g, grid, r, c) for c in range(len(grid.cols)) for r in range(len(grid.rows))]
    moves = _moves(ctx, g, grid)
    return GridLowered(_sizes(ctx, g, grid), _links(g, grid), tuple(b for _, held, _ in made for b in held),
                       tuple(f for fs, _, _ in made for f in fs), tuple(core for *_, core in made), tuple(moves))


def _sizes(ctx: Context, g: str, grid: Grid) -> dict:
    a, b = grid.call.src[:2]
    out, label = grid.call.dtype, call_label(ctx.program, grid.call)
    m, k, n, rows = grid.m, grid.k, grid.n, range(len(grid.rows))
    b_blocks = (k * n * b.dtype.itemsize, b.dtype, f"blocks of {describe(b)}")
    a_rows = (grid.a_block_bytes, grid.matrix.dtype, f"rows of {describe(grid.matrix)}")
    sizes = {fifo_id(g, Stem.B): b_blocks} if grid.own_rows else \
        {fifo_id(g, Stem.A, r, mem=mem): (m * k * a.dtype.itemsize, a.dtype, f"blocks of {describe(a)}")
         for r in rows for mem in (True, False)}
    for c in range(len(grid.cols)):
        if grid.own_rows:
            sizes[fifo_id(g, Stem.A, c, mem=True)] = (len(rows) * a_rows[0], *a_rows[1:])
            sizes |= {fifo_id(g, Stem.A, r, c): a_rows for r in rows}
        else:
            sizes |= {fifo_id(g, Stem.B, c, mem=mem): b_blocks for mem in (True, False)}
        sizes |= {fifo_id(g, Stem.PART, r, c): (m * n * out.itemsize, out, label) for r in rows}
        sizes[fifo_id(g, Stem.HOST, c)] = (len(rows) * m * n * out.itemsize, out, label)
    return sizes


def _links(g: str, grid: Grid) -> tuple[Link, ...]:
    """A's and B's blocks forwarded by their mem tiles (cores owning their rows: each column's rows
    of A split between them); each column's C blocks joined, grid row r at r blocks in (so the
    joined object is len(rows) * m consecutive rows of C)."""
    part, rows = grid.m * grid.n * grid.call.dtype.itemsize, range(len(grid.rows))
    links = [Link(mem, (fifo_id(g, Stem.A, r, mem=True),), (fifo_id(g, Stem.A, r),)) for r, mem in enumerate(grid.a_mems)]
    for c, mem in enumerate(grid.c_mems):
        links.append(split_link(mem, fifo_id(g, Stem.A, c, mem=True), [fifo_id(g, Stem.A, r, c) for r in rows],
                                grid.a_block_bytes) if grid.own_rows else
                     Link(mem, (fifo_id(g, Stem.B, c, mem=True),), (fifo_id(g, Stem.B, c),)))
        links.append(join_link(mem, [fifo_id(g, Stem.PART, r, c) for r in rows], fifo_id(g, Stem.HOST, c), part))
    return tuple(links)


def _core(ctx: Context, g: str, grid: Grid, r: int, c: int):
    """Core (r, c)'s Functions, Buffers and program: a Loop over its output blocks, each summing
    its k-blocks."""
    call, tile, prefix = grid.call, grid.tile(r, c), f"{g}_r{r}c{c}"
    a, b = (fifo_id(g, Stem.A, r, c), fifo_id(g, Stem.B)) if grid.own_rows else (fifo_id(g, Stem.A, r), fifo_id(g, Stem.B, c))
    m, k, n, part = grid.m, grid.k, grid.n, fifo_id(g, Stem.PART, r, c)
    kernel, in_dtype = call.arg.kernel, call.src[0].dtype
    sizes = tuple(Imm(int(s)) for s in kernel.sizes(*(([(m, k), (k,)], (m,)) if grid.vector else ([(m, k), (k, n)], (m, n)))))
    wide = grid.acc != call.dtype   # a bfloat16 result summed in float32, rounded once
    total = f"{prefix}_sum" if wide else part
    buffers = [Buffer(total, tile, m * n * grid.acc.itemsize, grid.acc)] if wide else []
    matrix, expanded = a, ()
    if grid.expand is not None:   # `dequant_before_matvec`: A's block expanded into a Buffer first
        buffers.append(Buffer(f"{prefix}_expanded", tile, m * k * in_dtype.itemsize, in_dtype))
        matrix = buffers[-1].name
        expanded = (call_step(grid.expand, (Ptr(a), Ptr(matrix)), [(m, grid.a_block_bytes // m)], (m, k)),)
    params = (a, b, *((matrix,) if expanded else ()), total)
    product = KernelStep.of(kernel, input_dtypes(call), (Ptr(matrix), Ptr(b), Ptr(total), *sizes), grid.acc)
    first = Function(f"{prefix}_first", params, (*expanded, product), blocked=True)
    functions = [first]
    body = [*holding((a, b), (), (Invoke(first.name, first.params),))]
    if grid.k_blocks > 1:
        more, held = _more(prefix, grid, tile, params, expanded, product)
        functions.append(more)
        buffers += held
        body.append(Loop(grid.k_blocks - 1, holding((a, b), (), (Invoke(more.name, more.params),))))
    if wide:
        cast = KernelStep.of(convert_kernel(), grid.acc, (Ptr(total), Ptr(part), Imm(m * n)), call.dtype)
        functions.append(Function(f"{prefix}_round", (total, part), (cast,), blocked=True))
        body.append(Invoke(f"{prefix}_round", (total, part)))
    program = (Loop(grid.rounds * grid.per_round, holding((), (part,), body)),)
    return functions, buffers, Core(tile, g, program, ctx.device.compute.default_stack_bytes)


def _more(prefix: str, grid: Grid, tile, params: tuple[str, ...], expanded: tuple, first: KernelStep) -> tuple[Function, list]:
    """The Function adding a further k-block's product to the block's sum (`first`'s destination):
    one call of the kernel summing the call's kernel (MatMulAccumulate), else the product into a
    Buffer of its own and an Accumulate of it."""
    kernel, (matrix, b, total) = first.kernel, (p.source for p in first.args[:3])
    m, k, n = grid.m, grid.k, grid.n
    if (summed_by := kernel.summed_by if is_library(kernel) else None) is not None:
        dims = (Imm(m), Imm(k), Imm(1 if grid.vector else n))
        step = KernelStep.of(summed_by, first.ins or first.dtype, (Ptr(matrix), Ptr(b), Ptr(total), *dims), grid.acc)
        return Function(f"{prefix}_more", params, (*expanded, step), blocked=True), []
    product = Buffer(f"{prefix}_product", tile, m * n * grid.acc.itemsize, grid.acc)
    into_product = KernelStep.of(kernel, first.ins or first.dtype, (*first.args[:2], Ptr(product.name), *first.args[3:]), grid.acc)
    add = KernelStep.of(accumulate_kernel(), grid.acc, (Ptr(product.name), Ptr(total), Imm(m * n)))
    return Function(f"{prefix}_more", (*params[:-1], product.name, total), (*expanded, into_product, add), blocked=True), [product]


# ---- the moves ------------------------------------------------------------------------------------

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
    """(host buffer, Access) of the first word a streamed result goes to (its output's, or a
    state's run)."""
    if result.arg.writes:
        return run_access(ctx, destination(result))
    p = result_placement(ctx, result)
    return p.buffer, Access(p.offset, ())


def run_access(ctx: Context, node) -> tuple[str, Access]:
    """(host buffer, Access) of the words a streamed input lies in, from its first word."""
    if node.op != Op.VIEW:
        return stored_access(ctx, node)
    buffer, at = stored_access(ctx, node.src[0])
    lie = view_rows_of(ctx, node)
    if lie is not None:   # `stream_view_rows`: from its first row's first word
        return buffer, Access(at.offset + lie.first // 4, ())
    return buffer, Access(at.offset + word_run(node) * node.dtype.itemsize // 4, ((nbytes(node) // 4, 1),))


def view_rows_of(ctx: Context, view: Node) -> Rows | None:
    """How a streamed view's rows lie as its base lies (`stream_view_rows`); None for a run of words."""
    p = ctx.placement(view.src[0].arg.name)
    if p.padded is None and word_run(view) is not None:
        return None
    return view_rows(view, p.padded, p.word_rows, p.lead)


def with_waits(ctx: Context, steps: int, t: int, here: list[Move]) -> list:
    """Step `t`'s moves, then a Wait on each of their FIFOs every `rounds_between_waits` steps."""
    if (t + 1) % max(1, rounds_between_waits(ctx.device, here)) == 0 and t + 1 < steps:
        return [*here, *(Wait(mv.fifo) for mv in here)]
    return here


def _moves(ctx: Context, g: str, grid: Grid) -> list:
    """Step by step (each core's next output blocks of one block row, as many as the BD ids hold),
    every grid row's A blocks, every column's B blocks and joined C blocks; cores owning their rows
    take, round by round (m rows of every core), each column's rows of A by k-blocks, the whole of B
    (the vector) in k-blocks, and each column's joined rows of C."""
    call, a, b = grid.call, grid.matrix, grid.call.src[1]
    _, big_k, big_n = grid.sides   # padded (`pad_to_block`): the strides of A, B and C as they lie
    rows, cols, m, k, n = len(grid.rows), len(grid.cols), grid.m, grid.k, grid.n
    wa = nbytes(a) / call.src[0].size / 4   # bytes per element of A as moved (its blocks, when expanded), in words
    wb, wc = b.dtype.itemsize / 4, call.dtype.itemsize / 4
    a_buf, a_at = stored_access(ctx, a)
    b_buf, b_at = stored_access(ctx, b)
    p = replace(result_placement(ctx, call), offset=result_access(ctx, call)[1].offset)   # C: an output, or a state's run

    def rows_step(t: int, j: int, q: int) -> list[Move]:
        here = [Move(Direction.MM2S, fifo_id(g, Stem.B), b_buf, b_at)]
        for c in range(cols):
            first = (t * cols + c) * rows * m
            dims = ((grid.k_blocks, k), (rows * m, big_k), (k, 1))
            here.append(Move(Direction.MM2S, fifo_id(g, Stem.A, c, mem=True), a_buf, in_words(a_at, first * big_k, dims, wa)))
            here.append(Move(Direction.S2MM, fifo_id(g, Stem.HOST, c), p.buffer, in_words(p, first * n, ((rows * m * n, 1),), wc)))
        return here

    def blocks_step(t: int, j: int, q: int) -> list[Move]:
        row0, here = t * rows * m, []
        for r in range(rows):
            dims = ((q, 0), (grid.k_blocks, k), (m, big_k), (k, 1))
            here.append(Move(Direction.MM2S, fifo_id(g, Stem.A, r, mem=True), a_buf, in_words(a_at, (row0 + r * m) * big_k, dims, wa)))
        for c in range(cols):
            dims = ((q, cols * n), (grid.k_blocks, k * big_n), (k, big_n), (n, 1))
            here.append(Move(Direction.MM2S, fifo_id(g, Stem.B, c, mem=True), b_buf, in_words(b_at, (j * cols + c) * n, dims, wb)))
        for c in range(cols):
            dims = ((q, cols * n), (rows * m, big_n), (n, 1))
            first = row0 * big_n + (j * cols + c) * n
            here.append(Move(Direction.S2MM, fifo_id(g, Stem.HOST, c), p.buffer, in_words(p, first, dims, wc)))
        return here

    step = rows_step if grid.own_rows else blocks_step   # cores owning their rows: one round a step
    # the most output blocks of a round one step moves: the whole round, or as many as keep every shim's
    # Dma ops of the step within its BD ids (a Wait inside a step would wait on A before B is issued,
    # and the cores, needing both, would never drain A)
    q = next((q for q in range(grid.per_round, 1, -1) if rounds_between_waits(ctx.device, step(0, 0, q))), 1)
    steps = [step(t, j, min(q, grid.per_round - j)) for t in range(grid.rounds) for j in range(0, grid.per_round, q)]
    return [mv for s, here in enumerate(steps) for mv in with_waits(ctx, len(steps), s, here)]


def in_words(at, first: int, dims: tuple[tuple[int, int], ...], words_per_element: float) -> Access:
    """The words of elements `first` + `dims` (in elements) past `at`, contiguous dims joined where a
    side is not whole words (`whole_rows_when_not_words`)."""
    def words(x):
        return x * words_per_element

    if any(not float(words(s)).is_integer() for _, s in dims) or not float(words(dims[-1][0])).is_integer():
        dims = _contiguous(dims)
    inner = dims[-1][0]
    return Access(at.offset + int(words(first)),
                  (*((size, int(words(stride))) for size, stride in dims[:-1]), (int(words(inner)), 1)))


def _contiguous(dims: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """`dims` with size-1 dims dropped and each dim spanning the one inside it joined to it."""
    joined = [(1, 1)]
    for size, stride in reversed([d for d in dims if d[0] > 1] or [dims[-1]]):
        inner_size, inner_stride = joined[-1]
        if stride == inner_size * inner_stride and inner_stride == 1:
            joined[-1] = (size * inner_size, 1)
        else:
            joined.append((size, stride))
    return tuple(reversed(joined))


def rounds_between_waits(device, moves: list[Move]) -> int:
    """How many steps of `moves` a shim's BD ids hold (0: not one)."""
    return bd_share(device) // max(len(dma_patterns(mv.access.offset, mv.access.dims, device)) for mv in moves)
