"""The designs `make demo`, the benchmarks, the guide and the tests share, each a plain
iron.Graph beside a hand-written numpy version: the seed chapter's Walk, a residual MLP (a loop
over layers), and three designs that repeat one block in a plain Python loop (issue 26's
targets): grouped-query attention (a loop over heads), a ResNet bottleneck block (its 3x3
convolution a loop over row blocks with halos) and a 3x3 edge filter (a loop over row blocks).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

import iron
from iron import Carried
from iron.errors import ArgumentError
from iron.kernels import (
    Add,
    Cast,
    Conv2D,
    Copy,
    MatMul,
    MatVec,
    Requantize,
    RMSNorm,
    Scale,
    SiLU,
    Softmax,
)

BF16 = ml_dtypes.bfloat16


class Walk(iron.Graph):
    """One step of a linked list walk: the next node gathered from
    ``successor`` and recorded in ``trail`` at the step count, the step
    count one more than the last."""

    def __init__(self, successor, steps: int):
        self.successor = iron.weight(successor)
        self.trail = iron.state((steps,), np.int32, name="trail")

    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = Copy.step(self.successor[node], dtype=np.int32)
        Copy.step(nxt, self.trail[steps], dtype=np.int32)
        return iron.carry(node=nxt, steps=steps + 1)


def numpy_walk(successor, start: int, n: int) -> np.ndarray:
    """The trail a walk of n steps from `start` records, in plain numpy."""
    trail, node = [], start
    for _ in range(n):
        node = int(successor[node])
        trail.append(node)
    return np.array(trail, dtype=np.int32)


class Layer:
    """One residual MLP layer's parameters: x + SiLU(W @ RMSNorm(x) * g)."""

    def __init__(self, w, g):
        self.w = iron.param(w)
        self.g = iron.param(g)


class MLP(iron.Graph):
    """A residual MLP: for each layer, x = x + SiLU(W @ RMSNorm(x, g))."""

    def __init__(self, width: int = 256, layers: int = 4, dtype=np.float32, seed: int = 0):
        rng = np.random.default_rng(seed)
        scale = 1.0 / np.sqrt(width)
        self.layers = [
            Layer((rng.standard_normal((width, width)) * scale).astype(dtype),
                  (1.0 + 0.1 * rng.standard_normal(width)).astype(dtype))
            for _ in range(layers)
        ]

    def body(self, x):
        for layer in self.layers:
            x = Add.step(x, SiLU.step(MatVec.step(layer.w, RMSNorm.step(x, layer.g))))
        return x


def numpy_mlp(mlp: MLP, x: np.ndarray) -> np.ndarray:
    """The same MLP written by hand in numpy (float32)."""
    x = x.astype(np.float32)
    for layer in mlp.layers:
        w, g = layer.w.array.astype(np.float32), layer.g.array.astype(np.float32)
        h = x / np.sqrt(np.mean(x * x) + np.float32(1e-5)) * g
        y = w @ h
        x = x + y / (1 + np.exp(-y))
    return x


class GroupedQueryAttention(iron.Graph):
    """Grouped-query attention over `positions` queries (a prefill), a plain loop over query
    heads: head h is softmax(q_h K^T / sqrt(d)) V of key/value head h // (heads // kv_heads).
    q (heads, positions, d); keys (kv_heads, d, positions), each head's K^T as MatMul's B;
    values (kv_heads, positions, d); bfloat16. One output (positions, d) per query head."""

    def __init__(self, heads: int = 8, kv_heads: int = 2, positions: int = 512, head_dim: int = 64):
        self.heads, self.kv_heads, self.positions, self.head_dim = heads, kv_heads, positions, head_dim

    def specs(self) -> dict:
        """The compile() specs of q, keys and values."""
        n, d, kv = self.positions, self.head_dim, self.kv_heads
        return {"q": ((self.heads, n, d), BF16), "keys": ((kv, d, n), BF16), "values": ((kv, n, d), BF16)}

    def body(self, q, keys, values):
        group = self.heads // self.kv_heads
        return tuple(self.head(q[h], keys[h // group], values[h // group]) for h in range(self.heads))

    def head(self, q, keys, values):
        scores = Scale.step(MatMul.step(q, keys), factor=1 / np.sqrt(self.head_dim))
        return MatMul.step(Softmax.step(scores), values)


def numpy_attention(graph: GroupedQueryAttention, q, keys, values) -> list[np.ndarray]:
    """Each query head's softmax(q K^T / sqrt(d)) V in float64, by hand."""
    group = graph.heads // graph.kv_heads
    out = []
    for h in range(graph.heads):
        scores = q[h].astype(np.float64) @ keys[h // group].astype(np.float64) / np.sqrt(graph.head_dim)
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out.append(p / p.sum(axis=1, keepdims=True) @ values[h // group].astype(np.float64))
    return out



def with_halo(picture: np.ndarray) -> np.ndarray:
    """`picture` (H, ...) with a halo row of zeros above and below, as EdgeFilter and Bottleneck
    take it: every block of rows then reads its rows and one more on each side alike."""
    return np.pad(picture, ((1, 1),) + ((0, 0),) * (picture.ndim - 1))


def whole_blocks(extent: int, rows: int, name: str) -> None:
    """Refuse blocks of `rows` rows that do not tile `extent` rows: every block must be alike."""
    if rows < 1 or extent % rows:
        raise ArgumentError(f"rows={rows} does not divide {name}={extent} into alike blocks; pass a divisor of {extent}.")


def halo_conv(image, weights, first: int, rows: int):
    """Rows first..first+rows-1 of a 3x3 Conv2D (padding 1) over a picture lying in `image` from
    its second row (a halo row above and below): the block of those rows and one more on each
    side convolved, its own rows viewed. Every block is the same calls on a view at its offset."""
    return Conv2D.step(image[first:first + rows + 2], weights, padding=1)[1:rows + 1]


class Bottleneck(iron.Graph):
    """A ResNet bottleneck block with the shapes of mlir-aie's programming_examples/ml/bottleneck:
    a picture of side x side pixels of `channels` uint8 channels, given as its pixels' rows in HWC
    order with a halo row of zero pixels above and below (((side + 2) * side, channels):
    `with_halo(picture).reshape(-1, channels)`); a 1x1 convolution to `mid` channels (a MatMul of
    the pixels) and Requantize to uint8 (the ReLU: the halo stays zero); a 3x3 convolution
    (padding 1) as a plain loop over blocks of `rows` rows and `parts` parts of its output
    channels (each block's Conv2D reads its rows and a halo row above and below and one part's
    weights, so it fits a tile), each requantized into its rows and channels of the state `mid`;
    a 1x1 convolution back to `channels`, Requantize to int8, the skip add of the picture and a
    Requantize to uint8 (the last ReLU). Weights int8, sums int32."""

    SHIFTS = (6, 8, 7)

    def __init__(self, side: int = 32, channels: int = 256, mid: int = 64, rows: int = 2, parts: int = 2,
                 seed: int = 0):
        whole_blocks(side, rows, "side")
        if mid % parts:
            raise ArgumentError(f"mid={mid} channels do not split into parts={parts} alike parts; pass a divisor of {mid}.")
        rng = np.random.default_rng(seed)
        self.side, self.channels, self.rows, self.width = side, channels, rows, mid // parts
        self.w1, self.w2, self.w3 = (rng.integers(-2, 4, shape, dtype=np.int8)
                                     for shape in ((channels, mid), (3, 3, mid, mid), (mid, channels)))
        self.conv1, self.conv3 = iron.param(self.w1), iron.param(self.w3)
        self.conv2 = [iron.param(np.ascontiguousarray(self.w2[..., p:p + self.width]))
                      for p in range(0, mid, self.width)]
        self.mid = iron.state((side * side, mid), np.uint8, name="mid")

    def body(self, pixels):
        side, rows, width, (s1, s2, s3) = self.side, self.rows, self.width, self.SHIFTS
        h = Requantize.step(MatMul.step(pixels, self.conv1, dtype=np.int32), shift=s1, dtype=np.uint8)
        h = h.reshape(side + 2, side, -1)
        mid = self.mid.reshape(side, side, -1)
        for first in range(0, side, rows):
            for part, conv in enumerate(self.conv2):
                Requantize.step(halo_conv(h, conv, first, rows), shift=s2, dtype=np.uint8,
                                out=mid[first:first + rows, :, part * width:(part + 1) * width])
        h = Requantize.step(MatMul.step(self.mid, self.conv3, dtype=np.int32), shift=s3, dtype=np.int8)
        picture = pixels[side:side + side * side]
        skip = Add.step(Cast.step(h, dtype=np.int32), Cast.step(picture, dtype=np.int32))
        return Requantize.step(skip, shift=0, dtype=np.uint8)


def requantize(acc: np.ndarray, shift: int, lo: int, hi: int) -> np.ndarray:
    """clip(round_half_even(acc / 2**shift)) in exact integers (numpy's round is half to even)."""
    return np.clip(np.round(acc / 2.0**shift), lo, hi).astype(np.int64)


def conv3x3(image: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 convolution (padding 1) of image (H, W, C) by w (3, 3, C, K) in int64, by hand."""
    height, width = image.shape[:2]
    padded = np.pad(image.astype(np.int64), ((1, 1), (1, 1), (0, 0)))
    return sum(padded[i:i + height, j:j + width] @ w[i, j].astype(np.int64) for i in range(3) for j in range(3))


def numpy_bottleneck(graph: Bottleneck, picture: np.ndarray) -> np.ndarray:
    """The bottleneck block of `picture` (side * side, channels) in plain numpy with exact integers."""
    s1, s2, s3 = graph.SHIFTS
    side, x = graph.side, picture.astype(np.int64)
    h = requantize(x @ graph.w1.astype(np.int64), s1, 0, 255).reshape(side, side, -1)
    mid = requantize(conv3x3(h, graph.w2), s2, 0, 255)
    h = requantize(mid.reshape(side * side, -1) @ graph.w3.astype(np.int64), s3, -128, 127)
    return np.clip(h + x, 0, 255).astype(np.uint8)


LAPLACIAN = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.int8).reshape(3, 3, 1, 1)


class EdgeFilter(iron.Graph):
    """A 3x3 edge filter (a Laplacian, padding 1, then a binary threshold: 255 where the sum is
    above `threshold`, else 0) over a grey uint8 picture (height, width, 1), given with a halo row
    of zeros above and below ((height + 2, width, 1): `with_halo(picture)`), a plain loop over
    blocks of `rows` rows, each block's Conv2D reading its rows and the one on each side; the
    edges go into the state `edges` (height, width, 1) uint8, block by block."""

    def __init__(self, height: int = 1080, width: int = 1920, rows: int = 2, threshold: int = 10):
        whole_blocks(height, rows, "height")
        self.height, self.width, self.rows, self.threshold = height, width, rows, threshold
        self.laplacian = iron.param(LAPLACIAN)
        self.edges = iron.state((height, width, 1), np.uint8, name="edges")

    def body(self, image):
        for first in range(0, self.height, self.rows):
            Requantize.step(halo_conv(image, self.laplacian, first, self.rows), shift=0, scale=255,
                            zero_point=-255 * self.threshold, dtype=np.uint8, out=self.edges[first:first + self.rows])


def numpy_edges(graph: EdgeFilter, picture: np.ndarray) -> np.ndarray:
    """The edge filter of `picture` (height, width, 1) in plain numpy."""
    return np.where(conv3x3(picture, LAPLACIAN) > graph.threshold, 255, 0).astype(np.uint8)
