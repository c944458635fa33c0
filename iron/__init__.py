"""iron: a Python DSL, compiler and runtime for dataflow designs on AMD Ryzen AI NPUs.

Write a `Graph` whose `body()` calls kernels on handles, check it with `graph.reference()`,
`compile()` it for the current device and run it one call at a time or as a `CarriedLoop`.
"""
from iron import errors
from iron.dtypes import bfloat16
from iron.frontend.declarations import Param, State, Weight, param, state, weight
from iron.frontend.graph import Graph, graph
from iron.frontend.handles import Carried, Carry, Scalar, Scratchpad, Tensor, carry, maximum, minimum
from iron.kernels import Kernel

min = minimum  # noqa: A001 - iron.min(a, b) builds a device-side minimum
max = maximum  # noqa: A001

__all__ = [
    "Graph", "graph", "weight", "param", "state", "Weight", "Param", "State", "Carried",
    "Scratchpad", "Carry", "carry", "Scalar", "Tensor", "Kernel", "min", "max", "minimum",
    "maximum", "bfloat16", "errors", "CarriedLoop",
]


def __getattr__(name):
    if name == "CarriedLoop":
        from iron.runtime.loop import CarriedLoop

        return CarriedLoop
    raise AttributeError(f"module 'iron' has no attribute {name!r}")
