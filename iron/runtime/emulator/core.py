"""What runs on a core: each Function compiled once into a closure, and each core's program into
a generator that repeats it forever.

A Function runs on the byte arrays bound to its params (acquired FIFO objects, Buffers): a
KernelStep resolves its Ptrs into typed views shaped by the kernel's C ABI (`kernel.abi_shapes`
of its size operands) and calls the kernel (numpy or the native library, kernels.py); a
ScalarStep computes an i32 with wrap-around (floordiv and mod with Python's floor semantics).
A core program is checked once at load (FIFO ends on the core's tile, acquire counts within the
depth, objects held when invoked, every acquired object released by the end of an iteration) and
compiled into a straight list of steps, each a call that returns None or, for an Acquire that
cannot proceed, the `(signal, text)` the core's generator yields; a Loop is unrolled (its body's
steps repeated after a step setting the loop index) unless that would make more than UNROLLED
steps. Invoke binds a FIFO parameter to the first object the core holds of it; each Invoke keeps
its bound function per loop index and held objects (typed views and prepared kernel calls made
once), and puts each call on the Board's trace when the machine records.

It does not move data between tiles (fifo.py, dma.py) or schedule (machine.py).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from iron.compiler.plan import (
    Acquire,
    Imm,
    Invoke,
    KernelStep,
    Load,
    Loop,
    Port,
    Ptr,
    Release,
    ScalarStep,
    WordDef,
)
from iron.errors import ArgumentError, PlanError
from iron.ir import SCALAR_BINARY, wrap_i32
from iron.kernels.registry import lookup

UNROLLED = 4096  # the most steps a Loop is unrolled into
SCALAR_OPS = {**SCALAR_BINARY, "copy": lambda a, b: a}
I32 = np.dtype(np.int32)
ONE = (1,)


# ---- Functions ---------------------------------------------------------------------------------

def compile_function(fn, make_call):
    """`bind(arrays, block) -> run()`: fn's steps, in order, on the uint8 arrays bound to its
    params at that block index. The invoking core keeps each binding: the arrays (FIFO objects,
    Buffers) live as long as the Emulator, so a binding's typed views stay valid."""
    steps = [_compile_step(fn, k, step, make_call) for k, step in enumerate(fn.steps)]

    def bind(arrays, block):
        calls = [bind_step(arrays, block) for bind_step in steps]
        if len(calls) == 1:
            return calls[0]

        def run():
            for call in calls:
                call()
        return run
    return bind


def _compile_step(fn, k: int, step, make_call):
    """`bind(arrays, block) -> call()` of one step."""
    where = f"Function '{fn.name}' step {k}"
    if isinstance(step, KernelStep):
        return _kernel_step(fn, where, step, make_call)
    if isinstance(step, ScalarStep):
        return _scalar_step(fn, where, step)
    raise PlanError(f"{where} is a {type(step).__name__}: a Function holds KernelSteps and ScalarSteps.")


def _param(fn, where: str, source: str) -> int:
    if source not in fn.params:
        raise PlanError(f"{where} reads '{source}', which is not a parameter of '{fn.name}' ({', '.join(fn.params)}): name one of them.")
    return fn.params.index(source)


def _pointer(fn, where: str, ptr, dtype: np.dtype):
    """`view(arrays, block, shape)`: an array of `dtype` and `shape` at the Ptr's byte address."""
    if not isinstance(ptr, Ptr):
        raise PlanError(f"{where} passes {ptr!r} where the C ABI takes a pointer: pass a Ptr.")
    if ptr.block_stride and not fn.blocked:
        raise PlanError(f"{where} strides '{ptr.source}' by {ptr.block_stride} bytes per block, but '{fn.name}' takes no block index: mark it blocked or drop the stride.")
    index, offset, stride, item = _param(fn, where, ptr.source), ptr.offset, ptr.block_stride, dtype.itemsize

    def view(arrays, block, shape):
        base = arrays[index]
        start, nbytes = offset + stride * block, int(np.prod(shape, dtype=np.int64)) * item
        data = base[start: start + nbytes]
        if data.size != nbytes or start < 0:
            raise PlanError(f"{where} reaches bytes {start}..{start + nbytes - 1} of '{ptr.source}', which has {base.size}: keep pointers inside the object.")
        return data.view(dtype).reshape(shape)
    return view


def _scalar(fn, where: str, arg, ctype: str = "i32"):
    """`bind(arrays, block) -> read()` of an Imm or a Load (an i32 read from a bound object)."""
    if isinstance(arg, Imm):
        if arg.ctype != ctype:
            raise PlanError(f"{where} passes an {arg.ctype} immediate {arg.value!r} where the C ABI takes {ctype}: give it ctype {ctype!r}.")
        value = float(arg.value) if ctype == "f32" else int(arg.value)
        return lambda arrays, block: lambda: value
    if isinstance(arg, Load) and ctype == "i32":
        view = _pointer(fn, where, Ptr(arg.source, arg.offset), I32)

        def bind(arrays, block):
            word = view(arrays, 0, ONE)
            return lambda: int(word[0])
        return bind
    raise PlanError(f"{where} passes {arg!r} where the C ABI takes an {ctype} value: pass an Imm or (for i32) a Load.")


def _scalars(fn, where: str, args, ctypes):
    """`bind(arrays, block) -> read()` of the tuple of these values (fixed when all are Imm)."""
    scalars = [_scalar(fn, where, a, t) for a, t in zip(args, ctypes)]
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


def _kernel_step(fn, where: str, step, make_call):
    found = lookup(step.symbol)
    kernel = found.kernel
    where = f"{where} ({step.symbol})"
    pointers = kernel.arity + 1
    attr_names = [name for name, _ in kernel.c_attrs]
    attr_types = [ctype for _, ctype in kernel.c_attrs]
    nsizes = len(step.args) - pointers - len(attr_types)
    if nsizes < 1:
        raise PlanError(f"{where} has {len(step.args)} arguments, but its C ABI takes {pointers} pointers, at least one i32 size and {len(attr_types)} attribute(s): pass them in that order.")
    dtypes = [found.dtype] * kernel.arity + [found.out]
    views = [_pointer(fn, where, p, d) for p, d in zip(step.args[:pointers], dtypes)]
    sizes = _scalars(fn, where, step.args[pointers: pointers + nsizes], ["i32"] * nsizes)
    attrs = _scalars(fn, where, step.args[pointers + nsizes:], attr_types)
    call = make_call(found, attr_names, ["ptr"] * pointers + ["i32"] * nsizes + attr_types)
    fixed = all(isinstance(arg, Imm) for arg in step.args[pointers:])

    def bind(arrays, block):
        read_sizes, read_attrs = sizes(arrays, block), attrs(arrays, block)

        def resolve(size_values):
            return [v(arrays, block, s) for v, s in zip(views, _abi_shapes(kernel, size_values))]
        if fixed:
            size_values = read_sizes()
            return call.bind(resolve(size_values), size_values, read_attrs())
        by_sizes: dict[tuple, list] = {}

        def run():
            size_values = read_sizes()
            resolved = by_sizes.get(size_values)
            if resolved is None:
                resolved = by_sizes[size_values] = resolve(size_values)
            call(resolved, size_values, read_attrs())
        return run
    return bind


def _scalar_step(fn, where: str, step):
    if step.op not in WordDef.OPS:
        raise PlanError(f"{where} uses op {step.op!r}: use one of {', '.join(WordDef.OPS)}.")
    dest = _pointer(fn, where, step.dest, I32)
    a = _scalar(fn, where, step.a)
    b = _scalar(fn, where, step.b if step.b is not None else Imm(0))
    op, divides = SCALAR_OPS[step.op], step.op in ("floordiv", "mod")

    def bind(arrays, block):
        out, read_a, read_b = dest(arrays, block, ONE), a(arrays, block), b(arrays, block)

        def run():
            x, y = read_a(), read_b()
            if divides and y == 0:
                raise ArgumentError(f"{where} computes {x} {step.op} 0: a per-call value divides by zero. Give values that keep the divisor non-zero.")
            out[0] = wrap_i32(op(x, y))
        return run
    return bind


# ---- core programs -----------------------------------------------------------------------------

class CoreProgram:
    """One core's program, checked and compiled; `task()` is the generator the core runs."""

    def __init__(self, core, ends: dict, functions: dict, buffers: dict, board):
        self.core, self.board = core, board
        self.name = f"core {core.tile.name} (group {core.group})"
        self.ends, self.functions, self.buffers = ends, functions, buffers
        self.ports = self._ports(core.program, {})
        if not self.ports:
            raise PlanError(f"{self.name} acquires nothing, so it would spin forever: give its program an Acquire.")
        self._check_holds()
        self.block = [0]  # the index of the innermost Loop running
        self.outer: list[int] = []  # the indices of the Loops around it
        self.at = None  # the step it last blocked on
        self.steps = self._compile(core.program, in_loop=False)

    def task(self):
        while True:
            yield from self._execute(self.steps)

    def state(self) -> tuple:
        """Where it is: the step it blocks on and the Loop indices (machine.py compares these)."""
        return id(self.at), self.block[0], *self.outer

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

    # ---- checks --------------------------------------------------------------------------------
    def _ports(self, program, found: dict) -> dict:
        """FIFO name -> the port this core uses it on."""
        for op in program:
            if isinstance(op, Loop):
                self._ports(op.body, found)
            elif isinstance(op, (Acquire, Release)):
                if not isinstance(op.port, Port):
                    raise PlanError(f"{self.name} uses @{op.fifo} on port {op.port!r}: use Port.PRODUCE or Port.CONSUME.")
                if found.setdefault(op.fifo, op.port) != op.port:
                    raise PlanError(f"{self.name} both produces and consumes @{op.fifo}: a core sits at one end of a FIFO.")
        return found

    def _check_holds(self):
        held = dict.fromkeys(self.ports, 0)
        self._simulate(self.core.program, held)
        left = [f"{n} @{fifo} object(s) ({self.ports[fifo]})" for fifo, n in held.items() if n]
        if left:
            raise PlanError(f"{self.name} ends an iteration of its program still holding {', '.join(left)}: release every object it acquires in the same iteration.")

    def _simulate(self, program, held: dict):
        for op in program:
            if isinstance(op, Loop):
                for _ in range(op.count):
                    self._simulate(op.body, held)
            elif isinstance(op, Acquire):
                held[op.fifo] = max(held[op.fifo], op.count)
            elif isinstance(op, Release):
                if op.count > held[op.fifo]:
                    raise PlanError(f"{self.name} releases {op.count} @{op.fifo} object(s) ({op.port}) while holding {held[op.fifo]}: release only what it acquired.")
                held[op.fifo] -= op.count
            elif isinstance(op, Invoke):
                empty = [o for o in op.objects if o in held and held[o] == 0]
                if empty:
                    raise PlanError(f"{self.name} invokes '{op.function}' on @{empty[0]} without holding an object of it: acquire it first.")

    # ---- compilation ---------------------------------------------------------------------------
    def _compile(self, program, in_loop: bool) -> list:
        steps = []
        for op in program:
            if isinstance(op, Loop):
                steps += self._loop(op.count, self._compile(op.body, in_loop=True))
            elif isinstance(op, Acquire):
                steps.append(self._acquire(op))
            elif isinstance(op, Release):
                steps.append(self._release(op))
            elif isinstance(op, Invoke):
                steps.append(self._invoke(op, in_loop))
            else:
                raise PlanError(f"{self.name} has a {type(op).__name__} in its program: use Acquire, Release, Invoke and Loop.")
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

    def _ring(self, fifo: str, port: Port):
        if fifo not in self.ends:
            raise PlanError(f"{self.name} uses FIFO @{fifo}, which the plan does not define: add it, or fix the name.")
        return self.ends[fifo].ring(self.core.tile, port)

    def _acquire(self, op):
        ring = self._ring(op.fifo, op.port)
        if not 1 <= op.count <= ring.depth:
            raise PlanError(f"{self.name} acquires {op.count} @{op.fifo} object(s), but the FIFO has depth {ring.depth}: acquire 1..{ring.depth}.")
        wait = (ring.signal, f"waits to acquire @{op.fifo} ({op.port}, {op.count})")
        return partial(ring.acquire_produce if op.port is Port.PRODUCE else ring.acquire_consume, op.count, wait)

    def _release(self, op):
        ring = self._ring(op.fifo, op.port)
        return partial(ring.release_produce if op.port is Port.PRODUCE else ring.release_consume, op.count)

    def _invoke(self, op, in_loop: bool):
        if op.function not in self.functions:
            raise PlanError(f"{self.name} invokes '{op.function}', which the plan does not define: add the Function, or fix the name.")
        fn, bind = self.functions[op.function]
        if len(op.objects) != len(fn.params):
            raise PlanError(f"{self.name} invokes '{fn.name}' with {len(op.objects)} object(s) for its {len(fn.params)} parameter(s) ({', '.join(fn.params)}): bind one object per parameter.")
        if fn.blocked and not in_loop:
            raise PlanError(f"{self.name} invokes blocked function '{fn.name}' outside a Loop: invoke it inside the Loop whose index it takes.")
        bound = [self._object(name) for name in op.objects]
        held = [target for target in bound if not isinstance(target, np.ndarray)]
        bindings: dict[tuple, object] = {}
        at, blocked, board = self.block, fn.blocked, self.board

        def arrays(objects):
            objects = iter(objects)
            return [target if isinstance(target, np.ndarray) else next(objects).data for target in bound]

        def invoke():
            objects = [ring.objects[getattr(ring, position)] for ring, position in held]
            key = (at[0] if blocked else 0, *objects)
            run = bindings.get(key)
            if run is None:
                run = bindings[key] = bind(arrays(objects), key[0])
            run()
            if board.trace is not None:
                board.trace.append(run)
        return invoke

    def _object(self, name: str):
        """What a parameter is bound to: (ring, the attribute naming the slot of the first object
        the core holds) for a FIFO, or a Buffer's uint8 array."""
        if name in self.ports:
            ring = self._ring(name, self.ports[name])
            return ring, "produce_at" if self.ports[name] is Port.PRODUCE else "consume_at"
        buffer = self.buffers.get(name)
        if buffer is None:
            raise PlanError(f"{self.name} binds '{name}', which is neither a FIFO it acquires nor a Buffer: acquire the FIFO, or add the Buffer.")
        tile, data = buffer
        if tile != self.core.tile:
            raise PlanError(f"{self.name} binds Buffer '{name}', which lives on {tile.name}: use Buffers of the core's own tile.")
        return data


def _enter(index: list, outer: list):
    outer.append(index[0])


def _leave(index: list, outer: list):
    index[0] = outer.pop()

