"""The cost model: how long the things a Plan does would take on the NPU, from the public figures
of docs/platform.md section 11 (one table, `GENERATIONS` here). It prices a kernel call from its
role, shapes and dtype, twice: vectorised (the roofline a kernel written for the vector unit
reaches) and as iron's kernels are written (the portable scalar path of iron_kernel.h); a DMA
transfer from its bytes, and DDR as one bandwidth the whole array shares; a reconfiguration
between segments; the host's side of a run (a host-driven call, a restart of a device loop's
run); and a candidate the compiler weighs (`Work`: a grid's or a stream's busiest core, busiest
channel, DDR bytes and the results its last round leaves behind). It sits below the compiler, which decides among alternatives by it (tiling
blocks, padded extents, segment cuts), and the runtime's timed emulator, `estimate()` and the
timeline use it too. Times are in nanoseconds, work in cycles. Every formula is a lower bound of
the kind a roofline gives, and says what it assumes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from iron.kernels.base import Role
from iron.plan.plan import Choice, Function, KernelStep
from iron.plan.rules import Rule


class Kernels(Enum):
    """Which kernels an estimate assumes."""

    VECTORISED = "with vectorised kernels (the roofline)"
    IRONS = "with iron's kernels"


@dataclass(frozen=True)
class Generation:
    """One NPU generation's figures (docs/platform.md section 11)."""

    family: str
    macs: dict              # input dtype name -> peak MACs per core per cycle
    load_bytes: int         # a core's loads per cycle (two 256-bit load units)
    store_bytes: int        # a core's stores per cycle (one 256-bit store unit)
    dma_bytes: int          # one DMA channel's stream, bytes per cycle
    call_cycles: int        # a kernel call's fixed cost (call, pointer setup, loop prologue)
    scalar_cycles: int      # one i32 scalar step (load, op, store)
    host_call_ns: float     # a host-driven call's round trip beyond the device's own time
    host_restart_ns: float  # the host restarting one held run of a device loop
    queued_run_ns: float    # the device's gap between two runs already queued
    reconfigure_ns: float   # loading the next configuration of a segmented design
    ddr_bytes_per_ns: float  # DDR bandwidth the whole array shares (GB/s), reads and writes together
    int_op_cycles: int = 2     # a scalar integer add or product as iron's kernels compute it (in int64)
    float_op_cycles: int = 30  # a scalar float add or product: the core has no FPU, software emulates it


def _macs(int8: int, int16: int, bf16: int) -> dict:
    """Peak MACs per cycle per input dtype. int32 counts as four int16 products and float32 as
    three bfloat16 ones (the AIE API's "fast" float emulation); uint8 as int8."""
    return {"int8": int8, "uint8": int8, "int16": int16, "int32": int16 / 4,
            "bfloat16": bf16, "float32": bf16 / 3}


GENERATIONS = {
    "npu1": Generation("npu1", _macs(256, 64, 128), load_bytes=64, store_bytes=32, dma_bytes=4,
                       call_cycles=64, scalar_cycles=4, host_call_ns=45_000, host_restart_ns=42_700,
                       queued_run_ns=27_700, reconfigure_ns=20_000_000, ddr_bytes_per_ns=70.0),
    "npu2": Generation("npu2", _macs(512, 128, 256), load_bytes=64, store_bytes=32, dma_bytes=8,
                       call_cycles=64, scalar_cycles=4, host_call_ns=64_000, host_restart_ns=42_700,
                       queued_run_ns=27_700, reconfigure_ns=100_000, ddr_bytes_per_ns=70.0),
}


def generation(device) -> Generation:
    return GENERATIONS[device.family]


def ns(device, cycles: float) -> float:
    """Cycles of a core or DMA at the device's highest clock, in nanoseconds."""
    return cycles / device.clock_ghz


SCALAR_OPS = {   # scalar operations per element of iron's kernels (iron_kernel.h's loops), by role
    Role.MATRIX: 2,          # per MAC: a product and a sum
    Role.ELEMENTWISE: 1,     # per result element: the operation
    Role.ROW_REDUCTION: 4,   # per input element: RMSNorm's square, sum, scale and gain; Softmax's alike
    Role.EXPANSION: 2,       # per result element: Dequant's scale and offset
    Role.OTHER: 1,           # per result element: a copy or a pick
}


# A GGUF block of 32 weights expanded to float32 (keyed by the block's bytes), as mlir-aie's
# aie_kernels/aie2/expand.cc expands int4 blocks: vector operations per block on the vector unit,
# which issues one a cycle (docs/platform.md section 11): Q4_1 unpacks 4 to 8 bits and 8 to 16,
# converts to float and applies its scale and minimum as one multiply-accumulate; Q8_0 unpacks 8
# to 16 bits, converts and scales. Dequant's stores of the 32 results (128 bytes at 32 a cycle)
# take as long or longer, so its price is its stores.
BLOCK_VECTOR_OPS = {20: 4, 34: 3}
# The scalar float operations per weight iron's C++ expands it with (dequant.cc): Q4_1 a product
# and a sum, Q8_0 a product.
BLOCK_SCALAR_OPS = {20: 2, 34: 1}
VECTOR_OPS_PER_CYCLE = 1


def kernel_cycles(gen: Generation, role: Role, dtype: np.dtype, in_shapes: list, out_shape: tuple,
                  out_dtype: np.dtype, kernels: Kernels = Kernels.VECTORISED, packed: bool = False) -> float:
    """Cycles of one kernel call. VECTORISED, by role:
    - MATRIX (MatVec, MatMul): MACs at the dtype's peak, or streaming the matrix through the load
      units, whichever is slower (a MatVec uses each matrix element once, so loads bound it);
    - ELEMENTWISE: every input read and the output written once, at the load and store widths;
    - ROW_REDUCTION (RMSNorm, Softmax, Argmax): the input read twice (reduce, then normalise) and
      the output written once;
    - OTHER: as elementwise (one pass over the data).
    IRONS (the kernels as iron_kernel.h writes them, with no vector path): SCALAR_OPS per element,
    each `float_op_cycles` for float32 and bfloat16 (computed in float) or `int_op_cycles` for
    integers (computed in int64), an expansion's by its result's dtype (Dequant computes float
    weights from bytes); loads and stores issue beside them (VLIW slots).
    A `packed` MATRIX call (QMatVec: input 0 the GGUF blocks of an (M, K) matrix's rows, input 1
    x (K,)) reads the blocks' bytes at the load width, while the vector unit, one operation a
    cycle, expands them (BLOCK_VECTOR_OPS per block of 32 weights) and does the M * K MACs at
    the peak of `out_dtype`, the dtype the weights are expanded to; with iron's kernels each
    weight takes BLOCK_SCALAR_OPS float operations to expand and two (a product and a sum) to
    use.
    Plus the fixed cost of a call. Assumes data in the core's own memory banks with no conflicts;
    a Softmax's valid length is taken as the whole row."""
    if packed:
        return gen.call_cycles + _packed_work(gen, in_shapes, out_dtype, kernels)
    if kernels is Kernels.IRONS:   # an expansion computes in its result's dtype (Dequant: float from bytes)
        computed = out_dtype if role is Role.EXPANSION else dtype
        return gen.call_cycles + _scalar_ops(role, in_shapes, out_shape) * _op_cycles(gen, computed)
    in_bytes = sum(math.prod(s) for s in in_shapes) * dtype.itemsize
    out_bytes = math.prod(out_shape) * out_dtype.itemsize
    if role is Role.MATRIX:
        work = max(matrix_macs(in_shapes, out_shape) / gen.macs[dtype.name],
                   math.prod(in_shapes[0]) * dtype.itemsize / gen.load_bytes)
    elif role is Role.ROW_REDUCTION:
        work = 2 * in_bytes / gen.load_bytes + out_bytes / gen.store_bytes
    else:
        work = max(in_bytes / gen.load_bytes, out_bytes / gen.store_bytes)
    return gen.call_cycles + work


def _packed_work(gen: Generation, in_shapes: list, out_dtype: np.dtype, kernels: Kernels) -> float:
    """The work of a packed matrix call (`kernel_cycles`) on blocks (M, row bytes) and x (K,)."""
    (m, row_bytes), (k,) = in_shapes
    block_bytes, weights = row_bytes * 32 // k, m * k
    if kernels is Kernels.IRONS:
        return weights * (BLOCK_SCALAR_OPS[block_bytes] + SCALAR_OPS[Role.MATRIX]) * _op_cycles(gen, out_dtype)
    vector = weights / 32 * BLOCK_VECTOR_OPS[block_bytes] / VECTOR_OPS_PER_CYCLE + weights / gen.macs[out_dtype.name]
    return max(m * row_bytes / gen.load_bytes, vector)


def matrix_macs(in_shapes: list, out_shape: tuple, packed: str = "") -> int:
    """The MACs of a matrix call: every element of the matrix (M, K) times N (1 for a MatVec); a
    `packed` one's K is its x's, not its blocks' bytes."""
    if packed:
        return out_shape[0] * in_shapes[1][0]
    return math.prod(in_shapes[0]) * (out_shape[-1] if len(out_shape) == 2 else 1)


def _scalar_ops(role: Role, in_shapes: list, out_shape: tuple) -> int:
    if role is Role.MATRIX:
        return SCALAR_OPS[role] * matrix_macs(in_shapes, out_shape)
    if role is Role.ROW_REDUCTION:
        return SCALAR_OPS[role] * math.prod(in_shapes[0])
    return SCALAR_OPS[role] * math.prod(out_shape)


def _op_cycles(gen: Generation, dtype: np.dtype) -> int:
    return gen.float_op_cycles if dtype.kind == "f" or dtype.name == "bfloat16" else gen.int_op_cycles


def _shapes(step: KernelStep) -> tuple[list, tuple]:
    """A kernel step's input shapes and result shape (its sizes are immediates)."""
    in_shapes, out_shape = step.kernel.abi_shapes(tuple(int(arg.value) for arg in step.sizes))
    return list(in_shapes), tuple(out_shape)


def step_cycles(gen: Generation, step, kernels: Kernels = Kernels.VECTORISED) -> float:
    """Cycles of one step of a Function: a kernel call or a scalar step."""
    if not isinstance(step, KernelStep):
        return gen.scalar_cycles
    return kernel_cycles(gen, step.kernel.role, step.dtype, *_shapes(step), step.out, kernels, bool(step.kernel.packed))


def function_cycles(gen: Generation, function: Function, kernels: Kernels = Kernels.VECTORISED) -> float:
    """Cycles of one invocation of a Function: its steps one after another."""
    return sum(step_cycles(gen, step, kernels) for step in function.steps)


def function_peak_cycles(gen: Generation, function: Function) -> float:
    """The cycles one core needs for a Function's MACs at the dtype's peak: its share of the
    compute side of the roofline."""
    return sum(matrix_macs(*_shapes(step), step.kernel.packed) / gen.macs[(step.out if step.kernel.packed else step.dtype).name]
               for step in function.steps if isinstance(step, KernelStep) and step.kernel.role is Role.MATRIX)


def dma_cycles(gen: Generation, nbytes: int) -> float:
    """Cycles one DMA channel takes to move `nbytes` through its stream: the stream's width per
    cycle, no setup latency (a few cycles per BD and per switch hop, small against any object
    iron moves); DDR's shared bandwidth is priced apart (`ddr_ns`)."""
    return nbytes / gen.dma_bytes


def ddr_ns(gen: Generation, nbytes: int) -> float:
    """Nanoseconds DDR takes for `nbytes` read or written by the array, all its shim channels sharing it."""
    return nbytes / gen.ddr_bytes_per_ns


@dataclass(frozen=True)
class Work:
    """What a candidate the compiler weighs (a grid, a stream of blocks) does, as the cost model
    prices it: `core_cycles` on its busiest core, `channel_bytes` through its busiest DMA
    channel, `ddr_bytes` read and written in DDR, of which `result_bytes` are results written
    back, which come out in `rounds` equal rounds (a grid's output blocks per core)."""

    core_cycles: float
    channel_bytes: int
    ddr_bytes: int
    result_bytes: int = 0
    rounds: int = 1

    def ns(self, device) -> float:
        """Its estimated time: the slowest of the three, as double-buffered FIFOs overlap a
        core's work with the moves feeding it and the previous round's results leaving; but the
        last round's results leave after the core's last work, nothing overlapping them, so the
        core's time counts with their DDR time (a grid of two output blocks per core: half its
        results). The first objects, which nothing overlaps either, are not counted (small)."""
        gen = generation(device)
        last = ddr_ns(gen, self.result_bytes / max(1, self.rounds))
        return max(ns(device, self.core_cycles) + last, ns(device, dma_cycles(gen, self.channel_bytes)),
                   ddr_ns(gen, self.ddr_bytes))


def choose(rule: Rule, what: str, candidates: list, price, label) -> tuple[object, Choice]:
    """The candidate of the least estimated time (`price(c)`, nanoseconds; the earliest of
    `candidates` on a tie, so their order says what is preferred among equals) and the Choice
    of `what` by `rule` saying so, `label(c)` naming each."""
    priced = [(price(c), k, c) for k, c in enumerate(candidates)]
    best_ns, _, best = min(priced, key=lambda p: p[:2])
    others = [p for p in priced if p[2] is not best]
    if not others:
        return best, Choice(rule, what, label(best), best_ns)
    other_ns, _, other = min(others, key=lambda p: p[:2])
    return best, Choice(rule, what, label(best), best_ns, label(other), other_ns)
