"""A compute tile's core running its program forever as the lowered core program does: an Acquire
is a lock acquire of the objects not yet held, a Release a lock release, an Invoke a call of a
Function (each compiled once into a closure of kernel calls and i32 scalar steps) on the buffers
the core holds and the tile's Buffers; Loops are unrolled up to UNROLLED steps.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from iron.errors import ArgumentError, PlanError
from iron.ir import wrap_i32
from iron.plan.plan import (
    Acquire,
    Imm,
    Invoke,
    KernelStep,
    Loop,
    Ptr,
    Release,
    WordOp,
    launch_steps,
)
from iron.runtime.emulator.acts import Invoked, in_order
from iron.runtime.emulator.objectfifo import CorePort

UNROLLED = 4096  # the most steps a Loop is unrolled into
I32 = np.dtype(np.int32)
ONE = (1,)


# ---- Functions ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One step of a Function bound to its arrays: `run()`; for a kernel call whose operands are
    fixed per binding, also the KernelCall and its operands, so replay may bind it again on
    other arrays (replay.py)."""

    run: Callable
    call: object = None
    pointers: tuple = ()
    sizes: tuple = ()
    attrs: tuple = ()
    reads_out: bool = False   # an accumulating kernel reads its destination


@dataclass(frozen=True)
class Bound:
    """A Function bound to its arrays: `run()` runs its `steps` in order."""

    run: Callable
    steps: tuple[Step, ...]


def compile_function(fn, make_call):
    """`bind(arrays, block) -> Bound`: fn's steps, in order, on the uint8 arrays bound to its
    params at that block index. The invoking core keeps each binding: the arrays (FIFO objects,
    Buffers) live as long as the Emulator, so a binding's typed views stay valid."""
    compiled = [_compile_step(fn, k, step, make_call) for k, step in enumerate(fn.steps)]

    def bind(arrays, block):
        steps = tuple(bind_step(arrays, block) for bind_step in compiled)
        return Bound(in_order([step.run for step in steps]), steps)
    return bind


def _compile_step(fn, k: int, step, make_call):
    """`bind(arrays, block) -> Step` of one step."""
    if isinstance(step, KernelStep):
        return _kernel_step(fn, step, make_call)
    return _scalar_step(fn, f"Function '{fn.name}' step {k}", step)


def _pointer(fn, ptr, dtype: np.dtype):
    """`view(arrays, block, shape)`: an array of `dtype` and `shape` at the Ptr's byte address."""
    index, offset, stride, item = fn.params.index(ptr.source), ptr.offset, ptr.block_stride, dtype.itemsize

    def view(arrays, block, shape):
        start = offset + stride * block
        return arrays[index][start: start + int(np.prod(shape, dtype=np.int64)) * item].view(dtype).reshape(shape)
    return view


def _scalar(fn, arg, ctype: str = "i32"):
    """`bind(arrays, block) -> read()` of an Imm or a Load (an i32 read from a bound object)."""
    if isinstance(arg, Imm):
        value = float(arg.value) if ctype == "f32" else int(arg.value)
        return lambda arrays, block: lambda: value
    view = _pointer(fn, Ptr(arg.source, arg.offset), I32)

    def bind(arrays, block):
        word = view(arrays, 0, ONE)
        return lambda: int(word[0])
    return bind


def _scalars(fn, args, ctypes):
    """`bind(arrays, block) -> read()` of the tuple of these values (fixed when all are Imm)."""
    scalars = [_scalar(fn, a, t) for a, t in zip(args, ctypes)]
    if all(isinstance(a, Imm) for a in args):
        fixed = tuple(s(None, 0)() for s in scalars)
        return lambda arrays, block: lambda: fixed

    def bind(arrays, block):
        reads = [s(arrays, block) for s in scalars]
        return lambda: tuple(read() for read in reads)
    return bind


def _abi_shapes(kernel, sizes: tuple) -> list[tuple[int, ...]]:
    """The shape of each pointer (inputs, then output or destination) for these size operands."""
    in_shapes, out_shape = kernel.abi_shapes(sizes)
    return [tuple(int(n) for n in s) for s in (*in_shapes, out_shape)]


def _kernel_step(fn, step, make_call):
    kernel = step.kernel
    attr_names = [name for name, _ in kernel.c_attrs]
    attr_types = [ctype for _, ctype in kernel.c_attrs]
    dtypes = [*step.in_dtypes, step.out]
    views = [_pointer(fn, p, d) for p, d in zip(step.pointers, dtypes)]
    sizes = _scalars(fn, step.sizes, ["i32"] * len(step.sizes))
    attrs = _scalars(fn, step.attrs, attr_types)
    call = make_call(step, attr_names, ["ptr"] * len(step.pointers) + ["i32"] * len(step.sizes) + attr_types)
    fixed = all(isinstance(arg, Imm) for arg in (*step.sizes, *step.attrs))

    def bind(arrays, block):
        read_sizes, read_attrs = sizes(arrays, block), attrs(arrays, block)

        def resolve(size_values):
            return [v(arrays, block, s) for v, s in zip(views, _abi_shapes(kernel, size_values))]
        if fixed:
            size_values, pointers, attr_values = read_sizes(), resolve(read_sizes()), read_attrs()
            return Step(call.bind(pointers, size_values, attr_values), call, tuple(pointers), size_values, attr_values,
                        kernel.accumulates)
        by_sizes: dict[tuple, list] = {}

        def run():
            size_values = read_sizes()
            resolved = by_sizes.get(size_values)
            if resolved is None:
                resolved = by_sizes[size_values] = resolve(size_values)
            call(resolved, size_values, read_attrs())
        return Step(run)
    return bind


def _scalar_step(fn, where: str, step):
    dest = _pointer(fn, step.dest, I32)
    a = _scalar(fn, step.a)
    b = _scalar(fn, step.b if step.b is not None else Imm(0))
    op, divides = step.op.fn, step.op in (WordOp.FLOORDIV, WordOp.MOD)

    def bind(arrays, block):
        out, read_a, read_b = dest(arrays, block, ONE), a(arrays, block), b(arrays, block)

        def run():
            x, y = read_a(), read_b()
            if divides and y == 0:
                raise ArgumentError(f"{where} computes {x} {step.op} 0: a per-call value divides by zero. Give values that keep the divisor non-zero.")
            out[0] = wrap_i32(op(x, y))
        return Step(run)
    return bind


# ---- the core's program ------------------------------------------------------------------------

class CoreProgram:
    """One core's program, compiled; `task()` is the generator the core runs."""

    def __init__(self, core, tile, fifos, functions: dict, board):
        self.core, self.tile, self.board, self.functions = core, tile, board, functions
        self.name = f"core {core.tile.name} (group {core.group})"
        used = dict.fromkeys((s.fifo, s.port) for s, _ in launch_steps(core.program) if isinstance(s, (Acquire, Release)))
        self.ports = {(fifo, port): fifos.port(fifo, core.tile, port) for fifo, port in used}
        self.holding: dict[str, CorePort] = {}   # the port each FIFO was last acquired on, as compiled
        if not self.ports:  # it would never wait, so no launch could ever end
            raise PlanError(f"{self.name} acquires nothing, so it would spin forever: give its program an Acquire.")
        self.block = [0]  # the index of the innermost Loop running
        self.outer: list[int] = []  # the indices of the Loops around it
        self.at = None  # the step it last blocked on
        self.steps = self._compile(core.program)

    def task(self):
        while True:
            yield from self._execute(self.steps)

    def state(self) -> tuple:
        """Where it is: the step it blocks on, the Loop indices and what it holds of each FIFO."""
        return self.at, self.block[0], *self.outer, *(p.state() for p in self.ports.values())

    def _execute(self, steps: list):
        """Run compiled steps (a Loop not unrolled is `(count, body)`), yielding what each blocked
        Acquire waits on."""
        block, outer = self.block, self.outer
        for step in steps:
            if type(step) is tuple:
                count, body = step
                outer.append(block[0])
                for index in range(count):
                    block[0] = index
                    yield from self._execute(body)
                block[0] = outer.pop()
            else:
                while (wait := step()) is not None:
                    self.at = step
                    yield wait

    def _compile(self, program) -> list:
        steps = []
        for op in program:
            if isinstance(op, Loop):
                steps += self._loop(op.count, self._compile(op.body))
            elif isinstance(op, Acquire):
                port = self.holding[op.fifo] = self.ports[op.fifo, op.port]
                wait = (port.take, f"waits to acquire @{op.fifo} ({op.port}, {op.count})")
                steps.append(partial(port.acquire, op.count, wait))
            elif isinstance(op, Release):
                steps.append(partial(self.ports[op.fifo, op.port].release, op.count))
            else:
                steps.append(self._invoke(op))
        return steps

    def _loop(self, count: int, body: list) -> list:
        """A Loop's steps: its body `count` times, each after a step setting the loop index (the
        same steps repeated, so straight-line), between steps saving and restoring the index of
        the enclosing Loop; or, when that would be more than UNROLLED steps, `(count, body)`."""
        if count * (len(body) + 1) > UNROLLED:
            return [(count, body)]
        index, outer = self.block, self.outer
        steps = [partial(_enter, index, outer)]
        for k in range(count):
            steps += [partial(index.__setitem__, 0, k), *body]
        steps.append(partial(_leave, index, outer))
        return steps

    def _invoke(self, op: Invoke):
        """Call the Function on the first buffer the core holds of each FIFO parameter and on the
        tile's Buffers; a binding is made once per loop index and held buffers."""
        fn, bind = self.functions[op.function]
        targets = [self.holding[name] if name in self.holding else self.tile.buffers[name] for name in op.objects]
        held = [t for t in targets if type(t) is CorePort]
        bindings: dict[tuple, object] = {}
        at, blocked, board = self.block, fn.blocked, self.board

        def buffers():
            return [t.buffers[t.index] if type(t) is CorePort else t for t in targets]

        def invoke():
            key = (at[0] if blocked else 0, *[port.index for port in held])
            bound = bindings.get(key)
            if bound is None:
                objects = buffers()
                made = bind([b.data for b in objects], key[0])
                bound = bindings[key] = Invoked(made.run, made.steps, tuple(objects), self.core.tile.name)
            bound.run()
            if board.trace is not None:
                board.trace.append(bound)
            if board.clock is not None:
                board.clock.compute(board, fn, self.core.tile.name)
        return invoke


def _enter(index: list, outer: list):
    outer.append(index[0])


def _leave(index: list, outer: list):
    index[0] = outer.pop()
