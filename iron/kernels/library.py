"""iron's kernel library: Copy, elementwise Add/Sub/Mul/Scale/ReLU/SiLU/Exp, Accumulate, MatVec,
MatMul, RMSNorm, Softmax (per-call valid length) and Argmax.

Each kernel is its shape rule, its numpy `compute` (the semantics the emulator, the C++ and the
reference all share) and its C ABI. Integers wrap around; bfloat16 computes in float32 and rounds
once. Placement, fusion and MLIR are the compiler's business, not this module's.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.kernels.base import Kernel

FLOATS = dtypes.FLOATS


class Copy(Kernel):
    """out = x. With a view input it gathers (`w[node]`); with out= a view it scatters."""

    keeps_dtype = copies = True
    name = "copy"
    exact_in_dtype = True

    @staticmethod
    def compute(x):
        return np.array(x, copy=True)


class Add(Kernel):
    """out = a + b, elementwise."""

    keeps_dtype = True
    name, arity = "add", 2
    compute = staticmethod(np.add)


class Sub(Kernel):
    """out = a - b, elementwise."""

    keeps_dtype = True
    name, arity = "sub", 2
    compute = staticmethod(np.subtract)


class Mul(Kernel):
    """out = a * b, elementwise."""

    keeps_dtype = True
    name, arity = "mul", 2
    compute = staticmethod(np.multiply)


class Scale(Kernel):
    """out = x * factor (factor fixed when the design compiles)."""

    name = "scale"
    dtypes = FLOATS
    attrs = {"factor": Kernel.REQUIRED}
    c_attrs = (("factor", "f32"),)

    @staticmethod
    def compute(x, factor):
        return np.multiply(x, np.float32(factor))


class ReLU(Kernel):
    """out = max(x, 0)."""

    keeps_dtype = True
    name = "relu"

    @staticmethod
    def compute(x):
        return np.maximum(x, x.dtype.type(0))


class SiLU(Kernel):
    """out = x * sigmoid(x)."""

    name = "silu"
    dtypes = FLOATS

    @staticmethod
    def compute(x):
        return x / (np.float32(1) + np.exp(-x))


class Exp(Kernel):
    """out = exp(x)."""

    name = "exp"
    dtypes = FLOATS

    compute = staticmethod(np.exp)


class Accumulate(Kernel):
    """state += x: `Accumulate.step(x, out=self.acc[pos])`."""

    keeps_dtype = True
    name = "accumulate"
    accumulates = needs_out = True

    @staticmethod
    def compute(x, acc):
        return np.add(acc, x)


class MatVec(Kernel):
    """out = W @ x for W (M, K) and x (K,)."""

    name, arity = "matvec", 2

    @classmethod
    def out_shape(cls, shapes, **attrs):
        w, x = shapes
        if len(w) != 2 or len(x) != 1 or w[1] != x[0]:
            cls.refuse(shapes, "needs W (M, K) and x (K,)")
        return (w[0],)

    @classmethod
    def sizes(cls, shapes, out_shape):
        return tuple(shapes[0])

    @classmethod
    def abi_shapes(cls, sizes):
        m, k = sizes
        return [(m, k), (k,)], (m,)

    @staticmethod
    def compute(w, x):
        if w.dtype.kind in "iu":
            return w.astype(np.int64) @ x.astype(np.int64)
        return w @ x


class MatMul(Kernel):
    """out = A @ B for A (M, K) and B (K, N)."""

    name, arity = "matmul", 2

    @classmethod
    def out_shape(cls, shapes, **attrs):
        a, b = shapes
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            cls.refuse(shapes, "needs A (M, K) and B (K, N)")
        return (a[0], b[1])

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (shapes[0][0], shapes[0][1], shapes[1][1])

    @classmethod
    def abi_shapes(cls, sizes):
        m, k, n = sizes
        return [(m, k), (k, n)], (m, n)

    compute = MatVec.compute


class RMSNorm(Kernel):
    """out = x / sqrt(mean(x^2) + eps) * w, for x and w of shape (n,)."""

    name, arity = "rmsnorm", 2
    dtypes = FLOATS
    attrs = {"eps": 1e-5}
    c_attrs = (("eps", "f32"),)

    @classmethod
    def out_shape(cls, shapes, **attrs):
        if len(shapes[0]) != 1 or shapes[0] != shapes[1]:
            cls.refuse(shapes, "needs x (n,) and w (n,)")
        return shapes[0]

    @staticmethod
    def compute(x, w, eps):
        scale = np.float32(1) / np.sqrt(np.mean(x * x, dtype=np.float32) + np.float32(eps))
        return x * scale * w


class Softmax(Kernel):
    """Softmax of x[:length] (length per call, default all of x); out[length:] is 0."""

    name = "softmax"
    dtypes = FLOATS
    attrs = {"length": None}
    scalar_attrs = ("length",)
    c_attrs = (("length", "i32"),)

    @classmethod
    def out_shape(cls, shapes, length=None):
        if len(shapes[0]) != 1:
            cls.refuse(shapes, "needs x (n,)")
        if length is not None and not 1 <= int(length) <= shapes[0][0]:
            cls.refuse(shapes, f"needs 1 <= length <= {shapes[0][0]}, not {length}")
        return shapes[0]

    @staticmethod
    def compute(x, length=None):
        n = x.shape[0] if length is None else int(length)
        out = np.zeros_like(x)
        e = np.exp(x[:n] - x[:n].max())
        out[:n] = e / e.sum(dtype=np.float32)
        return out


class Argmax(Kernel):
    """The index of the first maximum of x (n,), as one int32 element."""

    keeps_dtype = True
    name = "argmax"
    exact_in_dtype = True

    @classmethod
    def out_shape(cls, shapes, **attrs):
        if len(shapes[0]) != 1:
            cls.refuse(shapes, "needs x (n,)")
        return ()

    @classmethod
    def out_dtype(cls, dtype):
        return np.dtype(np.int32)

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (shapes[0][0],)

    @classmethod
    def abi_shapes(cls, sizes):
        return [(sizes[0],)], (1,)

    @staticmethod
    def compute(x):
        return np.array(np.argmax(x), dtype=np.int32)


LIBRARY = (Copy, Add, Sub, Mul, Scale, ReLU, SiLU, Exp, Accumulate, MatVec, MatMul, RMSNorm, Softmax, Argmax)
