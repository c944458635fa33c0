"""iron's kernel library: Copy, the elementwise Add, Sub, Mul (of elementwise.py's Binary family), Scale, ReLU, SiLU and Exp,
Accumulate, MatVec, MatMul, MatMulAccumulate (acc += A @ B), Dequant and QMatVec (MatVec on GGUF weight blocks), RMSNorm, Softmax (with a per-call valid length), Argmax, the
conversions Cast and Requantize, and Concat, each its shape rule, numpy `compute`, traits and C
ABI. MatVec and MatMul can give a wider result than their inputs (int8 -> int32); Cast and
Requantize saturate.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from iron import dtypes
from iron.errors import KernelTypeError
from iron.kernels.base import Kernel, Within
from iron.kernels.elementwise import Binary
from iron.kernels.traits import BLOCK_ELEMENTS

FLOATS = dtypes.FLOATS
I8, U8, I16, I32 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32))
F32, BF16 = np.dtype(np.float32), dtypes.bfloat16
# The wider results a dot product may give (dtype=): exact integer sums, float32 sums of bfloat16.
WIDER_DOTS = {I8: frozenset({I32}), U8: frozenset({I32}), I16: frozenset({I32}), BF16: frozenset({F32})}
# The products of two dtypes a dot product takes (IRON_MIXED_DOTS): uint8 activations times int8
# weights, and the other way round, summed exactly into int32.
MIXED_DOTS = {(U8, I8): I32, (I8, U8): I32}


class Copy(Kernel):
    """out = x. With a view input it gathers (`w[node]`); with out= a view it scatters."""

    index_map = "i->i"
    keeps_zeros = True
    batches = True
    keeps_dtype = copies = True
    name = "copy"
    exact_in_dtype = True

    @staticmethod
    def compute(x):
        return np.array(x, copy=True)


def placed(offset: int, dims) -> np.ndarray:
    """The flat positions offset + sum(i_d * s_d), i_d < n_d, of an access pattern of four
    (n_d, s_d) dimensions, outermost first, in row-major order of (i0, i1, i2, i3)."""
    return (offset + sum(np.arange(n).reshape([-1 if i == d else 1 for i in range(4)]) * st
                         for d, (n, st) in enumerate(dims))).reshape(-1)


class Strided(Kernel):
    """out = x's elements at offset + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 (x seen flat, in
    elements), i_d < n_d row-major, as `shape`; its C ABI takes x's length and out's. It is a
    view the DMA cannot move (a step slice, a transpose or a broadcast of elements narrower than
    a 32-bit word), gathered by the core: the compiler inserts it (`copy_view_for_grid`), its
    pattern an access pattern of four dimensions, as a BD's (docs/platform.md section 2)."""

    # no index_map: its output elements are its input's in another order
    name = "strided"
    attrs = {"shape": Kernel.REQUIRED, "offset": 0, **{f"n{d}": 1 for d in range(4)}, **{f"s{d}": 0 for d in range(4)}}
    c_attrs = (("offset", "i32"), *((f"n{d}", "i32") for d in range(4)), *((f"s{d}", "i32") for d in range(4)))
    keeps_dtype = exact_in_dtype = gathers = True

    @classmethod
    def out_shape(cls, shapes, shape, offset=0, **dims):
        counts = [dims.get(f"n{d}", 1) for d in range(4)]
        if int(np.prod(counts)) != int(np.prod(shape, dtype=np.int64)):
            cls.refuse(shapes, f"needs n0..n3 ({counts}) to make the {shape} it gives")
        return tuple(shape)

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (max(1, int(np.prod(shapes[0], dtype=np.int64))), max(1, int(np.prod(out_shape, dtype=np.int64))))

    @classmethod
    def abi_shapes(cls, sizes):
        return [(sizes[0],)], (sizes[1],)

    @staticmethod
    def compute(x, offset=0, n0=1, n1=1, n2=1, n3=1, s0=0, s1=0, s2=0, s3=0, shape=None):
        index = placed(offset, ((n0, s0), (n1, s1), (n2, s2), (n3, s3)))
        return np.asarray(x).reshape(-1)[index].reshape(-1 if shape is None else shape)


class Scatter(Strided):
    """out = a copy of its destination with x's elements placed at offset + i0 * s0 + i1 * s1 +
    i2 * s2 + i3 * s3 (out seen flat, in elements), i_d < n_d row-major: Strided's inverse. It
    writes a view of a state the DMA cannot move (an interior of 1- or 2-byte elements starting
    mid-word; the last band of a transpose into a DDR buffer of the compiler's): the compiler
    inserts it (`scatter_into_state`, `transposed_bands`), its destination the fewest whole words
    around the view, read and written back whole; its C ABI takes x's length and out's."""

    name = "scatter"
    source_kernel = Strided   # strided.cc defines both, over one loop
    accumulates = needs_out = scatters = True
    gathers = False

    @classmethod
    def out_shape(cls, shapes, shape, offset=0, **dims):
        counts = [dims.get(f"n{d}", 1) for d in range(4)]
        if int(np.prod(counts)) != int(np.prod(shapes[0], dtype=np.int64)):
            cls.refuse(shapes, f"needs n0..n3 ({counts}) to place every element of its input")
        return tuple(shape)

    @staticmethod
    def compute(x, out, offset=0, n0=1, n1=1, n2=1, n3=1, s0=0, s1=0, s2=0, s3=0, shape=None):
        result = np.array(out, copy=True)
        result.reshape(-1)[placed(offset, ((n0, s0), (n1, s1), (n2, s2), (n3, s3)))] = np.asarray(x).reshape(-1)
        return result


class RowWise(Kernel):
    """A kernel making each row of its result (rows, b) from one row of its input (rows, a): its
    C ABI takes the rows, a and b."""

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (*shapes[0], out_shape[1])

    @classmethod
    def abi_shapes(cls, sizes):
        rows, a, b = sizes
        return [(rows, a)], (rows, b)


class StridedRows(RowWise):
    """Each row of out is Strided's pattern over the same row of x: out[r, k] = x[r, offset + i0 *
    s0 + i1 * s1 + i2 * s2 + i3 * s3], k counting (i0, i1, i2, i3) row-major. A step slice along
    the rows (`x[:, ::2]`) or a transpose (each row of x's words one column of words of it) of a
    tensor larger than a tile whose elements are narrower than a 32-bit word, picked row by row
    by the cores, which take x in blocks of whole rows as they take an expansion's
    (`stream_row_blocks`); the compiler inserts it (`copy_view_for_grid`). Its C ABI takes the
    rows, x's row length and out's."""

    index_map, reduces = "rb->rc", ""   # row r of the view is picked from row r of x
    batches = True
    name = "strided_rows"
    source_kernel = Strided   # strided.cc defines it too
    attrs = {"width": Kernel.REQUIRED, "offset": 0, **{f"n{d}": 1 for d in range(4)}, **{f"s{d}": 0 for d in range(4)}}
    c_attrs = Strided.c_attrs
    keeps_dtype = exact_in_dtype = gathers = True

    @classmethod
    def out_shape(cls, shapes, width, offset=0, **dims):
        if len(shapes[0]) != 2 or shapes[0][1] < width:   # rows lying padded wider: it picks within their first `width`
            cls.refuse(shapes, f"needs whole rows of {width} elements")
        return (shapes[0][0], int(np.prod([dims.get(f"n{d}", 1) for d in range(4)])))

    @staticmethod
    def compute(x, offset=0, n0=1, n1=1, n2=1, n3=1, s0=0, s1=0, s2=0, s3=0, width=None):
        return x[..., placed(offset, ((n0, s0), (n1, s1), (n2, s2), (n3, s3)))]


class Add(Binary):
    """out = a + b, elementwise, or with a constant: `Add.step(x, 3)`; integers wrap."""

    keeps_zeros = True
    keeps_dtype = True
    name = "add"
    op = staticmethod(np.add)


class Sub(Binary):
    """out = a - b, elementwise (`Sub.step(1.5, x)`: 1.5 - x); integers wrap."""

    keeps_zeros = True
    keeps_dtype = True
    name = "sub"
    op = staticmethod(np.subtract)


class Mul(Binary):
    """out = a * b, elementwise, or with a constant: `Mul.step(x, 3)`; integers wrap."""

    keeps_zeros = constant_keeps_zeros = True
    keeps_dtype = True
    name = "mul"
    op = staticmethod(np.multiply)


class Scale(Kernel):
    """out = x * factor (a float32 factor fixed when the design compiles); on integers the product
    is computed in float64, rounded to nearest even and saturated to the dtype's range, as an AIE
    accumulator's shift-round-saturate gives it back (mlir-aie's vector_scalar_mul)."""

    index_map = "i->i"
    keeps_zeros = True
    batches = True
    saturates = True
    name = "scale"
    attrs = {"factor": Kernel.REQUIRED}
    c_attrs = (("factor", "f32"),)

    @staticmethod
    def compute(x, factor):
        if x.dtype.kind in "iu":
            return x.astype(np.float64) * np.float64(np.float32(factor))
        return np.multiply(x, np.float32(factor))


class ReLU(Kernel):
    """out = max(x, 0)."""

    index_map = "i->i"
    keeps_zeros = True
    batches = True
    keeps_dtype = True
    name = "relu"

    @staticmethod
    def compute(x):
        return np.maximum(x, x.dtype.type(0))


class SiLU(Kernel):
    """out = x * sigmoid(x)."""

    index_map = "i->i"
    keeps_zeros = True
    name = "silu"
    dtypes = FLOATS

    @staticmethod
    def compute(x):
        return x / (np.float32(1) + np.exp(-x))


class Exp(Kernel):
    """out = exp(x)."""

    index_map = "i->i"
    name = "exp"
    dtypes = FLOATS

    compute = staticmethod(np.exp)


class Accumulate(Kernel):
    """state += x: `Accumulate.step(x, out=self.acc[pos])`."""

    index_map = "i->i"   # its destination is `out`, not an input
    keeps_zeros = True
    batches = True
    keeps_dtype = True
    name = "accumulate"
    accumulates = needs_out = True

    @staticmethod
    def compute(x, acc):
        return np.add(acc, x)


class MatVec(Kernel):
    """out = W @ x for W (M, K) and x (K,); `dtype=np.int32` sums int8, uint8 or int16 operands
    into int32 (instead of wrapping to their width), `dtype=np.float32` keeps a bfloat16 sum in
    float32. uint8 W with int8 x (or int8 W with uint8 x) sums into int32."""

    index_map = "mk,k->m"
    batches = True
    name, arity = "matvec", 2
    results, mixed = WIDER_DOTS, MIXED_DOTS

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
        # x as a column, so a stack of calls (w (B, M, K), x (B, K)) is one matmul of the same
        # matrix-vector product per call
        if w.dtype.kind in "iu":
            w, x = w.astype(np.int64), x.astype(np.int64)
        return np.matmul(w, x[..., None])[..., 0]


class MatMul(Kernel):
    """out = A @ B for A (M, K) and B (K, N); `dtype=` widens the result as MatVec's does, and
    uint8 A with int8 B (or int8 with uint8) sums into int32."""

    index_map = "mk,kn->mn"
    batches = computes_into = True
    name, arity = "matmul", 2
    results, mixed = WIDER_DOTS, MIXED_DOTS

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

    @staticmethod
    def compute(a, b, out=None):
        if a.dtype.kind in "iu":
            a, b = a.astype(np.int64), b.astype(np.int64)
        return np.matmul(a, b, out=out, casting="unsafe")   # an integer product wraps to out's dtype


class MatMulAccumulate(Kernel):
    """acc += A @ B for A (M, K), B (K, N) and acc (M, N) of the product's dtype (`dtype=` widens
    it as MatMul's does): how a tiled MatMul or MatVec (N = 1) adds each further k-block's
    product to its block's sum in one call. An integer product wraps to acc's dtype before the
    add, so integers equal MatMul then Accumulate bit for bit; a float product is added in
    float32 and the sum rounded once (float32 sums equal that pair's in numpy)."""

    index_map = "mk,kn->mn"
    batches = computes_into = True
    name, arity = "matmul_accumulate", 2
    results, mixed = WIDER_DOTS, MIXED_DOTS
    accumulates = needs_out = True
    out_shape, sizes, abi_shapes = MatMul.out_shape, MatMul.sizes, MatMul.abi_shapes

    @staticmethod
    def compute(a, b, acc, out=None):
        if a.dtype.kind in "iu":
            return np.add(acc, (a.astype(np.int64) @ b.astype(np.int64)).astype(acc.dtype), out=out)
        # the product laid out as acc: numpy lays out a product of broadcast stacks (a batch's
        # operands) in broadcast order, and the add would walk one of the two out of order
        product = np.matmul(a, b, out=np.empty_like(acc, np.result_type(a, b)))
        into = product if out is None and product.dtype == np.result_type(acc, product) else out
        return np.add(acc, product, out=into)


MatVec.summed_by = MatMul.summed_by = MatMulAccumulate   # a MatVec's x is B of N = 1 column

class RMSNorm(Kernel):
    """out = x / sqrt(mean(x^2) + eps) * w over each row's first `length` elements (default the
    whole row; the rest of each row is 0), for x (n,) or a batch of rows (rows, n) and w (n,)."""

    index_map, reduces, length_axes = "rc,c->rc", "c", "c"   # each row read whole, up to its length
    name, arity = "rmsnorm", 2
    dtypes = FLOATS
    attrs = {"eps": 1e-5, "length": None}
    c_attrs = (("eps", "f32"), ("length", "i32"))

    @classmethod
    def out_shape(cls, shapes, eps=None, length=None):
        x, w = shapes
        if len(x) not in (1, 2) or w != x[-1:]:
            cls.refuse(shapes, "needs x (n,) or (rows, n) and w (n,)")
        check_length(cls, shapes, length)
        return x

    @classmethod
    def sizes(cls, shapes, out_shape):
        return rows_and_width(shapes[0])

    @classmethod
    def abi_shapes(cls, sizes):
        rows, n = sizes
        return [(rows, n), (n,)], (rows, n)

    @staticmethod
    def compute(x, w, eps, length=None):
        n = x.shape[-1] if length is None else int(length)
        if n < x.shape[-1]:
            return np.concatenate([RMSNorm.compute(x[..., :n], w[:n], eps), np.zeros_like(x[..., n:])], axis=-1)
        mean = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return x * (np.float32(1) / np.sqrt(mean + np.float32(eps))) * w


class Softmax(Kernel):
    """Softmax of each row's first `length` elements (length per call, default the whole row),
    for x (n,) or a batch of rows (rows, n); the rest of each row is 0."""

    index_map, reduces, length_axes = "rc->rc", "c", "c"
    bounds = {"length": Within(1, axis=-1)}   # a valid length in 1..n
    name = "softmax"
    dtypes = FLOATS
    attrs = {"length": None}
    scalar_attrs = ("length",)
    c_attrs = (("length", "i32"),)

    @classmethod
    def out_shape(cls, shapes, length=None):
        if len(shapes[0]) not in (1, 2):
            cls.refuse(shapes, "needs x (n,) or (rows, n)")
        check_length(cls, shapes, length)
        return shapes[0]

    @classmethod
    def sizes(cls, shapes, out_shape):
        return rows_and_width(shapes[0])

    @classmethod
    def abi_shapes(cls, sizes):
        return [sizes], sizes

    @staticmethod
    def compute(x, length=None):
        n = x.shape[-1] if length is None else int(length)
        out = np.zeros_like(x)
        e = np.exp(x[..., :n] - x[..., :n].max(axis=-1, keepdims=True))
        out[..., :n] = e / e.sum(axis=-1, keepdims=True, dtype=np.float32)
        return out


class Argmax(Kernel):
    """The index of the first maximum of x (n,)'s first `length` elements (default all of them),
    as one int32 element; of each row of a batch (rows, n), as (rows,) int32."""

    index_map, length_axes = "rc->r", "c"
    keeps_dtype = True
    name = "argmax"
    exact_in_dtype = True
    attrs = {"length": None}
    c_attrs = (("length", "i32"),)

    @classmethod
    def out_shape(cls, shapes, length=None):
        if len(shapes[0]) not in (1, 2):
            cls.refuse(shapes, "needs x (n,) or (rows, n)")
        check_length(cls, shapes, length)
        return shapes[0][:-1]

    @classmethod
    def out_dtype(cls, dtype):
        return np.dtype(np.int32)

    @classmethod
    def sizes(cls, shapes, out_shape):
        return rows_and_width(shapes[0])

    @classmethod
    def abi_shapes(cls, sizes):
        return [sizes], (sizes[0],)

    @staticmethod
    def compute(x, length=None):
        return np.asarray(np.argmax(x[..., :length], axis=-1), dtype=np.int32)


def check_length(kernel, shapes, length) -> None:
    """A row kernel's static `length` (None: the whole row) is in 1..n."""
    if length is not None and not 1 <= int(length) <= shapes[0][-1]:
        kernel.refuse(shapes, f"needs 1 <= length <= {shapes[0][-1]}, not {length}")


def rows_and_width(shape: tuple[int, ...]) -> tuple[int, int]:
    """A row kernel's (rows, n) size operands: one row for x (n,)."""
    return (1, *shape) if len(shape) == 1 else tuple(shape)


def like_argmax() -> tuple:
    """Argmax's shape rule, size operands and C ABI shapes, rebound for another row reduction to
    take as its own (Max, Min, Sum: its errors then name it, not Argmax)."""
    return tuple(classmethod(f.__func__) for f in (Argmax.out_shape, Argmax.sizes, Argmax.abi_shapes))


class Extreme(Kernel):
    """The element of x (n,) that `pick` (np.argmax or np.argmin) picks first, as one element of
    x's dtype; of each row of a batch (rows, n), as (rows,)."""

    index_map = "rc->r"
    keeps_dtype = exact_in_dtype = True
    out_shape, sizes, abi_shapes = like_argmax()
    pick: ClassVar[staticmethod]

    @classmethod
    def compute(cls, x):
        return first_pick(x, cls.pick)


class Max(Extreme):
    """The largest element of x (n,), as one element of x's dtype; of each row of a batch
    (rows, n), as (rows,)."""

    name = "max"
    pick = staticmethod(np.argmax)


def first_pick(x, arg):
    """The element of each row `arg` (np.argmax, np.argmin) picks: the first extreme, the first
    NaN, of equal zeros the first, as the C++ picks (numpy's max may pick either zero)."""
    return np.take_along_axis(x, np.expand_dims(arg(x, axis=-1), -1), axis=-1)[..., 0]


class ArgmaxBlocks(Kernel):
    """A row's argmax from its blocks: `indices[b]` (a row index held exactly as a float) for b
    the first maximum of `values`, where values[b] is block b's Max and indices[b] the row index
    of its first maximum. Argmax of a row wider than a tile: Argmax and Max per block, then this."""

    index_map = "b,b->"
    name, arity = "argmax_blocks", 2
    dtypes = FLOATS
    exact_in_dtype = True
    out_dtype = Argmax.out_dtype
    @classmethod
    def sizes(cls, shapes, out_shape):
        return (shapes[0][0],)

    @classmethod
    def abi_shapes(cls, sizes):
        return [(sizes[0],)] * 2, (1,)

    @classmethod
    def out_shape(cls, shapes, **attrs):
        if len(shapes[0]) != 1 or shapes[0] != shapes[1]:
            cls.refuse(shapes, "needs values (n,) and indices (n,)")
        return ()

    @staticmethod
    def compute(values, indices):
        return np.array(indices[np.argmax(values)], dtype=np.int32)


GGUF_BLOCKS = {20: "Q4_1", 34: "Q8_0"}   # a GGUF block's bytes -> its format (32 weights each)


def blocks_per_row(kernel, shapes, block_bytes) -> int:
    """The GGUF blocks in each row of a call's input 0 (rows, row bytes) uint8, refused unless
    `block_bytes` names a format and the rows hold whole blocks."""
    if block_bytes not in GGUF_BLOCKS:
        kernel.refuse(shapes, f"needs block_bytes= 20 (Q4_1) or 34 (Q8_0), the bytes of one block of the "
                              f"weights' GGUF format, not {block_bytes!r}")
    if len(shapes[0]) != 2 or shapes[0][1] % block_bytes:
        kernel.refuse(shapes, f"needs blocks (rows, a multiple of {block_bytes} bytes): each row of the weights "
                              f"as the file ships it, {block_bytes}-byte {GGUF_BLOCKS[block_bytes]} blocks of "
                              f"{BLOCK_ELEMENTS} weights")
    return shapes[0][1] // block_bytes


class Dequant(RowWise):
    """GGUF weight blocks (rows, row bytes) uint8 -> the weights (rows, columns) float32, each
    row holding blocks of 32 weights of `block_bytes` bytes: 20 is Q4_1 (float16 scale d and
    minimum m, 16 bytes of 4-bit codes, low nibbles first: w = d * code + m), 34 is Q8_0 (float16
    scale d, 32 int8 codes: w = code * d). Bit-exact with gguf.quants.dequantize."""

    index_map, reduces = "rb->rc", ""   # row r of the weights is row r of the blocks expanded
    batches = True
    name = "dequant"
    dtypes = frozenset({U8})
    attrs = {"block_bytes": Kernel.REQUIRED}
    c_attrs = (("block_bytes", "i32"),)
    FORMATS = GGUF_BLOCKS

    @classmethod
    def out_dtype(cls, dtype):
        return F32

    @classmethod
    def out_shape(cls, shapes, block_bytes):
        return (shapes[0][0], blocks_per_row(cls, shapes, block_bytes) * BLOCK_ELEMENTS)

    @staticmethod
    def compute(blocks, block_bytes):
        # The emulator calls this ~24k times a token on a few rows each: the codes go straight
        # into the float32 result and scale and minimum apply in place, the fewest numpy passes
        # (the same float32 multiply, then add, as gguf, so the bits match).
        b = np.ascontiguousarray(blocks).reshape(-1, block_bytes)
        out = np.empty((b.shape[0], 32), np.float32)
        if block_bytes == 34:
            np.multiply(b[:, 2:].view(np.int8), b[:, :2].view(np.float16).astype(np.float32), out=out)
        else:
            codes, scale_min = b[:, 4:], b[:, :4].view(np.float16).astype(np.float32)
            np.bitwise_and(codes, np.uint8(0x0F), out=out[:, :16], casting="unsafe")
            np.right_shift(codes, np.uint8(4), out=out[:, 16:], casting="unsafe")
            out *= scale_min[:, :1]
            out += scale_min[:, 1:]
        return out.reshape(*blocks.shape[:-1], -1)


class QMatVec(Kernel):
    """out = W @ x for W the GGUF blocks of a matrix's rows, uint8 (M, K / 32 * block_bytes) as
    the file ships them (block_bytes= 20: Q4_1, 34: Q8_0, as Dequant reads them), and x (K,)
    float32: Dequant then MatVec in one call, each weight expanded as it is multiplied, so the
    float32 matrix is never written, not even on the tile, and a call moves and reads only the
    blocks' bytes. Each weight is Dequant's (the same float32 operations, bit for bit) and the
    products are summed in float32 in MatVec's order: compute() is Dequant.compute then
    MatVec.compute, bit for bit, and the C++ dequant_u8 then matvec_f32's, bit for bit; the two
    differ by MatVec's own sum order (numpy's matmul against the C++'s one sum from j = 0), about
    1e-6 of the largest |w_j x_j| of a row times sqrt(K)."""

    index_map, packed = "mk,k->m", "k"   # W's k is stored in blocks of 32 weights: its extent is bytes
    batches = True
    name, arity = "qmatvec", 2
    source_kernel = Dequant   # dequant.cc defines both, over one expansion
    dtypes = frozenset()   # its inputs always differ: the blocks' bytes and the float32 vector
    mixed = {(U8, F32): F32}
    attrs = {"block_bytes": Kernel.REQUIRED}
    c_attrs = (("block_bytes", "i32"),)
    out_dtype = Dequant.out_dtype

    @classmethod
    def out_shape(cls, shapes, block_bytes):
        blocks = blocks_per_row(cls, shapes, block_bytes)
        if len(shapes[1]) != 1 or shapes[1][0] != blocks * BLOCK_ELEMENTS:
            cls.refuse(shapes, f"needs x ({blocks * BLOCK_ELEMENTS},): the weights' rows hold {blocks} blocks of "
                               f"{BLOCK_ELEMENTS} weights each; pass the vector they multiply, or the blocks of a "
                               f"matrix with as many columns as x has elements")
        return (shapes[0][0],)

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (*shapes[0], shapes[1][0])

    @classmethod
    def abi_shapes(cls, sizes):
        m, row_bytes, k = sizes
        return [(m, row_bytes), (k,)], (m,)

    @staticmethod
    def compute(blocks, x, block_bytes):
        return MatVec.compute(Dequant.compute(blocks, block_bytes), x)


INTEGERS = (I8, U8, I16, I32)
CASTS = {
    **{i: frozenset({*(o for o in INTEGERS if o != i), F32, BF16}) for i in INTEGERS},
    F32: frozenset({BF16, *INTEGERS}),
    BF16: frozenset({F32, *INTEGERS}),
}


class Cast(Kernel):
    """out = x converted to `dtype=`: between integer types saturating (out of range clamps to
    the nearest end); floats to integers rounding to nearest, ties to even, then saturating
    (`np.clip(np.rint(x), lo, hi)`; NaN gives 0); integers to float32 and bfloat16, and float32
    to bfloat16, rounding to nearest even as numpy's `astype` does (to bfloat16 through float32,
    as ml_dtypes converts); bfloat16 to float32 exactly. `Cast.step(x, dtype=iron.bfloat16)`."""

    index_map = "i->i"
    keeps_zeros = True
    batches = True
    name = "cast"
    saturates = True
    dtypes = frozenset(CASTS)

    @classmethod
    def out_dtypes(cls, dtype):
        return CASTS[np.dtype(dtype)]

    @staticmethod
    def compute(x):
        return x.astype(np.int64) if x.dtype.kind in "iu" else x


class Requantize(Kernel):
    """int32 -> int8 (or `dtype=np.uint8`, `np.int16`): out = x * scale / 2**shift rounded to
    nearest even, plus `zero_point`, clamped to the output range. This is AIE's
    shift-round-saturate (`srs`) of an accumulator, with an integer multiplier in front: the
    product is exact in int64, the shift keeps its floor and the dropped bits decide the rounding
    (above half up, a tie to the even value). To uint8 with zero point 0 it clamps negatives to
    0, a ReLU for free (mlir-aie's convolutions give uint8 so)."""

    index_map = "i->i"
    keeps_zeros = True   # with zero_point 0 (keeps_zeros_in)
    name = "requantize"
    saturates = True
    dtypes = frozenset({I32})
    results = {I32: frozenset({U8, I16})}
    attrs = {"shift": Kernel.REQUIRED, "scale": 1, "zero_point": 0}
    c_attrs = (("scale", "i32"), ("shift", "i32"), ("zero_point", "i32"))
    MAX_SHIFT = 62   # the product of two int32 values needs 63 bits

    @classmethod
    def out_dtype(cls, dtype):
        return I8

    @classmethod
    def out_shape(cls, shapes, shift, scale, zero_point=0):
        if not _is_int(shift) or not 0 <= shift <= cls.MAX_SHIFT:
            cls.refuse(shapes, f"needs shift= an int in 0..{cls.MAX_SHIFT}, not {shift!r}")
        if not _is_int(scale) or not -(2**31) <= scale < 2**31:
            cls.refuse(shapes, f"needs scale= an int32 multiplier (fold a fraction into scale / 2**shift), not {scale!r}")
        if not _is_int(zero_point) or not -(2**31) <= zero_point < 2**31:
            cls.refuse(shapes, f"needs zero_point= an int32 added after the shift, not {zero_point!r}")
        return super().out_shape(shapes)

    @classmethod
    def keeps_zeros_in(cls, attrs: dict) -> bool:
        return attrs.get("zero_point", 0) == 0

    @staticmethod
    def compute(x, shift, scale=1, zero_point=0):
        product = x.astype(np.int64) * np.int64(scale)
        if shift == 0:
            return product + zero_point
        floor = product >> shift
        dropped = product & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        return floor + ((dropped > half) | ((dropped == half) & (floor & 1 == 1))) + zero_point


class Concat(Kernel):
    """out = a and b joined along `axis` (static; `iron.concat(a, b, c, axis=1)` joins more):
    every other axis the same. Its C ABI sees the operands as rows: `outer` rows of `na`
    elements of a, then `nb` of b, per output row."""

    # no index_map: it joins along an axis, neither elementwise nor a matrix or row reduction
    name, arity = "concat", 2
    attrs = {"axis": 0}
    keeps_dtype = exact_in_dtype = joins = True

    @classmethod
    def out_shape(cls, shapes, axis=0):
        a, b = shapes
        if not _is_int(axis) or not a or len(a) != len(b) or not -len(a) <= axis < len(a):
            cls.refuse(shapes, f"needs two tensors of one rank and axis= an int in {-len(a)}..{len(a) - 1}, not {axis!r}")
        axis %= len(a)
        if a[:axis] != b[:axis] or a[axis + 1:] != b[axis + 1:]:
            cls.refuse(shapes, f"needs equal shapes but along axis {axis}")
        return (*a[:axis], a[axis] + b[axis], *a[axis + 1:])

    @classmethod
    def sizes(cls, shapes, out_shape):
        axis = next(d for d, (n, m) in enumerate(zip(shapes[0], out_shape)) if n != m)
        outer = int(np.prod(out_shape[:axis], dtype=np.int64))
        return (outer, *(int(np.prod(s[axis:], dtype=np.int64)) for s in shapes))

    @classmethod
    def abi_shapes(cls, sizes):
        outer, na, nb = sizes
        return [(outer, na), (outer, nb)], (outer, na + nb)

    @staticmethod
    def compute(a, b, axis=-1):
        return np.concatenate([a, b], axis=axis)


class RoPE(Kernel):
    """Rotary position embedding of x (n,), heads of `head_dim` side by side, at the per-call
    position `pos`: each head's adjacent pairs (x[2i], x[2i+1]) turn by pos * base^(-2i/head_dim)
    (the pair layout GGUF files keep Q and K rows in). The angle is computed in float64 and its
    cos and sin rounded to float32, the rotation in float32."""

    # no index_map: out[2i] and out[2i+1] each read both elements of their pair
    name = "rope"
    dtypes = FLOATS
    attrs = {"pos": Kernel.REQUIRED, "head_dim": Kernel.REQUIRED, "base": 10000.0}
    scalar_attrs = ("pos",)
    c_attrs = (("pos", "i32"), ("head_dim", "i32"), ("base", "f32"))

    @classmethod
    def out_shape(cls, shapes, pos=None, head_dim=None, base=None):
        if len(shapes[0]) != 1 or not _is_int(head_dim) or head_dim < 2 or head_dim % 2 or shapes[0][0] % head_dim:
            cls.refuse(shapes, f"needs x (n,) and head_dim= an even int dividing n, not {head_dim!r}")
        return shapes[0]

    @staticmethod
    def compute(x, pos, head_dim, base=10000.0):
        half = head_dim // 2
        angle = int(pos) * np.float64(np.float32(base)) ** (-np.arange(half) / half)
        cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
        pairs = x.reshape(-1, half, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        out = np.empty_like(pairs)
        out[..., 0] = even * cos - odd * sin
        out[..., 1] = even * sin + odd * cos
        return out.reshape(x.shape)


def concat(*tensors, axis: int = 0):
    """`tensors` joined along `axis` in one body(): Concat calls, pairwise from the left."""
    if len(tensors) < 2:
        raise KernelTypeError(f"iron.concat joins two or more tensors, got {len(tensors)}: pass them all.")
    joined = tensors[0]
    for tensor in tensors[1:]:
        joined = Concat.step(joined, tensor, axis=axis)
    return joined


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


LIBRARY = (Copy, Strided, Scatter, StridedRows, Add, Sub, Mul, Scale, ReLU, SiLU, Exp, Accumulate, MatVec, MatMul, MatMulAccumulate, RMSNorm,
           Softmax, Argmax, Cast, Requantize, Concat, RoPE, Max, ArgmaxBlocks, Dequant, QMatVec)
