"""What runs on a core: each Function compiled once into a closure, and each core's program into
a generator that repeats it forever.

A Function runs on the byte arrays bound to its params (acquired FIFO objects, Buffers): a
KernelStep resolves its Ptrs into typed views shaped by the kernel's C ABI (`kernel.abi_shapes`
of its size operands) and calls the kernel (numpy or the native library, kernels.py); a
ScalarStep computes an i32 with wrap-around (floordiv and mod with Python's floor semantics).
A core program is checked once at load (FIFO ends on the core's tile, acquire counts within the
depth, objects held when invoked, every acquired object released by the end of an iteration) and
compiled into steps; the core's generator yields `(signal, text)` whenever an Acquire cannot
proceed. Invoke binds a FIFO parameter to the first object the core holds of it.

It does not move data between tiles (fifo.py, dma.py) or schedule (machine.py).
"""
from __future__ import annotations

import numpy as np

from iron.compiler.plan import (
    Acquire,
    Imm,
    Invoke,
    KernelStep,
    Load,
    Loop,
    Ptr,
    Release,
    ScalarStep,
    WordDef,
)
from iron.errors import ArgumentError, PlanError
from iron.ir import SCALAR_BINARY, wrap_i32
from iron.kernels.registry import lookup

SCALAR_OPS = {**SCALAR_BINARY, "copy": lambda a, b: a}
I32 = np.dtype(np.int32)
ONE = (1,)


# ---- Functions ---------------------------------------------------------------------------------

def compile_function(fn, make_call):
    """`run(arrays, block)`: fn's steps on the uint8 arrays bound to its params, in order.

    Each step is bound to its arrays once per (arrays, block): the arrays (FIFO slots, Buffers)
    live as long as the Emulator, so the typed views of a binding stay valid and are reused."""
    steps = [_compile_step(fn, k, step, make_call) for k, step in enumerate(fn.steps)]
    bindings: dict[tuple, list] = {}

    def run(arrays, block):
        key = (block, *map(id, arrays))
        calls = bindings.get(key)
        if calls is None:
            calls = bindings[key] = [bind(arrays, block) for bind in steps]
        for call in calls:
            call()
    return run


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
    kernel, dtype = lookup(step.symbol)
    where = f"{where} ({step.symbol})"
    pointers = kernel.arity + 1
    attr_names = [name for name, _ in kernel.c_attrs]
    attr_types = [ctype for _, ctype in kernel.c_attrs]
    nsizes = len(step.args) - pointers - len(attr_types)
    if nsizes < 1:
        raise PlanError(f"{where} has {len(step.args)} arguments, but its C ABI takes {pointers} pointers, at least one i32 size and {len(attr_types)} attribute(s): pass them in that order.")
    dtypes = [dtype] * kernel.arity + [np.dtype(kernel.out_dtype(dtype))]
    views = [_pointer(fn, where, p, d) for p, d in zip(step.args[:pointers], dtypes)]
    sizes = _scalars(fn, where, step.args[pointers: pointers + nsizes], ["i32"] * nsizes)
    attrs = _scalars(fn, where, step.args[pointers + nsizes:], attr_types)
    call = make_call(kernel, dtype, attr_names, ["ptr"] * pointers + ["i32"] * nsizes + attr_types)

    def bind(arrays, block):
        read_sizes, read_attrs = sizes(arrays, block), attrs(arrays, block)
        by_sizes: dict[tuple, list] = {}

        def run():
            size_values = read_sizes()
            resolved = by_sizes.get(size_values)
            if resolved is None:
                shapes = _abi_shapes(kernel, size_values)
                resolved = by_sizes[size_values] = [v(arrays, block, s) for v, s in zip(views, shapes)]
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

    def __init__(self, core, ends: dict, functions: dict, buffers: dict):
        self.core = core
        self.name = f"core {core.tile.name} (group {core.group})"
        self.ends, self.functions, self.buffers = ends, functions, buffers
        self.ports = self._ports(core.program, {})
        if not self.ports:
            raise PlanError(f"{self.name} acquires nothing, so it would spin forever: give its program an Acquire.")
        self._check_holds()
        self.steps = self._compile(core.program, in_loop=False)

    def task(self):
        while True:
            yield from _execute(self.steps, 0)

    # ---- checks --------------------------------------------------------------------------------
    def _ports(self, program, found: dict) -> dict:
        """FIFO name -> the port this core uses it on."""
        for op in program:
            if isinstance(op, Loop):
                self._ports(op.body, found)
            elif isinstance(op, (Acquire, Release)):
                if op.port not in ("Produce", "Consume"):
                    raise PlanError(f"{self.name} uses @{op.fifo} on port {op.port!r}: use 'Produce' or 'Consume'.")
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
                steps.append((op.count, self._compile(op.body, in_loop=True)))
            elif isinstance(op, Acquire):
                steps.append(self._acquire(op))
            elif isinstance(op, Release):
                steps.append(self._release(op))
            elif isinstance(op, Invoke):
                steps.append(self._invoke(op, in_loop))
            else:
                raise PlanError(f"{self.name} has a {type(op).__name__} in its program: use Acquire, Release, Invoke and Loop.")
        return steps

    def _ring(self, fifo: str, port: str):
        if fifo not in self.ends:
            raise PlanError(f"{self.name} uses FIFO @{fifo}, which the plan does not define: add it, or fix the name.")
        return self.ends[fifo].ring(self.core.tile, port)

    def _acquire(self, op):
        ring = self._ring(op.fifo, op.port)
        if not 1 <= op.count <= ring.depth:
            raise PlanError(f"{self.name} acquires {op.count} @{op.fifo} object(s), but the FIFO has depth {ring.depth}: acquire 1..{ring.depth}.")
        wait, count = (ring.signal, f"waits to acquire @{op.fifo} ({op.port}, {op.count})"), op.count
        take = ring.acquire_produce if op.port == "Produce" else ring.acquire_consume
        return lambda block: None if take(count) else wait

    def _release(self, op):
        ring, count = self._ring(op.fifo, op.port), op.count
        give = ring.release_produce if op.port == "Produce" else ring.release_consume
        return lambda block: give(count)

    def _invoke(self, op, in_loop: bool):
        if op.function not in self.functions:
            raise PlanError(f"{self.name} invokes '{op.function}', which the plan does not define: add the Function, or fix the name.")
        fn, run = self.functions[op.function]
        if len(op.objects) != len(fn.params):
            raise PlanError(f"{self.name} invokes '{fn.name}' with {len(op.objects)} object(s) for its {len(fn.params)} parameter(s) ({', '.join(fn.params)}): bind one object per parameter.")
        if fn.blocked and not in_loop:
            raise PlanError(f"{self.name} invokes blocked function '{fn.name}' outside a Loop: invoke it inside the Loop whose index it takes.")
        getters = [self._object(name) for name in op.objects]

        def invoke(block):
            run([get() for get in getters], block)
        return invoke

    def _object(self, name: str):
        """A getter of the uint8 array a parameter is bound to (the held object, or a Buffer)."""
        if name in self.ports:
            ring = self._ring(name, self.ports[name])
            return ring.producing if self.ports[name] == "Produce" else ring.consuming
        buffer = self.buffers.get(name)
        if buffer is None:
            raise PlanError(f"{self.name} binds '{name}', which is neither a FIFO it acquires nor a Buffer: acquire the FIFO, or add the Buffer.")
        tile, data = buffer
        if tile != self.core.tile:
            raise PlanError(f"{self.name} binds Buffer '{name}', which lives on {tile.name}: use Buffers of the core's own tile.")
        return lambda: data


def _execute(steps: list, block: int):
    """Run compiled steps (a Loop is `(count, body)`), yielding what each blocked Acquire waits on."""
    for step in steps:
        if type(step) is tuple:
            count, body = step
            for index in range(count):
                yield from _execute(body, index)
        else:
            while (wait := step(block)) is not None:
                yield wait
