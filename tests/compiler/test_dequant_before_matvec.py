"""`dequant_before_matvec` (iron/compiler/fuse.py, place.py, tiling.py): a MatVec whose matrix is
Dequant of a param keeps the param's GGUF blocks in DDR; the blocks stream to the tiles as
stored (split by rows, or over the whole-array grid in whole rows) and each block is expanded on
its tile just before the MatVec uses it. Checked on random but valid Q4_1 and Q8_0 blocks: the
fused groups, the rule's numbers in describe(), that no host buffer or FIFO holds the float32
matrix, and the emulator against reference(). The MatVec sums each row in float32 over blocks of
rows, so results agree with reference() to 1e-5 of their largest magnitude; the expansion itself
is bit-exact (tests/models/test_blocks.py, tests/runtime/test_native_kernels.py)."""

import shutil

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.fuse import (
    RULES,
    fuse,
    held_bytes,
)
from iron.ir import call_label
from iron.kernels import Dequant, MatVec
from iron.models.blocks import Q4_1, Q8_0
from iron.plan.describe import ddr_traffic
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import FifoRole, Loop, TileKind
from iron.plan.rules import Rule
from tests.compiler.designs import Head, Layer, random_blocks

F32 = np.float32


def agree(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def grouping(program):
    return [(g.name, [call_label(program, c) for c in g.calls], g.closed_by) for g in fuse(program)]


def test_the_expansion_starts_a_group_the_matvec_and_its_epilogue_join():
    program = Layer(random_blocks(np.random.default_rng(0), 32, 64, Q8_0), Q8_0).trace(x=((64,), F32))
    assert grouping(program) == [("g0", ["RMSNorm#0"], Rule.DEQUANT_BEFORE_MATVEC),
                                 ("g1", ["Dequant#1", "MatVec#2", "SiLU#3"], None)]
    order = [rule for rule, _ in RULES]
    assert order.index(Rule.DEQUANT_BEFORE_MATVEC) < order.index(Rule.MATRIX_OP_STARTS_GROUP)
    # the blocks (32 x 68 bytes) and the expanded matrix (32 x 64 float32) are on the tile whole, with x (the
    # RMSNorm's result, 256 bytes), the MatVec's and the SiLU's (128 bytes each)
    assert held_bytes(list(fuse(program)[1].calls)) == 2176 + 8192 + 256 + 2 * 128


def test_a_large_matrix_and_its_blocks_share_one_stream_object_on_the_tile():
    program = Layer(random_blocks(np.random.default_rng(0), 512, 512, Q8_0), Q8_0).trace(x=((512,), F32))
    calls = list(fuse(program)[1].calls)
    # 16384 bytes in proportion: blocks 278528 of 278528 + 1048576 bytes, the float32 matrix the rest
    assert held_bytes(calls) == 16384 * 278528 // (278528 + 1048576) + 16384 * 1048576 // (278528 + 1048576) + 3 * 2048


@pytest.mark.parametrize("device, fmt, parts, lanes, rows, blocks", [
    ("npu2", Q4_1, 6, 3, 11, 8), ("npu2", Q8_0, 6, 6, 8, 11), ("npu1", Q8_0, 6, 6, 8, 11)])
def test_a_quantized_layer_streams_its_blocks_split_by_rows(on_emulator, device, fmt, parts, lanes, rows, blocks):
    """Six parts (the most one mem tile joins), their blocks read through as many shim channels as
    the cost model finds fastest: Q4_1's expansion keeps the cores busier than three channels."""
    rng = np.random.default_rng(1)
    graph = Layer(random_blocks(rng, 528, 512, fmt), fmt)
    compiled = graph.compile(x=((512,), F32), device=from_name(device))
    plan, row = compiled.plan, 512 // 32 * fmt.nbytes
    assert plan.groups == (("g0", ("RMSNorm#0",)), ("g1", ("Dequant#1", "MatVec#2", "SiLU#3")))
    decided = [rule for rule, _ in plan.rules]
    assert [decided.count(r) for r in (Rule.DEQUANT_BEFORE_MATVEC, Rule.STREAM_LARGE_MATRIX,
                                       Rule.SPLIT_MATRIX_OVER_TILES)] == [2, 1, 1]
    assert plan.closed_by["g0"] is Rule.DEQUANT_BEFORE_MATVEC   # closing g0, and placing g1's expansion
    cores = [c for c in plan.cores if c.group == "g1"]
    assert len(cores) == parts and all(
        [i.count for i in c.program if isinstance(i, Loop)] == [blocks] for c in cores)   # a block of rows a turn
    expanded = [b.nbytes for b in plan.buffers if plan.holds[b.name] == "Dequant#1"]
    assert expanded == [rows * 2048] * parts   # each block of rows expanded on its tile, rows x 512 float32
    assert dict(plan.choices)["g1"].chosen == f"{parts} parts through {lanes} shim channels"
    weights = [f for f in plan.fifos if f.producer.kind is TileKind.SHIM and f.role is FifoRole.WEIGHTS]
    assert [(f.name, f.dtype, f.nbytes) for f in weights] == [
        (FifoId("g1", Stem.W, (k,), mem=True), np.uint8, parts // lanes * rows * row) for k in range(lanes)]
    assert plan.fifo(FifoId("g1", Stem.W, (0,))).nbytes == rows * row
    never_in_ddr(plan, 528 * 2048)
    assert ddr_traffic(plan).consts == 528 * row + 512 * 4   # the blocks once, and the RMSNorm's weights
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(512).astype(F32)
        agree(compiled(x), graph.reference(x))


@pytest.mark.parametrize("fmt, rows", [(Q4_1, 4096), (Q8_0, 2048)])
def test_a_quantized_head_spreads_over_the_array_in_whole_rows(on_emulator, fmt, rows):
    rng = np.random.default_rng(2)
    graph = Head(random_blocks(rng, rows, 256, fmt), fmt)
    compiled = graph.compile(x=((256,), F32), device=from_name("npu2"))
    plan, row = compiled.plan, 256 // 32 * fmt.nbytes
    decided, choice = [c for g, c in plan.choices if g == "g0"]
    m = int(choice.chosen.split()[0].removeprefix("m="))
    assert choice.rule is Rule.TILE_MATMUL_OVER_ARRAY and choice.chosen == f"m={m} k=256 n=1"
    assert (decided.what, decided.chosen) == ("grid or split", f"grid of 4 x 8 cores, m={m} k=256 n=1")
    assert decided.rejected_ns > decided.chosen_ns == choice.chosen_ns
    assert len(plan.cores) == 32 and rows % (32 * m) == 0
    expanded = [b for b in plan.buffers if b.name.endswith("_expanded")]
    assert [b.nbytes for b in expanded] == [m * 256 * 4] * 32   # m rows of 256 float32 on each core
    assert plan.fifo(FifoId("g0", Stem.A, (0, 0))).nbytes == m * row                # its m rows as stored
    never_in_ddr(plan, rows * 1024)
    assert ddr_traffic(plan).consts == rows * row
    x = rng.standard_normal(256).astype(F32)
    agree(compiled(x), graph.reference(x))


@pytest.mark.parametrize("fmt, device, k", [(Q8_0, "npu2", 2048), (Q4_1, "npu1", 4096)])
def test_a_quantized_row_longer_than_a_tile_expands_in_k_blocks_of_whole_blocks(on_emulator, fmt, device, k):
    """`expansion_k_blocks`: one row of 8192 weights (32 KiB expanded, and the vector as much)
    fits no tile whole, so the blocks stream in k-blocks of whole GGUF blocks (the fewest whose
    stored bytes are within a BD dimension's 1023 words: 2048 columns of Q8_0, 4096 of Q4_1),
    each expanded and summed in k-block order on the one core M = 1 allows."""
    rng = np.random.default_rng(5)
    graph = Head(random_blocks(rng, 1, 8192, fmt), fmt)
    compiled = graph.compile(x=((8192,), F32), device=from_name(device))
    plan, stored = compiled.plan, k // 32 * fmt.nbytes
    assert [(g, c.chosen) for g, c in plan.choices] == [("g0", f"m=1 k={k} n=1")]
    (core,) = plan.cores
    (rounds,) = core.program
    (more,) = [i for i in rounds.body if isinstance(i, Loop)]
    assert (rounds.count, more.count) == (1, 8192 // k - 1)     # k-blocks: the first, then the rest summed
    assert [(b.name, b.nbytes) for b in plan.buffers] == [("g0_r0c0_expanded", 4 * k)]
    assert plan.fifo(FifoId("g0", Stem.A, (0, 0))).nbytes == stored                  # k columns of whole GGUF blocks as stored
    rules = [rule for rule, _ in plan.rules]
    assert rules.count(Rule.TILE_MATMUL_OVER_ARRAY) == rules.count(Rule.DEQUANT_BEFORE_MATVEC) == 1
    x = rng.standard_normal(8192).astype(F32)
    agree(compiled(x), graph.reference(x))


def never_in_ddr(plan, expanded: int):
    """No host buffer, FIFO object or tile Buffer is as large as the float32 matrix."""
    assert all(b.nwords * 4 < expanded for b in plan.host_buffers)
    assert all(f.nbytes < expanded for f in plan.fifos) and all(b.nbytes < expanded for b in plan.buffers)


@pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")
@pytest.mark.parametrize("design, fmt, rows", [(Layer, Q4_1, 528), (Head, Q8_0, 2048)])
def test_the_fused_designs_run_dequant_cc_on_the_emulator(on_emulator, monkeypatch, design, fmt, rows):
    """The block Functions call the kernels' C++ (IRON_EMULATOR_KERNELS=native): Dequant's
    dequant_u8 on each block of rows as moved, then the MatVec on its expansion."""
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", "native")
    rng = np.random.default_rng(5)
    k = 512 if design is Layer else 256
    graph = design(random_blocks(rng, rows, k, fmt), fmt)
    x = rng.standard_normal(k).astype(F32)
    agree(graph.compile(x=((k,), F32), device=from_name("npu2"))(x), graph.reference(x))


class Unpack(iron.Kernel):
    """Dequant's shape rule, C ABI and numpy under another name: a user expansion kernel."""

    name = "unpack"
    index_map, reduces = Dequant.index_map, Dequant.reduces
    dtypes, attrs, c_attrs = Dequant.dtypes, Dequant.attrs, Dequant.c_attrs
    out_dtype, out_shape, sizes, abi_shapes = Dequant.out_dtype, Dequant.out_shape, Dequant.sizes, Dequant.abi_shapes
    FORMATS = Dequant.FORMATS
    compute = staticmethod(Dequant.compute)


def test_a_user_kernel_declaring_the_expansion_role_fuses_and_runs_as_dequant(on_emulator):
    class UserHead(Head):
        def body(self, x):
            return MatVec.step(Unpack.step(self.w, block_bytes=self.block_bytes), x)

    blocks = random_blocks(np.random.default_rng(3), 528, 512, Q4_1)
    library, user = Head(blocks, Q4_1), UserHead(blocks, Q4_1)
    compiled = [g.compile(x=((512,), F32), device=from_name("npu2")) for g in (library, user)]
    assert Rule.DEQUANT_BEFORE_MATVEC in dict(compiled[1].plan.rules)
    assert list(compiled[0].plan.rules) == [(rule, what.replace("Unpack", "Dequant"))
                                            for rule, what in compiled[1].plan.rules]
    x = np.random.default_rng(4).standard_normal(512).astype(F32)
    np.testing.assert_array_equal(compiled[1](x), compiled[0](x))
    agree(compiled[1](x), library.reference(x))


# ---- stream_expansion_units: a Dequant alone over blocks larger than a tile -------------------------

class Expand(iron.Graph):
    """The weights of a GGUF matrix, expanded by Dequant alone and returned."""

    def __init__(self, blocks, fmt):
        self.w, self.block_bytes = iron.weight(blocks), fmt.nbytes

    def body(self):
        return Dequant.step(self.w, block_bytes=self.block_bytes)


EXPANDED = [
    (Q8_0, 2048, 2048, "npu2", "2176 elements streamed in blocks of 64 units of 34 elements, each expanded alone "
     "(stream_expansion_units) over 32 tiles (4 rows x 8 columns of cores), 64 blocks per core"),
    (Q8_0, 2048, 2048, "npu1", "2176 elements streamed in blocks of 64 units of 34 elements, each expanded alone "
     "(stream_expansion_units) over 16 tiles (4 rows x 4 columns of cores), 128 blocks per core"),
    (Q4_1, 2047, 2048, "npu2", "1280 elements streamed in blocks of 178 units of 20 elements, each expanded alone "
     "(stream_expansion_units) over 32 tiles (4 rows x 8 columns of cores), 23 blocks per core"),
    # one row of 65536 weights (256 KiB in float32) is wider than a tile: its units stream all the same
    (Q8_0, 3, 65536, "npu2", "69632 elements streamed in blocks of 96 units of 34 elements, each expanded alone "
     "(stream_expansion_units) over 32 tiles (4 rows x 8 columns of cores), 2 blocks per core"),
]


@pytest.mark.parametrize("fmt, rows, k, device, text", EXPANDED, ids=["q8-npu2", "q8-npu1", "q4-2047", "q8-one-wide-row"])
def test_a_dequant_alone_larger_than_a_tile_streams_in_units_of_gguf_blocks(on_emulator, fmt, rows, k, device, text):
    """`stream_expansion_units`: Dequant of a (2048, 2048) Q8_0 weight (16 MiB expanded) was
    DoesNotFit on one tile; each GGUF block expands alone, so the rows, lying end to end, stream
    in blocks of whole GGUF blocks over the array, bit-exact with reference()."""
    graph = Expand(random_blocks(np.random.default_rng(6), rows, k, fmt), fmt)
    body = graph.compile(device=from_name(device))
    assert [what for rule, what in body.plan.rules if rule == Rule.STREAM_ROW_BLOCKS] == [
        f"g0: Dequant over {rows} rows of {text}"]
    got = body()
    assert got.shape == (rows, k) and got.dtype == F32
    np.testing.assert_array_equal(got, graph.reference())
