"""Row kernels over a batch of rows (RMSNorm, Softmax, Argmax on (rows, n)): a per-row result
(RMSNorm and Softmax (rows, n), Argmax (rows,)), Softmax's per-call valid length applying to
every row, through reference() (each row equal to the 1-D call on it) and compiled on npu2, run
on the emulator in both kernel modes: Argmax exactly, float32 to rtol 1e-5, bfloat16 to 1e-2."""
import shutil

import ml_dtypes
import numpy as np
import pytest

import iron
from iron import Scratchpad
from iron.kernels import Argmax, RMSNorm, Softmax

BF16 = np.dtype(ml_dtypes.bfloat16)


class Rows(iron.Graph):
    """Each row of x normalised, its softmax over the first n + 1 elements, and its argmax."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x, *, n: Scratchpad[np.int32]):
        h = RMSNorm.step(x, self.w)
        return h, Softmax.step(h, length=n + 1), Argmax.step(h)


def batch(dtype, rows=4, width=32):
    rng = np.random.default_rng(3)
    return rng.standard_normal((rows, width)).astype(dtype), rng.standard_normal(width).astype(dtype)


def close(got, want):
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
        return
    tol = 1e-2 if want.dtype == BF16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=str)
def test_reference_of_a_batch_is_the_one_row_call_on_each_row(dtype):
    x, w = batch(dtype)
    h, p, i = Rows(w).reference(x, n=9)
    assert (h.shape, p.shape, i.shape, i.dtype) == ((4, 32), (4, 32), (4,), np.dtype(np.int32))
    for r in range(4):
        np.testing.assert_array_equal(h[r], RMSNorm.reference(x[r], w, eps=1e-5))
        np.testing.assert_array_equal(p[r], Softmax.reference(h[r], length=10))
        assert i[r] == Argmax.reference(h[r])
    assert (p[:, 10:] == 0).all()


@pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=str)
def test_a_batch_on_npu2_equals_the_reference_in_both_kernel_modes(monkeypatch, dtype):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    x, w = batch(dtype)
    for n in (0, 17, 31):
        want = Rows(w).reference(x, n=n)
        for mode in ("numpy", "native"):
            monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
            got = Rows(w).compile(x, device="npu2")(x, n=n)
            assert [g.shape for g in got] == [v.shape for v in want]
            for g, v in zip(got, want):
                close(g, v)


def test_shapes_a_row_kernel_refuses():
    class Wrong(iron.Graph):
        def body(self, x, w):
            return RMSNorm.step(x, w)

    with pytest.raises(iron.errors.KernelTypeError) as refused:
        Wrong().reference(np.zeros((2, 3, 4), np.float32), np.zeros(4, np.float32))
    assert str(refused.value) == "RMSNorm needs x (n,) or (rows, n) and w (n,); got shapes (2, 3, 4), (4,)."
    with pytest.raises(iron.errors.KernelTypeError) as refused:
        Wrong().reference(np.zeros((2, 4), np.float32), np.zeros(3, np.float32))
    assert str(refused.value) == "RMSNorm needs x (n,) or (rows, n) and w (n,); got shapes (2, 4), (3,)."


# ---- stream_row_blocks: a batch larger than a tile -------------------------------------------------

class Soft(iron.Graph):
    def __init__(self, dtype, width):
        pass

    def body(self, x):
        return Softmax.step(x)


class Max(Soft):
    def body(self, x):
        return Argmax.step(x)


class Norm(iron.Graph):
    """Each row normalised with one w (a weight every core receives whole)."""

    def __init__(self, dtype, width):
        self.w = iron.weight(np.random.default_rng(2).standard_normal(width).astype(dtype))

    def body(self, x):
        return RMSNorm.step(x, self.w)


STREAMED = [
    (Soft, (512, 256), np.dtype(np.float32),
     "g0: Softmax over 512 rows of 256 elements streamed in row-blocks of 8 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 2 blocks per core"),
    (Soft, (256, 256), BF16,
     "g0: Softmax over 256 rows of 256 elements streamed in row-blocks of 8 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 1 blocks per core"),
    (Max, (1024, 128), np.dtype(np.int32),
     "g0: Argmax over 1024 rows of 128 elements streamed in row-blocks of 32 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 1 blocks per core"),
    (Norm, (256, 512), np.dtype(np.float32),
     "g0: RMSNorm over 256 rows of 512 elements streamed in row-blocks of 4 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 2 blocks per core"),
    (Norm, (64, 1024), BF16,
     "g0: RMSNorm over 64 rows of 1024 elements streamed in row-blocks of 2 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 1 blocks per core"),
    (Max, (3000, 40), np.dtype(np.int8),
     "g0: Argmax over 3000 rows of 40 elements streamed in row-blocks of 100 rows over 6 tiles (1 rows x 6 "
     "columns of cores), 5 blocks per core"),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")
@pytest.mark.parametrize("graph, shape, dtype, rule", STREAMED, ids=[f"{g.__name__}-{d}" for g, _, d, _ in STREAMED])
def test_a_batch_larger_than_a_tile_streams_row_blocks_and_equals_the_reference(monkeypatch, graph, shape, dtype, rule):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    want = graph(dtype, shape[1]).reference(x)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        compiled = graph(dtype, shape[1]).compile(x, device="npu2")
        assert [text for name, text in compiled.plan.rules if name == "stream_row_blocks"] == [rule]
        assert rule in compiled.describe()
        close(compiled(x), want)
