"""The traced Program, iron's IR: one immutable `Node` type, either a per-call scalar expression
(`VAR`, `CONST`, arithmetic, `ELEM`) or a tensor (`INPUT`, `MEMORY`, `VIEW`, `CALL`), and the
`Program` that lists what one call of a graph does (its inputs, per-call values, declared
memories, kernel calls in program order, outputs and next carried values). It only describes,
and imports nothing above numpy.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np


class Op:
    """The node operations. Scalars are 32-bit integers; tensors have a shape and dtype."""

    VAR = "var"          # a per-call value: arg = Var
    CONST = "const"      # arg = int
    ADD, SUB, MUL, FLOORDIV, MOD, MIN, MAX = "add", "sub", "mul", "floordiv", "mod", "min", "max"
    ELEM = "elem"        # the single element of a one-element tensor: src = (tensor,)
    INPUT = "input"      # a per-call tensor from the host: arg = Input
    MEMORY = "memory"    # a declared weight / param / state: arg = Declared
    VIEW = "view"        # part of an INPUT, MEMORY or CALL result: src = (tensor, *per-call indices), arg = tuple[Axis]
    CALL = "call"        # a kernel call: src = (*tensor inputs, [dest view], *scalar attrs), arg = Call


class Term(Enum):
    """An enum of iron's (the IR's, the Plan's, the rules'); a member reads as its value in
    messages ("state", "shim", "mm2s")."""

    __hash__ = object.__hash__   # members are singletons: hash them as such (Tiles key many dicts)

    def __str__(self) -> str:
        return self.value


class Returns(Term):
    """What body() returned, so that a call returns the same shape."""

    NONE = "none"      # nothing
    ONE = "one"        # one tensor
    CARRY = "carry"    # iron.carry(...) alone
    TUPLE = "tuple"    # a tuple: the outputs, then iron.carry(...) if the body carries


class VarKind(Term):
    """Where a per-call value comes from."""

    CARRIED = "carried"        # the previous call's iron.carry(...)
    SCRATCHPAD = "scratchpad"  # the host, every call


class MemoryKind(Term):
    """What a declared memory (a MEMORY node, a Declaration) is."""

    WEIGHT = "weight"
    PARAM = "param"
    STATE = "state"
    THROUGH = "through"   # the compiler's own DDR buffer, a state no user sees (through_ddr.py)


@dataclass(frozen=True)
class Var:
    """A VAR node's arg: the per-call value's name and where it comes from."""

    name: str
    kind: VarKind


@dataclass(frozen=True)
class Input:
    """An INPUT node's arg: the per-call tensor's name and its position among body()'s tensors
    (-1: a value crossing a cut between segments, which the compiler makes an input)."""

    name: str
    position: int


@dataclass(frozen=True)
class Declared:
    """A MEMORY node's arg: what the declared memory is and its name."""

    kind: MemoryKind
    name: str


SCALAR_BINARY = {  # Python's own: // and % round toward minus infinity
    Op.ADD: operator.add,
    Op.SUB: operator.sub,
    Op.MUL: operator.mul,
    Op.FLOORDIV: operator.floordiv,
    Op.MOD: operator.mod,
    Op.MIN: min,
    Op.MAX: max,
}
SCALAR_SYMBOL = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.FLOORDIV: "//", Op.MOD: "%"}
SCALAR_OPS = frozenset({Op.VAR, Op.CONST, Op.ELEM, *SCALAR_BINARY})


def wrap_i32(value: int) -> int:
    """Two's-complement wrap of a Python int to int32, as the device's 32-bit words do."""
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


@dataclass(frozen=True, eq=False)
class Node:
    """One immutable IR node. Identity is equality: a node is the value it computes."""

    op: str
    src: tuple[Node, ...] = ()
    shape: tuple[int, ...] = ()
    dtype: np.dtype = np.dtype(np.int32)
    arg: Any = None

    @property
    def is_scalar(self) -> bool:
        return self.op in SCALAR_OPS

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))   # math.prod: asked for every tensor of every pass


@dataclass(frozen=True)
class Axis:
    """How a VIEW picks along one axis of its tensor (seen as its frame, `extent` per axis, when
    the view reshapes it): a fixed index, a slice [start, stop), or a per-call index (`dynamic`
    is the position of its scalar in the view's src, from 1) whose value v picks element
    start + v (v in [0, stop - start)), or, with a `length` k, the slice [start + v, start + v + k)
    (a per-call slice `cache[pos:pos + k]`, v in [0, stop - start - k])."""

    index: int | None = None
    dynamic: int | None = None
    start: int = 0
    stop: int | None = None
    length: int | None = None
    extent: int | None = None   # the axis's size in the frame the view indexes (None: its tensor's own)
    step: int = 1               # a static slice's step (`x[:, ::2]`), or 0: element `start` broadcast `length` times
    order: int | None = None    # where a kept axis lies among the view's axes (`x.T`), None: in frame order

    @property
    def keeps_axis(self) -> bool:
        return self.index is None and (self.dynamic is None or self.length is not None)

    @property
    def size(self) -> int:
        """How many elements a kept axis keeps."""
        if self.length is not None:
            return self.length
        return len(range(self.start, self.stop, self.step))

    @property
    def count(self) -> int:
        """How many elements of this axis the view picks: 1 for an index, else `size`."""
        return 1 if self.index is not None or not self.keeps_axis else self.size

    @property
    def offsets(self) -> int:
        """How many values a per-call index or slice start may take: it must lie in [0, offsets)."""
        return self.stop - self.start - (self.length or 1) + 1


@dataclass(frozen=True)
class Call:
    """A kernel call's static part: the kernel class, its static attrs, how many tensor inputs,
    whether the last tensor input is the destination it writes, and its per-call attr names."""

    kernel: type
    attrs: tuple[tuple[str, Any], ...]
    n_inputs: int
    writes: bool
    scalar_attrs: tuple[str, ...] = ()

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True)
class Declaration:
    """A declared memory as the Program sees it (the data itself stays with the graph)."""

    kind: MemoryKind
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    public: bool = False  # a state given name= is public: read/write by that name


@dataclass(frozen=True)
class Program:
    """One traced call of a graph."""

    name: str
    inputs: tuple[Node, ...]                 # INPUT nodes read, in parameter order (absent or unread ones left out)
    scalars: tuple[Node, ...]                # VAR nodes, in parameter order: every Carried one, the Scratchpad ones read
    declarations: tuple[Declaration, ...]    # every weight / param / state of the graph
    memories: tuple[Node, ...]               # MEMORY nodes, one per declaration, same order
    calls: tuple[Node, ...]                  # CALL nodes in program order
    outputs: tuple[Node, ...]                # tensor outputs, in return order
    carry: tuple[tuple[str, Node], ...]      # next carried values, in parameter order
    returns: Returns = Returns.NONE
    unread: tuple[str, ...] = ()             # tensors and Scratchpad values given but not read: a call ignores them
    inserted: tuple[Node, ...] = ()          # calls the compiler inserted (iron/compiler/copies.py), among `calls`
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def carried_names(self) -> tuple[str, ...]:
        return tuple(v.arg.name for v in self.scalars if v.arg.kind is VarKind.CARRIED)

    @property
    def scratchpad_names(self) -> tuple[str, ...]:
        return tuple(v.arg.name for v in self.scalars if v.arg.kind is VarKind.SCRATCHPAD)

    def declaration(self, name: str) -> Declaration:
        return next(d for d in self.declarations if d.name == name)

    @cached_property
    def carried_calls(self) -> tuple[Node, ...]:
        """The calls whose element is a next carried value, once each."""
        return tuple(dict.fromkeys(v.src[0] for _, v in self.carry if v.op == Op.ELEM))

    @cached_property
    def kept(self) -> frozenset[Node]:
        """The results the host reads: the outputs and the carried elements."""
        return frozenset((*self.outputs, *self.carried_calls))

    @cached_property
    def call_index(self) -> dict[Node, int]:
        """Each call's number in its label (looked up by every error and rule text naming a call):
        its position among the body's own calls, then the calls the compiler inserted, in order,
        so that inserting one renames none of the body's."""
        inserted = set(self.inserted)
        own = [c for c in self.calls if c not in inserted]
        return {c: i for i, c in enumerate((*own, *self.inserted))}


CALL_DEPTH = 3   # calls nested deeper are `Kernel(...)`: a layer's value printed whole would repeat its DAG


def describe(node: Node, depth: int = CALL_DEPTH) -> str:
    """The user-facing text of a scalar expression or tensor (`steps + 1`, `trail[steps]`)."""
    if node.op == Op.VAR:
        return node.arg.name
    if node.op == Op.CONST:
        return str(node.arg)
    if node.op in SCALAR_SYMBOL:
        return f"{_operand(node.src[0], depth)} {SCALAR_SYMBOL[node.op]} {_operand(node.src[1], depth)}"
    if node.op in (Op.MIN, Op.MAX):
        return f"{node.op}({describe(node.src[0], depth)}, {describe(node.src[1], depth)})"
    if node.op == Op.ELEM:
        return describe(node.src[0], depth)
    if node.op in (Op.INPUT, Op.MEMORY):
        return node.arg.name
    if node.op == Op.VIEW:
        return _view_text(node, depth)
    c = node.arg
    if depth == 0:
        return f"{c.kernel.__name__}(...)"
    per_call = {name: describe(value, depth - 1) for name, value in dynamic_attrs(node)}
    operands = [describe(s, depth - 1) for s in node.src[:c.n_inputs]]
    return c.kernel.describe_call(operands, c.attr_dict | per_call, node.src[0].dtype)


def _operand(node: Node, depth: int) -> str:
    text = describe(node, depth)
    return f"({text})" if node.op in SCALAR_SYMBOL else text


def _view_text(view: Node, depth: int) -> str:
    """`y[2:6]`, `cache[pos:pos + 4]`, `y.reshape(2, 4)[1]`, `x[0, 2:4].reshape(2, 1)`."""
    source, shape = view.src[0], frame(view)
    text = describe(source, depth)
    if any(a.step == 0 for a in view.arg):
        return f"broadcast_to({_unbroadcast_text(view, depth)}, {view.shape})"
    text = text if shape == source.shape else f"{text}.reshape{shape}"
    parts = [_axis_text(a, view, n) for a, n in zip(view.arg, shape)]
    while parts and parts[-1] == ":":
        parts.pop()
    if parts:
        text += f"[{', '.join(parts)}]"
    elif shape == source.shape:
        text += "[:]"
    order = tuple(a.order for a in view.arg if a.keeps_axis)
    if any(i is not None for i in order):
        text = text.removesuffix("[:]")
        axes = tuple(sorted(range(len(order)), key=lambda i: order[i]))   # numpy's: output axis j is frame axis axes[j]
        text += ".T" if axes == tuple(reversed(range(len(order)))) else f".transpose{axes}"
    return text if view.shape == kept_shape(view.arg) else f"{text}.reshape{view.shape}"


def _unbroadcast_text(view: Node, depth: int) -> str:
    """The text of what a broadcast view repeats: its axes without the leading ones broadcasting
    added and with its repeated axes of one element."""
    lead = next((i for i, a in enumerate(view.arg) if not (a.step == 0 and a.extent == 1)), len(view.arg))
    rest = tuple(replace(a, step=1, length=None) if a.step == 0 else a for a in view.arg[lead:])
    if all(a.index is None and a.start == 0 and a.stop == a.extent and a.step == 1 for a in rest) \
            and tuple(a.extent for a in rest) == view.src[0].shape:
        return describe(view.src[0], depth)
    return describe(Node(Op.VIEW, view.src, kept_shape(rest), view.dtype, rest), depth)


def _axis_text(axis: Axis, view: Node, extent: int) -> str:
    if axis.index is not None:
        return str(axis.index)
    if axis.dynamic is not None:
        text = describe(view.src[axis.dynamic])
        text = text if axis.start == 0 else f"{axis.start} + {text}"
        return text if axis.length is None else f"{text}:{text} + {axis.length}"
    if axis.step == 0:
        return f"{axis.start}:{axis.start + 1}"
    start = "" if axis.start == 0 else str(axis.start)
    step = "" if axis.step == 1 else f":{axis.step}"
    to_end = len(range(axis.start, extent, axis.step)) == axis.size
    return f"{start}:{'' if to_end else axis.stop}{step}"


def scalar_vars(node: Node) -> set[str]:
    """Names of the per-call values a scalar expression depends on."""
    if node.op == Op.VAR:
        return {node.arg.name}
    out: set[str] = set()
    for s in node.src:
        if s.is_scalar:
            out |= scalar_vars(s)
    return out


# ---- what a kernel call reads and writes ---------------------------------------------------------

def tensor_inputs(call: Node) -> tuple[Node, ...]:
    """The tensors a call reads: its inputs (for a view of a computed tensor, the call computing
    it), and its destination when it accumulates into it."""
    c = call.arg
    reads = tuple(storage(n) if is_computed_view(n) else n for n in call.src[: c.n_inputs])
    if c.writes and c.kernel.accumulates:
        reads = (*reads, call.src[c.n_inputs])
    return reads


def destination(call: Node) -> Node | None:
    """The view of a state a call writes (out=), or None."""
    return call.src[call.arg.n_inputs] if call.arg.writes else None


def written_span(call: Node) -> tuple[Node, int] | None:
    """(state, first element) when a call writes one contiguous run of a state (out= the state,
    or a view with no per-call index picking a run, row-major), else None."""
    dest = destination(call)
    if dest is None or state_of(dest) is None:
        return None
    if dest.op != Op.VIEW:
        return dest, 0
    span = contiguous_span(dest)
    return (dest.src[0], span[0]) if span is not None else None


def state_written_whole(call: Node) -> Node | None:
    """The state a call writes whole (out= the state, or a view of all of it), or None."""
    span = written_span(call)
    return span[0] if span is not None and span[1] == 0 and span[0].size == call.size else None


def input_dtypes(call: Node) -> tuple[np.dtype, ...]:
    """The dtype of each tensor input of a call (they differ in a mixed call: uint8 x int8)."""
    return tuple(n.dtype for n in call.src[: call.arg.n_inputs])


def dynamic_attrs(call: Node) -> list[tuple[str, Node]]:
    """(attribute, per-call value) of each attribute a call takes per call (Softmax's length)."""
    c = call.arg
    return list(zip(c.scalar_attrs, call.src[c.n_inputs + c.writes:]))


def external_inputs(calls) -> list[Node]:
    """Distinct tensors the calls read that none of them computes, in first-use order."""
    made = set(calls)
    return list(dict.fromkeys(n for call in calls for n in tensor_inputs(call) if n not in made))


def is_host_tensor(node: Node) -> bool:
    """An input, a declared memory or a view of one: a tensor the host holds."""
    return storage(node).op in (Op.INPUT, Op.MEMORY)


def is_computed_view(node: Node) -> bool:
    """A view of a tensor a kernel call of the same body computes (`y[4:]`, `y.reshape(2, 4)`)."""
    return node.op == Op.VIEW and node.src[0].op == Op.CALL


def static_index(view: Node) -> tuple:
    """The numpy index a VIEW without per-call indices takes of its tensor seen as its frame
    (a broadcast axis picks its one element, `arranged` repeats it)."""
    return tuple(a.index if a.index is not None else slice(a.start, a.start + 1) if a.step == 0
                 else slice(a.start, a.stop, a.step) for a in view.arg)


def kept(axes) -> list[Axis]:
    """A view's kept axes in the order its shape lists them (`x.T`: the frame's last first)."""
    mine = [a for a in axes if a.keeps_axis]
    return sorted(mine, key=lambda a: a.order) if any(a.order is not None for a in mine) else mine


def kept_shape(axes) -> tuple[int, ...]:
    """The shape a view's axes pick, before any reshape of the view."""
    return tuple(a.size for a in kept(axes))


def arranged(view: Node, picked):
    """`picked` (the frame indexed by `static_index`/the reference's index, kept axes in frame
    order) as the view arranges it: broadcast axes repeated, kept axes in the view's order."""
    mine = [a for a in view.arg if a.keeps_axis]
    if any(a.step == 0 for a in mine):
        picked = np.broadcast_to(picked, tuple(a.size for a in mine))
    if any(a.order is not None for a in mine):
        picked = picked.transpose(sorted(range(len(mine)), key=lambda i: mine[i].order))
    return picked


def is_strided(view: Node) -> bool:
    """A view with a step, a broadcast or its axes in another order (kept axes of one element aside)."""
    return view.op == Op.VIEW and any(a.step != 1 or a.order is not None for a in view.arg if a.count > 1)


def is_gather(node: Node) -> bool:
    """A view picked through a per-call index."""
    return node.op == Op.VIEW and any(a.dynamic is not None for a in node.arg)


def storage(node: Node) -> Node:
    """The tensor whose data `node` is: a view's base (a memory, an input, a call's result), else itself."""
    return node.src[0] if node.op == Op.VIEW else node


def state_of(node: Node) -> str | None:
    """The name of the state a tensor is (or is a view of), or None."""
    memory = storage(node)
    return memory.arg.name if memory.op == Op.MEMORY and memory.arg.kind in (MemoryKind.STATE, MemoryKind.THROUGH) else None


def frame(view: Node) -> tuple[int, ...]:
    """The shape a VIEW's axes index: its tensor's, or another of the same size (a reshape)."""
    extents = []
    for axis in view.arg:  # a loop, not any(): reference() asks for every view of every call
        if axis.extent is None:
            return view.src[0].shape
        extents.append(axis.extent)
    return tuple(extents)


def region(node: Node) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """(frame, where a tensor may lie in its storage seen as that frame: [lo, hi) per axis). A
    per-call index may pick anywhere in its range, so its axis spans the whole range."""
    if node.op != Op.VIEW:
        return node.shape, tuple((0, n) for n in node.shape)
    spans = tuple((a.index, a.index + 1) if a.index is not None else (a.start, a.stop) for a in node.arg)
    return frame(node), spans


def overlap(a: Node, b: Node) -> bool:
    """Whether two tensors of one storage may share an element: their regions meet on every axis.
    Seen in different frames (a reshape), static views share an element when their element sets
    do; with a per-call index they are assumed to."""
    (frame_a, spans_a), (frame_b, spans_b) = region(a), region(b)
    if frame_a == frame_b:
        return all(lo < b_hi and b_lo < hi for (lo, hi), (b_lo, b_hi) in zip(spans_a, spans_b))
    if is_gather(a) or is_gather(b):
        return True
    return bool(np.intersect1d(elements(a), elements(b)).size)


def elements(node: Node) -> np.ndarray:
    """The row-major positions in its storage of a tensor's elements (a static view's, or all)."""
    every = np.arange(storage(node).size)
    return every if node.op != Op.VIEW else arranged(node, every.reshape(frame(node))[static_index(node)]).ravel()


def contiguous_span(view: Node) -> tuple[int, int] | None:
    """(first element, count) when a VIEW without per-call indices picks one contiguous run of its
    tensor (row-major), else None: past the first axis picking more than one element, every
    axis is whole."""
    if len(view.src) > 1 or is_strided(view):
        return None
    shape = frame(view)
    counts = [a.count for a in view.arg]
    first = next((i for i, n in enumerate(counts) if n > 1), len(counts))
    if any(n != extent for n, extent in zip(counts[first + 1:], shape[first + 1:])):
        return None
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    start = sum((a.index if a.index is not None else a.start) * st for a, st in zip(view.arg, strides))
    return start, math.prod(counts)


def element_pattern(view: Node) -> tuple[int, list[tuple[int, int]]]:
    """(first element, (size, stride) per dimension, outermost first) of a static VIEW's elements in
    its tensor seen flat: its kept axes in the view's order, each stride its step times the
    frame's, dimensions that together run on merged."""
    shape = frame(view)
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    first = sum((a.index if a.index is not None else a.start) * st for a, st in zip(view.arg, strides))
    at = {id(a): st for a, st in zip(view.arg, strides)}
    dims: list[tuple[int, int]] = []
    for a in kept(view.arg):
        size, stride = a.size, a.step * at[id(a)]
        if size == 1:
            continue
        if dims and dims[-1][1] == size * stride:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    return first, dims or [(1, 1)]


def nbytes(node: Node) -> int:
    return node.size * node.dtype.itemsize


def call_label(program: Program, call: Node) -> str:
    """`Copy#1`: the kernel and the call's position in the body, as errors name calls."""
    return f"{call.arg.kernel.__name__}#{program.call_index[call]}"
