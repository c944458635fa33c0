"""iron's row reductions beyond Max and Argmax (library.py): Min and Sum, each of a whole tensor
x (n,) as one element, or of each row of a batch (rows, n) as (rows,). Integers sum exactly and
wrap to the output dtype (`dtype=np.int32` sums int8, uint8 or int16 without wrapping, as
mlir-aie's reduce_add sums int32); floats sum in float32 in order from the first element, so the
numpy and the C++ sums are the same bits.
"""
from __future__ import annotations

import numpy as np

from iron.kernels.base import Kernel
from iron.kernels.library import WIDER_DOTS, Extreme, like_argmax


class Min(Extreme):
    """The smallest element of x (n,), as one element of x's dtype; of each row of a batch
    (rows, n), as (rows,) (the first NaN, as numpy's min)."""

    name = "min"
    pick = staticmethod(np.argmin)


class Sum(Kernel):
    """The sum of x (n,), as one element; of each row of a batch (rows, n), as (rows,). `dtype=`
    widens it as MatVec's does (int8, uint8, int16 into int32; bfloat16 into float32)."""

    index_map = "rc->r"
    name = "sum"
    results = WIDER_DOTS
    out_shape, sizes, abi_shapes = like_argmax()

    @staticmethod
    def compute(x):
        if x.dtype.kind in "iu":
            return x.astype(np.int64).sum(axis=-1)
        return np.cumsum(x, axis=-1, dtype=np.float32)[..., -1]   # in order, as the C++ adds


KERNELS = (Min, Sum)
