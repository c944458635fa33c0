"""Test designs shared by the compiler, printer and emulator tests: plain functions returning
iron.Graph instances, plus `trace(graph)` for the Program of a design's example call and
`example(graph)`, the tensors of that call.

Each design is small and deterministic (fixed seeds). It does not compile or run anything.
"""
from __future__ import annotations

import numpy as np

import iron
from iron import Scratchpad
from iron.kernels import (
    Accumulate,
    Add,
    Argmax,
    Copy,
    Dequant,
    Exp,
    MatMul,
    MatVec,
    Mul,
    ReLU,
    RMSNorm,
    Scale,
    SiLU,
    Softmax,
    Sub,
)
from iron.models.blocks import Q4_1
from iron.models.designs import MLP, Walk


def walk(n: int = 8) -> Walk:
    """The seed chapter's Walk over n nodes (successor i -> n - 1 - i), with a trail of n + 1
    steps: carried `node` and `steps`, no tensor."""
    return Walk(np.arange(n, dtype=np.int32)[::-1].copy(), n + 1)


class AddOne(iron.Graph):
    """y = x + 1 over an int32 input x of n elements (the ones are a param)."""

    def __init__(self, n: int):
        self.ones = iron.param(np.ones(n, dtype=np.int32))

    def body(self, x):
        return Add.step(x, self.ones)

    def example(self) -> dict[str, np.ndarray]:
        return {"x": np.arange(self.ones.shape[0], dtype=np.int32)}


def add_one(n: int = 1024) -> AddOne:
    """add-one over n int32 (input `x` of shape (n,))."""
    return AddOne(n)


class AccumulateAt(iron.Graph):
    """acc[pos] += x: a public int32 state `acc` of `rows` rows of n, a Scratchpad `pos`."""

    def __init__(self, n: int, rows: int):
        self.acc = iron.state((rows, n), np.int32, name="acc")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        Accumulate.step(x, out=self.acc[pos])

    def example(self) -> dict[str, np.ndarray]:
        return {"x": np.arange(self.acc.shape[1], dtype=np.int32)}


def accumulate_at(n: int = 64, rows: int = 4) -> AccumulateAt:
    """Accumulate an int32 input `x` (n,) into row `pos` (Scratchpad) of state `acc` (rows, n)."""
    return AccumulateAt(n, rows)


class MLPLayer(iron.Graph):
    """One residual layer: x + SiLU(W @ RMSNorm(x, g)), params W (width, width) and g (width,)."""

    def __init__(self, width: int, dtype):
        rng = np.random.default_rng(1)
        self.w = iron.param((rng.standard_normal((width, width)) / np.sqrt(width)).astype(dtype))
        self.g = iron.param((1.0 + 0.1 * rng.standard_normal(width)).astype(dtype))

    def body(self, x):
        return Add.step(x, SiLU.step(MatVec.step(self.w, RMSNorm.step(x, self.g))))

    def example(self) -> dict[str, np.ndarray]:
        width = self.g.shape[0]
        return {"x": np.linspace(-1, 1, width).astype(self.g.dtype)}


def mlp_layer(width: int = 64, dtype=np.float32) -> MLPLayer:
    """One RMSNorm + MatVec + SiLU + Add layer of `width` in `dtype` (float32 or bfloat16)."""
    return MLPLayer(width, dtype)


class ExampleMLP(MLP):
    """iron.models.designs.MLP with an example input."""

    def example(self) -> dict[str, np.ndarray]:
        g = self.layers[0].g
        return {"x": np.linspace(-1, 1, g.shape[0]).astype(g.dtype)}


def mlp(layers: int = 4, width: int = 256, dtype=np.float32) -> ExampleMLP:
    """iron.models.designs.MLP: `layers` residual layers of `width` (float32: each 256 KiB matrix is
    split over two tiles; bfloat16: streamed on one)."""
    return ExampleMLP(width=width, layers=layers, dtype=dtype)


class BigMatVec(iron.Graph):
    """y = W @ x for a param W (rows, cols), large enough to spread over tiles."""

    def __init__(self, rows: int, cols: int, dtype):
        rng = np.random.default_rng(2)
        self.w = iron.param(rng.standard_normal((rows, cols)).astype(dtype))

    def body(self, x):
        return MatVec.step(self.w, x)

    def example(self) -> dict[str, np.ndarray]:
        return {"x": np.linspace(-1, 1, self.w.shape[1]).astype(self.w.dtype)}


def big_matvec(rows: int = 512, cols: int = 256, dtype=np.float32) -> BigMatVec:
    """A MatVec over a (rows, cols) param: 512 x 256 float32 (512 KiB) takes a grid of 32 cores on
    npu2 (estimated faster than its split over 4 tiles) and splits over 4 tiles on npu1 (a tie)."""
    return BigMatVec(rows, cols, dtype)


class AllKernels(iron.Graph):
    """Every float kernel of the library in one body: params m (M, K) and k (K, N), a state
    `acc` of x's shape; x and y of shape (K,), Softmax over the first n + 1 elements."""

    def __init__(self, m: np.ndarray, k: np.ndarray):
        self.m, self.k = iron.param(m), iron.param(k)
        self.acc = iron.state((m.shape[1],), m.dtype, name="acc")

    def body(self, x, y, *, n: Scratchpad[np.int32]):
        Accumulate.step(x, out=self.acc)
        return (Copy.step(x), Add.step(x, y), Sub.step(x, y), Mul.step(x, y), Scale.step(x, factor=0.5),
                ReLU.step(x), SiLU.step(x), Exp.step(x), MatVec.step(self.m, x), MatMul.step(self.m, self.k),
                RMSNorm.step(x, y, eps=1e-6), Softmax.step(x, length=n + 1), Argmax.step(x))


class WriteThenRead(iron.Graph):
    """A state written (Accumulate) and then read (Exp) in one body: the read waits for the write."""

    def __init__(self):
        self.s = iron.state((8,), np.float32, name="s")

    def body(self, x):
        Accumulate.step(x, out=self.s)
        return Exp.step(self.s)


def example(graph) -> dict[str, np.ndarray]:
    """The tensors of a design's example call (none for Walk)."""
    return graph.example() if hasattr(graph, "example") else {}


def trace(graph):
    """The Program of a design's example call."""
    return graph.trace(**{name: (a.shape, a.dtype) for name, a in example(graph).items()})


# ---- large calls over the array (tests/compiler/test_tiling.py, test_pad.py) ----------------------

class Product(iron.Graph):
    """C = A @ B for an input A and a weight B; `out` names the result's dtype."""

    def __init__(self, b, out=None):
        self.b = iron.weight(b)
        self.out = out

    def body(self, a):
        return MatMul.step(a, self.b, dtype=self.out)


class ProductOfProducts(iron.Graph):
    """(a @ b) @ (c @ d): a MatMul reading two products; c is a when not given (one input both read);
    `second_returned`: the host reads c @ d too."""

    def __init__(self, b, d, second_returned=False):
        self.b, self.d = iron.weight(b), iron.weight(d)
        self.second_returned = second_returned

    def body(self, a, c=None):
        first, second = MatMul.step(a, self.b), MatMul.step(a if c is None else c, self.d)
        product = MatMul.step(first, second)
        return (product, second) if self.second_returned else product


def operands(m, k, n, dtype, seed=0):
    """A (m, k) and B (k, n) of `dtype`: int8-range integers, or standard normal floats."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return (rng.integers(-128, 128, (m, k)).astype(dtype), rng.integers(-128, 128, (k, n)).astype(dtype))
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


class Projection(iron.Graph):
    """y = W @ x for a weight W; `out` names the result's dtype."""

    def __init__(self, w, out=None):
        self.w = iron.weight(w)
        self.out = out

    def body(self, x):
        return MatVec.step(self.w, x, dtype=self.out)


class Sum(iron.Graph):
    def body(self, x, y):
        return Add.step(x, y)


# ---- quantized weights (dequant_before_matvec) -------------------------------------------------

def random_blocks(rng, rows: int, cols: int, fmt) -> np.ndarray:
    """(rows, row bytes) uint8 blocks of `fmt`: random codes, finite float16 scale (and minimum)."""
    blocks = rng.integers(0, 256, (rows * cols // 32, fmt.nbytes), dtype=np.uint8)
    halves = 2 if fmt is Q4_1 else 1
    blocks[:, :2 * halves] = (rng.standard_normal((len(blocks), halves)) * 0.002).astype(np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


class Layer(iron.Graph):
    """RMSNorm, then SiLU of the quantized matrix times the normed vector."""

    def __init__(self, blocks, fmt):
        self.w, self.block_bytes = iron.param(blocks), fmt.nbytes
        self.norm = iron.param(np.linspace(0.5, 1.5, blocks.shape[1] // fmt.nbytes * 32, dtype=np.float32))

    def body(self, x):
        h = RMSNorm.step(x, self.norm, eps=1e-5)
        return SiLU.step(MatVec.step(Dequant.step(self.w, block_bytes=self.block_bytes), h))


class Head(iron.Graph):
    """The quantized matrix times a host vector, the result only the host reads (an LM head)."""

    def __init__(self, blocks, fmt):
        self.w, self.block_bytes = iron.param(blocks), fmt.nbytes

    def body(self, x):
        return MatVec.step(Dequant.step(self.w, block_bytes=self.block_bytes), x)
