"""The reference path on real designs: multi-kernel graphs in float32 and bfloat16 against
hand-written numpy, states indexed by per-call values, naming, the function form, per-call
expressions, optional tensors, and random elementwise chains (hypothesis)."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron import Scratchpad
from iron.ir import MemoryKind
from iron.kernels import (
    Accumulate,
    Add,
    Copy,
    Exp,
    Mul,
    ReLU,
    Scale,
    SiLU,
    Sub,
)
from iron.models.designs import MLP, numpy_mlp
from tests.compiler.designs import AllKernels

BF16 = np.dtype(ml_dtypes.bfloat16)


class Histogram(iron.Graph):
    """Section 4: accumulate a row into a state at a Scratchpad position."""

    def __init__(self, rows, width):
        self.acc = iron.state((rows, width), np.int32, name="acc")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        Accumulate.step(x, out=self.acc[pos])


def test_accumulate_at_a_scratchpad_position_matches_numpy():
    g = Histogram(4, 8)
    rng = np.random.default_rng(0)
    expect = np.zeros((4, 8), np.int32)
    for _ in range(20):
        x = rng.integers(-100, 100, 8).astype(np.int32)
        pos = int(rng.integers(4))
        assert g.reference(x, pos=pos) is None
        expect[pos] += x
    np.testing.assert_array_equal(g.read("acc"), expect)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (BF16, 2e-2)])
def test_mlp_layer_float32_and_bfloat16_match_hand_written_numpy(dtype, rtol):
    mlp = MLP(64, 2, dtype=dtype, seed=3)
    x = np.random.default_rng(4).standard_normal(64).astype(dtype)
    out = mlp.reference(x)
    assert out.dtype == np.dtype(dtype)
    # numpy in float32; each bf16 kernel rounds its result once, so bf16 agrees to ~3 significant bits per op
    np.testing.assert_allclose(out.astype(np.float32), numpy_mlp(mlp, x.astype(np.float32)), rtol=rtol, atol=rtol)


def test_every_library_kernel_on_the_reference_path():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    m, k = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)

    outs = AllKernels(m, k).reference(a, b, n=9)
    e = np.exp(a[:10] - a[:10].max())
    expect = [a, a + b, a - b, a * b, a * 0.5, np.maximum(a, 0), a / (1 + np.exp(-a)), np.exp(a), m @ a, m @ k,
              a / np.sqrt(np.mean(a * a) + 1e-6) * b, np.concatenate([e / e.sum(), np.zeros(6)]), np.argmax(a)]
    assert len(outs) == len(expect)
    for got, want in zip(outs, expect):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert outs[-1].dtype == np.int32


def test_declarations_are_named_by_attribute_path():
    mlp = MLP(8, 2)
    program = mlp.trace(x=((8,), np.float32))
    assert [d.name for d in program.declarations] == ["layers.0.w", "layers.0.g", "layers.1.w", "layers.1.g"]
    assert [d.kind for d in program.declarations] == [MemoryKind.PARAM] * 4


def test_function_form_with_closed_over_weight_and_state():
    table = iron.weight(np.arange(20, dtype=np.int32).reshape(5, 4))
    seen = iron.state((5, 4), np.int32, name="seen")

    @iron.graph
    def lookup(*, row: Scratchpad[np.int32]):
        r = Copy.step(table[row])
        Copy.step(r, out=seen[row])
        return r

    np.testing.assert_array_equal(lookup.reference(row=3), [12, 13, 14, 15])
    np.testing.assert_array_equal(lookup.read("seen")[3], [12, 13, 14, 15])
    assert [d.name for d in lookup.trace().declarations] == ["seen", "table"]  # closure variables, by name


def test_per_call_expressions_min_max_floordiv_mod_and_column_views():
    class Cols(iron.Graph):
        def __init__(self):
            self.t = iron.weight(np.arange(24, dtype=np.int32).reshape(4, 6))
            self.s = iron.state((4, 6), np.int32, name="s")

        def body(self, *, i: Scratchpad[np.int32]):
            col = Copy.step(self.t[:, iron.min(i * 2, 5)])
            Copy.step(col, out=self.s[:, (i + 7) // 2 % 6])
            return Copy.step(self.t[iron.max(i - 10, 0) % 4, 1:4])

    g = Cols()
    np.testing.assert_array_equal(g.reference(i=2), [1, 2, 3])
    np.testing.assert_array_equal(g.read("s")[:, 4], np.arange(24).reshape(4, 6)[:, 4])
    g.reference(i=9)
    np.testing.assert_array_equal(g.read("s")[:, 2], np.arange(24).reshape(4, 6)[:, 5])


def test_an_optional_tensor_traces_the_none_branch_once_per_presence():
    class Bias(iron.Graph):
        def body(self, x, bias=None):
            return x if bias is None else Add.step(x, bias)

    g = Bias()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(g.reference(x), x)
    np.testing.assert_array_equal(g.reference(x, np.full(4, 2, np.float32)), np.full(4, 3, np.float32))
    assert len(g._iron.programs) == 2


def test_integer_kernels_wrap_around_like_the_device():
    class Wrap(iron.Graph):
        def body(self, a, b):
            return Add.step(a, b), Mul.step(a, b)

    a = np.array([120, -128], np.int8)
    s, p = Wrap().reference(a, np.array([10, -1], np.int8))
    np.testing.assert_array_equal(s, np.array([120 + 10 - 256, 127], np.int8))
    np.testing.assert_array_equal(p, np.array([(1200 + 128) % 256 - 128, -128], np.int8))


UNARY = {"relu": (ReLU, lambda x: np.maximum(x, 0)), "silu": (SiLU, lambda x: x / (1 + np.exp(-x))),
         "exp": (Exp, np.exp), "scale": (None, lambda x: x * np.float32(0.75))}
BINARY = {"add": (Add, np.add), "sub": (Sub, np.subtract), "mul": (Mul, np.multiply)}


@settings(max_examples=40)
@given(ops=st.lists(st.sampled_from(sorted(UNARY) + sorted(BINARY)), min_size=1, max_size=6),
       n=st.integers(1, 33), seed=st.integers(0, 2**31))
def test_random_elementwise_chains_match_numpy(ops, n, seed):
    rng = np.random.default_rng(seed)
    x0, y0 = (rng.uniform(-2, 2, n).astype(np.float32) for _ in range(2))

    @iron.graph
    def chain(x, y):
        for op in ops:
            if op in BINARY:
                x = BINARY[op][0].step(x, y)
            elif op == "scale":
                x = Scale.step(x, factor=0.75)
            else:
                x = UNARY[op][0].step(x)
        return x

    with np.errstate(over="ignore", invalid="ignore"):
        check_chain(chain, ops, x0, y0)


def check_chain(chain, ops, x0, y0):
    want = x0.copy()
    for op in ops:
        want = (BINARY[op][1](want, y0) if op in BINARY else UNARY[op][1](want)).astype(np.float32)
    got = chain.reference(x0, y0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # inf and nan where numpy has them
