"""iron's elementwise kernels beyond the arithmetic ones: the binary family (`Binary`: Maximum,
Minimum, the comparisons, bitwise and/or/xor, shifts, Mod; Add, Sub and Mul in library.py are of
it too), each with its form taking a constant operand (`Mul.step(x, 3)`: `Binary.constant`),
Where, BitwiseNot, the activations Tanh, Sigmoid, GELU, GELUTanh and LeakyReLU, and Axpy.

Integers compute exactly (in int64) and wrap to the element width, as AIE's vector add and
compare do; Scale (library.py) is the integer kernel that saturates. A comparison gives 1 or 0 in
its inputs' dtype, so its result is a `Where` condition or a mask to multiply by. The activations
compute in float64 and round once to float32 (then to bfloat16), as their C++ does.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from iron import dtypes
from iron.errors import DeclarationError
from iron.kernels.base import Kernel

FLOATS = dtypes.FLOATS
INTEGERS = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32))
I64, F32, F64 = np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64)


class Constant(Kernel):
    """A binary kernel's form with one constant operand (`Binary.constant`): out = op(x, c), or
    op(c, x) when `flip`, for c `value` on integers (a static int in the dtype's range, or a
    per-call value, which wraps to the dtype) and `fvalue` on floats (rounded to the dtype). The
    front end fills these from the number the user passed; its C symbols are `<op>_constant_<T>`,
    defined in the op's source file."""

    index_map = "i->i"
    attrs = {"value": 0, "fvalue": 0.0, "flip": 0}
    scalar_attrs = ("value",)
    c_attrs = (("value", "i32"), ("fvalue", "f32"), ("flip", "i32"))
    operation: ClassVar[type]

    @classmethod
    def compute(cls, x, value=0, fvalue=0.0, flip=0):
        if x.dtype.kind in "iu":
            c = np.asarray(np.int64(value)).astype(x.dtype)   # a per-call int32 wraps to the dtype, as in C++
        else:
            c = np.asarray(fvalue, x.dtype)
        return cls.operation.op(c, x) if flip else cls.operation.op(x, c)

    @classmethod
    def keeps_zeros_in(cls, attrs: dict) -> bool:
        """Whether a call with these static attrs maps zeros to zeros: always when the op does so
        with every constant (`Mul`), else when it does with this call's constants, integer and
        float both (`Add.step(x, 0)`, `Maximum.step(x, 0)`); never with a per-call constant."""
        if cls.keeps_zeros or "value" not in attrs:
            return cls.keeps_zeros
        op, flip = cls.operation.op, attrs.get("flip", 0)
        pairs = [(np.zeros(1, I64), np.full(1, attrs["value"], I64))] * bool(cls.dtypes & INTEGERS)
        pairs += [(np.zeros(1, F32), np.full(1, attrs.get("fvalue", 0.0), F32))] * bool(cls.dtypes & FLOATS)
        return not any(np.any(op(c, z) if flip else op(z, c)) for z, c in pairs)

    @classmethod
    def describe_call(cls, operands: list[str], attrs: dict, dtype: np.dtype) -> str:
        """`Mul(x, 3)`, `Sub(1.5, x)`, `Greater(x, t)` (a per-call value): as the user wrote it."""
        c = str(attrs["value"] if dtype.kind in "iu" else attrs["fvalue"])
        pair = [c, *operands] if attrs["flip"] else [*operands, c]
        return f"{cls.__name__}({', '.join(pair)})"


def _require(cls, attr: str, what: str) -> None:
    """DeclarationError unless the named kernel `cls` defines `attr` (its family's numpy)."""
    if not callable(getattr(cls, attr, None)):
        raise DeclarationError(
            f"kernel {cls.__name__} ({cls.name!r}) defines no {attr}: a {cls.__mro__[1].__name__} "
            f"computes {what}. Define it as a staticmethod of {cls.__name__}.")


class Binary(Kernel):
    """An elementwise kernel of two tensors computing `op` (numpy on two arrays of the inputs'
    dtype, float32 for bfloat16); defining one also defines its `constant` form (a Constant
    kernel named `<name>_constant`, shown as this kernel), which `K.step(x, 3)` records."""

    index_map = "i,i->i"
    arity = 2
    batches = True
    constant_keeps_zeros: ClassVar[bool] = False   # op(0, c) = op(c, 0) = 0 for every constant c
    constant: ClassVar[type | None] = None
    op: ClassVar[Callable]   # numpy on the two operands: every named Binary defines it

    @classmethod
    def compute(cls, a, b):
        return cls.op(a, b)

    def __init_subclass__(cls, **kwargs):
        if cls.name:   # refused before the base class claims the name: nothing half-applied
            _require(cls, "op", "op(a, b), numpy on its two operands")
        super().__init_subclass__(**kwargs)
        if cls.name:
            cls.constant = type(cls.__name__, (Constant,), {
                "__module__": cls.__module__, "__qualname__": f"{cls.__qualname__}.constant",
                "__doc__": f"{cls.__name__} of a tensor and a constant (see Constant).",
                "name": f"{cls.name}_constant", "operation": cls, "source_kernel": cls,
                "dtypes": cls.dtypes, "keeps_zeros": cls.constant_keeps_zeros,
            })


def _wide(op):
    """`op` computed on integers in int64 (wrapped back to the dtype by the kernel's output)."""
    def run(a, b):
        if a.dtype.kind in "iu":
            a, b = a.astype(I64), b.astype(I64)
        return op(a, b)
    return run


def _picking(keep):
    """a where keep(a, b) holds or a is NaN, else b: numpy's maximum or minimum, with the choice
    between equal zeros of either sign made the one way the C++ makes it (numpy's own depends on
    its vector path)."""
    return lambda a, b: np.where(keep(a, b) | (a != a), a, b)


class Maximum(Binary):
    """out = the larger of a and b, elementwise (a where a >= b, a NaN of either: numpy's maximum)."""

    name = "maximum"
    keeps_zeros = keeps_dtype = True
    op = staticmethod(_picking(np.greater_equal))


class Minimum(Binary):
    """out = the smaller of a and b, elementwise (a where a <= b, a NaN of either: numpy's minimum)."""

    name = "minimum"
    keeps_zeros = keeps_dtype = True
    op = staticmethod(_picking(np.less_equal))


def _comparison(class_name: str, name: str, op, symbol: str, keeps_zeros: bool) -> type:
    """A comparison kernel: out = 1 where `a <symbol> b`, else 0, in the inputs' dtype."""
    return type(class_name, (Binary,), {
        "__doc__": f"out = 1 where a {symbol} b, else 0, in the inputs' dtype (NaN compares as numpy's {op.__name__}).",
        "name": name, "op": staticmethod(op), "keeps_zeros": keeps_zeros,
    })


# keeps_zeros: 0 <op> 0 is false
Greater = _comparison("Greater", "greater", np.greater, ">", True)
GreaterEqual = _comparison("GreaterEqual", "greater_equal", np.greater_equal, ">=", False)
Less = _comparison("Less", "less", np.less, "<", True)
LessEqual = _comparison("LessEqual", "less_equal", np.less_equal, "<=", False)
Equal = _comparison("Equal", "equal", np.equal, "==", False)
NotEqual = _comparison("NotEqual", "not_equal", np.not_equal, "!=", True)


class BitwiseAnd(Binary):
    """out = a & b, on integers."""

    name = "bitwise_and"
    dtypes = INTEGERS
    keeps_zeros = constant_keeps_zeros = keeps_dtype = True
    op = staticmethod(np.bitwise_and)


class BitwiseOr(Binary):
    """out = a | b, on integers."""

    name = "bitwise_or"
    dtypes = INTEGERS
    keeps_zeros = keeps_dtype = True
    op = staticmethod(np.bitwise_or)


class BitwiseXor(Binary):
    """out = a ^ b, on integers."""

    name = "bitwise_xor"
    dtypes = INTEGERS
    keeps_zeros = keeps_dtype = True
    op = staticmethod(np.bitwise_xor)


def _shift(op):
    """A shift of int64 values by counts clamped to 0..63 (as the C++ shifts its int64 values)."""
    return _wide(lambda a, b: op(a, np.clip(b, 0, 63)))


class ShiftLeft(Binary):
    """out = a << b, on integers: the count clamped to 0..63, the result wrapped to the dtype."""

    name = "shift_left"
    dtypes = INTEGERS
    keeps_zeros = True
    op = staticmethod(_shift(np.left_shift))


class ShiftRight(Binary):
    """out = a >> b, on integers: arithmetic (keeps the sign), the count clamped to 0..63."""

    name = "shift_right"
    dtypes = INTEGERS
    keeps_zeros = True
    op = staticmethod(_shift(np.right_shift))


def _floor_mod(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):   # numpy's integer mod by 0 gives 0, as the C++
        return np.mod(a, b)


class Mod(Binary):
    """out = a mod b, on integers, with the sign of b (numpy's mod, Python's %); 0 where b is 0."""

    name = "mod"
    dtypes = INTEGERS
    keeps_zeros = constant_keeps_zeros = True   # 0 mod c = c mod 0 = 0
    op = staticmethod(_wide(_floor_mod))


class Where(Kernel):
    """out = a where cond is not 0, else b, elementwise; cond, a and b share one dtype (a
    comparison's 1 or 0 is such a condition)."""

    index_map = "i,i,i->i"
    name, arity = "where", 3
    keeps_zeros = batches = keeps_dtype = exact_in_dtype = True

    @staticmethod
    def compute(cond, a, b):
        return np.where(cond != 0, a, b)


class BitwiseNot(Kernel):
    """out = ~x, on integers."""

    index_map = "i->i"
    name = "bitwise_not"
    dtypes = INTEGERS
    batches = keeps_dtype = True
    compute = staticmethod(np.invert)


class Activation(Kernel):
    """A float kernel computing `fn` of float64 values (the C library's tanh, exp, erf), rounded
    once to float32, as its C++ does."""

    index_map = "i->i"
    dtypes = FLOATS
    batches = True
    fn: ClassVar[Callable]   # of float64 values: every named Activation defines it

    def __init_subclass__(cls, **kwargs):
        if cls.name:
            _require(cls, "fn", "fn(x), of float64 values")
        super().__init_subclass__(**kwargs)

    @classmethod
    def compute(cls, x):
        return cls.fn(x.astype(F64)).astype(F32)



def _libm(fn):
    """`fn` of the C library (math's), elementwise on float64 values: the function the C++
    calls, where numpy's own (vectorised) tanh or exp may differ in the last bit, which
    1 + tanh(u) near -1 would magnify."""
    each = np.frompyfunc(fn, 1, 1)

    def run(x):
        with np.errstate(over="ignore"):   # the flag math.exp raises before it gives inf
            return each(x).astype(F64)
    return run


def _exp_or_inf(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:   # math.exp raises where C's exp gives inf
        return math.inf


_erf, _tanh, _exp = _libm(math.erf), _libm(math.tanh), _libm(_exp_or_inf)


class Tanh(Activation):
    """out = tanh(x)."""

    name = "tanh"
    keeps_zeros = True
    fn = staticmethod(_tanh)


class Sigmoid(Activation):
    """out = 1 / (1 + exp(-x))."""

    name = "sigmoid"

    @staticmethod
    def fn(x):
        return 1.0 / (1.0 + _exp(-x))


class GELU(Activation):
    """out = x / 2 * (1 + erf(x / sqrt(2))): PyTorch's GELU (approximate='none')."""

    name = "gelu"
    keeps_zeros = True

    @staticmethod
    def fn(x):
        return 0.5 * x * (1.0 + _erf(x * 0.70710678118654752440))


class GELUTanh(Activation):
    """out = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))): PyTorch's
    GELU(approximate='tanh'), the form of IRON's gelu.cc."""

    name = "gelu_tanh"
    keeps_zeros = True

    @staticmethod
    def fn(x):
        return 0.5 * x * (1.0 + _tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)))


class LeakyReLU(Kernel):
    """out = x where x >= 0, else alpha * x (alpha fixed when the design compiles, default 0.01)."""

    index_map = "i->i"
    name = "leaky_relu"
    dtypes = FLOATS
    keeps_zeros = True
    attrs = {"alpha": 0.01}
    c_attrs = (("alpha", "f32"),)

    @staticmethod
    def compute(x, alpha=0.01):
        return np.where(x >= 0, x, np.float32(alpha) * x)


class Axpy(Kernel):
    """out = alpha * x + y, elementwise (alpha fixed when the design compiles)."""

    index_map = "i,i->i"
    name, arity = "axpy", 2
    dtypes = FLOATS
    keeps_zeros = True
    attrs = {"alpha": Kernel.REQUIRED}
    c_attrs = (("alpha", "f32"),)

    @staticmethod
    def compute(x, y, alpha):
        return np.float32(alpha) * x + y


KERNELS = (Maximum, Minimum, Greater, GreaterEqual, Less, LessEqual, Equal, NotEqual, BitwiseAnd, BitwiseOr,
           BitwiseXor, ShiftLeft, ShiftRight, Mod, Where, BitwiseNot, Tanh, Sigmoid, GELU, GELUTanh, LeakyReLU, Axpy)
