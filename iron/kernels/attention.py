"""iron's fused attention kernel: softmax(q K^T / sqrt(d)) V for every query head of a decoder
step over the first `length` rows of a key/value cache, with an online (running maximum)
softmax, for multi-head (as many key/value heads as query heads) and grouped-query attention
(fewer): a decoder's attention is one call per layer instead of a chain of calls per head.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.kernels.base import Kernel, Within


class Attention(Kernel):
    """out (heads, d): for each query head h of q (heads, d), softmax(K q_h / sqrt(d)) V over rows
    0..length-1 of its key/value head, keys and values (kv_heads, n, d) each, heads a multiple
    of kv_heads (query head h reads key/value head h // (heads // kv_heads)). `length` is per
    call (a decoder's pos + 1), in 1..n. The softmax is online, one cache row at a time: the
    running maximum m, the running sum l of exp(s - m) and the running output o, each rescaled
    by exp(m_old - m_new) when the maximum grows, o / l at the end; in float32 (bfloat16 rounded
    once at the end)."""

    # no index_map (Role.OTHER): query head h reads key/value head h // group, which einsum's
    # notation cannot say
    name, arity = "attention", 3
    dtypes = dtypes.FLOATS
    attrs = {"length": Kernel.REQUIRED}
    scalar_attrs = ("length",)
    bounds = {"length": Within(1, input=1, axis=1)}   # a valid length in 1..n
    c_attrs = (("length", "i32"),)

    @classmethod
    def out_shape(cls, shapes, length=None):
        q, keys, values = shapes
        if len(q) != 2 or len(keys) != 3 or keys != values or keys[2] != q[1] or q[0] % keys[0]:
            cls.refuse(shapes, "needs q (heads, d), keys and values (kv_heads, n, d), heads a multiple of kv_heads")
        if length is not None and not 1 <= int(length) <= keys[1]:
            cls.refuse(shapes, f"needs 1 <= length <= {keys[1]}, not {length}")
        return q

    @classmethod
    def sizes(cls, shapes, out_shape):
        (heads, d), (kv_heads, n, _) = shapes[0], shapes[1]
        return heads, kv_heads, n, d

    @classmethod
    def abi_shapes(cls, sizes):
        heads, kv_heads, n, d = sizes
        return [(heads, d), (kv_heads, n, d), (kv_heads, n, d)], (heads, d)

    @staticmethod
    def compute(q, keys, values, length):
        heads, d = q.shape
        group = heads // keys.shape[0]
        n = int(length)
        k = np.repeat(keys[:, :n], group, axis=0)     # (heads, n, d): query head h's key head
        v = np.repeat(values[:, :n], group, axis=0)
        scale = np.float32(1) / np.sqrt(np.float32(d))
        scores = np.einsum("hd,hnd->hn", q, k, dtype=np.float32) * scale
        top = np.full(heads, -np.inf, np.float32)
        total = np.zeros(heads, np.float32)
        out = np.zeros((heads, d), np.float32)
        for j in range(n):
            s = scores[:, j]
            grown = np.maximum(top, s)
            rescale, weight = np.exp(top - grown), np.exp(s - grown)
            total = total * rescale + weight
            out = out * rescale[:, None] + weight[:, None] * v[:, j]
            top = grown
        return out / total[:, None]


ATTENTION = (Attention,)
