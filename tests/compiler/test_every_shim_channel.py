"""`stream_over_shim_channels` (iron/compiler/matrices.py): a memory-bound MatVec split by rows
(`split_matrix_over_tiles`) reads its rows through as many shim MM2S channels as the cost model
finds fastest, each lane's rows split on its own mem tile between its parts, the parts joined on
one mem tile for the group reading the result on the device. Checked on SmolLM2's shapes: the
plan facts (how many shim channels carry the weights, the typed Choice), the emulator against
reference() (exact for integers; float32 sums over blocks of rows agree to 1e-5 of the largest
magnitude), and that no estimate beats the roofline bound it prints."""

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.channels import bd_share, lane_ops
from iron.compiler.matrices import Later, Left
from iron.kernels import MatVec, ReLU, RMSNorm
from iron.models.blocks import Q4_1, Q8_0
from iron.models.smollm2_graph import SmolLM2Graph
from iron.plan import cost
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Dma, FifoRole, TileKind
from iron.plan.rules import Rule
from tests.compiler.designs import Layer, random_blocks

F32 = np.float32


class Projection(iron.Graph):
    """RMSNorm, the matrix times it, RMSNorm of the product: the product is read on the device."""

    def __init__(self, w):
        self.w = iron.param(w)
        self.g = iron.param(np.linspace(0.5, 1.5, w.shape[1], dtype=F32))
        self.h = iron.param(np.linspace(1.5, 0.5, w.shape[0], dtype=F32))

    def body(self, x):
        return RMSNorm.step(MatVec.step(self.w, RMSNorm.step(x, self.g, eps=1e-5)), self.h, eps=1e-5)


class Rectified(iron.Graph):
    """int8 rows times ReLU(x), summed in int32."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        return MatVec.step(self.w, ReLU.step(x), dtype=np.int32)


def weight_lanes(plan) -> list[tuple[str, str]]:
    """(FIFO, shim tile) of each FIFO carrying a matrix's rows from the host."""
    return [(f.name, f.producer.name) for f in plan.fifos if f.role is FifoRole.WEIGHTS and f.producer.kind is TileKind.SHIM]


def agree(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("device, shims", [
    ("npu2", ["shim_1_0", "shim_1_0", "shim_2_0", "shim_3_0", "shim_4_0", "shim_5_0"]),
    ("npu1", ["shim_1_0", "shim_1_0", "shim_2_0", "shim_3_0", "shim_0_0", "shim_2_0"])])
def test_a_float32_projection_reads_its_rows_through_six_shim_channels(on_emulator, device, shims):
    rng = np.random.default_rng(3)
    graph = Projection(rng.standard_normal((1536, 576)).astype(F32))   # SmolLM2's up projection, 3.5 MB
    compiled = graph.compile(x=((576,), F32), device=from_name(device))
    plan = compiled.plan
    assert weight_lanes(plan) == [(FifoId("g1", Stem.W, (k,), mem=True), shim) for k, shim in enumerate(shims)]
    choice = dict(plan.choices)["g1"]
    assert (choice.rule, choice.chosen) == (Rule.SPLIT_MATRIX_OVER_TILES, "6 parts through 6 shim channels")
    assert choice.chosen_ns < choice.rejected_ns
    assert [t.name for t in plan.fifo(FifoId("g0", Stem.OUT)).consumers] == [c.tile.name for c in plan.cores if c.group == "g1"]
    x = rng.standard_normal(576).astype(F32)
    agree(compiled(x), graph.reference(x))


def test_on_npu2_six_lanes_of_float32_rows_take_ddr_time():
    """Six lanes of 8 bytes per cycle at 1.8 GHz outrun DDR's 70 GB/s: the split's estimate is
    the matrix's bytes at DDR's bandwidth, where one lane would take the matrix at one channel's."""
    plan = Projection(np.zeros((1536, 576), F32)).compile(x=((576,), F32), device=from_name("npu2")).plan
    nbytes, gen = 1536 * 576 * 4, cost.GENERATIONS["npu2"]
    assert dict(plan.choices)["g1"].chosen_ns == pytest.approx(cost.ddr_ns(gen, nbytes))
    assert cost.ddr_ns(gen, nbytes) > cost.ns(from_name("npu2"), cost.dma_cycles(gen, nbytes // 6))


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_lane_of_rows_wider_than_a_buffer_descriptor_moves_in_one_dma(on_emulator, device):
    """SmolLM2's down projection: rows of 1536 float32 are more words than a BD dimension takes
    (1023), but a lane's 96 rows lie end to end, so each lane is one Dma of 192 x 768 words."""
    rng = np.random.default_rng(7)
    graph = Projection(rng.standard_normal((576, 1536)).astype(F32))
    compiled = graph.compile(x=((1536,), F32), device=from_name(device))
    lanes = [name for name, _ in weight_lanes(compiled.plan)]
    dmas = [(op.fifo, op.sizes, op.strides) for op in compiled.plan.sequence if isinstance(op, Dma) and op.fifo in lanes]
    assert dmas == [(name, (1, 1, 192, 768), (0, 0, 768, 1)) for name in lanes] and len(lanes) == 6
    x = rng.standard_normal(1536).astype(F32)
    agree(compiled(x), graph.reference(x))


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_int8_rows_split_over_shim_channels_equal_the_reference(on_emulator, device):
    rng = np.random.default_rng(4)
    graph = Rectified(rng.integers(-128, 128, (1536, 256)).astype(np.int8))   # 384 KiB
    compiled = graph.compile(x=((256,), np.int8), device=from_name(device))
    assert len(weight_lanes(compiled.plan)) > 1
    for seed in range(2):
        x = np.random.default_rng(seed).integers(-128, 128, 256).astype(np.int8)
        np.testing.assert_array_equal(compiled(x), graph.reference(x))


@pytest.mark.parametrize("device, fmt, lanes", [("npu2", Q4_1, 3), ("npu2", Q8_0, 6), ("npu1", Q4_1, 6),
                                                ("npu1", Q8_0, 6)])
def test_quantized_rows_expand_on_six_tiles_read_through_the_channels_the_cost_model_chooses(
        on_emulator, device, fmt, lanes):
    """SmolLM2's up projection as shipped: the blocks stream as stored through `lanes` shim channels
    and each of six tiles expands its rows (Dequant) before its MatVec. On npu2 Q4_1's expansion
    keeps the cores busier than three channels are, so more channels would not be faster."""
    rng = np.random.default_rng(5)
    graph = Layer(random_blocks(rng, 1536, 576, fmt), fmt)
    compiled = graph.compile(x=((576,), F32), device=from_name(device))
    plan = compiled.plan
    assert [name for name, _ in weight_lanes(plan)] == [FifoId("g1", Stem.W, (k,), mem=True) for k in range(lanes)]
    assert dict(plan.choices)["g1"].chosen == f"6 parts through {lanes} shim channels"
    assert plan.groups[1] == ("g1", ("Dequant#1", "MatVec#2", "SiLU#3"))
    x = rng.standard_normal(576).astype(F32)
    agree(compiled(x), graph.reference(x))


def test_lanes_whose_dma_ops_overflow_the_shim_bds_are_no_candidate():
    """SmolLM2's LM head as shipped (Q4_1, 49152 x 576) on npu2: three lanes of two parts each
    moved their 1024 blocks in 16 Dma ops (64 blocks per op), every BD of the shim tile, so the
    runtime sequence waited for the first lane before issuing the others and the lanes streamed
    one after another (1553 us per call, where one lane took 1137). Six lanes of one part each
    move their rows as one run of words, one Dma each, and the sequence issues all six before
    its one Wait (927 us)."""
    graph = Layer(random_blocks(np.random.default_rng(8), 49152, 576, Q4_1), Q4_1)
    plan = graph.compile(x=((576,), F32), device=from_name("npu2")).plan.configurations[0]
    assert weight_lanes(plan) == [(FifoId("g1", Stem.W, (k,), mem=True), shim) for k, shim in
                                  enumerate(("shim_1_0", "shim_1_0", "shim_2_0", "shim_3_0", "shim_4_0", "shim_5_0"))]
    assert dict(plan.choices)["g1"].chosen == "6 parts through 6 shim channels"
    ops = [(op.fifo, op.sizes) if isinstance(op, Dma) else ("wait", op.fifo) for op in plan.sequence]
    host = FifoId("g1", Stem.HOST)
    assert ops[2:] == [(FifoId("g1", Stem.W, (k,), mem=True), (1, 1, 768, 960)) for k in range(6)] + [
        (host, (1, 1, 64, 768)), ("wait", host)]


def test_a_lane_takes_one_dma_op_per_repeat_of_blocks_when_it_carries_several_parts():
    """The LM head's lanes (blocks of 8 rows of 90 words): two parts, 64 blocks per op; one part,
    one run of words; SmolLM2's float32 down projection (rows of 1536 words, wider than a BD
    dimension's 1023) in lanes of two parts of 2-row blocks: one op per row."""
    npu2 = from_name("npu2")
    assert (lane_ops(1024, 2, 8, 90, npu2), lane_ops(1024, 1, 8, 90, npu2), lane_ops(32, 3, 8, 90, npu2)) == (16, 1, 1)
    assert (lane_ops(48, 2, 2, 1536, npu2), lane_ops(96, 1, 1, 1536, npu2)) == (48 * 2 * 2, 1)
    assert bd_share(npu2) == 4   # 16 BDs per shim tile, 2 channels each way


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("fmt", [None, Q8_0, Q4_1], ids=["f32", "q8_0", "q4_1"])
def test_no_estimate_beats_the_roofline_bound_it_prints(on_emulator, device, fmt):
    """An estimate faster than the bytes from DDR at DDR's bandwidth would be physics broken."""
    rng = np.random.default_rng(6)
    if fmt is None:
        w = rng.standard_normal((576, 1536)).astype(F32)   # the down projection
        graph = Projection(w)
    else:
        w = random_blocks(rng, 576, 1536, fmt)
        graph = Layer(w, fmt)
    compiled = graph.compile(x=((1536,), F32), device=from_name(device))
    estimate = compiled.estimate(rng.standard_normal(1536).astype(F32))
    assert len(weight_lanes(compiled.plan)) > 1
    assert estimate.bound.ddr_bytes > w.nbytes   # the rows once, the vector, the norms' weights and the result
    assert estimate.device_ns >= estimate.bound.ns
    assert 0 < estimate.reached <= 1


@pytest.mark.parametrize("quantized", [True, False], ids=["as_shipped", "f32"])
def test_two_smollm2_layers_estimate_no_faster_than_their_bound(on_emulator, two_layers, quantized):
    """A whole decoding step of two SmolLM2 layers on npu2, segments and all: the estimate with
    vectorised kernels never beats the bytes it moves from DDR at DDR's bandwidth."""
    compiled = SmolLM2Graph(two_layers, quantized=quantized).compile(device=from_name("npu2"))
    estimate = compiled.estimate(pos=3, tok=7, end=0)
    assert estimate.device_ns >= estimate.bound.ns > 0
    assert 0 < estimate.reached <= 1


def test_a_chain_of_matrices_shares_the_shim_channels_by_the_square_roots_of_their_sizes():
    """SmolLM2's layer on npu2: of 9 shim channels left for its four projections (345600,
    207360, 1105920 and 552960 bytes beyond what their FIFOs take ahead, say), the first may
    take 9 * sqrt(345600) / (sum of the four square roots) = 1.86, so 2; a last one all left."""
    later = tuple(Later(b, 0.0, k + 1) for k, b in enumerate((207360, 1105920, 552960)))
    assert Left(shim_in=6, later=later).share(345600, lambda m: m.nbytes, 6) == 2   # 6 left to it, 3 counted for the later ones
    assert Left(shim_in=3, later=()).share(552960, lambda m: m.nbytes, 3) == 3
    assert Left(shim_in=1, later=later).share(0, lambda m: m.nbytes, 1) == 1   # at least one


def test_matrices_running_alongside_share_their_runs_share_by_their_sizes():
    """Two matrices of 4 MB alongside (neither reads the other's result), then one of 2 MB: the
    pair streams in 8 MB / (their channels) and shares 12 channels with the last by
    sqrt(8) : sqrt(2), 8 : 4, so the first takes half the pair's, 4; tiles alike by cycles."""
    pair = (Later(4 << 20, 400.0, 0), Later(2 << 20, 200.0, 1))
    assert Left(shim_in=10, later=pair).share(4 << 20, lambda m: m.nbytes, 10) == 4
    assert Left(shim_in=10, later=pair).share(400.0, lambda m: m.cycles, 10) == 4
    assert Left(shim_in=10, later=pair[1:]).share(400.0, lambda m: m.cycles, 11) == 7   # alone before the last: sqrt(4) : sqrt(2) of 12


def test_a_chain_of_matrices_shares_the_tiles_by_the_square_roots_of_their_work():
    """SmolLM2's quantized layer: a split's time is about its cycles on one tile over its parts,
    so the projections share the tiles by the square roots of their cycles, the larger taking
    more (g2 4, g9 3, g11 6, g13 6 tiles of the 19 left: tests/models/test_smollm2_graph.py)
    rather than the first taking all it could and leaving the larger ones after it too few."""
    later = tuple(Later(0, c, k + 1) for k, c in enumerate((4.0, 9.0)))
    assert Left(shim_in=0, later=later).share(1.0, lambda m: m.cycles, 4) == 1   # (4 + 2) / 6
    assert Left(shim_in=0, later=later[1:]).share(4.0, lambda m: m.cycles, 5) == 2   # (5 + 1) * 2 / 5 = 2.4
