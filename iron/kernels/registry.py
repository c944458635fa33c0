"""Which kernel class owns each kernel name, and finding it by C symbol (`add_f32` -> (Add, float32)).

A Plan names kernels by C symbol; the emulator, the sources printer and the invariants find
the class back here. Each class claims its name once, when it is defined (`Kernel.__init_subclass__`
calls `claim`): a name already claimed by another class, above all one of iron's library, is a
DeclarationError, so no user kernel can stand in for a library one. Defining the same class again
(same module and qualified name: a re-run notebook cell, a reloaded module) replaces it.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import DeclarationError, PlanError

LIBRARY_MODULE = "iron.kernels.library"
_SUFFIX = {dtypes.suffix(d): d for d in dtypes.SUPPORTED}
_OWNERS: dict[str, type] = {}


def claim(kernel: type) -> None:
    """Record `kernel` as the owner of its name, or refuse a name another class owns."""
    owner = _OWNERS.get(kernel.name)
    if owner is not None and _origin(owner) != _origin(kernel):
        whose = "iron's library kernel" if is_library(owner) else "kernel"
        raise DeclarationError(
            f"kernel {kernel.__qualname__} is named '{kernel.name}', which is already the name of {whose} "
            f"{owner.__module__}.{owner.__qualname__}: a kernel's name is its C symbol and source file, so "
            "each kernel needs its own. Give it another name."
        )
    _OWNERS[kernel.name] = kernel


def is_library(kernel: type) -> bool:
    """Whether `kernel` is one of iron's library kernels (trusted to keep its own shape rule)."""
    return kernel.__module__ == LIBRARY_MODULE


def lookup(symbol: str) -> tuple[type, np.dtype]:
    stem, _, suffix = symbol.rpartition("_")
    kernel = _OWNERS.get(stem)
    if kernel is None or suffix not in _SUFFIX:
        raise PlanError(f"no kernel implements symbol '{symbol}': define an iron.Kernel with name = '{stem}'.")
    return kernel, _SUFFIX[suffix]


def _origin(kernel: type) -> tuple[str, str]:
    return kernel.__module__, kernel.__qualname__
