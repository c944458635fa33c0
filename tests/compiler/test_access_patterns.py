"""Views as DMA access patterns (issue 23 item 3): step slices, `x.T` and `transpose`, numpy
broadcasting in elementwise kernels, interior writes into a state, views in streamed calls and
views feeding a MatMul that tiles. Each first-attempt case runs on the emulator and equals numpy
on npu1 and npu2; the plan facts say how it was realised (an access pattern, `stream_view_rows`,
or the Copy `copy_view_for_grid` inserts)."""
from __future__ import annotations

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.mlir import ALLOWED_OPS, print_mlir
from iron.compiler.plan import Dma
from iron.compiler.rules import Rule
from iron.errors import IndexOutOfRange
from iron.ir import describe
from iron.kernels import Add, Copy, MatMul, Mul, Softmax
from tests.compiler.test_mlir import op_names

pytestmark = pytest.mark.usefixtures("on_emulator")

DEVICES = ["npu1", "npu2"]
RNG = np.random.default_rng(23)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def rules(body) -> list[Rule]:
    return [rule for rule, _ in body.plan.rules]


def dmas(body) -> list[Dma]:
    plans = body.plan.segments or (body.plan,)
    return [op for plan in plans for op in plan.sequence if isinstance(op, Dma)]


def run(graph, device: str, **feeds):
    """(the compiled body, its outputs on the emulator, reference()'s), checking the MLIR's ops."""
    body = graph.compile(**feeds, device=from_name(device))
    for plan in body.plan.segments or (body.plan,):
        assert set(op_names(print_mlir(plan))) <= ALLOWED_OPS
    return body, body(**feeds), graph.reference(**feeds)


class Head(iron.Graph):
    """softmax(q[h] @ k): a view feeding a MatMul whose product another kernel reads."""

    def body(self, q, k):
        return Softmax.step(MatMul.step(q[1], k))


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_feeding_a_tiled_matmul_read_by_softmax_is_copied_first(device):
    q, k = f32(4, 64, 64), f32(64, 256)
    body, got, want = run(Head(), device, q=q, k=k)
    s = q[1] @ k
    e = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert [what for rule, what in body.plan.rules if rule is Rule.COPY_VIEW_FOR_GRID] == [
        "Copy#2 copies q[1] for MatMul#0, which tiles over the array reading whole host tensors"]


class Picks(iron.Graph):
    """One tile's calls reading strided views of an input by their access pattern."""

    def body(self, x, b):
        return (Copy.step(x[:, ::2]), Copy.step(x.T), Add.step(x, b), Copy.step(x.T[1:5, ::3]),
                MatMul.step(x, x.transpose(1, 0)))


@pytest.mark.parametrize("device", DEVICES)
def test_step_slices_transposes_and_broadcasts_move_by_access_patterns_on_one_tile(device):
    x, b = f32(16, 32), f32(32)
    body, got, want = run(Picks(), device, x=x, b=b)
    for mine, numpy in zip(got, (x[:, ::2], x.T, x + b, x.T[1:5, ::3])):
        np.testing.assert_array_equal(mine, numpy)
    np.testing.assert_allclose(got[4], x @ x.T, rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(got, want):
        np.testing.assert_array_equal(mine, theirs)
    patterns = {(op.sizes, op.strides) for op in dmas(body)}
    assert ((1, 1, 32, 16), (0, 0, 1, 32)) in patterns        # x.T: a word every 32, 32 times per row
    assert ((16, 1, 1, 32), (0, 0, 0, 1)) in patterns        # b broadcast: the repeat, stride 0
    assert ((1, 1, 1, 256), (0, 0, 0, 2)) in patterns        # x[:, ::2]: every second word, rows merged
    assert Rule.COPY_VIEW_FOR_GRID not in rules(body)


class Streamed(iron.Graph):
    """Elementwise calls larger than a tile over strided views: they stream by rows."""

    def __init__(self, which: str):
        self.which = which

    def body(self, x, b):
        if self.which == "bias":
            return Add.step(x, b)
        if self.which == "step":
            return Mul.step(x[:, ::2], x[:, 1::2])
        return Add.step(x.T, x)


STREAMED = {
    "bias": ((768, 2304), (2304,), lambda x, b: x + b),
    "step": ((512, 1024), (1,), lambda x, b: x[:, ::2] * x[:, 1::2]),
    "transpose": ((512, 512), (1,), lambda x, b: x.T + x),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", sorted(STREAMED))
def test_strided_views_stream_in_blocks_of_whole_rows(device, which):
    xs, bs, numpy = STREAMED[which]
    x, b = f32(*xs), f32(*bs)
    body, got, want = run(Streamed(which), device, x=x, b=b)
    np.testing.assert_array_equal(got, numpy(x, b))
    np.testing.assert_array_equal(got, want)
    assert Rule.STREAM_ELEMENTWISE in rules(body) and Rule.COPY_VIEW_FOR_GRID not in rules(body)
    assert all(op.strides[i] >= 1 for op in dmas(body) for i in (1, 2, 3) if op.sizes[i] > 1)


class Interior(iron.Graph):
    """x written into the interior of a state one wider on every side, the state returned."""

    def __init__(self, n: int):
        self.pad = iron.state((n + 2, n + 2), np.float32, name="pad")

    def body(self, x):
        Copy.step(x, self.pad[1:-1, 1:-1])
        return Copy.step(self.pad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [32, 256])
def test_writing_the_interior_of_a_state(device, n):
    x = f32(n, n)
    graph = Interior(n)
    body, got, want = run(graph, device, x=x)
    expected = np.zeros((n + 2, n + 2), np.float32)
    expected[1:-1, 1:-1] = x
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(body.read(graph.pad), expected)


class Texts(iron.Graph):
    def body(self, x, y):
        return (Copy.step(x[:, ::2]), Copy.step(x.T), Copy.step(y.transpose(1, 0, 2)), Add.step(x, x[0]),
                Copy.step(y[1].T[::3, 2]))


def test_views_are_described_as_numpy_writes_them():
    program = Texts().trace(x=f32(4, 6), y=f32(2, 4, 6))
    texts = [describe(n) for c in program.calls for n in c.src]
    assert texts == ["x[:, ::2]", "x.T", "y.transpose(1, 0, 2)", "x", "broadcast_to(x[0], (4, 6))", "y[1, 2, ::3]"]
    want = Texts().reference(x=(x := f32(4, 6)), y=(y := f32(2, 4, 6)))
    for mine, numpy in zip(want, (x[:, ::2], x.T, y.transpose(1, 0, 2), x + x[0], y[1].T[::3, 2])):
        np.testing.assert_array_equal(mine, numpy)


class Backwards(iron.Graph):
    def body(self, x):
        return Copy.step(x[::-1])


def test_a_negative_step_is_refused_naming_the_view():
    with pytest.raises(IndexOutOfRange) as err:
        Backwards().trace(x=f32(4))
    assert "x[None:None:-1]" in str(err.value) and "positive step" in str(err.value)
