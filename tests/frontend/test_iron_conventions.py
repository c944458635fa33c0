"""IRON's conventions iron keeps: a shape alone as a tensor spec and `iron.state(shape)` mean
bfloat16; a plain numpy array passed to a kernel inside body() is captured as a constant; carry
mistakes are `CarryError`, a TypeError. Each checked on reference() and on the design compiled for
npu2 and run on the emulator."""
import numpy as np
import pytest

import iron
from iron import Carried
from iron.errors import CarryError, KernelTypeError
from iron.ir import MemoryKind
from iron.kernels import Accumulate, Add, Copy, MatVec
from tests.quotes import quoted

BF16 = np.dtype(iron.bfloat16)


pytestmark = pytest.mark.usefixtures("on_emulator")


class Double(iron.Graph):
    def body(self, x):
        return Add.step(x, x)


@pytest.mark.parametrize("spec", [(16,), [16], 16, ((16,), iron.bfloat16)], ids=repr)
def test_a_shape_alone_is_a_bfloat16_spec(spec):
    g = Double()
    compiled = g.compile(x=spec, device="npu2")
    assert compiled.plan.placement("x").dtype == BF16 and compiled.plan.placement("x").shape == (16,)
    assert g.trace(x=spec).inputs[0].dtype == BF16
    x = np.linspace(-3, 3, 16).astype(iron.bfloat16)
    np.testing.assert_array_equal(compiled(x), g.reference(x))
    np.testing.assert_array_equal(compiled(x), (x.astype(np.float32) * 2).astype(iron.bfloat16))


def test_a_two_dimensional_shape_alone_is_not_read_as_shape_and_dtype():
    class Rows(iron.Graph):
        def body(self, x):
            return Copy.step(x)

    assert Rows().compile((4, 8), device="npu2").plan.placement("x").shape == (4, 8)
    assert Rows().compile(x=((4, 8), np.int32), device="npu2").plan.placement("x").dtype == np.int32


class Running(iron.Graph):
    """A running sum in a state declared without a dtype."""

    def __init__(self):
        self.total = iron.state((8,), name="total")

    def body(self, x):
        Accumulate.step(x, out=self.total)
        return Copy.step(self.total)


def test_a_state_without_a_dtype_is_bfloat16():
    g = Running()
    assert g.total.dtype == BF16
    assert g.read("total").dtype == BF16
    x = np.arange(8).astype(iron.bfloat16)
    compiled = g.compile(x=(8,), device="npu2")
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x), g.reference(x))
    np.testing.assert_array_equal(compiled.read("total"), (np.arange(8) * 3).astype(iron.bfloat16))


W = np.arange(32, dtype=np.float32).reshape(4, 8) / 8
B = np.ones(4, np.float32)


class Captures(iron.Graph):
    """MatVec and Add on plain numpy arrays (module globals), as IRON designs pass weights."""

    def body(self, x):
        return Add.step(MatVec.step(W, x), B), MatVec.step(W, x)


def test_a_numpy_array_operand_is_captured_as_a_constant():
    g = Captures()
    x = np.linspace(-1, 1, 8).astype(np.float32)
    want = g.reference(x)
    np.testing.assert_allclose(want[0], W @ x + 1, rtol=1e-6)
    compiled = g.compile(x=x, device="npu2")
    got = compiled(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    program = g.trace(x=x)
    assert [(d.kind, d.name, d.shape) for d in program.declarations] == [(MemoryKind.PARAM, "const0", (4, 8)), (MemoryKind.PARAM, "const1", (4,))]
    assert [(p.name, p.kind.value) for p in compiled.plan.placements if p.name.startswith("const")] == [
        ("const0", "param"), ("const1", "param")]


def test_a_captured_array_is_a_copy_taken_when_the_body_is_traced():
    table = np.full(4, 2, np.int32)

    class Uses(iron.Graph):
        def body(self, x):
            return Add.step(x, table)

    g = Uses()
    x = np.arange(4, dtype=np.int32)
    compiled = g.compile(x=x, device="npu2")
    table[:] = 100
    np.testing.assert_array_equal(g.reference(x), x + 2)
    np.testing.assert_array_equal(compiled(x), x + 2)


def test_a_captured_array_takes_a_name_no_declaration_has():
    class Named(iron.Graph):
        def __init__(self):
            self.const0 = iron.param(np.ones(4, np.int32))

        def body(self, x):
            return Add.step(Add.step(x, self.const0), np.full(4, 5, np.int32))

    g = Named()
    x = np.arange(4, dtype=np.int32)
    assert [d.name for d in g.trace(x=x).declarations] == ["const0", "const1"]
    np.testing.assert_array_equal(g.compile(x=x, device="npu2")(x), x + 6)
    np.testing.assert_array_equal(g.reference(x), x + 6)


def test_a_numpy_array_of_an_unsupported_dtype_is_refused_with_the_fix():
    class Float64(iron.Graph):
        def body(self, x):
            return Add.step(x, np.ones(4))

    with pytest.raises(KernelTypeError) as raised:
        Float64().reference(np.ones(4, np.float32))
    quoted(raised.value, "operand 1 of Add", "Float64.body", "shape (4,)", "float64",
           "int8, uint8, int16, int32, bfloat16, float32", "array.astype(np.float32)")


class Forgets(iron.Graph):
    def body(self, *, node: Carried[np.int32]):
        return Copy.step(np.zeros(1, np.int32))


class Positional(iron.Graph):
    def body(self, *, node: Carried[np.int32]):
        return iron.carry(node + 1)


@pytest.mark.parametrize("graph, text", [
    (Forgets, "Forgets.body has Carried parameters (node) but returned no iron.carry(...): end body() with "
              "`return iron.carry(node=...)`."),
    (Positional, "iron.carry got 1 positional value(s): name each next value after its Carried parameter, "
                 "e.g. iron.carry(node=nxt, steps=steps + 1)."),
])
def test_carry_mistakes_are_carry_errors_and_type_errors(graph, text):
    with pytest.raises(TypeError) as raised:
        graph().reference(node=0)
    assert type(raised.value) is CarryError and str(raised.value) == text
    with pytest.raises(CarryError):
        graph().compile(device="npu2")


def test_changing_a_carry_in_place_is_a_carry_error():
    carry = iron.carry(node=1)
    with pytest.raises(CarryError) as raised:
        carry["node"] = 2
    assert isinstance(raised.value, TypeError)
    quoted(raised.value, "Carry is immutable", "iron.carry(...)", "dict(carry)")
