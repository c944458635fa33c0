"""Tests of the emulator's native kernel mode (iron.runtime.emulator.native) and, through it, of
the kernel library's C++ (iron/kernels/cc) run on the host.

Every kernel and supported element type runs on seeded random inputs and is compared with an
independent numpy formula written here (exact integers wrapped to the element width, float64
for floats) and with the library's own `Kernel.reference`: integers exactly; f32 with rtol 1e-5
(elementwise) or 1e-4 (reductions) and atol 1e-6; bf16 within one bf16 ulp. The conversions
(Cast on every dtype pair, Requantize, int8 MatVec/MatMul into int32) equal both bit for bit,
on random values and, with hypothesis, on any int32 or float32 bit pattern. Also: bf16 rounding
(nearest even, NaN, overflow), integer wrap-around, the build cache (reuse, one build under
concurrent loads, the cache location) and the error texts. The whole library is compiled once
per session into a temporary cache (the `library` fixture of tests/conftest.py). Does not test the
emulator that calls these kernels.
"""

import threading
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GGML
from gguf.quants import dequantize
from hypothesis import given, settings
from hypothesis import strategies as st

from iron.errors import BuildError, KernelTypeError, ToolchainMissing
from iron.kernels import LIBRARY
from iron.kernels.base import CC_DIR, library_sources
from iron.models.numpy_forward import rope as oracle_rope
from iron.runtime.emulator.native import NativeLibrary
from iron.toolchain.cache import cache_dir
from tests.quotes import quoted

DTYPES = {
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
}
INTEGERS = ("i8", "u8", "i16", "i32")
FLOATS = ("bf16", "f32")
ALL = INTEGERS + FLOATS
KERNELS = {kernel.name: kernel for kernel in LIBRARY}
SUPPORTED = {name: tuple(dt for dt in ALL if DTYPES[dt] in k.dtypes) for name, k in KERNELS.items()}  # as declared
N = 67
WIDER = [("i8", "i32"), ("u8", "i32"), ("i16", "i32"), ("bf16", "f32")]  # dtype= results of a dot product
ELEMENTWISE, REDUCTION = 1e-5, 1e-4  # f32 rtol
TINY = {"tiny.cc": 'extern "C" void tiny(int* out, int value) { *out = value + 1; }\n'}


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CXX", raising=False)
    return tmp_path / "cache"


def call(library, symbol, *args):
    """Call `symbol`, typing arrays as "ptr", ints as "i32" and floats as "f32"."""
    kinds = {np.ndarray: "ptr", int: "i32", float: "f32"}
    library.call(symbol, args, [kinds[type(arg)] for arg in args])


def random_array(dt, shape, seed=7):
    """Integers over the element type's full range; floats standard normal."""
    rng = np.random.default_rng(seed)
    dtype = DTYPES[dt]
    if dt in INTEGERS:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def wide(array):
    """Exact Python integers, or float64."""
    return array.astype(object if array.dtype.kind in "iu" else np.float64)


def narrow(exact, dt):
    """`exact` in the element type: integers wrapped to its width, floats rounded to nearest."""
    dtype = DTYPES[dt]
    if dt in INTEGERS:
        modulus = 1 << (8 * dtype.itemsize)
        unsigned = np.asarray(exact, dtype=object) % modulus
        return unsigned.astype(np.uint64).astype(f"u{dtype.itemsize}").view(dtype)
    return np.asarray(exact).astype(dtype)


def bf16_order(array):
    """bfloat16 bits as integers that count ulps across zero (+0 and -0 both 0)."""
    bits = array.view(np.uint16).astype(np.int32)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def expect(actual, expected, dt, rtol=ELEMENTWISE):
    expected = narrow(expected, dt)
    if dt in INTEGERS:
        np.testing.assert_array_equal(actual, expected)
    elif dt == "f32":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=1e-6)
    else:
        ulps = np.abs(bf16_order(actual) - bf16_order(expected))
        assert ulps.max() <= 1, f"{ulps.max()} bf16 ulps apart:\n{actual}\n{expected}"


def cases(*kernels):
    """(kernel, element type) for every supported element type of each kernel."""
    return [(kernel, dt) for kernel in kernels for dt in SUPPORTED[kernel]]


def test_symbols_name_the_kernel_and_its_dtypes():
    assert [KERNELS["matvec"].symbol(DTYPES[dt]) for dt in ALL] == [f"matvec_{dt}" for dt in ALL]


def test_library_sources_are_the_files_of_kernels_cc():
    sources = library_sources()
    assert sorted(sources) == sorted({k.source_text()[0] for k in LIBRARY} | {"iron_kernel.h"})
    assert sources["add.cc"] == (CC_DIR / "add.cc").read_text()


@pytest.mark.parametrize("dt", SUPPORTED["copy"])
def test_copy(library, dt):
    x = random_array(dt, N)
    out = np.zeros_like(x)
    call(library, f"copy_{dt}", x, out, N)
    np.testing.assert_array_equal(out.view(f"u{x.itemsize}"), x.view(f"u{x.itemsize}"))
    expect(out, KERNELS["copy"].reference(x), dt)


@pytest.mark.parametrize("dt", SUPPORTED["strided"])
@pytest.mark.parametrize("pick", ["transpose", "step", "broadcast"])
def test_strided_gathers_a_view_bit_for_bit(library, dt, pick):
    """The C++ and compute() of Strided pick the same elements as numpy's view: x.T, x[1:, ::3]
    and a row broadcast (stride 0), x (6, 11)."""
    x = random_array(dt, (6, 11))
    view, offset, dims = {"transpose": (x.T, 0, [(11, 1), (6, 11)]), "step": (x[1:, ::3], 11, [(5, 11), (4, 3)]),
                          "broadcast": (np.broadcast_to(x[2], (3, 11)), 22, [(3, 0), (11, 1)])}[pick]
    dims = [(1, 0)] * (4 - len(dims)) + dims
    attrs = {**{f"n{d}": n for d, (n, _) in enumerate(dims)}, **{f"s{d}": st for d, (_, st) in enumerate(dims)}}
    out = np.zeros(view.size, x.dtype)
    call(library, f"strided_{dt}", x, out, x.size, view.size, offset, *attrs.values())
    np.testing.assert_array_equal(out.view(f"u{x.itemsize}"), np.ascontiguousarray(view).ravel().view(f"u{x.itemsize}"))
    computed = KERNELS["strided"].compute(x, offset=offset, shape=view.shape, **attrs)
    np.testing.assert_array_equal(computed.view(f"u{x.itemsize}"), np.ascontiguousarray(view).view(f"u{x.itemsize}"))


@pytest.mark.parametrize("dt", SUPPORTED["scatter"])
@pytest.mark.parametrize("pick", ["interior", "step", "transpose"])
def test_scatter_places_a_view_bit_for_bit_keeping_the_rest(library, dt, pick):
    """The C++ and compute() of Scatter write x into the same elements of a (6, 11) destination as
    numpy's assignment to a view (its interior, a step slice, a transpose), every other element
    kept."""
    dest, x = random_array(dt, (6, 11), seed=3), random_array(dt, 36, seed=4)
    want = dest.copy()
    view, offset, dims = {"interior": (want[1:-1, 1:-1], 12, [(4, 11), (9, 1)]),
                          "step": (want[1:, ::3], 11, [(5, 11), (4, 3)]),
                          "transpose": (want[:3].T, 0, [(11, 1), (3, 11)])}[pick]
    x = x[:view.size]
    view[...] = x.reshape(view.shape)
    dims = [(1, 0)] * (4 - len(dims)) + dims
    attrs = {**{f"n{d}": n for d, (n, _) in enumerate(dims)}, **{f"s{d}": st for d, (_, st) in enumerate(dims)}}
    out = dest.copy()
    call(library, f"scatter_{dt}", x, out, x.size, out.size, offset, *attrs.values())
    np.testing.assert_array_equal(out.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))
    computed = KERNELS["scatter"].compute(x, dest, offset=offset, shape=dest.shape, **attrs)
    np.testing.assert_array_equal(computed.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))


@pytest.mark.parametrize("dt", SUPPORTED["strided_rows"])
@pytest.mark.parametrize("pick", ["step", "words"])
def test_strided_rows_picks_each_row_by_the_pattern_bit_for_bit(library, dt, pick):
    """The C++ and compute() of StridedRows pick from each row of x (6, 12) as numpy does: a step
    slice x[:, 1::3], or each row's (3, 4) block transposed (a column of words made rows)."""
    x = random_array(dt, (6, 12))
    want, offset, dims = {"step": (x[:, 1::3], 1, [(4, 3)]),
                          "words": (x.reshape(6, 3, 4).transpose(0, 2, 1).reshape(6, 12), 0, [(4, 1), (3, 4)])}[pick]
    dims = [(1, 0)] * (4 - len(dims)) + dims
    attrs = {**{f"n{d}": n for d, (n, _) in enumerate(dims)}, **{f"s{d}": st for d, (_, st) in enumerate(dims)}}
    want = np.ascontiguousarray(want)
    out = np.zeros(want.shape, x.dtype)
    call(library, f"strided_rows_{dt}", x, out, 6, 12, want.shape[1], offset, *attrs.values())
    np.testing.assert_array_equal(out.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))
    computed = KERNELS["strided_rows"].compute(x, offset=offset, **attrs)
    np.testing.assert_array_equal(computed.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


@pytest.mark.parametrize("kernel, dt", cases(*BINARY))
def test_binary(library, kernel, dt):
    a, b = random_array(dt, N, seed=1), random_array(dt, N, seed=2)
    out = np.zeros_like(a)
    call(library, f"{kernel}_{dt}", a, b, out, N)
    expect(out, BINARY[kernel](wide(a), wide(b)), dt)
    expect(out, KERNELS[kernel].reference(a, b), dt)


UNARY = {
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "exp": np.exp,
}


@pytest.mark.parametrize("kernel, dt", cases(*UNARY))
def test_unary(library, kernel, dt):
    x = random_array(dt, N)
    out = np.zeros_like(x)
    call(library, f"{kernel}_{dt}", x, out, N)
    expect(out, UNARY[kernel](wide(x)), dt)
    expect(out, KERNELS[kernel].reference(x), dt)


@pytest.mark.parametrize("dt", SUPPORTED["scale"])
def test_scale(library, dt):
    x = random_array(dt, N)
    out = np.zeros_like(x)
    call(library, f"scale_{dt}", x, out, N, -1.75)
    if dt in INTEGERS:   # rounded to nearest even and saturated
        info = np.iinfo(DTYPES[dt])
        np.testing.assert_array_equal(out, np.clip(np.rint(x.astype(np.float64) * -1.75), info.min, info.max))
    else:
        expect(out, wide(x) * -1.75, dt)
    expect(out, KERNELS["scale"].reference(x, factor=-1.75), dt)


@pytest.mark.parametrize("dt", SUPPORTED["accumulate"])
def test_accumulate(library, dt):
    x, before = random_array(dt, N, seed=1), random_array(dt, N, seed=2)
    acc = before.copy()
    call(library, f"accumulate_{dt}", x, acc, N)
    expect(acc, wide(before) + wide(x), dt)
    expect(acc, KERNELS["accumulate"].reference(x, before), dt)


@pytest.mark.parametrize("dt", SUPPORTED["matvec"])
def test_matvec(library, dt):
    m, k = 5, 37
    w, x = random_array(dt, (m, k), seed=1), random_array(dt, k, seed=2)
    out = np.zeros(m, DTYPES[dt])
    call(library, f"matvec_{dt}", w, x, out, m, k)
    expect(out, wide(w) @ wide(x), dt, rtol=REDUCTION)
    expect(out, KERNELS["matvec"].reference(w, x), dt, rtol=REDUCTION)


@pytest.mark.parametrize("dt", SUPPORTED["matmul"])
def test_matmul(library, dt):
    m, k, n = 4, 9, 6
    a, b = random_array(dt, (m, k), seed=1), random_array(dt, (k, n), seed=2)
    out = np.zeros((m, n), DTYPES[dt])
    call(library, f"matmul_{dt}", a, b, out, m, k, n)
    expect(out, wide(a) @ wide(b), dt, rtol=REDUCTION)
    expect(out, KERNELS["matmul"].reference(a, b), dt, rtol=REDUCTION)


@pytest.mark.parametrize("dt, out", [(dt, dt) for dt in SUPPORTED["matmul_accumulate"]] + WIDER)
def test_matmul_accumulate_adds_the_product_to_its_destination(library, dt, out):
    m, k, n = 4, 9, 6
    a, b, before = random_array(dt, (m, k), seed=1), random_array(dt, (k, n), seed=2), random_array(out, (m, n), seed=3)
    symbol = "matmul_accumulate_" + (dt if out == dt else f"{dt}_{out}")
    acc = before.copy()
    call(library, symbol, a, b, acc, m, k, n)
    expect(acc, wide(before) + wide(a) @ wide(b), out, rtol=REDUCTION)
    expect(acc, KERNELS["matmul_accumulate"].reference(a, b, before, dtype=DTYPES[out]), out, rtol=REDUCTION)


@pytest.mark.parametrize("dt, out", [(dt, dt) for dt in INTEGERS + ("f32",)] + WIDER)
def test_matmul_accumulate_equals_matmul_then_accumulate_bit_for_bit(library, dt, out):
    """What a tiled matrix call did before it had MatMulAccumulate, in C++ and in numpy (a
    bfloat16 sum rounds once instead, so bf16 -> bf16 is left out)."""
    m, k, n = 5, 37, 3
    a, b, before = random_array(dt, (m, k), seed=4), random_array(dt, (k, n), seed=5), random_array(out, (m, n), seed=6)
    pair = "" if out == dt else f"_{out}"
    fused, product, summed = before.copy(), np.zeros((m, n), DTYPES[out]), before.copy()
    call(library, f"matmul_accumulate_{dt}{pair}", a, b, fused, m, k, n)
    call(library, f"matmul_{dt}{pair}", a, b, product, m, k, n)
    call(library, f"accumulate_{out}", product, summed, m * n)
    same_bits(fused, summed)
    numpy_fused = KERNELS["matmul_accumulate"].reference(a, b, before, dtype=DTYPES[out])
    numpy_pair = KERNELS["accumulate"].reference(KERNELS["matmul"].reference(a, b, dtype=DTYPES[out]), before)
    same_bits(numpy_fused, numpy_pair)


ROWS = 3  # the row kernels run on a batch of rows of N (Softmax: 16) elements


@pytest.mark.parametrize("dt", SUPPORTED["rmsnorm"])
def test_rmsnorm_of_each_row(library, dt):
    x, w = random_array(dt, (ROWS, N), seed=1), random_array(dt, N, seed=2)
    out = np.zeros_like(x)
    call(library, f"rmsnorm_{dt}", x, w, out, ROWS, N, 1e-5, N)
    exact_x, exact_w = wide(x), wide(w)
    expect(out, exact_x / np.sqrt(np.mean(exact_x**2, axis=1, keepdims=True) + 1e-5) * exact_w, dt, rtol=REDUCTION)
    expect(out, KERNELS["rmsnorm"].reference(x, w, eps=1e-5), dt, rtol=REDUCTION)
    expect(out[1], KERNELS["rmsnorm"].reference(x[1], w, eps=1e-5), dt, rtol=REDUCTION)


@pytest.mark.parametrize("dt", SUPPORTED["rmsnorm"])
def test_rmsnorm_of_the_first_length_elements_of_each_row(library, dt):
    """The mean of squares over the first `length` elements only, the rest of each row 0: rows
    laid out padded wider (pad_through_row_width) normalise as the user's rows."""
    x, w = random_array(dt, (ROWS, N), seed=1), random_array(dt, N, seed=2)
    out = np.full_like(x, 9)
    call(library, f"rmsnorm_{dt}", x, w, out, ROWS, N, 1e-5, 61)
    exact_x, exact_w = wide(x)[:, :61], wide(w)[:61]
    expected = exact_x / np.sqrt(np.mean(exact_x**2, axis=1, keepdims=True) + 1e-5) * exact_w
    expect(out[:, :61], expected, dt, rtol=REDUCTION)
    expect(out, KERNELS["rmsnorm"].reference(x, w, eps=1e-5, length=61), dt, rtol=REDUCTION)
    assert (out[:, 61:] == 0).all()


@pytest.mark.parametrize("length", [1, 11, 16])
@pytest.mark.parametrize("dt", SUPPORTED["softmax"])
def test_softmax_of_the_first_length_elements_of_each_row(library, dt, length):
    x = random_array(dt, (ROWS, 16)) * 3
    out = np.full_like(x, 9)
    call(library, f"softmax_{dt}", x, out, ROWS, 16, length)
    valid = np.exp(wide(x[:, :length]) - wide(x[:, :length]).max(axis=1, keepdims=True))
    expected = np.concatenate([valid / valid.sum(axis=1, keepdims=True), np.zeros((ROWS, 16 - length))], axis=1)
    expect(out, expected, dt, rtol=REDUCTION)
    expect(out, KERNELS["softmax"].reference(x, length=length), dt, rtol=REDUCTION)
    assert (out[:, length:] == 0).all()


@pytest.mark.parametrize("pos", [0, 1, 37, 255])
@pytest.mark.parametrize("dt", SUPPORTED["rope"])
def test_rope_turns_adjacent_pairs_as_the_smollm2_oracle_does(library, dt, pos):
    """float32: bit for bit with the numpy forward's rope (iron.models.numpy_forward); bfloat16:
    within one ulp of the reference rounded once."""
    x = random_array(dt, 3 * 64, seed=4)
    out = np.zeros_like(x)
    call(library, f"rope_{dt}", x, out, 3 * 64, pos, 64, 100000.0)
    reference = KERNELS["rope"].reference(x, pos=pos, head_dim=64, base=100000.0)
    if dt == "f32":
        np.testing.assert_array_equal(out, reference)
        np.testing.assert_array_equal(out, oracle_rope(x.reshape(3, 64), pos, 100000.0).reshape(-1))
    else:
        expect(out, reference.astype(np.float32), dt)


@pytest.mark.parametrize("dt", SUPPORTED["argmax_blocks"])
def test_max_and_argmax_blocks_give_the_argmax_of_a_row_cut_into_blocks(library, dt):
    x = random_array(dt, 4 * 16, seed=5)
    x[37] = x[53] = x.max() + 1   # a tie across blocks: the first wins, as np.argmax picks
    maxima, found = np.zeros(4, x.dtype), np.zeros(4, x.dtype)
    for b in range(4):
        one, index = np.zeros(1, x.dtype), np.zeros(1, np.int32)
        call(library, f"max_{dt}", x[b * 16:(b + 1) * 16].copy(), one, 1, 16)
        call(library, f"argmax_{dt}", x[b * 16:(b + 1) * 16].copy(), index, 1, 16, 16)
        maxima[b], found[b] = one[0], b * 16 + index[0]
        assert one[0] == KERNELS["max"].reference(x[b * 16:(b + 1) * 16])
    out = np.full(1, -1, np.int32)
    call(library, f"argmax_blocks_{dt}", maxima, found, out, 4)
    assert out[0] == int(KERNELS["argmax_blocks"].reference(maxima, found)) == int(np.argmax(wide(x))) == 37


@pytest.mark.parametrize("block_bytes, kind", [(20, GGML.Q4_1), (34, GGML.Q8_0)])
def test_dequant_expands_gguf_blocks_bit_for_bit(library, block_bytes, kind):
    """On random blocks whose float16 scales (and Q4_1 minima) take every kind of value: the C++,
    the kernel's numpy compute and gguf.quants.dequantize give the same float32 bits."""
    rows = np.random.default_rng(15).integers(0, 256, (16, 4 * block_bytes), dtype=np.uint8)
    blocks = rows.reshape(-1, block_bytes)
    special = np.array([0.0, -0.0, 6e-8, -65504, np.inf, -np.inf, np.nan], np.float16)
    blocks[:7, 0:2] = special.view(np.uint8).reshape(7, 2)
    blocks[7:14, 2:4] = special.view(np.uint8).reshape(7, 2)   # Q4_1's minimum, Q8_0's first codes
    out = np.zeros((16, 4 * 32), np.float32)
    call(library, "dequant_u8", rows, out, 16, 4 * block_bytes, 4 * 32, block_bytes)
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = dequantize(rows, kind)
        ours = KERNELS["dequant"].reference(rows, block_bytes=block_bytes)
    assert np.isnan(out).any() and np.isinf(out).any()
    assert np.array_equal(out.view(np.uint32), theirs.view(np.uint32))
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


@pytest.mark.parametrize("dt", SUPPORTED["argmax"])
def test_argmax_of_each_row(library, dt):
    x = random_array(dt, (ROWS, N))
    out = np.full(ROWS, -1, np.int32)
    call(library, f"argmax_{dt}", x, out, ROWS, N, N)
    assert out.tolist() == np.argmax(wide(x), axis=1).tolist() == KERNELS["argmax"].reference(x).tolist()
    assert int(KERNELS["argmax"].reference(x[2])) == out[2]


@pytest.mark.parametrize("dt", SUPPORTED["argmax"])
def test_argmax_of_the_first_length_elements_of_each_row(library, dt):
    """Larger elements past `length` (a row's padding) are never picked."""
    x = random_array(dt, (ROWS, N))
    x[:, 50:] = x.max()
    out = np.full(ROWS, -1, np.int32)
    call(library, f"argmax_{dt}", x, out, ROWS, N, 50)
    assert out.tolist() == np.argmax(wide(x[:, :50]), axis=1).tolist() == \
        KERNELS["argmax"].reference(x, length=50).tolist()
    assert (out < 50).all()


@pytest.mark.parametrize("dt", SUPPORTED["argmax"])
def test_argmax_picks_the_first_of_tied_maxima(library, dt):
    x = np.array([3, 1, 5, 2, 5, 5, 0], DTYPES[dt])
    out = np.full(1, -1, np.int32)
    call(library, f"argmax_{dt}", x, out, 1, 7, 7)
    assert out[0] == 2
    call(library, f"argmax_{dt}", x[:1].copy(), out, 1, 1, 1)
    assert out[0] == 0


@pytest.mark.parametrize("dt", FLOATS)
def test_argmax_and_max_take_the_first_nan_as_numpy_does(library, dt):
    # the C++ once skipped NaN (no comparison with it holds): Argmax gave 4, Max inf
    x = np.array([1, 2, 3, np.nan, np.inf, np.nan, 0], np.float32).astype(DTYPES[dt])
    index, largest, picked = np.full(2, -1, np.int32), np.zeros(2, x.dtype), np.full(1, -1, np.int32)
    rows = np.stack([x, np.roll(x, 4)])   # the second row starts with its NaN
    call(library, f"argmax_{dt}", rows, index, 2, 7, 7)
    call(library, f"max_{dt}", rows, largest, 2, 7)
    call(library, f"argmax_blocks_{dt}", x, np.arange(7).astype(x.dtype), picked, 7)
    assert index.tolist() == np.argmax(rows, axis=1).tolist() == KERNELS["argmax"].reference(rows).tolist() == [3, 0]
    with np.errstate(invalid="ignore"):   # numpy's bfloat16 max warns of the NaN it returns
        assert np.isnan(largest.astype(np.float32)).all() and np.isnan(KERNELS["max"].reference(rows).astype(np.float32)).all()
    assert picked[0] == int(KERNELS["argmax_blocks"].reference(x, np.arange(7).astype(x.dtype))) == 3


@pytest.mark.parametrize("dt, out", WIDER)
def test_matvec_and_matmul_into_a_wider_type(library, dt, out):
    m, k, n = 5, 37, 3
    w, x, b = random_array(dt, (m, k), seed=1), random_array(dt, k, seed=2), random_array(dt, (k, n), seed=3)
    got = np.zeros(m, DTYPES[out])
    call(library, f"matvec_{dt}_{out}", w, x, got, m, k)
    expect(got, wide(w) @ wide(x), out, rtol=REDUCTION)
    expect(got, KERNELS["matvec"].reference(w, x, dtype=DTYPES[out]), out, rtol=REDUCTION)
    product = np.zeros((m, n), DTYPES[out])
    call(library, f"matmul_{dt}_{out}", w, b, product, m, k, n)
    expect(product, wide(w) @ wide(b), out, rtol=REDUCTION)
    expect(product, KERNELS["matmul"].reference(w, b, dtype=DTYPES[out]), out, rtol=REDUCTION)


MIXED = [("u8", "i8"), ("i8", "u8")]   # a product of two dtypes (uint8 activations, int8 weights)


@pytest.mark.parametrize("da, db", MIXED)
def test_mixed_uint8_and_int8_products_sum_exactly_into_int32(library, da, db):
    """matvec, matmul and matmul_accumulate of uint8 x int8 (either way round): the exact integer
    sums, as their numpy references give them, over each dtype's full range."""
    m, k, n = 5, 37, 3
    a, x, b = random_array(da, (m, k), seed=1), random_array(db, k, seed=2), random_array(db, (k, n), seed=3)
    before = random_array("i32", (m, n), seed=4) // 4
    got, product, acc = np.zeros(m, np.int32), np.zeros((m, n), np.int32), before.copy()
    call(library, f"matvec_{da}_{db}_i32", a, x, got, m, k)
    call(library, f"matmul_{da}_{db}_i32", a, b, product, m, k, n)
    call(library, f"matmul_accumulate_{da}_{db}_i32", a, b, acc, m, k, n)
    expect(got, wide(a) @ wide(x), "i32")
    expect(product, wide(a) @ wide(b), "i32")
    expect(acc, wide(before) + wide(a) @ wide(b), "i32")
    np.testing.assert_array_equal(got, KERNELS["matvec"].reference(a, x, dtype=np.int32))
    np.testing.assert_array_equal(product, KERNELS["matmul"].reference(a, b, dtype=np.int32))
    np.testing.assert_array_equal(acc, KERNELS["matmul_accumulate"].reference(a, b, before, dtype=np.int32))


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(-128, 127)), min_size=1, max_size=64))
def test_uint8_times_int8_matvec_matches_the_exact_sum_on_any_values(library, pairs):
    w = np.array([[u for u, _ in pairs]], np.uint8)
    x = np.array([s for _, s in pairs], np.int8)
    got = np.zeros(1, np.int32)
    call(library, "matvec_u8_i8_i32", w, x, got, 1, len(pairs))
    assert int(got[0]) == sum(u * s for u, s in pairs) == int(KERNELS["matvec"].reference(w, x, dtype=np.int32)[0])


def test_int8_matvec_into_int32_keeps_what_int8_wraps(library):
    w, x = np.full((1, 12), 40, np.int8), np.full(12, 40, np.int8)  # 12 * 1600 = 19200
    wrapped, exact = np.zeros(1, np.int8), np.zeros(1, np.int32)
    call(library, "matvec_i8", w, x, wrapped, 1, 12)
    call(library, "matvec_i8_i32", w, x, exact, 1, 12)
    assert (int(wrapped[0]), int(exact[0])) == (0, 19200)


CASTS = [(a, b) for a in INTEGERS for b in (*INTEGERS, *FLOATS) if a != b] + [("f32", "bf16"), ("bf16", "f32")]
CASTS += [(a, b) for a in FLOATS for b in INTEGERS]


def converted(x, dt, out):
    """Independently: to integers, Python ints (a float rounded by Python's round(), ties to
    even; NaN 0) clamped to out's range; an integer to float32 through float64 (exact for every
    int32) rounded once, to bfloat16 through that float32 (as ml_dtypes converts); float32 to
    bfloat16 rounded once."""
    if out in INTEGERS:
        info = np.iinfo(DTYPES[out])
        whole = [int(v) if dt in INTEGERS else 0 if np.isnan(v) else info.min if v < info.min else
                 info.max if v > info.max else round(float(v)) for v in x]
        return np.array([min(max(v, info.min), info.max) for v in whole], DTYPES[out])
    if dt in INTEGERS:
        return x.astype(np.float64).astype(np.float32).astype(DTYPES[out])
    return x.astype(np.float64).astype(DTYPES[out])


def same_bits(a, b):
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@pytest.mark.parametrize("dt, out", CASTS)
def test_cast_every_pair_bit_for_bit(library, dt, out):
    x = random_array(dt, N)
    x = x if dt in INTEGERS else (x.astype(np.float32) * 1e3).astype(DTYPES[dt])  # f32 -> bf16 rounds
    got = np.zeros(N, DTYPES[out])
    call(library, f"cast_{dt}_{out}", x, got, N)
    same_bits(got, converted(x, dt, out))
    same_bits(got, KERNELS["cast"].reference(x, dtype=DTYPES[out]))


def cast_f32_bits(library, bits):
    x = np.array(bits, np.uint32).view(np.float32)
    got = np.zeros(len(x), DTYPES["bf16"])
    call(library, "cast_f32_bf16", x, got, len(x))
    return got


def test_cast_to_bf16_rounds_ties_to_even_and_keeps_nan_signs(library):
    got = cast_f32_bits(library, [0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F800001, 0xFF800001, 0x00008000])
    assert [hex(v) for v in got.view(np.uint16)] == ["0x3f80", "0x3f82", "0x3f81", "0x7f80", "0x7fc0", "0xffc0", "0x0"]


@settings(max_examples=200)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_cast_f32_to_bf16_matches_numpy_on_any_bit_pattern(library, bits):
    with np.errstate(invalid="ignore"):
        expected = np.array(bits, np.uint32).view(np.float32).astype(DTYPES["bf16"])
    same_bits(cast_f32_bits(library, bits), expected)


INT32 = st.integers(-(2**31), 2**31 - 1)


def test_cast_of_floats_to_integers_rounds_ties_to_even_saturates_and_takes_nan_to_zero(library):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 126.5, 127.5, -128.5, -129.0, 3e9, -3e9,
                  2147483520.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    want = {"i8": [0, 2, 2, 0, -2, -2, 2, 126, 127, -128, -128, 127, -128, 127, 127, -128, 0, 0],
            "i32": [0, 2, 2, 0, -2, -2, 2, 126, 128, -128, -129, 2147483647, -2147483648, 2147483520,
                    2147483647, -2147483648, 0, 0]}
    for out, values in want.items():
        got = np.zeros(len(x), DTYPES[out])
        call(library, f"cast_f32_{out}", x, got, len(x))
        assert got.tolist() == values
        with np.errstate(invalid="ignore"):
            assert KERNELS["cast"].reference(x, dtype=DTYPES[out]).tolist() == values


def test_cast_of_integers_to_bfloat16_rounds_through_float32_as_numpy(library):
    # 2**24 + 2**16 + 1 is nearer 2**24 + 2**17, but float32 first rounds it to the tie 2**24 + 2**16
    x = np.array([1, -3, 255, 257, 2**24 + 2**16 + 1, 2**31 - 1, -(2**31)], np.int32)
    got = np.zeros(len(x), DTYPES["bf16"])
    call(library, "cast_i32_bf16", x, got, len(x))
    assert got.astype(np.float64).tolist() == [1, -3, 255, 256, 2**24, 2**31, -(2**31)]
    same_bits(got, x.astype(DTYPES["bf16"]))
    same_bits(got, KERNELS["cast"].reference(x, dtype=DTYPES["bf16"]))


@settings(max_examples=200)
@given(st.lists(INT32, min_size=1, max_size=64), st.sampled_from([o for o in (*INTEGERS, *FLOATS) if o != "i32"]))
def test_cast_from_int32_matches_numpy_on_any_value(library, values, out):
    x = np.array(values, np.int32)
    got = np.zeros(len(x), DTYPES[out])
    call(library, f"cast_i32_{out}", x, got, len(x))
    same_bits(got, converted(x, "i32", out))
    same_bits(got, KERNELS["cast"].reference(x, dtype=DTYPES[out]))


def requantized(x, scale, shift, out, zero_point=0):
    """Independently: x * scale / 2**shift as an exact fraction, rounded half to even by Python's
    round(), plus the zero point, clamped to out's range."""
    info = np.iinfo(DTYPES[out])
    exact = [round(Fraction(int(v) * scale, 2**shift)) + zero_point for v in x]
    return np.array([min(max(v, info.min), info.max) for v in exact], DTYPES[out])


def requantize(library, x, scale, shift, out, zero_point=0):
    got = np.zeros(len(x), DTYPES[out])
    symbol = "requantize_i32" if out == "i8" else f"requantize_i32_{out}"
    call(library, symbol, x, got, len(x), scale, shift, zero_point)
    return got


def test_requantize_rounds_half_to_even_and_saturates(library):
    x = np.array([5, 6, 7, -5, -6, -7, 2**31 - 1, -(2**31), 3, -3], np.int32)
    got = requantize(library, x, 1, 1, "i8")  # 2.5 3 3.5 -2.5 -3 -3.5: ties go to the even value
    np.testing.assert_array_equal(got, [2, 3, 4, -2, -3, -4, 127, -128, 2, -2])
    np.testing.assert_array_equal(requantize(library, x, 1, 0, "i16")[:6], [5, 6, 7, -5, -6, -7])


def test_requantize_to_uint8_clamps_negatives_to_0_and_adds_the_zero_point_before_clamping(library):
    x = np.array([-40, -2, 0, 3, 200, 1000, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(requantize(library, x, 1, 1, "u8"), [0, 0, 0, 2, 100, 255, 255])
    np.testing.assert_array_equal(requantize(library, x, 1, 1, "u8", zero_point=128), [108, 127, 128, 130, 228, 255, 255])
    np.testing.assert_array_equal(requantize(library, x, 1, 1, "i8", zero_point=-10), [-30, -11, -10, -8, 90, 127, 127])
    np.testing.assert_array_equal(KERNELS["requantize"].reference(x, dtype=np.uint8, shift=1, zero_point=128),
                                  [108, 127, 128, 130, 228, 255, 255])


@settings(max_examples=200)
@given(st.lists(INT32, min_size=1, max_size=64), INT32, st.integers(0, 62), st.sampled_from(["i8", "u8", "i16"]), INT32)
def test_requantize_matches_exact_rounding_on_any_value(library, values, scale, shift, out, zero_point):
    x = np.array(values, np.int32)
    got = requantize(library, x, scale, shift, out, zero_point)
    np.testing.assert_array_equal(got, requantized(x, scale, shift, out, zero_point))
    reference = KERNELS["requantize"].reference(x, dtype=DTYPES[out], shift=shift, scale=scale, zero_point=zero_point)
    np.testing.assert_array_equal(got, reference)


def test_bf16_results_round_to_nearest_even(library):
    def add(a, b):
        a, b = (np.array(v, ml_dtypes.bfloat16) for v in (a, b))
        out = np.zeros_like(a)
        call(library, "add_bf16", a, b, out, len(a))
        return out

    one, half_ulp = 1.0, 2.0**-8  # bf16 keeps 7 fraction bits: 1 + 2**-7 is 1's next value
    largest = 2.0**127 * (2 - 2**-7)  # the largest finite bf16; half its ulp is 2**119
    ties = add([one, one + 2**-7, -one, largest], [half_ulp, half_ulp, -half_ulp, 2.0**119])
    expected = [one, one + 2**-6, -one, np.inf]  # down to even, up to even, negative, overflow
    np.testing.assert_array_equal(ties.astype(np.float32), np.array(expected, np.float32))
    above_tie = add([one], [half_ulp + 2.0**-15])
    assert above_tie[0] == one + 2**-7
    nan = add([np.nan, np.inf], [one, -np.inf])
    assert np.isnan(nan.astype(np.float32)).all()


def test_integer_kernels_wrap_around(library):
    a = np.array([127, -128, 100], np.int8)
    out = np.zeros_like(a)
    call(library, "add_i8", a, np.array([1, -1, 100], np.int8), out, 3)
    np.testing.assert_array_equal(out, [-128, 127, -56])
    big = np.array([2**31 - 1, -(2**31)], np.int32)
    call(library, "mul_i32", big, big, product := np.zeros_like(big), 2)
    np.testing.assert_array_equal(product, [1, 0])
    w = np.full((1, 4), 2**31 - 1, np.int32)  # the dot product exceeds int64 before wrapping
    call(library, "matvec_i32", w, w[0].copy(), dot := np.zeros(1, np.int32), 1, 4)
    assert dot[0] == 4


def test_call_accepts_read_only_arrays_and_numpy_scalars(library):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    x.setflags(write=False)
    out = np.zeros(3, np.float32)
    library.call("scale_f32", [x, out, np.int64(3), np.float32(0.5)], ["ptr", "ptr", "i32", "f32"])
    np.testing.assert_array_equal(out, [0.5, -1.0, 1.5])


def test_call_refuses_a_non_contiguous_array(library):
    x = np.zeros(8, np.float32)[::2]
    with pytest.raises(KernelTypeError) as raised:
        library.call("copy_f32", [x, np.zeros(4, np.float32), 4], ["ptr", "ptr", "i32"])
    quoted(raised.value, "copy_f32", "non-contiguous", "argument 0", "strides (8,)", "np.ascontiguousarray")


def test_call_refuses_an_unknown_symbol(library):
    with pytest.raises(KernelTypeError) as raised:
        call(library, "tanh_i8", np.zeros(1, np.int8), np.zeros(1, np.int8), 1)
    quoted(raised.value, str(library.path), "'tanh_i8'", 'extern "C" void tanh_i8(...)')


def test_call_refuses_an_unknown_argument_type(library):
    with pytest.raises(KernelTypeError) as raised:
        library.call("copy_f32", [np.zeros(1, np.float32)] * 2 + [1], ["ptr", "ptr", "i64"])
    quoted(raised.value, "copy_f32", "['i64']", "['f32', 'i32', 'ptr']")


def test_load_builds_once_into_the_native_cache_and_reuses_it(fresh_cache, tmp_path, monkeypatch):
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "counting-g++"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{log}"\nexec g++ "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    loaded = []
    threads = [
        threading.Thread(target=lambda: loaded.append(NativeLibrary.load(TINY))) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    again = NativeLibrary.load(TINY)
    assert log.read_text() == "run\n"
    assert len(loaded) == 2 and {lib.path for lib in loaded} == {again.path}   # neither thread refused
    assert again.path.parent.parent == fresh_cache
    assert len(again.path.parent.name) == 64
    assert sorted(p.name for p in fresh_cache.iterdir()) == [again.path.parent.name]
    assert (again.path.parent / "tiny.cc").read_text() == TINY["tiny.cc"]
    out = np.zeros(1, np.int32)
    again.call("tiny", [out, 41], ["ptr", "i32"])
    assert out[0] == 42


def test_cache_lives_under_the_iron_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("IRON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "iron"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "iron"


def test_load_without_a_compiler_names_it_and_how_to_install_it(fresh_cache, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++-13")
    with pytest.raises(ToolchainMissing) as raised:
        NativeLibrary.load(TINY)
    quoted(raised.value, "'/nonexistent/g++-13'", "$CXX", "`apt-get install g++`")


def test_load_of_broken_source_reports_the_compiler_errors(fresh_cache):
    broken = {"broken.cc": 'extern "C" void broken(int* out) { *out = missing; }\n'}
    with pytest.raises(BuildError) as raised:
        NativeLibrary.load(broken)
    message = str(raised.value)
    (entry,) = fresh_cache.iterdir()
    assert entry.name.endswith(".building")  # a failed build is never sealed
    flags = "-std=c++20 -O2 -Wall -Werror -shared -fPIC"
    assert message.startswith(
        f"Compiling the native kernels broken.cc failed (exit 1) in {entry}:\n"
        f"$ g++ {flags} -o kernels.so broken.cc\n"
    )
    stderr = message.split("\n", 2)[2].rsplit("\n", 1)[0]  # g++'s own text, locale-dependent
    assert "error:" in stderr and "missing" in stderr
    assert message.endswith(
        "\nFix the C++ errors above in the kernel sources, then load them again."
    )
    assert not (entry / "kernels.so").exists()
