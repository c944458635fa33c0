"""Every user error of the front end: its class and its exact text (names, values, the fix)."""

import numpy as np
import pytest

import iron
from iron import Carried, Scratchpad
from iron.kernels import Accumulate, Add, Argmax, Copy, MatVec, RMSNorm, Softmax


class Pos(iron.Graph):
    def body(self, node: Carried[np.int32]):
        return iron.carry(node=node)


class Ok(iron.Graph):
    def __init__(self):
        self.s = iron.state((4,), np.float32, name="s")

    def body(self, x):
        r = Copy.step(self.s)
        Copy.step(Add.step(r, x), out=self.s)
        return r


class NoAnn(iron.Graph):
    def body(self, *, node):
        return iron.carry(node=node)


class BadT(iron.Graph):
    def body(self, *, node: Carried[np.float32]):
        return iron.carry(node=node)


class NoCarry(iron.Graph):
    def __init__(self):
        self.t = iron.weight(np.arange(4, dtype=np.int32))

    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        return Copy.step(self.t[node])


class CarryFirst(iron.Graph):
    def __init__(self):
        self.t = iron.weight(np.arange(4, dtype=np.int32))

    def body(self, *, node: Carried[np.int32]):
        return iron.carry(node=node), Copy.step(self.t[node])


class Unknown(iron.Graph):
    def body(self, *, node: Carried[np.int32]):
        return iron.carry(node=node, nod=node)


class Missing(iron.Graph):
    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        return iron.carry(node=node)


class WrongShape(iron.Graph):
    def __init__(self):
        self.t = iron.weight(np.arange(8, dtype=np.int32).reshape(2, 4))

    def body(self, *, node: Carried[np.int32]):
        return iron.carry(node=Copy.step(self.t[node]))


class WrongDtype(iron.Graph):
    def __init__(self):
        self.t = iron.weight(np.arange(4, dtype=np.float32))

    def body(self, *, node: Carried[np.int32]):
        return iron.carry(node=Copy.step(self.t[node]))


class Bool(iron.Graph):
    def body(self, *, node: Carried[np.int32]):
        if node > 3:
            pass
        return iron.carry(node=node)


class Rng(iron.Graph):
    def body(self, *, steps: Carried[np.int32]):
        for _ in range(steps):
            pass
        return iron.carry(steps=steps)


class Idx(iron.Graph):
    def body(self, *, steps: Carried[np.int32]):
        [1, 2, 3][steps]
        return iron.carry(steps=steps)


class Dep(iron.Graph):
    def body(self, *, node: Carried[np.int32], pos: Scratchpad[np.int32]):
        return iron.carry(node=node + pos)


class Acc(iron.Graph):
    def __init__(self):
        self.acc = iron.state((4, 8), np.float32, name="acc")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        Accumulate.step(x, out=self.acc[pos])


class Haz(iron.Graph):
    def __init__(self):
        self.s = iron.state((4,), np.float32, name="s")

    def body(self, x, y):
        Copy.step(x, out=self.s)
        Copy.step(y, out=self.s)


class War(iron.Graph):
    def __init__(self):
        self.s = iron.state((4,), np.float32, name="s")

    def body(self, x):
        r = Copy.step(self.s)
        Copy.step(x, out=self.s)
        return r


class KM(iron.Graph):
    def __init__(self):
        self.w = iron.param(np.ones((4, 8), np.float32))

    def body(self, x):
        return MatVec.step(self.w, x)


class KD(iron.Graph):
    def body(self, x, y):
        return Add.step(x, y)


class KS(iron.Graph):
    def body(self, x):
        return Softmax.step(x)


class TraceNamed(iron.Graph):
    def body(self, x, *, trace: Scratchpad[np.int32]):
        return Copy.step(x)


CASES = [
    (
        "TraceNamed().reference(np.ones(4, np.float32), trace=1)",
        iron.errors.SignatureError,
        "parameter 'trace' of TraceNamed.body has a name iron's calls take for themselves (`trace=path` writes the call's timeline): rename the parameter.",
    ),
    (
        "Pos().reference(node=1)",
        iron.errors.SignatureError,
        "parameter 'node' of Pos.body is annotated Carried[int32] but is positional: per-call values are keyword-only; put it after `*` (def body(self, *, node: Carried[int32])).",
    ),
    (
        "NoAnn().reference(node=1)",
        iron.errors.SignatureError,
        "keyword-only parameter 'node' of NoAnn.body has no annotation: annotate it Carried[np.int32] (from the previous call) or Scratchpad[np.int32] (from the host each call).",
    ),
    (
        "BadT().reference(node=1)",
        iron.errors.SignatureError,
        "parameter 'node' of BadT.body is Carried[float32]: per-call values are 32-bit integers; use Carried[np.int32].",
    ),
    (
        "NoCarry().reference(node=1, steps=0)",
        iron.errors.CarryError,
        "NoCarry.body has Carried parameters (node, steps) but returned no iron.carry(...): end body() with `return iron.carry(node=..., steps=...)`.",
    ),
    (
        "CarryFirst().reference(node=1)",
        iron.errors.CarryError,
        "CarryFirst.body returned iron.carry(...) at position 0 of 2 returned values: return exactly one carry, last, after the outputs.",
    ),
    (
        "Unknown().reference(node=1)",
        iron.errors.CarryError,
        "iron.carry(nod=...) in Unknown.body names 'nod', which is not a Carried parameter; the Carried parameters are node.",
    ),
    (
        "Missing().reference(node=1, steps=0)",
        iron.errors.CarryError,
        "iron.carry(...) in Missing.body gives no next value for Carried parameter 'steps': add steps=... to the carry.",
    ),
    (
        "WrongShape().reference(node=1)",
        iron.errors.CarryError,
        "next value of 'node' in WrongShape.body is Copy(t[node]) of shape (4,): a carried value is one element; pick one element (a view, or Argmax).",
    ),
    (
        "WrongDtype().reference(node=1)",
        iron.errors.CarryError,
        "next value of 'node' in WrongDtype.body is Copy(t[node]) of dtype float32 but 'node' is Carried[int32]: compute it as int32.",
    ),
    (
        "Bool().reference(node=1)",
        iron.errors.TracedValueError,
        "per-call value 'node' used as a Python bool (node > 3): its value is known only on the device, when the call runs. Compute with it on the device instead: iron.min / iron.max for bounds, or a kernel for data-dependent choices.",
    ),
    (
        "Rng().reference(steps=1)",
        iron.errors.TracedValueError,
        "per-call value 'steps' used as a Python int or index (range(), int(), indexing a list): its value is known only on the device, when the call runs. Index iron memories with it (w[node]) or pass it to a kernel; Python loops must use Python ints.",
    ),
    (
        "Idx().reference(steps=1)",
        iron.errors.TracedValueError,
        "per-call value 'steps' used as a Python int or index (range(), int(), indexing a list): its value is known only on the device, when the call runs. Index iron memories with it (w[node]) or pass it to a kernel; Python loops must use Python ints.",
    ),
    (
        "Dep().reference(node=1, pos=2)",
        iron.errors.CarryError,
        "next value of 'node' in Dep.body (node + pos) depends on Scratchpad value pos: the device cannot know the host's next value. Make pos Carried, or carry a value computed without it.",
    ),
    (
        "Acc().reference(np.ones(8, np.float32))",
        iron.errors.ArgumentError,
        "Acc.body is missing per-call value(s) pos: pass pos=<int> (Scratchpad).",
    ),
    (
        "Acc().reference(np.ones(8, np.float32), pos=1, extra=2)",
        iron.errors.ArgumentError,
        "Acc.body got an unexpected value 'extra': its tensors are x and its per-call values are pos.",
    ),
    (
        "Acc().reference(np.ones(7, np.float32), pos=1)",
        iron.errors.KernelTypeError,
        "Accumulate computes (7,) float32 but out=acc[pos] is (8,) float32: index the state so the view matches.",
    ),
    (
        "Acc().reference(np.ones(8, np.int32), pos=1)",
        iron.errors.KernelTypeError,
        "Accumulate computes (8,) int32 but out=acc[pos] is (8,) float32: index the state so the view matches.",
    ),
    (
        "Acc().reference(pos=1)",
        iron.errors.ArgumentError,
        "Acc.body is missing tensor 'x': pass it positionally or as x=array.",
    ),
    (
        "Acc().reference(np.ones(8, np.float32), pos=1.5)",
        iron.errors.ArgumentError,
        "per-call value 'pos' of Acc.body must be an int, got float 1.5.",
    ),
    (
        "Haz().reference(np.ones(4, np.float32), np.ones(4, np.float32))",
        iron.errors.WriteHazard,
        "Copy#0 and Copy#1 in Haz.body both write state 's' and nothing orders them: the device may run them in either order. Make Copy#1 use a result of Copy#0, or write different states.",
    ),
    (
        "War().reference(np.ones(4, np.float32))",
        iron.errors.WriteHazard,
        "Copy#0 in War.body reads state 's' and the later Copy#1 overwrites it with no data path from Copy#0 to Copy#1: the device may overwrite it before it is read. Use Copy#0's result in Copy#1, or write a different state.",
    ),
    (
        "KM().reference(np.ones(4, np.float32))",
        iron.errors.KernelTypeError,
        "MatVec needs W (M, K) and x (K,); got w (4, 8), x (4,).",
    ),
    (
        "KD().reference(np.ones(4, np.float32), np.ones(4, np.int32))",
        iron.errors.KernelTypeError,
        "Add computes in one dtype but input 0 (x) is float32 and input 1 (y) is int32: no dtype Add supports "
        "holds every float32, int32 value, so any Cast would round or clamp some: pick another kernel, or Cast "
        "knowing which values change.",
    ),
    (
        "KS().reference(np.ones(4, np.int32))",
        iron.errors.KernelTypeError,
        "Softmax does not support int32: it supports bfloat16, float32; no dtype Softmax supports holds every int32 "
        "value, so any Cast would round or clamp some: pick another kernel, or Cast knowing which values change.",
    ),
]


@pytest.mark.parametrize("call, error, text", CASES, ids=[c[0] for c in CASES])
def test_error_class_and_exact_text(call, error, text):
    with pytest.raises(error) as e:
        eval(call)
    assert str(e.value) == text


def test_an_ordered_read_modify_write_of_a_state_is_allowed():
    g = Ok()
    np.testing.assert_array_equal(g.reference(np.ones(4, np.float32)), np.zeros(4, np.float32))
    np.testing.assert_array_equal(g.reference(np.ones(4, np.float32)), np.ones(4, np.float32))
    np.testing.assert_array_equal(g.read("s"), np.full(4, 2, np.float32))


class UpTo(iron.Graph):
    """A row kernel over rows of 8, reducing each row's first `length` elements."""

    def __init__(self, kernel, length):
        self.kernel, self.length, self.w = kernel, length, iron.weight(np.linspace(1, 2, 8, dtype=np.float32))

    def body(self, x):
        rows = (x, self.w) if self.kernel is RMSNorm else (x,)
        return self.kernel.step(*rows, length=self.length)


@pytest.mark.parametrize("kernel, shapes", [(RMSNorm, "x (2, 8), w (8,)"), (Softmax, "x (2, 8)"), (Argmax, "x (2, 8)")])
def test_a_row_kernels_length_reduces_each_rows_first_elements_and_past_the_row_is_refused(kernel, shapes):
    x = np.array([[3, -1, 2, 0, 1, 9, 9, 9], [-2, -5, -1, -3, -4, 0, 0, 0]], np.float32)
    got = UpTo(kernel, 5).reference(x)
    first, e = x[:, :5], np.exp(x[:, :5] - x[:, :5].max(axis=1, keepdims=True))
    want = {Argmax: np.array([0, 2]), Softmax: e / e.sum(axis=1, keepdims=True),
            RMSNorm: first / np.sqrt(np.mean(first**2, axis=1, keepdims=True) + 1e-5) * np.linspace(1, 2, 8)[:5]}
    np.testing.assert_allclose(got[..., :5] if kernel is not Argmax else got, want[kernel], rtol=1e-6)
    assert kernel is Argmax or not got[:, 5:].any()
    with pytest.raises(iron.errors.KernelTypeError) as e:
        UpTo(kernel, 9).reference(x)
    assert str(e.value) == f"{kernel.__name__} needs 1 <= length <= 8, not 9; got {shapes}."
