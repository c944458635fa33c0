"""The emulator's native kernel mode (`IRON_EMULATOR_KERNELS=native`): kernel C++ built for the
host with `$CXX` (else g++) into one shared library in a verified entry of iron's build cache
(loaded only from a cache directory no other account can write), and called through ctypes on
numpy arrays in place (`NativeLibrary.load(sources)`, `lib.call(symbol, args, types)`).
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

from iron.errors import BuildError, KernelTypeError, ToolchainMissing
from iron.kernels.base import library_sources  # noqa: F401 - re-exported for the emulator
from iron.toolchain.cache import Cache, content_key

COMPILE_FLAGS = ("-std=c++20", "-O2", "-Wall", "-Werror", "-shared", "-fPIC")
LIBRARY_NAME = "kernels.so"
BYTE = ctypes.c_char
ARGUMENT_TYPES = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "f32": ctypes.c_float}


def compiler_command() -> list[str]:
    """`$CXX` split like a shell word list (it may carry a launcher or flags), else `g++`."""
    cxx = os.environ.get("CXX", "")
    try:
        command = shlex.split(cxx) or ["g++"]
    except ValueError as exc:
        raise ToolchainMissing(
            f"CXX={cxx!r} cannot be split into a command as a shell would ({exc}), so the "
            f"emulator's native kernel mode cannot run the host C++ compiler. Balance the quotes "
            f"in $CXX (for example CXX=\"ccache g++\"), or unset it to use g++."
        ) from None
    return command


def build(entry: Path, sources: Mapping[str, str], compiler: list[str]) -> dict[str, object]:
    """Write `sources` into the cache entry and compile their .cc files into its shared library."""
    if shutil.which(compiler[0]) is None:
        raise ToolchainMissing(
            f"The host C++ compiler {compiler[0]!r} (from $CXX, else g++) is not installed or not "
            f"on PATH, and the emulator's native kernel mode needs it to compile kernel sources. "
            f"Install it with `apt-get install g++`, or set $CXX to an installed C++ compiler."
        )
    for name, text in sources.items():
        (entry / name).write_text(text)
    units = sorted(name for name in sources if name.endswith(".cc"))
    command = [*compiler, *COMPILE_FLAGS, "-o", LIBRARY_NAME, *units]
    result = subprocess.run(command, cwd=entry, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"Compiling the native kernels {', '.join(units)} failed (exit {result.returncode}) "
            f"in {entry}:\n$ {shlex.join(command)}\n{result.stderr.rstrip()}\n"
            f"Fix the C++ errors above in the kernel sources, then load them again."
        )
    return {"command": command}


def library_entry(sources: Mapping[str, str]) -> AbstractContextManager[Path]:
    """The cache entry of `sources` built with `compiler_command()` (first, if not cached), held
    while the block runs: `with library_entry(sources) as entry: ...`; CacheError if another
    account could write it (loading it would run their code)."""
    compiler = compiler_command()
    names = sorted(sources)
    key = content_key("native", *compiler, *COMPILE_FLAGS, *names, *(sources[n] for n in names))
    return Cache().serving(key, lambda staging: build(staging, sources, compiler), kind="native")


def pointer(symbol: str, position: int, array: np.ndarray) -> object:
    """`array`'s data address as ctypes passes it (argument `position` of kernel `symbol`)."""
    try:
        # A byte view of a writable, contiguous, non-empty array: about 1 us, a third of .ctypes.
        return ctypes.byref(BYTE.from_buffer(array.view(np.uint8)))
    except (ValueError, TypeError, BufferError):
        if not array.flags.c_contiguous:
            raise KernelTypeError(
                f"Native kernel {symbol} got a non-contiguous array as argument {position} "
                f"(shape {array.shape}, strides {array.strides}); pass np.ascontiguousarray "
                f"of it instead."
            ) from None
        return array.ctypes.data


class NativeLibrary:
    """A built kernel library loaded with ctypes; `call` runs one of its symbols."""

    def __init__(self, path: Path, cdll: ctypes.CDLL) -> None:
        self.path = path
        self._cdll = cdll
        self._functions: dict[tuple[str, tuple[str, ...]], Callable[..., None]] = {}

    @classmethod
    def load(cls, sources: Mapping[str, str]) -> NativeLibrary:
        """Build `sources` (file name -> C++ text) unless already cached, then load the library."""
        with library_entry(sources) as entry:   # held: no other process's eviction removes it meanwhile
            library = entry / LIBRARY_NAME
            return cls(library, ctypes.CDLL(str(library)))

    def call(self, symbol: str, args: Sequence, types: Sequence[str]) -> None:
        """Call `symbol` on `args`: "ptr" a C-contiguous array (written in place), "i32", "f32"."""
        key = (symbol, tuple(types))
        function = self._functions.get(key) or self._bind(*key)
        values = [
            pointer(symbol, position, value) if kind == "ptr" else value
            for position, (value, kind) in enumerate(zip(args, types))
        ]
        function(*values)

    def _bind(self, symbol: str, types: tuple[str, ...]) -> Callable[..., None]:
        unknown = [kind for kind in types if kind not in ARGUMENT_TYPES]
        if unknown:
            raise KernelTypeError(
                f"Native kernel {symbol} was given argument types {unknown}, which are not "
                f"among {sorted(ARGUMENT_TYPES)}; describe each argument as one of those."
            )
        try:
            function = self._cdll[symbol]
        except AttributeError:
            raise KernelTypeError(
                f"The native kernel library {self.path} has no symbol {symbol!r}; define "
                f"`extern \"C\" void {symbol}(...)` in the kernel's C++ source."
            ) from None
        function.argtypes = [ARGUMENT_TYPES[kind] for kind in types]
        function.restype = None
        self._functions[(symbol, types)] = function
        return function
