"""Section 6, placement and multi-tile designs: matrices too large for one tile.

Defines `Projection`, y = W2 @ ReLU(W1 @ x) with W1 256 x 512 and W2 512 x 256 in float32
(512 KiB each, eight times a compute tile's 64 KiB). The compiler streams each matrix's rows from
the host through a mem tile and splits them by rows over four compute tiles, joining the partial
results; the two MatVecs land in two columns. The script prints `compiled.describe()`, the
placement rules that decided (`compiled.plan.rules`), the tiles and columns used and the memory
budgets, and checks the compiled result against numpy (rtol 1e-4, atol 1e-4). A mismatch exits
1. Memory that does not fit is does_not_fit.py's subject.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.kernels import MatVec, ReLU

WIDTH, HIDDEN = 512, 256
RTOL = ATOL = 1e-4


class Projection(iron.Graph):
    """y = W2 @ ReLU(W1 @ x) for two large float32 matrices."""

    def __init__(self, w1: np.ndarray, w2: np.ndarray):
        self.w1 = iron.param(w1)
        self.w2 = iron.param(w2)

    def body(self, x):
        return MatVec.step(self.w2, ReLU.step(MatVec.step(self.w1, x)))


def show_placement(compiled) -> None:
    """The placement rules that decided, the tiles and columns the cores use, the budgets."""
    device, plan = compiled.device, compiled.plan
    print("Rules that decided (compiled.plan.rules):")
    for rule, decided in plan.rules:
        print(f"  {rule}: {decided}")
    columns = sorted({core.tile.col for core in plan.cores})
    print(f"{len(plan.cores)} compute tiles of {len(device.compute_tiles)} on {device.name}, in columns {columns}: "
          f"{', '.join(f'{core.tile.name} ({core.group})' for core in plan.cores)}")
    print(f"budget per tile: compute {device.compute.data_memory_bytes} bytes (stack included), "
          f"mem {device.mem.data_memory_bytes} bytes")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--svg", metavar="PATH", help="draw the placement into this SVG file")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((HIDDEN, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    w2 = (rng.standard_normal((WIDTH, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    x = rng.standard_normal(WIDTH).astype(np.float32)
    compiled = Projection(w1, w2).compile(x=((WIDTH,), np.float32))
    print(compiled.describe())
    if args.svg is not None:
        compiled.svg(args.svg)
        print(f"the placement, drawn: {args.svg}")
    print()
    show_placement(compiled)

    y = compiled(x)
    expected = w2 @ np.maximum(w1 @ x, 0)
    ok = np.allclose(y, expected, rtol=RTOL, atol=ATOL)
    print(f"compiled ({args.device}): y[:3] = {np.array2string(y[:3], precision=4)} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (rtol {RTOL}, atol {ATOL})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
