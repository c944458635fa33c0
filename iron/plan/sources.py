"""`kernel_sources(plan)`: the C++ a Plan's cores link, file name -> text: one glue file
`<function>.cc` per Function (built into the `<function>.o` its declaration links with)
defining `extern "C" void <function>(uint8_t* p0, ..., [int32_t block])`, which calls each
kernel through its C ABI and computes scalar words with int32 wrap-around (floor division and
modulo as Python's, a zero divisor giving 0); plus the kernels' sources and iron_kernel.h, so
every file compiles on its own. It prints a Plan `check_plan` passed and checks nothing again."""
from __future__ import annotations

import numpy as np

from iron import dtypes
from iron.kernels.base import library_sources
from iron.names import source_file
from iron.plan.plan import CType, Function, KernelStep, Load, Plan, Ptr, ScalarStep, WordOp

HEADER = "iron_kernel.h"
C_TYPES = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
    dtypes.bfloat16: "uint16_t",   # raw bfloat16 bits, as iron_kernel.h stores them
    np.dtype(np.float32): "float",
}
# The int32 word helpers a glue file defines when its steps use them.
WORD_HELPERS = {
    "load": "int32_t load_word(const uint8_t* at) {\n"
            "  int32_t value;\n  __builtin_memcpy(&value, at, sizeof value);\n  return value;\n}",
    "store": "void store_word(uint8_t* at, int32_t value) { __builtin_memcpy(at, &value, sizeof value); }",
    "add": "int32_t word_add(int32_t a, int32_t b) { return static_cast<int32_t>(uint32_t(a) + uint32_t(b)); }",
    "sub": "int32_t word_sub(int32_t a, int32_t b) { return static_cast<int32_t>(uint32_t(a) - uint32_t(b)); }",
    "mul": "int32_t word_mul(int32_t a, int32_t b) { return static_cast<int32_t>(uint32_t(a) * uint32_t(b)); }",
    "floordiv": "int32_t word_floordiv(int32_t a, int32_t b) {\n"
                "  if (b == 0) return 0;\n"
                "  if (b == -1) return static_cast<int32_t>(0u - uint32_t(a));\n"
                "  const int32_t quotient = a / b;\n"
                "  return a % b != 0 && (a < 0) != (b < 0) ? quotient - 1 : quotient;\n}",
    "mod": "int32_t word_mod(int32_t a, int32_t b) {\n"
           "  if (b == 0 || b == -1) return 0;\n"
           "  const int32_t remainder = a % b;\n"
           "  return remainder != 0 && (remainder < 0) != (b < 0) ? remainder + b : remainder;\n}",
    "min": "int32_t word_min(int32_t a, int32_t b) { return a < b ? a : b; }",
    "max": "int32_t word_max(int32_t a, int32_t b) { return a > b ? a : b; }",
}
FLOAT_SPECIALS = {"inf": "__builtin_inff()", "-inf": "-__builtin_inff()", "nan": "__builtin_nanf(\"\")"}


def kernel_sources(plan: Plan) -> dict[str, str]:
    """Every C++ file the Plan's cores link: glue files, kernel sources, iron_kernel.h (of every
    segment, whose Functions have distinct names)."""
    if plan.segments:
        return dict(sorted(item for segment in plan.segments for item in kernel_sources(segment).items()))
    files = {HEADER: library_sources()[HEADER]}
    files.update(kernel.source_text() for kernel in called_kernels(plan))
    for function in plan.functions:
        files[source_file(function.name)] = glue_source(plan, function)
    return dict(sorted(files.items()))


def called_kernels(plan: Plan) -> tuple[type, ...]:
    """The kernel classes the Plan's KernelSteps call, in first-use order."""
    return tuple(dict.fromkeys(s.kernel for f in plan.functions for s in f.steps if isinstance(s, KernelStep)))


def glue_source(plan: Plan, function: Function) -> str:
    """The text of `<function>.cc`."""
    calls = [_step_line(function, step) for step in function.steps]
    includes = sorted({s.kernel.source_name() for s in function.steps if isinstance(s, KernelStep)})
    used = _helpers_used(function)
    params = [f"uint8_t* p{i}" for i in range(len(function.params))]
    params += ["int32_t block"] if function.blocked else []
    lines = [
        f"// {function.name}.cc: function {function.name} of design {plan.name}, written by iron from its Plan.",
        *(f"// p{i}: {name}" for i, name in enumerate(function.params)),
        f'#include "{HEADER}"',
        *(f'#include "{name}"' for name in includes),
        "",
    ]
    if used:
        lines += ["namespace {", "", *(WORD_HELPERS[name] + "\n" for name in used), "}  // namespace", ""]
    lines += [f'extern "C" void {function.name}({", ".join(params)}) {{', *(f"  {c}" for c in calls), "}"]
    return "\n".join(lines) + "\n"


def _helpers_used(function: Function) -> list[str]:
    """The WORD_HELPERS the function's steps call, in WORD_HELPERS order."""
    used = set()
    for step in function.steps:
        used |= {"load"} if any(isinstance(a, Load) for a in step.args) else set()
        used |= {"store", step.op.value} if isinstance(step, ScalarStep) else set()
    return [name for name in WORD_HELPERS if name in used]


def _step_line(function: Function, step) -> str:
    return (kernel_call if isinstance(step, KernelStep) else scalar_statement)(function, step)


def kernel_call(function: Function, step: KernelStep) -> str:
    """`symbol(args);`: pointer i is an input (const, its dtype in the step) below the kernel's arity,
    else its output or destination (`out`)."""
    kernel, ins, out = step.kernel, step.in_dtypes, step.out
    args, pointers = [], 0
    for arg in step.args:
        if isinstance(arg, Ptr):
            const, element = ("const ", ins[pointers]) if pointers < kernel.arity else ("", out)
            args.append(f"reinterpret_cast<{const}{C_TYPES[np.dtype(element)]}*>({_address(function, arg)})")
            pointers += 1
        else:
            args.append(_value(function, arg))
    return f"{step.symbol}({', '.join(args)});"


def scalar_statement(function: Function, step: ScalarStep) -> str:
    """`store_word(dest, op(a, b));` in 32-bit wrap-around arithmetic."""
    if step.op is WordOp.COPY:
        return f"store_word({_address(function, step.dest)}, {_value(function, step.a)});"
    value = f"word_{step.op}({_value(function, step.a)}, {_value(function, step.b)})"
    return f"store_word({_address(function, step.dest)}, {value});"


def _address(function: Function, ptr: Ptr) -> str:
    """`p<i> + offset [+ block_stride * block]` for a Ptr into parameter i."""
    terms = [f"p{function.params.index(ptr.source)}"]
    terms += [str(ptr.offset)] if ptr.offset else []
    terms += [f"{ptr.block_stride} * block"] if ptr.block_stride else []
    return " + ".join(terms)


def _value(function: Function, arg) -> str:
    """A scalar operand: a Load of an int32 word or an Imm literal."""
    if isinstance(arg, Load):
        return f"load_word({_address(function, Ptr(arg.source, arg.offset))})"
    if arg.ctype is CType.F32:
        text = str(np.float32(arg.value))
        return FLOAT_SPECIALS.get(text, f"{text}f")
    return str(int(arg.value))
