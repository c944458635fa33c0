"""Which kernel class owns each kernel name, and finding it by C symbol (`add_f32` -> Add on
float32, `matvec_i8_i32` -> MatVec from int8 to int32).

A Plan names kernels by C symbol; the emulator, the sources printer and the invariants find
the class back here. Each class claims its name once, when it is defined (`Kernel.__init_subclass__`
calls `claim`): a name already claimed by another class, above all one of iron's library, is a
DeclarationError, so no user kernel can stand in for a library one. Defining the same class again
(same module and qualified name: a re-run notebook cell, a reloaded module) replaces it.
Since each name has one owning class and a symbol is spelled from the class's name and dtypes
(`Kernel.symbol`), a Plan's symbol stands for exactly one class: the table is written only by
class definitions and read back, so it cannot point a symbol at a kernel the design did not use.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from iron import dtypes
from iron.errors import DeclarationError, PlanError

LIBRARY_MODULE = "iron.kernels.library"
_SUFFIX = {dtypes.suffix(d): d for d in dtypes.SUPPORTED}
_OWNERS: dict[str, type] = {}


class KernelSymbol(NamedTuple):
    """What a symbol calls: the kernel, the dtype of its inputs and the dtype of its output."""

    kernel: type
    dtype: np.dtype
    out: np.dtype


def claim(kernel: type) -> None:
    """Record `kernel` as the owner of its name, or refuse a name another class owns."""
    owner = _OWNERS.get(kernel.name)
    if owner is not None and _origin(owner) != _origin(kernel):
        whose = "iron's library kernel" if is_library(owner) else "kernel"
        raise DeclarationError(
            f"kernel {kernel.__name__} is named '{kernel.name}', which is already the name of {whose} "
            f"{owner.__module__}.{owner.__qualname__}: a kernel's name is its C symbol and source file, so "
            "each kernel needs its own. Give it another name."
        )
    _OWNERS[kernel.name] = kernel


def is_library(kernel: type) -> bool:
    """Whether `kernel` is one of iron's library kernels (trusted to keep its own shape rule)."""
    return kernel.__module__ == LIBRARY_MODULE


def copy_kernel() -> type:
    """The library kernel that copies (Copy): how compiled designs move data between objects."""
    return next(k for k in _OWNERS.values() if is_library(k) and k.copies)


def lookup(symbol: str) -> KernelSymbol:
    """The kernel `symbol` calls: `<name>_<in>` (the default output) or `<name>_<in>_<out>`."""
    for found in (_two_types(symbol), _one_type(symbol)):
        if found is not None:
            return found
    stem = symbol.rpartition("_")[0]
    raise PlanError(f"no kernel implements symbol '{symbol}': define an iron.Kernel with name = '{stem}'.")


def _one_type(symbol: str) -> KernelSymbol | None:
    stem, _, suffix = symbol.rpartition("_")
    kernel, dtype = _OWNERS.get(stem), _SUFFIX.get(suffix)
    if kernel is None or dtype is None:
        return None
    return KernelSymbol(kernel, dtype, np.dtype(kernel.out_dtype(dtype)))


def _two_types(symbol: str) -> KernelSymbol | None:
    parts = symbol.rsplit("_", 2)
    if len(parts) != 3 or parts[1] not in _SUFFIX or parts[2] not in _SUFFIX:
        return None
    kernel, dtype, out = _OWNERS.get(parts[0]), _SUFFIX[parts[1]], _SUFFIX[parts[2]]
    if kernel is None or dtype not in kernel.dtypes or out not in kernel.out_dtypes(dtype):
        return None
    return KernelSymbol(kernel, dtype, out) if kernel.symbol(dtype, out) == symbol else None


def _origin(kernel: type) -> tuple[str, str]:
    return kernel.__module__, kernel.__qualname__


def accumulate_kernel() -> type:
    """The library kernel that adds its input into its destination (Accumulate): how a tiled
    matrix call sums its k-blocks."""
    return next(k for k in _OWNERS.values() if is_library(k) and k.accumulates and k.arity == 1)


def convert_kernel() -> type:
    """The library kernel that converts between dtypes (Cast): how a tiled bfloat16 matrix call
    rounds its float32 sums once."""
    f32 = np.dtype(np.float32)
    return next(k for k in _OWNERS.values()
                if is_library(k) and k.saturates and f32 in k.dtypes and dtypes.bfloat16 in k.out_dtypes(f32))
