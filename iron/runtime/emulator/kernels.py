"""How the emulator calls a kernel symbol: through the kernel's numpy reference function, as
`Kernel.emulate` does (mode "numpy", the default), or through its C++ compiled for the host
(mode "native", via native.py).

`kernel_calls(mode, plan)` returns `make_call(kernel, dtype, attr_names, types)`, which core.py
uses once per KernelStep to get `call(pointers, sizes, attrs)`. The mode comes from the
Emulator's `kernels=` argument, else `IRON_EMULATOR_KERNELS`, else "numpy". This module does not
resolve operands (core.py) and does not compile C++ itself (native.py does).
"""
from __future__ import annotations

import os

from iron.compiler.plan import KernelStep
from iron.errors import BackendUnavailable
from iron.kernels.registry import lookup

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
    for kernel in plan_kernels(plan):
        name, text = kernel.source_text()
        sources[name] = text
    library = NativeLibrary.load(sources)

    def native_call(kernel, dtype, attr_names, types):
        symbol = kernel.symbol(dtype)

        def call(pointers, sizes, attrs):
            library.call(symbol, [*pointers, *sizes, *attrs], types)
        return call
    return native_call


def numpy_call(kernel, dtype, attr_names, types):
    """What `Kernel.emulate` does, prepared once per KernelStep: the kernel's reference function
    in `dtype` on the pointers (shaped by its C ABI; an accumulating kernel also reads its
    destination), its result written into the output pointer in place."""
    compute = kernel.reference_fn(dtype, {})
    operands = kernel.arity + kernel.accumulates

    def call(pointers, sizes, attrs):
        pointers[-1][...] = compute(*pointers[:operands], **dict(zip(attr_names, attrs)))
    return call


def plan_kernels(plan) -> list[type]:
    """The kernel classes the plan's KernelSteps call, in first-use order."""
    found: dict[type, None] = {}
    for fn in plan.functions:
        for step in fn.steps:
            if isinstance(step, KernelStep):
                found.setdefault(lookup(step.symbol)[0])
    return list(found)
