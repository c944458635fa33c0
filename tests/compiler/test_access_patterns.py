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
from iron import Carried, Scratchpad
from iron.compiler.copies import copy_view_for_grid
from iron.errors import IndexOutOfRange
from iron.ir import describe
from iron.kernels import Add, Copy, MatMul, Mul, Scatter, Softmax, StridedRows
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import Dma
from iron.plan.rules import Rule
from tests.plan.test_mlir import op_names

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
    inserted = copy_view_for_grid(Head().trace(q=q, k=k), from_name(device)).inserted
    assert [(c.arg.kernel, describe(c.src[0]), c.shape) for c in inserted] == [(Copy, "q[1]", (64, 64))]
    assert [r for r, _ in body.plan.rules].count(Rule.COPY_VIEW_FOR_GRID) == 1


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

    def __init__(self, n: int, dtype=np.float32):
        self.pad = iron.state((n + 2, n + 2), dtype, name="pad")

    def body(self, x):
        Copy.step(x, self.pad[1:-1, 1:-1])
        return Copy.step(self.pad)


def ints(dtype, *shape) -> np.ndarray:
    """Small integers (exact in bfloat16) of `dtype`, never 0, so a misplaced element shows."""
    return RNG.integers(1, 100, shape).astype(dtype)


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
    assert Rule.SCATTER_INTO_STATE not in rules(body)   # whole words: the DMA writes it by its access pattern


NARROW = [iron.bfloat16, np.int16, np.int8, np.uint8]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NARROW, ids=["bf16", "i16", "i8", "u8"])
@pytest.mark.parametrize("n", [32, 31])
def test_writing_the_interior_of_a_state_of_narrow_elements(device, dtype, n):
    """The interior starts mid-word: `scatter_into_state` places x among the words around it, and
    the border the host wrote keeps its values."""
    x, border = ints(dtype, n, n), ints(dtype, n + 2, n + 2)
    graph = Interior(n, dtype)
    body = graph.compile(x=x, device=from_name(device))
    body.write("pad", border)
    graph.write("pad", border)
    got, want = body(x=x), graph.reference(x=x)
    expected = border.copy()
    expected[1:-1, 1:-1] = x
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(body.read(graph.pad), expected)
    per = 4 // np.dtype(dtype).itemsize
    lo, hi = (n + 3) // per * per, -(-(n * (n + 2) + n + 2) // per) * per   # the words around the interior
    assert scattered_spans(graph, x) == [(lo, hi)] and rules(body).count(Rule.SCATTER_INTO_STATE) == 1
    assert set(op_names(print_mlir(body.plan))) <= ALLOWED_OPS


def scattered_spans(graph, x) -> list[tuple[int, int]]:
    """The elements [lo, hi) of the state seen flat that each Scatter `scatter_into_state` inserts
    reads and writes back."""
    program = copy_view_for_grid(graph.trace(x=x))
    return [(c.src[1].arg[0].start, c.src[1].arg[0].stop) for c in program.inserted if c.arg.kernel is Scatter]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, n", [(iron.bfloat16, 256), (np.int8, 131)], ids=["bf16", "i8"])
def test_an_interior_larger_than_a_tile_is_scattered_in_bands_of_rows(device, dtype, n):
    """The words around the interior take more than a tile: one Scatter per band of rows, the
    bands' words never meeting, each placing its rows of x."""
    x, border = ints(dtype, n, n), ints(dtype, n + 2, n + 2)
    graph = Interior(n, dtype)
    body = graph.compile(x=x, device=from_name(device))
    body.write("pad", border)
    got = body(x=x)
    expected = border.copy()
    expected[1:-1, 1:-1] = x
    np.testing.assert_array_equal(got, expected)
    spans = scattered_spans(graph, x)
    assert len(spans) > 1 and rules(body).count(Rule.SCATTER_INTO_STATE) == len(spans) and all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
    per = 4 // np.dtype(dtype).itemsize
    assert spans[0][0] == (n + 3) // per * per and spans[-1][1] == -(-(n * (n + 2) + n + 2) // per) * per


class Grow(iron.Graph):
    """The interior of a state grown by x every step of a CarriedLoop: read (gathered by a Strided
    call) and written (placed by a Scatter) as one view."""

    def __init__(self, x):
        self.x = iron.param(x)
        self.pad = iron.state((x.shape[0] + 2, x.shape[1] + 2), x.dtype, name="pad")

    def body(self, *, step: Carried[np.int32]):
        Add.step(self.pad[1:-1, 1:-1], self.x, out=self.pad[1:-1, 1:-1])
        return iron.carry(step=step + 1)


@pytest.mark.parametrize("dtype", NARROW, ids=["bf16", "i16", "i8", "u8"])
def test_an_interior_of_narrow_elements_grows_in_a_carried_loop_at_depth_two(dtype):
    x, border = ints(dtype, 31, 31) % 8, ints(dtype, 33, 33)
    body = Grow(x).compile(device=from_name("npu2"))
    body.write("pad", border)
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(5, step=0)) == list(range(5))
    assert dict(loop.carry) == {"step": 6} and loop.transitions == 6
    expected = border.copy()
    expected[1:-1, 1:-1] = (border[1:-1, 1:-1].astype(np.int64) + 6 * x.astype(np.int64)).astype(dtype)
    np.testing.assert_array_equal(body.read("pad"), expected)
    assert {rule for rule in rules(body)} >= {Rule.SCATTER_INTO_STATE, Rule.COPY_VIEW_FOR_GRID}


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


class Narrow(iron.Graph):
    """Views of 1- and 2-byte elements no DMA pattern moves: their runs are narrower than a word."""

    def body(self, x, y):
        return Add.step(x.T, y[:, ::2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [iron.bfloat16, np.int8])
def test_views_of_narrow_elements_are_gathered_on_a_core(device, dtype):
    """`copy_view_for_grid` reads x.T and y[:, ::2] of bfloat16 or int8 through a Strided call each,
    which gathers the view from the whole tensor by its access pattern in elements."""
    x = (RNG.standard_normal((32, 16)) * 8).astype(dtype)
    y = (RNG.standard_normal((16, 64)) * 8).astype(dtype)
    body, got, want = run(Narrow(), device, x=x, y=y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, (x.T + y[:, ::2]).astype(dtype))
    name = "bfloat16" if dtype == iron.bfloat16 else "int8"
    why = f"its {name} elements lie in runs narrower than the DMA's 32-bit words, so no DMA moves it"
    assert [text for rule, text in body.plan.rules if str(rule) == "copy_view_for_grid"] == [
        f"Strided#1 gathers (16, 32) of x on a core by its access pattern (from element 0, sizes (16, 32), "
        f"strides (1, 16) elements): {why}",
        f"Strided#2 gathers (16, 32) of y on a core by its access pattern (from element 0, sizes (512,), "
        f"strides (2,) elements): {why}"]


class Attend(iron.Graph):
    """Softmax over a view of x's rows: x[:64], or x.T's 64 rows of 1024."""

    def __init__(self, view: str):
        self.view = view

    def body(self, x, *, n: Scratchpad[np.int32]):
        return Softmax.step(x[:64] if self.view == "rows" else x.T, length=n + 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("view, shape", [("rows", (80, 1024)), ("transpose", (1024, 64))])
def test_a_row_reduction_over_a_view_streams_in_row_blocks(device, view, shape):
    x = f32(*shape)
    graph = Attend(view)
    body = graph.compile(x=x, device=from_name(device))
    got, want = body(x=x, n=700), graph.reference(x=x, n=700)
    rows = x[:64] if view == "rows" else x.T
    e = np.exp(rows[:, :701] - rows[:, :701].max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[:, :701], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)   # the emulator sums each row in another order
    assert Rule.STREAM_ROW_BLOCKS in rules(body)


class ViewOfProduct(iron.Graph):
    """A step slice and a transpose of a tiled MatMul's product, larger than a tile."""

    def __init__(self, w, transpose: bool):
        self.w, self.transpose = iron.param(w), transpose

    def body(self, a, c):
        y = MatMul.step(a, self.w)
        return MatMul.step(y.T, c) if self.transpose else Add.step(y[:, ::2], c)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("transpose", [False, True], ids=["step", "transpose"])
def test_a_strided_view_of_a_product_larger_than_a_tile_is_copied_from_ddr(device, transpose):
    """The product crosses to the next segment in DDR, where a Copy moves the view by its access
    pattern (`copy_view_for_grid`), instead of a core gathering its many runs."""
    a, w = f32(256, 256), f32(256, 512)
    c = f32(256, 128) if transpose else f32(256, 256)
    graph = ViewOfProduct(w, transpose)
    body, got, want = run(graph, device, a=a, c=c)
    y = a @ w
    np.testing.assert_allclose(got, y.T @ c if transpose else y[:, ::2] + c, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    texts = [text for rule, text in body.plan.rules if str(rule) == "copy_view_for_grid"]
    assert texts == (["Copy#2 copies MatMul(a, w).T for MatMul#1, which tiles over the array reading whole host tensors"]
                     if transpose else
                     ["Copy#2 copies MatMul(a, w)[:, ::2] for Add#1, as it picks more than 256 separate runs of "
                      "MatMul#0's result, larger than a tile: the result crosses in DDR, where the DMA moves the view "
                      "by its access pattern"])


class RowInterior(iron.Graph):
    """Row i + 1's interior of a state one wider on every side written each call (a per-call index)."""

    def __init__(self, n: int, dtype):
        self.pad = iron.state((n + 2, n + 2), dtype, name="pad")

    def body(self, row, *, i: Scratchpad[np.int32]):
        Copy.step(row, out=self.pad[i + 1, 1:-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NARROW, ids=["bf16", "i16", "i8", "u8"])
def test_a_row_interior_at_a_per_call_index_is_scattered_into_its_whole_row(device, dtype):
    """The Scatter reads and writes back the whole row the per-call index picks (its rows padded to
    whole words where they are not: `pad_rows_to_words`), the border keeping its values."""
    graph, border = RowInterior(31, dtype), ints(dtype, 33, 33)
    body = graph.compile(row=border[0, 1:-1], device=from_name(device))
    body.write("pad", border)
    graph.write("pad", border)
    expected = border.copy()
    for i in (0, 17, 30, 17):
        row = ints(dtype, 31)
        body(row=row, i=i)
        graph.reference(row=row, i=i)
        expected[i + 1, 1:-1] = row
    np.testing.assert_array_equal(body.read("pad"), expected)
    np.testing.assert_array_equal(graph.read("pad"), expected)
    [scatter] = [c for c in copy_view_for_grid(graph.trace(row=border[0, 1:-1])).inserted if c.arg.kernel is Scatter]
    assert describe(scatter.src[1]) == "pad[i + 1]" and scatter.arg.attr_dict["offset"] == 1


class Fill(iron.Graph):
    """A CarriedLoop writing row `step` of a weight into row step + 1's interior of a state."""

    def __init__(self, x):
        self.x = iron.weight(x)
        self.pad = iron.state((x.shape[0] + 2, x.shape[1] + 2), x.dtype, name="pad")

    def body(self, *, step: Carried[np.int32]):
        Copy.step(self.x[step], out=self.pad[step + 1, 1:-1])
        return iron.carry(step=step + 1)


@pytest.mark.parametrize("dtype", NARROW, ids=["bf16", "i16", "i8", "u8"])
def test_row_interiors_fill_a_state_in_a_carried_loop_at_depth_two(dtype):
    x, border = ints(dtype, 31, 31), ints(dtype, 33, 33)
    body = Fill(x).compile(device=from_name("npu2"))
    body.write("pad", border)
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(30, step=0)) == list(range(30))
    assert dict(loop.carry) == {"step": 31} and loop.transitions == 31
    expected = border.copy()
    expected[1:-1, 1:-1] = x
    np.testing.assert_array_equal(body.read("pad"), expected)


class NarrowLarge(iron.Graph):
    """x[:, ::2] or x.T of a 1024 x 1024 tensor of 1- or 2-byte elements feeding a streamed Add or
    a MatMul over the array, or y[:, ::2] of a product y as large."""

    def __init__(self, reader: str, w=None):
        self.reader, self.w = reader, None if w is None else iron.param(w)

    def body(self, x, y):
        if self.reader == "product":
            return Add.step(MatMul.step(x, self.w)[:, ::2], y)
        if self.reader == "matmul":
            return MatMul.step(x[:, ::2], y, dtype=np.int32 if x.dtype.kind in "iu" else np.float32)
        return Add.step(x.T if self.reader == "transpose" else x[:, ::2], y)


NARROW_LARGE = {   # reader: x's and y's shapes, numpy's result, StridedRows' pattern (offset, sizes, strides)
    # for `per` elements a word (x.T's rows are columns of words)
    "add": ((1024, 1024), (1024, 512), lambda x, y, w: x[:, ::2] + y, lambda per: (0, (512,), (2,))),
    "transpose": ((1024, 1024), (1024, 1024), lambda x, y, w: x.T + y, lambda per: (0, (per, 1024), (1, per))),
    "matmul": ((1024, 1024), (512, 64), lambda x, y, w: x[:, ::2] @ y, lambda per: (0, (512,), (2,))),
    "product": ((256, 128), (256, 256), lambda x, y, w: (x @ w)[:, ::2] + y, lambda per: (0, (256,), (2,))),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.uint8, iron.bfloat16], ids=["u8", "bf16"])
@pytest.mark.parametrize("reader", sorted(NARROW_LARGE))
def test_a_narrow_view_larger_than_a_tile_is_picked_row_by_row_as_its_rows_stream(device, dtype, reader):
    """`copy_view_for_grid` reads the view through a StridedRows call, which streams the whole rows
    of its tensor in blocks of rows (`stream_row_blocks`), or for x.T its columns of words, and
    picks each row of the view from one of them."""
    xs, ys, numpy, pattern = NARROW_LARGE[reader]
    x, y = ints(dtype, *xs) % 2, ints(dtype, *ys) % 2   # 0 and 1: every sum exact in bfloat16 and uint8
    w = ints(dtype, 128, 512) % 2 if reader == "product" else None
    graph = NarrowLarge(reader, w)
    body, got, want = run(graph, device, x=x, y=y)
    np.testing.assert_array_equal(np.asarray(got, np.int64), numpy(*(None if a is None else np.asarray(a, np.int64) for a in (x, y, w))))
    np.testing.assert_array_equal(got, want)
    [picks] = copy_view_for_grid(graph.trace(x=x, y=y)).inserted
    a = picks.arg.attr_dict
    assert picks.arg.kernel is StridedRows and (a["offset"], tuple(a[f"n{d}"] for d in range(4) if a[f"n{d}"] > 1),
                                                tuple(a[f"s{d}"] for d in range(4) if a[f"n{d}"] > 1)) == pattern(4 // np.dtype(dtype).itemsize)
    assert {Rule.COPY_VIEW_FOR_GRID, Rule.STREAM_ROW_BLOCKS} <= set(rules(body))


class SliceOfProduct(iron.Graph):
    """(x @ w)[1:] @ v: a view of one tiled product read by another."""

    def __init__(self, w, v):
        self.w, self.v = iron.param(w), iron.param(v)

    def body(self, x):
        return MatMul.step(MatMul.step(x, self.w)[1:], self.v)


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_of_a_product_read_by_a_tiled_matmul_is_copied_first(device):
    """`copy_view_for_grid` reads (x @ w)[1:] through a Copy (the grid reads whole tensors), as it
    reads a view of a host tensor: no refusal saying the view is not padded."""
    x, w, v = f32(251, 251), f32(251, 251) / 4, f32(251, 251) / 4
    graph = SliceOfProduct(w, v)
    body, got, want = run(graph, device, x=x)
    np.testing.assert_allclose(got, (x @ w)[1:] @ v, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    [copy] = copy_view_for_grid(graph.trace(x=x)).inserted
    assert copy.arg.kernel is Copy and describe(copy.src[0]) == "MatMul(x, w)[1:]"
