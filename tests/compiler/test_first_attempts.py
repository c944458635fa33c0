"""Issue 23's first attempts, each run on the emulator for npu1 and npu2 and equal to numpy
(exactly: small integers, which every product and sum keeps exact): `q[h] @ k`,
`x[:, ::2]`, `x.T`, `Add(x, bias)` broadcasting, a write into a state's interior, and a strided
view in a stream (larger than a tile), in float32, bfloat16, int8 and uint8."""
from __future__ import annotations

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.kernels import Add, Copy, MatMul, Mul

pytestmark = pytest.mark.usefixtures("on_emulator")

DEVICES = ["npu1", "npu2"]
DTYPES = {"f32": np.dtype(np.float32), "bf16": iron.bfloat16, "i8": np.dtype(np.int8), "u8": np.dtype(np.uint8)}

SUMS = {DTYPES["bf16"]: np.dtype(np.float32), DTYPES["i8"]: np.dtype(np.int32), DTYPES["u8"]: np.dtype(np.int32)}


def values(dtype, *shape, seed: int = 0) -> np.ndarray:
    """Small integers of `dtype` (exact in bfloat16 and in each product below), never 0."""
    return np.random.default_rng(seed).integers(1, 12, shape).astype(dtype)


def ran(graph, device: str, **feeds):
    """(the emulator's outputs, reference()'s)."""
    return graph.compile(**feeds, device=from_name(device))(**feeds), graph.reference(**feeds)


class Head(iron.Graph):
    """q[h] @ k: a view feeding a MatMul (integers summed into int32, bfloat16 into float32)."""

    def body(self, q, k):
        return MatMul.step(q[1], k, dtype=SUMS.get(q.dtype, q.dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_a_view_of_heads_times_k(device, dtype):
    q, k = values(DTYPES[dtype], 4, 64, 64), values(DTYPES[dtype], 64, 128, seed=1)
    got, want = ran(Head(), device, q=q, k=k)
    exact = q[1].astype(np.int64) @ k.astype(np.int64)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(got, np.int64), exact)   # small integers: every sum is exact


class Views(iron.Graph):
    """x[:, ::2], x.T and Add(x, bias) with bias broadcast over x's rows, on one tile."""

    def body(self, x, bias):
        return Copy.step(x[:, ::2]), Copy.step(x.T), Add.step(x, bias)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_step_slice_transpose_and_broadcast(device, dtype):
    x, bias = values(DTYPES[dtype], 24, 36), values(DTYPES[dtype], 36, seed=1)
    got, want = ran(Views(), device, x=x, bias=bias)
    for mine, theirs, numpy in zip(got, want, (x[:, ::2], x.T, (x + bias).astype(x.dtype))):
        np.testing.assert_array_equal(mine, numpy)
        np.testing.assert_array_equal(mine, theirs)


class Interior(iron.Graph):
    """pad[1:-1, 1:-1] = x for a state one wider on every side, the state returned."""

    def __init__(self, n: int, dtype):
        self.pad = iron.state((n + 2, n + 2), dtype, name="pad")

    def body(self, x):
        Copy.step(x, out=self.pad[1:-1, 1:-1])
        return Copy.step(self.pad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_writing_a_state_interior(device, dtype):
    x, border = values(DTYPES[dtype], 32, 32), values(DTYPES[dtype], 34, 34, seed=1)
    graph = Interior(32, DTYPES[dtype])
    body = graph.compile(x=x, device=from_name(device))
    body.write("pad", border)
    graph.write("pad", border)
    expected = border.copy()
    expected[1:-1, 1:-1] = x
    np.testing.assert_array_equal(body(x=x), expected)
    np.testing.assert_array_equal(graph.reference(x=x), expected)


class Stream(iron.Graph):
    """x[:, ::2] * x[:, 1::2] over a tensor larger than a tile, or x[:, ::2] @ y: a strided view in
    a stream, or feeding a MatMul over the array."""

    def __init__(self, matmul: bool):
        self.matmul = matmul

    def body(self, x, y):
        if self.matmul:
            return MatMul.step(x[:, ::2], y, dtype=SUMS.get(x.dtype, x.dtype))
        return Mul.step(x[:, ::2], x[:, 1::2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("matmul", [False, True], ids=["mul", "matmul"])
def test_a_strided_view_larger_than_a_tile(device, dtype, matmul):
    """The view streams: by its DMA access pattern (float32), or picked row by row by the cores
    the rows of x stream to (StridedRows, `copy_view_for_grid`: 1- and 2-byte elements)."""
    x, y = values(DTYPES[dtype], 512, 1024), values(DTYPES[dtype], 512, 64, seed=1) % 4
    got, want = ran(Stream(matmul), device, x=x, y=y)
    wide = np.int64 if x.dtype.kind in "iu" else np.float64
    numpy = (x[:, ::2].astype(wide) @ y.astype(wide)) if matmul else (x[:, ::2] * x[:, 1::2]).astype(x.dtype)
    np.testing.assert_array_equal(np.asarray(got, numpy.dtype), numpy)   # small integers: exact in every dtype
    np.testing.assert_array_equal(got, want)
