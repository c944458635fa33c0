"""Remembering what the compiler computes of a kernel call by its structure: a 30-layer model
traces the same MatVec 30 times, and the rules sizing it ask the cost model thousands of times
for each. `by_shape` keeps a function's results by the `CallShape`s of its node arguments, and
gives a later call the result computed for the first node of the same shape, rebound to its own
nodes by the function's `rebind`."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache, wraps
from typing import Any, Callable

import numpy as np

from iron.ir import Node

MOST_KEPT = 4096   # results per function: distinct shapes are few, the dictionaries stay small


@dataclass(frozen=True)
class CallShape:
    """A kernel call as sizing rules see it: two calls alike here get the same grid and sides."""

    kernel: type
    attrs: tuple[tuple[str, Any], ...]
    operands: tuple[tuple[tuple[int, ...], np.dtype], ...]
    shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def of(cls, call: Node) -> CallShape:
        return cls(call.arg.kernel, call.arg.attrs, tuple((s.shape, s.dtype) for s in call.src), call.shape, call.dtype)


@dataclass(frozen=True)
class _Keyed:
    """A node as a cache key: equal and hashed by its CallShape, carrying the node itself."""

    shape: CallShape
    node: Node = field(compare=False, hash=False)


def by_shape(rebind: Callable[..., Any]) -> Callable:
    """Decorate a function of kernel-call nodes and hashable arguments whose result depends on
    the nodes only through their CallShapes: its results are kept, `rebind(result, *args)` giving
    a kept result the nodes of this call (a node whose attrs do not hash is computed each time)."""
    def decorate(function: Callable) -> Callable:
        @lru_cache(maxsize=MOST_KEPT)
        def kept(*keyed):
            return function(*(a.node if isinstance(a, _Keyed) else a for a in keyed))

        @wraps(function)
        def remembered(*args):
            keyed = tuple(_Keyed(CallShape.of(a), a) if isinstance(a, Node) else a for a in args)
            try:
                hash(keyed)
            except TypeError:
                return function(*args)
            return rebind(kept(*keyed), *args)
        return remembered
    return decorate
