"""The traced Program, iron's IR: one immutable `Node` type, either a per-call scalar expression
(`VAR`, `CONST`, arithmetic, `ELEM`) or a tensor (`INPUT`, `MEMORY`, `VIEW`, `CALL`), and the
`Program` that lists what one call of a graph does (its inputs, per-call values, declared
memories, kernel calls in program order, outputs and next carried values). It only describes,
and imports nothing above numpy.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class Op:
    """The node operations. Scalars are 32-bit integers; tensors have a shape and dtype."""

    VAR = "var"          # a per-call value: arg = (name, kind) with kind "carried" | "scratchpad"
    CONST = "const"      # arg = int
    ADD, SUB, MUL, FLOORDIV, MOD, MIN, MAX = "add", "sub", "mul", "floordiv", "mod", "min", "max"
    ELEM = "elem"        # the single element of a one-element tensor: src = (tensor,)
    INPUT = "input"      # a per-call tensor from the host: arg = (name, position)
    MEMORY = "memory"    # a declared weight / param / state: arg = (kind, name)
    VIEW = "view"        # part of a MEMORY: src = (memory, *dynamic indices), arg = Index
    CALL = "call"        # a kernel call: src = (*tensor inputs, [dest view], *scalar attrs), arg = Call


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
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class Axis:
    """How a VIEW picks along one axis of its memory: a fixed index, a slice [start, stop), or a
    per-call index (`dynamic` is the position of its scalar in the view's src, from 1) whose value
    v in [0, stop - start) picks element start + v."""

    index: int | None = None
    dynamic: int | None = None
    start: int = 0
    stop: int | None = None

    @property
    def keeps_axis(self) -> bool:
        return self.index is None and self.dynamic is None


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

    kind: str             # "weight" | "param" | "state"
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
    returns: str = "none"                    # "none" | "one" | "carry" | "tuple" (outputs..., [carry])
    unread: tuple[str, ...] = ()             # tensors and Scratchpad values given but not read: a call ignores them
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def carried_names(self) -> tuple[str, ...]:
        return tuple(v.arg[0] for v in self.scalars if v.arg[1] == "carried")

    @property
    def scratchpad_names(self) -> tuple[str, ...]:
        return tuple(v.arg[0] for v in self.scalars if v.arg[1] == "scratchpad")

    def declaration(self, name: str) -> Declaration:
        return next(d for d in self.declarations if d.name == name)


def describe(node: Node) -> str:
    """The user-facing text of a scalar expression or tensor (`steps + 1`, `trail[steps]`)."""
    if node.op == Op.VAR:
        return node.arg[0]
    if node.op == Op.CONST:
        return str(node.arg)
    if node.op in SCALAR_SYMBOL:
        return f"{_operand(node.src[0])} {SCALAR_SYMBOL[node.op]} {_operand(node.src[1])}"
    if node.op in (Op.MIN, Op.MAX):
        return f"{node.op}({describe(node.src[0])}, {describe(node.src[1])})"
    if node.op == Op.ELEM:
        return describe(node.src[0])
    if node.op == Op.INPUT:
        return node.arg[0]
    if node.op == Op.MEMORY:
        return node.arg[1]
    if node.op == Op.VIEW:
        parts = [_axis_text(a, node, n) for a, n in zip(node.arg, node.src[0].shape)]
        while parts and parts[-1] == ":":
            parts.pop()
        return f"{describe(node.src[0])}[{', '.join(parts) or ':'}]"
    c = node.arg
    return f"{c.kernel.__name__}({', '.join(describe(s) for s in node.src[:c.n_inputs])})"


def _operand(node: Node) -> str:
    text = describe(node)
    return f"({text})" if node.op in SCALAR_SYMBOL else text


def _axis_text(axis: Axis, view: Node, extent: int) -> str:
    if axis.index is not None:
        return str(axis.index)
    if axis.dynamic is not None:
        text = describe(view.src[axis.dynamic])
        return text if axis.start == 0 else f"{axis.start} + {text}"
    start = "" if axis.start == 0 else str(axis.start)
    return f"{start}:{'' if axis.stop == extent else axis.stop}"


def scalar_vars(node: Node) -> set[str]:
    """Names of the per-call values a scalar expression depends on."""
    if node.op == Op.VAR:
        return {node.arg[0]}
    out: set[str] = set()
    for s in node.src:
        if s.is_scalar:
            out |= scalar_vars(s)
    return out


# ---- what a kernel call reads and writes ---------------------------------------------------------

def tensor_inputs(call: Node) -> tuple[Node, ...]:
    """The tensors a call reads: its inputs, and its destination when it accumulates into it."""
    c = call.arg
    reads = call.src[: c.n_inputs]
    if c.writes and c.kernel.accumulates:
        reads = (*reads, call.src[c.n_inputs])
    return reads


def destination(call: Node) -> Node | None:
    """The view of a state a call writes (out=), or None."""
    return call.src[call.arg.n_inputs] if call.arg.writes else None


def external_inputs(calls) -> list[Node]:
    """Distinct tensors the calls read that none of them computes, in first-use order."""
    made = set(calls)
    return list(dict.fromkeys(n for call in calls for n in tensor_inputs(call) if n not in made))


def is_host_tensor(node: Node) -> bool:
    """An input, a declared memory or a view of one: a tensor the host holds."""
    return node.op in (Op.INPUT, Op.MEMORY, Op.VIEW)


def is_gather(node: Node) -> bool:
    """A view picked through a per-call index."""
    return node.op == Op.VIEW and any(a.dynamic is not None for a in node.arg)


def storage(node: Node) -> Node:
    """The tensor whose data `node` is: a view's base (a memory, an input, a call's result), else itself."""
    return node.src[0] if node.op == Op.VIEW else node


def state_of(node: Node) -> str | None:
    """The name of the state a tensor is (or is a view of), or None."""
    memory = storage(node)
    return memory.arg[1] if memory.op == Op.MEMORY and memory.arg[0] == "state" else None


def region(node: Node) -> tuple[tuple[int, int], ...]:
    """Where a tensor may lie in its storage: [lo, hi) along each of the storage's axes. A per-call
    index may pick anywhere in its range, so its axis spans the whole range."""
    if node.op != Op.VIEW:
        return tuple((0, n) for n in node.shape)
    return tuple((a.index, a.index + 1) if a.index is not None else (a.start, a.stop) for a in node.arg)


def overlap(a: Node, b: Node) -> bool:
    """Whether two tensors of one storage may share an element: their regions meet on every axis."""
    return all(lo < b_hi and b_lo < hi for (lo, hi), (b_lo, b_hi) in zip(region(a), region(b)))


def nbytes(node: Node) -> int:
    return node.size * node.dtype.itemsize


def call_label(program: Program, call: Node) -> str:
    """`Copy#1`: the kernel and the call's position in the body, as errors name calls."""
    index = next(i for i, c in enumerate(program.calls) if c is call)
    return f"{call.arg.kernel.__name__}#{index}"
