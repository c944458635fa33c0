"""The numpy reference, the oracle every other path is checked against: `run` interprets one call
of a Program the way JAX's eval_jaxpr interprets a jaxpr. It evaluates every per-call expression
and checks every bound first, then runs the kernel calls in program order with their numpy
semantics, and reads out the outputs and the next carried values. A call that fails leaves the
states as they were: a bound is refused before anything is written, a failing kernel puts back
what the calls before it wrote.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from iron.errors import ArgumentError, IndexOutOfRange
from iron.ir import SCALAR_BINARY, Node, Op, Program, arranged, describe, frame, wrap_i32


def run(program: Program, memories: dict[str, np.ndarray], inputs: list[np.ndarray],
        values: dict[str, int]) -> tuple[list[np.ndarray], dict[str, int]]:
    """One call: (outputs in return order, next carried values by name). `memories` are the
    weights, params and states by name; the states are updated in place."""
    env: dict[Node, Any] = dict(zip(program.inputs, inputs))
    for node in program.memories:
        env[node] = memories[node.arg.name]
    for var in program.scalars:
        env[var] = values[var.arg.name]
    check_bounds(program, env)
    undo: list[tuple] = []  # (state, index, its values before) of each write, put back if a call fails
    try:
        for call in program.calls:
            run_call(call, env, undo)
    except BaseException:
        for state, at, before in reversed(undo):
            state[at] = before
        raise
    outputs = [env[node] for node in program.outputs]
    carry = {}
    for name, node in program.carry:  # an element a call computed, or a per-call expression
        carry[name] = env[node.src[0]].item() if node.op == Op.ELEM else env[node]
    return outputs, carry


# ---- per-call values and their bounds ------------------------------------------------------------

def scalar(node: Node, env: dict) -> int:
    """The value of a per-call expression: 32-bit arithmetic that wraps, as the device's words do."""
    value = env.get(node)
    if value is not None:
        return value
    if node.op == Op.CONST:
        value = node.arg
    else:
        a, b = scalar(node.src[0], env), scalar(node.src[1], env)
        if b == 0 and node.op in (Op.FLOORDIV, Op.MOD):
            raise ArgumentError(f"per-call value {describe(node)} divides by zero: give values that make the divisor non-zero.")
        value = wrap_i32(SCALAR_BINARY[node.op](a, b))
    env[node] = value
    return value


def check_bounds(program: Program, env: dict):
    """Evaluate every per-call expression and every view's index, refusing a value out of its
    range (a view's index, or an attribute its kernel bounds, such as Softmax's valid length), all
    before any kernel runs."""
    for call in program.calls:
        for node in call.src:  # tensors, then the per-call attributes
            if node.op == Op.VIEW:
                env[node] = index(node, env)
        c = call.arg
        for name, expr in zip(c.scalar_attrs, call.src[c.n_inputs + c.writes:]) if c.scalar_attrs else ():
            value = scalar(expr, env)
            if name in c.kernel.bounds:
                lo, hi = c.kernel.bounds[name].range([n.shape for n in call.src[:c.n_inputs]])
                if not lo <= value < hi:
                    raise IndexOutOfRange.at(f"{c.kernel.__name__} {name}={describe(expr)}", describe(expr), value, lo, hi)
    for _, node in program.carry:
        if node.op != Op.ELEM:
            scalar(node, env)


def index(view: Node, env: dict) -> tuple:
    """The numpy index a VIEW takes of its memory or input, each per-call index checked."""
    parts = []
    for axis in view.arg:
        if axis.index is not None:
            parts.append(axis.index)
        elif axis.dynamic is None:
            parts.append(slice(axis.start, axis.start + 1) if axis.step == 0 else slice(axis.start, axis.stop, axis.step))
        else:
            expr = view.src[axis.dynamic]
            value, hi = scalar(expr, env), axis.offsets
            if not 0 <= value < hi:
                raise IndexOutOfRange.at(describe(view), describe(expr), value, 0, hi, describe(view.src[0]))
            start = axis.start + value
            parts.append(start if axis.length is None else slice(start, start + axis.length))
    return tuple(parts)


# ---- tensors and kernel calls --------------------------------------------------------------------

def tensor(node: Node, env: dict) -> np.ndarray:
    """The array a tensor node denotes; a view (whose value in env is its index) reads its memory,
    input or computed tensor, seen in the view's frame, without a copy where numpy can."""
    if node.op != Op.VIEW:
        return env[node]
    picked = arranged(node, framed(node, env)[env[node]])
    return picked if picked.shape == node.shape else picked.reshape(node.shape)


def framed(view: Node, env: dict) -> np.ndarray:
    """The array a view indexes, seen as the view's frame (a reshape of a contiguous array is a
    view of it, so writes through it land)."""
    array, shape = env[view.src[0]], frame(view)
    return array if array.shape == shape else array.reshape(shape)


def run_call(call: Node, env: dict, undo: list):
    """One kernel call: its result goes into env, or into the state (or view of one) it writes,
    whose values before go into `undo`."""
    c = call.arg
    args = [tensor(node, env) for node in call.src[:c.n_inputs]]
    dest = call.src[c.n_inputs] if c.writes else None
    if dest is not None and c.kernel.accumulates:
        args.append(tensor(dest, env))
    per_call = {name: env[e] for name, e in zip(c.scalar_attrs, call.src[c.n_inputs + c.writes:])} if c.scalar_attrs else {}
    if dest is not None and c.kernel.copies and args[0].dtype == call.dtype:
        result = args[0]  # a copy into a state: assigning it copies already
    else:
        result = kernel_fn(call)(*args, **per_call)
    if dest is None:
        env[call] = result
        return
    state, at = (framed(dest, env), env[dest]) if dest.op == Op.VIEW else (env[dest], ...)
    before = state[at]  # one element reads as a numpy scalar, which nothing can change
    undo.append((state, at, before.copy() if isinstance(before, np.ndarray) else before))
    state[at] = result if np.shape(result) == before.shape else np.reshape(result, before.shape)


def kernel_fn(call: Node):
    """The kernel's numpy function for a call's input and output dtypes, static attributes and
    output shape (a user kernel's results are checked against it), made once for each."""
    c = call.arg
    try:
        return _kernel_fn(c.kernel, call.src[0].dtype, c.attrs, call.dtype, call.shape)
    except TypeError:  # an attribute that cannot be a key: made afresh
        return c.kernel.reference_fn(call.src[0].dtype, c.attr_dict, call.dtype, call.shape)


@functools.lru_cache(maxsize=1024)
def _kernel_fn(kernel, dtype, attrs, out, shape):
    return kernel.reference_fn(dtype, dict(attrs), out, shape)
