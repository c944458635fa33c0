"""The cost model: how long the things a Plan does would take on the NPU, from the public figures
of docs/platform.md section 11 (one table, `GENERATIONS` here). It prices a kernel call from its
role, shapes and dtype; a DMA transfer from its bytes; a reconfiguration between segments; and the
host's side of a run (a host-driven call, a restart of a device loop's run). It lives in the
runtime because only running a Plan asks these questions (the timed emulator, `estimate()`, the
timeline); the compiler decides nothing from it. Times are in nanoseconds, work in cycles.
Every formula is a lower bound of the kind a roofline gives, and says what it assumes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iron.compiler.plan import Function, KernelStep
from iron.kernels.base import Role
from iron.kernels.registry import lookup


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


def _macs(int8: int, int16: int, bf16: int) -> dict:
    """Peak MACs per cycle per input dtype. int32 counts as four int16 products and float32 as
    three bfloat16 ones (the AIE API's "fast" float emulation); uint8 as int8."""
    return {"int8": int8, "uint8": int8, "int16": int16, "int32": int16 / 4,
            "bfloat16": bf16, "float32": bf16 / 3}


GENERATIONS = {
    "npu1": Generation("npu1", _macs(256, 64, 128), load_bytes=64, store_bytes=32, dma_bytes=4,
                       call_cycles=64, scalar_cycles=4, host_call_ns=45_000, host_restart_ns=42_700,
                       queued_run_ns=27_700, reconfigure_ns=20_000_000),
    "npu2": Generation("npu2", _macs(512, 128, 256), load_bytes=64, store_bytes=32, dma_bytes=8,
                       call_cycles=64, scalar_cycles=4, host_call_ns=64_000, host_restart_ns=42_700,
                       queued_run_ns=27_700, reconfigure_ns=100_000),
}


def generation(device) -> Generation:
    return GENERATIONS[device.family]


def ns(device, cycles: float) -> float:
    """Cycles of a core or DMA at the device's highest clock, in nanoseconds."""
    return cycles / device.clock_ghz


def kernel_cycles(gen: Generation, role: Role, dtype: np.dtype, in_shapes: list, out_shape: tuple,
                  out_dtype: np.dtype) -> float:
    """Cycles of one kernel call, by role:
    - MATRIX (MatVec, MatMul): MACs at the dtype's peak, or streaming the matrix through the load
      units, whichever is slower (a MatVec uses each matrix element once, so loads bound it);
    - ELEMENTWISE: every input read and the output written once, at the load and store widths;
    - ROW_REDUCTION (RMSNorm, Softmax, Argmax): the input read twice (reduce, then normalise) and
      the output written once;
    - OTHER: as elementwise (one pass over the data).
    Plus the fixed cost of a call. Assumes data in the core's own memory banks with no conflicts
    and fully vectorised kernels; a Softmax's valid length is taken as the whole row."""
    in_bytes = sum(int(np.prod(s)) for s in in_shapes) * dtype.itemsize
    out_bytes = int(np.prod(out_shape)) * out_dtype.itemsize
    if role is Role.MATRIX:
        macs = int(np.prod(in_shapes[0])) * (out_shape[-1] if len(out_shape) == 2 else 1)
        work = max(macs / gen.macs[dtype.name], int(np.prod(in_shapes[0])) * dtype.itemsize / gen.load_bytes)
    elif role is Role.ROW_REDUCTION:
        work = 2 * in_bytes / gen.load_bytes + out_bytes / gen.store_bytes
    else:
        work = max(in_bytes / gen.load_bytes, out_bytes / gen.store_bytes)
    return gen.call_cycles + work


def step_cycles(gen: Generation, step) -> float:
    """Cycles of one step of a Function: a kernel call (its sizes are immediates) or a scalar step."""
    if not isinstance(step, KernelStep):
        return gen.scalar_cycles
    found = lookup(step.symbol)
    kernel = found.kernel
    pointers = kernel.arity + 1
    sizes = tuple(int(arg.value) for arg in step.args[pointers: len(step.args) - len(kernel.c_attrs)])
    in_shapes, out_shape = kernel.abi_shapes(sizes)
    return kernel_cycles(gen, kernel.role, found.dtype, list(in_shapes), tuple(out_shape), found.out)


def function_cycles(gen: Generation, function: Function) -> float:
    """Cycles of one invocation of a Function: its steps one after another."""
    return sum(step_cycles(gen, step) for step in function.steps)


def dma_cycles(gen: Generation, nbytes: int) -> float:
    """Cycles one DMA channel takes to move `nbytes` through its stream: the stream's width per
    cycle, no setup latency (a few cycles per BD and per switch hop, small against any object
    iron moves) and no contention for host memory."""
    return nbytes / gen.dma_bytes
