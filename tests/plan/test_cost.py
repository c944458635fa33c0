"""The cost model (iron/plan/cost.py) against values worked out by hand from the table in
docs/platform.md section 11, for small kernels of each role, a Function, DMA and the clock."""
import ml_dtypes
import numpy as np
import pytest

from aie_utils import from_name
from iron.kernels import MatVec, RMSNorm
from iron.kernels.base import Role
from iron.plan import cost
from iron.plan.plan import CType, Function, Imm, KernelStep, Load, Ptr, ScalarStep, WordOp

NPU1, NPU2 = cost.GENERATIONS["npu1"], cost.GENERATIONS["npu2"]
I8, I32, F32, BF16 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)
U8 = np.dtype(np.uint8)


def test_the_generation_follows_the_device_family():
    assert cost.generation(from_name("npu1")) is NPU1
    assert cost.generation(from_name("npu2_4col")) is NPU2


@pytest.mark.parametrize("gen, role, dtype, in_shapes, out_shape, out_dtype, cycles", [
    # int8 MatVec 64x64 on npu2: 4096 MACs / 512 = 8 cycles, but 4096 matrix bytes / 64 = 64 to load
    (NPU2, Role.MATRIX, I8, [(64, 64), (64,)], (64,), I32, 64 + 64),
    # float32 MatVec 16x32 on npu1: 512 MACs / (128 / 3) = 12; 2048 bytes / 64 = 32 to load
    (NPU1, Role.MATRIX, F32, [(16, 32), (32,)], (16,), F32, 64 + 32),
    # bfloat16 MatMul 64x64x64 on npu1: 262144 MACs / 128 = 2048 (loads: 8192 / 64 = 128)
    (NPU1, Role.MATRIX, BF16, [(64, 64), (64, 64)], (64, 64), BF16, 64 + 2048),
    # ... on npu2, twice the MACs per cycle
    (NPU2, Role.MATRIX, BF16, [(64, 64), (64, 64)], (64, 64), BF16, 64 + 1024),
    # float32 Add of 256: 2048 input bytes / 64 = 32 cycles, 1024 output bytes / 32 = 32
    (NPU1, Role.ELEMENTWISE, F32, [(256,), (256,)], (256,), F32, 64 + 32),
    # int8 ReLU of 1024: 1024 / 64 = 16 to load, 1024 / 32 = 32 to store
    (NPU2, Role.ELEMENTWISE, I8, [(1024,)], (1024,), I8, 64 + 32),
    # float32 RMSNorm of 64 (x and the gain): 512 bytes read twice / 64 = 16, 256 / 32 = 8 written
    (NPU1, Role.ROW_REDUCTION, F32, [(64,), (64,)], (64,), F32, 64 + 24),
    # float32 Argmax of 64: 256 bytes read twice / 64 = 8, 4 bytes written / 32 = 0.125
    (NPU2, Role.ROW_REDUCTION, F32, [(64,)], (1,), I32, 64 + 8.125),
])
def test_kernel_cycles_by_role(gen, role, dtype, in_shapes, out_shape, out_dtype, cycles):
    assert cost.kernel_cycles(gen, role, dtype, in_shapes, out_shape, out_dtype) == pytest.approx(cycles)


def test_a_function_costs_its_kernel_calls_and_scalar_steps_in_turn():
    fn = Function("g0", ("a", "b"), (
        KernelStep.of(MatVec, np.float32, (Ptr("a"), Ptr("a", 2048), Ptr("b"), Imm(16), Imm(32))),
        KernelStep.of(RMSNorm, np.float32, (Ptr("b"), Ptr("a"), Ptr("b"), Imm(1), Imm(64), Imm(1e-5, CType.F32), Imm(64))),
        ScalarStep(Ptr("b"), WordOp.ADD, Load("a"), Imm(1)),
    ))
    assert cost.function_cycles(NPU1, fn) == pytest.approx((64 + 32) + (64 + 24) + 4)


@pytest.mark.parametrize("gen, role, dtype, in_shapes, out_shape, out_dtype, cycles", [
    # iron's float32 MatVec 16x32: 512 MACs, a product and a sum each, 30 cycles per emulated float op
    (NPU1, Role.MATRIX, F32, [(16, 32), (32,)], (16,), F32, 64 + 512 * 2 * 30),
    # bfloat16 computes in float as well: a 64x64x64 MatMul
    (NPU2, Role.MATRIX, BF16, [(64, 64), (64, 64)], (64, 64), BF16, 64 + 64 ** 3 * 2 * 30),
    # int8 MatVec 64x64 in int64: two 32-bit operations per add or product
    (NPU2, Role.MATRIX, I8, [(64, 64), (64,)], (64,), I32, 64 + 4096 * 2 * 2),
    # an elementwise int8 result: one operation of two cycles per element
    (NPU2, Role.ELEMENTWISE, I8, [(1024,)], (1024,), I8, 64 + 1024 * 2),
    # RMSNorm of 64 floats: square, sum, scale and gain per input element
    (NPU1, Role.ROW_REDUCTION, F32, [(64,), (64,)], (64,), F32, 64 + 64 * 4 * 30),
    # Dequant to 64 floats: scale and offset per result element
    (NPU2, Role.EXPANSION, F32, [(72,)], (64,), F32, 64 + 64 * 2 * 30),
    # ... from its uint8 blocks (two Q8_0 blocks, 68 bytes): float operations, as its result is float32
    (NPU2, Role.EXPANSION, U8, [(68,)], (64,), F32, 64 + 64 * 2 * 30),
])
def test_irons_kernels_are_priced_as_written_on_the_scalar_unit(gen, role, dtype, in_shapes, out_shape, out_dtype,
                                                               cycles):
    assert cost.kernel_cycles(gen, role, dtype, in_shapes, out_shape, out_dtype, cost.Kernels.IRONS) == \
        pytest.approx(cycles)


def test_a_functions_macs_at_peak_are_its_share_of_the_roofline():
    fn = Function("g0", ("a", "b"), (
        KernelStep.of(MatVec, np.float32, (Ptr("a"), Ptr("a", 2048), Ptr("b"), Imm(16), Imm(32))),
        KernelStep.of(RMSNorm, np.float32, (Ptr("b"), Ptr("a"), Ptr("b"), Imm(1), Imm(64), Imm(1e-5, CType.F32), Imm(64))),
    ))
    assert cost.function_peak_cycles(NPU1, fn) == pytest.approx(512 / (128 / 3))   # the MatVec's MACs only
    assert cost.function_cycles(NPU1, fn, cost.Kernels.IRONS) == pytest.approx((64 + 512 * 60) + (64 + 64 * 4 * 30))


def test_ddr_is_one_bandwidth_the_array_shares():
    assert cost.ddr_ns(NPU2, 70_000) == pytest.approx(1000.0)   # 70 GB/s: 70 bytes per ns
    work = cost.Work(core_cycles=1800, channel_bytes=8 * 900, ddr_bytes=140_000)
    assert work.ns(from_name("npu2")) == pytest.approx(2000.0)   # DDR's 2 us over the core's 1 us and the channel's 0.5


def test_a_candidates_last_results_leave_after_its_cores_last_work():
    """2 us of core time in two rounds, 2 us of DDR of which 1 us are results: the last round's
    results (0.5 us of DDR) leave after the core's 2 us, nothing overlapping them."""
    npu2 = from_name("npu2")
    work = cost.Work(core_cycles=3600, channel_bytes=0, ddr_bytes=140_000, result_bytes=70_000, rounds=2)
    assert work.ns(npu2) == pytest.approx(1000 + 1000 + 500)
    # the same work in one round: all its results after the core's 2 us
    assert cost.Work(3600, 0, 140_000, 70_000).ns(npu2) == pytest.approx(2000 + 1000)
    # many rounds approach the slowest of the totals: here the core's 2 us
    assert cost.Work(3600, 0, 140_000, 70_000, rounds=1000).ns(npu2) == pytest.approx(2000 + 1, abs=1)


def test_dma_and_time_follow_the_stream_width_and_clock():
    assert cost.dma_cycles(NPU1, 4096) == 1024         # 4 bytes per cycle
    assert cost.dma_cycles(NPU2, 4096) == 512          # 8 bytes per cycle
    assert cost.ns(from_name("npu1"), 1024) == pytest.approx(640.0)    # at 1.6 GHz
    assert cost.ns(from_name("npu2"), 1800) == pytest.approx(1000.0)   # at 1.8 GHz


def test_the_launch_and_reconfiguration_figures_are_the_published_ones():
    assert (NPU1.host_call_ns, NPU2.host_call_ns) == (45_000, 64_000)
    assert NPU1.host_restart_ns == NPU2.host_restart_ns == pytest.approx(1e9 / 23_400, rel=1e-3)
    assert NPU1.queued_run_ns == NPU2.queued_run_ns == 27_700
    assert (NPU1.reconfigure_ns, NPU2.reconfigure_ns) == (20_000_000, 100_000)
