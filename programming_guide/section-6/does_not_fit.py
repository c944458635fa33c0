"""Section 6, what DoesNotFit says and how to fix it: a call too large for a tile that cannot stream.

`RunningSum` keeps `history` (8192 float32, 32 KiB) and adds each call's x to it: the Add and
the Copy writing history back are elementwise, so they stream in blocks over many tiles
(`stream_elementwise`, back into the state: `stream_into_state`, the sum returned too:
`stream_every_result`) although the whole state does not fit one tile. `Joined` joins two
(2, 4097) float32 matrices along axis 1: each row of its result is a row of x then a row of y,
so its blocks are not the blocks of either input and it does not stream, and its inputs and
result together take more than a compute tile's 64 KiB: `compile()` raises
`iron.errors.DoesNotFit`, which the script catches and prints. `JoinedByRows` is the fix the
message suggests, splitting the work over more kernel calls: one Copy per row and piece, each
writing its part of a state. Results over three calls are checked against numpy (rtol 1e-6,
atol 1e-6). A mismatch, or no DoesNotFit, exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.errors import DoesNotFit
from iron.kernels import Add, Concat, Copy
from iron.plan.rules import Rule

N, ROWS, WIDTH = 8192, 2, 4097
RTOL = ATOL = 1e-6


class RunningSum(iron.Graph):
    """history += x, returning the new history: the whole state is one operand of one Add."""

    def __init__(self, n: int):
        self.history = iron.state((n,), np.float32, name="history")

    def body(self, x):
        total = Add.step(self.history, x)
        Copy.step(total, out=self.history)
        return total


class Joined(iron.Graph):
    """x and y side by side: one Concat along axis 1."""

    def body(self, x, y):
        return Concat.step(x, y, axis=1)


class JoinedByRows(iron.Graph):
    """The same join as one Copy per row and piece, each writing its part of the state `joined`."""

    def __init__(self, rows: int, width: int):
        self.joined = iron.state((rows, 2 * width), np.float32, name="joined")

    def body(self, x, y):
        rows, width = x.shape
        for r in range(rows):
            Copy.step(x[r], out=self.joined[r, :width])
            Copy.step(y[r], out=self.joined[r, width:])


def stream_rule(compiled) -> str:
    return next(what for rule, what in compiled.plan.rules if rule is Rule.STREAM_ELEMENTWISE)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    rng = np.random.default_rng(0)

    running = RunningSum(N).compile(x=((N,), np.float32))
    print(f"RunningSum: stream_elementwise: {stream_rule(running)}")
    expected = np.zeros(N, np.float32)
    ok = True
    for _ in range(3):
        x = rng.standard_normal(N).astype(np.float32)
        expected += x
        ok &= np.allclose(running(x), expected, rtol=RTOL, atol=ATOL)
    ok &= np.allclose(running.read("history"), expected, rtol=RTOL, atol=ATOL)
    print(f"RunningSum ({args.device}), 3 calls: history[:3] = "
          f"{np.array2string(running.read('history')[:3], precision=4)} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (rtol {RTOL}, atol {ATOL})\n")

    spec = ((ROWS, WIDTH), np.float32)
    try:
        Joined().compile(x=spec, y=spec)
        print("Joined compiled: expected DoesNotFit")
        return 1
    except DoesNotFit as refused:
        print(f"Joined: DoesNotFit: {refused}\n")

    rows = JoinedByRows(ROWS, WIDTH).compile(x=spec, y=spec)
    print(f"JoinedByRows: {len(rows.plan.cores)} compute tiles, one per Copy")
    for _ in range(3):
        x, y = (rng.standard_normal((ROWS, WIDTH)).astype(np.float32) for _ in range(2))
        rows(x, y)
        ok &= np.allclose(rows.read("joined"), np.concatenate([x, y], axis=1), rtol=RTOL, atol=ATOL)
    print(f"JoinedByRows ({args.device}), 3 calls: joined[1, {WIDTH - 1}:{WIDTH + 1}] = "
          f"{np.array2string(rows.read('joined')[1, WIDTH - 1:WIDTH + 1], precision=4)} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (rtol {RTOL}, atol {ATOL})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
