"""iron's fused attention kernel: softmax(q K^T / sqrt(d)) V for every query head of a decoder
step (or every query of a prefill) over the first `length` rows of a key/value cache, with an
online (running maximum) softmax, for multi-head (as many key/value heads as query heads) and grouped-query attention
(fewer): a decoder's attention is one call per layer instead of a chain of calls per head.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.kernels.base import Kernel, Within


class Attention(Kernel):
    """out: for each query head h of q (heads, d), softmax(K q_h / sqrt(d)) V over rows
    0..length-1 of its key/value head, keys and values (kv_heads, n, d) each, heads a multiple
    of kv_heads (query head h reads key/value head h // (heads // kv_heads)); q (heads, s, d)
    holds s queries per head (a prefill, each query over the same rows, no causal mask), out of
    q's shape. `length` may be per call (a decoder's pos + 1), in 1..n. The softmax is online,
    one cache row at a time: the running maximum m, the running sum l of exp(score - m) and the
    running output o, each rescaled by exp(m_old - m_new) when the maximum grows, o / l at the
    end; in float32 (bfloat16 rounded once at the end)."""

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
        if len(q) not in (2, 3) or len(keys) != 3 or keys != values or keys[2] != q[-1] or q[0] % keys[0]:
            cls.refuse(shapes, "needs q (heads, d) or (heads, s, d), keys and values (kv_heads, n, d), heads a "
                               "multiple of kv_heads")
        if length is not None and not 1 <= int(length) <= keys[1]:
            cls.refuse(shapes, f"needs 1 <= length <= {keys[1]}, not {length}")
        return q

    @classmethod
    def sizes(cls, shapes, out_shape):
        q, (kv_heads, n, d) = shapes[0], shapes[1]
        return q[0], q[1] if len(q) == 3 else 1, kv_heads, n, d

    @classmethod
    def abi_shapes(cls, sizes):
        heads, s, kv_heads, n, d = sizes
        return [(heads, s, d), (kv_heads, n, d), (kv_heads, n, d)], (heads, s, d)

    @staticmethod
    def compute(q, keys, values, length):
        heads, d = q.shape[0], q.shape[-1]
        group = heads // keys.shape[0]
        n = int(length)
        k = np.repeat(keys[:, :n], group, axis=0)     # (heads, n, d): query head h's key head
        v = np.repeat(values[:, :n], group, axis=0)
        queries = q.reshape(heads, -1, d)
        scale = np.float32(1) / np.sqrt(np.float32(d))
        scores = np.einsum("hsd,hnd->hsn", queries, k, dtype=np.float32) * scale
        top = np.full(queries.shape[:2], -np.inf, np.float32)
        total = np.zeros(queries.shape[:2], np.float32)
        out = np.zeros(queries.shape, np.float32)
        for j in range(n):
            score = scores[..., j]
            grown = np.maximum(top, score)
            rescale, weight = np.exp(top - grown), np.exp(score - grown)
            total = total * rescale + weight
            out = out * rescale[..., None] + weight[..., None] * v[:, None, j]
            top = grown
        return (out / total[..., None]).reshape(q.shape)


ATTENTION = (Attention,)
