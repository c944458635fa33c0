"""`iron.Graph` and `@iron.graph`: what a user subclasses or decorates, and calling it. A graph
finds its weights, params and states by attribute path, traces body() once per set of tensor
shapes, runs the numpy reference on its own host copy of the states, and hands compiling and
device calls to the runtime, which registers its entry here (`register_runtime`) when `iron` is
imported: the front end imports nothing above it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from iron.errors import ArgumentError, DeclarationError
from iron.frontend.arguments import (
    bind_call,
    bind_specs,
    checked_state_value,
    declared_name,
    require_values,
    shape_result,
    state_name,
)
from iron.frontend.declarations import Constants, Memory, Param, State, Weight, read_only_copy
from iron.frontend.trace import Signature, find_declarations, trace
from iron.ir import Program
from iron.names import identifier
from iron.reference import run


@dataclass(frozen=True)
class Runtime:
    """The runtime's entry for the front end (iron/runtime/compiled.py registers it)."""

    compile_graph: Callable       # (graph, specs, named_specs, device=, feeds=) -> a CompiledGraph
    compile_for_call: Callable    # (graph, tensors, values) -> the CompiledGraph for a call
    update_versions: Callable     # (graph, name, array): a new weight or param in every version


_runtime: Runtime | None = None   # importing `iron` registers it


def register_runtime(runtime: Runtime):
    global _runtime
    _runtime = runtime


@dataclass
class GraphState:
    """What a graph keeps beside its declarations: the host copy of its states, what it traced,
    and the runtime's own record of it (opaque here)."""

    states: dict[str, np.ndarray] | None = None    # the host copy, made on first use
    memories: dict[str, np.ndarray] | None = None  # every declaration's array by name, for reference()
    signature: Signature | None = None
    programs: dict[tuple, Program] = field(default_factory=dict)   # by tensor specs
    by_shapes: dict[tuple, Program] = field(default_factory=dict)  # by the (shape, dtype) of a call's tensors
    last_spec: dict | None = None
    constants: Constants = field(default_factory=Constants)  # numpy arrays body() passes to kernels
    runtime: Any = None


class Graph:
    """Subclass and write `__init__` (declarations) and `body()`. No super().__init__() needed."""

    def __init_subclass__(cls, **kwargs):
        """A graph's class name names its design (MLIR, C++ comments, the cache), so it is checked here."""
        super().__init_subclass__(**kwargs)
        identifier("a graph class's name", cls.__name__)

    def body(self, *args, **kwargs):  # pragma: no cover - replaced by every subclass
        raise DeclarationError(f"{type(self).__name__} defines no body(): write def body(self, ...).")

    @property
    def _iron(self) -> GraphState:
        """Made on first use: subclasses do not call super().__init__()."""
        try:
            return self.__dict__["_iron_state"]
        except KeyError:
            state = self.__dict__["_iron_state"] = GraphState()
            return state

    def __getstate__(self) -> dict:
        """What a copy or a pickle keeps: the declarations and the host copy of the states, not
        what was traced or compiled (it holds this graph's own arrays)."""
        kept = dict(self.__dict__)
        if "_iron_state" in kept:
            kept["_iron_state"] = GraphState(states=self._iron.states)
        return kept

    @property
    def _where(self) -> str:
        return f"{type(self).__name__}.body"

    def _body(self):
        return self.body

    def signature(self) -> Signature:
        if self._iron.signature is None:
            self._iron.signature = Signature(self._body(), self._where)
        return self._iron.signature

    # ---- tracing -------------------------------------------------------------------------------
    def trace(self, *specs, **named_specs) -> Program:
        """The Program of one call for tensor specs ((shape, dtype) per tensor parameter, or None);
        with no specs after a call, the shapes of the last call."""
        sig, state = self.signature(), self._iron
        if not specs and not named_specs and state.last_spec is not None and any(not opt for _, opt in sig.tensors):
            spec = state.last_spec  # a required tensor and no spec: the shapes of the last call
        else:
            spec = bind_specs(sig, specs, named_specs)
        state.last_spec = spec
        key = tuple(sorted(spec.items(), key=lambda kv: kv[0]))
        if key not in state.programs:
            state.programs[key] = trace(self, self._body(), self._where, spec, state.constants)
            state.memories = None   # the trace may have captured new constants
        return state.programs[key]

    # ---- states --------------------------------------------------------------------------------
    def _states(self) -> dict[str, np.ndarray]:
        state = self._iron
        if state.states is None:
            state.states = {mem.given_name or path: np.zeros(mem.shape, mem.dtype)
                            for path, mem in find_declarations(self) if isinstance(mem, State)}
        return state.states

    def _arrays(self) -> dict[str, np.ndarray]:
        state = self._iron
        if state.memories is None:
            declared = {mem.given_name or path: mem.array for path, mem in find_declarations(self) if not isinstance(mem, State)}
            state.memories = {**declared, **state.constants.arrays(), **self._states()}
        return state.memories

    def read(self, state) -> np.ndarray:
        """A copy of the host copy of `state` (a State or a public state's name), after reference()."""
        return self._states()[state_name(self, state)].copy()

    def write(self, state, value):
        """Set the host copy of `state` (reference path)."""
        name = state_name(self, state)
        target = self._states()[name]
        target[...] = checked_state_value(name, target, value)

    def update(self, memory, value):
        """Replace the values of a weight or param (same shape and dtype) in the reference and in
        every compiled version of this graph at once: the one way to change one after declaring it."""
        if not isinstance(memory, (Weight, Param)):
            raise ArgumentError(
                f"update() takes a weight or param of {type(self).__name__}, not {type(memory).__name__}: "
                "change a state with write()."
            )
        name = declared_name(self, memory)
        snapshot = read_only_copy(checked_state_value(name, memory.array, value, memory.kind))
        memory.array = snapshot
        self._iron.memories = None
        _runtime.update_versions(self, name, snapshot)

    def reset(self):
        """Zero every state's host copy."""
        for arr in self._states().values():
            arr[...] = 0

    # ---- calling -------------------------------------------------------------------------------
    def reference(self, *tensors, **values):
        """Run one call with numpy; updates the host copy of the states. Returns outputs, a Carry,
        or (outputs..., Carry)."""
        sig = self.signature()
        arrays, scalars = bind_call(sig, tensors, values)
        program = self._program_for(arrays)
        require_values(program, sig.where, scalars)
        inputs = [arrays[n.arg.name] for n in program.inputs]
        outputs, nxt = run(program, self._arrays(), inputs, scalars)
        return shape_result(program.returns, outputs, nxt)

    def _program_for(self, arrays: dict) -> Program:
        """The Program for a call's tensors, traced for their shapes and dtypes the first time."""
        shapes = tuple([None if a is None else (a.shape, a.dtype) for a in arrays.values()]) if arrays else ()
        programs = self._iron.by_shapes
        if shapes not in programs:
            programs[shapes] = self.trace(**arrays)
        return programs[shapes]

    def compile(self, *specs, device=None, feeds=None, **named_specs):
        """Compile for these tensor specs and the current (or given) device -> CompiledGraph."""
        return _runtime.compile_graph(self, specs, named_specs, device=device, feeds=feeds)

    def __call__(self, *tensors, **values):
        """Compile for these shapes (once) and run one call on the current device."""
        return _runtime.compile_for_call(self, tensors, values)(*tensors, **values)


class FunctionGraph(Graph):
    """A graph made by `@iron.graph` from a function; its declarations are the closure's."""

    def __init__(self, fn):
        identifier("@iron.graph function's name", getattr(fn, "__name__", None))
        self._fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        globs = {k: fn.__globals__[k] for k in fn.__code__.co_names if k in fn.__globals__}
        for name, value in {**globs, **cells}.items():
            if isinstance(value, (Memory, list, tuple, dict)):
                setattr(self, name, value)

    def _body(self):
        return self._fn

    @property
    def _where(self) -> str:
        return self._fn.__name__

    def body(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


def graph(fn) -> FunctionGraph:
    """Make a graph from a function whose weights and states are closed over."""
    return FunctionGraph(fn)


