"""Section 5, a first version that takes a tensor: compiled with `feeds=` the body it starts.

Defines `Trail`, a walk whose first step jumps: given `jump` (a table of nodes), the call goes to
`jump[skip]`, `skip` a Scratchpad value from the host; without `jump` it walks `successor` as the
chapter's Walk does and reads no `skip`. Two versions are compiled: `body = trail.compile()` (the
None branch: no tensor, no `skip` word) and `first = trail.compile(jump=spec, feeds=body)`, whose
Emit is sized to start `body`. It prints each version's words, then produces the trail
host-driven (first, then body, feeding each Carry back) and as a device loop,
`iron.CarriedLoop(first, body, depth=--depth)`; both are checked exactly against numpy. On a
device without full ELF (npu1) only the host-driven path runs. A mismatch exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron import Carried, Scratchpad
from iron.kernels import Copy

NODES = 16


class Trail(iron.Graph):
    """One step of a walk recorded in `trail`; the version given `jump` goes to jump[skip]."""

    def __init__(self, successor, steps: int):
        self.successor = iron.weight(successor)
        self.trail = iron.state((steps,), np.int32, name="trail")

    def body(self, jump=None, *, node: Carried[np.int32], steps: Carried[np.int32], skip: Scratchpad[np.int32]):
        if jump is not None:
            nxt = Copy.step(jump[skip])
        else:
            nxt = Copy.step(self.successor[node])
        Copy.step(nxt, out=self.trail[steps])
        return iron.carry(node=nxt, steps=steps + 1)


def numpy_trail(successor: np.ndarray, jump: np.ndarray, skip: int, n: int) -> np.ndarray:
    """The jump to jump[skip], then n - 1 steps along successor, in plain numpy."""
    trail = [int(jump[skip])]
    for _ in range(n - 1):
        trail.append(int(successor[trail[-1]]))
    return np.array(trail, dtype=np.int32)


def report(label: str, trail: np.ndarray, expected: np.ndarray) -> bool:
    ok = np.array_equal(trail, expected)
    print(f"{label}: trail {trail.tolist()} -> {'matches' if ok else 'DIFFERS from'} numpy (exact)")
    return ok


def host_driven(trail: Trail, first, body, jump: np.ndarray, skip: int, steps: int) -> np.ndarray:
    """first once with the jump table and skip, then `steps` calls of body, each fed the previous
    Carry (body reads no skip, so none is passed)."""
    nxt = first(jump, node=0, steps=0, skip=skip)
    for _ in range(steps):
        nxt = body(**nxt)
    return body.read(trail.trail)


def device_loop(trail: Trail, first, body, jump: np.ndarray, skip: int, steps: int, depth: int) -> np.ndarray:
    """The same trail as a device loop, from a zeroed trail state."""
    body.write(trail.trail, np.zeros(trail.trail.shape, np.int32))
    loop = iron.CarriedLoop(first, body, depth=depth)
    yielded = list(loop.run(steps, jump, node=0, steps=0, skip=skip))
    print(f"device loop (depth {depth}): yielded {yielded}, last carry {dict(loop.carry)}")
    return body.read(trail.trail)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--depth", type=int, default=2, help="runs kept in flight by the device loop")
    parser.add_argument("--steps", type=int, default=6, help="body runs after first")
    parser.add_argument("--skip", type=int, default=3, help="which entry of jump the first step goes to")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    rng = np.random.default_rng(7)
    successor = rng.permutation(NODES).astype(np.int32)
    jump = rng.permutation(NODES).astype(np.int32)
    expected = numpy_trail(successor, jump, args.skip, args.steps + 1)

    trail = Trail(successor, args.steps + 1)
    body = trail.compile()
    first = trail.compile(jump=((NODES,), np.int32), feeds=body)
    for name, version in (("first", first), ("body", body)):
        print(f"{name}'s words: {', '.join(f'{w.name} ({w.kind})' for w in version.parameters)}")
    ok = report(f"host-driven ({args.device})", host_driven(trail, first, body, jump, args.skip, args.steps), expected)
    if body.plan.full_elf:
        ok &= report(f"device loop ({args.device})",
                     device_loop(trail, first, body, jump, args.skip, args.steps, args.depth), expected)
    else:
        print(f"{args.device} has no full ELF: only the host-driven path applies.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
