"""Per-call attributes on elementwise calls that stream over many tiles (`stream_elementwise`):
a user kernel's own per-call attribute, given as a scratchpad value or carried from call to
call, and a library constant form's per-call value, reach every core of the stream; each call's
result, over all the blocks of all the cores, equals reference() on npu2 and npu1 (numpy and,
on npu2, the user's C++ built for the host)."""
import numpy as np
import pytest

import iron
from iron import Carried, Scratchpad
from iron.kernels import Add
from iron.plan.rules import Rule

pytestmark = pytest.mark.usefixtures("on_emulator")


class Ceiling(iron.Kernel):
    """out = min(x, hi) for a per-call `hi`: a user kernel's per-call attribute."""

    name = "ceiling_test"
    index_map = "i->i"
    dtypes = frozenset({np.dtype(np.int32)})
    attrs = {"hi": iron.Kernel.REQUIRED}
    scalar_attrs = ("hi",)
    c_attrs = (("hi", "i32"),)
    source = """#include <cstdint>
extern "C" void ceiling_test_i32(const int32_t* x, int32_t* out, int32_t n, int32_t hi) {
  for (int32_t i = 0; i < n; ++i) out[i] = x[i] < hi ? x[i] : hi;
}
"""

    @staticmethod
    def compute(x, hi):
        return np.minimum(x, np.int32(hi))


class Given(iron.Graph):
    def body(self, x, *, hi: Scratchpad[np.int32]):
        return Add.step(Ceiling.step(x, hi=hi), hi)   # the user's attribute, then the library's per-call constant


class Rising(iron.Graph):
    def body(self, x, *, hi: Carried[np.int32]):
        return Ceiling.step(x, hi=hi), iron.carry(hi=hi + 1000)


X = np.arange(256 * 1024, dtype=np.int32).reshape(256, 1024) - 100_000
RUNS = [("npu2", "numpy"), ("npu2", "native"), ("npu1", "numpy")]


def streamed(compiled) -> str:
    return next(text for rule, text in compiled.plan.rules if rule is Rule.STREAM_ELEMENTWISE)


@pytest.mark.parametrize("device, kernels", RUNS)
def test_a_scratchpad_attribute_reaches_every_core_of_a_stream(monkeypatch, device, kernels):
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", kernels)
    graph = Given()
    compiled = graph.compile(X, device=device)
    text = streamed(compiled)
    assert f"over {X.size} elements" in text and "hi=hi a per-call word every core receives" in text
    assert "value=hi a per-call word every core receives" in text
    for hi in (5, -7, 150_000):
        got = compiled(X, hi=hi)
        np.testing.assert_array_equal(got, graph.reference(X, hi=hi))
        np.testing.assert_array_equal(got, np.minimum(X, hi) + hi)


@pytest.mark.parametrize("device, kernels", RUNS)
def test_a_carried_attribute_reaches_every_core_of_a_stream(monkeypatch, device, kernels):
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", kernels)
    graph = Rising()
    compiled = graph.compile(X, device=device)
    assert "hi=hi a per-call word every core receives" in streamed(compiled)
    hi = 0
    for _ in range(3):
        got, nxt = compiled(X, hi=hi)
        want, want_next = graph.reference(X, hi=hi)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.minimum(X, hi))
        assert int(nxt["hi"]) == int(want_next["hi"]) == hi + 1000
        hi = int(nxt["hi"])
