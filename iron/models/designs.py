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



def row_blocks(height: int, rows: int):
    """(first row, lo, hi) of each block of `rows` output rows of a 3x3 window (padding 1) over
    `height` rows: the block reads input rows lo..hi-1, its rows and a halo row above and below
    where the image has them; its rows start at first - lo of the window's output."""
    for first in range(0, height, rows):
        yield first, max(first - 1, 0), min(first + rows + 1, height)


def halo_conv(image, weights, first: int, lo: int, hi: int, rows: int):
    """The `rows` output rows from `first` of a 3x3 Conv2D (padding 1) of `image`, from the
    block of rows lo..hi-1 (its halo included): the block's convolution, its own rows viewed."""
    return Conv2D.step(image[lo:hi], weights, padding=1)[first - lo:first - lo + rows]


class Bottleneck(iron.Graph):
    """A ResNet bottleneck block with the shapes of mlir-aie's programming_examples/ml/bottleneck:
    an image of side x side pixels of `channels` uint8 channels, given as its pixels' rows
    (side * side, channels) in HWC order; a 1x1 convolution to `mid` channels (a MatMul of the
    pixels) and Requantize to uint8 (the ReLU); a 3x3 convolution (padding 1) as a plain loop over
    `parts` parts of its output channels and blocks of `rows` rows (each block's Conv2D reads its
    rows and a halo row above and below, so it fits a tile), each block requantized into its rows
    of the state `mid_<part>`; a 1x1 convolution back to `channels` (one MatMul per part, summed),
    Requantize to int8, the skip add of the input and a Requantize to uint8 (the last ReLU).
    Weights int8, sums int32."""

    SHIFTS = (6, 8, 7)

    def __init__(self, side: int = 32, channels: int = 256, mid: int = 64, rows: int = 2, parts: int = 2,
                 seed: int = 0):
        rng = np.random.default_rng(seed)
        self.side, self.rows, self.parts = side, rows, parts
        self.w1, w2, w3 = (rng.integers(-2, 4, shape, dtype=np.int8)
                           for shape in ((channels, mid), (3, 3, mid, mid), (mid, channels)))
        width = mid // parts
        self.w2 = [np.ascontiguousarray(w2[..., p * width:(p + 1) * width]) for p in range(parts)]
        self.w3 = [w3[p * width:(p + 1) * width] for p in range(parts)]
        self.conv1 = iron.param(self.w1)
        self.conv2 = [iron.param(w) for w in self.w2]
        self.conv3 = [iron.param(w) for w in self.w3]
        self.mid = [iron.state((side * side, width), np.uint8, name=f"mid_{p}") for p in range(parts)]

    def body(self, pixels):
        side, (s1, s2, s3) = self.side, self.SHIFTS
        h = Requantize.step(MatMul.step(pixels, self.conv1, dtype=np.int32), shift=s1, dtype=np.uint8)
        h = h.reshape(side, side, -1)
        for conv, mid in zip(self.conv2, self.mid):
            for first, lo, hi in row_blocks(side, self.rows):
                block = halo_conv(h, conv, first, lo, hi, self.rows)
                Requantize.step(block, shift=s2, dtype=np.uint8, out=mid.reshape(side, side, -1)[first:first + self.rows])
        sums = [MatMul.step(mid, conv, dtype=np.int32) for mid, conv in zip(self.mid, self.conv3)]
        total = sums[0]
        for more in sums[1:]:
            total = Add.step(total, more)
        h = Requantize.step(total, shift=s3, dtype=np.int8)
        skip = Add.step(Cast.step(h, dtype=np.int32), Cast.step(pixels, dtype=np.int32))
        return Requantize.step(skip, shift=0, dtype=np.uint8)


def requantize(acc: np.ndarray, shift: int, lo: int, hi: int) -> np.ndarray:
    """clip(round_half_even(acc / 2**shift)) in exact integers (numpy's round is half to even)."""
    return np.clip(np.round(acc / 2.0**shift), lo, hi).astype(np.int64)


def conv3x3(image: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 convolution (padding 1) of image (H, W, C) by w (3, 3, C, K) in int64, by hand."""
    height, width = image.shape[:2]
    padded = np.pad(image.astype(np.int64), ((1, 1), (1, 1), (0, 0)))
    return sum(padded[i:i + height, j:j + width] @ w[i, j].astype(np.int64) for i in range(3) for j in range(3))


def numpy_bottleneck(graph: Bottleneck, pixels: np.ndarray) -> np.ndarray:
    """The bottleneck block in plain numpy with exact integers."""
    s1, s2, s3 = graph.SHIFTS
    side, x = graph.side, pixels.astype(np.int64)
    h = requantize(x @ graph.w1.astype(np.int64), s1, 0, 255).reshape(side, side, -1)
    mid = np.concatenate([requantize(conv3x3(h, w), s2, 0, 255) for w in graph.w2], axis=2)
    h = requantize(mid.reshape(side * side, -1) @ np.concatenate(graph.w3).astype(np.int64), s3, -128, 127)
    return np.clip(h + x, 0, 255).astype(np.uint8)


LAPLACIAN = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.int8).reshape(3, 3, 1, 1)


class EdgeFilter(iron.Graph):
    """A 3x3 edge filter (a Laplacian, padding 1, then a binary threshold: 255 where the sum is
    above `threshold`, else 0) over a grey uint8 image (height, width, 1), a plain loop over
    blocks of `rows` rows, each block's Conv2D reading its halo rows too; the edges go into the
    state `edges` (height, width, 1) uint8, block by block."""

    def __init__(self, height: int = 1080, width: int = 1920, rows: int = 2, threshold: int = 10):
        self.height, self.width, self.rows, self.threshold = height, width, rows, threshold
        self.laplacian = iron.param(LAPLACIAN)
        self.edges = iron.state((height, width, 1), np.uint8, name="edges")

    def body(self, image):
        for first, lo, hi in row_blocks(self.height, self.rows):
            block = halo_conv(image, self.laplacian, first, lo, hi, self.rows)
            Requantize.step(block, shift=0, scale=255, zero_point=-255 * self.threshold, dtype=np.uint8,
                            out=self.edges[first:first + self.rows])


def numpy_edges(graph: EdgeFilter, image: np.ndarray) -> np.ndarray:
    """The edge filter in plain numpy."""
    return np.where(conv3x3(image, LAPLACIAN) > graph.threshold, 255, 0).astype(np.uint8)
