"""Mistakes that used to surface as raw Python errors (TypeError, ValueError, KeyError, a
broadcast error) or to pass silently, each now a named error with the fix, the same on the
reference and the compiled path, and nothing changed."""
import numpy as np
import pytest

import iron
from iron import Carried, Scratchpad
from iron.errors import ArgumentError, DeclarationError, KernelTypeError, TracedValueError
from iron.kernels import Add, Copy, Scale, Softmax
from tests.quotes import quoted


class Acc(iron.Graph):
    """Writes x into the trail at pos and returns x + x."""

    def __init__(self):
        self.trail = iron.state((4, 4), np.int32, name="trail")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        Copy.step(x, out=self.trail[pos])
        return Add.step(x, x)


X = np.arange(4, dtype=np.int32)


@pytest.fixture
def acc():
    """An Acc whose reference trail and compiled trail both hold a call's row."""
    g = Acc()
    compiled = g.compile(((4,), np.int32))
    g.reference(X + 1, pos=2)
    compiled(X + 1, pos=2)
    return g, compiled


def paths(g, compiled):
    return [g.reference, compiled, g]


def test_a_per_call_value_given_as_a_one_element_array_is_an_argument_error(acc, unchanged):
    g, compiled = acc
    for call in paths(g, compiled):
        with unchanged(g, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
            call(X, pos=np.array([3]))
        quoted(raised.value, "'pos' of Acc.body", "an int", "shape (1,)", "int(v[0])")


def test_a_per_call_value_given_as_a_0_d_array_is_its_integer(acc):
    g, compiled = acc
    for call in paths(g, compiled):
        np.testing.assert_array_equal(call(X, pos=np.array(3, np.int64)), X + X)
    np.testing.assert_array_equal(g.read("trail")[3], X)
    np.testing.assert_array_equal(compiled.read("trail")[3], X)


def test_a_tensor_given_positionally_and_by_keyword_is_refused(acc, unchanged):
    g, compiled = acc
    attempts = [*(lambda call=call: call(X, x=X * 7, pos=1) for call in paths(g, compiled)),
                lambda: g.compile(((4,), np.int32), x=((8,), np.int32))]
    for attempt in attempts:
        with unchanged(g, compiled=[compiled]), pytest.raises(ArgumentError) as raised:
            attempt()
        quoted(raised.value, "Acc.body", "tensor 'x' twice", "x=")


@pytest.mark.parametrize("kernel, attrs, text", [
    (Scale, {"factor": "two"}, "Scale's factor is 'two' (str) but it is passed to C as f32: give a number, "
                                "e.g. Scale.step(..., factor=0.5)."),
    (Scale, {"factor": True}, "Scale's factor is True (bool) but it is passed to C as f32: give a number, "
                               "e.g. Scale.step(..., factor=0.5)."),
    (Softmax, {"length": "two"}, "Softmax's length is 'two' (str) but it is passed to C as i32: give an int in int32, "
                                  "e.g. Softmax.step(..., length=2)."),
    (Softmax, {"length": 2.5}, "Softmax's length is 2.5 (float) but it is passed to C as i32: give an int in int32, "
                                "e.g. Softmax.step(..., length=2)."),
])
def test_a_c_attribute_that_is_not_a_number_of_its_type_is_a_kernel_type_error(kernel, attrs, text, unchanged):
    class Uses(iron.Graph):
        def body(self, x):
            return kernel.step(x, **attrs)

    g = Uses()
    for attempt in (lambda: g.reference(np.ones(4, np.float32)), lambda: g.compile(((4,), np.float32))):
        with unchanged(), pytest.raises(KernelTypeError) as raised:
            attempt()
        assert str(raised.value) == text


def test_a_handle_kept_from_another_trace_is_refused(acc, unchanged):
    g, compiled = acc
    kept = {}

    class Leaks(iron.Graph):
        def body(self, x, *, k: Carried[np.int32]):
            kept["tensor"], kept["value"] = Add.step(x, x), k
            return kept["tensor"], iron.carry(k=k + 1)

    Leaks().reference(X, k=0)

    class UsesTensor(iron.Graph):
        def body(self, x):
            return Add.step(x, kept["tensor"])

    class ReturnsTensor(iron.Graph):
        def body(self, x):
            return kept["tensor"]

    class UsesValue(iron.Graph):
        def __init__(self):
            self.table = iron.weight(np.arange(4, dtype=np.int32))

        def body(self, *, pos: Scratchpad[np.int32]):
            return Copy.step(self.table[kept["value"]])

    tensor = ("tensor Add(x, x) was made while tracing another body(), not {}.body: a handle lives only in the trace "
              "that made it. Compute it again inside this body(), or pass it as a tensor.")
    value = ("per-call value 'k' was made while tracing another body(), not UsesValue.body: a handle lives only in "
             "the trace that made it. Use this body()'s own parameters.")
    cases = [(UsesTensor, {"x": ((4,), np.int32)}, tensor.format("UsesTensor")),
             (ReturnsTensor, {"x": ((4,), np.int32)}, tensor.format("ReturnsTensor")),
             (UsesValue, {}, value)]
    for graph, specs, text in cases:
        for way in ("compile", "trace"):
            with unchanged(g, compiled=[compiled]), pytest.raises(TracedValueError) as raised:
                getattr(graph(), way)(**specs)
            assert str(raised.value) == text


def user_kernel(name, result):
    return type(name.title().replace("_", ""), (iron.Kernel,), {"name": name, "compute": staticmethod(result)})


@pytest.mark.parametrize("kernel, text", [
    (user_kernel("doubled_length", lambda x: np.concatenate([x, x])),
     "DoubledLength.compute() returned (8,) int32 but this call's output is (4,) int32: return a numpy array of "
     "that shape and dtype (e.g. result.astype(np.int32))."),
    (user_kernel("widened", lambda x: x.astype(np.float64)),
     "Widened.compute() returned (4,) float64 but this call's output is (4,) int32: return a numpy array of that "
     "shape and dtype (e.g. result.astype(np.int32))."),
    (user_kernel("listed", lambda x: list(x)),
     "Listed.compute() returned list but this call's output is (4,) int32: return a numpy array of that shape and "
     "dtype (e.g. result.astype(np.int32))."),
])
def test_a_user_compute_of_the_wrong_shape_or_dtype_is_a_kernel_type_error_on_every_path(kernel, text, acc, unchanged):
    g, compiled = acc

    class Uses(iron.Graph):
        def __init__(self):
            self.out = iron.state((4,), np.int32, name="out")

        def body(self, x):
            return kernel.step(x, out=self.out)

    user = Uses()
    user_compiled = user.compile(((4,), np.int32))
    for call in (user.reference, user_compiled):
        with unchanged(g, user, compiled=[compiled, user_compiled]), pytest.raises(KernelTypeError) as raised:
            call(X)
        assert str(raised.value) == text


def test_a_weight_used_outside_a_traced_body_names_the_declaration_to_write(trail, unchanged):
    class Table(iron.Graph):
        def __init__(self):
            self.table = iron.weight(np.arange(4, dtype=np.int32))

        def body(self, *, i: Scratchpad[np.int32]):
            return Copy.step(self.table[i])

    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        Table().table[0]
    quoted(raised.value, "weight (unnamed)", "outside a traced body()", "self.x = iron.weight(...)")
