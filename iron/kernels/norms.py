"""iron's LayerNorm, without (`LayerNorm`) and with (`LayerNormAffine`) a weight and bias, over
each row's first `length` elements (default the whole row; the rest of each row is 0), for
x (n,) or a batch of rows (rows, n). Sums are float32, added in order from the first element as
the C++ adds them, so numpy and C++ give the same bits; bfloat16 computes in float32 and rounds
once. RMSNorm is in library.py.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.kernels.base import Kernel
from iron.kernels.library import RMSNorm, check_length

F32 = np.float32


def _in_order_sum(x):
    return np.cumsum(x, axis=-1, dtype=F32)[..., -1:]


def layer_norm(x, eps, length=None, weight=None, bias=None):
    """(x - mean) / sqrt(var + eps) of each row's first `length` elements, times weight plus bias
    when given; 0 past `length`."""
    n = x.shape[-1] if length is None else int(length)
    out = np.zeros_like(x)
    valid = x[..., :n]
    mean = _in_order_sum(valid) / F32(n)
    inverse = F32(1) / np.sqrt(_in_order_sum((valid - mean) * (valid - mean)) / F32(n) + F32(eps))
    normal = (valid - mean) * inverse
    out[..., :n] = normal if weight is None else normal * weight[:n] + bias[:n]
    return out


class LayerNorm(Kernel):
    """out = (x - mean(x)) / sqrt(var(x) + eps) over each row's first `length` elements (the
    rest 0), for x (n,) or (rows, n): PyTorch's layer_norm without weight and bias."""

    index_map, reduces, length_axes = "rc->rc", "c", "c"   # each row read whole, up to its length
    name = "layer_norm"
    dtypes = dtypes.FLOATS
    attrs = {"eps": 1e-5, "length": None}
    c_attrs = (("eps", "f32"), ("length", "i32"))

    @classmethod
    def out_shape(cls, shapes, eps=None, length=None):
        x, *shared = shapes
        if len(x) not in (1, 2) or any(s != x[-1:] for s in shared):
            cls.refuse(shapes, "needs x (n,) or (rows, n)" + ", weight (n,) and bias (n,)" * bool(shared))
        check_length(cls, shapes, length)
        return x

    sizes = classmethod(RMSNorm.sizes.__func__)

    @classmethod
    def abi_shapes(cls, sizes):
        rows, n = sizes
        return [(rows, n), *[(n,)] * (cls.arity - 1)], (rows, n)

    @staticmethod
    def compute(x, eps, length=None):
        return layer_norm(x, eps, length)


class LayerNormAffine(LayerNorm):
    """LayerNorm of each row times weight plus bias: x (n,) or (rows, n), weight (n,) and bias
    (n,) shared by every row (PyTorch's layer_norm with weight and bias)."""

    name, arity = "layer_norm_affine", 3
    index_map = "rc,c,c->rc"
    source_kernel = LayerNorm

    @staticmethod
    def compute(x, weight, bias, eps, length=None):
        return layer_norm(x, eps, length, weight, bias)


KERNELS = (LayerNorm, LayerNormAffine)
