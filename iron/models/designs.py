"""The designs `make demo`, the benchmarks and the tests share: the seed chapter's Walk and a
residual MLP, each a plain iron.Graph beside a hand-written numpy version.
"""
from __future__ import annotations

import numpy as np

import iron
from iron import Carried
from iron.kernels import Add, Copy, MatVec, RMSNorm, SiLU


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
