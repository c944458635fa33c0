"""Tests of iron.plan.sources.kernel_sources: which files a Plan gets, the exact glue text,
every glue file of several Plans compiling with host g++ -std=c++20 -Wall -Werror, a glue file
run through ctypes (int32 word arithmetic with wrap-around and floor division, pointer offsets,
block strides, Load and f32 operands) and user kernels. A Plan check_plan refuses is never printed
(tests/plan/test_core_checks.py, test_invariants.py)."""

import ctypes
import dataclasses
import shutil
import subprocess

import numpy as np
import pytest
from test_mlir import HAND_BUILT, design_plans, streamed_plan

from iron.dtypes import bfloat16
from iron.ir import wrap_i32
from iron.kernels import LIBRARY, Argmax, Copy, RMSNorm, Scale, Softmax
from iron.kernels.base import Kernel, library_sources
from iron.plan.plan import CType, Function, Imm, KernelStep, Load, Ptr, ScalarStep, WordOp
from iron.plan.sources import kernel_sources

FLAGS = ["-std=c++20", "-Wall", "-Werror"]
INT_MIN, INT_MAX = -2**31, 2**31 - 1


def with_functions(*functions):
    """The streamed Plan with these Functions instead of its own (sources read only those)."""
    return dataclasses.replace(streamed_plan(), functions=functions)


def write(sources: dict, directory) -> list[str]:
    for name, text in sources.items():
        (directory / name).write_text(text)
    return sorted(sources)


def glue_names(plan) -> list[str]:
    return [f"{f.name}.cc" for f in plan.functions]


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="host g++ is not installed")


# ---- files and text -----------------------------------------------------------------------------

def test_files_are_glue_called_kernels_and_header():
    sources = kernel_sources(HAND_BUILT["walk_npu2"]())
    assert list(sources) == ["copy.cc", "emit.cc", "g0.cc", "iron_kernel.h"]
    library = library_sources()
    assert sources["copy.cc"] == library["copy.cc"]
    assert sources["iron_kernel.h"] == library["iron_kernel.h"]


STREAMED_BLOCK = """\
// g0_block.cc: function g0_block of design Streamed, written by iron from its Plan.
// p0: g0_w
// p1: g0_x
// p2: g0_host
#include "iron_kernel.h"
#include "matvec.cc"

extern "C" void g0_block(uint8_t* p0, uint8_t* p1, uint8_t* p2, int32_t block) {
  matvec_f32(reinterpret_cast<const float*>(p0), reinterpret_cast<const float*>(p1), reinterpret_cast<float*>(p2 + 64 * block), 16, 16);
}
"""


def test_blocked_glue_text():
    sources = kernel_sources(streamed_plan())
    assert list(sources) == ["copy.cc", "g0.cc", "g0_block.cc", "iron_kernel.h", "matvec.cc"]
    assert sources["g0_block.cc"] == STREAMED_BLOCK


def test_pointer_types_follow_the_kernel_dtype_and_output_dtype():
    steps = (KernelStep.of(Argmax, bfloat16, (Ptr("x", 8), Ptr("y", 4), Imm(1), Imm(16), Imm(16))),
             KernelStep.of(RMSNorm, np.float32, (Ptr("x"), Ptr("x", 64), Ptr("y"), Imm(2), Imm(16), Imm(1e-5, CType.F32),
                                                 Imm(13))),
             KernelStep.of(Softmax, np.float32, (Ptr("x"), Ptr("y"), Imm(2), Imm(16), Load("y", 12))))
    text = kernel_sources(with_functions(Function("f", ("x", "y"), steps)))["f.cc"]
    body = text[text.index('extern "C"'):]
    assert body == (
        'extern "C" void f(uint8_t* p0, uint8_t* p1) {\n'
        "  argmax_bf16(reinterpret_cast<const uint16_t*>(p0 + 8), reinterpret_cast<int32_t*>(p1 + 4), 1, 16, 16);\n"
        "  rmsnorm_f32(reinterpret_cast<const float*>(p0), reinterpret_cast<const float*>(p0 + 64), "
        "reinterpret_cast<float*>(p1), 2, 16, 1e-05f, 13);\n"
        "  softmax_f32(reinterpret_cast<const float*>(p0), reinterpret_cast<float*>(p1), 2, 16, load_word(p1 + 12));\n"
        "}\n"
    )
    assert '#include "argmax.cc"\n#include "rmsnorm.cc"\n#include "softmax.cc"\n' in text


def test_float_immediates_keep_their_float32_value():
    steps = tuple(KernelStep.of(Scale, np.float32, (Ptr("x"), Ptr("x"), Imm(1), Imm(v, CType.F32)))
                  for v in (0.1, -3.0, 1e30, float("inf"), float("-inf"), float("nan")))
    text = kernel_sources(with_functions(Function("f", ("x",), steps)))["f.cc"]
    factors = [line.rsplit(", ", 1)[1] for line in text.splitlines() if line.startswith("  scale_f32")]
    assert factors == ["0.1f);", "-3.0f);", "1e+30f);", "__builtin_inff());", "-__builtin_inff());",
                       '__builtin_nanf(""));']


# ---- compiling ----------------------------------------------------------------------------------

def every_library_kernel() -> Function:
    """One step per library kernel and (input, output) dtype pair, with its C ABI: pointers,
    sizes, c_attrs."""
    size_operands = {"matvec": 2, "matmul": 3, "matmul_accumulate": 3, "concat": 3, "rmsnorm": 2, "softmax": 2, "argmax": 2, "max": 2,
                     "min": 2, "sum": 2, "layer_norm": 2, "layer_norm_affine": 2,
                     "dequant": 3, "qmatvec": 3, "conv2d": 8, "max_pool2d": 5, "avg_pool2d": 5, "attention": 5, "strided": 2, "scatter": 2, "strided_rows": 3}
    steps = []
    for kernel in LIBRARY:
        pointers = tuple(Ptr("a", 64 * i) for i in range(kernel.arity + 1))
        sizes = (Imm(4),) * size_operands.get(kernel.name, 1)
        attrs = tuple(Imm(1.0, CType.F32) if ctype == "f32" else Load("b") for _, ctype in kernel.c_attrs)
        for dtype, out in kernel.signatures():
            steps.append(KernelStep.of(kernel, dtype, pointers + sizes + attrs, out))
        for ins, out in kernel.mixed_signatures():   # QMatVec's only: uint8 blocks x float32
            steps.append(KernelStep.of(kernel, ins, pointers + sizes + attrs, out))
    return Function("every_kernel", ("a", "b"), tuple(steps))


class Doubler(Kernel):
    """A user kernel with its own C++ source: out = 2 * x."""

    name = "doubler_test"
    dtypes = frozenset({np.dtype(np.int32)})
    source = (
        "#include <cstdint>\n"
        'extern "C" void doubler_test_i32(const int32_t* x, int32_t* out, int32_t n) {\n'
        "  for (int32_t i = 0; i < n; ++i) out[i] = 2 * x[i];\n"
        "}\n"
    )


def test_user_kernel_source_is_included():
    plan = with_functions(Function("g1", ("x",), (KernelStep.of(Doubler, np.int32, (Ptr("x"), Ptr("x", 4), Imm(1))),)))
    sources = kernel_sources(plan)
    assert sources["doubler_test.cc"] == Doubler.source
    assert '#include "doubler_test.cc"\n' in sources["g1.cc"]


@needs_gxx
def test_every_glue_file_compiles_with_host_gxx(tmp_path):
    plans = {name: plan for name, plan in design_plans().items() if name != "mlp_npu2"}  # 22 files like mlp_layer's
    plans["every_kernel"] = with_functions(every_library_kernel())
    plans["user_kernel"] = with_functions(
        Function("g1", ("x",), (KernelStep.of(Doubler, np.int32, (Ptr("x"), Ptr("x", 4), Imm(1))),)))
    jobs = []
    for name, plan in plans.items():
        directory = tmp_path / name
        directory.mkdir()
        write(kernel_sources(plan), directory)
        command = ["g++", *FLAGS, "-c", *glue_names(plan)]
        jobs.append((name, subprocess.Popen(command, cwd=directory, stderr=subprocess.PIPE, text=True)))
    for name, job in jobs:
        _, errors = job.communicate()
        assert job.returncode == 0, f"{name}:\n{errors}"
        assert sorted(p.name for p in (tmp_path / name).glob("*.o")) == sorted(
            n.replace(".cc", ".o") for n in glue_names(plans[name]))


# ---- running ------------------------------------------------------------------------------------

A_VALUES = (-7, 7, INT_MIN, INT_MAX, 0)      # words 0-4 of `src`
B_VALUES = (2, -2, 0, -1, 3)                  # words 5-9 of `src`
OPS = tuple(op for op in WordOp if op is not WordOp.COPY)


def expected_word(op: WordOp, a: int, b: int) -> int:
    """Python's semantics wrapped to int32; a zero divisor gives 0."""
    exact = {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0,
             "mod": a % b if b else 0, "min": min(a, b), "max": max(a, b)}[op.value]
    return wrap_i32(exact)


def probe_function() -> Function:
    """ScalarSteps over every op and operand pair into dst words 0.., a copy with a block stride,
    a scale by an f32 Imm and a softmax whose length is a Load."""
    pairs = [(op, i, 5 + j) for op in OPS for i in range(len(A_VALUES)) for j in range(len(B_VALUES))]
    steps = [ScalarStep(Ptr("dst", 4 * k), op, Load("src", 4 * i), Load("src", 4 * j)) for k, (op, i, j) in enumerate(pairs)]
    steps += [ScalarStep(Ptr("dst", 4 * len(pairs)), WordOp.COPY, Load("src", 4)),
              ScalarStep(Ptr("dst", 4 * len(pairs) + 4), WordOp.SUB, Imm(INT_MIN), Imm(1)),
              KernelStep.of(Copy, np.int32, (Ptr("src", 0, 16), Ptr("dst", 1600, 4), Imm(2))),
              KernelStep.of(Scale, np.float32, (Ptr("floats"), Ptr("floats", 16), Imm(4), Imm(0.5, CType.F32))),
              KernelStep.of(Softmax, np.float32, (Ptr("floats"), Ptr("floats", 32), Imm(1), Imm(4), Load("src", 40)))]
    return Function("probe", ("src", "dst", "floats"), tuple(steps), blocked=True)


@needs_gxx
def test_glue_runs_with_int32_word_semantics(tmp_path):
    plan = with_functions(probe_function())
    write(kernel_sources(plan), tmp_path)
    subprocess.run(["g++", *FLAGS, "-O1", "-shared", "-fPIC", "-o", "probe.so", "probe.cc"],
                   cwd=tmp_path, check=True, capture_output=True)
    probe = ctypes.CDLL(str(tmp_path / "probe.so")).probe
    probe.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    src = np.array([*A_VALUES, *B_VALUES, 2, 11, 12, 13, 14, 15, 16, 17], dtype=np.int32)
    dst = np.zeros(512, dtype=np.int32)
    floats = np.array([1.0, 2.0, 3.0, 4.0] + [0.0] * 8, dtype=np.float32)
    probe(src.ctypes.data, dst.ctypes.data, floats.ctypes.data, 3)

    expected = [expected_word(op, a, b) for op in OPS for a in A_VALUES for b in B_VALUES]
    n = len(expected)
    assert dst[:n].tolist() == expected
    assert dst[n:n + 2].tolist() == [7, INT_MAX]
    assert dst[403:405].tolist() == [12, 13]             # src byte 3 x 16 -> dst byte 1600 + 3 x 4
    assert dst[n + 2:403].tolist() == [0] * (403 - n - 2)
    assert floats[4:8].tolist() == [0.5, 1.0, 1.5, 2.0]
    e = np.exp(np.float32([1.0, 2.0]) - np.float32(2.0))
    np.testing.assert_allclose(floats[8:12], [*(e / e.sum()), 0.0, 0.0], rtol=1e-6, atol=0)
