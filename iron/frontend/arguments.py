"""Binding a call's arguments to body()'s signature, shared by reference() and compiled calls so
both refuse bad input with the same words: tensor specs for tracing, the tensors and per-call
values of one call, the value written to a state, and the shape of what a call returns.
"""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import ArgumentError
from iron.frontend import shapes
from iron.frontend.declarations import Memory, State
from iron.frontend.handles import Carry
from iron.frontend.trace import Signature, find_declarations
from iron.ir import Program, Returns, VarKind

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def bind_specs(sig: Signature, specs: tuple, named: dict) -> dict:
    """Tensor name -> (shape, dtype), or None for an omitted optional tensor."""
    where, names = sig.where, [n for n, _ in sig.tensors]
    if len(specs) > len(names):
        raise ArgumentError(f"{where} takes {len(names)} tensor(s) ({', '.join(names) or 'none'}), got {len(specs)} specs.")
    given = dict(zip(names, specs))
    for k, v in named.items():
        if k not in names:
            raise ArgumentError(f"{where} has no tensor parameter '{k}': its tensors are {', '.join(names) or 'none'}.")
        _given_once(where, k, given)
        given[k] = v
    return _each_tensor(sig, given, _spec, lambda n: f"{where} needs a spec for tensor '{n}': pass {n}=((shape...), dtype), or the shape alone for bfloat16.")


def _each_tensor(sig: Signature, given: dict, convert, missing) -> dict:
    """Tensor name -> `convert(where, name, value)` of its given value, None for an omitted optional
    tensor; a required one omitted is refused with the text `missing(name)`."""
    out = {}
    for name, optional in sig.tensors:
        value = given.get(name)
        if value is None and not optional:
            raise ArgumentError(missing(name))
        out[name] = None if value is None else convert(sig.where, name, value)
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


def bind_call(sig: Signature, tensors: tuple, values: dict) -> tuple[dict, dict]:
    """Check a call's arguments: (tensor name -> array or None, per-call name -> int). Which
    per-call values must be given depends on the traced version: see require_values."""
    if not tensors and not sig.tensors and plain_values(sig.value_names, values):
        return {}, values
    where, names = sig.where, [n for n, _ in sig.tensors]
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
    arrays = _each_tensor(sig, given, _tensor_value,
                          lambda n: f"{where} is missing tensor '{n}': pass it positionally or as {n}=array.")
    return arrays, scalars


def _given_once(where: str, name: str, given: dict):
    if name in given:
        raise ArgumentError(
            f"{where} got tensor '{name}' twice, positionally and as {name}=: pass it one way."
        )


def require_values(program: Program, where: str, scalars: dict):
    """Refuse a call missing a per-call value its traced version reads (an unread one may be left out)."""
    missing = [v.arg.name for v in program.scalars if v.arg.name not in scalars]
    if missing:
        kinds = {v.arg.name: v.arg.kind for v in program.scalars}
        raise ArgumentError(
            f"{where} is missing per-call value(s) {', '.join(missing)}: pass "
            + ", ".join(f"{n}=<int> ({'Carried' if kinds[n] is VarKind.CARRIED else 'Scratchpad'})" for n in missing) + "."
        )


def plain_values(names: set, values: dict) -> bool:
    """Whether per-call values are exactly `names`, each a Python int in int32: nothing to convert
    (what a loop feeding back a Carry passes)."""
    if values.keys() != names:
        return False
    for v in values.values():
        if type(v) is not int or not I32_MIN <= v <= I32_MAX:
            return False
    return True


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


def shape_result(returns: Returns, outputs: list, nxt: dict):
    """What a call returns, shaped as body() returned it: nothing, one output, a Carry, or a tuple."""
    if returns is Returns.NONE:
        return None
    if returns is Returns.ONE:
        return outputs[0]
    if returns is Returns.CARRY:
        return Carry(nxt)
    return (*outputs, Carry(nxt)) if nxt else tuple(outputs)


def state_name(graph, state) -> str:
    """The name of a state given as a State or as a public state's name."""
    if isinstance(state, State):
        return declared_name(graph, state)
    if isinstance(state, str):
        public = [mem.given_name for _, mem in find_declarations(graph) if isinstance(mem, State) and mem.public]
        if state in public:
            return state
        raise ArgumentError(
            f"{type(graph).__name__} has no public state '{state}': public states are {', '.join(public) or 'none'} "
            "(give a state name= to make it public, or pass the State object)."
        )
    if isinstance(state, Memory):
        declared_name(graph, state)   # another graph's weight or param: named as such first
    raise ArgumentError(f"read/write take a State or a public state's name, not {type(state).__name__}.")


def declared_name(graph, memory: Memory) -> str:
    """The name of `memory` in `graph`; an ArgumentError naming both graphs when it is another's."""
    for path, mem in find_declarations(graph):
        if mem is memory:
            return mem.given_name or path
    mine = type(graph).__name__
    if memory.graph is None:
        owner = f"is not declared in {mine}"
    elif memory.graph == mine:   # two instances of one class: the class name alone tells them not apart
        owner = f"belongs to another {mine} graph, not to this one"
    else:
        owner = f"belongs to {memory.graph}, not to {mine}"
    raise ArgumentError(
        f"{memory!r} {owner}: read, write or update it through the graph that declares it "
        f"(as an attribute of that graph), not through {mine}."
    )


def checked_state_value(name: str, target: np.ndarray, value, kind: str = "state") -> np.ndarray:
    """`value` as an array to write into `kind` `name`, refused unless of its shape and dtype."""
    arr = np.asarray(value)
    if arr.shape != target.shape:
        raise ArgumentError(f"{kind} '{name}' is {target.shape}; the value written is {arr.shape}: give the same shape.")
    if arr.dtype != target.dtype:
        raise ArgumentError(
            f"{kind} '{name}' is {dtypes.name(target.dtype)}; the value written is {dtypes.name(arr.dtype)}: "
            f"convert it with .astype(np.{dtypes.name(target.dtype)})."
        )
    return arr
