"""Section 5, carried values and device loops: the seed chapter's Walk, checked both ways.

Defines `Walk` exactly as the chapter writes it. It walks a linked list (a random permutation
`successor`) from `--start`: first host-driven, each call's returned Carry fed back into the
next call, then (on a full-ELF device) as a device loop, `iron.CarriedLoop(body, body,
depth=--depth)`, where each run's Emit writes the next run's scratchpad. Both trails, read back
with `body.read(walk.trail)`, are checked exactly against a plain numpy walk; the loop makes
`--steps` + 1 transitions. It prints the device loop's time per step, which exercise 3 compares
across depths. On a device without full ELF (npu1) only the host-driven path runs. A mismatch
exits 1.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import aie_utils
import iron
from iron import Carried
from iron.kernels import Copy


class Walk(iron.Graph):
    """One step of a linked list walk: the next node gathered from
    ``successor`` and recorded in ``trail`` at the step count, the step
    count one more than the last."""

    def __init__(self, successor, steps: int):
        self.successor = iron.weight(successor)
        self.trail = iron.state((steps,), np.int32, name="trail")

    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = Copy.step(self.successor[node], dtype=np.int32)
        Copy.step(nxt, self.trail[steps], dtype=np.int32)
        return iron.carry(node=nxt, steps=steps + 1)


def numpy_walk(successor: np.ndarray, start: int, n: int) -> np.ndarray:
    """The nodes a walk of n transitions from `start` visits, in plain numpy."""
    trail, node = [], start
    for _ in range(n):
        node = int(successor[node])
        trail.append(node)
    return np.array(trail, dtype=np.int32)


def report(label: str, trail: np.ndarray, expected: np.ndarray) -> bool:
    ok = np.array_equal(trail, expected)
    print(f"{label}: trail {trail.tolist()} -> {'matches' if ok else 'DIFFERS from'} the numpy walk (exact)")
    return ok


def host_driven(walk: Walk, body, start: int, transitions: int) -> np.ndarray:
    """Call the compiled body once per transition, feeding each Carry back."""
    node, steps = start, 0
    for _ in range(transitions):
        nxt = body(node=node, steps=steps)
        node, steps = int(nxt["node"]), int(nxt["steps"])
    return body.read(walk.trail)


def device_loop(walk: Walk, body, start: int, steps: int, depth: int) -> tuple[np.ndarray, int, dict]:
    """Run the walk as a device loop from a zeroed trail: (trail, steps yielded, last carry)."""
    body.write(walk.trail, np.zeros(walk.trail.shape, np.int32))
    loop = iron.CarriedLoop(body, body, depth=depth)
    began = time.perf_counter()
    yielded = sum(1 for _ in loop.run(steps, node=start, steps=0))
    per_step = (time.perf_counter() - began) / max(steps, 1)
    print(f"device loop (depth {depth}): first + {yielded} body steps, last carry {dict(loop.carry)}, "
          f"{per_step * 1e6:.0f} us per step on this backend")
    return body.read(walk.trail), yielded, dict(loop.carry)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--depth", type=int, default=2, help="runs kept in flight by the device loop")
    parser.add_argument("--steps", type=int, default=8, help="body runs after first")
    parser.add_argument("--start", type=int, default=3, help="the node the walk starts from")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    successor = np.random.default_rng(0).permutation(16).astype(np.int32)
    expected = numpy_walk(successor, args.start, args.steps + 1)
    walk = Walk(successor, args.steps + 1)
    body = walk.compile()
    ok = report(f"host-driven ({args.device}, {args.steps + 1} calls)",
                host_driven(walk, body, args.start, args.steps + 1), expected)
    if not body.plan.full_elf:
        print(f"{args.device} has no full ELF: a carried graph has no device loop there (see Section 7).")
        return 0 if ok else 1
    trail, yielded, carry = device_loop(walk, body, args.start, args.steps, args.depth)
    ok &= yielded == args.steps and carry == {"node": int(expected[-1]), "steps": args.steps + 1}
    ok &= report(f"device loop ({args.device}, {args.steps} + 1 transitions)", trail, expected)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
