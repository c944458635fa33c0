"""Every library kernel, compiled into one design, run on the emulator both ways: through its
numpy semantics and through its C++ source built by the host compiler (IRON_EMULATOR_KERNELS=native),
on random inputs; both equal reference() (integers exactly, float32 to 1e-5, bfloat16 to 1 ulp)."""
import shutil

import ml_dtypes
import numpy as np
import pytest

import iron
from iron.kernels import (
    Accumulate,
    Add,
    Argmax,
    Copy,
    MatVec,
    Mul,
    ReLU,
    Sub,
)
from tests.compiler.designs import AllKernels

BF16 = np.dtype(ml_dtypes.bfloat16)
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")


def floats(dtype, rng) -> AllKernels:
    return AllKernels(rng.standard_normal((8, 16)).astype(dtype), rng.standard_normal((16, 4)).astype(dtype))


class Integers(iron.Graph):
    def __init__(self, dtype, rng):
        self.m = iron.param(rng.integers(-5, 6, (8, 16)).astype(dtype))
        self.acc = iron.state((16,), dtype, name="acc")

    def body(self, x, y):
        Accumulate.step(x, out=self.acc)
        return (Copy.step(x), Add.step(x, y), Sub.step(x, y), Mul.step(x, y), ReLU.step(x),
                MatVec.step(self.m, x), Argmax.step(x))


def inputs(graph_class, dtype, rng):
    if graph_class is floats:
        return [rng.standard_normal(16).astype(dtype) for _ in range(2)], {"n": 9}
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max, 16, endpoint=True).astype(dtype) for _ in range(2)], {}


def close(a, b, dtype):
    a, b = np.asarray(a), np.asarray(b)
    if dtype.kind in "iu" or a.dtype.kind in "iu":
        np.testing.assert_array_equal(a, b)
    else:
        tol = 1e-2 if dtype == BF16 else 1e-5
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=tol, atol=tol)


CASES = [(floats, np.dtype(np.float32)), (floats, BF16)] + [
    (Integers, np.dtype(t)) for t in (np.int8, np.uint8, np.int16, np.int32)]


@pytest.mark.parametrize("graph_class, dtype", CASES, ids=[f"{c.__name__}-{d.name}" for c, d in CASES])
def test_every_kernel_both_ways_equals_the_reference(monkeypatch, graph_class, dtype):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    tensors, values = inputs(graph_class, dtype, np.random.default_rng(7))
    want = graph_class(dtype, np.random.default_rng(0)).reference(*tensors, **values)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        got = graph_class(dtype, np.random.default_rng(0))(*tensors, **values)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, dtype)
