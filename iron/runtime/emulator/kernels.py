"""How the emulator calls a KernelStep's kernel (the class the Plan holds, never looked up by
name): through the kernel's numpy reference function, as `Kernel.emulate` does (mode "numpy", the
default), or through its C++ compiled for the host (mode "native", native.py);
`kernel_calls(mode, plan)` gives core.py one prepared call per KernelStep.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from functools import partial

import numpy as np

from iron import dtypes
from iron.errors import BackendUnavailable
from iron.kernels.registry import is_library
from iron.plan.plan import KernelStep
from iron.plan.sources import called_kernels

MODES = ("numpy", "native")


def kernel_mode(kernels: str | None) -> str:
    mode = kernels if kernels is not None else os.environ.get("IRON_EMULATOR_KERNELS", "numpy")
    if mode not in MODES:
        raise BackendUnavailable(
            f"The emulator has no kernel mode {mode!r}: pass kernels='numpy' (numpy semantics) or "
            "kernels='native' (the kernels' C++ compiled for the host), or set IRON_EMULATOR_KERNELS to one of them."
        )
    return mode


def kernel_calls(mode: str, plan):
    """The `make_call` of `mode` for the kernels `plan` calls."""
    if mode == "numpy":
        return numpy_call
    from iron.runtime.emulator.native import NativeLibrary, library_sources

    sources = dict(library_sources())
    for kernel in called_kernels(plan):
        name, text = kernel.source_text()
        sources[name] = text
    library = NativeLibrary.load(sources)
    return lambda step, attr_names, types: NativeCall(library, step.symbol, types)


class KernelCall(ABC):
    """One KernelStep's kernel: `bind(pointers, sizes, attrs)` prepares `run()`, a call on those
    operands (for operands fixed per binding); calling it runs once. `strided_inputs`: whether
    an input may be a strided view (rows apart in memory) rather than contiguous; `computes_into`:
    whether `batched(attrs)` takes `out=`, an array it writes its result into (`Kernel.computes_into`)."""

    strided_inputs = computes_into = False

    @abstractmethod
    def bind(self, pointers: list, sizes: tuple, attrs: tuple):
        """`run()`: the kernel on these operands."""

    def __call__(self, pointers: list, sizes: tuple, attrs: tuple):
        self.bind(pointers, sizes, attrs)()

    def batched(self, attrs: tuple):
        """The kernel's compute on operands stacked along a leading axis (batch.py), or None
        when it has none."""
        return None


class NumpyCall(KernelCall):
    """What `Kernel.emulate` does, prepared once per KernelStep: the step's kernel's reference function
    on inputs of `step.dtype` on the pointers (shaped by its C ABI; an accumulating kernel also
    reads its destination), its result written into the output pointer in place."""

    def __init__(self, step: KernelStep, attr_names):
        # Kernel.reference_fn computes bfloat16 in float32 and clamps a saturating kernel's
        # integers; otherwise it only casts the result to the output dtype, which writing an
        # array into the output pointer does alike, so there the kernel's compute is called
        # directly (a non-array result is cast first).
        # A user kernel's compute() is checked against the output it writes, as the reference
        # checks it (library kernels keep their shape rules).
        kernel, dtype, self.out_dtype = step.kernel, step.dtype, step.out
        self.step, self.checked = step, not is_library(kernel)
        self.strided_inputs = is_library(kernel)   # a user's compute() may assume contiguous inputs
        direct = dtype != dtypes.bfloat16 and not kernel.saturates
        self.compute = kernel.compute if direct else kernel.reference_fn(dtype, {}, self.out_dtype)
        self.computes_into = direct and kernel.computes_into
        self.operands = kernel.arity + kernel.accumulates
        self.attr_names = attr_names

    def batched(self, attrs: tuple):
        """`Kernel.batches`: a library kernel's compute works on a leading batch axis (a user
        kernel's compute() is checked per call, so it is not batched)."""
        if not self.step.kernel.batches or self.checked:
            return None
        return partial(self.compute, **dict(zip(self.attr_names, attrs))) if attrs else self.compute

    def bind(self, pointers, sizes, attrs):
        inputs, out, out_dtype = tuple(pointers[: self.operands]), pointers[-1], self.out_dtype
        kernel, dtype = self.step.kernel, self.step.dtype
        compute = kernel.reference_fn(dtype, {}, out_dtype, out.shape) if self.checked else self.compute
        compute = partial(compute, **dict(zip(self.attr_names, attrs))) if attrs else compute
        ndarray, asarray = np.ndarray, np.asarray

        def run():
            result = compute(*inputs)
            out[...] = result if type(result) is ndarray else asarray(result).astype(out_dtype)
        return run


class NativeCall(KernelCall):
    """The kernel's C++ symbol in the native library, on the pointers, sizes and attrs in order."""

    def __init__(self, library, symbol: str, types):
        self.library, self.symbol, self.types = library, symbol, types

    def bind(self, pointers, sizes, attrs):
        call, symbol, types, args = self.library.call, self.symbol, self.types, [*pointers, *sizes, *attrs]
        return lambda: call(symbol, args, types)


def numpy_call(step: KernelStep, attr_names, types) -> NumpyCall:
    """The numpy `make_call`: a NumpyCall (the C types do not matter to numpy)."""
    return NumpyCall(step, attr_names)
