"""Tiling rules, shown by what describe() says each chose and by the emulator agreeing with
reference(): `tile_matmul_over_array` (a large MatMul or MatVec over a grid of cores, its
operands streamed in k-blocks through mem tiles, its result joined per column) and
`split_matrix_over_tiles` keeping the MatVecs one mem tile's split handles; `stream_elementwise`
(elementwise calls over tensors larger than a tile, in blocks over many tiles); a row reduction
too wide for a tile refused with the numbers.

Integers are exact; float32 within rtol 1e-4 / atol 1e-4 (k-blocks are summed in another order
than numpy's), bfloat16 within two bf16 ulps."""
from itertools import groupby

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried, Scratchpad
from iron.compiler.compile import compile_program
from iron.errors import DoesNotFit
from iron.kernels import Accumulate, Add, MatMul, MatVec, RMSNorm, Scale, SiLU, Softmax
from iron.plan.describe import describe
from iron.plan.fifos import FifoId, Stem
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import Choice, Dma, Loop, TileKind, Wait
from iron.plan.rules import NoGrid, PaddedGrid, Rule, SharedSides, TooLarge, Unpadded
from tests.compiler.designs import Product, ProductOfProducts, Projection, Sum, operands
from tests.plan.test_mlir import op_names
from tests.quotes import quoted

F32 = {"rtol": 1e-4, "atol": 1e-4}
BF16 = {"rtol": 2e-2, "atol": 2e-2}
BF16_DTYPE = iron.bfloat16


def compiled(m, k, n, dtype, out=None, device="npu2"):
    a, b = operands(m, k, n, dtype)
    graph = Product(b, out)
    return graph, graph.compile(a=a, device=from_name(device)), a


def rule(plan, name):
    return [what for rule, what in plan.rules if rule == name]


def grid_of(plan, group: str = "g0") -> tuple:
    """What a grid's Plan says of it: (rows, columns of cores, (m, k, n) blocks, output blocks per
    core, k-blocks each, the dtype it sums in), read from its cores' programs and core (0, 0)'s
    first k-block's kernel call."""
    cores = [c for c in plan.cores if c.group == group]
    (outer,) = cores[0].program
    inner = [item.count for item in outer.body if isinstance(item, Loop)]
    (first,) = [f for f in plan.functions if f.name == f"{group}_r0c0_first"]
    step = next(s for s in first.steps if s.kernel.__name__ in ("MatMul", "MatVec"))
    sizes = tuple(int(a.value) for a in step.args[3:6 if step.kernel.__name__ == "MatMul" else 5])
    return (len({c.tile.row for c in cores}), len({c.tile.col for c in cores}), sizes, outer.count,
            1 + sum(inner), step.out)


def elements(fifo) -> int:
    return fifo.nbytes // fifo.dtype.itemsize


def streamed(plan, group: str = "g0") -> tuple[int, int, int, int]:
    """(rows, columns) of a stream's cores, its first input's block in elements and the blocks
    each core takes (its Loop's count)."""
    cores = [c for c in plan.cores if c.group == group]
    (loop,) = [item for item in cores[0].program if isinstance(item, Loop)]
    return (len({c.tile.row for c in cores}), len({c.tile.col for c in cores}),
            elements(plan.fifo(FifoId(group, Stem.X, (0, 0, 0)))), loop.count)


def compute_tiles(plan):
    return sorted({c.tile for c in plan.cores if c.tile.kind is TileKind.COMPUTE}, key=lambda t: (t.col, t.row))


pytestmark = pytest.mark.usefixtures("on_emulator")


def test_matmul_512_float32_over_32_tiles_equals_reference():
    graph, body, a = compiled(512, 512, 512, np.float32)
    assert grid_of(body.plan) == (4, 8, (64, 8, 64), 2, 64, np.dtype(np.float32))
    # by estimated time: B's column blocks go again for each row block, so m=64 moves 2 MB less from DDR
    # than the 64 calls of m=32 k=32 n=64 (docs/platform.md section 11)
    ddr = pytest.approx(4 * 2 ** 20 / 70)   # 4 MiB to and from DDR at 70 GB/s
    assert body.plan.choices == (
        ("g0", Choice(Rule.TILE_MATMUL_OVER_ARRAY, "blocks", "m=64 k=8 n=64", ddr, "m=128 k=8 n=32", ddr)),)
    assert "  g0: tile_matmul_over_array: blocks chosen by estimated time" in describe(body.plan)
    assert len(compute_tiles(body.plan)) == 32
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


def test_matmul_512_int8_into_int32_is_exact():
    graph, body, a = compiled(512, 512, 512, np.int8, np.int32)
    assert grid_of(body.plan) == (4, 8, (64, 32, 64), 2, 16, np.dtype(np.int32))
    got = body(a=a)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, graph.reference(a=a))


def test_matmul_int16_wraps_as_the_reference_does():
    graph, body, a = compiled(128, 256, 128, np.int16)
    assert "summed in int16" in rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0]
    np.testing.assert_array_equal(body(a=a), graph.reference(a=a))


def test_matmul_bfloat16_sums_in_float32_and_rounds_once():
    graph, body, a = compiled(128, 256, 128, iron.bfloat16)
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0].endswith("summed in float32")
    assert {b.dtype for b in body.plan.buffers} == {np.dtype(np.float32)}
    got = body(a=a)
    assert got.dtype == iron.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), graph.reference(a=a).astype(np.float32), **BF16)


def test_matmul_2048_bfloat16_compiles_to_plan_and_mlir():
    _, body, _ = compiled(2048, 2048, 2048, iron.bfloat16)
    assert grid_of(body.plan) == (4, 8, (64, 16, 64), 32, 128, np.dtype(np.float32))
    mlir = print_mlir(body.plan)
    assert mlir.count("aie.core(") == 32
    assert "aie.objectfifo @g0_a0(%mem_0_1, {%tile_0_2, %tile_1_2, %tile_2_2, %tile_3_2, %tile_4_2, " \
           "%tile_5_2, %tile_6_2, %tile_7_2}, 2 : i32) : !aie.objectfifo<memref<1024xbf16>>" in mlir
    assert "aie.objectfifo.link [@g0_part0_0, @g0_part1_0, @g0_part2_0, @g0_part3_0] -> [@g0_host0] " \
           "([0, 4096, 8192, 12288] [])" in mlir


def test_sizes_not_multiples_of_a_power_of_two_take_dividing_blocks():
    graph, body, a = compiled(100, 60, 72, np.float32)
    assert grid_of(body.plan) == (4, 8, (25, 60, 9), 1, 1, np.dtype(np.float32))
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


def test_matmul_on_npu1_uses_its_16_tiles():
    graph, body, a = compiled(256, 256, 256, np.float32, device="npu1")
    assert len(compute_tiles(body.plan)) == 16
    assert grid_of(body.plan)[:2] == (4, 4)
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


def test_a_grid_short_of_the_free_cores_says_why_no_larger_grid_divides():
    """Blocks divide their sides, so an unpadded 300 x 300 takes 4 x 6 cores; describe() says so
    rather than taking fewer silently. (a @ b) @ (c @ d) with c @ d returned too: read elsewhere,
    c @ d may not lie padded alike with a @ b, so the last product reads them unpadded (pad_to_block's
    facts say why each product is not padded)."""
    a, b = operands(300, 300, 300, np.float32)
    c, d = operands(300, 300, 300, np.float32, seed=3)
    a, b, c, d = a / 17, b / 17, c / 17, d / 17
    graph = ProductOfProducts(b, d, second_returned=True)
    body = graph.compile(a=a, c=c, device=from_name("npu2"))
    # a @ b passes through a DDR buffer to the last product in its configuration (through_between_groups),
    # c @ d is returned: the two products are not alike, and c @ d crosses the cut
    assert (len(body.plan.configurations), body.plan.repeat) == (2, None)
    assert rule(body.plan, Rule.COLUMNS_FOR_LATER_GROUPS) == [
        "g0: at most 7 of the 8 free whole columns, one left to each later group larger than a tile (g1)"]
    spread = compile_program(graph.trace(a=(a.shape, a.dtype), c=(c.shape, c.dtype)), from_name("npu2"), over_time=False)
    assert rule(spread, Rule.PAD_TO_BLOCK) == [   # a @ b reaches the last product through DDR (through_between_groups)
        Unpadded("g0", "MatMul#0", "through.MatMul#0 is a state read whole by MatMul(through.MatMul#0, MatMul(c, d)) too"),
        Unpadded("g1", "MatMul#1", "its result is read by MatMul(through.MatMul#0, MatMul(c, d)), which also reads a "
                 "tensor that may not be padded: through.MatMul#0 is read elsewhere too"),
        Unpadded("g2", "MatMul#2", "through.MatMul#0 is read elsewhere too")]
    assert rule(spread, Rule.TILE_MATMUL_OVER_ARRAY)[2].endswith(
        "summed in float32; not more cores: no grid of more than 24 of the 32 free cores has rows of cores "
        "dividing M = 300 and columns dividing N = 300, and blocks divide their sides (no remainder block; "
        "padded only as pad_to_block says)")
    for got, want in zip(body(a=a, c=c), graph.reference(a=a, c=c), strict=True):
        np.testing.assert_allclose(got, want, **F32)


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_matmul_with_no_dividing_blocks_pad_to_block_does_not_pad_does_not_fit(device, tmp_path, monkeypatch):
    """509 is prime: no block of it but 1 divides it, which cannot move in one DMA op per round,
    and B and C do not fit one tile; products a MatMul reads, one of them returned too, are not
    padded (pad_shared_input does not lay them out alike): DoesNotFit before any tile's buffers
    are counted, naming the call and the padding, nothing cached."""
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    spec = ((509, 509), np.float32)
    ones = np.ones((509, 509), np.float32)
    with pytest.raises(DoesNotFit) as err:
        ProductOfProducts(ones, ones, second_returned=True).compile(a=spec, c=spec, device=from_name(device))
    fact = err.value.fact
    shared = fact.alone.unpadded   # pad_shared_input refused the products MatMul#2 reads as A and B
    assert fact == TooLarge("ProductOfProducts", device, ("MatMul#0",), "g0", NoGrid(
        "ProductOfProducts", "MatMul#0", (509, 509, 509), "float32", 2 * 509 * 509 * 4, 64512, device, 256, (1, 1, 1),
        (512, 512, 512), shared))
    assert isinstance(shared, SharedSides) and (shared.calls, shared.pairs) == (("MatMul#0", "MatMul#1"), ("MatMul#2",))
    assert str(err.value) == str(fact)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_small_matmul_stays_on_one_tile():
    _, body, _ = compiled(16, 16, 16, np.float32)
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == []
    assert len(compute_tiles(body.plan)) == 1


def test_matvec_4096_over_32_tiles_equals_reference():
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((4096, 4096)).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
    graph = Projection(w)
    body = graph.compile(x=x, device=from_name("npu2"))
    assert grid_of(body.plan) == (4, 8, (128, 32), 1, 128, np.dtype(np.float32))
    np.testing.assert_allclose(body(x=x), graph.reference(x=x), **F32)


class Rows(iron.Kernel):
    """A user matrix kernel of MatVec's shapes: out = W @ x, its own (numpy) compute."""

    index_map = "mk,k->m"
    name, arity = "rows_test", 2
    out_shape, sizes, abi_shapes = MatVec.out_shape, MatVec.sizes, MatVec.abi_shapes
    compute = staticmethod(np.matmul)


class UserProjection(Projection):
    def body(self, x):
        return Rows.step(self.w, x)


def more_steps(plan):
    """(kernel, sizes) of each step of core (0, 0)'s Function adding a further k-block."""
    (more,) = [f for f in plan.functions if f.name == "g0_r0c0_more"]
    return [(step.kernel.__name__, tuple(arg.value for arg in step.args[3:])) for step in more.steps]


def test_each_further_k_block_is_one_matmul_accumulate_call():
    """A library MatMul or MatVec adds each further k-block's product to its sum in one call (a
    MatVec's x as B of one column), with no product buffer; a user matrix kernel computes the
    product into a buffer and an Accumulate adds it."""
    _, body, _ = compiled(512, 512, 512, np.int8, np.int32)
    assert more_steps(body.plan) == [("MatMulAccumulate", (64, 32, 64))]
    assert not [b for b in body.plan.buffers if b.name.endswith("_product")]
    w = np.ones((1024, 1024), np.float32)
    vector = Projection(w).compile(x=((1024,), np.float32), device=from_name("npu2"))
    assert more_steps(vector.plan) == [("MatMulAccumulate", (32, 128, 1))]
    user = UserProjection(w).compile(x=((1024,), np.float32), device=from_name("npu2"))
    assert more_steps(user.plan) == [("Rows", (32, 128)), ("Accumulate", ())]
    x = np.arange(1024, dtype=np.float32) / 1024
    np.testing.assert_allclose(user(x=x), w @ x, **F32)


def test_matvec_int8_into_int32_over_the_array_is_exact():
    w, x = operands(1024, 1024, 1, np.int8)
    graph = Projection(w, np.int32)
    body = graph.compile(x=x[:, 0], device=from_name("npu2"))
    assert len(compute_tiles(body.plan)) == 32
    np.testing.assert_array_equal(body(x=x[:, 0]), graph.reference(x=x[:, 0]))


LONG_ROWS = [
    (64, 20000, np.float32, None, "npu2",
     "float32 -> float32 over 32 tiles (4 rows x 8 columns of cores): blocks m=2 k=250 n=1 (each divides its side: "
     "no padding), 1 output blocks per core, 80 k-blocks each (80 kernel calls per core), summed in float32"),
    (64, 20000, np.float32, None, "npu1",
     "float32 -> float32 over 16 tiles (4 rows x 4 columns of cores): blocks m=4 k=250 n=1 (each divides its side: "
     "no padding), 1 output blocks per core, 80 k-blocks each (80 kernel calls per core), summed in float32"),
    (64, 20000, np.int8, np.int32, "npu2",
     "int8 -> int32 over 32 tiles (4 rows x 8 columns of cores): blocks m=2 k=200 n=1 (each divides its side: "
     "no padding), 1 output blocks per core, 100 k-blocks each (100 kernel calls per core), summed in int32"),
    # rows over VECTOR_ROW_BYTES: at 20000 bytes a row, npu1's split is estimated as fast as its grid, and taken
    (64, 24000, np.int8, np.int32, "npu1",
     "int8 -> int32 over 16 tiles (4 rows x 4 columns of cores): blocks m=4 k=240 n=1 (each divides its side: "
     "no padding), 1 output blocks per core, 100 k-blocks each (100 kernel calls per core), summed in int32"),
    (64, 20000, BF16_DTYPE, None, "npu2",
     "bfloat16 -> bfloat16 over 32 tiles (4 rows x 8 columns of cores): blocks m=2 k=250 n=1 (each divides its "
     "side: no padding), 1 output blocks per core, 80 k-blocks each (80 kernel calls per core), summed in float32"),
    (64, 20000, BF16_DTYPE, None, "npu1",
     "bfloat16 -> bfloat16 over 16 tiles (4 rows x 4 columns of cores): blocks m=4 k=250 n=1 (each divides its "
     "side: no padding), 1 output blocks per core, 80 k-blocks each (80 kernel calls per core), summed in float32"),
    # 16 MiB of rows, 32 times a mem tile: each column's mem tile holds two k-blocks of its rows at a time
    (64, 65536, np.float32, None, "npu2",
     "float32 -> float32 over 32 tiles (4 rows x 8 columns of cores): blocks m=2 k=256 n=1 (each divides its side: "
     "no padding), 1 output blocks per core, 256 k-blocks each (256 kernel calls per core), summed in float32"),
]
LONG_F32 = {"rtol": 1e-4, "atol": 2e-3}   # sums of up to 65536 products, k-block by k-block in order


@pytest.mark.parametrize("m, k, dtype, out, device, text", LONG_ROWS,
                         ids=["f32-npu2", "f32-npu1", "int8-npu2", "int8-npu1", "bf16-npu2", "bf16-npu1", "f32-65536"])
def test_stream_k_blocks_a_matvec_whose_rows_exceed_a_tile_and_a_mem_tile(m, k, dtype, out, device, text):
    """`stream_k_blocks`: a MatVec whose rows are longer than a tile holds (and whose matrix is
    larger than a mem tile) streams K in up to 1023 k-blocks per row-block, each core summing its
    rows' partial products k-block by k-block in order (integers exact)."""
    rng = np.random.default_rng(3)
    if dtype == np.int8:
        w, x = rng.integers(-128, 128, (m, k)).astype(dtype), rng.integers(-128, 128, k).astype(dtype)
    else:
        w, x = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal(k).astype(dtype)
    graph = Projection(w, out)
    body = graph.compile(x=x, device=from_name(device))
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == [f"g0: MatVec ({m}, {k}) x ({k},) {text}"]
    if dtype == np.int8:
        np.testing.assert_array_equal(body(x=x), graph.reference(x=x))
    else:
        got, want = (np.asarray(v, np.float32) for v in (body(x=x), graph.reference(x=x)))
        np.testing.assert_allclose(got, want, **(BF16 if dtype == BF16_DTYPE else LONG_F32))


ONE_ROW_NOT_MORE = ("; not more cores: no grid of more than 1 of the {free} free cores has cores dividing M = 1 (each "
                    "core its own rows), and blocks divide their sides (no remainder block; padded only as "
                    "pad_to_block says); one row is not split by rows, and K is not split over cores: each core "
                    "would need its own K-range of both the row and the vector, and their partial sums added across "
                    "cores, which no rule does")
ONE_ROW = [
    (np.float32, None, "npu2", "float32 -> float32 over 1 tiles", 32),
    (np.float32, None, "npu1", "float32 -> float32 over 1 tiles", 16),
    (np.int8, np.int32, "npu2", "int8 -> int32 over 1 tiles", 32),
    (BF16_DTYPE, np.float32, "npu2", "bfloat16 -> float32 over 1 tiles", 32),
]


@pytest.mark.parametrize("dtype, out, device, text, free", ONE_ROW, ids=["f32-npu2", "f32-npu1", "int8", "bf16-f32"])
def test_stream_k_blocks_one_row_longer_than_a_tile_pads_k_and_says_why_one_core(dtype, out, device, text, free):
    """A MatVec of one row of 65537 elements (a prime K, 256 KiB in float32) is tiled by its row
    (`large`: a row over VECTOR_ROW_BYTES), K padded with zeros to 65568 (`pad_to_block`) and
    streamed in 683 k-blocks of 96 on the one core M = 1 allows, which describe() says."""
    rng = np.random.default_rng(4)
    if dtype == np.int8:
        w, x = rng.integers(-128, 128, (1, 65537)).astype(dtype), rng.integers(-128, 128, 65537).astype(dtype)
    else:
        w, x = rng.standard_normal((1, 65537)).astype(dtype), rng.standard_normal(65537).astype(dtype)
    graph = Projection(w, out)
    body = graph.compile(x=x, device=from_name(device))
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == [
        f"g0: MatVec (1, 65537) x (65537,) {text} (1 rows x 1 columns of cores): blocks m=1 k=96 n=1 (pad_to_block: "
        "padded with zeros to M = 1, K = 65568), 1 output blocks per core, 683 k-blocks each (683 kernel calls per "
        f"core), summed in {np.dtype(out or dtype).name}" + ONE_ROW_NOT_MORE.format(free=free)]
    if dtype == np.int8:
        np.testing.assert_array_equal(body(x=x), graph.reference(x=x))
    else:
        np.testing.assert_allclose(body(x=x), graph.reference(x=x), **LONG_F32)


def test_a_matvec_whose_split_is_estimated_faster_keeps_it():
    # 1.7 MiB: six parts through six shim channels read it at DDR's pace, as a grid's eight columns do,
    # and the split's last results leave sooner
    w, x = operands(768, 576, 1, np.float32)
    graph = Projection(w)
    body = graph.compile(x=x[:, 0], device=from_name("npu2"))
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == []
    assert rule(body.plan, Rule.SPLIT_MATRIX_OVER_TILES) == [
        "g0: w (768, 576) float32 (1769472 bytes) split by rows over 6 tiles"]
    decided, _ = [c for _, c in body.plan.choices]
    assert decided == Choice(Rule.SPLIT_MATRIX_OVER_TILES, "grid or split", "split into 6 parts through 6 shim channels",
                             pytest.approx(25278.2, abs=0.1), "grid of 4 x 8 cores, m=24 k=192 n=1",
                             pytest.approx(25355.0, abs=0.1))
    np.testing.assert_allclose(body(x=x[:, 0]), graph.reference(x=x[:, 0]), rtol=1e-4, atol=1e-4)


# ---- tile_before_state_write ----------------------------------------------------------------------

class ProductIntoState(iron.Graph):
    """acc += W @ x (Accumulate) or acc = W @ x + b (Add of a bias out= the state), W (300, 4097)
    and x params: a MatVec that tiles, read by a call writing a state."""

    def __init__(self, dtype, out, bias=False):
        rng = np.random.default_rng(12)
        made = (lambda shape: rng.integers(-128, 128, shape).astype(dtype)) if dtype == np.int8 else \
            (lambda shape: rng.standard_normal(shape).astype(dtype))
        self.w, self.x = iron.param(made((300, 4097))), iron.param(made(4097))
        self.b = iron.param(rng.integers(-1000, 1000, 300).astype(out)) if bias else None
        self.acc = iron.state((300,), out, name="acc")
        self.out = out

    def body(self, *, step: Carried[np.int32]):
        y = MatVec.step(self.w, self.x, dtype=self.out)
        if self.b is None:
            Accumulate.step(y, out=self.acc)
        else:
            Add.step(y, self.b, out=self.acc)
        return iron.carry(step=step + 1)


THROUGH_LINE = ("MatVec#0 (300, 4097) writes its result to through.MatVec#0, a DDR buffer of the compiler's, over the "
                "array (tile_matmul_over_array); {reader}#1 reads it back after the grid's writes")
INT8_NPU2 = ("int8 -> int32 over 20 tiles (4 rows x 5 columns of cores): blocks m=15 k=172 n=1 (pad_to_block: padded "
             "with zeros to M = 300, K = 4128), 1 output blocks per core, 24 k-blocks each (24 kernel calls per core), "
             "summed in int32; not more cores: no grid of more than 20 of the 30 free cores")
INTO_STATE = [
    (np.int8, np.int32, False, "npu2", INT8_NPU2),
    (np.int8, np.int32, False, "npu1",
     "int8 -> int32 over 12 tiles (3 rows x 4 columns of cores): blocks m=25 k=172 n=1 (pad_to_block: padded with "
     "zeros to M = 300, K = 4128), 1 output blocks per core, 24 k-blocks each (24 kernel calls per core), summed in "
     "int32; not more cores: no grid of more than 12 of the 15 free cores"),
    (np.float32, np.float32, False, "npu2",
     "float32 -> float32 over 20 tiles (4 rows x 5 columns of cores): blocks m=15 k=241 n=1 (each divides its side: "
     "no padding), 1 output blocks per core, 17 k-blocks each (17 kernel calls per core), summed in float32; not "
     "more cores: no grid of more than 20 of the 30 free cores"),
    (np.int8, np.int32, True, "npu2", INT8_NPU2),
]


@pytest.mark.parametrize("dtype, out, bias, device, text", INTO_STATE, ids=["int8-npu2", "int8-npu1", "f32", "bias"])
def test_a_matvec_read_by_a_state_write_tiles_through_ddr_and_equals_the_reference(dtype, out, bias, device, text):
    """`tile_before_state_write` (R8): fused with the Accumulate into its state the MatVec ran on
    one tile; now it writes a DDR buffer of the compiler's over the array and the state write
    reads it back, and over 3 calls the state equals reference() (integers exactly)."""
    graph = ProductIntoState(dtype, out, bias)
    body = graph.compile(device=from_name(device))
    reader = "Add" if bias else "Accumulate"
    assert rule(body.plan, Rule.TILE_BEFORE_STATE_WRITE) == [THROUGH_LINE.format(reader=reader)]
    (grid,) = rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)
    assert grid.startswith(f"g0: MatVec (300, 4097) x (4097,) {text} has cores dividing M = 300")
    assert body.plan.groups == (("g0", ("MatVec#0",)), ("g1", (f"{reader}#1",)))
    for step in range(3):
        body(step=step)
        graph.reference(step=step)
    if dtype == np.int8:
        np.testing.assert_array_equal(body.read("acc"), graph.read("acc"))
        product = graph.w.array.astype(np.int32) @ graph.x.array.astype(np.int32)
        np.testing.assert_array_equal(graph.read("acc"), product + graph.b.array if bias else 3 * product)
    else:
        np.testing.assert_allclose(body.read("acc"), graph.read("acc"), **LONG_F32)


def test_a_matvec_through_ddr_pads_k_alone_and_stays_within_the_mlir_subset():
    body = ProductIntoState(np.int8, np.int32).compile(device=from_name("npu2"))
    assert rule(body.plan, Rule.PAD_K_ONLY) == [PaddedGrid("g0", "MatVec#0", (300, 4097, 1), (300, 4128, 1), Rule.PAD_K_ONLY)]
    through = next(p for p in body.plan.placements if p.name == "through.MatVec#0")
    assert (through.kind.value, through.buffer, through.shape, through.padded) == ("cut", "outputs", (300,), None)
    assert "through.MatVec#0" not in {p.name for p in body.plan.placements if p.kind.value == "state"}
    assert set(op_names(print_mlir(body.plan))) <= ALLOWED_OPS


def test_a_matvec_through_ddr_runs_as_a_carried_loop_at_depth_two():
    graph = ProductIntoState(np.float32, np.float32)
    body = graph.compile(device=from_name("npu2"))
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(4, step=0)) == [0, 1, 2, 3]
    assert dict(loop.carry) == {"step": 5} and loop.transitions == 5
    for step in range(5):   # the first call and 4 more
        graph.reference(step=step)
    np.testing.assert_allclose(body.read("acc"), graph.read("acc"), **LONG_F32)


# ---- stream_elementwise and rows too wide ----------------------------------------------------------




class Swish(iron.Graph):
    def body(self, x):
        return SiLU.step(x)


class Gate(iron.Graph):
    """0.5 * SiLU(x + w) for a weight w: three elementwise calls streamed as one group."""

    def __init__(self, n):
        self.w = iron.weight(np.linspace(-1, 1, n, dtype=np.float32))

    def body(self, x):
        return Scale.step(SiLU.step(Add.step(x, self.w)), factor=0.5)


def test_add_over_a_million_float32_streams_over_16_tiles():
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal(1 << 20).astype(np.float32) for _ in range(2))
    graph = Sum()
    body = graph.compile(x=x, y=y, device=from_name("npu2"))
    assert streamed(body.plan) == (2, 8, 2048, 32)
    np.testing.assert_array_equal(body(x=x, y=y), graph.reference(x=x, y=y))


class SumThenProject(iron.Graph):
    """A streamed Add whose result another group (a MatVec over its first 1024 elements) reads."""

    def __init__(self):
        self.w = iron.param(np.linspace(-1, 1, 64 * 1024, dtype=np.float32).reshape(64, 1024))

    def body(self, x, y):
        return MatVec.step(self.w, Add.step(x, y)[:1024])


def test_a_streamed_batch_another_group_reads_is_cut_after_and_streams_through_ddr():
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(1 << 20).astype(np.float32) for _ in range(2))
    graph = SumThenProject()
    body = graph.compile(x=x, y=y, device=from_name("npu2"))
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g1: 4194304 bytes cross (Add#0)"]
    assert streamed(body.plan.segments[0]) == (2, 8, 2048, 32)
    assert len(body.plan.configurations) == 2
    np.testing.assert_allclose(body(x=x, y=y), graph.reference(x=x, y=y), **F32)


def test_elementwise_calls_stream_together_two_inputs_on_two_rows():
    graph, x = Gate(1 << 18), np.linspace(-4, 4, 1 << 18, dtype=np.float32)
    body = graph.compile(x=x, device=from_name("npu2"))
    assert body.plan.groups == (("g0", ("Add#0", "SiLU#1", "Scale#2")),)
    assert streamed(body.plan) == (2, 8, 1024, 16)   # a mem tile splits 2 inputs to 2 cores: 5 of its 6 outputs
    np.testing.assert_allclose(body(x=x), graph.reference(x=x), **F32)


def test_one_input_streams_over_every_tile():
    x = np.linspace(-4, 4, 1 << 18, dtype=np.float32)
    body = Swish().compile(x=x, device=from_name("npu2"))
    assert streamed(body.plan) == (4, 8, 2048, 4)
    np.testing.assert_allclose(body(x=x), Swish().reference(x=x), **F32)


def test_a_huge_stream_moves_runs_of_rounds_per_dma_op_waiting_every_four_runs():
    """1e9 int8: 15625 rounds per column in 16 runs of at most 977 (a shim BD dimension holds
    1023), one Dma op per column, input or result and run; a Wait on all of them after every 4th
    run keeps each shim within its 16 BD ids (3 ops per run); the last Waits are the results'."""
    n = 10 ** 9
    body = Sum().compile(x=((n,), np.int8), y=((n,), np.int8), device=from_name("npu2"))
    ops = body.plan.sequence
    assert streamed(body.plan) == (2, 8, 4000, 15625)
    runs = [(o.offset, o.sizes, o.strides) for o in ops if isinstance(o, Dma) and o.fifo == FifoId("g0", Stem.X, (0, 1), mem=True)]
    assert runs == [(2000 + t * 977 * 16000, (1, 977 if t < 15 else 970, 2, 1000), (0, 16000, 1000, 1))
                    for t in range(16)]
    kinds = ["wait" if isinstance(o, Wait) else "dma" for o in ops]
    assert [(kind, len(list(run))) for kind, run in groupby(kinds)] == [
        ("dma", 96), ("wait", 24), ("dma", 96), ("wait", 24), ("dma", 96), ("wait", 24), ("dma", 96), ("wait", 8)]
    assert [o.fifo for o in ops[-8:]] == [FifoId("g0", Stem.HOST, (c,)) for c in range(8)]


def test_a_small_elementwise_call_is_not_streamed():
    body = Sum().compile(x=((1024,), np.float32), y=((1024,), np.float32), device=from_name("npu2"))
    assert rule(body.plan, Rule.STREAM_ELEMENTWISE) == []


class Norm(iron.Graph):
    def __init__(self, n):
        self.g = iron.weight(np.ones(n, np.float32))

    def body(self, x):
        return RMSNorm.step(x, self.g)


def test_a_row_too_wide_for_a_tile_does_not_fit_and_says_what_to_change(tmp_path, monkeypatch):
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DoesNotFit) as err:
        Norm(1 << 16).compile(x=((1 << 16,), np.float32), device=from_name("npu2"))
    quoted(err.value, "Norm", "RMSNorm#0", "65536 float32", "786432 bytes", "64512", "at most 5376 elements")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    Norm(5376).compile(x=((5376,), np.float32), device=from_name("npu2"))   # the width it names fits


def test_a_batch_of_rows_whose_row_is_too_wide_names_the_row_and_one_that_fits_compiles():
    with pytest.raises(DoesNotFit) as err:
        Norm(1 << 14).compile(x=((2, 1 << 14), np.float32), device=from_name("npu2"))
    quoted(err.value, "Norm", "RMSNorm#0", "16384 float32", "196608 bytes", "at most 5376 elements")
    Norm(1024).compile(x=((4, 1024), np.float32), device=from_name("npu2"))


class Logged(iron.Graph):
    """Softmax into every other column block of a state: runs apart, which do not stream."""

    def __init__(self):
        self.log = iron.state((64, 2048), np.float32, name="log")

    def body(self, x, *, n: Scratchpad[np.int32]):
        Softmax.step(x, out=self.log[:, :1024], length=n + 1)


class LoggedWhole(iron.Graph):
    """Softmax into a whole state: one run of words, streamed in row-blocks into it."""

    def __init__(self):
        self.log = iron.state((64, 1024), np.float32, name="log")

    def body(self, x, *, n: Scratchpad[np.int32]):
        Softmax.step(x, out=self.log, length=n + 1)


def test_a_batch_of_rows_into_a_whole_state_streams_in_row_blocks_into_it():
    x = np.random.default_rng(5).standard_normal((64, 1024)).astype(np.float32)
    graph = LoggedWhole()
    body = graph.compile(x=x, device=from_name("npu2"))
    assert [r for r, _ in body.plan.rules if r is Rule.STREAM_ROW_BLOCKS] == [Rule.STREAM_ROW_BLOCKS]
    body(x=x, n=700)
    graph.reference(x=x, n=700)
    np.testing.assert_allclose(body.read(graph.log), graph.read(graph.log), rtol=1e-5, atol=1e-7)


def test_a_batch_of_rows_larger_than_a_tile_that_does_not_stream_says_why_and_how_many_rows_fit():
    with pytest.raises(DoesNotFit) as err:
        Logged().compile(x=((64, 1024), np.float32), device=from_name("npu2"))
    quoted(err.value, "Logged", "Softmax#0", "64 rows of 1024 float32", "524292 bytes", "out=", "at most 7 rows")


class GatedNorm(RMSNorm):
    """RMSNorm of each row's first `gate` elements: rows, a shared w and a per-call word."""

    name = "gated_norm"
    attrs = {"eps": 1e-5, "gate": None}
    scalar_attrs = ("gate",)
    bounds = {"gate": iron.Within(1, axis=-1)}

    @staticmethod
    def compute(x, w, eps, gate=None):
        return RMSNorm.compute(x[..., :gate], w[:gate], eps)


class Gated(iron.Graph):
    def __init__(self):
        self.w = iron.weight(np.ones(1024, np.float32))

    def body(self, x, *, n: Scratchpad[np.int32]):
        return GatedNorm.step(x, self.w, gate=n + 1)


def test_a_batch_needing_more_fifos_than_a_core_has_does_not_stream_and_says_so():
    with pytest.raises(DoesNotFit) as err:
        Gated().compile(x=((64, 1024), np.float32), device=from_name("npu2"))
    quoted(err.value, "Gated", "GatedNorm#0", "64 rows of 1024 float32", "528388 bytes", "3 FIFOs (its row-blocks, w, the "
           "per-call words)", "2 input DMA channels", "at most 7 rows")


def test_the_batch_a_refusal_names_fits():
    class Seven(Logged):
        def __init__(self):
            self.log = iron.state((7, 1024), np.float32, name="log")

    Seven().compile(x=((7, 1024), np.float32), device=from_name("npu2"))


NOT_WORDS = [(128, 127, 128, "m=32 k=127 n=16"), (128, 6, 256, "m=32 k=6 n=32"), (64, 32, 1001, "m=2 k=16 n=1001")]


@pytest.mark.parametrize("m, k, n, blocks", NOT_WORDS, ids=["int8-K127", "int8-K6", "int8-N1001"])
def test_a_matmul_whose_rows_are_not_whole_words_takes_whole_rows_and_equals_the_reference(m, k, n, blocks):
    """K or N int8 elements a row are no whole words: blocks take whole rows (with n = N each core
    its own rows of A and C), unpadded, over 32 tiles; exact."""
    graph, c, a = compiled(m, k, n, np.dtype(np.int8), np.int32)
    choice = next(choice for _, choice in c.plan.choices if choice.rule is Rule.TILE_MATMUL_OVER_ARRAY)
    assert choice.chosen == blocks and not any(p.padded for p in c.plan.placements) and len(c.plan.cores) == 32
    np.testing.assert_array_equal(c(a), graph.reference(a))


@pytest.mark.parametrize("m, k, n, dtype, out, sides", [
    (64, 2001, 64, np.int8, np.int32, (64, 2016, 64)), (128, 64, 127, BF16_DTYPE, None, (128, 64, 128)),
    (128, 64, 511, BF16_DTYPE, None, (128, 64, 512))], ids=["int8-K2001", "bf16-N127", "bf16-N511"])
def test_a_matmul_whose_rows_are_not_whole_words_is_padded_when_estimated_faster(m, k, n, dtype, out, sides):
    """Its own sides (whole rows, `whole_rows_when_not_words`) are one candidate of `pad_to_block`;
    padded to whole words the grid is estimated faster, and the cost model chooses it (the timed
    emulator agrees: K = 2001 8.3 -> 4.4 us on the device, N = 127 1.5 -> 1.3, N = 511 7.0 -> 3.8)."""
    graph, c, a = compiled(m, k, n, np.dtype(dtype), out)
    pad = c.plan.choices[0][1]
    assert (pad.rule, pad.chosen, pad.rejected) == (Rule.PAD_TO_BLOCK, f"(M, K, N) = {sides}", f"(M, K, N) = {(m, k, n)}")
    assert pad.chosen_ns < pad.rejected_ns
    want = graph.reference(a)
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(c(a), want)
    else:
        np.testing.assert_allclose(c(a).astype(np.float32), want.astype(np.float32), **BF16)


@pytest.mark.parametrize("device, m, steps", [
    ("npu2_3col", 24, [("dma", 18), ("wait", 9), ("dma", 9), ("wait", 3)]),   # 3 x 3 cores, estimated faster than 4 x 2
    ("npu2_2col", 16, [("dma", 12), ("wait", 6)] * 3 + [("dma", 10), ("wait", 2)])])
def test_a_round_too_many_dma_ops_for_a_shims_bds_moves_in_steps_of_fewer_output_blocks(device, m, steps):
    """int16 K = 509 on a 2- or 3-column partition (24 rows on 3: at 32 the cost model pads K to 512):
    each core's A block is whole rows (2036 words,
    over a BD dimension: one Dma op per output block), so a round of many output blocks is as many ops
    per A FIFO, more than a shim's 16 BD ids hold beside B and C. A Wait freeing BDs inside the round
    waited on A before B was issued and hung (or, on 2 columns, waited on A twice); the round
    moves in steps of fewer output blocks, each step's A, B and C ops then a Wait on them."""
    graph, body, a = compiled(m, 509, 300, np.int16, device=device)
    kinds = ["wait" if isinstance(o, Wait) else "dma" for o in body.plan.sequence]
    assert [(kind, len(list(run))) for kind, run in groupby(kinds)] == steps
    np.testing.assert_array_equal(body(a=a), graph.reference(a=a))


class Beside(iron.Graph):
    """A MatMul beside two small groups, each needing a shim channel of its own."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a, x):
        return Softmax.step(Add.step(x, x)), MatMul.step(a, self.b), Add.step(x, x)


@pytest.mark.parametrize("device, grid, why", [
    ("npu2", "16 tiles (4 rows x 4 columns",
     "no grid of more than 16 of the 28 free cores has rows of cores dividing M = 256 and columns dividing N = 256, "
     "and blocks divide their sides (no remainder block; padded only as pad_to_block says)"),
    ("npu2_2col", "1 tiles (1 rows x 1 columns",
     "the larger grids with rows of cores dividing M = 256 and columns dividing N = 256 do not fit: 2 x 1 needs "
     "3 shim MM2S channels, the other groups leave 2; 4 x 1 needs 5 shim MM2S channels, the other groups leave 2")])
def test_a_matmul_beside_other_groups_leaves_them_tiles_and_shim_channels_and_says_so(device, grid, why):
    a, b = operands(256, 256, 256, np.float32)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    graph = Beside(b)
    body = graph.compile(a=a, x=x, device=from_name(device))
    what = rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0]
    assert f"over {grid} of cores)" in what and what.endswith(f"summed in float32; not more cores: {why}")
    for got, want in zip(body(a=a, x=x), graph.reference(a=a, x=x)):
        np.testing.assert_allclose(got, want, **F32)


class NormedProduct(iron.Graph):
    """RMSNorm(W @ x) with W 1024 x 1024 float32 (4 MiB): large enough for the grid, but a group
    of the same configuration reads its result."""

    def __init__(self):
        rng = np.random.default_rng(11)
        self.w = iron.param(rng.standard_normal((1024, 1024)).astype(np.float32) / 32)
        self.g = iron.param((1 + 0.1 * rng.standard_normal(1024)).astype(np.float32))

    def body(self, x):
        return RMSNorm.step(MatVec.step(self.w, x), self.g)


def test_a_matvec_read_on_the_device_says_why_it_is_not_over_the_array():
    graph, spec = NormedProduct(), ((1024,), np.float32)
    body = graph.compile(x=spec)
    assert body.plan.segments == ()
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == [
        "g0: not over the array: g1 reads its result in this configuration, and a grid's results leave each "
        "column for DDR; it runs as split_matrix_over_tiles says, or over the array when a cut puts its readers "
        "in a later configuration"]
    assert rule(body.plan, Rule.SPLIT_MATRIX_OVER_TILES)[0] == \
        "g0: w (1024, 1024) float32 (4194304 bytes) split by rows over 4 tiles"
    x = np.linspace(-1, 1, 1024).astype(np.float32)
    np.testing.assert_allclose(body(x), graph.reference(x), **F32)
