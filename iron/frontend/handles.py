"""The handles a body() computes with: `Scalar`, a per-call value (a `Carried[T]` or
`Scratchpad[T]` parameter, or an expression of them) whose arithmetic builds IR nodes; `Tensor`,
a tensor handle whose indexing builds VIEW nodes; and the `Carry` body() returns. Using a handle
as a Python bool, int or index raises, since only the device knows its value.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import CarryError, IndexOutOfRange, TracedValueError
from iron.ir import SCALAR_BINARY, Axis, Node, Op, describe, wrap_i32

I32 = np.dtype(np.int32)


class _PerCall:
    """A `Carried[T]` / `Scratchpad[T]` annotation: which kind of per-call value, and its type."""

    kind = ""

    def __init__(self, dtype):
        self.dtype = dtype

    def __class_getitem__(cls, dtype):
        return cls(dtype)

    def __repr__(self):
        shown = getattr(self.dtype, "__name__", self.dtype)
        return f"{type(self).__name__}[{shown}]"


class Carried(_PerCall):
    """A keyword-only per-call value that comes from the previous call's `iron.carry(...)`."""

    kind = "carried"


class Scratchpad(_PerCall):
    """A keyword-only per-call value the host gives at every call."""

    kind = "scratchpad"


def _refuse(value: str, use: str, fix: str):
    raise TracedValueError(
        f"per-call value '{value}' used as a Python {use}: its value is known only on the device, "
        f"when the call runs. {fix}"
    )


class Scalar:
    """A per-call 32-bit integer computed on the device."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    def _bin(self, op, other, swap=False):
        other_node = as_scalar_node(other)
        if other_node is None:
            return NotImplemented
        a, b = (other_node, self.node) if swap else (self.node, other_node)
        return Scalar(fold(op, a, b))

    def __add__(self, o): return self._bin(Op.ADD, o)
    def __radd__(self, o): return self._bin(Op.ADD, o, True)
    def __sub__(self, o): return self._bin(Op.SUB, o)
    def __rsub__(self, o): return self._bin(Op.SUB, o, True)
    def __mul__(self, o): return self._bin(Op.MUL, o)
    def __rmul__(self, o): return self._bin(Op.MUL, o, True)
    def __floordiv__(self, o): return self._bin(Op.FLOORDIV, o)
    def __rfloordiv__(self, o): return self._bin(Op.FLOORDIV, o, True)
    def __mod__(self, o): return self._bin(Op.MOD, o)
    def __rmod__(self, o): return self._bin(Op.MOD, o, True)

    def min(self, other):
        return self._bin(Op.MIN, other)

    def max(self, other):
        return self._bin(Op.MAX, other)

    def _compare(self, other, sym):
        text = f"{describe(self.node)} {sym} {other if not isinstance(other, Scalar) else describe(other.node)}"
        _refuse(describe(self.node), f"bool ({text})",
                "Compute with it on the device instead: iron.min / iron.max for bounds, or a "
                "kernel for data-dependent choices.")

    def __lt__(self, o): self._compare(o, "<")
    def __le__(self, o): self._compare(o, "<=")
    def __gt__(self, o): self._compare(o, ">")
    def __ge__(self, o): self._compare(o, ">=")

    def __bool__(self):
        _refuse(describe(self.node), "bool", "Decide with Python values at trace time, or compute on the device.")

    def __index__(self):
        _refuse(describe(self.node), "int or index (range(), int(), indexing a list)",
                "Index iron memories with it (w[node]) or pass it to a kernel; Python loops must use Python ints.")

    __int__ = __index__

    def __repr__(self):
        return f"<per-call value {describe(self.node)}>"


def fold(op: str, a: Node, b: Node) -> Node:
    """A binary scalar node, folded to a constant when both sides are constants."""
    if a.op == Op.CONST and b.op == Op.CONST:
        return Node(Op.CONST, arg=wrap_i32(SCALAR_BINARY[op](a.arg, b.arg)))
    return Node(op, (a, b))


def as_scalar_node(value) -> Node | None:
    """The scalar node of a Scalar or Python int (None for anything else)."""
    if isinstance(value, Scalar):
        return value.node
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return Node(Op.CONST, arg=int(value))
    return None


def minimum(a, b):
    """The smaller of two per-call values (or ints), computed on the device."""
    return _extreme(Op.MIN, a, b)


def maximum(a, b):
    """The larger of two per-call values (or ints), computed on the device."""
    return _extreme(Op.MAX, a, b)


def _extreme(op, a, b):
    na, nb = as_scalar_node(a), as_scalar_node(b)
    if na is None or nb is None:
        raise TypeError(f"iron.{op} takes per-call values or ints, got {type(a).__name__} and {type(b).__name__}")
    return Scalar(fold(op, na, nb))


class Tensor:
    """A tensor handle: shape and dtype known at trace time, data only when the call runs."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype

    @property
    def name(self) -> str:
        return describe(self.node)

    def __getitem__(self, index):
        return Tensor(index_view(self.node, index))

    def __bool__(self):
        _refuse(self.name, "bool", "Tensors are computed on the device; compare them with a kernel.")

    def __index__(self):
        _refuse(self.name, "int or index", "Carry it to the next call (iron.carry) to index with it there.")

    __int__ = __index__

    def __repr__(self):
        return f"<tensor {self.name}: {self.shape} {dtypes.name(self.dtype)}>"


class Carry(dict):
    """The next carried values of a call: an immutable mapping of name -> value
    (`dict(carry)` for a plain dict, `int(carry["node"])` for one value)."""

    __slots__ = ()

    def _immutable(self, *args, **kwargs):
        raise CarryError("a Carry is immutable: build a new one with iron.carry(...) or dict(carry)")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _immutable

    def __reduce__(self):
        return (Carry, (dict(self),))

    def __repr__(self):
        return f"Carry({', '.join(f'{k}={v!r}' for k, v in self.items())})"


def carry(*values, **next_values) -> Carry:
    """Name the next value of every Carried parameter; return it last from body()."""
    if values:
        raise CarryError(
            f"iron.carry got {len(values)} positional value(s): name each next value after its Carried "
            "parameter, e.g. iron.carry(node=nxt, steps=steps + 1)."
        )
    return Carry(next_values)


# ---- views -------------------------------------------------------------------------------------

def index_view(base: Node, index) -> Node:
    """A VIEW node: `base[index]` where base is a MEMORY, an INPUT, or a VIEW of one."""
    if base.op not in (Op.MEMORY, Op.INPUT, Op.VIEW):
        raise TracedValueError(
            f"{describe(base)} is a computed tensor and cannot be indexed inside the call that "
            "computes it: index declared weights, params and states, or pass it whole to a kernel."
        )
    memory = base.src[0] if base.op == Op.VIEW else base
    axes = list(base.arg) if base.op == Op.VIEW else [Axis(stop=n) for n in memory.shape]
    dynamic = list(base.src[1:]) if base.op == Op.VIEW else []
    index = index if isinstance(index, tuple) else (index,)
    free = [i for i, a in enumerate(axes) if a.keeps_axis]
    if len(index) > len(free):
        raise IndexOutOfRange(
            f"{describe(base)} has {len(free)} axes but was indexed with {len(index)} indices."
        )
    for pos, item in zip(free, index):
        axis = axes[pos]
        extent = axis.stop - axis.start
        if isinstance(item, Scalar):
            if memory.op == Op.MEMORY and memory.arg[0] == "param":
                raise TracedValueError(
                    f"param '{memory.arg[1]}' is indexed by per-call value '{describe(item.node)}': "
                    "a param is used whole. Declare it with iron.weight(...) to read it through a per-call index."
                )
            dynamic.append(item.node)
            axes[pos] = Axis(dynamic=len(dynamic), start=axis.start, stop=axis.stop)
        elif isinstance(item, Tensor):
            raise TracedValueError(
                f"{describe(base)} is indexed by tensor {item.name}: indices are per-call values. "
                "Carry the element to the next call (iron.carry) and index with the Carried value there."
            )
        elif isinstance(item, slice):
            start, stop, step = item.indices(extent)
            if step != 1 or stop <= start:
                raise IndexOutOfRange(
                    f"{describe(base)}[{item.start}:{item.stop}:{item.step}] selects nothing or uses a step: "
                    "views take contiguous slices with step 1."
                )
            axes[pos] = Axis(start=axis.start + start, stop=axis.start + stop)
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            i = int(item) + (extent if item < 0 else 0)
            if not 0 <= i < extent:
                raise IndexOutOfRange(
                    f"index {int(item)} is out of range for axis {pos} of {describe(memory)} (size {extent})."
                )
            axes[pos] = Axis(index=axis.start + i)
        else:
            raise TracedValueError(
                f"{describe(base)} was indexed with {item!r}: use ints, slices or per-call values."
            )
    shape = tuple(a.stop - a.start for a in axes if a.keeps_axis)
    return Node(Op.VIEW, (memory, *dynamic), shape, memory.dtype, tuple(axes))

