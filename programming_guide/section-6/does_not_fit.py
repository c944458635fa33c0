"""Section 6, what DoesNotFit says and how to fix it: a state too large to read whole.

`RunningSum` keeps `history` (8192 float32, 32 KiB) and adds each call's x to it, reading the
whole state as one kernel operand: together with x and the result that is more than a compute
tile's 64 KiB, so `compile()` raises `iron.errors.DoesNotFit`, which the script catches and
prints. `ChunkedRunningSum` is the fix the message suggests, splitting the work over more
kernel calls: one Add per chunk of 1024 elements, each its own group on its own tile. Its
results over three calls are checked against numpy (rtol 1e-6, atol 1e-6). A mismatch, or no
DoesNotFit, exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.errors import DoesNotFit
from iron.kernels import Add, Copy

N, CHUNK = 8192, 1024
RTOL = ATOL = 1e-6


class RunningSum(iron.Graph):
    """history += x, returning the new history: the whole state is one operand of one Add."""

    def __init__(self, n: int):
        self.history = iron.state((n,), np.float32, name="history")

    def body(self, x):
        total = Add.step(self.history, x)
        Copy.step(total, out=self.history)
        return total


class ChunkedRunningSum(RunningSum):
    """The same sum, one Add per chunk of `chunk` elements (the chunks are Python ints)."""

    def __init__(self, n: int, chunk: int):
        super().__init__(n)
        self.chunk = chunk

    def body(self, x):
        totals = []
        for start in range(0, self.history.shape[0], self.chunk):
            part = slice(start, start + self.chunk)
            total = Add.step(self.history[part], x[part])
            Copy.step(total, out=self.history[part])
            totals.append(total)
        return tuple(totals)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    spec = ((N,), np.float32)

    try:
        RunningSum(N).compile(x=spec)
        print("RunningSum compiled: expected DoesNotFit")
        return 1
    except DoesNotFit as refused:
        print(f"RunningSum: DoesNotFit: {refused}\n")

    chunked = ChunkedRunningSum(N, CHUNK)
    compiled = chunked.compile(x=spec)
    print(f"ChunkedRunningSum: {len(compiled.plan.cores)} compute tiles, one per chunk of {CHUNK}")
    rng = np.random.default_rng(0)
    expected = np.zeros(N, np.float32)
    ok = True
    for _ in range(3):
        x = rng.standard_normal(N).astype(np.float32)
        expected += x
        ok &= np.allclose(np.concatenate(compiled(x)), expected, rtol=RTOL, atol=ATOL)
    ok &= np.allclose(compiled.read("history"), expected, rtol=RTOL, atol=ATOL)
    print(f"ChunkedRunningSum ({args.device}), 3 calls: history[:3] = "
          f"{np.array2string(compiled.read('history')[:3], precision=4)} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (rtol {RTOL}, atol {ATOL})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
