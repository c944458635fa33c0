"""Every library kernel, compiled into one design, run on the emulator both ways: through its
numpy semantics and through its C++ source built by the host compiler (IRON_EMULATOR_KERNELS=native),
on random inputs; both equal reference() (integers exactly, float32 to 1e-5, bfloat16 to 1 ulp).
The conversions run on every (input, output) dtype pair they implement: Cast and Requantize
bit for bit, MatVec and MatMul into a wider type exactly for integers."""
import shutil
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import iron
from iron.kernels import (
    Accumulate,
    Add,
    Argmax,
    Cast,
    Copy,
    MatMul,
    MatVec,
    Mul,
    ReLU,
    Requantize,
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


def both_ways(monkeypatch, make_graph, tensors, exact=True):
    """reference() of a fresh graph, then the compiled graph in both kernel modes: equal outputs,
    of the same dtypes (bit for bit when `exact`)."""
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    want = make_graph().reference(*tensors)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        got = make_graph()(*tensors)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        for g, w in zip(got, want):
            if exact:
                np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))
            else:
                close(g, w, w.dtype)
    return want


class Casts(iron.Graph):
    """x cast to every dtype Cast gives for x's dtype."""

    def body(self, x):
        return tuple(Cast.step(x, dtype=out) for out in sorted(Cast.out_dtypes(x.dtype), key=str))


def random_values(dtype, rng, n=16):
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
    return (rng.standard_normal(n) * 1e3).astype(dtype)


@pytest.mark.parametrize("dtype", [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.float32)] + [BF16],
                         ids=str)
def test_cast_to_every_dtype_both_ways_equals_the_reference(monkeypatch, dtype):
    x = random_values(dtype, np.random.default_rng(1))
    want = both_ways(monkeypatch, Casts, [x])
    assert len(want) == len(Cast.out_dtypes(dtype))


class WideDots(iron.Graph):
    """MatVec and MatMul of `dtype` operands into `out`."""

    def __init__(self, dtype, out):
        rng = np.random.default_rng(0)
        self.m = iron.param(random_values(dtype, rng, 8 * 16).reshape(8, 16))
        self.b = iron.param(random_values(dtype, rng, 16 * 4).reshape(16, 4))
        self.out = out

    def body(self, x):
        return MatVec.step(self.m, x, dtype=self.out), MatMul.step(self.m, self.b, dtype=self.out)


WIDER = [(np.dtype(np.int8), np.dtype(np.int32)), (np.dtype(np.uint8), np.dtype(np.int32)),
         (np.dtype(np.int16), np.dtype(np.int32)), (BF16, np.dtype(np.float32))]


@pytest.mark.parametrize("dtype, out", WIDER, ids=[f"{d}-{o}" for d, o in WIDER])
def test_matvec_and_matmul_into_a_wider_dtype_both_ways(monkeypatch, dtype, out):
    x = random_values(dtype, np.random.default_rng(2))
    want = both_ways(monkeypatch, lambda: WideDots(dtype, out), [x], exact=dtype.kind in "iu")
    if dtype.kind in "iu":
        m = WideDots(dtype, out).m.array.astype(np.int64)
        np.testing.assert_array_equal(want[0], (m @ x.astype(np.int64)).astype(out))


class Quantized(iron.Graph):
    """An int8 layer: an int32 MatVec requantized to int8 and to int16."""

    def __init__(self, shift, scale):
        self.m = iron.param(np.random.default_rng(0).integers(-128, 128, (8, 16)).astype(np.int8))
        self.shift, self.scale = shift, scale

    def body(self, x):
        acc = MatVec.step(self.m, x, dtype=np.int32)
        return (acc, Requantize.step(acc, shift=self.shift, scale=self.scale),
                Requantize.step(acc, shift=self.shift, scale=self.scale, dtype=np.int16))


@pytest.mark.parametrize("shift, scale", [(0, 1), (7, 1), (9, 3), (40, 2**31 - 1), (62, -(2**31))])
def test_requantize_both_ways_equals_the_reference(monkeypatch, shift, scale):
    x = np.random.default_rng(3).integers(-128, 128, 16).astype(np.int8)
    acc, q8, q16 = both_ways(monkeypatch, lambda: Quantized(shift, scale), [x])
    exact = [round(Fraction(int(v) * scale, 2**shift)) for v in acc]
    np.testing.assert_array_equal(q8, np.clip(exact, -128, 127))
    np.testing.assert_array_equal(q16, np.clip(exact, -(2**15), 2**15 - 1))
