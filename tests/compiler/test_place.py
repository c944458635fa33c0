"""Placement rules (iron/compiler/place.py, through compile_program): snake order, streamed and
split matrices, shim channels, and the refusals when a device is too small. Sharing shim
channels through mem tiles has its own tests (test_share_channels.py)."""

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.channels import MemChannels
from iron.compiler.compile import compile_program
from iron.compiler.matrices import lane_stops
from iron.compiler.place import snake_order
from iron.ir import Declared, MemoryKind, Node, Op
from iron.kernels import Add, Exp, MatVec, ReLU, Softmax
from iron.plan.describe import describe
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Choice, Dma, FifoRole, Imm, KernelStep, Link, Loop, Ptr, TileKind
from iron.plan.rules import Rule
from tests.compiler import designs
from tests.quotes import quoted

F32 = np.float32


def plan_of(graph, device="npu2", **specs):
    return compile_program(graph.trace(**specs) if specs else designs.trace(graph), from_name(device))


def texts(plan, rule: Rule) -> list[str]:
    return [text for r, text in plan.rules if r is rule]


def decided(plan, rule: Rule) -> int:
    """How many decisions `rule` made."""
    return len(texts(plan, rule))


def core_tiles(plan) -> list[tuple[str, str]]:
    return [(c.group, c.tile.name) for c in plan.cores]


def test_snake_order_goes_up_even_columns_and_down_odd_ones():
    tiles = [(t.col, t.row) for t in snake_order(from_name("npu2_2col"))]
    assert tiles == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 5), (1, 4), (1, 3), (1, 2)]


class Chain(iron.Graph):
    """Twelve Exp calls in a row."""

    def body(self, x):
        for _ in range(6):
            x = Exp.step(Exp.step(x))
        return x


def test_consecutive_groups_take_neighbouring_tiles():
    # 4096 float32 are 16 KiB: an input and a result fill half a tile, so size_limit gives each
    # Exp a group of its own
    plan = plan_of(Chain(), x=((4096,), F32))
    assert [name for _, name in core_tiles(plan)] == [
        "tile_0_2", "tile_0_3", "tile_0_4", "tile_0_5", "tile_1_5", "tile_1_4",
        "tile_1_3", "tile_1_2", "tile_2_2", "tile_2_3", "tile_2_4", "tile_2_5"]
    assert all(f.shared_memory for f in plan.fifos if f.name.stem is Stem.OUT)


def test_stream_large_matrix_streams_row_blocks_through_the_mem_tile():
    plan = plan_of(designs.mlp_layer(128))   # W is 64 KiB of float32: 4 blocks of 32 rows
    w_mem, w = plan.fifo(FifoId("g1", Stem.W, mem=True)), plan.fifo(FifoId("g1", Stem.W))
    assert (w_mem.producer.name, [t.name for t in w_mem.consumers], w_mem.nbytes) == ("shim_0_0", ["mem_0_1"], 16384)
    assert (w.producer.name, [t.name for t in w.consumers], w.nbytes) == ("mem_0_1", ["tile_0_3"], 16384)
    assert plan.links == (Link(w_mem.consumers[0], (FifoId("g1", Stem.W, mem=True),), (FifoId("g1", Stem.W),)),)
    loop = next(item for item in plan.cores[1].program if isinstance(item, Loop))
    assert loop.count == 4
    assert plan.function("g1_block").steps == (KernelStep.of(MatVec, np.float32, (
        Ptr(FifoId("g1", Stem.W)), Ptr(FifoId("g0", Stem.OUT), 512), Ptr("g1_buf0", 0, block_stride=128), Imm(32), Imm(128))),)
    stream = [(op.offset, op.sizes, op.strides) for op in plan.sequence if isinstance(op, Dma) and op.fifo == FifoId("g1", Stem.W, mem=True)]
    assert stream == [(0, (1, 1, 32, 512), (0, 0, 512, 1))]
    assert decided(plan, Rule.STREAM_LARGE_MATRIX) == 1


def test_a_matvec_takes_a_grid_or_a_split_as_estimated_faster(on_emulator):
    # npu2: a grid's eight columns read the matrix through eight shim channels, at DDR's pace; a split's
    # four parts through four channels, slower. npu1: four columns, four channels either way, a tie,
    # which goes to the split (fewer tiles, nothing padded)
    decided = {device: [c for _, c in plan_of(designs.big_matvec(512, 256), device).choices if c.what == "grid or split"]
               for device in ("npu2", "npu1")}
    assert decided == {
        "npu2": [Choice(Rule.TILE_MATMUL_OVER_ARRAY, "grid or split", "grid of 4 x 8 cores, m=16 k=256 n=1",
                        pytest.approx(7533.7, abs=0.1), "split into 4 parts through 4 shim channels", pytest.approx(9102.2, abs=0.1))],
        "npu1": [Choice(Rule.SPLIT_MATRIX_OVER_TILES, "grid or split", "split into 4 parts through 4 shim channels",
                        20480.0, "grid of 4 x 4 cores, m=32 k=128 n=1", 20480.0)]}
    assert len(plan_of(designs.big_matvec(512, 256)).cores) == 32
    padded = plan_of(designs.big_matvec(251, 520))   # a prime M splits by none, but pads to 256 rows for a grid
    assert [(c.chosen, c.rejected) for _, c in padded.choices] == [
        ("(M, K, N) = (256, 520, 1)", "(M, K, N) = (256, 544, 1)"),
        ("grid of 4 x 8 cores, m=8 k=130 n=1", "split into 1 part through 1 shim channel"),
        ("m=8 k=130 n=1", "m=8 k=104 n=1")]
    graph = designs.big_matvec(251, 520)
    x = graph.example()["x"]
    np.testing.assert_allclose(graph.compile(x=x)(x), graph.reference(x), rtol=1e-4, atol=1e-4)
    assert ("tile_matmul_over_array: grid or split chosen by estimated time: grid of 4 x 8 cores, m=16 k=256 n=1, "
            "7.5 us; the best rejected, split into 4 parts through 4 shim channels, 9.1 us") in describe(
        plan_of(designs.big_matvec(512, 256)))


def test_split_matrix_over_tiles_splits_rows_over_shim_channels_and_joins_the_parts():
    # 512 KiB: four parts, each read through its own shim channel; on npu1, where the grid is no faster
    plan = plan_of(designs.big_matvec(512, 256), "npu1")
    assert core_tiles(plan) == [("g0", "tile_0_2"), ("g0", "tile_0_3"), ("g0", "tile_0_4"), ("g0", "tile_0_5")]
    *lanes, join = plan.links
    assert [(lane.tile.name, lane.sources, lane.destinations, lane.destination_offsets) for lane in lanes] == [
        (f"mem_{k}_1", (FifoId("g0", Stem.W, (k,), mem=True),), (FifoId("g0", Stem.W, (k,)),), ()) for k in range(4)]   # a lane of one part: a forward
    assert (join.tile.name, join.sources, join.destinations, join.source_offsets) == (
        "mem_0_1", (FifoId("g0", Stem.PART, (0,)), FifoId("g0", Stem.PART, (1,)), FifoId("g0", Stem.PART, (2,)), FifoId("g0", Stem.PART, (3,))), (FifoId("g0", Stem.HOST),), (0, 512, 1024, 1536))
    assert [plan.fifo(FifoId("g0", Stem.W, (k,), mem=True)).producer.name for k in range(4)] == [f"shim_{k}_0" for k in range(4)]
    assert [t.name for t in plan.fifo(FifoId("g0", Stem.IN)).consumers] == ["tile_0_2", "tile_0_3", "tile_0_4", "tile_0_5"]
    stream = [(op.fifo, op.offset, op.sizes, op.strides) for op in plan.sequence
              if isinstance(op, Dma) and op.fifo.group == "g0" and op.fifo.stem is Stem.W]
    # each lane's 128 rows lie end to end: one run of 32768 words, one Dma of 64 x 512
    assert stream == [(FifoId("g0", Stem.W, (k,), mem=True), k * 32768, (1, 1, 64, 512), (0, 0, 512, 1)) for k in range(4)]
    assert plan.function("g0_p2_block").steps[0].args[2] == Ptr(FifoId("g0", Stem.PART, (2,)), 0, block_stride=64)
    assert dict(plan.choices)["g0"] == Choice(Rule.SPLIT_MATRIX_OVER_TILES, "parts and shim channels",
                                              "4 parts through 4 shim channels", 20480.0, "4 parts through 2 shim channels",
                                              40960.0)


class BigThenFive(iron.Graph):
    def __init__(self):
        self.w = iron.param(np.ones((512, 256), F32))

    def body(self, x):
        y = MatVec.step(self.w, x)
        for _ in range(5):
            y = Softmax.step(y)
        return y


def test_a_matrix_takes_the_parts_the_tiles_and_shim_channels_left_allow_and_says_why_not_more():
    # 6 groups on 8 tiles leave 3 for the MatVec, and 4 shim MM2S channels less the input's leave it 3: 2 parts
    # (3 does not divide 512), each read through its own channel
    plan = plan_of(BigThenFive(), "npu2_2col", x=((256,), F32))
    split, why = texts(plan, Rule.SPLIT_MATRIX_OVER_TILES)
    quoted(split, "g0", "2 tiles")
    quoted(why, "g0", "not more", "4", "3 spare")
    assert [name for _, name in core_tiles(plan)] == [
        "tile_0_2", "tile_0_3", "tile_0_4", "tile_0_5", "tile_1_5", "tile_1_4", "tile_1_3"]
    assert [f.name for f in plan.fifos if f.role is FifoRole.WEIGHTS and f.producer.kind is TileKind.SHIM] == [
        FifoId("g0", Stem.W, (0,), mem=True), FifoId("g0", Stem.W, (1,), mem=True)]


class PrimeRowsThenReLU(iron.Graph):
    """A 251 x 520 float32 MatVec (510 KiB) with a ReLU on its rows: no grid takes a MatVec whose
    result its own group reads (alone, it pads M to 256 and takes a grid), and a prime splits by none."""

    def __init__(self):
        self.w = iron.param(np.ones((251, 520), F32))

    def body(self, x):
        return ReLU.step(MatVec.step(self.w, x))


def test_a_matrix_left_on_one_tile_says_why():
    plan = plan_of(PrimeRowsThenReLU(), x=((520,), F32))
    (why,) = texts(plan, Rule.SPLIT_MATRIX_OVER_TILES)
    quoted(why, "g0", "1 tile", *(f"{k} does not divide" for k in range(2, 7)), "251 rows")
    assert core_tiles(plan) == [("g0", "tile_0_2")] and dict(plan.choices)["g0"].rejected is None


def test_a_row_wider_than_a_streamed_block_streams_one_row_at_a_time(on_emulator):
    # a 4097-float32 row takes 16388 bytes, 4 more than a streamed block: split parts once had no
    # stream at all and routing failed with an AttributeError
    # on npu1, whose grid is no faster than the split (on npu2 a grid of 2 x 8 cores takes it)
    graph = designs.big_matvec(16, 4097)
    plan = plan_of(graph, "npu1", x=((4097,), F32))
    assert (decided(plan, Rule.STREAM_LARGE_MATRIX), decided(plan, Rule.SPLIT_MATRIX_OVER_TILES)) == (1, 2)
    assert len(plan.cores) == 4 and [plan.fifo(FifoId("g0", Stem.W, (p,))).nbytes for p in range(4)] == [4097 * 4] * 4
    assert [item.count for item in plan.cores[0].program if isinstance(item, Loop)] == [4]   # one row a block
    x = graph.example()["x"]
    np.testing.assert_allclose(graph.compile(x=x, device="npu1")(x), graph.reference(x), rtol=1e-4, atol=1e-4)


def test_a_split_whose_parts_give_results_of_part_words_takes_fewer_parts(on_emulator):
    # 6 parts of 170 int8 results each would make a 170-byte FIFO object, which a DMA cannot move
    graph = designs.big_matvec(1020, 300, np.int8)
    plan = plan_of(graph, x=((300,), np.int8))
    split, why = texts(plan, Rule.SPLIT_MATRIX_OVER_TILES)
    assert len(plan.cores) == 5 and plan.fifo(FifoId("g0", Stem.PART, (0,))).nbytes == 204
    quoted(why, "not more", "6 parts of 170 rows", "170 bytes", "32-bit")
    x = np.arange(300).astype(np.int8)
    np.testing.assert_array_equal(graph.compile(x=x)(x), graph.reference(x))


class FarApartParts(iron.Graph):
    """A 4096 x 1152 float32 matrix (18 MiB) times a computed vector: two parts of one lane lie
    further apart than one buffer descriptor's stride reaches, so each part takes a lane."""

    def __init__(self):
        self.w = iron.param(np.zeros((4096, 1152), F32))

    def body(self, x):
        return MatVec.step(self.w, Exp.step(x))


def test_parts_further_apart_than_one_stride_take_a_lane_each():
    w = Node(Op.MEMORY, (), (4096, 1152), np.dtype(F32), Declared(MemoryKind.PARAM, "w"))
    assert [(parts, k, lane_stops(w, parts, k, MemChannels(from_name("npu2")), (0, 0), 64)) for parts, k in ((4, 2), (4, 4))] == [
        (4, 2, "4 parts lie 1179648 words apart, more than a buffer descriptor's largest stride (1048576 words)"),
        (4, 4, "")]
    plan = plan_of(FarApartParts(), x=((1152,), F32))
    assert dict(plan.choices)["g1"].chosen == "4 parts through 4 shim channels"


class Three(iron.Graph):
    def body(self, x, y, z):
        return Exp.step(x), Exp.step(y), Exp.step(z)


def test_shim_channels_spread_over_columns():
    spec = ((8,), F32)
    plan = plan_of(Three(), x=spec, y=spec, z=spec)
    assert {op.fifo: op.shim.name for op in plan.sequence if isinstance(op, Dma)} == {
        FifoId("g0", Stem.IN): "shim_0_0", FifoId("g0", Stem.HOST): "shim_0_0", FifoId("g1", Stem.IN): "shim_0_0", FifoId("g1", Stem.HOST): "shim_0_0",
        FifoId("g2", Stem.IN): "shim_1_0", FifoId("g2", Stem.HOST): "shim_1_0"}
    assert decided(plan, Rule.SHIM_CHANNELS) == 2


# More groups than tiles, or more shim channels than the device has, no longer refuse: the design
# runs as segments (tests/compiler/test_segments.py).


class Residual(iron.Graph):
    """y = exp(x) + W @ (V @ x): the large MatVec's group reads the results of two groups, neither
    of which reads the other's (so neither can forward it)."""

    def __init__(self):
        rng = np.random.default_rng(5)
        self.v = iron.param(rng.standard_normal((256, 128)).astype(F32) / 16)
        self.w = iron.param(rng.standard_normal((512, 256)).astype(F32) / 16)

    def body(self, x):
        return Add.step(Exp.step(x[:512].reshape(512)), MatVec.step(self.w, MatVec.step(self.v, x[:128])))


class ResidualOfSplit(iron.Graph):
    """y = exp(x) + W @ (V @ x) with V large enough to split: the group of W @ . reads V's result
    and exp(x)'s, so V's group stays on one tile for W's to read its result through shared memory."""

    def __init__(self):
        rng = np.random.default_rng(6)
        self.v = iron.param(rng.standard_normal((512, 256)).astype(F32) / 16)
        self.w = iron.param(rng.standard_normal((256, 512)).astype(F32) / 16)

    def body(self, x):
        return Add.step(Exp.step(x), MatVec.step(self.w, MatVec.step(self.v, x)))


UNSPLIT_OWN = ("g2: not split", "3 FIFOs by DMA", "2 input channels")   # what each decision quotes
UNSPLIT_FOR_READER = ("g1: not split", "g2", "3 FIFOs by DMA", "2 input channels")


@pytest.mark.parametrize("graph, n, unsplit", [
    (Residual(), 512, [UNSPLIT_OWN]),                            # the big MatVec reads two groups' results
    (ResidualOfSplit(), 256, [UNSPLIT_FOR_READER, UNSPLIT_OWN]),  # and one of them would split too
])
def test_a_group_reading_two_groups_results_runs_unsplit_beside_its_producer(on_emulator, graph, n, unsplit):
    x = np.linspace(-1, 1, n).astype(F32)
    plan = plan_of(graph, x=((n,), F32))
    assert plan.segments == ()
    said = texts(plan, Rule.UNSPLIT_BESIDE_PRODUCER)
    assert len(said) == len(unsplit) and all(quoted(text, *names) for text, names in zip(said, unsplit))
    assert core_tiles(plan) == [("g0", "tile_0_2"), ("g1", "tile_0_3"), ("g2", "tile_0_4")]
    assert plan.fifo(FifoId("g1", Stem.OUT)).shared_memory and not plan.fifo(FifoId("g0", Stem.OUT)).shared_memory
    np.testing.assert_allclose(graph.compile(x=((n,), F32))(x), graph.reference(x), rtol=1e-4, atol=1e-4)


class TwoHeads(iron.Graph):
    """Two MatVecs of one 64 KiB param (streamed) by two vectors; `summed`: the second's group
    also adds the first's result, so it waits for it."""

    def __init__(self, summed: bool):
        self.k = iron.param(np.random.default_rng(8).standard_normal((256, 64)).astype(F32))
        self.summed = summed

    def body(self, a, b):
        p, q = MatVec.step(self.k, a), MatVec.step(self.k, b)
        return Add.step(q, p) if self.summed else (p, q)


def test_groups_streaming_one_matrix_share_its_blocks_through_one_mem_tile_broadcast(on_emulator):
    graph, spec = TwoHeads(summed=False), ((64,), F32)
    plan = plan_of(graph, a=spec, b=spec)
    assert decided(plan, Rule.SHARE_STREAMED_MATRIX) == 1
    assert [t.name for t in plan.fifo(FifoId("g0", Stem.W)).consumers] == ["tile_0_2", "tile_0_3"]
    assert [f.name for f in plan.fifos if f.name.group == "g1" and f.name.stem is Stem.W] == []
    assert [op.fifo for op in plan.sequence if isinstance(op, Dma) and op.buffer == "consts"] == [FifoId("g0", Stem.W, mem=True)]
    a, b = np.linspace(-1, 1, 64).astype(F32), np.linspace(1, -1, 64).astype(F32)
    for got, want in zip(graph.compile(a=spec, b=spec)(a, b), graph.reference(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_group_waiting_for_the_streaming_group_streams_its_own_blocks():
    plan = plan_of(TwoHeads(summed=True), a=((64,), F32), b=((64,), F32))
    assert [r for r, _ in plan.rules if r == Rule.SHARE_STREAMED_MATRIX] == []
    assert [f.name for f in plan.fifos if f.name.stem is Stem.W and not (f.name.at or f.name.mem)] == [FifoId("g0", Stem.W), FifoId("g1", Stem.W)]
