"""Every design of the test suite gives the same results compiled on the emulator as through
reference() (exactly for integers, a stated tolerance for floats), on npu2 and npu1; and random
small graphs (hypothesis) agree too."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron import Scratchpad
from iron.ir import MemoryKind
from iron.kernels import Add, Argmax, Copy, MatVec, Mul, ReLU, Softmax, Sub
from tests.compiler import designs

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


def agree(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:  # the emulator runs the same kernel semantics as the reference: float32 to 1e-6, bf16 to 1 ulp
        tol = 1e-2 if got.dtype == BF16 else 1e-6
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


CASES = [
    ("add_one", lambda: designs.add_one(1024), {}),
    ("accumulate_at", lambda: designs.accumulate_at(64, 4), {"pos": 2}),
    ("mlp_layer_f32", lambda: designs.mlp_layer(64, np.float32), {}),
    ("mlp_layer_bf16", lambda: designs.mlp_layer(64, BF16), {}),
    ("mlp_4x256", lambda: designs.mlp(4, 256), {}),
    ("big_matvec", lambda: designs.big_matvec(512, 256), {}),
]


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("name, make, values", CASES, ids=[c[0] for c in CASES])
def test_design_equals_reference(name, make, values, device):
    compiled_graph, reference_graph = make(), make()
    tensors = designs.example(compiled_graph)
    c = compiled_graph.compile(device=device, **{k: (a.shape, a.dtype) for k, a in tensors.items()})
    for _ in range(2):  # twice: states and cores persist across calls
        got = c(*tensors.values(), **values)
        want = reference_graph.reference(*tensors.values(), **values)
        if want is not None:
            agree(got, want)
    for d in reference_graph.trace(**{k: (a.shape, a.dtype) for k, a in tensors.items()}).declarations:
        if d.kind is MemoryKind.STATE:
            agree(c.read(d.name), reference_graph.read(d.name))


OPS = ["add", "sub", "mul", "relu", "copy"]


@settings(max_examples=15)
@given(ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=5), n=st.sampled_from([4, 16, 64]),
       matvec=st.booleans(), seed=st.integers(0, 2**31))
def test_random_small_graphs_agree_with_reference(ops, n, matvec, seed):
    rng = np.random.default_rng(seed)
    w = rng.integers(-3, 4, (n, n)).astype(np.int32)

    class Random(iron.Graph):
        def __init__(self):
            self.w = iron.param(w)
            self.seen = iron.state((4, n), np.int32, name="seen")

        def body(self, x, y, *, row: Scratchpad[np.int32]):
            for op in ops:
                if op in ("add", "sub", "mul"):
                    x = {"add": Add, "sub": Sub, "mul": Mul}[op].step(x, y)
                else:
                    x = {"relu": ReLU, "copy": Copy}[op].step(x)
            if matvec:
                x = MatVec.step(self.w, x)
            Copy.step(x, out=self.seen[row])
            return x, Argmax.step(x)

    x, y = (rng.integers(-50, 50, n).astype(np.int32) for _ in range(2))
    a, b = Random(), Random()
    got = a(x, y, row=1)
    want = b.reference(x, y, row=1)
    for g_, w_ in zip(got, want):
        agree(g_, w_)
    agree(a.compile().read("seen"), b.read("seen"))


def test_softmax_with_a_per_call_length_on_the_emulator():
    class Attend(iron.Graph):
        def body(self, x, *, n: Scratchpad[np.int32]):
            return Softmax.step(x, length=n + 1)

    x = np.linspace(-2, 2, 32).astype(np.float32)
    a, b = Attend(), Attend()
    for n in (0, 7, 31):
        agree(a(x, n=n), b.reference(x, n=n))
