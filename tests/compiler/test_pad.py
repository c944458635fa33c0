"""`pad_to_block` on the emulator: a MatMul, MatVec or stream of elementwise calls whose sides have
no good whole blocks computes on sides padded with zeros, over many tiles, and equals reference();
the padded tensors lie in larger host buffers whose padding stays zeros, a padded result crosses
a segment cut (also in a CarriedLoop's body), and describe() names the sizes it chose."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried, Scratchpad
from iron.compiler.copies import copy_view_for_grid
from iron.errors import DoesNotFit, IndexOutOfRange, PlanError
from iron.kernels import (
    Accumulate,
    Add,
    Argmax,
    Copy,
    Exp,
    MatMul,
    MatVec,
    Max,
    Mul,
    ReLU,
    Requantize,
    RMSNorm,
    Scale,
    SiLU,
    Softmax,
)
from iron.plan.describe import describe
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import Fill, HostRole, PlacementKind, TileKind
from iron.plan.rules import (
    KeptZeros,
    PaddedGrid,
    PaddedStream,
    PaddedTensor,
    Region,
    Rule,
    SharedSides,
    Unpadded,
)
from tests.compiler.designs import Product, ProductOfProducts, Projection, Sum, operands
from tests.plan.test_mlir import op_names
from tests.quotes import quoted

F32 = {"rtol": 1e-4, "atol": 1e-4}   # blocks sum the products in another order than numpy
BF16 = iron.bfloat16
BF16_CLOSE = {"rtol": 2e-2, "atol": 2e-2}

pytestmark = pytest.mark.usefixtures("on_emulator")


def assert_matches(got, want):
    """Integers exactly, float32 within F32, bfloat16 within BF16_CLOSE (one rounding of each sum)."""
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    elif want.dtype == BF16:
        np.testing.assert_allclose(np.float32(got), np.float32(want), **BF16_CLOSE)
    else:
        np.testing.assert_allclose(got, want, **F32)


def rule(plan, name):
    return [what for rule, what in plan.rules if rule == name]


def facts(plan, *kinds):
    """The layout pass's decisions of `kinds` (padding.py), typed, in the order it recorded them."""
    return [fact for _, fact in plan.rules if isinstance(fact, kinds)]


P509, P512 = (509, 509, 509), (512, 512, 512)
ZEROS = (Fill.ZEROS, Fill.ZEROS)


def chosen(plan, name):
    """What the cost model chose by rule `name`, per group (plan.choices, typed)."""
    return {group: choice.chosen for part in plan.segments or (plan,) for group, choice in part.choices
            if choice.rule is name}


def tiles(plan):
    return len({c.tile for c in plan.cores if c.tile.kind is TileKind.COMPUTE})


def padded(plan):
    return {p.name: (p.shape, p.padded) for p in plan.placements if p.padded is not None}


def same_kind_of_mlir(plan) -> bool:
    """The MLIR holds only allowed ops and names no padding: it lies in buffer sizes and DMA patterns."""
    text = print_mlir(plan)
    return set(op_names(text)) <= ALLOWED_OPS and "pad" not in text


def cut_padding(body, name):
    """The padded DDR buffer of a cut value (or any padded placement), as it lies."""
    cut = next(p for p in body.plan.placements if p.name == name)
    words = body.session.buffers[cut.buffer][cut.offset:cut.offset + cut.nwords]   # uint32: offsets count words
    return words.view(np.uint8)[:np.prod(cut.padded) * cut.dtype.itemsize].view(cut.dtype).reshape(cut.padded)


ODD = [   # the blocks and the padded sides the cost model chose (plan.choices)
    ("npu2", np.float32, None, 32, "m=64 k=8 n=64"),
    ("npu1", np.float32, None, 16, "m=64 k=8 n=64"),
    ("npu2", np.int8, np.int32, 32, "m=64 k=32 n=64"),
    ("npu1", np.int8, np.int32, 16, "m=32 k=128 n=64"),
]


@pytest.mark.parametrize("device, dtype, out, cores, blocks", ODD, ids=["f32-npu2", "f32-npu1", "int8-npu2", "int8-npu1"])
def test_a_matmul_of_prime_sides_is_padded_to_whole_blocks_over_the_array(device, dtype, out, cores, blocks):
    """509 is prime: padded with zeros to 512 on every side (the cost model's choice: int8's K of
    509 in whole rows is estimated slower), the product takes every core and equals reference() (int8 into int32 exactly)."""
    a, b = operands(509, 509, 509, dtype)
    graph = Product(b, out)
    body = graph.compile(a=a, device=from_name(device))
    assert chosen(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == {"g0": blocks}
    assert chosen(body.plan, Rule.PAD_TO_BLOCK) == {"g0": "(M, K, N) = (512, 512, 512)"}
    assert tiles(body.plan) == cores
    got, want = body(a=a), graph.reference(a=a)
    assert got.shape == (509, 509) and got.dtype == want.dtype
    assert_matches(got, want)


def test_a_small_odd_matmul_takes_few_calls_and_its_padding_stays_zeros():
    """(251, 127) x (127, 191) took 31877 one-element kernel calls per core on blocks dividing its
    sides; padded to (256, 128) x (128, 192) it takes 2 per core on 32 tiles. The host buffers
    are the padded sizes (the MLIR's runtime sequence takes them), the user's region is written
    and read (a weight's update too), and the padding (K's in both operands) stays zeros."""
    a, b = operands(251, 127, 191, np.float32)
    graph = Product(b)
    body = graph.compile(a=a, device=from_name("npu2"))
    assert facts(body.plan, PaddedGrid) == [PaddedGrid("g0", "MatMul#0", (251, 127, 191), (256, 128, 192))]
    assert chosen(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == {"g0": "m=64 k=64 n=24"} and tiles(body.plan) == 32
    assert padded(body.plan) == {"b": ((127, 191), (128, 192)), "a": ((251, 127), (256, 128)),
                                 "out0": ((251, 191), (256, 192))}
    inputs = body.plan.host_buffer(HostRole.INPUTS)
    assert inputs.nwords == 256 * 128
    mlir = print_mlir(body.plan)   # the padding is in buffer sizes and DMA patterns only, no pad attribute
    assert "aie.runtime_sequence @sequence(%arg0: memref<24576xi32>, %arg1: memref<1xi32>, %arg2: " \
           "memref<32768xi32>, %arg3: memref<49152xi32>" in mlir and "pad" not in mlir
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)
    a2, b2 = operands(251, 127, 191, np.float32, seed=5)
    graph.update(graph.b, b2)   # a padded weight's new values: its region written, its padding kept
    np.testing.assert_allclose(body(a=a2), graph.reference(a=a2), **F32)
    session = body.session
    for p in body.plan.placements:
        if p.padded is not None and p.kind is not PlacementKind.OUTPUT:
            whole = session.buffers[p.buffer].view(np.float32)[p.offset:p.offset + p.nwords].reshape(p.padded)
            assert not whole[p.shape[0]:].any() and not whole[:, p.shape[1]:].any()


def test_a_matvec_of_4099_rows_is_padded_over_every_core():
    """4099 rows (prime) took one core; padded to 4352 (32 cores x 136 rows) it takes 32 on npu2,
    and 4224 (16 x 264) 16 on npu1, and equals reference()."""
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((4099, 1000)).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    graph = Projection(w)
    body = graph.compile(x=x, device=from_name("npu2"))
    assert facts(body.plan, PaddedGrid) == [PaddedGrid("g0", "MatVec#0", (4099, 1000, 1), (4352, 1000, 1))]
    assert chosen(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == {"g0": "m=136 k=50 n=1"} and tiles(body.plan) == 32
    np.testing.assert_allclose(body(x=x), graph.reference(x=x), **F32)
    on_npu1 = Projection(w).compile(x=x, device=from_name("npu1"))
    assert tiles(on_npu1.plan) == 16
    assert facts(on_npu1.plan, PaddedGrid) == [PaddedGrid("g0", "MatVec#0", (4099, 1000, 1), (4224, 1000, 1))]
    np.testing.assert_allclose(on_npu1(x=x), graph.reference(x=x), **F32)


@pytest.mark.parametrize("dtype", [iron.bfloat16, np.int8])
def test_elementwise_calls_over_a_length_with_no_block_of_whole_words_stream_padded(dtype):
    """100001 bfloat16 or int8 elements have no block of whole 32-bit words: padded to 100352 they
    stream over 16 tiles and equal reference() exactly."""
    rng = np.random.default_rng(4)
    x, y = (rng.integers(-60, 60, 100001).astype(dtype) for _ in range(2))
    body = Sum().compile(x=x, y=y, device=from_name("npu2"))
    assert facts(body.plan, PaddedStream) == [PaddedStream("g0", "Add#0", (100001,), (100352,))]
    assert chosen(body.plan, Rule.STREAM_ELEMENTWISE) == {"g0": "3136 elements"} and tiles(body.plan) == 16
    np.testing.assert_array_equal(body(x=x, y=y), Sum().reference(x=x, y=y))


def test_a_prime_float32_length_streams_padded_instead_of_one_element_blocks_on_one_tile():
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal(100003).astype(np.float32) for _ in range(2))
    body = Sum().compile(x=x, y=y, device=from_name("npu2"))
    assert facts(body.plan, PaddedStream) == [PaddedStream("g0", "Add#0", (100003,), (100352,))]
    assert chosen(body.plan, Rule.STREAM_ELEMENTWISE) == {"g0": "1568 elements"} and tiles(body.plan) == 16
    np.testing.assert_array_equal(body(x=x, y=y), Sum().reference(x=x, y=y))


class StateSum(iron.Graph):
    """x + s for a state s; `twice`: the result returned twice (the host reads it as two outputs)."""

    def __init__(self, dtype, twice=False):
        self.s, self.twice = iron.state((100001,), dtype, name="s"), twice

    def body(self, x):
        y = Add.step(x, self.s)
        return (y, y) if self.twice else y


def refusal(graph, tmp_path, monkeypatch, **specs) -> str:
    """The DoesNotFit text `graph` compiled on npu2 with `specs` gets, after checking nothing was cached."""
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DoesNotFit) as err:
        graph.compile(device=from_name("npu2"), **specs)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    return str(err.value)


@pytest.mark.parametrize("dtype, per_word, padded_to", [(iron.bfloat16, 2, 100002), (np.int8, 4, 100004)])
def test_elementwise_calls_pad_to_block_may_not_pad_do_not_fit_naming_the_padding(
        dtype, per_word, padded_to, tmp_path, monkeypatch):
    """A result the host reads twice is not padded; 100001 bfloat16 or int8 elements then have no
    block to stream in: DoesNotFit naming the call and the padding, nothing cached."""
    text = refusal(StateSum(dtype, twice=True), tmp_path, monkeypatch, x=((100001,), dtype))
    for name in ("StateSum", "Add#0", f"{3 * 100001 * np.dtype(dtype).itemsize} bytes", f"({per_word} elements each)",
                 "pad_to_block", "Add(x, s)", f"{padded_to} elements"):
        assert name in text


def test_sizes_that_divide_are_not_padded():
    a, b = operands(512, 512, 512, np.float32)
    body = Product(b).compile(a=a, device=from_name("npu2"))
    assert facts(body.plan, PaddedGrid, Unpadded) == [] and padded(body.plan) == {}


class ProductThenRows(iron.Graph):
    """C = A @ B, then row 0 + row 1 of C: C's readers put it across a segment cut."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a):
        c = MatMul.step(a, self.b)
        return Add.step(c[0], c[1])


def test_a_padded_result_crosses_a_segment_cut_and_the_next_segment_reads_its_region():
    """The padded grid's result goes to its CUT placement padded (its padding written by the grid,
    never read); the next segment reads rows of the user's region through views."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((509, 251)).astype(np.float32), rng.standard_normal((251, 509)).astype(np.float32)
    graph = ProductThenRows(b)
    body = graph.compile(a=a, device=from_name("npu2"))
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g1: 1048576 bytes cross (MatMul#0)"]
    assert "padded with zeros to M = 512, K = 256, N = 512" in rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0]
    assert padded(body.plan) == {"b": ((251, 509), (256, 512)), "a": ((509, 251), (512, 256)),
                                 "cut.MatMul#0": ((509, 509), (512, 512))}
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


class LoggedProduct(iron.Graph):
    """Each step logs the last row of C = A @ B (A a param, B a weight) at the carried step."""

    def __init__(self, a, b, steps):
        self.a, self.b = iron.param(a), iron.weight(b)
        self.log = iron.state((steps, b.shape[1]), np.float32, name="log")

    def body(self, *, step: Carried[np.int32]):
        c = MatMul.step(self.a, self.b)
        Copy.step(c[250], self.log[step])
        return iron.carry(step=step + 1)


def test_a_carried_loop_runs_a_padded_body_at_depth_2():
    a, b = operands(251, 127, 191, np.float32, seed=7)
    steps = 6
    graph = LoggedProduct(a, b, steps)
    body = graph.compile(device=from_name("npu2"))
    assert facts(body.plan, PaddedGrid) == [PaddedGrid("g0", "MatMul#0", (251, 127, 191), (256, 128, 192))]
    assert len(body.plan.configurations) == 2
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps - 1, step=0)) == list(range(steps - 1))
    assert dict(loop.carry) == {"step": steps}
    np.testing.assert_allclose(body.read("log"), np.tile((a @ b)[250], (steps, 1)), **F32)


class Norm(iron.Graph):
    def __init__(self, w):
        self.w = iron.weight(w)

    def body(self, x):
        return RMSNorm.step(x, self.w)


class Softmaxed(iron.Graph):
    def body(self, x):
        return Softmax.step(x)


class Picked(iron.Graph):
    def body(self, x):
        return Argmax.step(x)


@pytest.mark.parametrize("graph", [Norm(np.linspace(0.5, 1.5, 64, dtype=np.float32)), Softmaxed(), Picked()],
                         ids=["RMSNorm", "Softmax", "Argmax"])
def test_a_row_reduction_pads_only_its_number_of_rows(graph):
    """4099 rows (prime) streamed in row-blocks on one core; padded to 4352 rows (136 per core)
    they stream over 32 tiles; a row's width (64) is never padded, the results equal reference()."""
    x = np.random.default_rng(8).standard_normal((4099, 64)).astype(np.float32)
    body = graph.compile(x=x, device=from_name("npu2"))
    name = {Norm: "RMSNorm", Softmaxed: "Softmax", Picked: "Argmax"}[type(graph)]
    assert facts(body.plan, PaddedStream) == [PaddedStream("g0", f"{name}#0", (4099, 64), (4352, 64))]
    assert chosen(body.plan, Rule.STREAM_ROW_BLOCKS) == {"g0": f"{34 * 64} elements"} and tiles(body.plan) == 32
    assert padded(body.plan)["x"] == ((4099, 64), (4352, 64))
    got, want = body(x=x), graph.reference(x=x)
    assert_matches(got, want)


class NormThenProduct(iron.Graph):
    """RMSNorm's result, another group's, is the MatMul's A: a cut lies between them (a grid reads
    host tensors only)."""

    def __init__(self, w, b):
        self.w, self.b = iron.weight(w), iron.weight(b)

    def body(self, x):
        return MatMul.step(RMSNorm.step(x, self.w), self.b)


class ProductThen(iron.Graph):
    """`kernel` of C = A @ B (a projection, then an activation or a row reduction), as the
    subclass names it."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a):
        return self.kernel.step(MatMul.step(a, self.b))


class ProductThenAct(ProductThen):
    kernel = SiLU


class ProductPlus(iron.Graph):
    """(A @ B) + C for an input C; `out` names the product's dtype."""

    def __init__(self, b, out=None):
        self.b, self.out = iron.weight(b), out

    def body(self, a, c):
        return Add.step(MatMul.step(a, self.b, dtype=self.out), c)


class ScaledProduct(iron.Graph):
    """x * (A @ B) for an input x."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a, c):
        return Mul.step(c, MatMul.step(a, self.b))


def through(label, group="g1", own=(509, 509), lies=(512, 512), products=("MatMul#0",),
            rule=Rule.PAD_THROUGH_ELEMENTWISE):
    """The fact of elementwise calls streaming over the padded layout of `products`."""
    return PaddedStream(group, label, own, lies, rule, products)


FED = [
    ("npu2", ProductThenAct, None, "SiLU#1", 32, 32),
    ("npu2", ProductPlus, None, "Add#1", 32, 16),
    ("npu2", ScaledProduct, None, "Mul#1", 32, 16),
    ("npu2", ProductPlus, np.int32, "Add#1", 32, 16),
    ("npu1", ProductThenAct, None, "SiLU#1", 16, 16),
    ("npu1", ProductPlus, None, "Add#1", 16, 8),
    ("npu1", ProductPlus, np.int32, "Add#1", 16, 8),
]


@pytest.mark.parametrize("device, design, out, label, grid, stream", FED,
                         ids=["silu-npu2", "add-npu2", "mul-npu2", "int8-add-npu2", "silu-npu1", "add-npu1",
                              "int8-add-npu1"])
def test_elementwise_calls_reading_a_padded_product_compute_over_its_padded_layout(
        device, design, out, label, grid, stream):
    """pad_through_elementwise: SiLU(A @ B), (A @ B) + C and C * (A @ B) at 509^3 (a prime) pad
    the product over the whole array, and the elementwise call streams over its padded layout,
    its other input and its result padded alike; the host reads the user's region, equal to
    reference() (float32 within F32, int8 -> int32 exactly)."""
    dtype = np.float32 if out is None else np.int8
    a, b = operands(509, 509, 509, dtype)
    a = a / 8 if out is None else a   # SiLU of a product of 509 normal terms stays in exp's range
    rng = np.random.default_rng(11)
    c = rng.standard_normal((509, 509)).astype(np.float32) if out is None else rng.integers(-50, 50, (509, 509)).astype(out)
    graph = design(b, out) if design is ProductPlus else design(b)
    given = {"a": a} if design is ProductThenAct else {"a": a, "c": c}
    body = graph.compile(**given, device=from_name(device))
    assert facts(body.plan, PaddedGrid, PaddedStream) == [PaddedGrid("g0", "MatMul#0", P509, P512), through(label)]
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g1: 1048576 bytes cross (MatMul#0)"]
    assert padded(body.plan)["cut.MatMul#0"] == ((509, 509), (512, 512))
    assert padded(body.plan)["out0"] == ((509, 509), (512, 512))
    got, want = body(**given), graph.reference(**given)
    assert got.shape == (509, 509) and got.dtype == want.dtype
    assert_matches(got, want)


class LoggedAct(iron.Graph):
    """Each step logs row 508 of SiLU(A @ B) (A a param, B a weight) at the carried step."""

    def __init__(self, a, b, steps):
        self.a, self.b = iron.param(a), iron.weight(b)
        self.log = iron.state((steps, b.shape[1]), np.float32, name="log")

    def body(self, *, step: Carried[np.int32]):
        c = SiLU.step(MatMul.step(self.a, self.b))
        Copy.step(c[508], self.log[step])
        return iron.carry(step=step + 1)


def test_a_carried_loop_runs_a_padded_product_and_activation_at_depth_2():
    """The activation's padded result crosses a second cut; the Copy reads row 508 of its
    user's region through a view."""
    a, b = operands(509, 509, 509, np.float32, seed=7)
    a, steps = a / 8, 4
    graph = LoggedAct(a, b, steps)
    body = graph.compile(device=from_name("npu2"))
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g1: 1048576 bytes cross (MatMul#0)",
                                                   "cut before g2: 1048576 bytes cross (SiLU#1)"]
    assert facts(body.plan, PaddedStream) == [through("SiLU#1")]
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps - 1, step=0)) == list(range(steps - 1))
    assert dict(loop.carry) == {"step": steps}
    np.testing.assert_allclose(body.read("log"), np.tile(SiLU.compute(a @ b)[508], (steps, 1)), **F32)


class ProductThenRows2(iron.Graph):
    """A row reduction (RMSNorm, Softmax or Argmax) over the rows of C = A @ B."""

    def __init__(self, b, kernel):
        self.b, self.kernel = iron.weight(b), kernel
        self.w = iron.weight(np.linspace(0.5, 1.5, b.shape[1], dtype=np.float32)) if kernel is RMSNorm else None

    def body(self, a):
        c = MatMul.step(a, self.b)
        return RMSNorm.step(c, self.w) if self.w is not None else self.kernel.step(c)


ROWS = [("npu2", RMSNorm, 32, 32, "m=64 k=8 n=64", 4), ("npu2", Softmax, 32, 32, "m=64 k=8 n=64", 4),
        ("npu2", Argmax, 32, 32, "m=64 k=8 n=64", 8), ("npu1", Softmax, 16, 16, "m=64 k=8 n=64", 4)]


@pytest.mark.parametrize("device, kernel, grid, stream, blocks, rows", ROWS,
                         ids=["rmsnorm-npu2", "softmax-npu2", "argmax-npu2", "softmax-npu1"])
def test_a_row_reduction_of_a_padded_product_reduces_its_padded_rows_of_their_own_width(
        device, kernel, grid, stream, blocks, rows):
    """pad_through_rows: (509, 256) x (256, 512) took one row of cores (M = 509, a prime) and the
    reduction one tile; M alone is padded (N = 512 needs no padding), the product takes the whole
    array and the reduction streams the 512 rows as they lie, equal to reference()."""
    a, b = operands(509, 256, 512, np.float32, seed=12)
    graph = ProductThenRows2(b, kernel)
    body = graph.compile(a=a, device=from_name(device))
    name = kernel.__name__
    assert facts(body.plan, PaddedGrid, PaddedStream) == [
        PaddedGrid("g0", "MatMul#0", (509, 256, 512), (512, 256, 512)),
        PaddedStream("g1", f"{name}#1", (509, 512), (512, 512), Rule.PAD_THROUGH_ROWS)]
    assert f"blocks {blocks} (pad_to_block: padded with zeros to M = 512, K = 256, N = 512)" in \
        rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0]
    assert chosen(body.plan, Rule.STREAM_ROW_BLOCKS) == {"g1": f"{rows * 512} elements"}
    assert tiles(body.plan.segments[-1]) == stream
    assert padded(body.plan)["cut.MatMul#0"] == ((509, 512), (512, 512)) and "w" not in padded(body.plan)
    got, want = body(a=a), graph.reference(a=a)
    assert_matches(got, want)


class ProductOfProduct(iron.Graph):
    """(A @ B) @ D: the first product is the second's A."""

    def __init__(self, b, d):
        self.b, self.d = iron.weight(b), iron.weight(d)

    def body(self, a):
        return MatMul.step(MatMul.step(a, self.b), self.d)


def chained(g, label, fills=ZEROS):
    """The fact of a product padded from 509 to 512 on every side; `fills`: its A's and B's padding."""
    return PaddedGrid(g, label, P509, P512, Rule.PAD_TO_BLOCK, fills)


@pytest.mark.parametrize("device, tiles", [("npu2", 32), ("npu1", 16)])
def test_a_padded_product_read_as_the_next_products_a_keeps_its_k_padding_zeros(device, tiles):
    """pad_through_matmul: A @ B's N padding is the next product's K padding; it is zeros (A's
    and B's padding are), as K's padding must be in both operands, so (A @ B) @ D at 509^3 runs
    both products padded over the whole array and equals reference()."""
    a, b = operands(509, 509, 509, np.float32)
    d = operands(509, 509, 509, np.float32, seed=3)[1]
    a, d = a / 22, d / 22   # each product of 509 normal terms back to about unit size
    graph = ProductOfProduct(b, d)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid) == [chained("g0", "MatMul#0"), chained("g1", "MatMul#1")]
    assert padded(body.plan) == {"a": ((509, 509), (512, 512)), "b": ((509, 509), (512, 512)),
                                 "d": ((509, 509), (512, 512)), "cut.MatMul#0": ((509, 509), (512, 512)),
                                 "out0": ((509, 509), (512, 512))}
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)
    product = cut_padding(body, "cut.MatMul#0")
    assert product[:509, :509].any() and not product[509:].any() and not product[:, 509:].any()   # K padding: zeros


class ProductThenMax(ProductThen):
    kernel = Max


class ProductThenNormTwice(iron.Graph):
    """RMSNorm(A @ B, w) and w scaled, in one body: w is read by two calls."""

    def __init__(self, b):
        self.b, self.w = iron.weight(b), iron.weight(np.linspace(0.5, 1.5, b.shape[1], dtype=np.float32))

    def body(self, a):
        return RMSNorm.step(MatMul.step(a, self.b), self.w), Scale.step(self.w, factor=2.0)


@pytest.mark.parametrize("design, line", [(ProductThenMax, "Copy#2 copies MatMul(a, b)[:] for Max#1"),
                                          (ProductThenNormTwice, "Copy#3 copies MatMul(a, b)[:] for RMSNorm#1")],
                         ids=["max", "shared-row"])
def test_a_product_whose_reader_cannot_share_its_padding_reads_its_region_through_a_copy(design, line):
    """Max over rows of N = 509 would reduce the 3 columns of N's padding too (it takes no length;
    and M and K padded alone give no grid), nor is RMSNorm's w padded when another call reads it
    too (so the rows keep N): a Copy of the product's region is inserted before the reader
    (`copy_view_for_grid`), the product padded to (512, 512) (before: DoesNotFit naming the
    reader); float32 within 1e-4 of reference()."""
    a, b = operands(509, 251, 509, np.float32)
    graph = design(b)
    body = graph.compile(a=a, device=from_name("npu2"))
    assert [text.split(", the region")[0] for r, text in body.plan.rules if r is Rule.COPY_VIEW_FOR_GRID] == [line]
    assert padded(body.plan)["a"] == ((509, 251), (512, 256))
    results = [r if isinstance(r, tuple) else (r,) for r in (body(a=a), graph.reference(a=a))]   # NormTwice: two
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, **F32)


# ---- products whose results other products read (padjoin) -------------------------------------------

class ProductAsB(iron.Graph):
    """X @ (A @ B): the first product is the second's B; `out` widens the first product (int8 -> int32)."""

    def __init__(self, b, x, out=None):
        self.b, self.x, self.out = iron.weight(b), iron.weight(x), out

    def body(self, a):
        return MatMul.step(self.x, MatMul.step(a, self.b, dtype=self.out))


AS_B = [("npu2", np.float32, None, 32), ("npu1", np.float32, None, 16),
        ("npu2", np.int8, np.int32, 32), ("npu1", np.int8, np.int32, 16)]


@pytest.mark.parametrize("device, dtype, out, tiles", AS_B, ids=["f32-npu2", "f32-npu1", "int8-npu2", "int8-npu1"])
def test_a_padded_product_read_as_the_next_products_b_keeps_its_k_padding_zeros(device, dtype, out, tiles):
    """pad_through_matmul_b: A @ B's M padding (zero rows of A times B) is X @ (A @ B)'s K
    padding, zeros in both operands, and its N padding the second product's; at 509^3 both
    products run padded over the whole array and equal reference() (int8 -> int32, then int32
    times an int32 X: exactly)."""
    a, b = operands(509, 509, 509, dtype)
    x = operands(509, 509, 509, dtype, seed=3)[1]
    a, x = (a / 22, x / 22) if out is None else (a, x.astype(out))
    graph = ProductAsB(b, x, out)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid) == [chained("g0", "MatMul#0"), chained("g1", "MatMul#1")]
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g1: 1048576 bytes cross (MatMul#0)"]
    assert padded(body.plan) == {"a": ((509, 509), (512, 512)), "b": ((509, 509), (512, 512)),
                                 "x": ((509, 509), (512, 512)), "cut.MatMul#0": ((509, 509), (512, 512)),
                                 "out0": ((509, 509), (512, 512))}
    got, want = body(a=a), graph.reference(a=a)
    assert got.dtype == want.dtype
    assert_matches(got, want)
    product = cut_padding(body, "cut.MatMul#0")
    assert product[:509, :509].any() and not product[509:].any() and not product[:, 509:].any()
    assert same_kind_of_mlir(body.plan)


class ChainThenAct(iron.Graph):
    """SiLU((A @ B) @ D): the second product of a chain read by an activation."""

    def __init__(self, b, d):
        self.b, self.d = iron.weight(b), iron.weight(d)

    def body(self, a):
        return SiLU.step(MatMul.step(MatMul.step(a, self.b), self.d))


@pytest.mark.parametrize("device, tiles", [("npu2", 32), ("npu1", 16)])
def test_the_second_product_of_a_chain_read_by_an_activation_shares_its_padded_layout(device, tiles):
    """pad_through_matmul then pad_through_elementwise: the chain's second product is read by SiLU
    (not only by the host), which streams over its padded layout; both products and SiLU take
    the whole array at 509^3 and the result equals reference(). (SiLU takes floats only.)"""
    a, b = operands(509, 509, 509, np.float32)
    d = operands(509, 509, 509, np.float32, seed=3)[1]
    a, d = a / 22, d / 22
    graph = ChainThenAct(b, d)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid, PaddedStream) == [chained("g0", "MatMul#0"), chained("g1", "MatMul#1"),
                                                          through("SiLU#2", "g2", products=("MatMul#1",))]
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g1: 1048576 bytes cross (MatMul#0)",
                                                   "cut before g2: 1048576 bytes cross (MatMul#1)"]
    assert padded(body.plan)["cut.MatMul#1"] == ((509, 509), (512, 512))
    assert same_kind_of_mlir(body.plan)
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


class SumOfProducts(iron.Graph):
    """(A @ B) + (C @ D); `out` widens both products (int8 -> int32); `shown` also returns C @ D;
    `shared`: (A @ B) + (A @ D), C unread."""

    def __init__(self, b, d, out=None, shown=False, shared=False):
        self.b, self.d, self.out, self.shown, self.shared = iron.weight(b), iron.weight(d), out, shown, shared

    def body(self, a, c):
        first = MatMul.step(a, self.b, dtype=self.out)
        second = MatMul.step(a if self.shared else c, self.d, dtype=self.out)
        total = Add.step(first, second)
        return (total, second) if self.shown else total


JOINED = [("npu2", np.float32, None, 16, [32, 16]), ("npu1", np.float32, None, 8, [16, 16, 8]),
          ("npu2", np.int8, np.int32, 16, [32, 16]), ("npu1", np.int8, np.int32, 8, [16, 16, 8])]


@pytest.mark.parametrize("device, dtype, out, stream, cores", JOINED, ids=["f32-npu2", "f32-npu1", "int8-npu2",
                                                                          "int8-npu1"])
def test_two_products_one_elementwise_call_reads_are_padded_alike(device, dtype, out, stream, cores):
    """pad_joined: (A @ B) + (C @ D) at 509^3 reads two products, which must lie in one padded
    layout: both are padded to the M and N the first one's padding picks (each its own K, 512), each over 16 tiles, and Add streams over the 512 x 512 layout; the result equals
    reference() (float32 within F32, int8 -> int32 exactly)."""
    a, b = operands(509, 509, 509, dtype)
    c, d = operands(509, 509, 509, dtype, seed=3)
    a, c = (a / 22, c / 22) if out is None else (a, c)
    graph = SumOfProducts(b, d, out)
    body = graph.compile(a=a, c=c, device=from_name(device))
    assert facts(body.plan, PaddedGrid, PaddedStream) == [chained("g0", "MatMul#0"), chained("g1", "MatMul#1"),
                                                          through("Add#2", "g2", products=("MatMul#0", "MatMul#1"))]
    assert [len(conf.cores) for conf in body.plan.configurations] == cores
    assert padded(body.plan) == {name: ((509, 509), side) for name, side in (
        ("a", (512, 512)), ("b", (512, 512)), ("c", (512, 512)), ("d", (512, 512)), ("cut.MatMul#0", (512, 512)),
        ("cut.MatMul#1", (512, 512)), ("out0", (512, 512)))}
    assert same_kind_of_mlir(body.plan)
    got, want = body(a=a, c=c), graph.reference(a=a, c=c)
    assert got.dtype == want.dtype
    assert_matches(got, want)


@pytest.mark.parametrize("device, dtype, out", [("npu2", np.float32, None), ("npu1", np.int8, np.int32)],
                         ids=["f32-npu2", "int8-npu1"])
def test_two_joined_products_of_one_input_pad_it_once(device, dtype, out):
    """pad_joined: (A @ B) + (A @ D) reads A in both products (as a gate and an up projection
    read x): it lies padded once, on the M and K both products take, and equals reference()."""
    a, b = operands(509, 509, 509, dtype)
    d = operands(509, 509, 509, dtype, seed=3)[1]
    a = a / 22 if out is None else a
    graph = SumOfProducts(b, d, out, shared=True)
    body = graph.compile(a=a, c=a, device=from_name(device))
    assert padded(body.plan) == {name: ((509, 509), side) for name, side in (
        ("a", (512, 512)), ("b", (512, 512)), ("d", (512, 512)), ("cut.MatMul#0", (512, 512)),
        ("cut.MatMul#1", (512, 512)), ("out0", (512, 512)))}
    assert facts(body.plan, PaddedStream) == [through("Add#2", "g2", products=("MatMul#0", "MatMul#1"))]
    assert_matches(body(a=a, c=a), graph.reference(a=a, c=a))


def test_products_read_together_are_not_joined_when_one_is_read_elsewhere_too(tmp_path, monkeypatch):
    """The host also reads C @ D, so it would need its own layout: neither product is padded, and
    DoesNotFit says why for the first."""
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    ones = np.ones((509, 509), np.float32)
    with pytest.raises(DoesNotFit) as err:
        SumOfProducts(ones, ones, shown=True).compile(a=ones, c=ones, device=from_name("npu2"))
    assert str(err.value).startswith(
        "SumOfProducts does not fit npu2 even cut into segments: MatMul#0 (group g0) alone is too large for one "
        "configuration (pad_to_block: MatMul#0 is not padded: its result is read by Add(MatMul(a, b), MatMul(c, d)), "
        "which also reads MatMul(c, d), which must lie padded alike (pad_joined), but it is read elsewhere too). ")


# ---- pad_through_row_width: a row reduction over a product whose N is padded -----------------------

class ProductThenSoftmax(ProductThen):
    kernel = Softmax


def test_softmax_of_a_product_of_n_509_reduces_its_padded_width():
    """Softmax(A @ B) of N = 509 kept N (a row is reduced whole) and did not fit; now N is padded
    to 512 and Softmax is told the user's width (length=509), so the 3 columns of padding are
    never reduced: it compiles over the whole array and equals reference()."""
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((509, 251)).astype(np.float32), rng.standard_normal((251, 509)).astype(np.float32)
    graph = ProductThenSoftmax(b / 64)   # rows of values near 0: the padding exp(0 - max) would count
    body = graph.compile(a=a, device=from_name("npu2"))
    assert "over 32 tiles (4 rows x 8 columns of cores): blocks m=64 k=8 n=64 (pad_to_block: padded with zeros to " \
        "M = 512, K = 256, N = 512)" in rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0]
    assert facts(body.plan, PaddedStream) == [
        PaddedStream("g1", "Softmax#1", (509, 509), (512, 512), Rule.PAD_THROUGH_ROW_WIDTH)]
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


WIDE = [("npu2", Softmax, 32, 4), ("npu2", RMSNorm, 32, 4), ("npu2", Argmax, 32, 8),
        ("npu1", Softmax, 16, 4), ("npu1", RMSNorm, 16, 4), ("npu1", Argmax, 16, 8)]


@pytest.mark.parametrize("device, kernel, tiles_used, rows", WIDE,
                         ids=["softmax-npu2", "rmsnorm-npu2", "argmax-npu2", "softmax-npu1", "rmsnorm-npu1",
                              "argmax-npu1"])
def test_a_row_reduction_of_a_padded_product_reduces_its_padded_width_told_the_users_width(
        device, kernel, tiles_used, rows):
    """pad_through_row_width: at 509^3 the product is padded to 512 on every side and the row
    reduction streams its 512 rows of 512 as they lie, its kernel reducing each row's first 509
    elements (RMSNorm's w padded with zeros to 512). The first 100 rows of the product are all
    negative, so a reduction that took the padding's zeros in would differ (Argmax would pick
    509, Softmax's sum and RMSNorm's mean would change): equal to reference(), Argmax exactly."""
    a, b = operands(509, 509, 509, np.float32)
    a, b = a / 8, np.abs(b)
    a[:100] = -np.abs(a[:100])
    graph = ProductThenRows2(b, kernel)
    body = graph.compile(a=a, device=from_name(device))
    name = kernel.__name__
    assert facts(body.plan, PaddedGrid, PaddedStream) == [
        chained("g0", "MatMul#0"), PaddedStream("g1", f"{name}#1", (509, 509), (512, 512), Rule.PAD_THROUGH_ROW_WIDTH)]
    assert chosen(body.plan, Rule.STREAM_ROW_BLOCKS) == {"g1": f"{rows * 512} elements"}
    assert tiles(body.plan.segments[-1]) == tiles_used
    result = ((509,), (512,)) if kernel is Argmax else ((509, 509), (512, 512))
    assert padded(body.plan) == {"a": ((509, 509), (512, 512)), "b": ((509, 509), (512, 512)),
                                 "cut.MatMul#0": ((509, 509), (512, 512)), "out0": result,
                                 **({"w": ((509,), (512,))} if kernel is RMSNorm else {})}
    assert same_kind_of_mlir(body.plan)   # the padding is in sizes and patterns only
    got, want = body(a=a), graph.reference(a=a)
    assert ((a @ b)[:100] < 0).all()
    assert got.shape == want.shape == result[0] and got.dtype == want.dtype
    assert_matches(got, want)
    for p in body.plan.placements:   # the padded inputs' padding (w's too) stays zeros
        if p.name in ("a", "b", "w"):
            whole = cut_padding(body, p.name)
            assert not whole[p.shape[0]:].any() and (len(p.shape) == 1 or not whole[:, p.shape[1]:].any())


class ProductThenSoftmaxUpTo(iron.Graph):
    """Softmax of each row's first n elements of A @ B, n per call (as attention's valid length)."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a, *, n: Scratchpad[np.int32]):
        return Softmax.step(MatMul.step(a, self.b), length=n)


def test_a_per_call_length_reduces_a_padded_width_within_the_users_width():
    """The length a call is given per call stays the kernel's (a word every core receives): it
    is bounded by the user's width, 509, not the padded 512."""
    a, b = operands(509, 509, 509, np.float32)
    graph = ProductThenSoftmaxUpTo(b)
    a = a / 8
    body = graph.compile(a=a, device=from_name("npu2"))
    assert facts(body.plan, PaddedStream) == [
        PaddedStream("g1", "Softmax#1", (509, 509), (512, 512), Rule.PAD_THROUGH_ROW_WIDTH)]
    assert chosen(body.plan, Rule.STREAM_ROW_BLOCKS) == {"g1": f"{4 * 512} elements"}
    for n in (509, 300, 1):
        np.testing.assert_allclose(body(a=a, n=n), graph.reference(a=a, n=n), **F32)
    with pytest.raises(IndexOutOfRange) as err:
        body(a=a, n=510)
    quoted(err.value, "Softmax length=n", "n = 510", "1..509")


# ---- pad_written_by_producer: a padded call reads a tensor another call writes ------------------

NORMED = [("npu2", (509, 509, 509), 32, (512, 512, 512)), ("npu1", (509, 509, 509), 16, (512, 512, 512)),
          ("npu2", (251, 128, 191), 32, (256, 128, 192))]


@pytest.mark.parametrize("device, sides, cores, big", NORMED, ids=["509-npu2", "509-npu1", "251-npu2"])
def test_a_row_reduction_a_padded_product_reads_as_its_a_streams_over_its_rows_padded(device, sides, cores, big):
    """pad_upstream_rows: MatMul(RMSNorm(x, w), B) at 509^3 (and at (251, 128) x (128, 191)):
    written row by row into the product's layout, RMSNorm streamed its 509 (251) rows, a prime
    count, on one tile; it streams x padded with zeros to the product's A instead (w with zeros
    as wide, the kernel told the user's width and writing 0 past it), over every core, its
    result's padding zeros where K's must be; the product takes the whole array on its padded
    sides and equals reference(); the cut counts the padded buffer's bytes."""
    (m, k, n), (big_m, big_k, big_n) = sides, big
    rng = np.random.default_rng(9)
    x, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    w = np.linspace(0.5, 1.5, k, dtype=np.float32)
    graph = NormThenProduct(w, b)
    body = graph.compile(x=x, device=from_name(device))
    assert facts(body.plan, PaddedGrid, PaddedStream, PaddedTensor) == [
        PaddedStream("g0", "RMSNorm#0", (m, k), (big_m, big_k), Rule.PAD_UPSTREAM_ROWS),
        PaddedGrid("g1", "MatMul#1", sides, big, fills=(Fill.ROWS, Fill.ZEROS))]
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == [f"cut before g1: {big_m * big_k * 4} bytes cross (RMSNorm#0)"]
    assert f"before g1: {big_m * big_k * 4} bytes (RMSNorm#0)" in describe(body.plan)
    assert f"(pad_to_block: padded with zeros to M = {big_m}, K = {big_k}, N = {big_n})" in \
        rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0]
    assert [tiles(s) for s in body.plan.segments] == [cores, cores]
    assert padded(body.plan) == {"b": ((k, n), (big_k, big_n)), "out0": ((m, n), (big_m, big_n)),
                                 "x": ((m, k), (big_m, big_k)), "cut.RMSNorm#0": ((m, k), (big_m, big_k))} | (
        {"w": ((k,), (big_k,))} if big_k != k else {})
    assert same_kind_of_mlir(body.plan)   # the padding is in sizes and patterns only
    np.testing.assert_allclose(body(x=x), graph.reference(x=x), **F32)
    normed = cut_padding(body, "cut.RMSNorm#0")
    np.testing.assert_allclose(normed[:m, :k], RMSNorm.compute(x, w, 1e-5), **F32)
    assert not normed[m:].any() and not normed[:, k:].any()


class ProductPlusState(iron.Graph):
    """(A @ B) + s for a state s; `out` names the product's and the state's dtype."""

    def __init__(self, b, out=None):
        self.b, self.out = iron.weight(b), out
        self.s = iron.state((b.shape[1],) * 2, out or np.float32, name="s")

    def body(self, a):
        return Add.step(MatMul.step(a, self.b, dtype=self.out), self.s)


STATED = [("npu2", None, 32, 16), ("npu2", np.int32, 32, 16), ("npu1", None, 16, 8), ("npu1", np.int32, 16, 8)]


@pytest.mark.parametrize("device, out, grid, stream", STATED, ids=["f32-npu2", "int8-npu2", "f32-npu1", "int8-npu1"])
def test_a_state_written_only_in_its_users_region_lies_padded_for_a_padded_call(device, out, grid, stream):
    """pad_written_by_producer for a state: (A @ B) + s at 509^3 was refused (a kernel may write
    a state). Every call writing s writes its user's region only (none here; the host writes its
    region too), so s lies padded like the product and the Add streams over the 512 x 512
    layout, equal to reference() (float32 within F32, int8 -> int32 exactly); s's padding stays
    zeros."""
    dtype = np.float32 if out is None else np.int8
    a, b = operands(509, 509, 509, dtype)
    rng = np.random.default_rng(13)
    s = rng.standard_normal((509, 509)).astype(np.float32) if out is None else rng.integers(-99, 99, (509, 509)).astype(out)
    graph = ProductPlusState(b, out)
    body = graph.compile(a=a, device=from_name(device))
    graph.write("s", s)
    body.write("s", s)
    assert facts(body.plan, PaddedGrid, PaddedStream, PaddedTensor) == [
        chained("g0", "MatMul#0"), through("Add#1"), PaddedTensor("s", (512, 512), ())]
    assert tiles(body.plan.segments[0]) == grid
    assert padded(body.plan)["s"] == ((509, 509), (512, 512))
    assert_matches(body(a=a), graph.reference(a=a))
    whole = cut_padding(body, "s")
    np.testing.assert_array_equal(whole[:509, :509], s)
    assert not whole[509:].any() and not whole[:, 509:].any()


class ChainedState(iron.Graph):
    """Each step adds A @ B to the state s and writes row 2 of the sum into row `step` of s."""

    def __init__(self, a, b):
        self.a, self.b = iron.param(a), iron.weight(b)
        self.s = iron.state((b.shape[1],) * 2, np.float32, name="s")

    def body(self, *, step: Carried[np.int32]):
        total = Add.step(MatMul.step(self.a, self.b), self.s)
        Copy.step(total[2], out=self.s[step])
        return iron.carry(step=step + 1)


def test_a_carried_loop_writes_a_padded_state_in_its_users_region_at_depth_2():
    """The Copy writes row `step` of s through a view at the padded row's stride, the next step's
    Add reads s padded: after 5 steps s equals numpy's, its padding zeros."""
    a, b = operands(509, 509, 509, np.float32, seed=7)
    a, b, steps = a / 8, b / 8, 5
    graph = ChainedState(a, b)
    body = graph.compile(device=from_name("npu2"))
    assert facts(body.plan, PaddedTensor) == [PaddedTensor("s", (512, 512), ("Copy#2",))]
    s = np.random.default_rng(14).standard_normal((509, 509)).astype(np.float32)
    body.write("s", s)
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps - 1, step=0)) == list(range(steps - 1))
    assert dict(loop.carry) == {"step": steps}
    want, product = s.astype(np.float64), a.astype(np.float64) @ b
    for step in range(steps):
        want[step] = (product + want)[2]
    np.testing.assert_allclose(body.read("s"), want, **F32)
    whole = cut_padding(body, "s")
    assert not whole[509:].any() and not whole[:, 509:].any()


@pytest.mark.parametrize("dtype", [iron.bfloat16, np.int8])
def test_a_state_read_by_a_padded_stream_lies_padded(dtype):
    """x + s over 100001 bfloat16 or int8 elements (no block of whole words) was refused while a
    state was never padded; s now lies padded to 100352 with x and the result, equal to
    reference() exactly."""
    rng = np.random.default_rng(15)
    x, s = (rng.integers(-60, 60, 100001).astype(dtype) for _ in range(2))
    graph = StateSum(dtype)
    body = graph.compile(x=x, device=from_name("npu2"))
    assert facts(body.plan, PaddedTensor) == [PaddedTensor("s", (100352,), ())]
    assert padded(body.plan) == {"s": ((100001,), (100352,)), "x": ((100001,), (100352,)),
                                 "out0": ((100001,), (100352,))}
    graph.write("s", s)
    body.write("s", s)
    np.testing.assert_array_equal(body(x=x), graph.reference(x=x))


class ReshapedState(iron.Graph):
    """(A @ B) + s, and c written into s through a view that indexes s in another shape."""

    def __init__(self, b):
        self.b, self.s = iron.weight(b), iron.state((509, 509), np.float32, name="s")

    def body(self, a, c):
        Copy.step(c, out=self.s.reshape(509 * 509)[:8])
        return Add.step(MatMul.step(a, self.b), self.s)


class ActThenProduct(iron.Graph):
    """act(A) @ B (SiLU unless given): act's result, another group's, streamed by `stream_elementwise`."""

    act = SiLU

    def __init__(self, b, out=None, act=None):
        self.b, self.out, self.act = iron.weight(b), out, act or self.act

    def body(self, a):
        return MatMul.step(self.act.step(a), self.b, dtype=self.out)


class ExpThenProduct(ActThenProduct):
    """Exp(A) @ B: Exp(0) = 1, so Exp may not stream over A padded (`pad_upstream_zeros`)."""

    act = Exp


@pytest.mark.parametrize("device, cores", [("npu2", 32), ("npu1", 16)])
def test_elementwise_calls_stream_whole_rows_into_the_padded_layout_a_product_reads(device, cores):
    """pad_written_by_producer: Exp(A) @ B at 509^3. Exp(0) = 1, so Exp may not stream over A
    padded (`pad_upstream_zeros`); it streams its result in blocks of whole rows instead, each
    written at the padded row's stride (509 float32 elements of 512), the padding never written;
    the product takes the whole array and equals reference()."""
    a, b = operands(509, 509, 509, np.float32)
    graph = ExpThenProduct(b / 22)
    body = graph.compile(a=a / 4, device=from_name(device))
    assert facts(body.plan, PaddedTensor, PaddedGrid) == [
        PaddedGrid("g1", "MatMul#1", P509, P512, fills=(Fill.WRITTEN, Fill.ZEROS)), PaddedTensor("Exp(a)", (512, 512), ("Exp#0",))]
    assert rule(body.plan, Rule.STREAM_ELEMENTWISE)[0].endswith("streamed in blocks of 509 over 1 tiles (1 rows x 1 "
                                                             "columns of cores), 509 blocks per core")
    assert tiles(body.plan.segments[1]) == cores
    assert_matches(body(a=a / 4), graph.reference(a=a / 4))
    written = cut_padding(body, "cut.Exp#0")
    assert written[:509, :509].any() and not written[509:].any() and not written[:, 509:].any()


WRITTEN_UNPADDED = [
    (ReshapedState, (509, 509), "MatMul#1 is not padded: its result is read by Add(MatMul(a, b), s), which also reads "
                                "a tensor that may not be padded: s is a state s.reshape(259081,)[:8] indexes in another "
                                "shape, whose strides know no padding"),
    (ExpThenProduct, (509, 2053), "MatMul#1 is not padded: Exp(a) is another group's result, streamed by elementwise "
                                  "calls in blocks of whole rows when it lies padded, and a block of one row of 2053 "
                                  "elements takes 32848 bytes, more than 32768"),
]


@pytest.mark.parametrize("design, a, why", WRITTEN_UNPADDED, ids=["reshaped-state", "wide-streamed-rows"])
def test_a_tensor_written_in_a_layout_that_knows_no_padding_is_not_padded_saying_why(design, a, why):
    """A state written through a view of another shape, or a result elementwise calls would
    stream in blocks of one row too large for half a tile, cannot lie padded: the product keeps
    its prime sides, and DoesNotFit says why it is not padded."""
    given = {"a": (a, np.float32)} | ({"c": ((8,), np.float32)} if design is ReshapedState else {})
    with pytest.raises(DoesNotFit) as err:
        design(np.ones(a[::-1], np.float32)).compile(**given, device=from_name("npu2"))
    assert str(err.value).startswith(
        f"{design.__name__} does not fit npu2 even cut into segments: MatMul#1 (group g1) alone is too large for one "
        f"configuration (pad_to_block: {why}). ")


class ProductPlusNorm(iron.Graph):
    """(A @ B) + RMSNorm(C, w): the Add's other input is another group's result."""

    def __init__(self, b, w):
        self.b, self.w = iron.weight(b), iron.weight(w)

    def body(self, a, c):
        return Add.step(MatMul.step(a, self.b), RMSNorm.step(c, self.w))


class ProductOfNorm(iron.Graph):
    """(A @ B) @ RMSNorm(C, w): the second product's B is another group's result."""

    def __init__(self, b, w):
        self.b, self.w = iron.weight(b), iron.weight(w)

    def body(self, a, c):
        return MatMul.step(MatMul.step(a, self.b), RMSNorm.step(c, self.w))


@pytest.mark.parametrize("design, reader", [(ProductPlusNorm, "Add#2"), (ProductOfNorm, "MatMul#2")],
                         ids=["add", "product"])
def test_a_padded_products_reader_reads_another_groups_result_its_producer_wrote_padded(design, reader):
    """pad_written_by_producer with pad_through: the Add streaming over a padded product's layout,
    or the product reading it as A, reads RMSNorm's result as RMSNorm wrote it into the same
    padded layout; both equal reference()."""
    a, b = operands(509, 509, 509, np.float32)
    c = np.random.default_rng(16).standard_normal((509, 509)).astype(np.float32)
    graph = design(b / 22, np.linspace(0.5, 1.5, 509, dtype=np.float32))
    body = graph.compile(a=a / 22, c=c, device=from_name("npu2"))
    assert facts(body.plan, PaddedTensor) == [PaddedTensor("RMSNorm(c, w)", (512, 512), ("RMSNorm#1",))]
    assert rule(body.plan, Rule.FEWEST_BYTES_CUT) == ["cut before g2: 2097152 bytes cross (MatMul#0, RMSNorm#1)"]
    np.testing.assert_allclose(body(a=a / 22, c=c), graph.reference(a=a / 22, c=c), **F32)


class TwoWays(iron.Graph):
    """(A @ B) + s for a (509, 509) A; A + the first rows of s for fewer rows."""

    def __init__(self, b):
        self.b, self.s = iron.weight(b), iron.state((509, 509), np.float32, name="s")

    def body(self, a):
        if a.shape[0] == 509:
            return Add.step(MatMul.step(a, self.b), self.s)
        return Add.step(a, self.s[:a.shape[0]])


def test_versions_sharing_a_state_one_of_them_pads_say_so_instead_of_misreading_it():
    """The versions of a graph share its states' memory: one whose padded call reads s lays it
    out padded, one reading a view of it does not, so the second refuses to run, naming s."""
    graph = TwoWays(np.ones((509, 509), np.float32))
    padded_version = graph.compile(a=((509, 509), np.float32), device=from_name("npu2"))
    plain_version = graph.compile(a=((8, 509), np.float32), device=from_name("npu2"))
    assert padded_version.plan.placement("s").padded == (512, 512) and plain_version.plan.placement("s").padded is None
    np.testing.assert_array_equal(padded_version(a=np.zeros((509, 509), np.float32)), np.zeros((509, 509)))
    with pytest.raises(PlanError) as err:
        plain_version(a=np.ones((8, 509), np.float32))
    assert str(err.value) == (
        "two versions of TwoWays lay state 's' out differently: in (512, 512) in one and (509, 509) in the other "
        "(pad_to_block pads a state for a version whose padded call reads it, pad_written_by_producer), and the "
        "versions share its memory: declare it as (512, 512) and use its first rows and columns, or read it alike in "
        "every version.")


# ---- pad_shared_input: a tensor several padded products read (padshare) ----------------------------

class SharedInput(iron.Graph):
    """Products of one a: (a @ b) + (a @ d) (`joined`), or a @ b, a @ d, a @ e to the host (Q/K/V)."""

    def __init__(self, weights, out=None, joined=True):
        self.names, self.out, self.joined = tuple(weights), out, joined
        for name, w in weights.items():
            setattr(self, name, iron.weight(w))

    def body(self, a):
        products = [MatMul.step(a, getattr(self, name), dtype=self.out) for name in self.names]
        return Add.step(*products) if self.joined else tuple(products)


def small_operand(shape, dtype, seed):
    """Integers in [-3, 3] (int16 sums of 509 stay exact), or normal floats scaled so sums stay near 1."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-3, 4, shape).astype(dtype)
    return (rng.standard_normal(shape) / 22).astype(dtype)


SHARED = [("joined", "npu2", np.float32, None, (509, 509, 509), (512, 512, 512), [32, 16]),
          ("joined", "npu1", np.int8, np.int32, (1000, 257, 509), (1000, 288, 512), [16, 16, 8]),
          ("qkv", "npu2", iron.bfloat16, None, (96, 509, 1021), (96, 512, 1024), [32, 32]),
          ("qkv", "npu1", np.int16, None, (509, 509, 509), (512, 512, 512), [16, 16, 16])]


@pytest.mark.parametrize("design, device, dtype, out, sides, lies, cores", SHARED,
                         ids=["sum-f32-npu2", "sum-int8-npu1", "qkv-bf16-npu2", "qkv-int16-npu1"])
def test_an_input_several_products_read_is_padded_once_to_the_sides_they_all_take(
        design, device, dtype, out, sides, lies, cores):
    """pad_shared_input: a read by two products an Add joins, or by three Q/K/V projections to the
    host, lies padded once on the largest sides the products ask for (int8's K pads to 288 here,
    as float32's would), each product over a grid of many tiles on them; the results equal
    reference() (integers exactly, float32 within F32, bfloat16 within 2e-2)."""
    (m, k, n), (big_m, big_k, big_n) = sides, lies
    names = ("b", "d") if design == "joined" else ("b", "d", "e")
    graph = SharedInput({name: small_operand((k, n), dtype, seed) for seed, name in enumerate(names, 1)}, out,
                        joined=design == "joined")
    a = small_operand((m, k), dtype, 0)
    body = graph.compile(a=a, device=from_name(device))
    labels = tuple(f"MatMul#{i}" for i in range(len(names)))
    assert facts(body.plan, SharedSides) == [SharedSides(("a",), labels, (lies,) * len(labels))]
    assert padded(body.plan)["a"] == ((m, k), (big_m, big_k))
    assert {name: padded(body.plan)[name] for name in names} == {name: ((k, n), (big_k, big_n)) for name in names}
    assert [len(conf.cores) for conf in body.plan.configurations] == cores
    got, want = body(a=a), graph.reference(a=a)
    for got_one, want_one in zip(*((r,) if design == "joined" else r for r in (got, want)), strict=True):
        assert got_one.dtype == want_one.dtype
        if dtype is iron.bfloat16:
            np.testing.assert_allclose(np.float32(got_one), np.float32(want_one), rtol=2e-2, atol=2e-2)
        else:
            assert_matches(got_one, want_one)


class ExpPlusProduct(iron.Graph):
    """(Exp(a @ b) + a @ b) @ b: three calls of one product, a MatMul reading what Exp made of one."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a):
        return MatMul.step(Add.step(Exp.step(MatMul.step(a, self.b)), MatMul.step(a, self.b)), self.b)


def test_products_sharing_an_input_one_of_which_cannot_pad_keep_it_unpadded_naming_them(tmp_path, monkeypatch):
    """Exp(0) = 1, so the padding of Exp(a @ b) + a @ b is not zeros and the last MatMul may not
    sum it: MatMul#0 cannot take the padded layout a and b would share with MatMul#2 and
    MatMul#4, so none is padded and DoesNotFit names the products and why, along the calls the
    layout would pass on through."""
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    ones = np.ones((509, 509), np.float32)
    with pytest.raises(DoesNotFit) as err:
        ExpPlusProduct(ones).compile(a=ones, device=from_name("npu2"))
    assert str(err.value).startswith(
        "ExpPlusProduct does not fit npu2 even cut into segments: MatMul#0 (group g0) alone is too large for one "
        "configuration (pad_to_block: MatMul#0 is not padded: pad_shared_input: a, b read by MatMul#0, MatMul#2, "
        "MatMul#4 stay unpadded: MatMul#0 is not padded: its result is read by Exp(MatMul(a, b)), which makes "
        "Exp(MatMul(a, b)), read by Add(Exp(MatMul(a, b)), MatMul(a, b)), which makes Add(Exp(MatMul(a, b)), "
        "MatMul(a, b)), read by more than the host, views and calls that neither tile nor stream (Exp(MatMul(a, b)) "
        "maps zeros to other values)). ")


# ---- pad_passed_on: a padded layout passed on from elementwise calls to the next ------------------------------

class Squared(iron.Graph):
    """c @ c for c = a, or for c = a @ b when given b: one tensor read as both operands."""

    def __init__(self, b=None):
        self.b = None if b is None else iron.weight(b)

    def body(self, a):
        c = a if self.b is None else MatMul.step(a, self.b)
        return MatMul.step(c, c)


P310, P320 = (310, 310, 310), (320, 320, 320)
SQUARED = [("npu2", False, 509, 32, [PaddedGrid("g0", "MatMul#0", P509, P512)]),
           ("npu1", False, 509, 16, [PaddedGrid("g0", "MatMul#0", P509, P512)]),
           ("npu2", False, 310, 32, [PaddedGrid("g0", "MatMul#0", P310, P320)]),
           ("npu2", True, 509, 32, [PaddedGrid("g0", "MatMul#0", P509, P512), PaddedGrid("g1", "MatMul#1", P509, P512)]),
           ("npu1", True, 509, 16, [PaddedGrid("g0", "MatMul#0", P509, P512), PaddedGrid("g1", "MatMul#1", P509, P512)]),
           ("npu2", True, 310, 32, [PaddedGrid("g0", "MatMul#0", P310, (320, 310, 320)),
                                    PaddedGrid("g1", "MatMul#1", P310, P320)])]


@pytest.mark.parametrize("device, product, n, cores, lines", SQUARED,
                         ids=["a-509-npu2", "a-509-npu1", "a-310-npu2", "c-509-npu2", "c-509-npu1", "c-310-npu2"])
def test_a_tensor_read_as_both_operands_lies_in_one_square_padded_layout(device, product, n, cores, lines):
    """pad_square: a @ a reads a as A (M, K) and as B (K, N), so M, K and N are padded alike, each
    to the largest of the sides the product asks for (at 310, (310, 310, 320) on its own: all 320);
    c @ c for c = a @ b pads c's M and N alike (at 310: M to 320 as well), so the next product
    reads it as both operands as it lies. Each grid takes the whole device; equal to reference()."""
    a, b = operands(n, n, n, np.float32)
    a, b = a / 17, b / 17
    graph = Squared(b if product else None)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid) == lines
    assert [tiles(s) for s in body.plan.configurations] == [cores] * len(lines)
    side = -(-n // 32) * 32 if n == 310 else 512
    assert padded(body.plan)["out0"] == ((n, n), (side, side))
    assert padded(body.plan)["a"][1][0] == side
    assert same_kind_of_mlir(body.plan)
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


class ActivatedAndPlain(iron.Graph):
    """ReLU(a @ b) + a @ b: two calls of one product, one read through an activation; `out`
    widens the products (int8 -> int32)."""

    def __init__(self, b, out=None):
        self.b, self.out = iron.weight(b), out

    def body(self, a):
        return Add.step(ReLU.step(MatMul.step(a, self.b, dtype=self.out)), MatMul.step(a, self.b, dtype=self.out))


PASSED_ON = through("Add#3", "g3", products=("MatMul#0", "MatMul#2"), rule=Rule.PAD_PASSED_ON)


@pytest.mark.parametrize("device, dtype, out", [("npu2", np.float32, None), ("npu1", np.float32, None),
                                                ("npu2", np.int8, np.int32), ("npu1", np.int8, np.int32)],
                         ids=["f32-npu2", "f32-npu1", "int8-npu2", "int8-npu1"])
def test_an_activations_padded_result_passes_its_layout_on_to_the_next_elementwise_group(device, dtype, out):
    """pad_passed_on: ReLU(a @ b) + a @ b at 509^3 (a prime): ReLU streams over the first
    product's padded layout, and Add over ReLU's result as it lies, joined with the second
    product (pad_joined); a and b lie padded once for both (pad_shared_input). The result equals
    reference() (float32 within F32, int8 -> int32 exactly)."""
    a, b = operands(509, 509, 509, dtype)
    graph = ActivatedAndPlain(b / 22 if out is None else b, out)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedStream)[-1] == PASSED_ON
    assert {name: padded(body.plan)[name] for name in ("a", "b", "cut.ReLU#1", "cut.MatMul#2", "out0")} == {
        "a": ((509, 509), (512, 512)), "b": ((509, 509), (512, 512)), "cut.ReLU#1": ((509, 509), (512, 512)),
        "cut.MatMul#2": ((509, 509), (512, 512)), "out0": ((509, 509), (512, 512))}
    assert same_kind_of_mlir(body.plan)
    got, want = body(a=a), graph.reference(a=a)
    assert got.dtype == want.dtype
    assert_matches(got, want)


class GatedMLP(iron.Graph):
    """(SiLU(x @ g) * (x @ u)) @ d: a transformer's gated MLP."""

    def __init__(self, g, u, d):
        self.g, self.u, self.d = iron.weight(g), iron.weight(u), iron.weight(d)

    def body(self, x):
        return MatMul.step(Mul.step(SiLU.step(MatMul.step(x, self.g)), MatMul.step(x, self.u)), self.d)


GATED = [("npu2", (509, 509, 509), (512, 512)), ("npu1", (509, 509, 509), (512, 512)),
         ("npu2", (257, 1000, 300), (288, 300))]


@pytest.mark.parametrize("device, sides, lies", GATED, ids=["509-npu2", "509-npu1", "257x1000x300-npu2"])
def test_a_gated_mlp_at_prime_sides_passes_the_padded_layout_on_to_the_last_product(device, sides, lies):
    """pad_passed_on, then pad_through_zeros: SiLU streams over x @ g's padded layout, Mul over
    SiLU's result as it lies, joined with x @ u, and the last product reads Mul's result as its
    padded A, whose padding is zeros as SiLU and Mul keep zeros; equal to reference()."""
    m, k, n = sides
    x, g = operands(m, k, n, np.float32)
    u, d = operands(k, n, k, np.float32, seed=3)[0], operands(n, n, k, np.float32, seed=4)[1]
    graph = GatedMLP(g / 22, u / 22, d / 22)
    body = graph.compile(x=x, device=from_name(device))
    assert facts(body.plan, PaddedStream)[-1] == through("Mul#3", "g3", (m, n), lies, ("MatMul#0", "MatMul#2"),
                                                         Rule.PAD_PASSED_ON)
    assert facts(body.plan, KeptZeros) == [
        KeptZeros("g3", ("SiLU#1", "Mul#3"), "Mul(SiLU(MatMul(x, g)), MatMul(x, u))", lies, ("MatMul#4 as A",))]
    last = facts(body.plan, PaddedGrid)[-1]   # K padded only where Mul's result lies wider
    assert (last.call, last.fills[0], last.sides[1] != n) == ("MatMul#4", Fill.KEPT, lies[1] != n)
    assert padded(body.plan)["cut.Mul#3"] == ((m, n), lies)
    assert same_kind_of_mlir(body.plan)
    np.testing.assert_allclose(body(x=x), graph.reference(x=x), **F32)
    kept = cut_padding(body, "cut.Mul#3")
    assert kept[:m, :n].any() and not kept[m:].any() and not kept[:, n:].any()


@pytest.mark.parametrize("device, dtype, tiles", [("npu2", np.float32, 32), ("npu1", np.float32, 16),
                                                  ("npu2", np.int16, 32)], ids=["f32-npu2", "f32-npu1", "int16-npu2"])
def test_a_product_of_two_padded_products_of_one_input_reads_both_as_they_lie(device, dtype, tiles):
    """pad_through_matmul of both operands: (a @ b) @ (a @ d) at 509^3. a lies padded once for
    both products (pad_shared_input); the last product reads both as they lie, their padding
    zeros in both operands, and equals reference()."""
    a, b = operands(509, 509, 509, dtype)
    d = operands(509, 509, 509, dtype, seed=3)[1]
    if dtype == np.int16:
        a, b, d = a % 3 - 1, b % 3 - 1, d % 3 - 1   # int16 sums of sums stay in range
    else:
        a, b, d = a / 22, b / 22, d / 22
    graph = ProductOfProducts(b, d)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid)[2] == chained("g2", "MatMul#2")
    assert len({c.tile for c in body.plan.segments[-1].cores if c.tile.kind is TileKind.COMPUTE}) == tiles
    assert {name: padded(body.plan)[name] for name in ("cut.MatMul#0", "cut.MatMul#1", "out0")} == {
        "cut.MatMul#0": ((509, 509), (512, 512)), "cut.MatMul#1": ((509, 509), (512, 512)),
        "out0": ((509, 509), (512, 512))}
    assert same_kind_of_mlir(body.plan)
    assert_matches(body(a=a), graph.reference(a=a))


def test_two_products_a_product_reads_agree_its_k_as_the_first_ones_n_and_the_seconds_m():
    """At 310^3 each product on its own pads N alone (to 320); the last product's K is the first
    one's N and the second one's M, so pad_shared_input unifies them and pads M to 320 for both
    (through a, whose M both read): every layout agrees and the result equals reference(). (At
    300^3 the cost model keeps every product's own sides: 82 us per call against 266 padded.)"""
    a, b = operands(310, 310, 310, np.float32)
    d = operands(310, 310, 310, np.float32, seed=3)[1]
    a, b, d = a / 17, b / 17, d / 17
    graph = ProductOfProducts(b, d)
    body = graph.compile(a=a, device=from_name("npu2"))
    assert facts(body.plan, SharedSides) == [
        SharedSides(("a",), ("MatMul#0", "MatMul#1"), ((320, 310, 320), (320, 310, 320)), ("MatMul#2",))]
    assert padded(body.plan) == {"a": ((310, 310), (320, 310)), "b": ((310, 310), (310, 320)),
                                 "d": ((310, 310), (310, 320)), "cut.MatMul#0": ((310, 310), (320, 320)),
                                 "cut.MatMul#1": ((310, 310), (320, 320)), "out0": ((310, 310), (320, 320))}
    assert [tiles(s) for s in body.plan.segments] == [28, 32]
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


@pytest.mark.parametrize("device, tiles", [("npu2", 32), ("npu1", 16)])
def test_a_product_of_two_products_reading_nothing_in_common_agrees_their_layouts_through_its_k(device, tiles):
    """(a @ b) @ (c @ d) at 509^3: the products share no tensor, but the last product's K is the
    first one's N and the second one's M, so pad_shared_input lays them out alike through it;
    every product runs over a grid on its padded sides and the result equals reference()."""
    a, b = operands(509, 509, 509, np.float32)
    c, d = operands(509, 509, 509, np.float32, seed=3)
    a, b, c, d = a / 22, b / 22, c / 22, d / 22
    graph = ProductOfProducts(b, d)
    body = graph.compile(a=a, c=c, device=from_name(device))
    assert facts(body.plan, SharedSides) == [SharedSides((), ("MatMul#0", "MatMul#1"), (P512, P512), ("MatMul#2",))]
    assert {name: padded(body.plan)[name] for name in ("a", "c", "cut.MatMul#0", "cut.MatMul#1", "out0")} == {
        name: ((509, 509), (512, 512)) for name in ("a", "c", "cut.MatMul#0", "cut.MatMul#1", "out0")}
    assert facts(body.plan, PaddedGrid)[2] == chained("g2", "MatMul#2")
    assert len({c.tile for c in body.plan.segments[-1].cores if c.tile.kind is TileKind.COMPUTE}) == tiles
    assert same_kind_of_mlir(body.plan)
    assert_matches(body(a=a, c=c), graph.reference(a=a, c=c))


def test_a_product_of_two_products_one_also_returned_is_refused_saying_why(tmp_path, monkeypatch):
    """The host reads c @ d too, so the MatMul reading both products may not read it padded:
    pad_shared_input leaves both unpadded, and DoesNotFit says why."""
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    ones = np.ones((509, 509), np.float32)
    with pytest.raises(DoesNotFit) as err:
        ProductOfProducts(ones, ones, second_returned=True).compile(a=ones, c=ones, device=from_name("npu2"))
    assert str(err.value).startswith(
        "ProductOfProducts does not fit npu2 even cut into segments: MatMul#0 (group g0) alone is too large for one "
        "configuration (pad_to_block: MatMul#0 is not padded: pad_shared_input: MatMul#0, MatMul#1, read as A and B "
        "by MatMul#2, stay unpadded: MatMul#0 is not padded: its result is read by "
        "MatMul(MatMul(a, b), MatMul(c, d)), which also reads a tensor that may not be padded: MatMul(c, d) is a "
        "padded product read elsewhere too). ")


class Reads(iron.Graph):
    """Designs whose products share a tensor: `how` picks the body."""

    def __init__(self, how, **weights):
        self.how = how
        for name, w in weights.items():
            setattr(self, name, iron.weight(w))

    def body(self, a):
        if self.how == "same product":   # (a @ b) + (a @ b): a and b both shared
            return Add.step(MatMul.step(a, self.b), MatMul.step(a, self.b))
        if self.how == "normed":         # RMSNorm(a) read by two products (pad_written_by_producer)
            x = RMSNorm.step(a, self.w)
            return MatMul.step(x, self.b), MatMul.step(x, self.d)
        if self.how == "as A and as B":  # a @ b and c @ a: a's M and K are the second product's K and N
            return MatMul.step(a, self.b), MatMul.step(self.c, a)
        return Add.step(MatVec.step(self.m, a[0]), MatVec.step(self.m, a[1]))   # "vectors"


READS = [("same product", "a, b", "MatMul#0, MatMul#1", [32, 16]),
         ("normed", "RMSNorm(a, w)", "MatMul#1, MatMul#2", [1, 32]),
         ("as A and as B", "a", "MatMul#0, MatMul#1", [32])]


@pytest.mark.parametrize("how, shared, labels, cores", READS, ids=["same", "normed", "a-and-b"])
def test_a_tensor_shared_twice_by_one_product_by_a_producers_result_or_as_a_and_b_is_padded_once(
        how, shared, labels, cores):
    """pad_shared_input at 509^3 float32 on npu2: two calls of one product share a and b; two
    products share RMSNorm's result, which its group writes in the user's region of the padded
    layout; a product reads a as A and another as B, unifying A's M and K with the second's K
    and N. Each lies padded once to 512 x 512, every product over a grid, results within F32."""
    ws = {"b": (509, 509), "d": (509, 509), "c": (509, 509), "w": (509,)}
    graph = Reads(how, **{name: small_operand(shape, np.float32, seed) for seed, (name, shape) in enumerate(ws.items(), 1)})
    a = small_operand((509, 509), np.float32, 0)
    body = graph.compile(a=a, device=from_name("npu2"))
    calls = tuple(labels.split(", "))
    assert facts(body.plan, SharedSides) == [SharedSides(tuple(shared.split(", ")) if "(" not in shared else (shared,),
                                                         calls, (P512,) * len(calls))]
    assert [len(conf.cores) for conf in body.plan.configurations] == cores
    got, want = body(a=a), graph.reference(a=a)
    for got_one, want_one in zip(*((r,) if how == "same product" else r for r in (got, want)), strict=True):
        assert_matches(got_one, want_one)


def test_a_matrix_two_matvecs_read_stays_unpadded_when_one_reads_a_view_and_describe_says_why():
    """Two MatVecs of one m over rows of a (views): a view may not be padded, so m keeps its
    4099 rows for both, describe() names them and why, and the design still equals reference()."""
    graph = Reads("vectors", m=small_operand((4099, 509), np.float32, 1))
    a = small_operand((2, 509), np.float32, 0)
    body = graph.compile(a=a, device=from_name("npu2"))
    assert facts(body.plan, SharedSides) == [SharedSides(("m",), ("MatVec#0", "MatVec#1"), ((4352, 512, 1),) * 2,
                                                         why="MatVec#0 is not padded: a[0] is a view")]
    assert "pad_shared_input: m read by MatVec#0, MatVec#1 stay unpadded: MatVec#0 is not padded: a[0] is a view" in \
        describe(body.plan)
    assert "m" not in padded(body.plan)
    assert_matches(body(a=a), graph.reference(a=a))


# ---- pad_through_zeros, pad_upstream_zeros: elementwise calls that keep zeros (Kernel.keeps_zeros) -------------

class ProductOfAct(iron.Graph):
    """act(A @ B) @ D: the activation's result is the second product's A."""

    def __init__(self, act, b, d, **attrs):
        self.act, self.attrs, self.b, self.d = act, attrs, iron.weight(b), iron.weight(d)

    def body(self, a):
        return MatMul.step(self.act.step(MatMul.step(a, self.b), **self.attrs), self.d)


ACTS = [("npu2", SiLU, {}, (509, 509, 509), np.float32, (512, 512), [32] * 3),
        ("npu1", SiLU, {}, (509, 509, 509), np.float32, (512, 512), [16] * 3),
        ("npu2", ReLU, {}, (1000, 257, 509), np.float32, (1000, 512), [32] * 3),
        ("npu1", Scale, {"factor": 0.5}, (96, 509, 1021), np.float32, (96, 1024), [16] * 3),
        ("npu2", SiLU, {}, (96, 509, 1021), BF16, (96, 1024), [32] * 3),
        ("npu2", SiLU, {}, (257, 1000, 300), np.float32, (288, 300), [24, 32, 32])]


@pytest.mark.parametrize("device, act, attrs, sides, dtype, lies, cores", ACTS,
                         ids=["silu-npu2", "silu-npu1", "relu-1000x257x509", "scale-96x509x1021", "silu-bf16",
                              "silu-257x1000x300"])
def test_a_product_of_an_activation_that_keeps_zeros_reads_it_padded(device, act, attrs, sides, dtype, lies, cores):
    """pad_through_zeros: act(A @ B) @ D, act keeping zeros (act(0) = 0): the activation's padding,
    computed from A @ B's zero padding, is zeros, so the second product reads it padded as its A
    (its N padding the second's K padding); each group takes the cores its grid divides (the whole array but the first product of N = 300 on its own sides, 24) and the result
    equals reference(); the padding of the activation's result, as it crosses the cut, is zeros."""
    (m, k, n), label = sides, f"{act.__name__}#1"
    a, b = operands(m, k, n, np.float32)
    d = operands(n, n, k, np.float32, seed=3)[1]
    graph = ProductOfAct(act, (b / 8).astype(dtype), (d / 8).astype(dtype), **attrs)
    a = a.astype(dtype)
    body = graph.compile(a=a, device=from_name(device))
    what = f"{act.__name__}(MatMul(a, b))"
    assert facts(body.plan, KeptZeros) == [KeptZeros("g1", (label,), what, lies, ("MatMul#2 as A",))]
    assert facts(body.plan, PaddedGrid)[-1].fills[0] is Fill.KEPT
    assert [tiles(s) for s in body.plan.segments] == cores
    assert same_kind_of_mlir(body.plan)
    assert padded(body.plan)[f"cut.{label}"] == ((m, n), lies)
    assert_matches(body(a=a), graph.reference(a=a))
    kept = cut_padding(body, f"cut.{label}")
    assert kept[:m, :n].any() and not kept[m:].any() and not kept[:, n:].any()


def test_a_product_of_an_activation_that_does_not_keep_zeros_is_refused_with_the_kernel():
    """Exp(0) = 1: Exp(A @ B)'s padding is ones, which a product would sum as data, so A @ B
    keeps its sides and DoesNotFit says which call maps zeros to other values."""
    a, b = operands(509, 509, 509, np.float32)
    with pytest.raises(DoesNotFit) as err:
        ProductOfAct(Exp, b, b).compile(a=a, device=from_name("npu2"))
    assert ("(pad_to_block: MatMul#0 is not padded: its result is read by Exp(MatMul(a, b)), which makes "
            "Exp(MatMul(a, b)), read by more than the host, views and calls that neither tile nor stream "
            "(Exp(MatMul(a, b)) maps zeros to other values))") in str(err.value)


UPSTREAM = [("npu2", ReLU, np.float32, None, (509, 509, 509), (512, 512), 32),
            ("npu1", SiLU, np.float32, None, (509, 509, 509), (512, 512), 16),
            ("npu2", ReLU, BF16, None, (509, 509, 509), (512, 512), 32),
            ("npu1", ReLU, np.int8, np.int32, (509, 509, 509), (512, 512), 16),
            ("npu2", ReLU, np.int16, None, (1000, 257, 509), (1000, 288), 32),
            ("npu1", ReLU, BF16, None, (96, 509, 1021), (96, 512), 16),
            ("npu2", ReLU, np.int8, np.int32, (96, 509, 1021), (96, 512), 32),
            ("npu2", SiLU, np.float32, None, (509, 2053, 509), (512, 2080), 32)]


@pytest.mark.parametrize("device, act, dtype, out, sides, lies, cores", UPSTREAM,
                         ids=["f32-npu2", "silu-f32-npu1", "bf16-npu2", "int8-npu1", "int16-1000x257x509",
                              "bf16-96x509x1021", "int8-96x509x1021", "silu-wide-rows"])
def test_an_activation_that_keeps_zeros_of_a_padded_products_input_streams_over_its_padded_layout(
        device, act, dtype, out, sides, lies, cores):
    """pad_upstream_zeros: act(A) @ B, act keeping zeros, streams over A padded with zeros as the
    product reads it, its result's padding zeros (as it crosses the cut), rather than writing its
    result row by row into that layout (pad_written_by_producer: 509 float32 rows of a prime
    count took one tile), and where it could not: A's rows not whole words (509 bfloat16), or a row too large to stream whole rows (2053 float32);
    both take the whole array and equal reference() (integers exactly)."""
    (m, k, n), label = sides, f"{act.__name__}#0"
    a, b = operands(m, k, n, dtype)
    graph = ActThenProduct(b, out, act)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedStream) == [PaddedStream("g0", label, (m, k), lies, Rule.PAD_UPSTREAM_ZEROS)]
    assert facts(body.plan, KeptZeros) == [KeptZeros("g0", (label,), f"{act.__name__}(a)", lies, ("MatMul#1 as A",))]
    assert [tiles(s) for s in body.plan.segments] == [cores, cores]
    assert same_kind_of_mlir(body.plan)
    assert padded(body.plan)["a"] == ((m, k), lies)
    assert_matches(body(a=a), graph.reference(a=a))
    kept = cut_padding(body, f"cut.{label}")
    assert kept[:m, :k].any() and not kept[m:].any() and not kept[:, k:].any()


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_an_activation_of_a_padded_products_input_that_does_not_keep_zeros_streams_with_k_kept(device):
    """Exp(0) = 1 would be summed as K's padding, so the product keeps K = 509 (`tail_kept`) and
    Exp(A) streams over A's rows padded after the last, as the product reads it (509 bfloat16
    elements a row, 259081 in all, have no whole blocks; before: DoesNotFit); equal to reference()."""
    a, b = operands(509, 509, 509, BF16)
    graph = ExpThenProduct(b / 22)
    body = graph.compile(a=a / 4, device=from_name(device))
    assert padded(body.plan)["a"] == ((509, 509), (512, 509))
    assert [(f.call, f.own, f.lies) for f in facts(body.plan, PaddedStream)] == [("Exp#0", (509, 509), (512, 509))]
    assert_matches(body(a=a / 4), graph.reference(a=a / 4))


class ProductIntoState(iron.Graph):
    """C = A @ B written into a state of C's shape (out= the state, or a view of all of it);
    returns two of its rows summed."""

    def __init__(self, b, whole_view):
        self.b = iron.weight(b)
        self.s = iron.state(b.shape, b.dtype, name="s")
        self.whole_view = whole_view

    def body(self, a):
        MatMul.step(a, self.b, out=self.s[:, :] if self.whole_view else self.s)
        return Add.step(self.s[0], self.s[-1])


INTO_STATE = [(512, "npu2", True, 16), (512, "npu1", False, 8), (509, "npu2", False, 16), (509, "npu1", True, 8)]


@pytest.mark.parametrize("side, device, whole_view, cores", INTO_STATE)
def test_a_large_matmul_writing_a_whole_state_runs_over_the_array_into_the_state(side, device, whole_view, cores):
    """The grid's C blocks go to the state's DDR buffer (it crashed in the streamed-rows core); at
    a prime side the state lies padded to the grid's sides like an output, its padding computed
    from zeros, and the host reads its user's region. One tile is left to the Add."""
    a, b = operands(side, side, side, np.float32, seed=3)
    graph = ProductIntoState(b, whole_view)
    body = ProductIntoState(b, whole_view).compile(a=a, device=from_name(device))
    assert chosen(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == {"g0": "m=64 k=8 n=64"}
    assert len([c for c in body.plan.cores if c.group == "g0"]) == cores
    if side == 512:
        assert padded(body.plan) == {} and facts(body.plan, PaddedGrid) == []
    else:
        assert padded(body.plan) == {name: ((509, 509), (512, 512)) for name in ("a", "b", "s")}
        assert facts(body.plan, PaddedGrid) == [chained("g0", "MatMul#0")]
    assert same_kind_of_mlir(body.plan)
    assert_matches(body(a=a), graph.reference(a=a))
    assert_matches(body.read("s"), graph.read("s"))
    if side == 509:
        stored = cut_padding(body, "s")
        assert not stored[509:].any() and not stored[:, 509:].any()


class ProductLoggedNextStep(iron.Graph):
    """Each step writes A @ B into a state, which persists from step to step, and logs its row
    508 at the carried step."""

    def __init__(self, a, b, steps):
        self.a, self.b = iron.param(a), iron.weight(b)
        self.s = iron.state(b.shape, np.float32, name="s")
        self.log = iron.state((steps, b.shape[1]), np.float32, name="log")

    def body(self, *, step: Carried[np.int32]):
        MatMul.step(self.a, self.b, out=self.s)
        Copy.step(self.s[508], self.log[step])
        return iron.carry(step=step + 1)


def test_a_carried_loop_runs_a_padded_grid_writing_a_state_at_depth_2():
    """npu2: npu1 has no full ELF, so no device loop."""
    a, b = operands(509, 509, 509, np.float32, seed=5)
    steps = 4
    body = ProductLoggedNextStep(a, b, steps).compile(device=from_name("npu2"))
    assert padded(body.plan)["s"] == ((509, 509), (512, 512))
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps - 1, step=0)) == list(range(steps - 1))
    assert dict(loop.carry) == {"step": steps}
    np.testing.assert_allclose(body.read("log"), np.tile((a @ b)[508], (steps, 1)), **F32)
    np.testing.assert_allclose(body.read("s"), a @ b, **F32)


class ProductIntoRows(iron.Graph):
    """C = A @ B written into rows `first`.. of a taller state."""

    def __init__(self, b, rows, first):
        self.b, self.first = iron.weight(b), first
        self.s = iron.state((rows, b.shape[1]), b.dtype, name="s")

    def body(self, a):
        MatMul.step(a, self.b, out=self.s[self.first:self.first + a.shape[0]])
        return Add.step(self.s[self.first], self.s[-1])


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_large_matmul_writing_rows_of_a_state_runs_over_the_array_into_them(device):
    a, b = operands(512, 512, 512, np.float32, seed=4)
    graph = ProductIntoRows(b, 1024, 256)
    body = ProductIntoRows(b, 1024, 256).compile(a=a, device=from_name(device))
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY)[0].startswith(
        "g0: MatMul (512, 512) x (512, 512) float32 -> float32 over ")
    assert_matches(body(a=a), graph.reference(a=a))
    assert_matches(body.read("s"), graph.read("s"))
    assert not body.read("s")[:256].any() and not body.read("s")[768:].any()


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_matmul_streaming_its_rows_of_a_writes_its_state(device):
    """A (80, 64) float32 takes more than a core's share, B and C little: A streams in blocks of
    rows into a state (it crashed: the streamed block had no home for a state's result)."""
    a, b = operands(80, 64, 4, np.float32, seed=6)
    graph = ProductIntoRows(b, 80, 0)
    body = ProductIntoRows(b, 80, 0).compile(a=a, device=from_name(device))
    assert rule(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == [] and body.plan.configurations[0].cores
    assert_matches(body(a=a), graph.reference(a=a))
    assert_matches(body.read("s"), a @ b)


def test_a_prime_matmul_writing_part_of_a_state_is_refused_naming_why_it_is_not_padded():
    a, b = operands(509, 509, 509, np.float32)
    with pytest.raises(DoesNotFit) as e:
        ProductIntoRows(b, 1018, 0).compile(a=a, device=from_name("npu2"))
    assert "(pad_to_block: MatMul#0 is not padded: it writes part of a state)" in str(e.value)
    assert str(e.value).endswith("pad_to_block did not pad it: it writes part of a state. Pad the matrices with "
                                 "zeros to sides with larger divisors (M = 512, K = 512, N = 512), or cut the call "
                                 "into several.")


class ProjectionIntoState(iron.Graph):
    def __init__(self, w):
        self.w = iron.weight(w)
        self.s = iron.state((w.shape[0],), w.dtype, name="s")

    def body(self, x):
        MatVec.step(self.w, x, out=self.s)
        return Add.step(self.s[0:8], self.s[-8:])


def test_a_matvec_of_4099_rows_writing_a_state_pads_the_state_over_the_array():
    rng = np.random.default_rng(8)
    w, x = rng.standard_normal((4099, 256)).astype(np.float32), rng.standard_normal(256).astype(np.float32)
    graph = ProjectionIntoState(w)
    body = ProjectionIntoState(w).compile(x=x, device=from_name("npu2"))
    assert facts(body.plan, PaddedGrid) == [PaddedGrid("g0", "MatVec#0", (4099, 256, 1), (4352, 256, 1))]
    assert padded(body.plan)["s"] == ((4099,), (4352,))
    assert same_kind_of_mlir(body.plan)
    assert_matches(body(x=x), graph.reference(x=x))
    assert_matches(body.read("s"), w @ x)


# ---- odd element counts of 8- and 16-bit types -----------------------------------------------------

class TwoActivations(iron.Graph):
    def body(self, x):
        return Exp.step(x), ReLU.step(x)


@pytest.mark.parametrize("device, length, cores", [("npu2", 67584, (24, 8)), ("npu1", 66560, (8, 8))])
def test_an_input_two_streamed_groups_read_is_padded_once_for_both(device, length, cores):
    """Exp(x) and ReLU(x) of 65537 bfloat16 elements (no block of whole words) were refused while x
    was read by two groups; pad_shared_stream pads x once, both groups stream over it (in one
    configuration, the first leaving a column to the second: columns_for_later_groups), and both
    results equal reference()."""
    x = np.random.default_rng(21).standard_normal(65537).astype(BF16)
    graph = TwoActivations()
    body = graph.compile(x=x, device=from_name(device))
    assert facts(body.plan, PaddedTensor) == [PaddedTensor("x", (length,), ("Exp#0", "ReLU#1"), Rule.PAD_SHARED_STREAM)]
    assert facts(body.plan, PaddedStream) == [PaddedStream(f"g{i}", label, (65537,), (length,))
                                              for i, label in enumerate(["Exp#0", "ReLU#1"])]
    assert [int(text.split(" over ")[-1].split(" tiles")[0]) for text in rule(body.plan, Rule.STREAM_ELEMENTWISE)] \
        == list(cores)
    assert padded(body.plan) == {"x": ((65537,), (length,)), "out0": ((65537,), (length,)),
                                 "out1": ((65537,), (length,))}
    assert same_kind_of_mlir(body.plan)
    for got, want in zip(body(x=x), graph.reference(x=x)):
        assert got.shape == (65537,)
        assert_matches(got, want)


class ActivationAndProjection(iron.Graph):
    def __init__(self):
        self.w = iron.weight(np.ones((8, 65537), BF16))

    def body(self, x):
        return Exp.step(x), MatVec.step(self.w, x)


def test_an_input_a_stream_shares_with_a_call_that_does_not_stream_is_not_padded_saying_why(tmp_path, monkeypatch):
    """x is read by Exp (a stream) and by a MatVec: pad_shared_stream pads it for every group
    reading it or for none, so Exp over 65537 bfloat16 elements has no block: DoesNotFit naming
    the rule, nothing cached."""
    assert refusal(ActivationAndProjection(), tmp_path, monkeypatch, x=((65537,), BF16)).startswith(
        "ActivationAndProjection does not fit npu2 even cut into segments: Exp#0 (group g0) alone is too large for one "
        "configuration (pad_to_block: MatVec#1 reads an input of g0 too and does not stream, and pad_shared_stream "
        "pads an input for every group reading it or for none). ")


class ProductArgmax(iron.Graph):
    def body(self, x, y):
        return Argmax.step(Mul.step(x, y))


@pytest.mark.parametrize("device, length, cores", [("npu2", 61440, 16), ("npu1", 60416, 8)])
def test_an_argmax_of_a_padded_stream_reads_only_the_users_region(device, length, cores):
    """Mul of 60001 int8 elements streams padded to whole words; the Argmax reading its result (a
    row of 60001: 65537 int8 would be a row wider than a tile, DoesNotFit) reads only its user's
    region, so on negative data the padding's zeros never win: equal to reference() exactly."""
    rng = np.random.default_rng(22)
    x, y = rng.integers(-100, -1, 60001).astype(np.int8), rng.integers(1, 2, 60001).astype(np.int8)
    x[-7] = -1   # the maximum, near the end of the user's region
    graph = ProductArgmax()
    body = graph.compile(x=x, y=y, device=from_name(device))
    assert facts(body.plan, Region) == [Region("g1", ("Argmax#1",), "Mul(x, y)", (length,), Rule.PAD_ROW_REGION)]
    assert facts(body.plan, PaddedStream) == [PaddedStream("g0", "Mul#0", (60001,), (length,))]
    assert same_kind_of_mlir(body.plan)
    got = body(x=x, y=y)
    assert int(got) == int(graph.reference(x=x, y=y)) == 59994


class ActivatedIntoState(iron.Graph):
    def __init__(self, p):
        self.p = iron.param(p)
        self.acc = iron.state(p.shape, p.dtype, name="acc")

    def body(self, *, step: Carried[np.int32]):
        Accumulate.step(ReLU.step(self.p), out=self.acc)
        return iron.carry(step=step + 1)


@pytest.mark.parametrize("device, length, cores", [("npu2", 67584, 12), ("npu1", 66560, 8)])
def test_a_stream_into_a_whole_state_of_an_odd_length_pads_the_state(device, length, cores):
    """ReLU of a 65537-element bfloat16 param accumulated into a state of as many: the state lies
    padded with the param, the stream writes it whole (its padding its own), and after 3 calls,
    host-driven and as a CarriedLoop (npu2's full ELF), it equals reference()'s."""
    p = np.random.default_rng(23).standard_normal(65537).astype(BF16)
    graph = ActivatedIntoState(p)
    body = graph.compile(device=from_name(device))
    assert facts(body.plan, PaddedStream) == [PaddedStream("g0", "Accumulate#1", (65537,), (length,))]
    assert padded(body.plan) == {"p": ((65537,), (length,)), "acc": ((65537,), (length,))}
    assert same_kind_of_mlir(body.plan)
    for step in range(3):
        assert body(step=step) == graph.reference(step=step)
    assert_matches(body.read("acc"), graph.read("acc"))
    assert_matches(graph.read("acc"), 3 * np.maximum(p, 0))
    if not from_name(device).full_elf:   # npu1 has no device loop: host-driven only
        return
    body.write("acc", np.zeros(65537, BF16))
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(2, step=0)) == [0, 1]
    assert dict(loop.carry) == {"step": 3}
    assert_matches(body.read("acc"), graph.read("acc"))


class RequantizedProduct(iron.Graph):
    def __init__(self, b):
        self.b = iron.param(b)

    def body(self, a):
        return Requantize.step(MatMul.step(a, self.b, dtype=np.int32), shift=5)


@pytest.mark.parametrize("device, cores", [("npu2", 32), ("npu1", 16)])
def test_a_product_padded_in_k_only_keeps_its_result_whoever_reads_it(device, cores):
    """int8 (64, 4097) @ (4097, 64) into int32 pads only K (4097 -> 4128): its result keeps its
    shape, so the Requantize reading it (which does not stream) does not stop the padding
    (pad_k_only); equal to reference() exactly."""
    rng = np.random.default_rng(24)
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in ((64, 4097), (4097, 64)))
    graph = RequantizedProduct(b)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid) == [PaddedGrid("g0", "MatMul#0", (64, 4097, 64), (64, 4128, 64), Rule.PAD_K_ONLY)]
    assert tiles(body.plan.segments[0] if body.plan.segments else body.plan) == cores
    assert padded(body.plan) == {"b": ((4097, 64), (4128, 64)), "a": ((64, 4097), (64, 4128))}
    assert same_kind_of_mlir(body.plan)
    got, want = body(a=a), graph.reference(a=a)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_one_row_bfloat16_matvec_pads_m_to_one_word_not_a_block_per_core(device):
    """A (1, 65537) bfloat16 MatVec's one result is not a whole word: pad_m_to_words pads M to 2,
    not to 8 rows per core (256 rows on npu2: 33 MB of padded matrix), and describe() says the
    bytes; equal to reference() within bfloat16's tolerance."""
    rng = np.random.default_rng(25)
    w, x = rng.standard_normal((1, 65537)).astype(BF16), rng.standard_normal(65537).astype(BF16)
    graph = Projection(w)
    body = graph.compile(x=x, device=from_name(device))
    assert facts(body.plan, PaddedGrid) == [
        PaddedGrid("g0", "MatVec#0", (1, 65537, 1), (2, 65568, 1), Rule.PAD_M_TO_WORDS)]
    assert padded(body.plan) == {"w": ((1, 65537), (2, 65568)), "x": ((65537,), (65568,)), "out0": ((1,), (2,))}
    assert same_kind_of_mlir(body.plan)
    assert_matches(body(x=x), graph.reference(x=x))


class ProductOfView(iron.Graph):
    """MatMul.step(view of a, b) for an input a and a param b (509 or 512 square): `view` is
    "a[1:]" (a of one row more) or "a.reshape" (a flat)."""

    def __init__(self, b, view):
        self.b, self.view = iron.param(b), view

    def body(self, a):
        return MatMul.step(a[1:] if self.view == "a[1:]" else a.reshape(-1, self.b.shape[0]), self.b)


@pytest.mark.parametrize("device, view, a_shape, copy_tiles, grid", [
    ("npu2", "a[1:]", (510, 509), 1, (509, 32)), ("npu1", "a[1:]", (510, 509), 1, (509, 16)),
    ("npu2", "a.reshape", (510 * 509,), 6, (510, 32)), ("npu2", "a[1:]", (513, 512), None, (512, 16)),
    ("npu1", "a[1:]", (513, 512), None, (512, 8)),
], ids=["prime-npu2", "prime-npu1", "reshape-npu2", "512-npu2", "512-npu1"])
def test_a_large_matmul_of_a_view_tiles_over_the_array_reading_a_copy_of_it(device, view, a_shape, copy_tiles, grid):
    """The grid reads whole host tensors, and a view cannot be padded without changing its base's
    row stride: `copy_view_for_grid` inserts a Copy of the view (labelled after the body's calls),
    which streams it into a DDR buffer of the compiler's, padded as the MatMul reads it; the
    MatMul tiles over every core in the next segment and equals reference(). At N = 512 the grid
    takes blocks dividing the sides on the whole device, so the copy passes through DDR in the
    MatMul's configuration instead (through_between_groups; `copy_tiles` None)."""
    k = a_shape[-1] if view == "a[1:]" else 509
    a = np.random.default_rng(3).standard_normal(a_shape).astype(np.float32)
    graph = ProductOfView(operands(1, k, k, np.float32)[1], view)
    body = graph.compile(a=(a_shape, np.float32), device=from_name(device))
    shown = "a[1:]" if view == "a[1:]" else "a.reshape(510, 509)"
    assert rule(body.plan, Rule.COPY_VIEW_FOR_GRID) == [
        f"Copy#1 copies {shown} for MatMul#0, which tiles over the array reading whole host tensors"]
    assert f"  copy_view_for_grid: Copy#1 copies {shown} for MatMul#0" in describe(body.plan)
    assert body.plan.groups == (("g0", ("Copy#1",)), ("g1", ("MatMul#0",)))
    if copy_tiles is None:
        assert (len(body.plan.configurations), rule(body.plan, Rule.THROUGH_BETWEEN_GROUPS)) == (1, [
            "Copy#1 (1048576 bytes, more than a compute tile holds) writes through.Copy#1, a DDR buffer of the "
            "compiler's; MatMul#0 reads it back in the same configuration after its writes"])
    else:
        assert [tiles(s) for s in body.plan.segments] == [copy_tiles, 32 if device == "npu2" else 16]
    m, cores = grid   # the grid's M and its cores; M, K, N padded to 512 where 512 does not divide them
    assert chosen(body.plan, Rule.TILE_MATMUL_OVER_ARRAY) == {"g1": "m=64 k=8 n=64"}
    assert facts(body.plan, PaddedGrid) == ([] if m == 512 else [
        PaddedGrid("g1", "MatMul#0", (m, 509, 509), P512, fills=(Fill.WRITTEN, Fill.ZEROS))])
    assert len([c for part in body.plan.segments or (body.plan,) for c in part.cores if c.group == "g1"]) == cores
    assert same_kind_of_mlir(body.plan)
    assert_matches(body(a=a), graph.reference(a=a))


def test_a_matmul_of_a_view_that_does_not_tile_reads_the_view_itself():
    """`copy_view_for_grid` copies only for a MatMul that tiles, whoever reads its result (Exp
    reads the product over the Copy), and any view the DMA moves, the strided a[:, 1:] too."""
    a = np.random.default_rng(4).standard_normal((17, 16)).astype(np.float32)
    graph = ProductOfView(operands(1, 16, 16, np.float32)[1], "a[1:]")
    body = graph.compile(a=a, device=from_name("npu2"))
    assert rule(body.plan, Rule.COPY_VIEW_FOR_GRID) == [] and body.plan.groups == (("g0", ("MatMul#0",)),)
    assert_matches(body(a=a), graph.reference(a=a))

    class ReadOn(ProductOfView):
        def body(self, a):
            return Exp.step(super().body(a))

    graph = ReadOn(operands(1, 512, 512, np.float32)[1], "a[1:]")
    program = copy_view_for_grid(graph.trace(a=((513, 512), np.float32)))
    copy, product, exp = program.calls
    assert [c.arg.kernel for c in program.calls] == [Copy, MatMul, Exp] and program.inserted == (copy,)
    assert product.src[0] is copy and exp.src[0] is product and program.outputs == (exp,)

    class Strided(ProductOfView):
        def body(self, a):
            return MatMul.step(a[:, 1:], self.b)

    program = copy_view_for_grid(Strided(operands(1, 512, 512, np.float32)[1], "a[1:]").trace(
        a=((512, 513), np.float32)))
    assert [c.arg.kernel for c in program.calls] == [Copy, MatMul] and program.calls[1].src[0] is program.calls[0]


class BiasedProduct(iron.Graph):
    """A @ B + bias, B and bias params, N = 509 (prime): the product pads N to 512."""

    def __init__(self, b, bias):
        self.b, self.bias = iron.param(b), iron.param(bias)

    def body(self, a):
        return Add.step(MatMul.step(a, self.b), self.bias)


@pytest.mark.parametrize("device, cores", [("npu2", 8), ("npu1", 4)])
def test_a_group_fitting_a_tile_reads_a_padded_products_region(device, cores):
    """(1, 2048) @ (2048, 509) float32 + bias (1, 509): the Add's group fits a tile, so it reads
    only the user's region of the product padded to N = 512 across the segment cut
    (pad_tile_region), and the product pads; equal to reference() within F32."""
    rng = np.random.default_rng(26)
    b, bias = rng.standard_normal((2048, 509)).astype(np.float32), rng.standard_normal((1, 509)).astype(np.float32)
    a = rng.standard_normal((1, 2048)).astype(np.float32)
    graph = BiasedProduct(b, bias)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedGrid, Region) == [PaddedGrid("g0", "MatMul#0", (1, 2048, 509), (1, 2048, 512)),
                                                    Region("g1", ("Add#1",), "MatMul(a, b)", (1, 512))]
    assert tiles(body.plan.segments[0]) == cores
    assert padded(body.plan) == {"a": ((1, 2048), (1, 2048)), "b": ((2048, 509), (2048, 512)),
                                 "cut.MatMul#0": ((1, 509), (1, 512))}
    assert all(same_kind_of_mlir(segment) for segment in body.plan.segments)
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


@pytest.mark.parametrize("device, tiles_used", [("npu2", 16), ("npu1", 8)])
def test_a_streamed_bias_add_reads_a_padded_product_as_it_lies(device, tiles_used):
    """(64, 2048) @ (2048, 509) float32 + bias (64, 509): the Add streams, so it streams over the
    product's padded layout (pad_through_elementwise), not its region; equal to reference()."""
    rng = np.random.default_rng(27)
    b, bias = rng.standard_normal((2048, 509)).astype(np.float32), rng.standard_normal((64, 509)).astype(np.float32)
    a = rng.standard_normal((64, 2048)).astype(np.float32)
    graph = BiasedProduct(b, bias)
    body = graph.compile(a=a, device=from_name(device))
    assert facts(body.plan, PaddedStream, Region) == [through("Add#1", own=(64, 509), lies=(64, 512))]
    assert tiles(body.plan.segments[1]) == tiles_used
    np.testing.assert_allclose(body(a=a), graph.reference(a=a), **F32)


@pytest.mark.parametrize("reader", [Softmax, Argmax, Exp])
def test_any_call_whose_group_fits_a_tile_reads_a_padded_products_region(reader):
    """pad_tile_region is one rule for every small reader: a row reduction or another
    elementwise call of the (1, 509) product reads its user's region; equal to reference()."""
    rng = np.random.default_rng(28)
    b = (rng.standard_normal((2048, 509)) / 40).astype(np.float32)
    a = rng.standard_normal((1, 2048)).astype(np.float32)
    graph = ProductThen(b, reader)
    body = graph.compile(a=a, device=from_name("npu2"))
    assert facts(body.plan, Region) == [Region("g1", (f"{reader.__name__}#1",), "MatMul(a, b)", (1, 512))]
    assert_matches(body(a=a), graph.reference(a=a))


class ProductThen(iron.Graph):
    def __init__(self, b, reader):
        self.b, self.reader = iron.param(b), reader

    def body(self, a):
        return self.reader.step(MatMul.step(a, self.b))


def test_sides_whose_quantum_leaves_no_block_pad_wider():
    """On one column N pads to a multiple of 8: 2053 -> 2056 = 8 x 257, whose dividing blocks (at
    most 8) take 257 rounds, more than a Dma op repeats, so no grid (it was DoesNotFit). pad_wider
    then pads to multiples of 32: N 2080 = 32 x 65 takes blocks of 160; equal to reference()."""
    rng = np.random.default_rng(26)
    a, b = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((64, 2053)).astype(np.float32)
    graph = Product(b)
    body = graph.compile(a=a, device=from_name("npu2_1col"))
    assert facts(body.plan, PaddedGrid) == [PaddedGrid("g0", "MatMul#0", (8, 64, 2053), (8, 64, 2080), Rule.PAD_WIDER)]
    assert padded(body.plan) == {"a": ((8, 64), (8, 64)), "b": ((64, 2053), (64, 2080)), "out0": ((8, 2053), (8, 2080))}
    assert_matches(body(a=a), graph.reference(a=a))
