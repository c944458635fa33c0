"""The cases issue 23 item 3 left refused or broken, each now compiled for npu1 and npu2, run on
the emulator and equal to numpy (exactly for integers and for bfloat16 copies; a stated
tolerance where a float is computed), with the plan facts saying how the view was realised."""
from __future__ import annotations

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.copies import copy_view_for_grid
from iron.compiler.tiling import TILED_BYTES
from iron.ir import describe
from iron.kernels import Add, Argmax, Cast, Copy, MatMul, RMSNorm, Softmax, Sub
from iron.plan.fifos import Stem
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import Direction, Dma
from iron.plan.rules import PaddedGrid, Rule
from tests.plan.test_mlir import op_names

pytestmark = pytest.mark.usefixtures("on_emulator")

DEVICES = ["npu1", "npu2"]
BF16 = iron.bfloat16


def rules(body) -> list[Rule]:
    return [rule for rule, _ in body.plan.rules]


def texts(body, rule: Rule) -> list[str]:
    return [text for r, text in body.plan.rules if r is rule]


class Norm(iron.Graph):
    """RMSNorm of rows whose weight row (every row shares it) is not whole words."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        return RMSNorm.step(x, self.w)


@pytest.mark.parametrize("device", DEVICES)
def test_rmsnorm_of_rows_of_an_odd_number_of_bfloat16_streams_its_weight_as_whole_words(device):
    """(251, 251) bfloat16: the shared row w (502 bytes) goes to every core as one object of 504
    bytes (whole words; the kernel reads its 251 elements), the rows stream in row-blocks."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((251, 251)).astype(BF16), rng.standard_normal(251).astype(BF16)
    graph = Norm(w)
    body = graph.compile(x=x, device=from_name(device))
    got = body(x=x)
    np.testing.assert_array_equal(got, graph.reference(x=x))   # the emulator runs the kernel the reference runs
    wide = x.astype(np.float64)
    numpy = wide / np.sqrt((wide ** 2).mean(axis=1, keepdims=True) + 1e-6) * w.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got, np.float64), numpy, rtol=2 ** -7, atol=2 ** -7)   # bfloat16's 8 bits
    assert Rule.STREAM_ROW_BLOCKS in rules(body)
    shared = [f for f in body.plan.fifos if f.name.stem is Stem.W and f.name.at == (0,) and not f.name.mem]
    assert [(f.nbytes, f.dtype, len(f.consumers) > 1) for f in shared] == [(504, np.dtype(BF16), True)]


class CastAndProduct(iron.Graph):
    """x.reshape(256, 64) read by a MatMul that tiles over the array and by a Cast."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        rows = x.reshape(256, 64)
        return MatMul.step(rows, self.w), Cast.step(rows, dtype=BF16)


@pytest.mark.parametrize("device", DEVICES)
def test_a_cast_reading_the_view_a_tiled_matmul_reads_shares_its_copy(device):
    """One Copy of x.reshape(256, 64) (inserted for the MatMul) read by both calls, one rule line
    naming both (before: an AttributeError describing the Cast's reason)."""
    rng = np.random.default_rng(6)
    x, w = rng.integers(-8, 8, 256 * 64).astype(np.float32), rng.integers(-8, 8, (64, 256)).astype(np.float32)
    graph = CastAndProduct(w)
    body = graph.compile(x=x, device=from_name(device))
    product, cast = body(x=x)
    np.testing.assert_array_equal(product, x.reshape(256, 64) @ w)   # small integers: exact in float32
    np.testing.assert_array_equal(cast, x.reshape(256, 64).astype(BF16))
    (line,) = texts(body, Rule.COPY_VIEW_FOR_GRID)
    assert line.startswith("Copy#2 copies x.reshape(256, 64) for MatMul#0, Cast#1, ")
    assert body.plan.groups == (("g0", ("Copy#2",)), ("g1", ("MatMul#0",)), ("g2", ("Cast#1",)))


class TwoBiases(iron.Graph):
    """(x - a) - b, a and b rows every row of x shares (numpy broadcasting): two calls alike."""

    def __init__(self, a, b):
        self.a, self.b = iron.param(a), iron.param(b)

    def body(self, x):
        return Sub.step(Sub.step(x, self.a), self.b)


@pytest.mark.parametrize("device", DEVICES)
def test_two_broadcasts_alike_loop_over_time_at_a_prime_side(device):
    """The two Subs over (251, 251) run as one iteration placed and looped twice
    (`repeat_over_time`), each broadcast row moved by a DMA access pattern whose repeat has stride
    0; the runtime sequence waits on the iteration's FIFOs before the next iteration's moves
    (before: the second iteration ran out of shim BDs mid-stream and the device hung)."""
    rng = np.random.default_rng(7)
    x, a, b = (rng.standard_normal(s).astype(np.float32) for s in ((251, 251), (251,), (251,)))
    graph = TwoBiases(a, b)
    body = graph.compile(x=x, device=from_name(device))
    np.testing.assert_array_equal(body(x=x), (x - a) - b)   # float32 subtractions, as numpy rounds them
    assert body.plan.repeat is not None and body.plan.repeat.count == 2
    broadcast = [op for op in body.plan.sequence if isinstance(op, Dma) and op.buffer == "consts"]
    assert broadcast and all(op.strides[0] == 0 and op.strides[1:] == (0, 0, 1) and op.sizes[-1] == 251
                             for op in broadcast)


class ReadTwice(iron.Graph):
    """A product padded at N = 509 read by a call whose result another call reads:
    Argmax(Softmax(x @ w)), or RMSNorm(x @ w + b, r)."""

    def __init__(self, w, b=None, r=None):
        self.w = iron.param(w)
        self.b, self.r = (None, None) if b is None else (iron.param(b), iron.param(r))

    def body(self, x):
        y = MatMul.step(x, self.w)
        if self.b is None:
            return Argmax.step(Softmax.step(y))
        return RMSNorm.step(Add.step(y, self.b), self.r)


def mlir_ops_allowed(body) -> bool:
    """Whether every configuration's MLIR uses only the ops docs/platform.md sections 3 and 7 list."""
    return all(set(op_names(print_mlir(plan))) <= ALLOWED_OPS for plan in body.plan.segments or (body.plan,))


def placement(body, name: str):
    return next(p for p in body.plan.placements if p.name == name)


@pytest.mark.parametrize("device", DEVICES)
def test_a_padded_product_read_by_softmax_then_argmax_passes_its_layout_on(device):
    """Softmax reduces the product's rows as they lie padded, (256, 512), and its result lies so
    too for Argmax (`pad_through_rows` passed on), whose result the host reads in its 251 rows
    (before: DoesNotFit, "its result is read by Softmax(...), read by more than the host")."""
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((251, 251)).astype(np.float32), rng.standard_normal((251, 509)).astype(np.float32)
    graph = ReadTwice(w)
    body = graph.compile(x=x, device=from_name(device))
    got = body(x=x)
    scores = x.astype(np.float64) @ w
    picked = np.take_along_axis(scores, got.reshape(-1, 1).astype(np.int64), axis=1)[:, 0]
    np.testing.assert_array_less(scores.max(axis=1) - picked, 1e-3)   # the row's largest, up to the sums' order
    assert (placement(body, "cut.Softmax#1").padded, placement(body, "out0").padded) == ((256, 512), (256,))
    assert [r for r in rules(body) if r is Rule.STREAM_ROW_BLOCKS] == [Rule.STREAM_ROW_BLOCKS] * 2


@pytest.mark.parametrize("device", DEVICES)
def test_a_padded_product_plus_a_bias_read_by_rmsnorm_passes_its_layout_on(device):
    """x @ w + b streams over the product's padded layout, and RMSNorm reduces its rows as they
    lie (each row's first 509 elements), float32 within 1e-4 of numpy."""
    rng = np.random.default_rng(9)
    x, w, b = (rng.standard_normal(s).astype(np.float32) / 4 for s in ((251, 251), (251, 509), (251, 509)))
    r = rng.standard_normal(509).astype(np.float32)
    graph = ReadTwice(w, b, r)
    body = graph.compile(x=x, device=from_name(device))
    got = body(x=x)
    y = x.astype(np.float64) @ w + b
    numpy = y / np.sqrt((y ** 2).mean(axis=1, keepdims=True) + 1e-6) * r
    np.testing.assert_allclose(got, numpy, rtol=1e-4, atol=1e-4 * np.abs(numpy).max())
    np.testing.assert_allclose(got, graph.reference(x=x), rtol=1e-4, atol=1e-4 * np.abs(numpy).max())
    assert placement(body, "cut.Add#1").padded == (256, 512)


class ViewAfterTwoProducts(iron.Graph):
    """(x @ w1 @ w2 + b) + c.T: the second Add reads the first's result, lying as the grid lays
    the product out, and a transpose of a param."""

    def __init__(self, w1, w2, b, c):
        self.w1, self.w2, self.b, self.c = map(iron.param, (w1, w2, b, c))

    def body(self, x):
        return Add.step(Add.step(MatMul.step(MatMul.step(x, self.w1), self.w2), self.b), self.c.T)


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_read_beside_a_result_lying_as_a_grid_lays_it_out_is_copied_first(device):
    """c.T is copied before the second Add (`copy_view_for_grid` follows the layout through the
    first Add; before: DoesNotFit, "operands.3.T is a view" on npu1)."""
    rng = np.random.default_rng(10)
    x, w1, w2, b, c = (rng.standard_normal(s).astype(np.float32) / 4
                       for s in ((251, 251), (251, 509), (509, 251), (251, 251), (251, 251)))
    graph = ViewAfterTwoProducts(w1, w2, b, c)
    body = graph.compile(x=x, device=from_name(device))
    numpy = x.astype(np.float64) @ w1 @ w2 + b + c.T
    np.testing.assert_allclose(body(x=x), numpy, rtol=1e-4, atol=1e-4 * np.abs(numpy).max())
    inserted = copy_view_for_grid(graph.trace(x=x), from_name(device)).inserted
    assert [(c.arg.kernel, describe(c.src[0])) for c in inserted] == [(Copy, "c.T")]


class Bias(iron.Graph):
    def body(self, x, b):
        return Add.step(x, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "shape"), [("i8", (256, 251)), ("u8", (1024, 253)), ("bf16", (512, 251))])
def test_a_broadcast_row_of_narrow_elements_larger_than_a_tile_repeats_its_unit(device, dtype, shape):
    """x + b, b a row of 1- or 2-byte elements that is not whole words, broadcast over more rows
    than a tile holds: a Strided call gathers the fewest rows of it that are whole words (4 of
    int8, 2 of bfloat16) into a DDR buffer of the compiler's, which the stream's DMA repeats with
    stride 0 (`repeated_unit`; before: PlacementError "moves runs of 251 bytes"); exact."""
    dt = {"i8": np.dtype(np.int8), "u8": np.dtype(np.uint8), "bf16": np.dtype(BF16)}[dtype]
    rng = np.random.default_rng(11)
    x, b = rng.integers(0, 50, shape).astype(dt), rng.integers(0, 50, shape[1]).astype(dt)
    body = Bias().compile(x=x, b=b, device=from_name(device))
    np.testing.assert_array_equal(body(x=x, b=b), (x + b).astype(dt))   # small sums: exact in every dtype
    unit = 4 // dt.itemsize
    (line,) = texts(body, Rule.COPY_VIEW_FOR_GRID)
    assert line.startswith(f"Strided#1 gathers ({unit}, {shape[1]}) of b on a core") and "into through.view0" in line
    assert placement(body, "through.view0").shape == (unit, shape[1]) and mlir_ops_allowed(body)
    repeats = [op for op in body.plan.sequence if isinstance(op, Dma) and op.buffer == "outputs" and op.strides[0] == 0
               and op.sizes[0] > 1]
    assert repeats and all(op.sizes[1:] == (1, 1, unit * shape[1] * dt.itemsize // 4) for op in repeats)


class Transposed(iron.Graph):
    def body(self, x):
        return Copy.step(x.T)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "shape"), [("bf16", (512, 251)), ("i8", (256, 251)), ("u8", (1024, 63))])
def test_the_transpose_of_rows_not_whole_words_larger_than_a_tile_goes_in_bands(device, dtype, shape):
    """x.T, x's rows not whole words (no columns of words pick it), its transpose's rows whole
    words: one Strided call per band of x's rows (a run of whole words) transposes it on a core
    into its columns of a DDR buffer of the compiler's, rows of whole words at the buffer's
    stride (`transposed_bands`; before: PlacementError "moves runs of 2 bytes"); exact."""
    dt = {"i8": np.dtype(np.int8), "u8": np.dtype(np.uint8), "bf16": np.dtype(BF16)}[dtype]
    x = np.random.default_rng(12).integers(0, 100, shape).astype(dt)
    body = Transposed().compile(x=x, device=from_name(device))
    np.testing.assert_array_equal(body(x=x), x.T)
    r, c = shape
    band = TILED_BYTES // (2 * c * dt.itemsize) // 4 * 4   # rows per band: a multiple of 4 here
    lines = texts(body, Rule.COPY_VIEW_FOR_GRID)
    assert len(lines) == -(-r // band) and all("into through.view0[:, " in line for line in lines)
    assert placement(body, "through.view0").shape == (c, r) and mlir_ops_allowed(body)
    writes = [op for plan in body.plan.segments or (body.plan,) for op in plan.sequence
              if isinstance(op, Dma) and op.direction is Direction.S2MM and op.offset >= placement(body, "through.view0").offset
              and op.buffer == "outputs"]
    assert all(op.sizes[-2] == c and op.strides[-2:] == (r * dt.itemsize // 4, 1) for op in writes)   # c rows at r's stride
    assert sum(op.sizes[-1] for op in writes) == r * dt.itemsize // 4   # each column of words written once


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "shape"), [("i8", (256, 251)), ("bf16", (512, 129)), ("i8", (130, 256))])
def test_a_broadcast_column_of_narrow_elements_larger_than_a_tile_is_picked_row_by_row(device, dtype, shape):
    """x + b, b (r, 1) of 1- or 2-byte elements, each repeated along a row of x, larger than a
    tile: a StridedRows call over b seen as rows of one word, each giving as many rows of the
    view (its pattern repeats each element with stride 0), streamed (`repeated_columns`); when
    r is no multiple of a word's elements (130 int8), Strided calls by bands of its rows into a
    DDR buffer of the compiler's (`row_bands`; before: PlacementError "moves runs of 1 bytes");
    exact."""
    dt = {"i8": np.dtype(np.int8), "bf16": np.dtype(BF16)}[dtype]
    rng = np.random.default_rng(13)
    x, b = rng.integers(0, 50, shape).astype(dt), rng.integers(0, 50, (shape[0], 1)).astype(dt)
    body = Bias().compile(x=x, b=b, device=from_name(device))
    np.testing.assert_array_equal(body(x=x, b=b), (x + b).astype(dt))
    per = 4 // dt.itemsize
    lines = texts(body, Rule.COPY_VIEW_FOR_GRID)
    if shape[0] % per:
        assert lines and all(" into through.view0[" in line for line in lines)
    else:
        assert body.plan.groups[0][1] == ("StridedRows#1",) and Rule.STREAM_ROW_BLOCKS in rules(body)
        (line,) = lines
        assert line.startswith(f"StridedRows#1 picks each row of its {(shape[0] // per, per * shape[1])} from a row of b")
        assert line.endswith("and its result is larger than a tile")
    assert mlir_ops_allowed(body)


VIEWS = {"x[::2]": lambda x: x[::2], "x[:, 1:]": lambda x: x[:, 1:], "x[::2, ::2]": lambda x: x[::2, ::2],
         "x[1:-1, 2:]": lambda x: x[1:-1, 2:]}


class Picked(iron.Graph):
    def __init__(self, view: str):
        self.view = view

    def body(self, x):
        return Copy.step(VIEWS[self.view](x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "shape", "view"), [("i8", (256, 251), "x[::2]"), ("i8", (256, 251), "x[:, 1:]"),
                                                      ("bf16", (256, 251), "x[::2, ::2]"), ("i8", (300, 130), "x[1:-1, 2:]")])
def test_a_view_of_rows_starting_mid_word_larger_than_a_tile_goes_in_bands_of_its_rows(device, dtype, shape, view):
    """A row step, a column slice or both of rows that are not whole words, larger than a tile
    (before: PlacementError "moves runs of 250 bytes ... from byte 1"); exact. A column slice of
    all of x's rows streams x's rows to cores picking each (StridedRows); the others go in bands
    of the view's rows, one Strided call per band picking them from the whole words of x they
    come from (a run the DMA moves) into its rows of a DDR buffer of the compiler's (`row_bands`)."""
    dt = {"i8": np.dtype(np.int8), "bf16": np.dtype(BF16)}[dtype]
    x = np.random.default_rng(14).integers(0, 100, shape).astype(dt)
    body = Picked(view).compile(x=x, device=from_name(device))
    want = VIEWS[view](x)
    np.testing.assert_array_equal(body(x=x), want)
    lines = texts(body, Rule.COPY_VIEW_FOR_GRID)
    if view == "x[:, 1:]":
        assert [line.split(" by ")[0] for line in lines] == ["StridedRows#1 picks each row of its (256, 250) from a row of x"]
    else:
        assert lines and all(" into through.view0[" in line for line in lines)
        assert placement(body, "through.view0").shape == want.shape
    assert mlir_ops_allowed(body)


class Shifted(iron.Graph):
    """x[1:] + x[:-1] (a two-tap stencil): no one lead starts both views on a word."""

    def body(self, x):
        return Add.step(x[1:], x[:-1])


@pytest.mark.parametrize("device", DEVICES)
def test_two_shifted_views_of_narrow_elements_read_one_through_a_gather(device):
    """x[:-1] moves as x lies; x[1:] starts mid-word, and `pad_lead_to_words` gives x no lead
    (none starts both), so a Strided call gathers it (before: PlacementError naming x[1:]); exact."""
    x = np.random.default_rng(15).integers(-60, 60, 4001).astype(np.int8)
    body = Shifted().compile(x=x, device=from_name(device))
    np.testing.assert_array_equal(body(x=x), (x[1:] + x[:-1]).astype(np.int8))
    assert placement(body, "x").lead == 0
    assert [line.split(" by ")[0] for line in texts(body, Rule.COPY_VIEW_FOR_GRID)] == ["Strided#1 gathers (4000,) of x on a core"]


class TransposedWeight(iron.Graph):
    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        return MatMul.step(x[1:], self.w.T)


@pytest.mark.parametrize("device", DEVICES)
def test_a_transposed_weight_a_grid_reads_is_gathered_in_zero_padded_rows(device):
    """x[1:] @ w.T at 251 bfloat16 (before: DoesNotFit, no grid: gathered, x[1:] kept K and w.T
    N): the bands transposing w write their columns of a buffer of the compiler's whose rows lie
    padded with zeros to the grid's N (the last band a Scatter, which keeps them), so the grid
    pads N and M (`rows_written`); within bfloat16's 8 bits of the largest value."""
    rng = np.random.default_rng(16)
    x, w = ((rng.standard_normal(shape) / 4).astype(BF16) for shape in ((252, 251), (251, 251)))
    graph = TransposedWeight(w)
    body, want = graph.compile(x=x, device=from_name(device)), np.asarray(graph.reference(x=x), np.float64)
    np.testing.assert_allclose(np.asarray(body(x=x), np.float64), want, rtol=0, atol=2 ** -7 * max(1.0, np.abs(want).max()))
    grids = [(f.call, f.own, f.sides) for _, f in body.plan.rules if isinstance(f, PaddedGrid)]
    assert grids == [("MatMul#0", (251, 251, 251), (256, 251, 256))]
    p = placement(body, "through.view1")
    assert (p.shape, p.padded) == ((251, 251), (251, 256)) and mlir_ops_allowed(body)
    writes = [op for plan in body.plan.segments or (body.plan,) for op in plan.sequence if isinstance(op, Dma)
              and op.direction is Direction.S2MM and op.buffer == "outputs" and p.offset <= op.offset < p.offset + p.nwords]
    assert all(op.sizes[-2] == 251 and op.strides[-2:] == (128, 1) for op in writes)   # 251 rows at 256's stride
    assert sum(op.sizes[-1] for op in writes) == 128   # each column of words written once, the padding's too
