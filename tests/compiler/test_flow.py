"""`lower_flow` (iron/compiler/flow.py): streamed calls (`stream_elementwise`, `stream_row_blocks`)
as FIFO objects, each column's splits and join on its mem tile, each core's blocked Function and
its Loop over its blocks, and the moves. Every core's Loop runs the stream's blocks over the
cores (`elements / (block * cores)` rounds); a row every row shares (RMSNorm's g, `_w<i>`) and the
per-call words (`_in`, Softmax's length, read by a Load) are acquired once around the Loop; each
column moves one Move per input and one for its joined result. Expectations follow the block
the cost model chose. The pass refuses nothing: the streaming rules decided what it lowers."""
import numpy as np

import iron
from aie_utils import from_name
from iron import Scratchpad
from iron.compiler.flow import lower_flow
from iron.compiler.sequence import Move
from iron.kernels import Add, RMSNorm, Softmax
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import (
    Acquire,
    Direction,
    Imm,
    Invoke,
    KernelStep,
    Load,
    Loop,
    Port,
    Ptr,
    Release,
)
from tests.compiler import designs
from tests.compiler.passes import context

NPU2 = from_name("npu2")
F32 = np.float32
C, P = Port.CONSUME, Port.PRODUCE


class Norm(iron.Graph):
    def __init__(self, width: int):
        self.g = iron.param(np.ones(width, F32))

    def body(self, x):
        return RMSNorm.step(x, self.g)


class Soft(iron.Graph):
    def body(self, x, *, n: Scratchpad[np.int32]):
        return Softmax.step(x, length=n + 1)


def lowered(graph, **spec):
    ctx = context(graph.trace(**spec), NPU2)
    (site,) = ctx.layout.sites
    return site.flow, lower_flow(ctx, site)


def block_body(x_fifos, part, function, params) -> tuple:
    return (*(Acquire(f, C) for f in x_fifos), Acquire(part, P), Invoke(function, params),
            *(Release(f, C) for f in x_fifos), Release(part, P))


def test_an_elementwise_stream_splits_each_input_per_column_and_joins_the_results():
    spec = ((65536,), F32)
    flow, made = lowered(designs.Sum(), x=spec, y=spec)
    rows, cols, b = len(flow.rows), len(flow.cols), flow.block
    assert (rows, cols) == (2, 8) and len(made.cores) == 16
    size = b * 4
    assert [(link.sources, link.destinations, link.source_offsets, link.destination_offsets)
            for link in made.links[:3]] == [
        ((FifoId("g0", Stem.X, (0, 0), mem=True),), (FifoId("g0", Stem.X, (0, 0, 0)), FifoId("g0", Stem.X, (0, 1, 0))), (), (0, size)),
        ((FifoId("g0", Stem.X, (1, 0), mem=True),), (FifoId("g0", Stem.X, (1, 0, 0)), FifoId("g0", Stem.X, (1, 1, 0))), (), (0, size)),
        ((FifoId("g0", Stem.PART, (0, 0)), FifoId("g0", Stem.PART, (1, 0))), (FifoId("g0", Stem.HOST, (0,)),), (0, size), ())]
    assert len(made.links) == 3 * cols
    x, part = (FifoId("g0", Stem.X, (0, 1, 2)), FifoId("g0", Stem.X, (1, 1, 2))), FifoId("g0", Stem.PART, (1, 2))
    core = next(c for c in made.cores if (c.tile.col, c.tile.row) == (2, 3))
    params = (*x, part)
    assert core.program == (Loop(65536 // (b * 16), block_body(x, part, "g0_r1c2_block", params)),)
    function = next(f for f in made.functions if f.name == "g0_r1c2_block")
    assert function.steps == (KernelStep.of(Add, F32, (Ptr(x[0]), Ptr(x[1]), Ptr(part), Imm(b))),)
    assert [(m.direction, m.fifo) for m in made.moves if isinstance(m, Move)][:3] == [
        (Direction.MM2S, FifoId("g0", Stem.X, (0, 0), mem=True)), (Direction.MM2S, FifoId("g0", Stem.X, (1, 0), mem=True)),
        (Direction.S2MM, FifoId("g0", Stem.HOST, (0,)))]
    assert sum(isinstance(m, Move) for m in made.moves) == 3 * cols


def test_a_row_every_row_shares_is_acquired_once_around_the_loop():
    """RMSNorm over 1024 rows of 256 with its g: `_w0` (one row of g) to every core, moved once."""
    flow, made = lowered(Norm(256), x=((1024, 256), F32))
    assert made.sizes[FifoId("g0", Stem.W, (0,))] == (256 * 4, np.dtype(F32), "g")
    rows_per_block = flow.block // 256
    core = made.cores[0]
    params = (FifoId("g0", Stem.X, (0, 0, 0)), FifoId("g0", Stem.W, (0,)), FifoId("g0", Stem.PART, (0, 0)))
    assert core.program == (Acquire(FifoId("g0", Stem.W, (0,)), C),
                            Loop(1024 // (rows_per_block * 32), block_body([FifoId("g0", Stem.X, (0, 0, 0))], FifoId("g0", Stem.PART, (0, 0)),
                                                                             "g0_r0c0_block", params)),
                            Release(FifoId("g0", Stem.W, (0,)), C))
    (step,) = made.functions[0].steps
    assert step.args[:5] == (Ptr(FifoId("g0", Stem.X, (0, 0, 0))), Ptr(FifoId("g0", Stem.W, (0,))), Ptr(FifoId("g0", Stem.PART, (0, 0))), Imm(rows_per_block), Imm(256))
    assert [m.fifo for m in made.moves if isinstance(m, Move)].count(FifoId("g0", Stem.W, (0,))) == 1


def test_a_per_call_length_comes_once_in_the_in_object_and_is_loaded_by_every_block():
    flow, made = lowered(Soft(), x=((1024, 256), F32))
    assert made.sizes[FifoId("g0", Stem.IN)] == (4, np.dtype(np.int32), "n + 1")
    core = made.cores[0]
    assert (core.program[0], core.program[-1]) == (Acquire(FifoId("g0", Stem.IN), C), Release(FifoId("g0", Stem.IN), C))
    (step,) = made.functions[0].steps
    assert step.kernel is Softmax and step.args[-1] == Load(FifoId("g0", Stem.IN), 0)
    (words,) = [m for m in made.moves if isinstance(m, Move) and m.fifo == FifoId("g0", Stem.IN)]
    assert (words.direction, words.buffer, words.access.nwords) == (Direction.MM2S, "words", 1)
