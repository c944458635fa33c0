"""Find a kernel class by its C symbol (`add_f32` -> Add on float32, `matvec_i8_i32` -> MatVec
from int8 to int32).

The emulator runs KernelSteps by symbol; this is how it gets back to the kernel's numpy
semantics without the traced Program. It searches iron's library and every user subclass of
`iron.Kernel` that has been defined; it does not import or load kernels itself.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from iron import dtypes
from iron.errors import PlanError
from iron.kernels.base import Kernel
from iron.kernels.library import LIBRARY

_SUFFIX = {dtypes.suffix(d): d for d in dtypes.SUPPORTED}


class KernelSymbol(NamedTuple):
    """What a symbol calls: the kernel, the dtype of its inputs and the dtype of its output."""

    kernel: type
    dtype: np.dtype
    out: np.dtype


def copy_kernel() -> type:
    """The library kernel that copies (Copy): how compiled designs move data between objects."""
    return next(k for k in LIBRARY if k.copies)


def all_kernels() -> list[type]:
    found, todo = [], list(Kernel.__subclasses__())
    while todo:
        k = todo.pop()
        found.append(k)
        todo.extend(k.__subclasses__())
    return found


def lookup(symbol: str) -> KernelSymbol:
    """The kernel `symbol` calls: `<name>_<in>` (the default output) or `<name>_<in>_<out>`."""
    kernels = all_kernels()
    for found in (_two_types(symbol, kernels), _one_type(symbol, kernels)):
        if found is not None:
            return found
    stem = symbol.rpartition("_")[0]
    raise PlanError(f"no kernel implements symbol '{symbol}': define an iron.Kernel with name = '{stem}'.")


def _one_type(symbol: str, kernels: list[type]) -> KernelSymbol | None:
    stem, _, suffix = symbol.rpartition("_")
    dtype = _SUFFIX.get(suffix)
    for k in kernels:
        if k.name == stem and dtype is not None:
            return KernelSymbol(k, dtype, np.dtype(k.out_dtype(dtype)))
    return None


def _two_types(symbol: str, kernels: list[type]) -> KernelSymbol | None:
    parts = symbol.rsplit("_", 2)
    if len(parts) != 3 or parts[1] not in _SUFFIX or parts[2] not in _SUFFIX:
        return None
    dtype, out = _SUFFIX[parts[1]], _SUFFIX[parts[2]]
    for k in kernels:
        if k.name == parts[0] and dtype in k.dtypes and out in k.out_dtypes(dtype) and k.symbol(dtype, out) == symbol:
            return KernelSymbol(k, dtype, out)
    return None


def accumulate_kernel() -> type:
    """The library kernel that adds its input into its destination (Accumulate): how a tiled
    matrix call sums its k-blocks."""
    return next(k for k in LIBRARY if k.accumulates and k.arity == 1)


def convert_kernel() -> type:
    """The library kernel that converts between dtypes (Cast): how a tiled bfloat16 matrix call
    rounds its float32 sums once."""
    return next(k for k in LIBRARY if k.saturates and dtypes.bfloat16 in k.out_dtypes(np.dtype(np.float32)))
