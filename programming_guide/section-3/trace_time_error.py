"""Section 3, the trace-time error: a per-call value used as a Python bool.

`ClampedWrong` writes `if pos > 3:` in body(): iron traces body() once, when the value of `pos`
is not known (the device alone knows it per call), so the comparison raises
`iron.errors.TracedValueError` naming the value. `Clamped` says the same thing on the device
with `iron.min(pos, 3)`; its compiled calls are checked exactly against numpy. A mismatch, or
the error not being raised, exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron import Scratchpad
from iron.errors import TracedValueError
from iron.kernels import Copy

TABLE = np.arange(40, dtype=np.int32).reshape(8, 5)


class ClampedWrong(iron.Graph):
    """Row min(pos, 3) of a table, written with a Python `if` (refused when traced)."""

    def __init__(self, table):
        self.table = iron.weight(table)

    def body(self, *, pos: Scratchpad[np.int32]):
        if pos > 3:
            pos = 3
        return Copy.step(self.table[pos])


class Clamped(iron.Graph):
    """Row min(pos, 3) of a table, the minimum computed on the device."""

    def __init__(self, table):
        self.table = iron.weight(table)

    def body(self, *, pos: Scratchpad[np.int32]):
        return Copy.step(self.table[iron.min(pos, 3)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    try:
        ClampedWrong(TABLE).reference(pos=5)
        print("ClampedWrong was traced without an error")
        return 1
    except TracedValueError as refused:
        print(f"ClampedWrong: TracedValueError: {refused}")

    compiled = Clamped(TABLE).compile()
    ok = True
    for pos in (1, 3, 6):
        got = compiled(pos=pos)
        ok &= np.array_equal(got, TABLE[min(pos, 3)])
        print(f"Clamped(pos={pos}) -> {got.tolist()}")
    print(f"Clamped ({args.device}): {'matches' if ok else 'DIFFERS from'} numpy (exact)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
