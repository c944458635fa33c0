"""Find a kernel class by its C symbol (`add_f32` -> (Add, float32)).

The emulator runs KernelSteps by symbol; this is how it gets back to the kernel's numpy
semantics without the traced Program. It searches iron's library and every user subclass of
`iron.Kernel` that has been defined; it does not import or load kernels itself.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import PlanError
from iron.kernels.base import Kernel

_SUFFIX = {dtypes.suffix(d): d for d in dtypes.SUPPORTED}


def all_kernels() -> list[type]:
    found, todo = [], list(Kernel.__subclasses__())
    while todo:
        k = todo.pop()
        found.append(k)
        todo.extend(k.__subclasses__())
    return found


def lookup(symbol: str) -> tuple[type, np.dtype]:
    stem, _, suffix = symbol.rpartition("_")
    for k in all_kernels():
        if k.name == stem and suffix in _SUFFIX:
            return k, _SUFFIX[suffix]
    raise PlanError(f"no kernel implements symbol '{symbol}': define an iron.Kernel with name = '{stem}'.")
