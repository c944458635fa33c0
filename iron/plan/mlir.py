"""`print_mlir(plan)`: a Plan as MLIR-AIE text, deterministic and deciding nothing: tiles, object
FIFOs, links, buffers, one `func.func private` per Function, one `aie.core` per Core and the
runtime sequence, in only the ops of docs/platform.md section 3 (`ALLOWED_OPS`). The MLIR
spellings of types (memrefs) live here, not in the Plan; a Dma patched at launch is
preceded by `// iron.patch dma=<k> word=<w>`. It prints a Plan `check_plan` passed, checking
again only what MLIR alone needs (each Function parameter names the object whose type it takes)."""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.errors import PlanError
from iron.names import object_file
from iron.plan.plan import (
    Acquire,
    Buffer,
    Core,
    Dma,
    Fifo,
    Function,
    Invoke,
    Loop,
    Plan,
    Release,
    launch_steps,
)

ALLOWED_OPS = frozenset({
    "aie.device", "aie.tile", "aie.objectfifo", "aie.objectfifo.link", "aie.objectfifo.acquire",
    "aie.objectfifo.release", "aie.objectfifo.subview.access", "aie.core", "aie.end", "aie.buffer",
    "func.func", "func.call", "aie.runtime_sequence", "aiex.npu.dma_memcpy_nd", "aiex.npu.dma_wait",
    "arith.constant", "arith.index_cast", "scf.for",
    "aiex.configure", "aiex.run",   # a segmented full ELF's @main (docs/platform.md section 7)
})
FOREVER = 9223372036854775807   # the core loop's bound: cores start once and never return
SEQUENCE = "sequence"           # the runtime sequence's symbol
INDENT = "  "


def print_mlir(plan: Plan) -> str:
    """The MLIR-AIE text of `plan`, ending with a newline. A segmented full ELF is one module: a
    device per segment and a `@main` whose sequence configures and runs them in order. A
    segmented xclbin design is one module per segment (`segment_modules`), built one by one."""
    if plan.segments:
        return "".join(segment_modules(plan))
    return "\n".join(["module {", *_device_lines(plan, f"{plan.device.name})", SEQUENCE), "}"]) + "\n"


def segment_modules(plan: Plan) -> list[str]:
    """The modules a segmented design is built from: one (full ELF) or one per segment."""
    if not plan.full_elf:
        return [print_mlir(segment) for segment in plan.segments]
    names = [f"seg{k}" for k in range(len(plan.segments))]
    lines = ["module {", *_indented(main_lines(plan, names), 1)]
    for name, segment in zip(names, plan.segments):
        lines += _device_lines(segment, f"{segment.device.name}) @{name}", f"{name}_{SEQUENCE}")
    return ["\n".join([*lines, "}"]) + "\n"]


def main_lines(plan: Plan, names: list[str]) -> list[str]:
    """`@main`: its sequence takes the host buffers and loads and runs each segment in turn."""
    args, params = _sequence_args(plan)
    values, types = _join(arg for arg, _ in args.values()), _join(shape for _, shape in args.values())
    runs = [line for name in names for line in (
        f"aiex.configure @{name} {{", f"{INDENT}aiex.run @{name}_{SEQUENCE}({values}) : ({types})", "}")]
    return [f"aie.device({plan.device.name}) @main {{",
            *_indented([f"aie.runtime_sequence @{SEQUENCE}({params}) {{", *_indented(runs, 1), "}"], 1), "}"]


def _device_lines(plan: Plan, device: str, sequence: str) -> list[str]:
    """`aie.device(<device>) { ... }` (device may carry a symbol), indented one level."""
    body = [
        *tile_lines(plan),
        *fifo_lines(plan),
        *link_lines(plan),
        *buffer_lines(plan),
        *declaration_lines(plan),
        *(line for core in plan.cores for line in core_lines(plan, core)),
        *sequence_lines(plan, sequence),
    ]
    return [f"{INDENT}aie.device({device} {{", *_indented(body, 2), f"{INDENT}}}"]


def memref(elements: int, dtype) -> str:
    """`memref<NxT>`: N elements of dtype's MLIR element type."""
    return f"memref<{elements}x{dtypes.mlir_type(dtype)}>"


def object_memref(held: Fifo | Buffer) -> str:
    """The memref of a FIFO's objects or of a Buffer: whole elements of its dtype."""
    return memref(held.nbytes // held.dtype.itemsize, held.dtype)


# ---- device-level declarations ------------------------------------------------------------------

def tile_lines(plan: Plan) -> list[str]:
    tiles = sorted(plan.tiles, key=lambda t: (t.col, t.row))
    return [f"%{t.name} = aie.tile({t.col}, {t.row})" for t in tiles]


def fifo_lines(plan: Plan) -> list[str]:
    return [
        f"aie.objectfifo @{f.name}(%{f.producer.name}, {{{_join('%' + c.name for c in f.consumers)}}}, "
        f"{f.depth} : i32) : !aie.objectfifo<{object_memref(f)}>"
        for f in plan.fifos
    ]


def link_lines(plan: Plan) -> list[str]:
    return [
        f"aie.objectfifo.link [{_join(f'@{s}' for s in link.sources)}] -> "
        f"[{_join(f'@{d}' for d in link.destinations)}] "
        f"([{_join(_link_offsets(plan, link.source_offsets, link.destinations))}] "
        f"[{_join(_link_offsets(plan, link.destination_offsets, link.sources))}])"
        for link in plan.links
    ]


def _link_offsets(plan: Plan, offsets: tuple[int, ...], mem_side: tuple[str, ...]) -> list[int]:
    """Byte offsets into the mem tile's object (a join's destination, a split's source), printed
    in elements of that object, as mlir-aie reads them."""
    return [o // plan.fifo(mem_side[0]).dtype.itemsize for o in offsets]


def buffer_lines(plan: Plan) -> list[str]:
    return [f'%{b.name} = aie.buffer(%{b.tile.name}) {{sym_name = "{b.name}"}} : {object_memref(b)}'
            for b in plan.buffers]


def declaration_lines(plan: Plan) -> list[str]:
    """One `func.func private` per Function, linking with `<function>.o` (built from its glue source)."""
    return [
        f"func.func private @{f.name}({_join(arg_types(plan, f))}) attributes {{link_with = \"{object_file(f.name)}\"}}"
        for f in plan.functions
    ]


def arg_types(plan: Plan, function: Function) -> list[str]:
    """The memref of each object or buffer the function takes, then i32 for a Loop index."""
    held = {**{b.name: b for b in plan.buffers}, **{f.name: f for f in plan.fifos}}
    unknown = [name for name in function.params if name not in held]
    if unknown:   # a Function's parameters may have names of their own (the emulator binds objects by position)
        raise PlanError(f"Function '{function.name}' has parameters {unknown} naming no FIFO or Buffer, whose memref "
                        "types MLIR declares it with: name each parameter after an object it takes.")
    return [object_memref(held[name]) for name in function.params] + (["i32"] if function.blocked else [])


# ---- cores --------------------------------------------------------------------------------------

def core_lines(plan: Plan, core: Core) -> list[str]:
    """`aie.core`: index constants, then the program inside the loop that runs once per launch."""
    counts = sorted({0, 1, *(step.count for step, _ in launch_steps(core.program) if isinstance(step, Loop))})
    constants = [f"%c{n} = arith.constant {n} : index" for n in counts]
    constants.append(f"%cmax = arith.constant {FOREVER} : index")
    program = program_lines(plan, core.program, {}, {}, 0)
    return [
        f"%core_{core.tile.col}_{core.tile.row} = aie.core(%{core.tile.name}) {{",
        *_indented(constants, 1),
        f"{INDENT}scf.for %launch = %c0 to %cmax step %c1 {{",
        *_indented(program, 2),
        f"{INDENT}}}",
        f"{INDENT}aie.end",
        f"}} {{stack_size = {core.stack_bytes} : i32}}",
    ]


def program_lines(plan: Plan, program: tuple, acquired: dict, taken: dict, depth: int) -> list[str]:
    """The ops of `program`. `acquired` maps a FIFO to the value of its object in scope, `taken`
    counts each FIFO's acquires in this core (to name them uniquely), `depth` is the Loop depth."""
    lines = []
    for step in program:
        if isinstance(step, Acquire):
            lines += acquire_lines(plan, step, acquired, taken)
        elif isinstance(step, Release):
            lines.append(f"aie.objectfifo.release @{step.fifo}({step.port.value}, {step.count})")
        elif isinstance(step, Invoke):
            lines.append(invoke_line(plan, step, acquired, depth))
        else:
            lines += loop_lines(plan, step, dict(acquired), taken, depth)
    return lines


def acquire_lines(plan: Plan, step: Acquire, acquired: dict, taken: dict) -> list[str]:
    n = taken.get(step.fifo, 0)
    taken[step.fifo] = n + 1
    view, obj = f"%{step.fifo}_view{n}", f"%{step.fifo}_obj{n}"
    shape = object_memref(plan.fifo(step.fifo))
    acquired[step.fifo] = obj
    return [
        f"{view} = aie.objectfifo.acquire @{step.fifo}({step.port.value}, {step.count}) "
        f": !aie.objectfifosubview<{shape}>",
        f"{obj} = aie.objectfifo.subview.access {view}[0] : !aie.objectfifosubview<{shape}> -> {shape}",
    ]


def loop_lines(plan: Plan, loop: Loop, acquired: dict, taken: dict, depth: int) -> list[str]:
    index = f"%block{depth}"
    body = program_lines(plan, loop.body, acquired, taken, depth + 1)
    return [
        f"scf.for {index} = %c0 to %c{loop.count} step %c1 {{",
        f"{INDENT}{index}_i32 = arith.index_cast {index} : index to i32",
        *_indented(body, 1),
        "}",
    ]


def invoke_line(plan: Plan, step: Invoke, acquired: dict, depth: int) -> str:
    function = plan.function(step.function)
    types = arg_types(plan, function)
    values = [acquired.get(name, f"%{name}") for name in step.objects]   # an acquired object, or a Buffer
    values += [f"%block{depth - 1}_i32"] * function.blocked
    return f"func.call @{function.name}({_join(values)}) : ({_join(types)}) -> ()"


# ---- runtime sequence ---------------------------------------------------------------------------

def _sequence_args(plan: Plan) -> tuple[dict[str, tuple[str, str]], str]:
    """Each host buffer's (argument, memref) in a runtime sequence, and the parameter list."""
    args = {b.name: (f"%arg{i}", memref(b.nwords, np.int32)) for i, b in enumerate(plan.host_buffers)}
    return args, _join(f"{arg}: {shape}" for arg, shape in args.values())


def sequence_lines(plan: Plan, symbol: str = SEQUENCE) -> list[str]:
    args, params = _sequence_args(plan)
    ops, dma_index = [], 0
    for op in plan.sequence:
        if isinstance(op, Dma):
            ops += dma_lines(op, dma_index, args)
            dma_index += 1
        else:
            ops.append(f"aiex.npu.dma_wait {{symbol = @{op.fifo}}}")
    return [f"aie.runtime_sequence @{symbol}({params}) {{", *_indented(ops, 1), "}"]


def dma_lines(dma: Dma, index: int, args: dict) -> list[str]:
    arg, shape = args[dma.buffer]
    token = ", issue_token = true" if dma.issue_token else ""
    line = (
        f"aiex.npu.dma_memcpy_nd({arg}[0, 0, 0, {dma.offset}][{_join(dma.sizes)}][{_join(dma.strides)}]) "
        f"{{id = {dma.bd_id} : i64, metadata = @{dma.fifo}{token}}} : {shape}"
    )
    patch = [] if dma.patch_word is None else [f"// iron.patch dma={index} word={dma.patch_word}"]
    return [*patch, line]


# ---- text ---------------------------------------------------------------------------------------

def _join(items) -> str:
    return ", ".join(str(i) for i in items)


def _indented(lines: list[str], levels: int) -> list[str]:
    return [INDENT * levels + line for line in lines]
