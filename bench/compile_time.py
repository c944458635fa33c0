"""Trace + compile time of Walk and a 4-layer 256-wide MLP: cold (a fresh graph: trace, fuse,
place, allocate, lower) and cached (the same graph, shapes and device again).

Prints milliseconds and the cold / cached ratio (target: a cold compile under 100 ms), and the
compiler's own share of a cold compile (compile_program on a freshly traced Program; target for
the MLP: under 10 ms).
"""
import time

import numpy as np

import aie_utils
from iron.compiler.compile import compile_program
from iron.models.designs import MLP, Walk


def timed(fn, repeat=5):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def cold_and_cached(make, **spec):
    cold = timed(lambda: make().compile(**spec))
    graph = make()
    graph.compile(**spec)
    cached = timed(lambda: graph.compile(**spec), repeat=50)
    return cold, cached


def compiler_alone(make, **spec):
    """compile_program on a fresh trace each time (Plans are kept per Program)."""
    device = aie_utils.get_current_device()
    best = float("inf")
    for _ in range(5):
        program = make().trace(**spec)
        t = time.perf_counter()
        compile_program(program, device)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    successor = np.random.default_rng(0).permutation(64).astype(np.int32)
    designs = {
        "Walk": (lambda: Walk(successor, 65), {}),
        "MLP 4x256": (lambda: MLP(256, 4), {"x": ((256,), np.float32)}),
    }
    for name, (make, spec) in designs.items():
        cold, cached = cold_and_cached(make, **spec)
        print(f"compile {name:10s}: cold {cold * 1e3:7.2f} ms  cached {cached * 1e3:7.3f} ms  "
              f"cold/cached {cold / cached:8.0f}x (target: cold < 100 ms)")
    for name, (make, spec) in designs.items():
        target = "  (target: < 10 ms)" if name.startswith("MLP") else ""
        print(f"compile_program {name:10s}: {compiler_alone(make, **spec) * 1e3:7.2f} ms{target}")


if __name__ == "__main__":
    main()
