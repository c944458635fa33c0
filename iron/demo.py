"""`make demo` (its first half): the seed chapter's Walk and a residual MLP on the reference path,
then compiled on the current backend (the Walk as a CarriedLoop device loop, the MLP as one
call), each checked against numpy.
"""
from __future__ import annotations

import sys

import numpy as np

from iron.models.designs import MLP, Walk, numpy_mlp, numpy_walk
from iron.plan.plan import TileKind
from iron.runtime.backend import select_backend


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


def walk_device_loop(successor, start, steps, depth=2) -> bool:
    import iron

    walk = Walk(successor, steps + 1)
    body = walk.compile()
    loop = iron.CarriedLoop(body, body, depth=depth)
    done = list(loop.run(steps, node=start, steps=0))
    trail = body.read(walk.trail)
    ok = done == list(range(steps)) and np.array_equal(trail, numpy_walk(successor, start, steps + 1))
    print(f"Walk (CarriedLoop on {body.device.name}, {body.plan.image}, depth {depth}, {steps + 1} transitions): "
          f"trail {trail.tolist()} -> {'matches' if ok else 'DIFFERS FROM'} numpy; final {dict(loop.carry)}")
    return ok


def mlp_compiled() -> bool:
    mlp = MLP(256, 4)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    c = mlp.compile(x=((256,), np.float32))
    out = c(x)
    ok = np.allclose(out, numpy_mlp(mlp, x), rtol=1e-4, atol=1e-4)
    tiles = len([t for t in c.plan.tiles if t.kind is TileKind.COMPUTE])
    print(f"MLP 4 layers x 256 (compiled for {c.device.name}, {tiles} compute tiles): "
          f"{'matches' if ok else 'DIFFERS FROM'} numpy (rtol 1e-4)")
    if select_backend() == "emulator":   # the cost model's clock runs on the emulator
        print(f"  MLP on {c.device.name}: {c.estimate(x)}")
    return ok


def mlp_reference() -> bool:
    mlp = MLP(256, 4)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    out = mlp.reference(x)
    ok = np.allclose(out, numpy_mlp(mlp, x), rtol=1e-4, atol=1e-4)
    print(f"MLP 4 layers x 256 (reference): out[:4] {[round(float(v), 4) for v in out[:4]]} -> "
          f"{'matches' if ok else 'DIFFERS FROM'} numpy (rtol 1e-4)")
    return ok


def main() -> int:
    successor = np.random.default_rng(0).permutation(16).astype(np.int32)
    results = [walk_reference(successor, 3, 8), walk_device_loop(successor, 3, 8), mlp_reference(), mlp_compiled()]
    print("all match" if all(results) else "MISMATCH")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
