"""iron's convolution and pooling kernels over images laid out HWC (height, width, channels):
Conv2D (weights HWIO, any kernel size, stride and zero padding, summing as MatMul does, uint8
activations times int8 weights into int32 among them), MaxPool2D and AvgPool2D. A ResNet
bottleneck block is Conv2D, Requantize, Conv2D, Requantize, Conv2D, Requantize and an Add of the
skip path (tests/kernels/test_conv.py).
"""
from __future__ import annotations

import numpy as np

from iron.kernels.base import Kernel
from iron.kernels.library import MIXED_DOTS, WIDER_DOTS, _is_int


def out_side(side: int, kernel: int, stride: int, padding: int) -> int:
    """The output extent of a window of `kernel` moved by `stride` over `side` padded on both ends."""
    return (side + 2 * padding - kernel) // stride + 1


def windows(x: np.ndarray, kh: int, kw: int, stride: int, padding: int, fill):
    """(i, j, view) for each offset of a kh x kw window: view (OH, OW, C) holds, for every output
    pixel, the element at that offset of its window of x (H, W, C) padded with `fill`."""
    p = padding
    padded = np.pad(x, ((p, p), (p, p), (0, 0)), constant_values=fill) if p else x
    oh, ow = (out_side(n, k, stride, p) for n, k in zip(x.shape[:2], (kh, kw)))
    for i in range(kh):
        for j in range(kw):
            yield i, j, padded[i: i + stride * (oh - 1) + 1: stride, j: j + stride * (ow - 1) + 1: stride]


def check_window(kernel, shapes, kh: int, kw: int, stride, padding) -> tuple[int, int]:
    """(OH, OW) of a window kh x kw over the image shapes[0] (H, W, C), or the refusal."""
    if not _is_int(stride) or stride < 1:
        kernel.refuse(shapes, f"needs stride= an int >= 1, not {stride!r}")
    if not _is_int(padding) or not 0 <= padding < min(kh, kw):
        kernel.refuse(shapes, f"needs padding= an int in 0..{min(kh, kw) - 1} (less than the window), not {padding!r}")
    h, w = shapes[0][:2]
    if h + 2 * padding < kh or w + 2 * padding < kw:
        kernel.refuse(shapes, f"needs an image at least as large as its {kh}x{kw} window once padded")
    return out_side(h, kh, stride, padding), out_side(w, kw, stride, padding)


class Conv2D(Kernel):
    """out (OH, OW, K) = the 2-D convolution (as deep learning means it: a correlation) of an image
    x (H, W, C) with weights w (KH, KW, C, K), moved by `stride` over x padded with `padding`
    zeros on every side: OH = (H + 2 padding - KH) // stride + 1, likewise OW. Weights HWIO, so a
    1x1 convolution is x (H*W, C) @ w (C, K) (PyTorch's OIHW is `w.transpose(2, 3, 1, 0)`). It sums
    as MatMul does: `dtype=np.int32` sums int8, uint8 or int16 exactly, `np.float32` keeps a
    bfloat16 sum; uint8 x with int8 w (or int8 with uint8) sums into int32."""

    # no index_map: an output pixel reads a window of input pixels, which einsum's notation cannot
    # say, so its Role is OTHER and it fuses by the general rules only
    name, arity = "conv2d", 2
    results, mixed = WIDER_DOTS, MIXED_DOTS
    attrs = {"stride": 1, "padding": 0}
    c_attrs = (("stride", "i32"), ("padding", "i32"))

    @classmethod
    def out_shape(cls, shapes, stride=1, padding=0):
        x, w = shapes
        if len(x) != 3 or len(w) != 4 or w[2] != x[2]:
            cls.refuse(shapes, "needs x (H, W, C) and w (KH, KW, C, K)")
        return (*check_window(cls, shapes, w[0], w[1], stride, padding), w[3])

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (*shapes[0], *shapes[1][:2], *out_shape)

    @classmethod
    def abi_shapes(cls, sizes):
        h, w, c, kh, kw, oh, ow, k = sizes
        return [(h, w, c), (kh, kw, c, k)], (oh, ow, k)

    @staticmethod
    def compute(x, w, stride=1, padding=0):
        if x.dtype.kind in "iu":
            x, w = x.astype(np.int64), w.astype(np.int64)
        kh, kw, _, k = w.shape
        total = None
        for i, j, view in windows(x, kh, kw, stride, padding, 0):
            term = view @ w[i, j]
            total = term if total is None else total + term
        return total


class Pool2D(Kernel):
    """A pooling kernel: one `size` x `size` window of x (H, W, C) per output pixel, moved by
    `stride`, over x with `padding` on each side; out (OH, OW, C). Its C ABI: x, out, then H, W,
    C, OH, OW and the attrs."""

    # no index_map (Role.OTHER): an output pixel reads a window of input pixels
    attrs = {"size": 2, "stride": 2, "padding": 0}
    c_attrs = (("size", "i32"), ("stride", "i32"), ("padding", "i32"))

    @classmethod
    def out_shape(cls, shapes, size=2, stride=2, padding=0):
        if len(shapes[0]) != 3:
            cls.refuse(shapes, "needs x (H, W, C)")
        if not _is_int(size) or size < 1:
            cls.refuse(shapes, f"needs size= an int >= 1, not {size!r}")
        return (*check_window(cls, shapes, size, size, stride, padding), shapes[0][2])

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (*shapes[0], *out_shape[:2])

    @classmethod
    def abi_shapes(cls, sizes):
        h, w, c, oh, ow = sizes
        return [(h, w, c)], (oh, ow, c)


class MaxPool2D(Pool2D):
    """The largest element of each window; the padding takes no part (PyTorch's max_pool2d). A
    NaN in a window is its maximum, as numpy's max takes it."""

    name = "max_pool2d"
    exact_in_dtype = True   # a maximum is one of the elements: bfloat16 needs no float32 round trip

    @staticmethod
    def compute(x, size=2, stride=2, padding=0):
        lowest = -np.inf if x.dtype.kind not in "iu" else np.iinfo(x.dtype).min
        total = None
        with np.errstate(invalid="ignore"):   # a NaN is a window's maximum, not an error
            for _, _, view in windows(x, size, size, stride, padding, lowest):
                total = view if total is None else np.maximum(total, view)
        return np.array(total, dtype=x.dtype)


class AvgPool2D(Pool2D):
    """The mean of each window, the padding's zeros counted in it (PyTorch's avg_pool2d,
    count_include_pad): floats summed in float32 in window order, then divided once; integers
    summed exactly and divided rounding half to even."""

    name = "avg_pool2d"

    @staticmethod
    def compute(x, size=2, stride=2, padding=0):
        integer = x.dtype.kind in "iu"
        total = None
        for _, _, view in windows(x, size, size, stride, padding, 0):
            term = view.astype(np.int64 if integer else np.float32)
            total = np.zeros_like(term) + term if total is None else total + term
        count = size * size
        if not integer:
            return total / np.float32(count)
        floor, rest = np.divmod(total, count)
        return floor + ((2 * rest > count) | ((2 * rest == count) & (floor & 1 == 1)))


CONV = (Conv2D, MaxPool2D, AvgPool2D)
