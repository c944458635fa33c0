"""Row kernels over a batch of rows (RMSNorm, Softmax, Argmax on (rows, n)): a per-row result
(RMSNorm and Softmax (rows, n), Argmax (rows,)), Softmax's per-call valid length applying to
every row, through reference() (each row equal to the 1-D call on it) and compiled on npu2, run
on the emulator in both kernel modes: Argmax exactly, float32 to rtol 1e-5, bfloat16 to 1e-2."""
import shutil

import ml_dtypes
import numpy as np
import pytest

import iron
from iron import Carried, Scratchpad
from iron.kernels import Argmax, MatMul, RMSNorm, Softmax
from iron.plan.fifos import FifoId, Stem
from iron.plan.rules import Rule
from tests.quotes import quoted

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
    quoted(refused.value, "RMSNorm", "x (2, 3, 4), w (4,)")
    with pytest.raises(iron.errors.KernelTypeError) as refused:
        Wrong().reference(np.zeros((2, 4), np.float32), np.zeros(3, np.float32))
    quoted(refused.value, "RMSNorm", "x (2, 4), w (3,)")


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
    (Max, (3001, 40), np.dtype(np.int8),   # one core on its own 3001 rows (prime); padded by pad_to_block, 32
     "g0: Argmax over 3001 rows of 40 elements (pad_to_block: padded with zeros to 3072 rows) streamed in "
     "row-blocks of 96 rows over 32 tiles (4 rows x 8 columns of cores), 1 blocks per core"),
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
        assert [text for name, text in compiled.plan.rules if name == Rule.STREAM_ROW_BLOCKS] == [rule]
        assert rule in compiled.describe()
        close(compiled(x), want)


# ---- a per-call length over a streamed batch: one word every core receives -------------------------

class Attend(iron.Graph):
    """Softmax of each row over its first pos + 1 elements, pos given per call."""

    def body(self, x, *, pos: Scratchpad[np.int32]):
        return Softmax.step(x, length=pos + 1)


class Decode(iron.Graph):
    """The same over rows held as a param, pos carried from call to call."""

    def __init__(self, x):
        self.x = iron.param(x)

    def body(self, *, pos: Carried[np.int32]):
        return Softmax.step(self.x, length=pos + 1), iron.carry(pos=pos + 100)


LENGTHS = [
    ("npu2", np.dtype(np.float32),
     "g0: Softmax over 512 rows of 256 elements streamed in row-blocks of 8 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 2 blocks per core, length=pos + 1 a per-call word every core receives"),
    ("npu2", BF16,
     "g0: Softmax over 512 rows of 256 elements streamed in row-blocks of 16 rows over 32 tiles (4 rows x 8 "
     "columns of cores), 1 blocks per core, length=pos + 1 a per-call word every core receives"),
    ("npu1", np.dtype(np.float32),
     "g0: Softmax over 512 rows of 256 elements streamed in row-blocks of 8 rows over 16 tiles (4 rows x 4 "
     "columns of cores), 4 blocks per core, length=pos + 1 a per-call word every core receives"),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")
@pytest.mark.parametrize("device, dtype, rule", LENGTHS, ids=[f"{d}-{t}" for d, t, _ in LENGTHS])
def test_a_per_call_length_reaches_every_core_of_a_streamed_batch(monkeypatch, device, dtype, rule):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    x = (np.random.default_rng(8).standard_normal((512, 256)) * 4).astype(dtype)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        compiled = Attend().compile(x, device=device)
        assert [text for name, text in compiled.plan.rules if name == Rule.STREAM_ROW_BLOCKS] == [rule]
        assert compiled.plan.fifo(FifoId("g0", Stem.IN)).consumers == tuple(core.tile for core in compiled.plan.cores)
        for pos in (0, 130, 255):
            got = compiled(x, pos=pos)
            close(got, Attend().reference(x, pos=pos))
            assert (got[:, pos + 1:] == 0).all() and (got[:, :pos + 1] > 0).all()


def test_a_carried_length_reaches_every_core_call_after_call(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    x = np.random.default_rng(9).standard_normal((256, 256)).astype(np.float32)
    compiled, graph = Decode(x).compile(device="npu2"), Decode(x)
    assert [name for name, _ in compiled.plan.rules if name == Rule.STREAM_ROW_BLOCKS] == [Rule.STREAM_ROW_BLOCKS]
    pos = 5
    for _ in range(3):
        got, carry = compiled(pos=pos)
        want, next_values = graph.reference(pos=pos)
        close(got, want)
        assert carry["pos"] == next_values["pos"] == pos + 100
        pos = carry["pos"]


# ---- a row just too wide for a tile; the widest row streams one object at a time ---------------------

class Sized(Attend):
    def __init__(self, dtype, width):
        pass


WIDEST = [   # (graph, dtype, the widest row a tile holds, the bytes one element more takes)
    (Norm, np.dtype(np.float32), 5376, 64524),
    (Soft, np.dtype(np.float32), 8064, 64520),
    (Sized, np.dtype(np.float32), 8063, 64516),    # and its per-call length word
    (Max, BF16, 32254, 64514),                     # and its int32 index
    (Max, np.dtype(np.int8), 64508, 64513),
]
WIDEST_IDS = [f"{g.__name__}-{d}" for g, d, _, _ in WIDEST]


@pytest.mark.parametrize("graph, dtype, widest, over", WIDEST, ids=WIDEST_IDS)
def test_a_row_one_element_too_wide_does_not_fit_naming_the_kernel_and_the_bytes(graph, dtype, widest, over):
    kernel = {Norm: "RMSNorm", Soft: "Softmax", Sized: "Softmax", Max: "Argmax"}[graph]
    with pytest.raises(iron.errors.DoesNotFit) as refused:
        graph(dtype, widest + 1).compile(x=((widest + 1,), dtype), device="npu2")
    quoted(refused.value, graph.__name__, f"{kernel}#0", f"{widest + 1} {dtype.name}", f"{over} bytes", "64512",
           f"at most {widest} elements")


@pytest.mark.parametrize("graph, dtype, widest, over", WIDEST, ids=WIDEST_IDS)
def test_a_batch_of_the_widest_rows_streams_one_object_at_a_time_and_equals_the_reference(
        monkeypatch, graph, dtype, widest, over):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    x = (np.random.default_rng(6).standard_normal((6, widest)) * 30).astype(dtype)
    values = {"pos": widest - 7} if graph is Sized else {}
    compiled = graph(dtype, widest).compile(x, device="npu2")
    [rule] = [text for name, text in compiled.plan.rules if name == Rule.STREAM_ROW_BLOCKS]
    assert rule.startswith(f"g0: {rule.split()[1]} over 6 rows of {widest} elements streamed in row-blocks of 1 rows")
    assert rule.endswith(", one object of each FIFO (a row fills the tile: no overlap)")
    close(compiled(x, **values), graph(dtype, widest).reference(x, **values))


class Attention(iron.Graph):
    """softmax(q k) v over the first pos + 1 keys: the scores streamed between two tiled MatMuls."""

    def __init__(self, k, v):
        self.k, self.v = iron.weight(k), iron.weight(v)

    def body(self, q, *, pos: Scratchpad[np.int32]):
        return MatMul.step(Softmax.step(MatMul.step(q, self.k), length=pos + 1), self.v)


def test_attention_over_the_array_streams_its_scores_with_the_per_call_length(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((64, 64), (64, 512), (512, 64)))
    compiled = Attention(k, v).compile(q, device="npu2")
    assert [(name, text.split(":")[0]) for name, text in compiled.plan.rules if name in (
        Rule.TILE_MATMUL_OVER_ARRAY, Rule.STREAM_ROW_BLOCKS)] == [
        (Rule.TILE_MATMUL_OVER_ARRAY, "g0"), (Rule.STREAM_ROW_BLOCKS, "g1"), (Rule.TILE_MATMUL_OVER_ARRAY, "g2")]
    assert "g1: Softmax over 64 rows of 512 elements streamed in row-blocks of 4 rows over 16 tiles (4 rows x 4 " \
           "columns of cores), 1 blocks per core, length=pos + 1 a per-call word every core receives" in compiled.describe()
    # the scores pass from the first grid to the Softmax through a DDR buffer in one configuration
    # (through_between_groups), the grid leaving columns to it (columns_for_later_groups)
    assert len(compiled.segments) == 2
    for pos in (0, 200, 511):
        close(compiled(q, pos=pos), Attention(k, v).reference(q, pos=pos))
