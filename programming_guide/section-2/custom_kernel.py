"""Section 2, your own kernel: `MyAxpy` (out = alpha * x + y), composed with library kernels.

Defines a kernel the way iron's library defines its own: a shape rule (elementwise, the
default), a numpy `compute` (what reference() and the emulator run), and its AIE C++ source
with the C ABI the compiler calls (`my_axpy_f32(const float* x, const float* y, float* out,
int32_t n, float alpha)`). It checks the reference against numpy, compiles the graph, prints the
glue source the compiler wrote for the group that calls MyAxpy, and runs the compiled graph on the
current backend with the kernel's numpy semantics and, where a host C++ compiler exists, with its
C++ source built for the host (IRON_EMULATOR_KERNELS=native). Every result must equal numpy
(rtol 1e-6); a mismatch exits 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

import aie_utils
import iron
from iron.kernels import ReLU

N = 64


class MyAxpy(iron.Kernel):
    """out = alpha * x + y, elementwise, alpha fixed when the design compiles."""

    name, arity = "my_axpy", 2                   # C symbols my_axpy_<dtype>, source file my_axpy.cc
    dtypes = frozenset({np.dtype(np.float32)})   # the dtypes its C++ implements
    attrs = {"alpha": iron.Kernel.REQUIRED}      # static attributes, passed to C after the sizes
    c_attrs = (("alpha", "f32"),)
    index_map = "i,i->i"                         # elementwise: output i reads element i of each input
    keeps_zeros = True                           # alpha * 0 + 0 = 0: padding of zeros stays zeros
    source = """
#include <cstdint>
extern "C" void my_axpy_f32(const float* x, const float* y, float* out, int32_t n, float alpha) {
  for (int32_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
}
"""

    @staticmethod
    def compute(x, y, alpha):
        return np.float32(alpha) * x + y


class Residual(iron.Graph):
    """relu(alpha * x + y): a user kernel feeding a library kernel."""

    def body(self, x, y):
        return ReLU.step(MyAxpy.step(x, y, alpha=0.5))


def report(label: str, got: np.ndarray, expected: np.ndarray) -> bool:
    ok = np.allclose(got, expected, rtol=1e-6, atol=1e-6)
    print(f"{label}: out[:4] = {np.array2string(got[:4], precision=4)} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (rtol 1e-6)")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    expected = np.maximum(np.float32(0.5) * x + y, 0)
    ok = report("reference", Residual().reference(x, y), expected)

    compiled = Residual().compile(x=((N,), np.float32), y=((N,), np.float32))
    glue = next(name for name, text in compiled.sources.items() if '#include "my_axpy.cc"' in text)
    print(f"the compiler's glue {glue} (calls my_axpy_f32, then relu_f32):")
    print("\n".join("    " + line for line in compiled.sources[glue].strip().splitlines()))
    ok &= report(f"compiled ({compiled.device.name}, numpy kernels)", compiled(x, y), expected)

    if shutil.which(os.environ.get("CXX", "g++")):
        os.environ["IRON_EMULATOR_KERNELS"] = "native"
        native = Residual().compile(x=((N,), np.float32), y=((N,), np.float32))
        ok &= report(f"compiled ({native.device.name}, the C++ built for the host)", native(x, y), expected)
    else:
        print("no host C++ compiler: the native kernel mode is skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
