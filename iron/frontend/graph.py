"""`iron.Graph` and `@iron.graph`: what a user subclasses or decorates, and calling it.

A Graph finds its weights, params and states by attribute path, traces body() once per set of
tensor shapes (a Python value is decided once, at trace time), runs the numpy reference with its
own host copy of the states, and compiles. Binding and checking a call's arguments lives here so
the reference and compiled graphs refuse bad input with the same words. Compiling and running on
a device are delegated to iron.compiler and iron.runtime.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import ArgumentError, DeclarationError
from iron.frontend import shapes
from iron.frontend.declarations import Constants, Memory, Param, State, Weight, read_only_copy
from iron.frontend.handles import Carry
from iron.frontend.trace import Signature, find_declarations, trace
from iron.ir import Program
from iron.names import identifier
from iron.reference import Reference

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


class Graph:
    """Subclass and write `__init__` (declarations) and `body()`. No super().__init__() needed."""

    def __init_subclass__(cls, **kwargs):
        """A graph's class name names its design (MLIR, C++ comments, the cache), so it is checked here."""
        super().__init_subclass__(**kwargs)
        identifier("a graph class's name", cls.__name__)

    def body(self, *args, **kwargs):  # pragma: no cover - replaced by every subclass
        raise DeclarationError(f"{type(self).__name__} defines no body(): write def body(self, ...).")

    # ---- internal state, made lazily (subclasses do not call super().__init__) -------------------
    @property
    def _iron(self) -> dict:
        try:
            return self.__dict__["_iron_state"]
        except KeyError:
            d = self.__dict__["_iron_state"] = fresh_iron_state(None)
            return d

    def __getstate__(self) -> dict:
        """What a copy or a pickle keeps: the declarations and the host copy of the states, not
        the traced, lowered and compiled versions (they hold this graph's own arrays)."""
        kept = {k: v for k, v in self.__dict__.items() if k not in ("_iron_state", "_iron_quick_reference")}
        if "_iron_state" in self.__dict__:
            kept["_iron_state"] = fresh_iron_state(self._iron["states"])
        return kept

    @property
    def _where(self) -> str:
        return f"{type(self).__name__}.body"

    def _body(self):
        return self.body

    def signature(self) -> Signature:
        try:
            return self.__dict__["_iron_signature"]
        except KeyError:
            sig = self.__dict__["_iron_signature"] = Signature(self._body(), self._where)
            return sig

    # ---- tracing -------------------------------------------------------------------------------
    def trace(self, *specs, **named_specs) -> Program:
        """The Program of one call for tensor specs ((shape, dtype) per tensor parameter, or None);
        with no specs after a call, the shapes of the last call."""
        sig = self.signature()
        if not specs and not named_specs and "last_spec" in self._iron and any(not opt for _, opt in sig.tensors):
            spec = self._iron["last_spec"]  # a required tensor and no spec: the shapes of the last call
        else:
            spec = bind_specs(sig, self._where, specs, named_specs)
        self._iron["last_spec"] = spec
        key = tuple(sorted(spec.items(), key=lambda kv: kv[0]))
        programs = self._iron["programs"]
        if key not in programs:
            programs[key] = trace(self, self._body(), self._where, spec, self._iron["constants"])
        return programs[key]

    # ---- states --------------------------------------------------------------------------------
    def _states(self) -> dict[str, np.ndarray]:
        if self._iron["states"] is None:
            self._iron["states"] = {}
            for path, mem in find_declarations(self):
                if isinstance(mem, State):
                    self._iron["states"][mem.given_name or path] = np.zeros(mem.shape, mem.dtype)
        return self._iron["states"]

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = dict(self._states())
        for path, mem in find_declarations(self):
            if not isinstance(mem, State):
                arrays[path] = mem.array
        arrays.update(self._iron["constants"].arrays())
        return arrays

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
        self._iron["references"].clear()
        self.__dict__.pop("_iron_quick_reference", None)
        for compiled in self._iron["compiled"].values():
            compiled.update(name, snapshot)

    def reset(self):
        """Zero every state's host copy."""
        for arr in self._states().values():
            arr[...] = 0

    # ---- calling -------------------------------------------------------------------------------
    def reference(self, *tensors, **values):
        """Run one call with numpy; updates the host copy of the states. Returns outputs, a Carry,
        or (outputs..., Carry)."""
        quick = self.__dict__.get("_iron_quick_reference")
        if quick is not None and not tensors:
            result = quick(values)
            if result is not FULL_CHECK:
                return result
        sig = self.signature()
        arrays, scalars = bind_call(sig, sig.where, tensors, values)
        key = tuple(None if a is None else (a.shape, a.dtype) for a in arrays.values()) if arrays else ()
        ref = self._iron["references"].get(key)
        if ref is None:
            program = self.trace(**{n: None if a is None else (a.shape, a.dtype) for n, a in arrays.items()})
            self._states()
            ref = self._iron["references"][key] = Reference(program, self._arrays())
            if not sig.tensors:
                self.__dict__["_iron_quick_reference"] = quick_reference(sig, ref)
        require_values(ref.program, sig.where, scalars)
        outputs, nxt = ref.run([arrays[n.arg[0]] for n in ref.program.inputs], scalars)
        return shape_result(ref.program.returns, outputs, nxt)

    def compile(self, *specs, device=None, feeds=None, **named_specs):
        """Compile for these tensor specs and the current (or given) device -> CompiledGraph."""
        from iron.runtime.compiled import compile_graph

        return compile_graph(self, specs, named_specs, device=device, feeds=feeds)

    def __call__(self, *tensors, **values):
        """Compile for these shapes (once) and run one call on the current device."""
        from iron.runtime.compiled import compile_for_call

        return compile_for_call(self, tensors, values)(*tensors, **values)


def fresh_iron_state(states: dict | None) -> dict:
    """A graph's internal state before anything is traced: its caches and the host copy of its
    states (made on first use when None)."""
    return {"programs": {}, "references": {}, "states": states, "compiled": {}, "constants": Constants()}


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


# ---- argument binding (shared by reference and compiled calls) ---------------------------------

def bind_specs(sig: Signature, where: str, specs: tuple, named: dict) -> dict:
    names = [n for n, _ in sig.tensors]
    if len(specs) > len(names):
        raise ArgumentError(f"{where} takes {len(names)} tensor(s) ({', '.join(names) or 'none'}), got {len(specs)} specs.")
    given = dict(zip(names, specs))
    for k, v in named.items():
        if k not in names:
            raise ArgumentError(f"{where} has no tensor parameter '{k}': its tensors are {', '.join(names) or 'none'}.")
        _given_once(where, k, given)
        given[k] = v
    out = {}
    for name, optional in sig.tensors:
        spec = given.get(name)
        if spec is None:
            if not optional:
                raise ArgumentError(
                    f"{where} needs a spec for tensor '{name}': pass {name}=((shape...), dtype), or the shape alone for bfloat16."
                )
            out[name] = None
            continue
        out[name] = _spec(where, name, spec)
    return out


def _spec(where, name, spec):
    """(shape, dtype) of a tensor spec: an array, ((shape...), dtype), or a shape alone, which
    means bfloat16 as in IRON (a dtype is never an int, so a tuple of ints is a shape)."""
    if isinstance(spec, np.ndarray):
        spec = (spec.shape, spec.dtype)
    if _is_shape(spec):
        spec = (spec, dtypes.bfloat16)
    try:
        shape, dtype = spec
    except (TypeError, ValueError):
        raise ArgumentError(f"spec of '{name}' in {where} is {spec!r}: give ((shape...), dtype).") from None
    shape = shapes.checked_shape(f"tensor '{name}' of {where}", shape, ArgumentError)
    if dtypes.as_dtype(dtype) is None:
        raise ArgumentError(
            f"tensor '{name}' of {where} has dtype {dtype}: supported dtypes are {dtypes.supported_text()}."
        )
    shapes.fits_device(f"tensor '{name}' of {where}", shape, dtype, ArgumentError)
    return shape, np.dtype(dtype)


def _is_shape(spec) -> bool:
    ints = (int, np.integer)
    if isinstance(spec, ints):
        return not isinstance(spec, bool)
    return isinstance(spec, (tuple, list)) and all(isinstance(s, ints) and not isinstance(s, bool) for s in spec)


def bind_call(sig: Signature, where: str, tensors: tuple, values: dict) -> tuple[dict, dict]:
    """Check a call's arguments: (tensor name -> array or None, per-call name -> int). Which
    per-call values must be given depends on the traced version: see require_values."""
    if not tensors and not sig.tensors and plain_values(sig.value_names, values):
        return {}, values
    names = [n for n, _ in sig.tensors]
    if len(tensors) > len(names):
        raise ArgumentError(
            f"{where} takes {len(names)} tensor(s) ({', '.join(names) or 'none'}) but got {len(tensors)} "
            "positional arguments: pass per-call values by keyword (node=...)."
        )
    given = dict(zip(names, tensors))
    scalars = {}
    value_names = [n for n, _ in sig.values]
    for key, v in values.items():
        if key in names:
            _given_once(where, key, given)
            given[key] = v
        elif key in value_names:
            scalars[key] = _scalar_value(where, key, v)
        else:
            raise ArgumentError(
                f"{where} got an unexpected value '{key}': its tensors are {', '.join(names) or 'none'} and "
                f"its per-call values are {', '.join(value_names) or 'none'}."
            )
    arrays = {}
    for name, optional in sig.tensors:
        a = given.get(name)
        if a is None and not optional:
            raise ArgumentError(f"{where} is missing tensor '{name}': pass it positionally or as {name}=array.")
        arrays[name] = None if a is None else _tensor_value(where, name, a)
    return arrays, scalars


def _given_once(where: str, name: str, given: dict):
    if name in given:
        raise ArgumentError(
            f"{where} got tensor '{name}' twice, positionally and as {name}=: pass it one way."
        )


def require_values(program: Program, where: str, scalars: dict):
    """Refuse a call missing a per-call value its traced version reads (an unread one may be left out)."""
    missing = [v.arg[0] for v in program.scalars if v.arg[0] not in scalars]
    if missing:
        kinds = {v.arg[0]: v.arg[1] for v in program.scalars}
        raise ArgumentError(
            f"{where} is missing per-call value(s) {', '.join(missing)}: pass "
            + ", ".join(f"{n}=<int> ({'Carried' if kinds[n] == 'carried' else 'Scratchpad'})" for n in missing) + "."
        )


def plain_values(names: set, values: dict) -> bool:
    """Whether per-call values are exactly `names`, each a Python int in int32: nothing to convert."""
    if values.keys() != names:
        return False
    for v in values.values():
        if type(v) is not int or not I32_MIN <= v <= I32_MAX:
            return False
    return True


def quick_reference(sig: Signature, ref: Reference):
    """reference() of a body without tensors when its values are plain (what a loop passes back);
    other values return FULL_CHECK, for bind_call to convert or explain."""
    names, run, returns = sig.value_names, ref.run, ref.program.returns

    def call(values: dict):
        if not plain_values(names, values):
            return FULL_CHECK
        outputs, nxt = run((), values)
        return shape_result(returns, outputs, nxt)
    return call


FULL_CHECK = object()


def _scalar_value(where, name, v) -> int:
    if isinstance(v, np.ndarray) and v.ndim != 0:
        raise ArgumentError(
            f"per-call value '{name}' of {where} must be an int, got an array of shape {v.shape}: "
            "pass one integer (e.g. int(v[0]))."
        )
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) and not (
        isinstance(v, np.ndarray) and v.dtype.kind in "iu"
    ):
        raise ArgumentError(f"per-call value '{name}' of {where} must be an int, got {type(v).__name__} {v!r}.")
    v = int(v)
    if not I32_MIN <= v <= I32_MAX:
        raise ArgumentError(f"per-call value '{name}' of {where} is {v}, outside int32: give a 32-bit integer.")
    return v


def _tensor_value(where, name, a) -> np.ndarray:
    arr = np.asarray(a)
    if dtypes.as_dtype(arr.dtype) is None:
        raise ArgumentError(
            f"tensor '{name}' of {where} has dtype {arr.dtype}: supported dtypes are {dtypes.supported_text()}."
        )
    return arr


def check_tensor(where: str, name: str, arr: np.ndarray, shape, dtype):
    """Refuse a tensor of another shape or dtype than the compiled one."""
    if arr.shape != tuple(shape) or arr.dtype != dtype:
        raise ArgumentError(
            f"tensor '{name}' of {where} is {arr.shape} {dtypes.name(arr.dtype)} but this version was "
            f"compiled for {tuple(shape)} {dtypes.name(dtype)}: pass that shape, or compile another version."
        )


def shape_result(returns: str, outputs: list, nxt: dict):
    if returns == "none":
        return None
    if returns == "one":
        return outputs[0]
    if returns == "carry":
        return Carry(nxt)
    return (*outputs, Carry(nxt)) if nxt else tuple(outputs)


def state_name(g, state) -> str:
    if isinstance(state, State):
        return declared_name(g, state)
    if isinstance(state, str):
        public = [mem.given_name for _, mem in find_declarations(g) if isinstance(mem, State) and mem.public]
        if state in public:
            return state
        raise ArgumentError(
            f"{type(g).__name__} has no public state '{state}': public states are {', '.join(public) or 'none'} "
            "(give a state name= to make it public, or pass the State object)."
        )
    raise ArgumentError(f"read/write take a State or a public state's name, not {type(state).__name__}.")


def declared_name(g, memory: Memory) -> str:
    """The name of `memory` in graph `g`; an ArgumentError naming both graphs when it is another's."""
    for path, mem in find_declarations(g):
        if mem is memory:
            return mem.given_name or path
    mine = type(g).__name__
    owner = f"belongs to {memory.graph}, not to {mine}" if memory.graph else f"is not declared in {mine}"
    raise ArgumentError(
        f"{memory!r} {owner}: read, write or update it through the graph that declares it "
        f"(as an attribute of that graph), not through {mine}."
    )


def checked_state_value(name: str, target: np.ndarray, value, kind: str = "state") -> np.ndarray:
    arr = np.asarray(value)
    if arr.shape != target.shape:
        raise ArgumentError(f"{kind} '{name}' is {target.shape}; the value written is {arr.shape}: give the same shape.")
    if arr.dtype != target.dtype:
        raise ArgumentError(
            f"{kind} '{name}' is {dtypes.name(target.dtype)}; the value written is {dtypes.name(arr.dtype)}: "
            f"convert it with .astype(np.{dtypes.name(target.dtype)})."
        )
    return arr
