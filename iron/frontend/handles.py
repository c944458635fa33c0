"""The handles a body() computes with: `Scalar`, a per-call value (a `Carried[T]` or
`Scratchpad[T]` parameter, or an expression of them) whose arithmetic builds IR nodes; `Tensor`,
a tensor handle whose indexing builds VIEW nodes; and the `Carry` body() returns. Using a handle
as a Python bool, int or index raises, since only the device knows its value.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from iron import dtypes
from iron.errors import CarryError, IndexOutOfRange, KernelTypeError, TracedValueError
from iron.ir import (
    SCALAR_BINARY,
    Axis,
    MemoryKind,
    Node,
    Op,
    VarKind,
    contiguous_span,
    describe,
    frame,
    kept,
    kept_shape,
    wrap_i32,
)

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

    kind = VarKind.CARRIED


class Scratchpad(_PerCall):
    """A keyword-only per-call value the host gives at every call."""

    kind = VarKind.SCRATCHPAD


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

    @property
    def T(self) -> Tensor:   # noqa: N802 (numpy's name)
        """The axes in reverse order, as numpy's `.T`: a view the DMA moves by its access pattern."""
        return Tensor(transpose_view(self.node, None))

    def transpose(self, *axes) -> Tensor:
        """The axes in the order `axes` names (none: reversed), as numpy's `transpose`."""
        return Tensor(transpose_view(self.node, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list))
                                     else axes or None))

    def reshape(self, *shape) -> Tensor:
        """The same elements, row-major, as `shape` (one -1 is worked out): free where they lie
        whole in rows of their tensor, else the compiler moves them."""
        return Tensor(reshape_view(self.node, shape))

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
    """A VIEW node: `base[index]` where base is an input, a declared memory, a kernel call's
    result (a computed tensor: static ints and slices only), or a VIEW of one."""
    source, axes, dynamic = _frame_of(base)
    index = index if isinstance(index, tuple) else (index,)
    free = [next(i for i, b in enumerate(axes) if b is a) for a in kept(axes)]   # in the view's order
    if len(index) > len(free):
        raise IndexOutOfRange(
            f"{describe(base)} has {len(free)} axes but was indexed with {len(index)} indices."
        )
    for pos, item in zip(free, index):
        axes[pos] = _picked(base, source, pos, axes[pos], item, dynamic)
    axes = _renumbered(axes)
    return Node(Op.VIEW, (source, *dynamic), kept_shape(axes), source.dtype, tuple(axes))


def _renumbered(axes: list[Axis]) -> list[Axis]:
    """The kept axes' orders as 0, 1, ... (an index dropped one), or None when in frame order."""
    mine = [i for i, a in enumerate(axes) if a.keeps_axis]
    ranked = sorted(mine, key=lambda i: axes[i].order if axes[i].order is not None else i)
    natural = ranked == mine
    out = list(axes)
    for rank, i in enumerate(ranked):
        out[i] = replace(axes[i], order=None if natural else rank)
    return out


def transpose_view(node: Node, order) -> Node:
    """`node` with its axes in `order` (numpy's transpose; None: reversed): a VIEW whose kept axes
    are reordered, the data where it lies."""
    if order is not None and sorted(int(i) % max(1, len(node.shape)) for i in order) != list(range(len(node.shape))):
        raise IndexOutOfRange(
            f"{describe(node)}.transpose{tuple(order)}: name each of its {len(node.shape)} axes once.")
    view = index_view(node, ()) if node.op != Op.VIEW or node.shape == kept_shape(node.arg) else None
    if view is None:
        raise TracedValueError(
            f"{describe(node)} is a reshape of a strided view, whose axes are not those of its tensor: "
            "transpose the view before reshaping it.")
    order = tuple(int(i) % len(node.shape) for i in order) if order is not None else tuple(reversed(range(len(node.shape))))
    positions = [next(i for i, b in enumerate(view.arg) if b is a) for a in kept(view.arg)]
    axes = list(view.arg)
    for rank, old in enumerate(order):
        axes[positions[old]] = replace(axes[positions[old]], order=rank)
    axes = _renumbered(axes)
    return Node(Op.VIEW, view.src, kept_shape(axes), view.dtype, tuple(axes))


def broadcast_view(node: Node, shape: tuple[int, ...]) -> Node:
    """`node` seen as `shape` by numpy's broadcasting rules: a VIEW whose new leading axes and
    axes of one element repeat that element (step 0), which the DMA moves by a stride of 0."""
    view = index_view(node, ()) if node.op != Op.VIEW else node
    if view.shape != kept_shape(view.arg) or len(view.src) > 1:
        raise TracedValueError(
            f"{describe(node)} is broadcast to {shape} but is a reshaped or per-call view: broadcast the "
            "tensor it views, or index it with ints and slices in its own shape.")
    lead = len(shape) - len(node.shape)
    extents = frame(view)
    axes = [Axis(start=0, stop=1, extent=1, order=None if kept(view.arg) == [a for a in view.arg if a.keeps_axis]
                 else i) for i in range(lead)]
    axes += [replace(a, extent=n, order=None if a.order is None else a.order + lead) for a, n in zip(view.arg, extents)]
    for a, n in zip(kept(axes), shape):
        if a.size != n:
            axes[next(i for i, b in enumerate(axes) if b is a)] = replace(a, step=0, length=n, stop=a.start + 1)
    return Node(Op.VIEW, view.src, shape, view.dtype, tuple(axes))


def _picked(base: Node, source: Node, pos: int, axis: Axis, item, dynamic: list[Node]) -> Axis:
    """`axis` (number `pos`) after indexing it with `item`; a per-call index joins `dynamic`."""
    if axis.dynamic is not None:
        raise TracedValueError(
            f"{describe(base)} is already sliced at a per-call offset along axis {pos}: index the "
            "memory once, with every index in one [...]."
        )
    if _per_call(item.start, item.stop) if isinstance(item, slice) else isinstance(item, Scalar):
        if axis.step != 1:
            raise TracedValueError(
                f"{describe(base)} is indexed at a per-call offset along axis {pos}, which is a step slice or a "
                "broadcast: index the tensor at the per-call offset first, then slice with a step.")
    if isinstance(item, slice) and _per_call(item.start, item.stop):
        dynamic.append(_slice_start(base, source, item))
        picked = replace(axis, dynamic=len(dynamic), length=_slice_length(base, item))
        if picked.offsets < 1:
            raise IndexOutOfRange(
                f"{describe(base)}[{describe(dynamic[-1])}:...] takes {picked.length} elements along axis "
                f"{pos} but it has {axis.size}: take fewer."
            )
        return picked
    if isinstance(item, Scalar):
        dynamic.append(_per_call_index(base, source, item))
        return replace(axis, dynamic=len(dynamic))
    if isinstance(item, Tensor):
        raise TracedValueError(
            f"{describe(base)} is indexed by tensor {item.name}: indices are per-call values. "
            "Carry the element to the next call (iron.carry) and index with the Carried value there."
        )
    if isinstance(item, slice):
        start, stop, step = item.indices(axis.size)
        count = len(range(start, stop, step))
        if step < 1 or count < 1:
            raise IndexOutOfRange(
                f"{describe(base)}[{item.start}:{item.stop}:{item.step}] selects nothing or steps backwards: "
                "views take slices with a positive step (the DMA's strides are positive)."
            )
        if axis.step == 0:   # a broadcast axis: still its one element
            return replace(axis, length=count)
        first = axis.start + start * axis.step
        return replace(axis, start=first, stop=first + (count - 1) * step * axis.step + 1, step=step * axis.step)
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        i = int(item) + (axis.size if item < 0 else 0)
        if not 0 <= i < axis.size:
            raise IndexOutOfRange(
                f"index {int(item)} is out of range for axis {pos} of {describe(source)} (size {axis.size})."
            )
        return replace(axis, index=axis.start + i * axis.step, length=None, order=None)
    raise TracedValueError(
        f"{describe(base)} was indexed with {item!r}: use ints, slices or per-call values."
    )


def _frame_of(base: Node) -> tuple[Node, list[Axis], list[Node]]:
    """(the tensor a view of `base` picks from, its axes so far, its per-call indices so far)."""
    if base.op != Op.VIEW:
        return base, [Axis(stop=n, extent=n) for n in base.shape], []
    if base.shape != kept_shape(base.arg):
        raise TracedValueError(
            f"{describe(base)} is a reshaped view that does not lie whole in its tensor's rows, so it cannot be "
            "indexed again: index before reshaping, or Copy it first (Copy.step(view).reshape(...))."
        )
    return base.src[0], list(base.arg), list(base.src[1:])


def _per_call(*bounds) -> bool:
    return any(isinstance(b, Scalar) for b in bounds)


def _per_call_index(base: Node, source: Node, item: Scalar) -> Node:
    """The node of a per-call index (or slice start) into `source`, which must be a host tensor."""
    if source.op == Op.MEMORY and source.arg.kind is MemoryKind.PARAM:
        raise TracedValueError(
            f"param '{source.arg.name}' is indexed by per-call value '{describe(item.node)}': "
            "a param is used whole. Declare it with iron.weight(...) to read it through a per-call index."
        )
    if source.op == Op.CALL:
        raise TracedValueError(
            f"{describe(base)} is a computed tensor and is indexed by per-call value '{describe(item.node)}': "
            "a tensor the call computes is viewed with ints and slices only. Write it into a state "
            "(out=self.s) and index the state in the next call, or pick with a kernel."
        )
    return item.node


def _slice_start(base: Node, source: Node, item: slice) -> Node:
    start = item.start if isinstance(item.start, Scalar) else None
    if start is None or item.step not in (None, 1):
        _refuse_slice(base, item)
    return _per_call_index(base, source, start)


def _slice_length(base: Node, item: slice) -> int:
    """k of `[pos:pos + k]` (or `[pos - k:pos]`): stop - start must come out a fixed int k >= 1."""
    start, stop = as_scalar_node(item.start), as_scalar_node(item.stop)
    if stop is not None:
        terms, k = _linear(stop, 1)
        minus, k0 = _linear(start, -1)
        for key, n in minus.items():
            terms[key] = terms.get(key, 0) + n
        if k + k0 >= 1 and not any(terms.values()):
            return k + k0
    _refuse_slice(base, item)


def _linear(node: Node, sign: int) -> tuple[dict, int]:
    """`sign * node` as ({term: coefficient}, constant) over + and -, each other expression a term."""
    if node.op == Op.CONST:
        return {}, sign * node.arg
    if node.op in (Op.ADD, Op.SUB):
        (ta, ca), (tb, cb) = _linear(node.src[0], sign), _linear(node.src[1], sign if node.op == Op.ADD else -sign)
        for key, n in tb.items():
            ta[key] = ta.get(key, 0) + n
        return ta, ca + cb
    return {_term(node): sign}, 0


def _term(node: Node):
    """A key equal for equal scalar expressions (each tensor by identity)."""
    return (node.op, node.arg, tuple(_term(s) if s.is_scalar else s for s in node.src))


def _refuse_slice(base: Node, item: slice):
    def text(b):
        return "" if b is None else describe(b.node) if isinstance(b, Scalar) else str(b)

    raise TracedValueError(
        f"{describe(base)}[{text(item.start)}:{text(item.stop)}] is a slice at a per-call offset whose length "
        "is not fixed: write it as [pos:pos + k] with a per-call pos and an int k (step 1)."
    )


def reshape_view(node: Node, shape: tuple[int, ...]) -> Node:
    """`node` read as `shape` (row-major, one -1 allowed). A whole tensor, or a static view lying
    whole in rows of its tensor, is re-framed: a VIEW over its tensor seen as `shape`'s rows,
    which can be indexed again. Any other view keeps its axes and only takes the new shape."""
    shape = _reshaped(node, shape)
    source = node.src[0] if node.op == Op.VIEW else node
    span = _row_span(node, shape) if node.op == Op.VIEW else (0, shape[0] if shape else 1)
    if span is None or not shape:
        view = node if node.op == Op.VIEW else index_view(node, ())
        return Node(Op.VIEW, view.src, shape, source.dtype, view.arg)
    (first, rows), height = span, source.size // int(np.prod(shape[1:], dtype=np.int64))
    axes = (Axis(start=first, stop=first + rows, extent=height), *(Axis(stop=n, extent=n) for n in shape[1:]))
    return Node(Op.VIEW, (source,), shape, source.dtype, axes)


def _reshaped(node: Node, shape) -> tuple[int, ...]:
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in shape):
        raise TracedValueError(f"{describe(node)}.reshape{shape}: a shape is made of ints, known when body() is traced.")
    if shape.count(-1) == 1:
        rest = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
        if rest and node.size % rest == 0:
            shape = tuple(node.size // rest if n == -1 else int(n) for n in shape)
    if any(n < 1 for n in shape) or int(np.prod(shape, dtype=np.int64)) != node.size:
        raise KernelTypeError(
            f"{describe(node)} of shape {node.shape} ({node.size} elements) cannot be reshaped to {shape}: "
            "give a shape with as many elements (one -1 is worked out)."
        )
    return tuple(int(n) for n in shape)


def _row_span(view: Node, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(first row, rows) when a static view is the contiguous elements [first * P, (first + rows)
    * P) of its tensor, P the size of one row of `shape`, and P divides the tensor; else None."""
    span = contiguous_span(view)
    if span is None or view.shape != kept_shape(view.arg):
        return None
    row = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
    if span[0] % row or view.src[0].size % row:
        return None
    return span[0] // row, span[1] // row
