"""Names a user gives iron, checked once, and what iron derives from them.

A kernel's, graph's or state's name reaches C++ symbols, file names in a build directory and
generated source text, so each is a C identifier of bounded length, checked where it is
declared; a weight or state named by its attribute path (`layers.0.wq`) is a dotted path of such
identifiers and indices. The C symbol and source file of a kernel are derived here and nowhere
else. This module imports nothing of iron but its errors, so every layer can use it.
"""
from __future__ import annotations

import re

from iron.errors import DeclarationError

MAX_NAME = 64        # characters: well inside a file name (255 bytes) with its suffix
MAX_PATH = 128       # characters of a declaration's attribute path
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ATTRIBUTE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*")
# The glue functions iron writes (cores.py and emit.py: `emit`, groups `g0`, parts `g0_p1`,
# blocks `g0_block`, `g0_p1_block`) are files `<function>.cc` beside the kernels' sources, so no
# kernel may take their names.
GENERATED_FUNCTION = re.compile(r"emit|g[0-9]+(_p[0-9]+)?(_block)?")
ALLOWED = f"a C identifier (ASCII letters, digits and '_', not starting with a digit) of at most {MAX_NAME} characters"


def identifier(what: str, name) -> str:
    """`name` when it is a C identifier of at most MAX_NAME characters; else DeclarationError
    naming `what` (e.g. "kernel class Foo's name")."""
    if not isinstance(name, str):
        raise DeclarationError(f"{what} is {name!r}, a {type(name).__name__}: a name is a string, {ALLOWED}.")
    if not C_IDENTIFIER.fullmatch(name) or len(name) > MAX_NAME:
        raise DeclarationError(f"{what} is {_shown(name)}: a name must be {ALLOWED}. Rename it.")
    return name


def attribute_path(what: str, path: str) -> str:
    """A declaration's name from its attribute path: C identifiers and indices joined by '.'."""
    if not ATTRIBUTE_PATH.fullmatch(path) or len(path) > MAX_PATH:
        raise DeclarationError(
            f"{what} is reached through {_shown(path)}: an unnamed weight, param or state is named by its "
            f"attribute path, which must be C identifiers and list indices joined by '.' (at most {MAX_PATH} "
            "characters). Hold it in an attribute or list with such names (dict keys too), or give a state name=."
        )
    return path


def kernel_name(cls_name: str, name) -> str:
    """A kernel's `name`: an identifier that is not a name iron gives its own generated functions."""
    identifier(f"the name of kernel class {cls_name!r}", name)
    if GENERATED_FUNCTION.fullmatch(name):
        raise DeclarationError(
            f"the name of kernel class {cls_name!r} is '{name}', the name of a function iron generates (emit, g0, g0_p1, ...): "
            "give the kernel another name."
        )
    return name


def symbol(name: str, *dtype_suffixes: str) -> str:
    """A kernel's C symbol for its dtypes: `add`, `f32` -> `add_f32`; `matvec`, `i8`, `i32` -> `matvec_i8_i32`."""
    return "_".join((name, *dtype_suffixes))


def source_file(name: str) -> str:
    """The file a kernel's or glue function's C++ source is written to (and #included as): `add` -> `add.cc`."""
    return f"{name}.cc"


def object_file(name: str) -> str:
    """The object a glue function's source is built into, which the MLIR links with: `g0` -> `g0.o`."""
    return f"{name}.o"


def _shown(name: str) -> str:
    """The name as repr, cut short so a 10 000-character name does not flood the message."""
    return repr(name) if len(name) <= 80 else f"{name[:60]!r}... ({len(name)} characters)"
