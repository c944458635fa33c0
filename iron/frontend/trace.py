"""Tracing: `trace` runs body() once on handles and records what it does as a `Program`. It checks
body()'s signature, names the graph's declarations by attribute path, records each
`Kernel.step` call, and checks what body() returned (outputs, then `iron.carry(...)`) and the
state hazards; it never runs a kernel.
"""
from __future__ import annotations

import inspect
import numbers

import numpy as np

from iron import dtypes
from iron.errors import (
    CarryError,
    DoesNotFit,
    KernelTypeError,
    SignatureError,
    TracedValueError,
)
from iron.frontend import shapes
from iron.frontend.declarations import Constants, Memory
from iron.frontend.handles import (
    I32,
    Carry,
    Scalar,
    Tensor,
    _PerCall,
    as_scalar_node,
    broadcast_view,
)
from iron.frontend.hazards import check_hazards
from iron.ir import (
    Call,
    Declaration,
    Declared,
    Input,
    MemoryKind,
    Node,
    Op,
    Program,
    Returns,
    Var,
    VarKind,
    describe,
    scalar_vars,
)
from iron.kernels.base import RECORDING, Kernel, Role
from iron.kernels.library import Copy
from iron.names import attribute_path


class Trace:
    """The calls recorded so far while one body() runs (`Kernel.step` hands each call here), and
    the numpy arrays it used as operands (captured as params of the graph's `constants`;
    `declared` are the names they may not take)."""

    def __init__(self, where: str, constants: Constants, declared: set[str], roots: tuple[Node, ...] = ()):
        self.where = where
        self.calls: list[Node] = []
        self.constants, self.declared = constants, declared
        self.captured: dict[str, Node] = {}   # name -> MEMORY node of each array used
        self.made = set(roots)                # the inputs, memories and per-call values it bound, then its calls

    def call(self, kernel, args: tuple, out, dtype, attrs: dict) -> Tensor:
        """Record `kernel.step(*args, out=out, dtype=dtype, **attrs)`: its output handle, or the
        `out` view it writes."""
        if len(args) == kernel.arity + 1 and out is None:
            *args, out = args
        if len(args) != kernel.arity:
            raise KernelTypeError(
                f"{kernel.__name__}.step takes {kernel.arity} input(s) (and optionally out=), got {len(args)}."
            )
        if getattr(kernel, "constant", None) is not None and any(map(_is_constant, args)):
            kernel, args, attrs = self._constant_form(kernel, args, attrs)
        inputs = _broadcast(kernel, [self.operand(kernel, i, a) for i, a in enumerate(args)])
        result = _result_dtype(kernel, inputs, dtype)
        static, dynamic = _split_attrs(kernel, attrs)
        RECORDING.operands = lambda: [describe(n) for n in inputs]   # so a refusal names them (Kernel.refuse)
        try:
            shape = tuple(kernel.out_shape([n.shape for n in inputs], **static))
        finally:
            RECORDING.operands = None
        kernel.check_abi([n.shape for n in inputs], shape)
        _fits_c(kernel, static)
        dest = _destination(kernel, self, out, shape, result)
        src = (*inputs, *([dest] if dest is not None else []), *dynamic.values())
        call = Call(kernel, tuple(sorted(static.items())), len(inputs), dest is not None, tuple(dynamic))
        node = Node(Op.CALL, src, shape, result, call)
        self.calls.append(node)
        self.made.add(node)
        return Tensor(dest if dest is not None else node)

    def _constant_form(self, kernel, args, attrs: dict):
        """`K.step(x, 3)`, `K.step(1.5, x)`, `K.step(x, t)` (t per call): the call of K's constant
        form on x, the number typed by x's dtype (an int in its range for integers, rounded to it
        for floats) and given as the form's static (or per-call) attribute."""
        flip = int(_is_constant(args[0]))
        number, tensor = args[flip ^ 1], args[flip]
        if _is_constant(tensor):
            raise KernelTypeError(
                f"{kernel.__name__}.step got two numbers ({args[0]!r}, {args[1]!r}): at least one operand is a tensor."
            )
        dtype = self.operand(kernel, flip, tensor).dtype
        return kernel.constant, [tensor], {**attrs, **_typed_constant(kernel, number, dtype), "flip": flip}

    def owned(self, node: Node) -> Node:
        """`node`, when this trace made it (or a view of what it bound); a handle kept from
        another trace would compute on that trace's inputs and memories."""
        root = node.src[0] if node.op == Op.VIEW else node
        if root not in self.made:
            raise TracedValueError(
                f"tensor {describe(node)} was made while tracing another body(), not {self.where}: a handle "
                "lives only in the trace that made it. Compute it again inside this body(), or pass it as a tensor."
            )
        return node

    def check_per_call_values(self, nodes):
        """Refuse a per-call value kept from another trace anywhere in `nodes` (the VAR node of a
        parameter this body does not have)."""
        todo, seen = list(nodes), set()
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.op == Op.VAR and node not in self.made:
                raise TracedValueError(
                    f"per-call value '{node.arg.name}' was made while tracing another body(), not {self.where}: a "
                    "handle lives only in the trace that made it. Use this body()'s own parameters."
                )
            todo.extend(node.src)

    def operand(self, kernel, position, value) -> Node:
        if isinstance(value, Tensor):
            return self.owned(value.node)
        if isinstance(value, Memory):
            return value._traced_node()
        if isinstance(value, np.ndarray):
            return self._captured(kernel, position, value)
        what = f"per-call value {describe(value.node)}" if isinstance(value, Scalar) else type(value).__name__
        raise KernelTypeError(
            f"operand {position} of {kernel.__name__} in {self.where} is a {what}: kernel operands are "
            "tensors (inputs, kernel outputs, weights, params, states or views of them)."
        )

    def _captured(self, kernel, position, array: np.ndarray) -> Node:
        if dtypes.as_dtype(array.dtype) is None or array.ndim == 0:
            raise KernelTypeError(
                f"operand {position} of {kernel.__name__} in {self.where} is a numpy array of shape {array.shape} "
                f"and dtype {array.dtype}: iron captures it as a constant, which needs at least one axis and one of "
                f"the dtypes {dtypes.supported_text()}. Convert it first, e.g. array.astype(np.float32)."
            )
        param = self.constants.param(array, self.declared)
        if param.name not in self.captured:
            self.captured[param.name] = Node(Op.MEMORY, (), param.shape, param.dtype, Declared(param.kind, param.name))
            self.made.add(self.captured[param.name])
        return self.captured[param.name]

    def __enter__(self):
        if getattr(RECORDING, "trace", None) is not None:
            raise SignatureError(f"{self.where} was called while another body() is being traced: trace one graph at a time.")
        RECORDING.trace = self
        return self

    def __exit__(self, *exc):
        RECORDING.trace = None


def _broadcast(kernel, inputs: list[Node]) -> list[Node]:
    """An elementwise kernel's inputs under numpy's broadcasting rules: each whose shape differs
    from the shape they broadcast to is a broadcast view of itself (`Add(x, bias)`, (768, 2304)
    and (2304,)); shapes that do not broadcast are left for `out_shape` to refuse."""
    shapes = [n.shape for n in inputs]
    if kernel.role is not Role.ELEMENTWISE or len(set(shapes)) < 2:
        return inputs
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        return inputs
    return [n if n.shape == shape else broadcast_view(n, shape) for n in inputs]


def _result_dtype(cls, inputs: list[Node], dtype) -> np.dtype:
    """The output dtype of a call: the inputs share one dtype, which the kernel computes in, or
    are one of the kernel's `mixed` combinations (uint8 x int8), which give one output dtype;
    `dtype=` names the output (default: the kernel's default for those inputs)."""
    ins = tuple(n.dtype for n in inputs)
    if len(set(ins)) > 1:
        return _mixed_result(cls, inputs, ins, dtype)
    source = ins[0]
    if source not in cls.dtypes:
        ok = ", ".join(dtypes.name(d) for d in dtypes.SUPPORTED if d in cls.dtypes)
        raise KernelTypeError(
            f"{cls.__name__} does not support {dtypes.name(source)}: it supports {ok}; {_lossless_fix(cls, inputs)}"
        )
    return _given(cls, dtypes.name(source), np.dtype(cls.out_dtype(source) if dtype is None else dtype),
                  cls.out_dtypes(source), dtype)


def _mixed_result(cls, inputs: list[Node], ins: tuple, dtype) -> np.dtype:
    """The output dtype of a call on inputs of differing dtypes, or the refusal naming what the
    kernel takes and a Cast that keeps every value."""
    if ins not in cls.mixed:
        shown = " and ".join(f"input {i} ({describe(n)}) is {dtypes.name(n.dtype)}" for i, n in enumerate(inputs))
        takes = " or ".join(" x ".join(map(dtypes.name, m)) + f" into {dtypes.name(o)}" for m, o in cls.mixed.items())
        also = f", or takes {takes}," if takes else ""
        raise KernelTypeError(f"{cls.__name__} computes in one dtype{also} but {shown}: {_lossless_fix(cls, inputs)}")
    result = np.dtype(cls.mixed[ins] if dtype is None else dtype)
    return _given(cls, " x ".join(map(dtypes.name, ins)), result, frozenset({np.dtype(cls.mixed[ins])}), dtype)


def _lossless_fix(cls, inputs: list[Node]) -> str:
    """How to give `cls` inputs it computes in without losing a value: the Casts to the first of
    its dtypes holding every value of each input, or that none does."""
    common = dtypes.lossless_common({n.dtype for n in inputs}, cls.dtypes)
    if common is None:
        held = ", ".join(sorted({dtypes.name(n.dtype) for n in inputs}))
        return (f"no dtype {cls.__name__} supports holds every {held} value, so any Cast would round or clamp "
                "some: pick another kernel, or Cast knowing which values change.")
    names = list(dict.fromkeys(describe(n) for n in inputs if n.dtype != common))
    casts = " and ".join(f"Cast.step({name}, dtype={dtypes.spelling(common)})" for name in names)
    return f"{casts} {'converts' if len(names) == 1 else 'convert'} {' and '.join(names)} without losing a value."


def _given(cls, source: str, result: np.dtype, given: frozenset, dtype) -> np.dtype:
    """`result`, when it is one of the output dtypes `given` for inputs of `source`."""
    if result not in given:
        ok = ", ".join(dtypes.spelling(d) for d in dtypes.SUPPORTED if d in given)
        asked = "" if dtype is None else f", not {dtypes.name(result)}"
        raise KernelTypeError(
            f"{cls.__name__} on {source} inputs gives {ok}{asked}: pass dtype= one of those."
        )
    return result


def _is_constant(value) -> bool:
    """A Python number or a per-call value standing for a tensor operand of a binary kernel."""
    return isinstance(value, Scalar) or (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)))


def _typed_constant(kernel, number, dtype: np.dtype) -> dict:
    """The constant form's attribute holding `number` typed by the tensor's `dtype`: `value` (an
    integer of the dtype, or a per-call value) for integers, `fvalue` (rounded to the dtype) for
    floats."""
    where = f"{kernel.__name__}.step's constant operand {describe(number.node) if isinstance(number, Scalar) else repr(number)}"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if isinstance(number, Scalar):
            return {"value": number}
        if not float(number).is_integer() or not info.min <= number <= info.max:
            raise KernelTypeError(
                f"{where} is not a {dtypes.name(dtype)} value, but the tensor it meets is {dtypes.name(dtype)}: "
                f"pass an integer in {info.min}..{info.max} (a constant takes the tensor's dtype)."
            )
        return {"value": int(number)}
    if isinstance(number, Scalar):
        raise KernelTypeError(
            f"{where} is a per-call int32 value, but the tensor it meets is {dtypes.name(dtype)}: a per-call "
            "constant meets integer tensors only; pass a Python number (fixed when the design compiles)."
        )
    with np.errstate(over="ignore"):
        return {"fvalue": float(np.asarray(number, np.float64).astype(dtype).astype(np.float32))}


def _split_attrs(cls, attrs: dict) -> tuple[dict, dict]:
    unknown = set(attrs) - set(cls.attrs)
    if unknown:
        known = ", ".join(cls.attrs) or "none"
        raise KernelTypeError(f"{cls.__name__} has no attribute {', '.join(sorted(unknown))}: its attributes are {known}.")
    static, dynamic = {}, {}
    for key, default in cls.attrs.items():
        value = attrs.get(key, default)
        if value is Kernel.REQUIRED:
            raise KernelTypeError(f"{cls.__name__} needs {key}=...: pass it to {cls.__name__}.step.")
        if isinstance(value, Scalar):
            if key not in cls.scalar_attrs:
                raise KernelTypeError(
                    f"{cls.__name__}'s {key} is fixed when the design compiles, but got per-call value "
                    f"'{describe(value.node)}': pass a Python number."
                )
            dynamic[key] = value.node
        else:
            static[key] = _static_value(cls, key, value)
    return static, dynamic


def _static_value(cls, key: str, value):
    """A value of a C attribute fixed at compile time is a number (or None when that is the
    attribute's default); the kernel's shape rule may then refuse it with its own reason."""
    ctype = dict(cls.c_attrs).get(key)
    if ctype is None or (value is None and cls.attrs[key] is None):
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        _refuse_attr(cls, key, value, ctype)
    return value


def _fits_c(cls, static: dict):
    """Every i32 C attribute is an int in int32 (checked after the kernel's own shape rule)."""
    for key, ctype in cls.c_attrs:
        value = static.get(key)
        if ctype == "i32" and value is not None and (
            not isinstance(value, numbers.Integral) or not -(2**31) <= value < 2**31
        ):
            _refuse_attr(cls, key, value, ctype)


def _refuse_attr(cls, key: str, value, ctype: str):
    want, example = ("an int in int32", 2) if ctype == "i32" else ("a number", 0.5)
    raise KernelTypeError(
        f"{cls.__name__}'s {key} is {value!r} ({type(value).__name__}) but it is passed to C as {ctype}: "
        f"give {want}, e.g. {cls.__name__}.step(..., {key}={example})."
    )


def _destination(cls, trace, out, shape, dtype) -> Node | None:
    if out is None:
        if cls.needs_out:
            raise KernelTypeError(
                f"{cls.__name__} writes into a state: pass out=self.<state>[...] (or the view as the last positional)."
            )
        return None
    node = trace.operand(cls, "out", out)
    if node.op not in (Op.VIEW, Op.MEMORY) or (node.src[0] if node.op == Op.VIEW else node).arg.kind is not MemoryKind.STATE:
        raise KernelTypeError(
            f"{cls.__name__} can write only into a state, not into {describe(node)}: "
            "declare the destination with iron.state(...) and pass a view of it as out=."
        )
    if tuple(node.shape) != tuple(shape) or node.dtype != dtype:
        raise KernelTypeError(
            f"{cls.__name__} computes {tuple(shape)} {dtypes.name(dtype)} but out={describe(node)} is "
            f"{tuple(node.shape)} {dtypes.name(node.dtype)}: index the state so the view matches."
        )
    return node


# ---- signature ---------------------------------------------------------------------------------

# Keywords that compiled calls and `CarriedLoop.run` take themselves, so no body parameter may use them.
CALL_KEYWORDS = {"trace": "`trace=path` writes the call's timeline"}


class Signature:
    """body()'s parameters: positional tensors (optional when defaulting to None) and keyword-only
    per-call values with their kind."""

    def __init__(self, fn, where: str):
        self.where = where
        params = list(inspect.signature(fn).parameters.values())
        hints = _hints(fn)
        self.tensors: list[tuple[str, bool]] = []     # (name, optional)
        self.values: list[tuple[str, str]] = []       # (name, kind)
        for p in params:
            ann = hints.get(p.name, p.annotation)
            if p.name in CALL_KEYWORDS:
                raise SignatureError(
                    f"parameter '{p.name}' of {where} has a name iron's calls take for themselves "
                    f"({CALL_KEYWORDS[p.name]}): rename the parameter."
                )
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise SignatureError(
                    f"parameter '{p.name}' of {where} is *{p.name}/**{p.name}: iron needs every tensor "
                    "and per-call value named: list them as parameters."
                )
            if p.kind == p.KEYWORD_ONLY:
                self.values.append((p.name, _per_call_kind(p.name, ann, where)))
            elif isinstance(ann, _PerCall):
                raise SignatureError(
                    f"parameter '{p.name}' of {where} is annotated {ann!r} but is positional: per-call "
                    f"values are keyword-only; put it after `*` (def body(self, *, {p.name}: {ann!r}))."
                )
            else:
                self.tensors.append((p.name, p.default is None))

        self.value_names = {n for n, _ in self.values}

    @property
    def carried(self) -> list[str]:
        return [n for n, k in self.values if k is VarKind.CARRIED]


def _hints(fn) -> dict:
    """body()'s annotations, string ones (from __future__ import annotations) evaluated in its
    module; typing.get_type_hints would refuse Carried[T] on Python 3.10, which is not a type."""
    hints = {}
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, fn.__globals__)  # noqa: S307 - the user's own annotation
            except Exception:
                pass  # left as text: the signature check names it
        hints[name] = annotation
    return hints


def _per_call_kind(name: str, ann, where: str) -> str:
    if ann is inspect.Parameter.empty:
        raise SignatureError(
            f"keyword-only parameter '{name}' of {where} has no annotation: annotate it "
            f"Carried[np.int32] (from the previous call) or Scratchpad[np.int32] (from the host each call)."
        )
    if not isinstance(ann, _PerCall):
        raise SignatureError(
            f"keyword-only parameter '{name}' of {where} is annotated {ann!r}: per-call values are "
            "annotated Carried[np.int32] or Scratchpad[np.int32]."
        )
    if dtypes.as_dtype(ann.dtype) != I32:
        raise SignatureError(
            f"parameter '{name}' of {where} is {ann!r}: per-call values are 32-bit integers; "
            f"use {type(ann).__name__}[np.int32]."
        )
    return ann.kind


# ---- naming declarations -----------------------------------------------------------------------

def find_declarations(root) -> list[tuple[str, Memory]]:
    """Every Memory reachable from `root`'s attributes, named by attribute path (`layers.0.wq`)."""
    found: list[tuple[str, Memory]] = []
    seen: set[int] = set()   # by id(): lists and dicts do not hash, a user's objects may hash by value

    def walk(path: str, value, depth: int):
        if id(value) in seen or depth > 8:
            return
        if isinstance(value, Memory):
            seen.add(id(value))
            found.append((path, value))
        elif isinstance(value, (list, tuple)):
            seen.add(id(value))
            for i, v in enumerate(value):
                walk(f"{path}.{i}", v, depth + 1)
        elif isinstance(value, dict):
            seen.add(id(value))
            for k, v in value.items():
                walk(f"{path}.{k}", v, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, (type, np.ndarray)) and not callable(value):
            seen.add(id(value))
            for k, v in vars(value).items():
                if not k.startswith("_"):
                    walk(f"{path}.{k}" if path else k, v, depth + 1)

    seen.add(id(root))
    for k, v in vars(root).items():
        if not k.startswith("_"):
            walk(k, v, 1)
    return found


def bind_declarations(found: list[tuple[str, Memory]], where: str) -> tuple[tuple[Declaration, ...], tuple[Node, ...]]:
    decls, nodes, names = [], [], {}
    for path, mem in found:
        name = mem.given_name or attribute_path(f"{mem!r} of {where}", path)
        if name in names:
            raise SignatureError(
                f"{where}: two declarations are named '{name}' ({names[name]} and {path}): give the states different name=."
            )
        names[name] = path
        mem.name, mem.graph = name, where.split(".")[0]
        decl = Declaration(mem.kind, name, mem.shape, mem.dtype, mem.public)
        mem.node = Node(Op.MEMORY, (), mem.shape, mem.dtype, Declared(mem.kind, name))
        decls.append(decl)
        nodes.append(mem.node)
    return tuple(decls), tuple(nodes)


# ---- the trace ---------------------------------------------------------------------------------

def trace(graph, fn, where: str, specs: dict[str, tuple | None], constants: Constants) -> Program:
    """Trace `fn` (graph.body) for tensor `specs` (name -> (shape, dtype), None when omitted);
    numpy arrays it passes to kernels become params of `constants`."""
    sig = Signature(fn, where)
    found = find_declarations(graph)
    declarations, memories = bind_declarations(found, where)
    shapes.states_fit(where.split(".")[0], [(d.shape, d.dtype) for d in declarations if d.kind is MemoryKind.STATE], DoesNotFit)
    inputs, args = [], []
    for position, (name, _optional) in enumerate(sig.tensors):
        spec = specs.get(name)
        if spec is None:
            args.append(None)
            continue
        node = Node(Op.INPUT, (), tuple(spec[0]), np.dtype(spec[1]), Input(name, position))
        inputs.append(node)
        args.append(Tensor(node))
    scalars = [Node(Op.VAR, (), (), I32, Var(name, kind)) for name, kind in sig.values]
    kwargs = {v.arg.name: Scalar(v) for v in scalars}
    try:
        with Trace(where, constants, {d.name for d in declarations}, (*inputs, *memories, *scalars)) as t:
            returned = fn(*args, **kwargs)
            outputs, next_values, returns = _returned(t, returned, sig, where, found)
            t.check_per_call_values([*t.calls, *(node for _, node in next_values)])
    finally:
        for _, mem in found:
            mem.node = None
    declarations += tuple(Declaration(n.arg.kind, name, n.shape, n.dtype) for name, n in t.captured.items())
    memories += tuple(t.captured.values())
    calls = tuple(t.calls)
    check_hazards(calls, where)
    read = read_names(calls, next_values) | set(sig.carried)   # every carried value is a word the Emit writes
    unread = tuple(n.arg.name for n in (*inputs, *scalars) if n.arg.name not in read)
    return Program(where.split(".")[0], tuple(n for n in inputs if n.arg.name in read),
                   tuple(v for v in scalars if v.arg.name in read), declarations, memories,
                   calls, outputs, next_values, returns, unread)


def read_names(calls: tuple[Node, ...], next_values: tuple[tuple[str, Node], ...]) -> set[str]:
    """The tensors and per-call values a traced body reads. Only those are a version's inputs and
    words: a version that ignores a Scratchpad (the body of a loop whose first version reads it)
    has no word for it, and a call may give it or leave it out."""
    names: set[str] = set()
    seen: set[Node] = set()
    stack = [*calls, *(node for _, node in next_values)]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            if node.op in (Op.VAR, Op.INPUT):
                names.add(node.arg.name)
            stack.extend(node.src)
    return names


def _returned(t: Trace, value, sig: Signature, where: str, found):
    items = list(value) if isinstance(value, tuple) else ([] if value is None else [value])
    carries = [i for i, v in enumerate(items) if isinstance(v, Carry)]
    carried = sig.carried
    if carried and not carries:
        names = ", ".join(carried)
        raise CarryError(
            f"{where} has Carried parameters ({names}) but returned no iron.carry(...): end body() with "
            f"`return iron.carry({', '.join(f'{n}=...' for n in carried)})`."
        )
    if carries and not carried:
        raise CarryError(
            f"{where} returned iron.carry(...) but has no Carried parameters: declare each carried value "
            "as a keyword-only parameter annotated Carried[np.int32]."
        )
    if len(carries) > 1 or (carries and carries[0] != len(items) - 1):
        raise CarryError(
            f"{where} returned iron.carry(...) at position {carries[0]} of {len(items)} returned values: "
            "return exactly one carry, last, after the outputs."
        )
    outputs = []
    for i, v in enumerate(items[: len(items) - len(carries)]):
        path = next((path for path, mem in found if mem is v), None)
        if path is not None:   # a declared weight, param or state
            view = f"self{_python_path(path)}[:]"
            raise CarryError(
                f"{where} returned {v.kind} '{v.name}' at position {i}: body() returns tensor handles and, last, "
                f"iron.carry(...). Return a view of it, `{view}`, which reads it after the body's writes."
            )
        if not isinstance(v, Tensor):
            raise CarryError(
                f"{where} returned {type(v).__name__} at position {i}: body() returns tensor handles "
                "and, last, iron.carry(...)."
            )
        outputs.append(_materialized(t, v.node))
    next_values = _next_values(t, items[-1], sig, where) if carries else ()
    if isinstance(value, tuple):
        shape = Returns.TUPLE
    else:
        shape = Returns.CARRY if carries else (Returns.NONE if value is None else Returns.ONE)
    return tuple(outputs), next_values, shape


def _python_path(path: str) -> str:
    """An attribute path ('blocks.0.k') as Python spells it after `self` ('.blocks[0].k')."""
    return "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in path.split("."))


def _materialized(t: Trace, node: Node) -> Node:
    """A kernel output node for `node`: inputs and views become an implicit Copy."""
    if t.owned(node).op == Op.CALL and not node.arg.writes:
        return node
    return Copy.step(Tensor(node)).node


def _next_values(t: Trace, c: Carry, sig: Signature, where: str) -> tuple[tuple[str, Node], ...]:
    carried = sig.carried
    for name in c:
        if name not in carried:
            raise CarryError(
                f"iron.carry({name}=...) in {where} names '{name}', which is not a Carried parameter; "
                f"the Carried parameters are {', '.join(carried)}."
            )
    scratch = {n for n, k in sig.values if k is VarKind.SCRATCHPAD}
    result = []
    for name in carried:
        if name not in c:
            raise CarryError(
                f"iron.carry(...) in {where} gives no next value for Carried parameter '{name}': "
                f"add {name}=... to the carry."
            )
        v = c[name]
        node = as_scalar_node(v)
        if node is None:
            if not isinstance(v, Tensor):
                raise CarryError(
                    f"next value of '{name}' in {where} is a {type(v).__name__}: give a per-call expression, "
                    "an int, or a one-element tensor the call computed."
                )
            if int(np.prod(v.shape, dtype=np.int64)) != 1:
                raise CarryError(
                    f"next value of '{name}' in {where} is {v.name} of shape {v.shape}: a carried value is one "
                    "element; pick one element (a view, or Argmax)."
                )
            if v.dtype != I32:
                raise CarryError(
                    f"next value of '{name}' in {where} is {v.name} of dtype {dtypes.name(v.dtype)} but "
                    f"'{name}' is Carried[int32]: compute it as int32."
                )
            node = Node(Op.ELEM, (_materialized(t, v.node),), (), I32)
        bad = scalar_vars(node) & scratch
        if bad:
            raise CarryError(
                f"next value of '{name}' in {where} ({describe(node)}) depends on Scratchpad value "
                f"{', '.join(sorted(bad))}: the device cannot know the host's next value. Make "
                f"{', '.join(sorted(bad))} Carried, or carry a value computed without it."
            )
        result.append((name, node))
    return tuple(result)
