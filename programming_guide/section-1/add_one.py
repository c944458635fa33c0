"""Section 1, a first graph: add one to every element of an int32 vector.

Defines `AddOne` (one Add kernel; the ones are an iron.param), runs it with numpy through
`reference()`, compiles it for the chosen device, prints what the compiler made (the Plan's
description and the start of the MLIR) and calls it on the current backend (the emulator where
no NPU is attached). Both results are checked exactly against plain numpy; a mismatch exits 1.
It does not build with aiecc (Section 7 does).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.kernels import Add

N = 1024


class AddOne(iron.Graph):
    """out = x + 1, elementwise over int32: the ones are a param Add reads whole."""

    def __init__(self, n: int):
        self.ones = iron.param(np.ones(n, np.int32))

    def body(self, x):
        return Add.step(x, self.ones)


def report(label: str, got: np.ndarray, expected: np.ndarray) -> bool:
    """Print what was computed and whether it equals numpy exactly."""
    ok = np.array_equal(got, expected)
    verdict = "matches numpy (exact)" if ok else f"DIFFERS from numpy: expected {expected[:4].tolist()}..."
    print(f"{label}: out[:4] = {got[:4].tolist()}, out[-1] = {int(got[-1])} -> {verdict}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--svg", metavar="PATH", help="draw the placement into this SVG file")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    add_one = AddOne(N)
    x = np.arange(N, dtype=np.int32)
    expected = x + 1
    ok = report("reference", add_one.reference(x), expected)

    compiled = add_one.compile(x=((N,), np.int32))
    print(f"\n{compiled!r}\n")
    print(compiled.describe())
    if args.svg is not None:
        compiled.svg(args.svg)
        print(f"the placement, drawn: {args.svg}")
    print("\nThe MLIR, first 24 lines:")
    print("\n".join(compiled.mlir.splitlines()[:24]))
    print("...\n")
    ok &= report(f"compiled ({args.device})", compiled(x), expected)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
