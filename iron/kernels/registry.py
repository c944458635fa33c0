"""Which kernel class owns each kernel name, and the library kernels the compiler calls on its own
(Copy, Accumulate, Cast).

Each class claims its name once, when it is defined (`Kernel.__init_subclass__` calls `claim`): a
name already claimed by another class, above all one of iron's library, is a DeclarationError, so no
user kernel can stand in for a library one, and a kernel's C symbol and source file (spelled from
its name) stand for one class. Defining the same class again (same module and qualified name: a
re-run notebook cell, a reloaded module) replaces it. A Plan's KernelStep holds the kernel class
itself, so nothing that runs or prints a Plan finds a kernel through this table.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import DeclarationError
from iron.kernels.traits import Role

LIBRARY_PACKAGE = "iron.kernels."   # every module of the package: the library by family
_OWNERS: dict[str, type] = {}


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
    return kernel.__module__.startswith(LIBRARY_PACKAGE)


def copy_kernel() -> type:
    """The library kernel that copies (Copy): how compiled designs move data between objects."""
    return next(k for k in _OWNERS.values() if is_library(k) and k.copies)


def strided_kernel(rows: bool = False) -> type:
    """The library kernel that gathers a view by its access pattern on a core (Strided): how a view
    the DMA cannot move in whole words reaches its reader; `rows`: the one picking a step slice
    row by row, which streams in blocks of whole rows as an expansion does (StridedRows)."""
    return next(k for k in _OWNERS.values() if is_library(k) and k.gathers and (k.role is Role.EXPANSION) == rows)


def scatter_kernel() -> type:
    """The library kernel that places its input's elements among its destination's on a core
    (Scatter): how a write into a view of a state the DMA cannot move lands."""
    return next(k for k in _OWNERS.values() if is_library(k) and k.scatters)


def _origin(kernel: type) -> tuple[str, str]:
    return kernel.__module__, kernel.__qualname__


def accumulate_kernel() -> type:
    """The library kernel that adds its input into its destination (Accumulate): how a tiled
    matrix call sums its k-blocks."""
    return next(k for k in _OWNERS.values() if is_library(k) and k.accumulates and k.arity == 1 and not k.scatters)


def convert_kernel() -> type:
    """The library kernel that converts between dtypes (Cast): how a tiled bfloat16 matrix call
    rounds its float32 sums once."""
    f32 = np.dtype(np.float32)
    return next(k for k in _OWNERS.values()
                if is_library(k) and k.saturates and f32 in k.dtypes and dtypes.bfloat16 in k.out_dtypes(f32))
