"""Tests of the kernel library's C++ sources (iron/kernels/cc) as source files.

Every .cc compiles with the host g++ under `-std=c++20 -Wall -Werror -c`; each `<name>.o`
defines exactly the `extern "C"` symbols of its kernel, one per supported element type and one
per (input, output) pair of a kernel whose output type differs (`matvec_i8_i32`, `cast_f32_bf16`;
the ABI the compiler declares and links as `<name>.o`); and the sources include nothing Peano's libc
lacks. Running the kernels is tests/runtime/test_native_kernels.py's job.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from iron.kernels import LIBRARY

CC_DIR = Path(__file__).resolve().parents[2] / "iron" / "kernels" / "cc"

# Every source file's symbols (a file stem -> the symbols of the kernels it defines: a kernel's own,
# and those of kernels sharing it, `source_kernel`: add_constant_f32 in add.cc), read from their
# declared signatures (one per input dtype, one per further output dtype: matvec_i8_i32,
# cast_f32_bf16, and one per mixed pair of inputs: matvec_u8_i8_i32).
SYMBOLS: dict[str, set[str]] = {}
for k in LIBRARY:
    SYMBOLS.setdefault(k.source_text()[0].removesuffix(".cc"), set()).update(k.symbols())
ALLOWED_INCLUDES = {"<cstdint>", "<cmath>", '"iron_kernel.h"'}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"the host toolchain's {name} is not installed (apt-get install g++ binutils)")
    return path


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> Path:
    """The directory holding `<name>.o` of every kernel, compiled in one g++ run."""
    directory = tmp_path_factory.mktemp("kernel_objects")
    sources = sorted(str(path) for path in CC_DIR.glob("*.cc"))
    command = [tool("g++"), "-std=c++20", "-Wall", "-Werror", "-c", *sources]
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return directory


def defined_functions(object_file: Path) -> set[str]:
    """The global text symbols (`T` in nm) an object file defines."""
    listing = subprocess.run(
        [tool("nm"), "--defined-only", "--extern-only", str(object_file)],
        capture_output=True, text=True, check=True,
    ).stdout
    return {fields[2] for fields in map(str.split, listing.splitlines()) if fields[1] == "T"}


def test_each_kernel_has_its_own_source_file():
    assert sorted(path.name for path in CC_DIR.glob("*.cc")) == sorted(
        f"{kernel}.cc" for kernel in SYMBOLS
    )
    assert sorted(path.name for path in CC_DIR.iterdir()) == sorted(
        [f"{kernel}.cc" for kernel in SYMBOLS] + ["iron_kernel.h"]
    )


@pytest.mark.parametrize("kernel", SYMBOLS)
def test_object_defines_exactly_the_kernel_symbols(objects, kernel):
    assert defined_functions(objects / f"{kernel}.o") == SYMBOLS[kernel]


@pytest.mark.parametrize("path", sorted(CC_DIR.iterdir()), ids=lambda path: path.name)
def test_sources_include_only_what_peano_has(path):
    includes = set(re.findall(r"^\s*#\s*include\s+(\S+)", path.read_text(), re.MULTILINE))
    assert includes <= ALLOWED_INCLUDES
    assert includes  # every file includes something, so the pattern did match


def test_sources_have_no_placeholder_comments():
    text = "\n".join(path.read_text() for path in CC_DIR.iterdir())
    assert re.findall(r"TODO|FIXME|XXX|placeholder", text, re.IGNORECASE) == []
