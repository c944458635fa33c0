"""QMatVec (iron/kernels/library.py, its C++ in dequant.cc): MatVec on a matrix's GGUF blocks as
the file ships them, each weight expanded as it is multiplied. On Q4_1 and Q8_0 blocks of odd
shapes: its numpy compute equals Dequant then MatVec bit for bit, and numpy's float64 product of
the gguf-expanded weights to 1e-5 of the largest |w_j x_j| times sqrt(K) (float32 sums); its C++
equals dequant_u8 then matvec_f32 bit for bit; a compiled design streams the blocks' bytes (never
a float32 matrix, no Dequant) and equals reference(); its refusals name the user's tensors and
the fix; the cost model prices it from the sourced constants of docs/platform.md section 11."""

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.errors import KernelTypeError
from iron.kernels import Dequant, MatVec, QMatVec, SiLU
from iron.kernels.base import Role
from iron.models.blocks import Q4_1, Q8_0
from iron.plan import cost
from iron.plan.describe import ddr_traffic
from iron.plan.plan import CType, FifoRole, Function, Imm, KernelStep, Ptr, TileKind
from iron.plan.rules import Rule
from tests.compiler.designs import random_blocks
from tests.quotes import quoted

F32 = np.float32
NPU1, NPU2 = cost.GENERATIONS["npu1"], cost.GENERATIONS["npu2"]
SHAPES = [(Q4_1, 7, 96), (Q4_1, 13, 352), (Q8_0, 5, 160), (Q8_0, 11, 32)]


def close(got, weights, x):
    """`got` against the float64 product of the weights, to float32 summation's error."""
    exact = weights.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(weights * x).max(axis=1) * np.sqrt(x.size)
    assert np.all(np.abs(got - exact) <= 1e-5 * scale), np.abs(got - exact) / scale


@pytest.mark.parametrize("fmt, m, k", SHAPES)
def test_qmatvec_equals_numpy_and_dequant_then_matvec_bit_for_bit(fmt, m, k):
    rng = np.random.default_rng(m * k)
    blocks, x = random_blocks(rng, m, k, fmt), rng.standard_normal(k).astype(F32)
    got = QMatVec.reference(blocks, x, block_bytes=fmt.nbytes)
    assert got.dtype == F32 and got.shape == (m,)
    close(got, fmt.dequantize(blocks), x)
    chained = MatVec.reference(Dequant.reference(blocks, block_bytes=fmt.nbytes), x)
    assert np.array_equal(got.view(np.uint32), chained.view(np.uint32))


@pytest.mark.parametrize("fmt, m, k", SHAPES)
def test_the_cc_equals_dequant_then_matvec_bit_for_bit(library, fmt, m, k):
    rng = np.random.default_rng(m + k)
    blocks, x = random_blocks(rng, m, k, fmt), rng.standard_normal(k).astype(F32)
    out, weights, chained = np.zeros(m, F32), np.zeros((m, k), F32), np.zeros(m, F32)
    row = blocks.shape[1]
    library.call(QMatVec.symbol(np.uint8, F32, (np.uint8, F32)), [blocks, x, out, m, row, k, fmt.nbytes],
                 ["ptr", "ptr", "ptr", "i32", "i32", "i32", "i32"])
    library.call("dequant_u8", [blocks, weights, m, row, k, fmt.nbytes], ["ptr", "ptr", "i32", "i32", "i32", "i32"])
    library.call("matvec_f32", [weights, x, chained, m, k], ["ptr", "ptr", "ptr", "i32", "i32"])
    assert QMatVec.symbol(np.uint8, F32, (np.uint8, F32)) == "qmatvec_u8_f32_f32"
    assert np.array_equal(out.view(np.uint32), chained.view(np.uint32))
    close(out, fmt.dequantize(blocks), x)


class Projection(iron.Graph):
    """SiLU of a quantized matrix times x (or, `alone`, the product itself): QMatVec on the
    blocks as the file ships them."""

    def __init__(self, blocks, fmt, alone=False):
        self.w, self.block_bytes, self.alone = iron.param(blocks), fmt.nbytes, alone

    def body(self, x):
        y = QMatVec.step(self.w, x, block_bytes=self.block_bytes)
        return y if self.alone else SiLU.step(y)


@pytest.mark.parametrize("fmt, m, k, alone, device", [
    (Q4_1, 1536, 576, False, "npu2"), (Q8_0, 1024, 576, True, "npu2"), (Q4_1, 508, 1024, True, "npu1"),
    (Q8_0, 34, 96, False, "npu2")])
def test_a_compiled_projection_streams_the_blocks_bytes_and_equals_reference(on_emulator, fmt, m, k, alone, device):
    """Large (Q4_1 1536 x 576, 540 KiB of blocks; Q8_0 1024 x 576 and Q4_1 508 x 1024 on npu1,
    whose results the host reads, which a MatVec would tile over the array's grid in k-blocks):
    split by rows, each part streaming its rows of blocks as stored (uint8 FIFOs of whole rows'
    bytes) into QMatVec; no Dequant, no buffer of expanded weights. Small: on one tile whole."""
    rng = np.random.default_rng(3)
    graph = Projection(random_blocks(rng, m, k, fmt), fmt, alone)
    compiled = graph.compile(x=((k,), F32), device=from_name(device))
    plan, row = compiled.plan, k // 32 * fmt.nbytes
    assert plan.groups == (("g0", ("QMatVec#0",) if alone else ("QMatVec#0", "SiLU#1")),)
    steps = [s for f in plan.functions for s in f.steps if isinstance(s, KernelStep)]
    assert {s.kernel for s in steps} == ({QMatVec} if alone else {QMatVec, SiLU})
    assert not [b for b in plan.buffers if b.nbytes >= row // fmt.nbytes * 32 * 4]   # no row of float32 weights
    assert ddr_traffic(plan).consts == m * row   # the blocks, once
    if m > 500:
        decided = [rule for rule, _ in plan.rules]
        assert Rule.SPLIT_MATRIX_OVER_TILES in decided and Rule.DEQUANT_BEFORE_MATVEC not in decided
        weights = [f for f in plan.fifos if f.producer.kind is TileKind.SHIM and f.role is FifoRole.WEIGHTS]
        assert weights and all(f.dtype == np.uint8 and f.nbytes % row == 0 for f in weights)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(k).astype(F32)
        got, want = compiled(x), graph.reference(x)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


class Misuse(iron.Graph):
    def __init__(self, blocks, block_bytes):
        self.weights, self.block_bytes = iron.param(blocks), block_bytes

    def body(self, activations):
        return QMatVec.step(self.weights, activations, block_bytes=self.block_bytes)


@pytest.mark.parametrize("shape, block_bytes, x, names", [
    ((4, 60), 18, (96,), ["QMatVec", "block_bytes= 20 (Q4_1) or 34 (Q8_0)", "not 18", "weights (4, 60)"]),
    ((4, 70), 34, (64,), ["QMatVec", "a multiple of 34 bytes", "Q8_0", "weights (4, 70)"]),
    ((4, 60), 20, (64,), ["QMatVec", "needs x (96,)", "3 blocks of 32", "weights (4, 60), activations (64,)"]),
])
def test_a_misshapen_call_is_refused_naming_the_tensors_and_the_fix(shape, block_bytes, x, names):
    graph = Misuse(np.zeros(shape, np.uint8), block_bytes)
    with pytest.raises(KernelTypeError) as refused:
        graph.reference(np.zeros(x, F32))
    quoted(refused.value, *names)


def test_a_vector_of_another_dtype_is_refused_naming_both_tensors():
    graph = Misuse(np.zeros((4, 60), np.uint8), 20)
    with pytest.raises(KernelTypeError) as refused:
        graph.reference(np.zeros(96, np.int32))
    quoted(refused.value, "QMatVec", "weights", "activations", "uint8 x float32 into float32")


@pytest.mark.parametrize("gen, fmt, m, k, vectorised, irons", [
    # npu2, Q4_1 64 x 256 (160 bytes a row): 10240 bytes / 64 = 160 to load; the vector unit expands 512
    # blocks at 4 operations each (2048 cycles) and does 16384 float32 MACs at 256 / 3 a cycle (192)
    (NPU2, Q4_1, 64, 256, 64 + 2048 + 192, 64 + 16384 * (2 + 2) * 30),
    # npu1, Q8_0 16 x 64 (68 bytes a row): 1088 / 64 = 17 to load; 32 blocks x 3 = 96, 1024 MACs / (128 / 3) = 24
    (NPU1, Q8_0, 16, 64, 64 + 96 + 24, 64 + 1024 * (1 + 2) * 30),
])
def test_qmatvec_is_priced_by_its_bytes_its_expansion_and_its_macs(gen, fmt, m, k, vectorised, irons):
    shapes = [(m, k // 32 * fmt.nbytes), (k,)]
    for kernels, cycles in ((cost.Kernels.VECTORISED, vectorised), (cost.Kernels.IRONS, irons)):
        assert cost.kernel_cycles(gen, Role.MATRIX, np.dtype(np.uint8), shapes, (m,), np.dtype(F32), kernels,
                                  packed=True) == pytest.approx(cycles, rel=1e-12)
    assert (cost.BLOCK_VECTOR_OPS, cost.BLOCK_SCALAR_OPS, cost.VECTOR_OPS_PER_CYCLE) == ({20: 4, 34: 3}, {20: 2, 34: 1}, 1)


@pytest.mark.parametrize("fmt, qmatvec", [(Q4_1, 64 + 2048 + 192), (Q8_0, 64 + 512 * 3 + 192)])
def test_a_plan_step_of_qmatvec_is_priced_as_packed(fmt, qmatvec):
    """step_cycles reads the kernel's packed trait: the same figure as kernel_cycles(packed=True),
    below Dequant then MatVec on the same rows (whose expanded float32 rows are stored at 32 bytes a
    cycle and loaded again at 64), which is why SmolLM2's projections use it; and its MACs at
    float32's peak count towards the roofline."""
    m, k = 64, 256
    row = k // 32 * fmt.nbytes
    args = (Ptr("w"), Ptr("x"), Ptr("out"), *(Imm(v, CType.I32) for v in (m, row, k, fmt.nbytes)))
    step = KernelStep.of(QMatVec, (np.uint8, F32), args)
    assert step.out == F32 and cost.step_cycles(NPU2, step) == pytest.approx(qmatvec, rel=1e-12)
    chained = cost.kernel_cycles(NPU2, Role.EXPANSION, np.dtype(np.uint8), [(m * row,)], (m, k), np.dtype(F32)) + \
        cost.kernel_cycles(NPU2, Role.MATRIX, np.dtype(F32), [(m, k), (k,)], (m,), np.dtype(F32))
    assert chained == 64 + 16384 * 4 / 32 + 64 + 16384 * 4 / 64 > cost.step_cycles(NPU2, step)
    assert cost.function_peak_cycles(NPU2, Function("f", (), (step,))) == pytest.approx(16384 / (256 / 3))
