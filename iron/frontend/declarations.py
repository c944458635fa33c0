"""Declared memories, `iron.weight`, `iron.param` and `iron.state`: a weight is a constant table
read through a per-call index (`w[node]`), a param a constant tensor used whole as a kernel
operand, a state device-resident memory that persists across calls. Each carries its data
(weights, params) or its shape (states) and is named at trace time by the attribute path that
reaches it; numpy arrays body() passes to kernels are captured as params (`Constants`).
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import DeclarationError
from iron.frontend import shapes
from iron.frontend.handles import Tensor, index_view
from iron.ir import MemoryKind, Node
from iron.names import identifier


class Memory:
    """A declared weight, param or state. `name` is set when a graph is traced."""

    kind = ""

    def __init__(self, shape, dtype, name=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        self.given_name = name
        self.graph: str | None = None     # the graph that traced it last, named in errors
        self.node: Node | None = None

    @property
    def public(self) -> bool:
        return self.given_name is not None

    def __getitem__(self, index):
        return Tensor(index_view(self._traced_node(), index))

    def reshape(self, *shape) -> Tensor:
        """The whole memory read as `shape` (row-major), inside body()."""
        return Tensor(self._traced_node()).reshape(*shape)

    def _traced_node(self) -> Node:
        if self.node is None:
            raise DeclarationError(
                f"{self.kind} {self.name or '(unnamed)'} is used outside a traced body(): "
                "index weights, params and states only inside body(), and declare them as attributes "
                f"of the graph (self.x = iron.{self.kind}(...)) so iron can find them."
            )
        return self.node

    def __repr__(self):
        return f"<iron.{self.kind} {self.name or '(unnamed)'}: {self.shape} {dtypes.name(self.dtype)}>"


class Weight(Memory):
    """A constant table read through a per-call index."""

    kind = MemoryKind.WEIGHT

    def __init__(self, array):
        self.array = _checked_array(array, "weight")
        super().__init__(self.array.shape, self.array.dtype)


class Param(Memory):
    """A constant tensor used whole as a kernel operand."""

    kind = MemoryKind.PARAM

    def __init__(self, array):
        self.array = _checked_array(array, "param")
        super().__init__(self.array.shape, self.array.dtype)


class State(Memory):
    """Device-resident memory that persists across calls (zeros at first)."""

    kind = MemoryKind.STATE


def _checked_array(array, kind) -> np.ndarray:
    """A read-only copy of `array`, taken at declaration: later changes to the caller's array do
    not reach the graph (Graph.update changes a weight or param, everywhere at once)."""
    try:
        arr = np.asarray(array)
    except ValueError:   # nested lists of unequal lengths: numpy makes no array of them
        raise DeclarationError(
            f"iron.{kind}() got a {type(array).__name__} that is not one rectangular array: give a numpy "
            "array, or nested lists whose rows all have the same length."
        ) from None
    if dtypes.as_dtype(arr.dtype) is None:
        raise DeclarationError(
            f"iron.{kind}() got an array of dtype {arr.dtype}: supported dtypes are "
            f"{dtypes.supported_text()}. Convert it first, e.g. array.astype(np.float32)."
        )
    if arr.ndim == 0:
        raise DeclarationError(f"iron.{kind}() got a 0-d array: give it at least one axis, e.g. np.array([x]).")
    shapes.checked_shape(f"the array given to iron.{kind}()", arr.shape)
    shapes.fits_device(f"the array given to iron.{kind}()", arr.shape, arr.dtype)
    return read_only_copy(arr)


def read_only_copy(arr: np.ndarray) -> np.ndarray:
    snapshot = np.array(arr, order="C", copy=True)
    snapshot.flags.writeable = False
    return snapshot


class Constants:
    """The numpy arrays a graph's body() passes straight to kernels, as IRON designs do with
    their weights: each is captured once, the first time a trace uses it, as a param holding a
    copy of it (so the reference and the device see the values of that moment) and named
    `const<i>`, a name no declaration of the graph takes."""

    def __init__(self):
        self._by_id: dict[int, tuple[np.ndarray, Param]] = {}   # keeps the array alive: ids stay unique

    def param(self, array: np.ndarray, taken: set[str]) -> Param:
        found = self._by_id.get(id(array))
        if found is not None:
            return found[1]
        captured = Param(array)   # a read-only copy
        names = taken | {p.name for _, p in self._by_id.values()}
        captured.name = next(f"const{i}" for i in range(len(names) + 1) if f"const{i}" not in names)
        self._by_id[id(array)] = (array, captured)
        return captured

    def arrays(self) -> dict[str, np.ndarray]:
        return {p.name: p.array for _, p in self._by_id.values()}


def weight(array) -> Weight:
    """Declare a constant table read through a per-call index (`self.emb[tok]`)."""
    return Weight(array)


def param(array) -> Param:
    """Declare a constant tensor used whole as a kernel operand (a matrix for MatVec)."""
    return Param(array)


def state(shape, dtype=dtypes.bfloat16, name: str | None = None) -> State:
    """Declare device-resident memory that persists across calls (bfloat16 unless `dtype` says
    otherwise, as in IRON); `name=` makes it public."""
    if name is not None:
        identifier("iron.state(name=...)", name)
    what = f"iron.state({shape!r}, ...)" if name is None else f"iron.state(name='{name}')"
    shape = shapes.checked_shape(what, shape)
    if not shape:
        raise DeclarationError(f"{what} has shape (): give a state at least one axis, e.g. (1,).")
    if dtypes.as_dtype(dtype) is None:
        raise DeclarationError(
            f"iron.state(..., {dtype!r}): supported dtypes are {dtypes.supported_text()}."
        )
    shapes.within_budget(what, shapes.fits_device(what, shape, dtype))
    return State(shape, dtype, name)
