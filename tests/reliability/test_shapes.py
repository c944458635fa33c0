"""Shapes are checked where they are declared: no zero or negative axis, no tensor or states
buffer whose byte offsets overflow a signed 32-bit word, no states past the host budget
(IRON_STATE_MAX_BYTES), each a named error with the numbers, never a KeyError, a
RecursionError, a MemoryError or a wrapped offset."""
import numpy as np
import pytest

import iron
from iron.errors import ArgumentError, DeclarationError, DoesNotFit
from iron.kernels import Add, Argmax, Copy
from tests.quotes import quoted

HOST = ("smaller states", "IRON_STATE_MAX_BYTES")              # the fixes a host-budget refusal names
DEVICE = ("32-bit", "2147483647 bytes", "smaller tensors")     # the device's limit and its fix


@pytest.mark.parametrize("shape", [(0,), (4, -2), (2.5,), "x", (True,)])
def test_a_state_axis_that_is_not_a_positive_int_is_refused(shape, trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state(shape, np.int32)
    quoted(raised.value, f"iron.state({shape!r}, ...)", "positive int")


def test_a_state_without_axes_is_refused(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state((), np.int32, name="s")
    quoted(raised.value, "iron.state(name='s')", "shape ()", "one axis")


def test_a_state_of_1e12_elements_is_refused_before_any_memory_is_taken(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state(10**12, np.int32, name="huge")
    quoted(raised.value, "iron.state(name='huge')", "(1000000000000,) int32", "4000000000000 bytes", *DEVICE)


def test_a_state_past_2_31_bytes_is_refused_not_wrapped(trail, unchanged, monkeypatch):
    monkeypatch.setenv("IRON_STATE_MAX_BYTES", str(2**40))   # the device rule, not the host budget, refuses it
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state((2**31 + 2**29,), np.int8, name="wide")
    quoted(raised.value, "iron.state(name='wide')", "(2684354560,) int8", "2684354560 bytes", *DEVICE)


def test_a_state_of_1e9_elements_is_past_the_default_host_budget(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state(10**9, np.int8, name="big")
    quoted(raised.value, "iron.state(name='big')", "1000000000 bytes", "268435456 bytes", *HOST)


def test_the_host_budget_is_configurable(monkeypatch, trail, unchanged):
    monkeypatch.setenv("IRON_STATE_MAX_BYTES", "1000")
    assert iron.state((250,), np.int32).shape == (250,)
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state((251,), np.int32)
    quoted(raised.value, "iron.state((251,), ...)", "1004 bytes", "1000 bytes", *HOST)


@pytest.mark.parametrize("value", ["lots", "0", "-5"])
def test_a_budget_that_is_not_a_positive_number_is_refused(value, monkeypatch, trail, unchanged):
    monkeypatch.setenv("IRON_STATE_MAX_BYTES", value)
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state((4,), np.int32)
    quoted(raised.value, f"IRON_STATE_MAX_BYTES is {value!r}", "positive number")


def test_a_graphs_states_together_past_the_budget_do_not_fit_when_traced(monkeypatch, unchanged):
    monkeypatch.setenv("IRON_STATE_MAX_BYTES", "1000")

    class Two(iron.Graph):
        def __init__(self):
            self.a = iron.state((200,), np.int32, name="a")
            self.b = iron.state((200,), np.int32, name="b")

        def body(self, x):
            return Copy.step(x, out=self.a[0:4])

    g = Two()
    for attempt in (lambda: g.reference(np.ones(4, np.int32)), lambda: g.compile(((4,), np.int32))):
        with unchanged(g), pytest.raises(DoesNotFit) as raised:
            attempt()
        quoted(raised.value, "states of Two", "1600 bytes", "1000 bytes", *HOST)


def test_states_whose_one_buffer_passes_2_31_bytes_do_not_fit_when_traced(monkeypatch, unchanged):
    monkeypatch.setenv("IRON_STATE_MAX_BYTES", str(2**40))   # nothing is allocated: the trace refuses first

    class Halves(iron.Graph):
        def __init__(self):
            self.a = iron.state((2**30,), np.int8, name="a")
            self.b = iron.state((2**30,), np.int8, name="b")

        def body(self, x):
            return Copy.step(x, out=self.a[0:4])

    g = Halves()
    with unchanged(), pytest.raises(DoesNotFit) as raised:
        g.compile(((4,), np.int8))
    quoted(raised.value, "states of Halves", "2147483648 bytes", "2147483647 bytes", "smaller states")


@pytest.mark.parametrize("kind", ["weight", "param"])
def test_a_zero_size_weight_or_param_is_refused(kind, trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        getattr(iron, kind)(np.zeros((0, 4), np.float32))
    quoted(raised.value, f"iron.{kind}()", "(0, 4)", "positive int")


@pytest.mark.parametrize("kind", ["weight", "param"])
def test_a_ragged_nest_of_lists_is_refused_as_a_declaration(kind, trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        getattr(iron, kind)([[1, 2], [3]])
    quoted(raised.value, f"iron.{kind}()", "rectangular", "numpy array")


def test_a_weight_past_2_31_elements_is_refused_before_it_is_copied(trail, unchanged):
    table = np.broadcast_to(np.int8(1), (2**31,))   # a view of one byte: nothing large is allocated
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.weight(table)
    quoted(raised.value, "iron.weight()", "(2147483648,) int8", "2147483648 bytes", *DEVICE)


class Twice(iron.Graph):
    def body(self, x):
        return Add.step(x, x)


@pytest.mark.parametrize("shape", [(0,), (4, 0), (-8,)])
def test_a_tensor_with_an_empty_or_negative_axis_is_refused_on_every_path(shape, trail, unchanged):
    g = Twice()
    calls = [lambda: g.compile((shape, np.int32))]
    if min(shape) == 0:
        calls += [lambda: g.reference(np.zeros(shape, np.int32)), lambda: g(np.zeros(shape, np.int32))]
    for call in calls:
        with unchanged(trail), pytest.raises(ArgumentError) as raised:
            call()
        quoted(raised.value, "tensor 'x' of Twice.body", str(shape), "positive int")


def test_a_tensor_spec_past_2_31_elements_is_refused_not_lowered(trail, unchanged):
    with unchanged(trail), pytest.raises(ArgumentError) as raised:
        Twice().compile(((2**16, 2**15), np.int8))
    quoted(raised.value, "tensor 'x' of Twice.body", "(65536, 32768) int8", "2147483648 bytes", *DEVICE)


class Widest(iron.Graph):
    def body(self, x):
        return Argmax.step(x)


def test_a_tensor_too_large_for_tile_memory_does_not_fit_with_the_numbers(trail, unchanged):
    # an elementwise call streams in blocks (tests/compiler/test_tiling.py); a row reduction cannot
    with unchanged(trail), pytest.raises(DoesNotFit) as raised:
        Widest().compile(((10**9,), np.int8))
    quoted(raised.value, "Widest", "Argmax#0", "1000000000 int8", "1000000004 bytes", "64512")
