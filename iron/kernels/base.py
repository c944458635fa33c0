"""`iron.Kernel`: what a kernel is to iron. A kernel states its arity, its dtypes (what it computes
in and what it gives), a shape rule, its traits for the compiler (`index_map` and the rest of
traits.py, from which its `role` is derived; `bounds`), a numpy
`compute` (the semantics the reference and the emulator run), the C ABI of its AIE C++ source and
that source; `K.step(...)` hands a call to the trace being recorded. bfloat16 kernels compute in
float32 and round once, as their C++ does; integer results wrap to the output dtype, or clamp to
its range in a kernel that `saturates` (a float rounded to nearest even first). A kernel that
`keeps_zeros` maps zeros to zeros, with any attrs unless `keeps_zeros_in` names those it does so
with (Requantize: zero point 0). Each call is checked where it is traced (`check_abi`: its C ABI
passes every element) and compiled (`check_source`: a user kernel's C++ declares the function it
calls), so no path accepts what another refuses.
"""
from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from iron import dtypes, names
from iron.errors import DeclarationError, KernelTypeError
from iron.kernels.registry import claim, is_library
from iron.kernels.traits import Role, Traits, declared_traits

CC_DIR = Path(__file__).parent / "cc"
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
EXTERN_C = re.compile(r'extern\s*"C"\s*')
DEFINE = re.compile(r"#\s*define\s+\w+\(([^)]*)\)")        # a function-like macro and its parameters
DECLARED = re.compile(r"([A-Za-z_]\w*(?:\s*##\s*\w+)*)\s*\x01")   # a name, then its parameter list
INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"')
NOT_NAMES = frozenset({"__attribute__", "__declspec", "alignas", "decltype", "noexcept", "throw"})
RECORDING = threading.local()  # .trace: the front end's Trace while a body() is traced, else unset;
# .operands: while a call's shapes are checked, a function giving the user's names of its inputs


def library_sources() -> dict[str, str]:
    """iron's kernel library: every .cc and .h file of iron/kernels/cc, file name -> text."""
    return {p.name: p.read_text() for p in sorted(CC_DIR.iterdir()) if p.suffix in (".cc", ".h")}


@dataclass(frozen=True)
class Within:
    """How a per-call attribute is bounded: `lo` <= value <= the extent of axis `axis` of input
    `input` (Softmax's valid length: `Within(1)`, "in 1..n")."""

    lo: int = 0
    input: int = 0
    axis: int = 0

    def range(self, shapes: list[tuple[int, ...]]) -> tuple[int, int]:
        """[lo, hi) for a call on inputs of `shapes`."""
        return self.lo, shapes[self.input][self.axis] + 1


class Kernel:
    """Subclass to add a kernel. Class attributes describe it; `step` records a call."""

    name: ClassVar[str] = ""                  # C symbol stem and source stem: add -> add_f32 in add.cc
    arity: ClassVar[int] = 1                  # tensor inputs (a further positional is `out`)
    dtypes: ClassVar[frozenset] = frozenset(dtypes.SUPPORTED)  # what every input of a call shares
    results: ClassVar[dict] = {}              # input dtype -> further output dtypes dtype= may ask for
    mixed: ClassVar[dict] = {}                # inputs of differing dtypes (uint8, int8) -> the output dtype
    # such a call gives (its only one: a product of uint8 and int8 is exact only in a wider integer)
    attrs: ClassVar[dict[str, Any]] = {}      # static attrs and their defaults (REQUIRED: no default)
    scalar_attrs: ClassVar[tuple[str, ...]] = ()  # attrs that may be per-call values
    c_attrs: ClassVar[tuple[tuple[str, str], ...]] = ()  # attrs passed to C, in order, with C type
    accumulates: ClassVar[bool] = False       # reads its destination (out += ...)
    needs_out: ClassVar[bool] = False         # only writes into a view (no output of its own)
    exact_in_dtype: ClassVar[bool] = False    # bf16 computes without the float32 round trip
    keeps_dtype: ClassVar[bool] = False       # compute() always returns an array of the output dtype
    saturates: ClassVar[bool] = False         # integer results clamp to the output range, not wrap
    copies: ClassVar[bool] = False            # the output is the input (Copy): writing it needs no compute
    gathers: ClassVar[bool] = False           # its attrs pick its output's elements from its input's (Strided)
    scatters: ClassVar[bool] = False          # its attrs place its input's elements among its destination's (Scatter)
    joins: ClassVar[bool] = False             # the output is the inputs joined along attr `axis` (Concat), each
    # output row a row of every input in turn: a lone join of whole host tensors streams them one after the other
    summed_by: ClassVar[type | None] = None   # the kernel adding this one's result into its destination
    batches: ClassVar[bool] = False           # compute() of inputs stacked on leading axes is, bit for bit,
    # the stack of each call's compute(): the emulator runs a library kernel's independent calls as one
    computes_into: ClassVar[bool] = False     # compute(..., out=array) writes its result into that array
    # (which may be an input, as an accumulating kernel's destination is) and returns it: a batch writes in place
    index_map: ClassVar[str | None] = None    # what it computes, in einsum's notation: "mk,kn->mn" (MatMul), "i,i->i"
    # (Add), "rc,c->rc" (RMSNorm), "rc->r" (Argmax); None: nothing known. Its Role is derived (traits.py)
    reduces: ClassVar[str | None] = None      # the axes each output element reads whole (None: those the map drops)
    length_axes: ClassVar[str] = ""           # axes read only up to a per-call `length` (an i32 C attr; None: all),
    # so a row laid out wider (padded) reduces as the row itself
    packed: ClassVar[str] = ""                # input 0's axes stored in GGUF blocks of 32 elements (`block_bytes`
    # bytes each, an attr): QMatVec's "k", its weights' rows as the file ships them
    keeps_zeros: ClassVar[bool] = False       # f(0, 0, ...) = 0 (not Exp: exp(0) = 1), so its calls over a padded
    # layout compute zeros into the padding a MatMul may sum over
    traits: ClassVar[Traits] = Traits(None, "", "", False)   # the above, parsed and checked when the class is made
    role: ClassVar[Role] = Role.OTHER         # derived from the traits: how fusion and placement may treat its calls
    bounds: ClassVar[dict[str, Within]] = {}  # per-call attrs checked against a range before a call runs
    source: ClassVar[str | None] = None       # C++ text (user kernels); None: iron/kernels/cc/<name>.cc
    source_kernel: ClassVar[type | None] = None   # the kernel whose source defines this one's symbols too
    # (a Binary's constant form, LayerNormAffine): the two share one file

    REQUIRED = object()

    def __init_subclass__(cls, **kwargs):
        """A named kernel claims its name when defined (an unnamed one is a base for others)."""
        super().__init_subclass__(**kwargs)
        cls.traits = declared_traits(cls)
        cls.role = cls.traits.role
        if "name" not in cls.__dict__ and cls.name:
            raise DeclarationError(
                f"kernel {cls.__name__} inherits the name '{cls.name}': a kernel's name is its C symbol "
                f"and source file, so each kernel needs its own. Set name = '...' in {cls.__name__}."
            )
        if cls.name:
            names.kernel_name(cls.__name__, cls.name)
            claim(cls)

    # ---- what a subclass defines ---------------------------------------------------------------
    @classmethod
    def out_shape(cls, shapes: list[tuple[int, ...]], **attrs) -> tuple[int, ...]:
        """The output shape from the input shapes (default: elementwise, all equal)."""
        if any(s != shapes[0] for s in shapes):
            cls.refuse(shapes, "needs inputs of one shape")
        return shapes[0]

    @classmethod
    def out_dtype(cls, dtype: np.dtype) -> np.dtype:
        """The output dtype of a call on inputs of `dtype` when the call names none."""
        return dtype

    @classmethod
    def out_dtypes(cls, dtype: np.dtype) -> frozenset:
        """Every output dtype a call on inputs of `dtype` may give (dtype= picks one)."""
        return frozenset({np.dtype(cls.out_dtype(dtype)), *cls.results.get(np.dtype(dtype), ())})

    @classmethod
    def keeps_zeros_in(cls, attrs: dict) -> bool:
        """Whether a call with static `attrs` maps zeros to zeros (`keeps_zeros` for every attrs)."""
        return cls.keeps_zeros

    @staticmethod
    def compute(*arrays, **attrs) -> np.ndarray:
        raise KernelTypeError("this kernel defines no compute()")  # only reached by a malformed subclass

    @classmethod
    def sizes(cls, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The i32 size operands of the C call (default: the element count of the output)."""
        return (max(1, int(np.prod(out_shape, dtype=np.int64))),)

    @classmethod
    def abi_shapes(cls, sizes: tuple[int, ...]) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
        """(input shapes, output shape) of the C call with these i32 size operands."""
        n = sizes[0]
        return [(n,)] * cls.arity, (n,)

    # ---- derived -------------------------------------------------------------------------------
    @classmethod
    def signatures(cls) -> list[tuple[np.dtype, np.dtype]]:
        """Every (input dtype, output dtype) this kernel implements, in dtypes.SUPPORTED order."""
        return [(d, o) for d in dtypes.SUPPORTED if d in cls.dtypes for o in dtypes.SUPPORTED if o in cls.out_dtypes(d)]

    @classmethod
    def mixed_signatures(cls) -> list[tuple[tuple[np.dtype, ...], np.dtype]]:
        """Every (input dtypes, output dtype) of a call whose inputs differ, in `mixed` order."""
        return [(tuple(map(np.dtype, ins)), np.dtype(out)) for ins, out in cls.mixed.items()]

    @classmethod
    def symbols(cls) -> set[str]:
        """Every C symbol this kernel's source defines: one per signature, one per mixed one."""
        return {cls.symbol(d, o) for d, o in cls.signatures()} | {cls.symbol(i[0], o, i) for i, o in cls.mixed_signatures()}

    @classmethod
    def symbol(cls, dtype, out=None, ins: tuple = ()) -> str:
        """The C symbol of a call on inputs of `dtype` giving `out`: `matvec_i8`, and, when `out`
        is not the default output dtype, `matvec_i8_i32` or `cast_f32_bf16`; a call on inputs of
        differing dtypes `ins` names each: `matmul_u8_i8_i32`."""
        if len(set(ins)) > 1:
            return names.symbol(cls.name, *map(dtypes.suffix, ins), dtypes.suffix(out))
        if out is None or np.dtype(out) == cls.out_dtype(np.dtype(dtype)):
            return names.symbol(cls.name, dtypes.suffix(dtype))
        return names.symbol(cls.name, dtypes.suffix(dtype), dtypes.suffix(out))

    @classmethod
    def source_name(cls) -> str:
        """The file name of the kernel's source (its `source_kernel`'s, when it has one)."""
        return cls.source_kernel.source_name() if cls.source_kernel is not None else names.source_file(cls.name)

    @classmethod
    def source_text(cls) -> tuple[str, str]:
        """(file name, C++ text) of the kernel's source (its `source_kernel`'s, when it has one)."""
        if cls.source_kernel is not None:
            return cls.source_kernel.source_text()
        file = cls.source_name()
        return file, cls.source if cls.source is not None else (CC_DIR / file).read_text()

    @classmethod
    def check_source(cls, dtype, out, call: str) -> None:
        """Refuse a call on `dtype` inputs giving `out` whose C function a user kernel's C++
        (`source`) does not declare extern "C": misnamed, it would compile and emulate, and
        fail only when a native or device build links it. `call` names the call."""
        if cls.source is None:
            return
        symbol = cls.symbol(dtype, out)
        found = c_functions(cls.source)
        if not any(pattern.fullmatch(symbol) for pattern in found.values()):
            declared = ", ".join(f"'{name}'" for name in found) or "none"
            raise KernelTypeError(
                f"kernel {cls.__name__}'s source declares no extern \"C\" function '{symbol}', which {call} calls "
                f"on {dtypes.name(dtype)} inputs giving {dtypes.name(out)}; it declares {declared}. Name the C "
                f"function {symbol} (the kernel's name and its dtype suffix): extern \"C\" void {symbol}(...)."
            )

    @classmethod
    def reference(cls, *arrays, dtype=None, **attrs) -> np.ndarray:
        """The numpy result of one call on `arrays` giving `dtype` (default: the default output
        dtype; bfloat16 computed in float32 and rounded once)."""
        source = arrays[0].dtype
        return cls.reference_fn(source, attrs, dtype)(*arrays)

    @classmethod
    def reference_fn(cls, dtype: np.dtype, attrs: dict, out=None, shape: tuple[int, ...] | None = None):
        """A closure computing one call of this kernel on inputs of `dtype` with static `attrs`,
        giving `out` (default: the default output dtype); given the call's output `shape`, a user
        kernel's compute() results are checked against it."""
        compute = cls.compute
        out = np.dtype(cls.out_dtype(dtype) if out is None else out)
        widened = dtype == dtypes.bfloat16 and not cls.exact_in_dtype
        if shape is not None and not is_library(cls):
            compute = cls.checked_compute(tuple(shape), out, widened)
        if cls.saturates and out.kind in "iu":
            return _saturating(compute, attrs, out)
        if widened:
            f32 = np.float32

            def run(*arrays, **dyn):
                return rounded(compute(*(a.astype(f32) for a in arrays), **attrs, **dyn), out)
            return run
        if cls.keeps_dtype and not attrs:
            return compute

        def run(*arrays, **dyn):
            r = compute(*arrays, **attrs, **dyn)
            return r if isinstance(r, np.ndarray) and r.dtype == out else rounded(r, out)
        return run

    @classmethod
    def checked_compute(cls, shape: tuple[int, ...], out: np.dtype, widened: bool):
        """compute(), refusing a result of another shape than `shape` (but for axes of one
        element: () is (1,), as the C ABI holds it) or dtype than `out` (float32 too when bfloat16
        is computed in float32, any integer when the kernel saturates): a user kernel's mistake is
        a KernelTypeError on every path, never an array of the wrong size."""
        compute = cls.compute

        def run(*arrays, **attrs):
            result = compute(*arrays, **attrs)
            got = getattr(result, "dtype", None)
            ok = got == out or (widened and got == np.float32) or (cls.saturates and got is not None and got.kind in "iu")
            if not ok or not same_elements(np.shape(result), shape):
                what = f"{np.shape(result)} {dtypes.name(got)}" if got is not None else type(result).__name__
                raise KernelTypeError(
                    f"{cls.__name__}.compute() returned {what} but this call's output is {shape} "
                    f"{dtypes.name(out)}: return a numpy array of that shape and dtype "
                    f"(e.g. result.astype(np.{dtypes.name(out)}))."
                )
            return result if np.shape(result) == shape else np.reshape(result, shape)
        return run

    @classmethod
    def check_abi(cls, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> None:
        """Refuse a call whose C ABI (`sizes`, read back by `abi_shapes`) would not pass the C
        function each input's and the output's elements: the numpy reference would compute what
        no compiled call can. Checked where a call is traced, so every path refuses it alike."""
        sizes = cls.sizes([tuple(s) for s in shapes], tuple(out_shape))
        abi_in, abi_out = cls.abi_shapes(sizes)
        operands = [(f"input {i}", s, a) for i, (s, a) in enumerate(zip(shapes, abi_in))]
        for what, traced, abi in [*operands, ("the output", out_shape, abi_out)]:
            if _count(traced) != _count(abi):
                raise KernelTypeError(
                    f"{cls.__name__}'s declarations disagree: for inputs {', '.join(map(str, shapes))}, out_shape "
                    f"gives {tuple(out_shape)}, sizes() gives {tuple(sizes)} and abi_shapes() makes {what} of the C "
                    f"call {tuple(abi)}, {_count(abi)} elements where the call's has {_count(traced)}. Define "
                    f"sizes() and abi_shapes() so the C call sees every element (the defaults are an elementwise "
                    f"kernel's: each input and the output of the output's element count)."
                )

    @classmethod
    def emulate(cls, dtype, pointers: list[np.ndarray], sizes: tuple[int, ...], attrs: dict):
        """Run one C-ABI call with numpy: `pointers` are flat arrays (inputs of `dtype`, then the
        output, whose dtype is the call's output dtype, or, for an accumulating kernel, the
        destination), `sizes` the i32 size operands, `attrs` the c_attrs by name. Writes the output
        in place, as the C++ does. This is the C ABI's meaning in one place; the emulator's
        prepared kernel calls are tested bit for bit against it."""
        in_shapes, out_shape = cls.abi_shapes(sizes)
        ins = [p.reshape(s) for p, s in zip(pointers, in_shapes)]
        out = pointers[len(in_shapes)]
        if cls.accumulates:
            ins.append(out.reshape(out_shape))
        result = cls.reference_fn(np.dtype(dtype), {}, out.dtype, out_shape)(*ins, **attrs)
        out[...] = np.asarray(result).reshape(-1)

    @classmethod
    def describe_call(cls, operands: list[str], attrs: dict, dtype: np.dtype) -> str:
        """The text of a call on operands of these texts, with these attrs (static ones, and per-call
        ones as text) and input dtype: `Add(x, y)`."""
        return f"{cls.__name__}({', '.join(operands)})"

    @classmethod
    def refuse(cls, shapes, why: str):
        """A call on inputs of `shapes` refused: `why` (what it needs, the fix), then each input's
        shape, by the name the body gives it while a call is traced (`weights (4, 60)`)."""
        named = getattr(RECORDING, "operands", None)
        names = named() if named is not None else ()
        if len(names) == len(shapes):
            shown = ", ".join(f"{name} {tuple(s)}" for name, s in zip(names, shapes))
        else:
            shown = "shapes " + ", ".join(str(tuple(s)) for s in shapes)
        raise KernelTypeError(f"{cls.__name__} {why}; got {shown}.")

    # ---- recording -----------------------------------------------------------------------------
    @classmethod
    def step(cls, *args, out=None, dtype=None, **attrs):
        """Record one call of this kernel in the body() being traced; returns its output handle
        (or the `out` view it wrote). The inputs share one dtype, which the kernel computes in;
        `dtype=` names the output's, one of `out_dtypes(<the inputs' dtype>)`. The front end's
        trace does the recording."""
        recorder = getattr(RECORDING, "trace", None)
        if recorder is None:
            raise KernelTypeError(
                f"{cls.__name__}.step() records a kernel call and works only inside a graph's body() "
                "while iron traces it: call the graph (g(...), g.reference(...), g.compile(...))."
            )
        if not cls.name:
            raise KernelTypeError(
                f"{cls.__name__} has no name: set name = '...' (its C symbol and source file) to call it."
            )
        return recorder.call(cls, args, out, dtype, attrs)


@cache
def c_functions(source: str) -> dict[str, re.Pattern]:
    """The functions C++ `source` declares extern "C", each as written (`relu_##T` when a macro
    makes it) with the pattern of the names it stands for (a macro parameter: any identifier)."""
    text = COMMENT.sub(" ", _included(source)).replace("\\\n", " ")
    found = {}
    for match in EXTERN_C.finditer(text):
        define = DEFINE.search(text[text.rfind("\n", 0, match.start()) + 1: match.start()])
        params = {p.strip() for p in define[1].split(",")} if define else set()
        rest = text[match.end():]
        declared = _top_level(_braced(rest) if rest.startswith("{") else re.split(r"[;{]", rest, maxsplit=1)[0])
        for name in DECLARED.findall(declared):
            if name not in NOT_NAMES:
                parts = [part.strip() for part in name.split("##")]
                found["##".join(parts)] = re.compile("".join(r"\w+" if p in params else re.escape(p) for p in parts))
    return found


def _included(source: str) -> str:
    """`source` after the text of each of iron's headers it includes (iron_kernel.h and its
    macros), as the compiler reads it; other includes add no extern "C" function iron calls."""
    library = library_sources()
    headers = [library[name] for name in INCLUDE.findall(source) if name in library]
    return "\n".join([*headers, source])


def _braced(text: str) -> str:
    """What the braces `text` opens with hold (to its end if they never close)."""
    depth = 0
    for i, c in enumerate(text):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth == 0:
            return text[1:i]
    return text[1:]


def _top_level(text: str) -> str:
    """`text` without what braces hold (function bodies), and each outermost parameter list a
    marker: only the names it declares stand right before a marker."""
    for inner, mark in ((r"\{[^{}]*\}", ";"), (r"\([^()]*\)", "\x01")):
        pattern = re.compile(inner)
        while (reduced := pattern.sub(mark, text)) != text:
            text = reduced
    return text


def rounded(result, out: np.dtype) -> np.ndarray:
    """`result` as `out`. Rounding to a float dtype keeps a NaN a NaN (quieted, as the C++ stores
    it), which numpy reports for a signalling NaN as "invalid value encountered in cast": the
    rounding is the kernel's intent, so only that warning is silenced, only here."""
    if out in dtypes.FLOATS:
        with np.errstate(invalid="ignore"):
            return np.asarray(result).astype(out)
    return np.asarray(result).astype(out)


def same_elements(shape: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Whether arrays of the two shapes lay out the same elements alike: equal but for axes of one."""
    return tuple(n for n in shape if n != 1) == tuple(n for n in other if n != 1)


def _count(shape) -> int:
    return math.prod(shape)   # math.prod: asked for every operand of every traced call


def _saturating(compute, attrs: dict, out: np.dtype):
    """A closure computing in integers and clamping the result to `out`'s range; a float result
    (Cast of a float) is first rounded to nearest, ties to even, NaN to 0."""
    info = np.iinfo(out)

    def run(*arrays, **dyn):
        result = np.asarray(compute(*arrays, **attrs, **dyn))
        if result.dtype.kind not in "iu":   # float32 or bfloat16 (whose kind numpy does not call "f")
            result = np.nan_to_num(np.rint(result.astype(np.float64)), nan=0.0)
        return np.clip(result, info.min, info.max).astype(out)
    return run
