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

CC_DIR = Path(__file__).resolve().parents[2] / "iron" / "kernels" / "cc"

ALL = ("i8", "u8", "i16", "i32", "bf16", "f32")
FLOATS = ("bf16", "f32")
KERNEL_TYPES = {
    "copy": ALL,
    "add": ALL,
    "sub": ALL,
    "mul": ALL,
    "scale": FLOATS,
    "relu": ALL,
    "silu": FLOATS,
    "exp": FLOATS,
    "accumulate": ALL,
    "matvec": ALL,
    "matmul": ALL,
    "rmsnorm": FLOATS,
    "softmax": FLOATS,
    "argmax": ALL,
    "cast": (),
    "requantize": ("i32", "i32_i16"),
}
INTEGERS = ("i8", "u8", "i16", "i32")
WIDER = ("i8_i32", "u8_i32", "i16_i32", "bf16_f32")
PAIRS = {
    "matvec": WIDER,
    "matmul": WIDER,
    "cast": tuple(f"{a}_{b}" for a in INTEGERS for b in (*INTEGERS, "f32") if a != b) + ("f32_bf16", "bf16_f32"),
}
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
        f"{kernel}.cc" for kernel in KERNEL_TYPES
    )
    assert sorted(path.name for path in CC_DIR.iterdir()) == sorted(
        [f"{kernel}.cc" for kernel in KERNEL_TYPES] + ["iron_kernel.h"]
    )


@pytest.mark.parametrize("kernel", KERNEL_TYPES)
def test_object_defines_exactly_the_kernel_symbols(objects, kernel):
    expected = {f"{kernel}_{suffix}" for suffix in KERNEL_TYPES[kernel] + PAIRS.get(kernel, ())}
    assert defined_functions(objects / f"{kernel}.o") == expected


@pytest.mark.parametrize("path", sorted(CC_DIR.iterdir()), ids=lambda path: path.name)
def test_sources_include_only_what_peano_has(path):
    includes = set(re.findall(r"^\s*#\s*include\s+(\S+)", path.read_text(), re.MULTILINE))
    assert includes <= ALLOWED_INCLUDES
    assert includes  # every file includes something, so the pattern did match


def test_sources_have_no_placeholder_comments():
    text = "\n".join(path.read_text() for path in CC_DIR.iterdir())
    assert re.findall(r"TODO|FIXME|XXX|placeholder", text, re.IGNORECASE) == []
