"""Attention (iron/kernels/attention.py): its C++ run natively against an independent two-pass
softmax in float64 (float32 within rtol 1e-4, bfloat16 within 2 ulps of it rounded) and against
the kernel's numpy reference (its online softmax: float32 within rtol 1e-5), for multi-head and
grouped-query heads, at every valid length and, with hypothesis, on any scores' scale; a decoder
step writing its key and value rows into cache states and attending over pos + 1 of them in one
call, compiled for npu2 and npu1 and run call after call on the emulator in both kernel modes,
against reference() and the per-head chain (MatVec, Scale, Softmax, MatVec) it replaces; a
prefill of several queries per head (mlir-aie's mha example in small) compiled likewise; the
refusals."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron import Scratchpad
from iron.errors import IndexOutOfRange, KernelTypeError
from iron.kernels import Attention, Copy, MatVec, Scale, Softmax
from tests.runtime.test_native_kernels import DTYPES, FLOATS, bf16_order, call

pytestmark = pytest.mark.usefixtures("on_emulator")


def two_pass(q, keys, values, length):
    """softmax(K q / sqrt(d)) V per query of each head in float64, the maximum taken first."""
    q, keys, values = (a.astype(np.float64) for a in (q, keys, values))
    heads, d = q.shape[0], q.shape[-1]
    group = heads // keys.shape[0]
    queries = q.reshape(heads, -1, d)
    out = np.zeros(queries.shape)
    for h in range(heads):
        for r in range(queries.shape[1]):
            s = keys[h // group, :length] @ queries[h, r] / np.sqrt(d)
            p = np.exp(s - s.max())
            out[h, r] = (p / p.sum()) @ values[h // group, :length]
    return out.reshape(q.shape)


def case(dt, heads, kv_heads, n=16, d=8, seed=0, spread=1.0, queries=None):
    rng = np.random.default_rng(seed)
    q_shape = (heads, d) if queries is None else (heads, queries, d)
    q, keys, values = (rng.standard_normal(s) * spread for s in (q_shape, (kv_heads, n, d), (kv_heads, n, d)))
    return tuple(a.astype(np.float32).astype(DTYPES[dt]) for a in (q, keys, values))


def native(library, q, keys, values, length):
    out = np.zeros_like(q)
    (kv_heads, n, d), queries = keys.shape, q.shape[1] if q.ndim == 3 else 1
    call(library, f"attention_{'bf16' if q.dtype != np.float32 else 'f32'}", q, keys, values, out, q.shape[0],
         queries, kv_heads, n, d, length)
    return out


def near(got, want, dt, rtol):
    if dt == "f32":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)
    else:
        ulps = np.abs(bf16_order(got) - bf16_order(np.asarray(want, np.float32).astype(got.dtype)))
        assert ulps.max() <= 2, ulps.max()


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("heads, kv_heads", [(3, 3), (6, 2), (4, 1)])
@pytest.mark.parametrize("length", [1, 5, 16])
def test_attention_in_cpp_equals_the_two_pass_softmax_and_the_reference(library, dt, heads, kv_heads, length):
    q, keys, values = case(dt, heads, kv_heads)
    keys[:, length:] = values[:, length:] = 1e4   # rows past length take no part
    got = native(library, q, keys, values, length)
    near(got, two_pass(q, keys, values, length), dt, 1e-4)
    near(got, Attention.reference(q, keys, values, length=length), dt, 1e-5)


@pytest.mark.parametrize("dt", FLOATS)
def test_several_queries_per_head_each_attend_over_the_same_rows(library, dt):
    """q (heads, s, d): a prefill of s queries per head, no causal mask, as mlir-aie's mha example
    computes (torch's scaled_dot_product_attention, is_causal=False)."""
    q, keys, values = case(dt, 4, 2, n=12, queries=5, seed=3)
    got = native(library, q, keys, values, 12)
    near(got, two_pass(q, keys, values, 12), dt, 1e-4)
    near(got, Attention.reference(q, keys, values, length=12), dt, 1e-5)
    near(got[:, 2], Attention.reference(np.ascontiguousarray(q[:, 2]), keys, values, length=12), dt, 1e-5)


@pytest.mark.parametrize("d", [64, 65, 150])
def test_a_head_wider_than_the_cpps_chunk_runs_the_recurrence_per_chunk_alike(library, d):
    """attention.cc keeps 64 elements of a head's running output on the stack at a time: heads of
    65 and 150 run it over two and three chunks, each seeing the same running maximum and sum."""
    q, keys, values = case("f32", 4, 2, n=9, d=d, seed=d)
    got = native(library, q, keys, values, 7)
    np.testing.assert_allclose(got, two_pass(q, keys, values, 7), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, Attention.reference(q, keys, values, length=7), rtol=1e-5, atol=1e-6)


@settings(max_examples=40)
@given(st.integers(1, 16), st.floats(0.01, 30.0), st.integers(0, 2**32 - 1))
def test_the_online_softmax_keeps_large_scores_finite(library, length, spread, seed):
    """Scores up to thousands: a softmax without the running maximum would overflow exp."""
    q, keys, values = case("f32", 4, 2, seed=seed, spread=spread)
    got = native(library, q, keys, values, length)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, two_pass(q, keys, values, length), rtol=2e-3, atol=1e-4 * spread)
    np.testing.assert_allclose(got, Attention.reference(q, keys, values, length=length), rtol=2e-3, atol=1e-4 * spread)


HEADS, KV, D, CONTEXT = 4, 2, 8, 8


class DecoderAttention(iron.Graph):
    """One decoder step's attention: k and v (kv_heads, d) written as row `pos` of the caches,
    then every query head attends over rows 0..pos, grouped two query heads per key/value head,
    in one call."""

    def __init__(self):
        self.keys = iron.state((KV, CONTEXT, D), np.float32, name="keys")
        self.values = iron.state((KV, CONTEXT, D), np.float32, name="values")

    def body(self, q, k, v, *, pos: Scratchpad[np.int32]):
        Copy.step(k, out=self.keys[:, pos])
        Copy.step(v, out=self.values[:, pos])
        return Attention.step(q, self.keys, self.values, length=pos + 1)


def chain(q, keys, values, pos):
    """The per-head chain the kernel replaces (as iron/models/smollm2_graph.py attends): MatVec of the
    head's keys, Scale, Softmax over pos + 1, MatVec of its values transposed."""
    heads = []
    for h in range(HEADS):
        k, v = keys[h // (HEADS // KV)], values[h // (HEADS // KV)]
        scores = Scale.reference(MatVec.reference(k, q[h]), factor=1 / np.sqrt(D))
        heads.append(MatVec.reference(np.ascontiguousarray(v.T), Softmax.reference(scores, length=pos + 1)))
    return np.stack(heads)


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_decoder_steps_attention_over_its_cache_is_one_call(device, monkeypatch):
    rng = np.random.default_rng(5)
    steps = [tuple(rng.standard_normal(s).astype(np.float32) for s in ((HEADS, D), (KV, D), (KV, D)))
             for _ in range(4)]
    reference, keys, values = DecoderAttention(), np.zeros((KV, CONTEXT, D), np.float32), np.zeros((KV, CONTEXT, D), np.float32)
    wants = []
    for pos, (q, k, v) in enumerate(steps):
        wants.append(reference.reference(q, k, v, pos=pos))
        keys[:, pos], values[:, pos] = k, v
        np.testing.assert_allclose(wants[-1], chain(q, keys, values, pos), rtol=1e-5, atol=1e-6)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        compiled = DecoderAttention().compile(q=steps[0][0], k=steps[0][1], v=steps[0][2], device=device)
        # the two state writes close their groups; every head's attention is the one call after them
        assert compiled.plan.groups == (("g0", ("Copy#0",)), ("g1", ("Copy#1",)), ("g2", ("Attention#2",)))
        assert "Attention#2" in compiled.describe() and "Attention#2" in compiled.svg()
        for pos, ((q, k, v), want) in enumerate(zip(steps, wants)):
            np.testing.assert_allclose(compiled(q, k, v, pos=pos), want, rtol=1e-5, atol=1e-6)
        with pytest.raises(IndexOutOfRange):
            compiled(*steps[0], pos=CONTEXT)


class Prefill(iron.Graph):
    """mlir-aie's mha example in small: bfloat16 Q (heads, s, d), K and V (kv_heads, n, d), every
    query over every row (length n), grouped-query heads."""

    def body(self, q, k, v):
        return Attention.step(q, k, v, length=k.shape[1])


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_grouped_query_prefill_in_bfloat16_compiles_and_runs_as_its_reference(device, monkeypatch):
    q, k, v = case("bf16", 4, 2, n=16, d=16, queries=8, seed=11, spread=2.0)
    want = Prefill().reference(q, k, v)
    near(want, two_pass(q, k, v, 16), "bf16", 1e-4)
    compiled = Prefill().compile(q=q, k=k, v=v, device=device)
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", "numpy")
    np.testing.assert_array_equal(compiled(q, k, v).view(np.uint16), want.view(np.uint16))
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", "native")
    near(compiled(q, k, v), want, "bf16", 1e-5)


@pytest.mark.parametrize("shapes, length, text", [
    (((4, 8), (3, 8, 8), (3, 8, 8)), 2,
     "Attention needs q (heads, d) or (heads, s, d), keys and values (kv_heads, n, d), heads a multiple of "
     "kv_heads; got q (4, 8), k (3, 8, 8), v (3, 8, 8)."),
    (((2, 8), (2, 8, 8), (2, 8, 8)), 9, "Attention needs 1 <= length <= 8, not 9; got q (2, 8), k (2, 8, 8), v (2, 8, 8)."),
])
def test_a_wrong_shape_or_length_is_refused(shapes, length, text):
    class Wrong(iron.Graph):
        def body(self, q, k, v):
            return Attention.step(q, k, v, length=length)

    with pytest.raises(KernelTypeError) as raised:
        Wrong().reference(*(np.ones(s, np.float32) for s in shapes))
    assert str(raised.value) == text
