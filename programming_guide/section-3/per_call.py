"""Section 3, per-call values from the host: a Scratchpad position indexing a weight and a state.

Defines `Window`: each call the host gives `pos` (a `Scratchpad[np.int32]`); the graph reads
row `pos` of a table and the row after it, clamped to the last row with `iron.min(pos + 1,
last)`, adds them, records the sum in the state `sums` at row `pos` and returns it. The
expressions are computed on the device from the one word the host writes. Every call and the
final `sums` are checked exactly against numpy; an index out of range is shown to be refused
before anything is written. A mismatch exits 1. It does not carry values between calls
(Section 5 does).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron import Scratchpad
from iron.errors import IndexOutOfRange
from iron.kernels import Add, Copy

ROWS, WIDTH = 8, 16


class Window(iron.Graph):
    """table[pos] + table[min(pos + 1, last)], recorded in `sums[pos]` and returned."""

    def __init__(self, table: np.ndarray):
        self.table = iron.weight(table)
        self.sums = iron.state(table.shape, table.dtype, name="sums")

    def body(self, *, pos: Scratchpad[np.int32]):
        last = self.table.shape[0] - 1          # a Python int, known when tracing
        total = Add.step(self.table[pos], self.table[iron.min(pos + 1, last)])
        Copy.step(total, out=self.sums[pos])
        return total


def numpy_window(table: np.ndarray, pos: int) -> np.ndarray:
    return table[pos] + table[min(pos + 1, len(table) - 1)]


def check_path(label: str, call, read, table: np.ndarray, positions: list[int]) -> bool:
    """Call with each position, then read `sums`; print and check both exactly against numpy."""
    ok = True
    expected_sums = np.zeros_like(table)
    for pos in positions:
        got = call(pos=pos)
        expected_sums[pos] = numpy_window(table, pos)
        ok &= np.array_equal(got, expected_sums[pos])
        print(f"  {label}: pos={pos} -> {got[:4].tolist()}...")
    ok &= np.array_equal(read("sums"), expected_sums)
    print(f"{label}: {len(positions)} calls and sums: {'matches' if ok else 'DIFFERS from'} numpy (exact)")
    return ok


def check_refused(compiled, pos: int) -> bool:
    """An index out of range is refused before anything is written: `sums` stays as it was."""
    before = compiled.read("sums")
    try:
        compiled(pos=pos)
        print(f"pos={pos} was not refused")
        return False
    except IndexOutOfRange as refused:
        print(f"pos={pos} is refused: {refused}")
    unchanged = np.array_equal(compiled.read("sums"), before)
    print(f"sums after the refused call: {'unchanged' if unchanged else 'CHANGED'}")
    return unchanged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    table = np.arange(ROWS * WIDTH, dtype=np.int32).reshape(ROWS, WIDTH)
    positions = [0, 3, 7, 2]
    window = Window(table)
    ok = check_path("reference", window.reference, window.read, table, positions)

    compiled = window.compile()
    print("The scratchpad words the host computes for each call:")
    for word in compiled.parameters:
        bound = f", must be in {word.bound[0]}..{word.bound[1] - 1} for {word.what}" if word.bound else ""
        print(f"  word {word.index}: {word.name} ({word.kind}){bound}")
    ok &= check_path(f"compiled ({args.device})", compiled, compiled.read, table, positions)
    ok &= check_refused(compiled, ROWS)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
