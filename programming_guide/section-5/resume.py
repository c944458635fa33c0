"""Section 5, a device loop stopped and resumed: `start`, `steps(n)` again and again, leaving early.

Runs the chapter's Walk (carried_loop.py) as `iron.CarriedLoop(body, body, depth=--depth)`, but
in parts: `loop.start(...)` runs first, `loop.steps(3)` and `loop.steps(4)` each run more body
steps from the device's last carry (first is not run again), and a `for` over `loop.steps(10)`
is left with `break` at index --stop. After each part it prints what ran (`loop.transitions`,
`loop.carry`: both wait out the runs still in flight, so they describe exactly what completed)
and checks the trail read back against a plain numpy walk of that many transitions. A last
`steps(2)` resumes after the break. Needs a full-ELF device (npu2); elsewhere it says so. A
mismatch exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from carried_loop import Walk, numpy_walk

import aie_utils
import iron

START = 3
SIZE = 24   # trail entries: more than any part below can reach


def check(label: str, loop, body, walk: Walk, successor: np.ndarray, yielded: list) -> bool:
    """Print what ran so far and whether the trail and the carry match the numpy walk."""
    ran, carry = loop.transitions, dict(loop.carry)
    expected = numpy_walk(successor, START, ran)
    trail = body.read(walk.trail)
    ok = np.array_equal(trail[:ran], expected) and not trail[ran:].any()
    ok &= carry == {"node": int(expected[-1]), "steps": ran}
    print(f"{label}: yielded {yielded}, {ran} transitions, carry {carry} -> "
          f"{'matches' if ok else 'DIFFERS from'} the numpy walk (exact)")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--depth", type=int, default=2, help="runs kept in flight by the device loop")
    parser.add_argument("--stop", type=int, default=8, help="the index at which the third part breaks")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    successor = np.random.default_rng(0).permutation(16).astype(np.int32)
    walk = Walk(successor, SIZE)
    body = walk.compile()
    if not body.plan.full_elf:
        print(f"{args.device} has no full ELF: a carried graph has no device loop there (see Section 7).")
        return 0
    loop = iron.CarriedLoop(body, body, depth=args.depth)

    loop.start(node=START, steps=0)
    ok = check("start", loop, body, walk, successor, [])
    ok &= check("steps(3)", loop, body, walk, successor, list(loop.steps(3)))
    ok &= check("steps(4)", loop, body, walk, successor, list(loop.steps(4)))
    yielded = []
    for index in loop.steps(10):
        yielded.append(index)
        if index == args.stop:
            break
    ok &= check(f"steps(10), break at {args.stop}", loop, body, walk, successor, yielded)
    ok &= check("steps(2)", loop, body, walk, successor, list(loop.steps(2)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
