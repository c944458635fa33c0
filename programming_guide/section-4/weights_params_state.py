"""Section 4, weights, params and state: an embedding gathered, projected and accumulated.

Defines `Tally`: each call the host gives a token `tok` and a slot `slot` (Scratchpad values).
The graph gathers row `tok` of `table` (an iron.weight: read through a per-call index),
multiplies it by `proj` (an iron.param: a constant matrix MatVec reads whole) and adds the
result into row `slot` of `acc` (an iron.state: device memory that persists across calls) with
Accumulate. The host presets `acc` with `write`, runs calls and reads `acc` back with `read`;
the reference and the compiled graph are both checked exactly against numpy (int32). It also
shows the error a param indexed by a per-call value gives. A mismatch exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron import Scratchpad
from iron.errors import TracedValueError
from iron.kernels import Accumulate, Copy, MatVec

VOCAB, WIDTH, OUT, SLOTS = 16, 8, 4, 3


class Tally(iron.Graph):
    """acc[slot] += proj @ table[tok]; returns the projection."""

    def __init__(self, table: np.ndarray, proj: np.ndarray, slots: int):
        self.table = iron.weight(table)
        self.proj = iron.param(proj)
        self.acc = iron.state((slots, proj.shape[0]), np.int32, name="acc")

    def body(self, *, tok: Scratchpad[np.int32], slot: Scratchpad[np.int32]):
        y = MatVec.step(self.proj, Copy.step(self.table[tok]))
        Accumulate.step(y, out=self.acc[slot])
        return y


class ParamIndexed(Tally):
    """The mistake: a param read through a per-call index (refused when traced)."""

    def body(self, *, tok: Scratchpad[np.int32], slot: Scratchpad[np.int32]):
        return Copy.step(self.proj[tok])


def check_path(label: str, call, read, write, tally: Tally, calls: list[tuple[int, int]]) -> bool:
    """Preset acc, run the calls, read acc back; check each result and acc exactly."""
    table, proj = tally.table.array, tally.proj.array
    expected = np.full((SLOTS, OUT), 100, np.int32)
    write("acc", expected)
    ok = True
    for tok, slot in calls:
        y = call(tok=tok, slot=slot)
        ok &= np.array_equal(y, proj @ table[tok])
        expected[slot] += proj @ table[tok]
    acc = read("acc")
    ok &= np.array_equal(acc, expected)
    print(f"{label}: acc after {len(calls)} calls = {acc.tolist()} -> "
          f"{'matches' if ok else 'DIFFERS from'} numpy (exact)")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    rng = np.random.default_rng(0)
    table = rng.integers(-9, 10, (VOCAB, WIDTH)).astype(np.int32)
    proj = rng.integers(-3, 4, (OUT, WIDTH)).astype(np.int32)
    calls = [(5, 0), (2, 1), (5, 0), (11, 2), (0, 1)]

    tally = Tally(table, proj, SLOTS)
    ok = check_path("reference", tally.reference, tally.read, tally.write, tally, calls)
    compiled = tally.compile()
    ok &= check_path(f"compiled ({args.device})", compiled, compiled.read, compiled.write, tally, calls)

    try:
        ParamIndexed(table, proj, SLOTS).reference(tok=1, slot=0)
        print("ParamIndexed was traced without an error")
        ok = False
    except TracedValueError as refused:
        print(f"ParamIndexed: TracedValueError: {refused}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
