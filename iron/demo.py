"""`make demo`: the seed chapter's Walk and a residual MLP, checked against plain numpy.

Runs on any machine: the reference path always, and the compiled designs on the current backend
(the emulator where no NPU is attached), as a host-driven call and as a CarriedLoop.
"""
from __future__ import annotations

import sys

import numpy as np

from iron.designs import MLP, Walk, numpy_mlp, numpy_walk


def walk_reference(successor, start, steps) -> bool:
    walk = Walk(successor, steps + 1)
    node, count = start, 0
    for _ in range(steps + 1):
        nxt = walk.reference(node=node, steps=count)
        node, count = int(nxt["node"]), int(nxt["steps"])
    trail = walk.read(walk.trail)
    ok = np.array_equal(trail, numpy_walk(successor, start, steps + 1))
    print(f"Walk (reference, {steps + 1} transitions): trail {trail.tolist()} -> "
          f"{'matches' if ok else 'DIFFERS FROM'} numpy")
    return ok


def mlp_reference() -> bool:
    mlp = MLP(256, 4)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    out = mlp.reference(x)
    ok = np.allclose(out, numpy_mlp(mlp, x), rtol=1e-4, atol=1e-4)
    print(f"MLP 4 layers x 256 (reference): out[:4] {np.round(out[:4], 4).tolist()} -> "
          f"{'matches' if ok else 'DIFFERS FROM'} numpy (rtol 1e-4)")
    return ok


def main() -> int:
    successor = np.random.default_rng(0).permutation(16).astype(np.int32)
    results = [walk_reference(successor, 3, 8), mlp_reference()]
    print("all match" if all(results) else "MISMATCH")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
