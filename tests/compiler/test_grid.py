"""`lower_grid` (iron/compiler/grid.py): a tiled MatMul or MatVec (`tile_matmul_over_array`) as FIFO
objects, mem-tile links, per-core Functions and programs, and moves. Each core (r, c) loops over
its output blocks: the first k-block's product into its `_part<r>_<c>` (`_first`), every further
k-block's added by MatMulAccumulate (`_more`, in a Loop of k-blocks - 1), an int8 product's int32
sum held in a Buffer and rounded once (`_round`). A MatMul's A rows broadcast along a grid row,
B's columns down a grid column; a MatVec's cores own their rows (`Grid.own_rows`): A split per
column on its mem tile, B's blocks to every core. The expectations follow the Grid the cost model
chose (its m, k, n), so they hold whichever blocks it picks. The pass refuses nothing: the
tiling rules decided what it lowers."""
from collections import Counter

import numpy as np

import iron
from aie_utils import from_name
from iron.compiler.grid import lower_grid
from iron.compiler.sequence import Move
from iron.kernels import MatMul, MatMulAccumulate, MatVec
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import (
    Acquire,
    Buffer,
    Direction,
    Imm,
    Invoke,
    KernelStep,
    Loop,
    Port,
    Ptr,
    Release,
    Tile,
    TileKind,
)
from tests.compiler import designs
from tests.compiler.passes import context

NPU2 = from_name("npu2")
F32 = np.float32


def lowered(graph, **spec):
    ctx = context(graph.trace(**spec), NPU2)
    (site,) = ctx.layout.sites
    return site.grid, lower_grid(ctx, site)


def test_a_matmul_grid_broadcasts_a_along_rows_and_b_down_columns():
    a, b = designs.operands(256, 256, 256, F32)
    grid, made = lowered(designs.Product(b), a=(a.shape, F32))
    rows, cols = len(grid.rows), len(grid.cols)
    assert (rows, cols, grid.own_rows, grid.vector) == (4, 8, False, False)
    k_blocks = 256 // grid.k
    assert grid.k_blocks == k_blocks
    assert len(made.cores) == rows * cols and made.buffers == ()
    assert Counter(f.name.rsplit("_", 1)[1] for f in made.functions) == {"first": 32, "more": 32}
    # links: per row A into its mem tile; per column B and the join of its parts
    assert [(len(link.sources), len(link.destinations)) for link in made.links] == \
        [(1, 1)] * rows + [(1, 1), (rows, 1)] * cols
    a0, b3, part = FifoId("g0", Stem.A, (1,)), FifoId("g0", Stem.B, (3,)), FifoId("g0", Stem.PART, (1, 3))
    core = next(c for c in made.cores if c.tile == Tile(3, 3, TileKind.COMPUTE))
    take, give = (Acquire(a0, Port.CONSUME), Acquire(b3, Port.CONSUME)), (Release(a0, Port.CONSUME), Release(b3, Port.CONSUME))
    params = (a0, b3, part)
    blocks = (256 // grid.m // rows) * (256 // grid.n // cols)
    assert core.program == (Loop(blocks, (Acquire(part, Port.PRODUCE), *take, Invoke("g0_r1c3_first", params), *give,
                                          Loop(k_blocks - 1, (*take, Invoke("g0_r1c3_more", params), *give)),
                                          Release(part, Port.PRODUCE))),)
    first, more = (next(f for f in made.functions if f.name == f"g0_r1c3_{w}") for w in ("first", "more"))
    assert [s.kernel for s in first.steps] == [MatMul] and [s.kernel for s in more.steps] == [MatMulAccumulate]
    assert first.blocked and more.blocked
    moved = [(m.direction, m.fifo) for m in made.moves if isinstance(m, Move)]
    assert Counter(moved) == Counter([*((Direction.MM2S, FifoId("g0", Stem.A, (r,), mem=True)) for r in range(rows)),
                                      *((Direction.MM2S, FifoId("g0", Stem.B, (c,), mem=True)) for c in range(cols)),
                                      *((Direction.S2MM, FifoId("g0", Stem.HOST, (c,))) for c in range(cols))])


def test_a_bfloat16_grid_sums_in_float32_and_rounds_each_block_once():
    a, b = (x.astype(iron.bfloat16) for x in designs.operands(256, 256, 256, F32))
    grid, made = lowered(designs.Product(b), a=(a.shape, iron.bfloat16))
    assert grid.acc == np.dtype(F32)
    assert made.buffers[0] == Buffer("g0_r0c0_sum", Tile(0, 2, TileKind.COMPUTE), grid.m * grid.n * 4, np.dtype(F32))
    assert len(made.buffers) == len(made.cores) == 32
    rounds = [f for f in made.functions if f.name.endswith("_round")]
    assert len(rounds) == 32 and rounds[0].params == ("g0_r0c0_sum", FifoId("g0", Stem.PART, (0, 0)))
    (cast,) = rounds[0].steps
    assert (cast.dtype, cast.out) == (np.dtype(F32), np.dtype(iron.bfloat16))
    assert made.cores[0].program[0].body[-2] == Invoke("g0_r0c0_round", ("g0_r0c0_sum", FifoId("g0", Stem.PART, (0, 0))))


def test_a_matvec_grid_gives_each_core_its_own_rows_and_every_core_the_vector():
    """4096 x 1024 float32 over 4 x 8 cores: per column A's rows into its mem tile, split into a
    `_a<r>_<c>` per core; the vector's k-blocks in one `_b` to all 32 cores."""
    grid, made = lowered(designs.Projection(np.ones((4096, 1024), F32)), x=((1024,), F32))
    assert (grid.own_rows, grid.vector, len(grid.rows), len(grid.cols)) == (True, True, 4, 8)
    assert made.sizes[FifoId("g0", Stem.B)][0] == grid.k * 4
    splits = [link for link in made.links if link.sources[0].stem is Stem.A]
    assert [link.destinations for link in splits] == [tuple(FifoId("g0", Stem.A, (r, c)) for r in range(4)) for c in range(8)]
    core = made.cores[0]
    (loop,) = core.program
    assert isinstance(loop, Loop) and loop.body[-2] == Loop(1024 // grid.k - 1, loop.body[-2].body)
    first = next(f for f in made.functions if f.name == "g0_r0c0_first")
    assert first.params == (FifoId("g0", Stem.A, (0, 0)), FifoId("g0", Stem.B), FifoId("g0", Stem.PART, (0, 0)))
    assert first.steps == (KernelStep.of(MatVec, F32, (Ptr(FifoId("g0", Stem.A, (0, 0))), Ptr(FifoId("g0", Stem.B)), Ptr(FifoId("g0", Stem.PART, (0, 0))), Imm(grid.m),
                                                       Imm(grid.k))),)
    directions = Counter(m.direction for m in made.moves if isinstance(m, Move))
    assert directions == {Direction.MM2S: 1 + 8, Direction.S2MM: 8}
