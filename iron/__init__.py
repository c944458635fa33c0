"""iron: a Python DSL, compiler and runtime for dataflow designs on AMD Ryzen AI NPUs. Write a
`Graph` whose `body()` calls kernels on handles, check it with `graph.reference()`, `compile()`
it for the current device and run it one call at a time or as a `CarriedLoop`; this module
gathers those public names from the layers that define them.
"""
from iron import errors
from iron.dtypes import bfloat16
from iron.frontend.declarations import Param, State, Weight, param, state, weight
from iron.frontend.graph import Graph, graph
from iron.frontend.handles import (
    Carried,
    Carry,
    Scalar,
    Scratchpad,
    Tensor,
    carry,
    maximum,
    minimum,
)
from iron.kernels import Kernel, Role, Within, concat
from iron.runtime import compiled as _runtime  # noqa: F401  registers the runtime with the front end

min = minimum
max = maximum

__all__ = [
    "Carried",
    "CarriedLoop",
    "Carry",
    "Graph",
    "Kernel",
    "Param",
    "Role",
    "Scalar",
    "Scratchpad",
    "State",
    "Tensor",
    "Weight",
    "Within",
    "bfloat16",
    "carry",
    "concat",
    "errors",
    "graph",
    "max",
    "maximum",
    "min",
    "minimum",
    "param",
    "state",
    "weight",
]


def __getattr__(name):
    if name == "CarriedLoop":
        from iron.runtime.loop import CarriedLoop

        return CarriedLoop
    raise AttributeError(f"module 'iron' has no attribute {name!r}")
