"""The emulator against reference(), and what CarriedLoop costs the host.

Prints: emulator time per call / reference() time per call for Walk and the 4-layer 256-wide MLP
(target <= 3x on the MLP); CarriedLoop steps per second for Walk at depth 1, 2 and 4; and the
host time per step spent in CarriedLoop itself (the loop's own bookkeeping, with the emulator's
start/wait time taken out). Each ratio's two sides are timed in alternation (bench/_timing.py).
"""
import os
import time

import numpy as np
from _timing import race

import iron
from iron.models.designs import MLP, Walk
from iron.runtime.emulator import Emulator

os.environ.setdefault("IRON_BACKEND", "emulator")
os.environ.setdefault("IRON_QUIET", "1")


def walk_ratio():
    successor = np.random.default_rng(0).permutation(64).astype(np.int32)
    a, b = Walk(successor, 64), Walk(successor, 64)
    c = a.compile()
    return race(lambda: c(node=5, steps=3), lambda: b.reference(node=5, steps=3), 100, 50)


def mlp_ratio():
    a, b = MLP(256, 4), MLP(256, 4)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    c = a.compile(x=((256,), np.float32))
    np.testing.assert_allclose(c(x), b.reference(x), rtol=1e-5, atol=1e-5)
    return race(lambda: c(x), lambda: b.reference(x), 10, 40)


class EmulatorClock:
    """Time spent inside the emulator's start/wait, to take out of the loop's own time."""

    def __init__(self):
        self.seconds = 0.0
        self.originals = (Emulator.start, Emulator.wait)

    def __enter__(self):
        clock = self

        def timed(original):
            def call(emulator, run):
                t = time.perf_counter()
                try:
                    return original(emulator, run)
                finally:
                    clock.seconds += time.perf_counter() - t
            return call
        Emulator.start, Emulator.wait = (timed(f) for f in self.originals)
        return self

    def __exit__(self, *exc):
        Emulator.start, Emulator.wait = self.originals


def loop_rate(depth, steps=400):
    successor = np.random.default_rng(2).permutation(64).astype(np.int32)
    walk = Walk(successor, steps + 1)
    body = walk.compile()
    loop = iron.CarriedLoop(body, body, depth=depth)
    with EmulatorClock() as clock:
        t = time.perf_counter()
        for _ in loop.run(steps, node=0, steps=0):
            pass
        total = time.perf_counter() - t
    return steps / total, (total - clock.seconds) / steps


def main():
    for name, (emu, ref), target in (("Walk", walk_ratio(), None), ("MLP 4x256", mlp_ratio(), 3.0)):
        goal = f" (target <= {target}x)" if target else ""
        print(f"emulator {name:10s}: {emu * 1e6:9.1f} us/call  reference {ref * 1e6:8.1f} us/call  "
              f"ratio {emu / ref:6.2f}x{goal}")
    for depth in (1, 2, 4):
        rate, host = loop_rate(depth)
        print(f"CarriedLoop Walk depth {depth}: {rate:8.0f} steps/s on the emulator; "
              f"host time in CarriedLoop itself {host * 1e6:6.1f} us/step")


if __name__ == "__main__":
    main()
