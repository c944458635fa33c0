"""Designs of real size: cold compile time against size, and the emulator against reference().

Each row of COMPILE_ROWS is a series of (label, make) of growing size: a fresh graph and the
spec it compiles with. For each size it prints the cold compile time (trace, every pass, MLIR
and kernel sources), the kernel calls per launch and the compute tiles, and the ratios to the
series' first size: the time must grow no faster than calls x tiles (`time/work` <= 1). Series:
MatMul 256^3 to 2048^3 (bfloat16), MatVec 1024^2 to 4096^2 and Add over 2^16 to 2^20 (float32).
Targets: MatMul 2048^3 compiles in under 2 s; the emulator runs MatMul 512^3 float32 within
3x of reference() per call. Add a series by appending to COMPILE_ROWS.
"""
import time

import numpy as np
from _timing import race

import aie_utils
import iron
from aie_utils import from_name
from iron.compiler.mlir import print_mlir
from iron.compiler.plan import Invoke, Loop, TileKind
from iron.compiler.sources import kernel_sources
from iron.kernels import Add, MatMul, MatVec


class Product(iron.Graph):
    """C = A @ B, A an input, B a weight."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a):
        return MatMul.step(a, self.b)


def matmul(size: int, dtype=iron.bfloat16):
    def make():
        return Product(np.zeros((size, size), dtype)), {"a": ((size, size), dtype)}
    return f"MatMul {size}^3 {np.dtype(dtype).name}", make


class Projection(iron.Graph):
    """y = W @ x, W a weight."""

    def __init__(self, w):
        self.w = iron.weight(w)

    def body(self, x):
        return MatVec.step(self.w, x)


class Sum(iron.Graph):
    def body(self, x, y):
        return Add.step(x, y)


def matvec(size: int):
    def make():
        return Projection(np.zeros((size, size), np.float32)), {"x": ((size,), np.float32)}
    return f"MatVec {size}^2 float32", make


def add(size: int):
    def make():
        return Sum(), {"x": ((size,), np.float32), "y": ((size,), np.float32)}
    return f"Add 2^{size.bit_length() - 1} float32", make


COMPILE_ROWS = {
    "MatMul": [matmul(s) for s in (256, 512, 1024, 2048)],
    "MatVec": [matvec(s) for s in (1024, 2048, 4096)],
    "Add": [add(1 << e) for e in (16, 18, 20)],
}


def cold_compile(make) -> tuple[float, object]:
    graph, spec = make()
    start = time.perf_counter()
    body = graph.compile(**spec)
    print_mlir(body.plan)
    kernel_sources(body.plan)
    return time.perf_counter() - start, body.plan


def kernel_calls(plan) -> int:
    """Kernel calls one launch runs, over every core (a Loop's body counted per iteration)."""
    steps = {f.name: len(f.steps) for f in plan.functions}

    def count(program) -> int:
        return sum(item.count * count(item.body) if isinstance(item, Loop)
                   else steps[item.function] if isinstance(item, Invoke) else 0 for item in program)
    return sum(count(core.program) for core in plan.cores)


def work(plan) -> tuple[int, int]:
    """(kernel calls per launch, compute tiles) of a Plan."""
    tiles = len({c.tile for c in plan.cores if c.tile.kind is TileKind.COMPUTE})
    return kernel_calls(plan), tiles


def compile_series(name: str, rows):
    first = None
    for label, make in rows:
        seconds, plan = min((cold_compile(make) for _ in range(2)), key=lambda r: r[0])
        calls, tiles = work(plan)
        first = first or (seconds, calls * tiles)
        grows, effort = seconds / first[0], calls * tiles / first[1]
        print(f"compile {label:24s}: {seconds * 1e3:8.1f} ms  {calls:8d} kernel calls  {tiles:3d} tiles  "
              f"time x{grows:6.2f}  calls*tiles x{effort:8.1f}  time/work {grows / effort:5.2f} (target <= 1)")
    print(f"  {name}: largest compile {seconds:.2f} s (target < 2 s)")


def emulator_against_reference(size: int = 512):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    graph = Product(b)
    body = graph.compile(a=a)
    body(a=a)
    ours, theirs = race(lambda: body(a=a), lambda: graph.reference(a=a), number=1, repeat=5)
    print(f"emulator MatMul {size}^3 float32: {ours * 1e3:8.2f} ms per call, reference() {theirs * 1e3:7.2f} ms, "
          f"ratio {ours / theirs:5.1f}x (target <= 3x)")


def main():
    aie_utils.set_current_device(from_name("npu2"))
    for name, rows in COMPILE_ROWS.items():
        compile_series(name, rows)
    emulator_against_reference()


if __name__ == "__main__":
    main()
