"""The numpy reference: run a Program on the host. It is the oracle every other path is checked
against.

`Reference(program, arrays)` lowers the Program once into lists of closures over a slot array:
per-call scalars, the range checks (all before anything is written, so a failed call leaves the
states as they were), the kernel calls, and the outputs and next carried values. Each closure is
chosen for its case (a Copy of one element, a store at a per-call index) so that a small body
costs a few microseconds. It knows nothing of tiles, FIFOs or devices.
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np

from iron.errors import ArgumentError, IndexOutOfRange
from iron.ir import SCALAR_BINARY, Node, Op, Program, describe, wrap_i32


class Reference:
    """A Program bound to its memories (weights, params and the host copy of the states)."""

    def __init__(self, program: Program, arrays: dict[str, np.ndarray]):
        self.program = program
        self.slot: dict[int, int] = {}
        self.arrays = arrays
        self.scalar_steps: list = []
        self.bounds: list[tuple] = []   # (slot, lo, hi, what, expr text) per checked value
        self.constants: list[tuple[int, int]] = []
        self.call_steps: list = []
        self.element_steps: list = []       # next carried values read out of computed elements
        self.python_ints: set[int] = set()  # ids of element reads held as Python ints
        for v in program.scalars:      # per-call values take slots 0..n-1,
            self._slot(v)
        for n in program.inputs:       # the input tensors the next ones
            self._slot(n)
        for call in program.calls:
            self.call_steps.append(self._lower_call(call))
        self.value_names = [v.arg[0] for v in program.scalars]
        self.output_slots = [self.slot[id(n)] for n in program.outputs]
        carry_slots = [self._carry_value(node) for _, node in program.carry]
        self.carry_of = carry_function([name for name, _ in program.carry], carry_slots)
        self.steps = self.scalar_steps + self._check_bounds() + self.call_steps + self.element_steps
        self.template = [None] * len(self.slot)
        for slot, value in self.constants:
            self.template[slot] = value
        self.run = self.runner()

    # ---- lowering ------------------------------------------------------------------------------
    def _slot(self, node: Node) -> int:
        key = id(node)
        if key not in self.slot:
            self.slot[key] = len(self.slot)
        return self.slot[key]

    def _scalar(self, node: Node) -> int:
        """The slot of a scalar expression, adding the closures that compute it."""
        if id(node) in self.slot:
            return self.slot[id(node)]
        if node.op == Op.CONST:
            out = self._slot(node)
            self.constants.append((out, node.arg))
            return out
        a, b = (self._scalar(s) for s in node.src)
        out = self._slot(node)
        fn, text = SCALAR_BINARY[node.op], describe(node)
        if node.op in (Op.FLOORDIV, Op.MOD):
            def step(env, a=a, b=b, o=out, fn=fn, text=text):
                if env[b] == 0:
                    raise ArgumentError(f"per-call value {text} divides by zero: give values that make the divisor non-zero.")
                env[o] = wrap_i32(fn(env[a], env[b]))
        else:
            def step(env, a=a, b=b, o=out, fn=fn):
                v = fn(env[a], env[b])
                env[o] = v if -0x80000000 <= v <= 0x7FFFFFFF else wrap_i32(v)
        self.scalar_steps.append(step)
        return out

    def _tensor(self, node: Node):
        """A function env -> the array a tensor node denotes (a numpy view for VIEW/MEMORY)."""
        if node.op == Op.MEMORY:
            arr = self.arrays[node.arg[1]]
            return lambda env: arr
        if node.op == Op.VIEW:
            return self._view(node)
        slot = self.slot[id(node)]
        return lambda env: env[slot]

    def _view(self, view: Node):
        base = view.src[0]
        if base.op == Op.INPUT:
            return self._input_view(view)
        arr = self.arrays[base.arg[1]]
        parts, dyn = self._index_parts(view)
        if not dyn:
            fixed = arr[tuple(parts)]
            return lambda env: fixed
        element = self._element(view)
        if element:
            _, slot, start = element
            return lambda env: arr[env[slot] + start]

        def view_of(env):
            idx = list(parts)
            for pos, slot, start in dyn:
                idx[pos] = env[slot] + start
            return arr[tuple(idx)]
        return view_of

    def _element(self, view: Node):
        """(array, slot, start) when a view of a memory picks one element by one per-call value
        (`successor[node]`), which steps index directly; else None."""
        if view.op == Op.VIEW and view.src[0].op == Op.MEMORY and len(view.arg) == 1 and view.arg[0].dynamic:
            return self.arrays[view.src[0].arg[1]], self.slot[id(view.src[1])], view.arg[0].start
        return None

    def _input_view(self, view: Node):
        slot = self.slot[id(view.src[0])]
        parts, dyn = self._index_parts(view)

        def view_of(env):
            idx = list(parts)
            for pos, s, start in dyn:
                idx[pos] = env[s] + start
            return env[slot][tuple(idx)]
        return view_of

    def _index_parts(self, view: Node):
        """The index of a view as a list (None where a per-call value goes) and the per-call
        entries (position, slot, start)."""
        parts, dyn = [], []
        for axis in view.arg:
            if axis.index is not None:
                parts.append(axis.index)
            elif axis.dynamic is not None:
                expr = view.src[axis.dynamic]
                slot = self._scalar(expr)
                self._add_range_check(view, axis, expr, slot)
                dyn.append((len(parts), slot, axis.start))
                parts.append(None)
            else:
                parts.append(slice(axis.start, axis.stop))
        parts.append(Ellipsis)   # so a view picking one element is a 0-d view a write lands in, not a copy
        return parts, dyn

    def _add_range_check(self, view, axis, expr, slot):
        self.bounds.append((slot, 0, axis.stop - axis.start, describe(view), describe(expr)))

    def _lower_call(self, call: Node):
        c = call.arg
        kernel, attrs = c.kernel, c.attr_dict
        n_in = c.n_inputs
        ins = [self._tensor(n) for n in call.src[:n_in]]
        scalar_nodes = call.src[n_in + c.writes:]
        dyn = [(name, self._scalar(n)) for name, n in zip(c.scalar_attrs, scalar_nodes)]
        for name, slot in dyn:
            self._add_attr_check(call, name, slot)
        run = kernel.reference_fn(call.src[0].dtype, {k: v for k, v in attrs.items() if k not in c.scalar_attrs},
                                   call.dtype, call.shape)
        if c.writes:
            dest = call.src[n_in]
            dest_get = self._tensor(dest)
            if kernel.accumulates:
                ins = ins + [dest_get]
            return self._write_step(dest, dest_get, ins, run, dyn, kernel.copies)
        out = self._slot(call)
        if kernel.copies and self._reads_one_element(call):
            return self._read_element(call, ins[0], out)
        if len(ins) == 1 and not dyn:
            f0 = ins[0]

            def step(env):
                env[out] = run(f0(env))
        else:
            def step(env):
                env[out] = run(*(f(env) for f in ins), **{k: env[s] for k, s in dyn})
        return step

    def _reads_one_element(self, call: Node) -> bool:
        """Whether a call reads one element through a view and is not an output of the call."""
        return call.src[0].op == Op.VIEW and not call.shape and all(call is not o for o in self.program.outputs)

    def _read_element(self, call: Node, read, out: int):
        """A Copy of one element: reading it already makes a fresh numpy scalar. An integer
        element that is only stored and carried is read as a Python int, as the carry wants it."""
        element = self._element(call.src[0])
        if element is None:
            def step(env):
                env[out] = read(env)
            return step
        arr, slot, start = element
        get = arr.__getitem__
        if self._only_stored(call):
            get = arr.item
            self.python_ints.add(id(call))

        def step(env):
            env[out] = get(env[slot] + start)
        return step

    def _only_stored(self, call: Node) -> bool:
        """Whether an integer value's only users are Copies that store it (and the carry)."""
        return call.dtype.kind in "iu" and all(
            user.arg.kernel.copies and user.arg.writes and user.src[0] is call and all(s is not call for s in user.src[1:])
            for user in self.program.calls if any(s is call for s in user.src)
        )

    def _write_step(self, dest: Node, dest_get, ins, run, dyn, copies: bool):
        element = self._element(dest)
        if element and len(ins) == 1 and not dyn:
            arr, slot, start = element
            f0 = ins[0]
            if copies:  # assigning already copies
                def step(env):
                    arr[env[slot] + start] = f0(env)
            else:
                def step(env):
                    arr[env[slot] + start] = run(f0(env))
            return step

        def step(env):
            result = run(*(f(env) for f in ins), **{k: env[s] for k, s in dyn})
            dest_get(env)[...] = result
        return step

    def _add_attr_check(self, call, name, slot):
        expr = call.src[call.arg.n_inputs + call.arg.writes + call.arg.scalar_attrs.index(name)]
        self.bounds.append((slot, 1, call.src[0].shape[0] + 1, f"{describe(call)} {name}", describe(expr)))

    def _check_bounds(self):
        """One step checking every per-call index and length against its bounds, before anything
        is written."""
        bounds = tuple(self.bounds)

        def check(env):
            for slot, lo, hi, what, text in bounds:
                v = env[slot]
                if not lo <= v < hi:
                    raise IndexOutOfRange.at(what, text, v, lo, hi)
        return [check] if bounds else []

    def _carry_value(self, node: Node) -> int:
        """The slot of a next carried value; an element the call computed is made a Python int
        after the kernel calls."""
        if node.op != Op.ELEM:
            return self._scalar(node)
        if id(node.src[0]) in self.python_ints:
            return self.slot[id(node.src[0])]
        src, out = self.slot[id(node.src[0])], self._slot(node)
        if node.src[0].shape:
            def step(env):
                env[out] = env[src].item()
        else:
            def step(env):
                env[out] = int(env[src])  # a numpy scalar's .item() is several times slower
        self.element_steps.append(step)
        return out

    # ---- running -------------------------------------------------------------------------------
    def runner(self):
        """The call function: (inputs, per-call values) -> (outputs list, next carried values)."""
        steps, carry_of = self.steps, self.carry_of
        rest = self.template[len(self.value_names) + len(self.program.inputs):]
        values_of, outputs_of = getter(self.value_names), getter(self.output_slots)

        def run(inputs: list, values: dict):
            env = [*values_of(values), *inputs, *rest]
            for step in steps:
                step(env)
            return outputs_of(env), carry_of(env)
        return run


def carry_function(names: list[str], slots: list[int]):
    """env -> the dict of next carried values, by name."""
    if len(names) == 2:
        (na, nb), (a, b) = names, slots
        return lambda env: {na: env[a], nb: env[b]}
    values_of = getter(slots)
    return lambda env: dict(zip(names, values_of(env)))


def getter(keys: list):
    """A function container -> the tuple of its items at `keys` (itemgetter, also for 0 or 1 key)."""
    if len(keys) > 1:
        return itemgetter(*keys)
    if keys:
        key, = keys
        return lambda container: (container[key],)
    return lambda container: ()
